"""The committed SGLang release table: the facts issue 34 names, read back through the
typed model, and the parser rebuilt from it."""

from __future__ import annotations

from importlib import resources

import pytest

from kctl.errors import InvalidInput
from kctl.sglang._rebuild import ParserError
from kctl.sglang.releases import UnknownRelease, known_versions, newest, release, releases

EXPECTED = [
    "0.5.9",
    "0.5.10",
    "0.5.10.post1",
    "0.5.11",
    "0.5.12",
    "0.5.12.post1",
    "0.5.13",
    "0.5.13.post1",
    "0.5.14",
    "0.5.15",
    "0.5.15.post1",
    "0.5.16",
    "0.5.17",
    "0.5.18",
    "0.5.19",
    "0.5.20",
    "0.5.21",
    "0.5.22",
    "0.5.23",
]


def test_every_release_from_0_5_9_to_the_newest_is_described() -> None:
    assert list(known_versions())[: len(EXPECTED)] == EXPECTED
    assert newest().version == known_versions()[-1]
    for rel in releases():
        assert rel.wheel.startswith(f"sglang-{rel.version}-")
        assert len(rel.sha256) == 64
        assert rel.has("--model-path") and rel.has("--config")


def test_table_is_small() -> None:
    data = resources.files("kctl.sglang").joinpath("data/releases.json").read_bytes()
    assert len(data) < 1_500_000


@pytest.mark.parametrize("spelled", ["0.5.10.post1", " 0.5.10.post1", "v0.5.10.post1"])
def test_release_accepts_post_releases(spelled: str) -> None:
    assert release(spelled).version == "0.5.10.post1"


@pytest.mark.parametrize("version", ["0.5.8", "0.6.0", "0.5.10.post9"])
def test_unknown_release_is_a_typed_error_naming_the_range(version: str) -> None:
    with pytest.raises(UnknownRelease) as err:
        release(version)
    assert isinstance(err.value, InvalidInput) and err.value.exit_code == 2
    assert f"known: 0.5.9 to {newest().version}" in str(err.value)


def test_malformed_version_is_refused() -> None:
    with pytest.raises(UnknownRelease, match="MAJOR.MINOR.PATCH"):
        release("latest")


def test_0_5_10_flags_as_kctl_renders_them_today() -> None:
    rel = release("0.5.10")
    assert rel.has("--cuda-graph-max-bs") and not rel.has("--cuda-graph-max-bs-decode")
    assert rel.cuda_graph_max_bs_argv(48) == ["--cuda-graph-max-bs", "48"]
    assert rel.disable_cuda_graph_argv() == ["--disable-cuda-graph"]
    assert {"cutlass_mla", "dual_chunk_flash_attn", "triton"} <= set(rel.attention_backends)
    assert "fp4_e2m1" in rel.kv_cache_dtypes
    assert rel.choices("--speculative-algorithm") == (
        "EAGLE",
        "EAGLE3",
        "NEXTN",
        "STANDALONE",
        "NGRAM",
    )
    # aliases share a dest; on 0.5.10 the dest of --tp-size is tensor_parallel_size
    assert rel.dest_of("--tp-size") == rel.dest_of("--tensor-parallel-size")
    assert rel.dest_of("--model") == rel.dest_of("--model-path") == "model_path"


def test_0_5_23_renamed_and_deprecated_cuda_graph_flags() -> None:
    rel = release("0.5.23")
    assert not rel.has("--cuda-graph-max-bs")
    assert rel.has("--cuda-graph-max-bs-decode") and rel.has("--cuda-graph-max-bs-prefill")
    assert rel.cuda_graph_max_bs_argv(48) == ["--cuda-graph-max-bs-decode", "48"]
    disable = rel.option("--disable-cuda-graph")
    assert disable is not None and disable.deprecated and disable.is_flag
    assert "--cuda-graph-backend-{decode,prefill}=disabled" in disable.deprecated
    assert rel.disable_cuda_graph_argv() == [
        "--cuda-graph-backend-decode",
        "disabled",
        "--cuda-graph-backend-prefill",
        "disabled",
    ]
    assert rel.choices("--speculative-algorithm") is None  # free text on 0.5.23
    assert rel.dest_of("--tp-size") == rel.dest_of("--tensor-parallel-size") == "tp_size"


def test_0_5_23_choices_drift_from_0_5_10() -> None:
    rel = release("0.5.23")
    backends = set(rel.attention_backends)
    assert not {"cutlass_mla", "dual_chunk_flash_attn"} & backends
    assert {"dsa", "cutedsl_mla", "dsv4", "triton"} <= backends
    dtypes = set(rel.kv_cache_dtypes)
    assert "fp4_e2m1" not in dtypes
    assert {"mxfp8", "nvfp4", "fp4_mx_block16"} <= dtypes


def test_spelling_moves_in_0_5_14_deprecated_alias_until_0_5_19() -> None:
    for version, spelled in [
        ("0.5.13.post1", "--cuda-graph-max-bs"),
        ("0.5.14", "--cuda-graph-max-bs-decode"),
    ]:
        assert release(version).cuda_graph_max_bs_argv(8)[0] == spelled
    old = release("0.5.19").option("--cuda-graph-max-bs")
    assert old is not None and old.deprecated and old.dest == "cuda_graph_max_bs_decode"
    assert not release("0.5.20").has("--cuda-graph-max-bs")


def test_hooks_the_kernel_router_patches() -> None:
    old, new = release("0.5.10").hooks, release("0.5.23").hooks
    assert old.graph_hooks == "capture_replay" and new.graph_hooks == "out_in_graph"
    assert new.triton_methods["init_forward_metadata_out_graph"].params == (
        "self",
        "forward_batch",
        "in_capture",
    )
    assert new.triton_methods["init_forward_metadata_in_graph"].defined_in.endswith(
        "base_attn_backend.AttentionBackend"
    )
    assert old.model_runner == ("init_attention_backend",)
    assert new.model_runner == ("init_attention_backends",)
    assert old.extend_attention_module == "sglang.srt.layers.attention.triton_ops.extend_attention"
    assert new.extend_attention_module == "sglang.kernels.ops.attention.extend_attention"
    added = {
        "page_size",
        "score_mod",
        "aux_tensors",
        "lse_extend",
        "skip_prefix",
        "extend_seq_lens_cpu",
    }
    assert added <= set(new.extend_attention_params)
    assert not added & set(old.extend_attention_params)
    assert not old.has_plugin_entry_points and new.has_plugin_entry_points
    assert old.register_attention_backend and new.register_attention_backend
    assert old.add_attention_backend_choices == "sglang.srt.server_args"
    assert new.add_attention_backend_choices == "sglang.srt.arg_groups.choices"
    assert release("0.5.10.post1").hooks == old


def test_speculative_metric_names() -> None:
    old, new = release("0.5.10"), release("0.5.23")
    assert {"spec_accept_token_num", "spec_draft_token_num", "spec_verify_ct"} <= set(
        old.spec_metrics
    )
    assert {"spec_accept_rate", "spec_num_correct_drafts", "spec_num_proposed_drafts"} <= set(
        new.spec_metrics
    )
    assert "spec_accept_token_num" not in new.spec_metrics
    assert all(r.acceptance_length_field == "spec_accept_length" for r in releases())


def test_launcher_is_sglang_serve_on_every_release() -> None:
    for rel in releases():
        assert rel.launcher.argv == ("sglang", "serve") and rel.launcher.launch_server_module
    assert release("0.5.23").launch_argv(["--port", "1"]) == ["sglang", "serve", "--port", "1"]


def test_rebuilt_parser_refuses_the_old_spelling_on_0_5_23() -> None:
    parser = release("0.5.23").parser()
    with pytest.raises(ParserError, match="ambiguous option: --cuda-graph-max-bs could match"):
        parser.parse_args(["--model-path", "/m", "--cuda-graph-max-bs", "48"])
    ns = parser.parse_args(["--model-path", "/m", "--cuda-graph-max-bs-decode", "48"])
    assert ns.cuda_graph_max_bs_decode == 48 and ns.model_path == "/m"
    assert release("0.5.10").parser().parse_args(["--model", "/m", "--cuda-graph-max-bs", "48"])


def test_rebuilt_parser_has_the_tables_option_strings_and_settings() -> None:
    for version in ("0.5.9", "0.5.23"):
        rel = release(version)
        parser = rel.parser()
        declared = {s for a in parser._actions for s in a.option_strings}
        assert declared == set(rel.flags)
        assert parser.allow_abbrev is rel.allow_abbrev is True
        by_dest = {a.dest: a for a in parser._actions}
        assert list(by_dest["attention_backend"].choices or ()) == list(rel.attention_backends)


def test_rebuilt_parser_switches_and_values() -> None:
    parser = release("0.5.23").parser({"attention_backend": ["kdtree"]})
    ns = parser.parse_args(
        [
            "--model-path",
            "/m",
            "--attention-backend",
            "kdtree",
            "--disable-cuda-graph",
            "--cuda-graph-bs-decode",
            "1",
            "2",
            "--tp",
            "2",
        ]
    )
    assert ns.attention_backend == "kdtree" and ns.disable_cuda_graph is True
    assert ns.cuda_graph_bs_decode == [1, 2] and ns.tp_size == 2
    with pytest.raises(ParserError, match="invalid choice"):
        release("0.5.23").parser().parse_args(
            ["--model-path", "/m", "--attention-backend", "kdtree"]
        )
