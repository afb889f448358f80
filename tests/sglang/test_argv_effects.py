"""The guard judges an extra argument by what it does: a flag of any name that changes a
setting kctl manages (CUDA graphs, every attention backend, speculative settings, the
model's weights, parallelism, the API key) is refused with the setting and the field to
use; one that changes nothing kctl manages passes."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kctl.launch import argv_findings, argv_problems
from kctl.profile.loader import load_profile
from kctl.profile.model import Profile
from kctl.sglang.argv import check_argv
from kctl.sglang.argv.options import resolve
from kctl.sglang.releases import release, releases

REPO = Path(__file__).resolve().parents[2]
GRAPHS = load_profile(REPO / "profiles" / "triton-graphs.yaml")  # graphs on, max bs 48

#: (extra_args, the setting the message names, a fragment of the fix): every flag that
#: reached a managed setting past the name check, on SGLang 0.5.10 and 0.5.23
FLAGS: list[tuple[list[str], str, str]] = [
    (["--cuda-graph-config", '{"decode": {"max_bs": 8}}'], "the decode CUDA-graph batch sizes", "set server.cuda_graph_max_bs"),
    (['--cuda-graph-conf={"decode":{"backend":"disabled"}}'], "decode CUDA graphs", "set server.cuda_graphs"),
    (["--disable-decode-cuda-graph"], "decode CUDA graphs", "set server.cuda_graphs"),
    (["--disable-dec"], "decode CUDA graphs", "set server.cuda_graphs"),
    (["--disable-prefill-cuda-graph"], "prefill CUDA graphs", "set server.cuda_graphs"),
    (["--cuda-graph-bs-decode", "1", "2", "4"], "the decode CUDA-graph batch sizes", "set server.cuda_graph_max_bs"),
    (["--cuda-graph-bs", "1", "2", "4"], "the decode CUDA-graph batch sizes", "set server.cuda_graph_max_bs"),
    (["--decode-attention-backend", "flashinfer"], "the decode attention backend", "set server.attention_backend"),
    (["--prefill-attention-backend", "flashinfer"], "the prefill attention backend", "set server.attention_backend"),
    (["--speculative-draft-attention-backend", "flashinfer"], "the draft model's attention backend", "set server.attention_backend"),
    (["--speculative-attention-mode", "decode"], "the speculative attention mode", "server.speculative"),
    (["--speculative-draft-kv-cache-dtype", "fp8_e4m3"], "the draft model's KV cache type", "set server.kv_cache_dtype"),
    (["--speculative-adaptive-config", "adaptive.json"], "adaptive speculative decoding", "server.speculative"),
    (["--tokenizer-path", "/other/tokenizer"], "the tokenizer", "server.model_path"),
    (["--revision", "main"], "the model revision", "server.model_path"),
    (["--load-format", "dummy"], "how the weights load", "server.model_path"),
    (["--json-model-override-args", '{"num_hidden_layers": 1}'], "the model config override", "server.model_path"),
    (["--dp-size", "2"], "data parallelism", "one replica of server.tp GPUs"),
    (["--attn-dp-size", "2"], "attention data parallelism", "one replica of server.tp GPUs"),
    (["--enable-dp-attention"], "attention data parallelism", "one replica of server.tp GPUs"),
    (["--pp-size", "2"], "pipeline parallelism", "one replica of server.tp GPUs"),
]  # fmt: skip

#: where the issue that found them measured each flag (the tables must agree)
ON_0_5_10 = {"--cuda-graph-bs", "--decode-attention-backend", "--prefill-attention-backend"}
NOT_ON_0_5_10 = {"--cuda-graph-config", "--disable-decode-cuda-graph", "--attn-dp-size"}
NOT_ON_0_5_23 = {"--cuda-graph-bs"}


def _on(profile: Profile, version: str, extra: list[str], **server: object) -> Profile:
    return dataclasses.replace(
        profile,
        image=dataclasses.replace(profile.image, sglang=version),
        server=dataclasses.replace(profile.server, extra_args=tuple(extra), **server),
    )


def _flag(extra: list[str]) -> str:
    return extra[0].partition("=")[0]


def _exists(version: str, extra: list[str]) -> bool:
    return resolve(release(version), _flag(extra)).option is not None


def test_the_tables_have_each_flag_where_it_was_measured() -> None:
    have = {v: {_flag(e) for e, _, _ in FLAGS if _exists(v, e)} for v in ("0.5.10", "0.5.23")}
    assert have["0.5.10"] >= ON_0_5_10 and not NOT_ON_0_5_10 & have["0.5.10"]
    everything = {_flag(e) for e, _, _ in FLAGS}
    assert have["0.5.23"] == everything - NOT_ON_0_5_23


CASES = [
    pytest.param(rel.version, extra, setting, fix, id=f"{rel.version}:{_flag(extra)}")
    for extra, setting, fix in FLAGS
    for rel in releases()
    if _exists(rel.version, extra)
]


@pytest.mark.parametrize(("version", "extra", "setting", "fix"), CASES)
def test_every_flag_is_refused_with_the_setting_it_changes_on_every_release_it_exists(
    version: str, extra: list[str], setting: str, fix: str
) -> None:
    errors, _ = argv_findings(_on(GRAPHS, version, extra))
    assert len(errors) == 1, errors
    path, message, _ = errors[0]
    assert path == ("server", "extra_args", 0)
    assert message.startswith(f"SGLang {version}: {_flag(extra)}")
    assert f" changes {setting}: " in message and "; fix: " in message
    assert fix in message.split("; fix: ")[1]


@pytest.mark.parametrize("version", ["0.5.10", "0.5.23"])
@pytest.mark.parametrize(
    "extra",
    [
        ["--log-level", "info"],
        ["--enable-metrics"],
        # the value the profile already gives: it changes nothing
        ["--speculative-draft-attention-backend", "triton"],
        ["--tokenizer-path", "/models/Kimi-K2.6"],
        ["--load-format", "auto"],
        ["--dp-size", "1"],
        ["--json-model-override-args", "{}"],
    ],
)
def test_a_flag_that_changes_nothing_kctl_manages_passes(version: str, extra: list[str]) -> None:
    assert argv_problems(_on(GRAPHS, version, extra)) == []


def test_the_cuda_graph_config_is_judged_by_its_values() -> None:
    same = ['--cuda-graph-config={"decode": {"max_bs": 48}}']
    assert argv_problems(_on(GRAPHS, "0.5.23", same)) == []
    # argparse reads an abbreviation with "=" as an option even with a space in the value
    spaced = ['--cuda-graph-conf={"decode": {"max_bs": 8}}']
    (found,) = argv_problems(_on(GRAPHS, "0.5.23", spaced))
    assert "(an abbreviation of --cuda-graph-config) changes the decode CUDA-graph" in found[1]
    # an eager profile renders --cuda-graph-backend-{decode,prefill} disabled
    off = ['--cuda-graph-config={"decode": {"backend": "disabled"}}', "--disable-dec"]
    assert argv_problems(_on(GRAPHS, "0.5.23", off, cuda_graphs=False)) == []
    on = ['--cuda-graph-config={"prefill": {"backend": "breakable"}}']
    (found,) = argv_problems(_on(GRAPHS, "0.5.23", on, cuda_graphs=False))
    assert (
        "changes prefill CUDA graphs: 'breakable' instead of the profile's 'disabled'" in (found[1])
    )
    broken = ["--cuda-graph-config", "{not json"]
    found = argv_problems(_on(GRAPHS, "0.5.23", broken))
    assert [msg.split(": ")[1].split(" changes ")[1][:18] for _, msg, _ in found] == [
        "decode CUDA graphs",
        "prefill CUDA graph",
    ]
    assert all("unparsable --cuda-graph-config" in msg for _, msg, _ in found)


def test_each_changing_flag_is_named_at_its_own_item() -> None:
    extra = ["--log-level", "info", "--disable-dec", "--revision", "v2"]
    errors = argv_problems(_on(GRAPHS, "0.5.23", extra))
    assert [(path, msg.split(" changes ")[0]) for path, msg, _ in errors] == [
        (("server", "extra_args", 2), "SGLang 0.5.23: --disable-dec (an abbreviation of "
         "--disable-decode-cuda-graph)"),
        (("server", "extra_args", 3), "SGLang 0.5.23: --revision"),
    ]  # fmt: skip


@pytest.mark.parametrize("version", ["0.5.10", "0.5.23"])
def test_the_api_key_is_refused_without_echoing_it(version: str) -> None:
    errors = argv_problems(_on(GRAPHS, version, ["--api-key", "sekrit-value"]))
    assert len(errors) == 1 and errors[0][0] == ("server", "extra_args", 0)
    message = errors[0][1]
    assert message.startswith(f"SGLang {version}: --api-key") and "secret reference" in message
    assert "sekrit-value" not in repr(errors)


def test_a_name_refusal_is_not_repeated_as_an_effect() -> None:
    errors = argv_problems(_on(GRAPHS, "0.5.23", ["--tp-size", "4"]))
    assert len(errors) == 1 and "which kctl manages" in errors[0][1]


def test_check_argv_judges_effects_only_when_asked() -> None:
    rel = release("0.5.23")
    argv = ["--model-path", "/m", "--revision", "v2"]
    assert check_argv(rel, argv, (), own=2) == []
    (p,) = check_argv(rel, argv, (), own=2, settings={"revision": "pin it elsewhere"})
    assert (p.kind, p.flag, p.index, p.fix) == ("effect", "--revision", 2, "pin it elsewhere")


KERNEL_FP8 = (
    "extends: {repo}/profiles/kdtree-graphs-fp8.yaml\nserver:\n  env: {{SGLANG_PLUGINS: {value}}}\n"
)


@pytest.mark.parametrize(
    ("value", "refused"), [("other", True), ("'other, kdtree'", False), ("' , '", True)]
)
def test_a_plugin_filter_that_leaves_out_the_kernel_is_refused(
    tmp_path: Path, value: str, refused: bool
) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(KERNEL_FP8.format(repo=REPO, value=value))
    if not refused:
        assert load_profile(path).server.env_dict()["SGLANG_PLUGINS"] == "other, kdtree"
        return
    from kctl.errors import ProfileError

    with pytest.raises(ProfileError) as exc:
        load_profile(path)
    (line,) = exc.value.problems
    assert line.startswith(f"{path}: server.env.SGLANG_PLUGINS: SGLANG_PLUGINS lists the plugins")
    assert "--attention-backend kdtree would fail at start" in line
    assert "fix: remove server.env.SGLANG_PLUGINS, or list kdtree in it" in line


def _kctl(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    code = "import sys; from kctl.cli import main; sys.exit(main())"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_kctl_validate_refuses_every_flag_with_the_setting_and_passes_a_harmless_one(
    tmp_path: Path,
) -> None:
    base = "extends: {repo}/profiles/{profile}\nimage: {{sglang: '{version}'}}\nserver:\n  extra_args: {args}\n"
    expected: dict[str, tuple[str, str]] = {}
    for version in ("0.5.10", "0.5.23"):
        for n, (extra, setting, _) in enumerate(FLAGS):
            if _exists(version, extra):
                name = f"f{version.replace('.', '_')}_{n}"
                body = base.format(
                    repo=REPO, profile="triton-graphs.yaml", version=version, args=json.dumps(extra)
                )
                (tmp_path / f"{name}.yaml").write_text(body)
                expected[name] = (_flag(extra), setting)
    plugins = "extends: {repo}/profiles/kdtree-graphs-fp8.yaml\nserver:\n  env: {{SGLANG_PLUGINS: other}}\n"
    (tmp_path / "plugins.yaml").write_text(plugins.format(repo=REPO))
    harmless = base.format(
        repo=REPO, profile="triton-graphs.yaml", version="0.5.23", args='["--log-level", "info"]'
    )
    (tmp_path / "ok.yaml").write_text(harmless)
    run = _kctl(
        "validate", *(f"{n}.yaml" for n in expected), "plugins.yaml", "ok.yaml", cwd=tmp_path
    )
    assert run.returncode == 2, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    for name, (flag, setting) in expected.items():
        mine = [line for line in lines if line.startswith(f"{name}.yaml: server.extra_args[0]: ")]
        assert len(mine) == 1, (name, run.stdout)
        assert f" {flag}" in mine[0] and f" changes {setting}: " in mine[0], mine[0]
    assert any(line.startswith("plugins.yaml: server.env.SGLANG_PLUGINS: ") for line in lines)
    assert "ok ok.yaml" in run.stdout and "Traceback" not in run.stdout + run.stderr
