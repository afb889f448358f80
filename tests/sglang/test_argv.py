"""check_argv: a launch argv read as the release's own parser reads it, every refusal named
with its flag and its fix."""

from __future__ import annotations

import pytest

from kctl.sglang._rebuild import ParserError
from kctl.sglang.argv import Problem, check_argv, managed_dests, resolve
from kctl.sglang.releases import Release, release

#: what kctl renders from typed profile fields (option strings; dests differ by release)
MANAGED = (
    "--model-path",
    "--tp-size",
    "--mem-fraction-static",
    "--speculative-draft-model-path",
    "--attention-backend",
    "--port",
)
OWN = ["--model-path", "/m", "--tp-size", "8", "--port", "30000"]
RELEASES = ("0.5.10", "0.5.23")


def check(version: str, extra: list[str], **kw: object) -> list[Problem]:
    rel = release(version)
    return check_argv(rel, [*OWN, *extra], MANAGED, own=len(OWN), **kw)  # type: ignore[arg-type]


def only(problems: list[Problem]) -> Problem:
    assert len(problems) == 1, problems
    return problems[0]


@pytest.mark.parametrize("version", RELEASES)
@pytest.mark.parametrize(
    ("extra", "dest", "how"),
    [
        (["--model", "/x"], "model_path", "an alias of --model-path"),
        (["--tensor-parallel-size", "2"], None, "an alias of --tp-size"),
        (["--mem-frac", "0.5"], "mem_fraction_static", "an abbreviation of --mem-fraction-static"),
        (
            ["--speculative-draft-model", "/y"],
            "speculative_draft_model_path",
            "an alias of --speculative-draft-model-path",
        ),
        (["--model-path=/other"], "model_path", None),
    ],
)
def test_extra_args_that_reach_a_managed_dest_are_refused(
    version: str, extra: list[str], dest: str | None, how: str | None
) -> None:
    p = only(check(version, extra))
    flag = extra[0].partition("=")[0]
    assert (p.kind, p.flag, p.severity) == ("managed", flag, "error")
    assert f"({how})" in p.message if how else "(" not in p.message.split(" sets ")[0]
    assert (dest or release(version).dest_of("--tp-size")) in p.message
    assert p.fix.startswith(f"remove {flag} from extra_args")


@pytest.mark.parametrize("version", RELEASES)
@pytest.mark.parametrize(
    "extra", [["--config", "c.yaml"], ["--config=c.yaml"], ["--conf", "c.yaml"]]
)
def test_config_file_is_always_refused(version: str, extra: list[str]) -> None:
    p = only(check(version, extra))
    assert p.kind == "config" and p.flag == extra[0].partition("=")[0]
    assert "can set anything" in p.message and "extra_args" in p.fix
    # even where kctl's own part would carry it
    assert check_argv(release(version), extra, ())[0].kind == "config"


@pytest.mark.parametrize("version", RELEASES)
def test_unknown_flag_is_named_with_a_suggestion(version: str) -> None:
    p = only(check(version, ["--frobnicate", "1"]))
    assert (p.kind, p.flag) == ("unknown", "--frobnicate") and "remove it" in p.fix
    typo = only(check(version, ["--log-levle", "info"]))
    assert typo.kind == "unknown" and typo.fix == "did you mean --log-level?"


@pytest.mark.parametrize("version", RELEASES)
@pytest.mark.parametrize(
    "extra", [["--log-level", "info"], ["--log-level=info"], ["--enable-metrics"], []]
)
def test_valid_extra_args_pass(version: str, extra: list[str]) -> None:
    assert check(version, extra) == []


def test_removed_flag_names_when_it_left_and_its_successor() -> None:
    p = only(check("0.5.23", ["--cuda-graph-max-bs", "48"]))
    assert p.kind == "removed" and p.flag == "--cuda-graph-max-bs"
    assert (
        "removed after 0.5.19" in p.message and "could be --cuda-graph-max-bs-decode" in p.message
    )
    assert p.fix == "use --cuda-graph-max-bs-decode"
    new = only(check("0.5.10", ["--cuda-graph-max-bs-decode", "48"]))
    assert new.kind == "removed" and "arrives in 0.5.14" in new.message
    assert "--cuda-graph-max-bs-decode" not in new.fix  # 0.5.10 cannot take it


def test_removed_flag_with_a_differently_named_successor() -> None:
    p = only(check("0.5.23", ["--cuda-graph-bs", "1", "2", "4"]))
    assert p.kind == "removed" and p.fix == "use --cuda-graph-bs-decode"


def test_values_outside_the_release_choices() -> None:
    p = only(check("0.5.23", ["--kv-cache-dtype", "fp4_e2m1"]))
    assert (p.kind, p.flag) == ("choice", "--kv-cache-dtype") and "nvfp4" in p.fix
    assert check("0.5.10", ["--kv-cache-dtype", "fp4_e2m1"]) == []
    bad = only(check("0.5.23", ["--schedule-policy=nope"]))
    assert bad.kind == "choice" and "'nope'" in bad.message


def test_plugin_choices_are_accepted_when_given() -> None:
    argv = [*OWN, "--decode-attention-backend", "kdtree"]
    rel = release("0.5.23")
    assert only(check_argv(rel, argv, MANAGED, own=len(OWN))).kind == "choice"
    extra = {"decode_attention_backend": ["kdtree"]}
    assert check_argv(rel, argv, MANAGED, own=len(OWN), extra_choices=extra) == []


def test_type_errors_missing_values_switch_values_and_strays() -> None:
    assert only(check("0.5.23", ["--max-running-requests", "many"])).kind == "value"
    assert only(check("0.5.23", ["--max-running-requests"])).kind == "missing_value"
    assert only(check("0.5.23", ["--enable-metrics=1"])).kind == "unexpected_value"
    assert only(check("0.5.23", ["stray"])).kind == "positional"
    assert check("0.5.23", ["--max-running-requests", "-1"]) == []  # a negative number is a value


def test_deprecated_flag_is_a_warning_with_the_replacement() -> None:
    p = only(check("0.5.23", ["--disable-cuda-graph"]))
    assert (p.kind, p.severity) == ("deprecated", "warning")
    assert p.fix == "use --cuda-graph-backend-{decode,prefill}=disabled"
    assert check("0.5.10", ["--disable-cuda-graph"]) == []


def test_managed_fix_text_comes_from_the_caller() -> None:
    rel = release("0.5.23")
    p = only(check_argv(rel, ["--model", "/x"], {"model_path": "set server.model_path"}))
    assert p.fix == "set server.model_path"


def test_kctls_own_part_may_set_managed_dests_but_not_twice() -> None:
    rel = release("0.5.23")
    assert check_argv(rel, OWN, MANAGED, own=len(OWN)) == []
    assert only(check_argv(rel, OWN + ["--port", "1"], MANAGED, own=len(OWN))).kind == "managed"


def test_managed_option_strings_map_to_each_releases_dest() -> None:
    assert "tensor_parallel_size" in managed_dests(release("0.5.10"), ["--tp-size"])
    assert managed_dests(release("0.5.23"), ["--tp-size", "--not-there", "host"]) == {
        "tp_size",
        "host",
    }


ARGVS = [
    ["--model-path", "/m"],
    ["--model", "/m", "--mem-frac", "0.5"],
    ["--model-path", "/m", "--cuda-graph-max-bs", "48"],
    ["--model-path", "/m", "--cuda-graph-max-bs-decode", "48"],
    ["--model-path", "/m", "--disable-cuda-graph", "--tp", "2"],
    ["--model-path", "/m", "--attention-backend", "cutlass_mla"],
    ["--model-path", "/m", "--attention-backend=dsa"],
    ["--model-path", "/m", "--kv-cache-dtype", "nvfp4"],
    ["--model-path", "/m", "--frobnicate"],
    ["--model-path", "/m", "--enable-metrics=1"],
    ["--model-path", "/m", "--max-running-requests"],
    ["--model-path", "/m", "stray"],
    ["--model-path", "/m", "--cuda-graph-bs", "1", "2"],
    ["--model-path", "/m", "--speculative-algorithm", "EAGLE3"],
]


def _parser_accepts(rel: Release, argv: list[str]) -> bool:
    try:
        rel.parser().parse_args(argv)
    except ParserError:
        return False
    return True


@pytest.mark.parametrize("version", ["0.5.9", "0.5.10", "0.5.14", "0.5.23"])
def test_check_argv_refuses_exactly_what_the_rebuilt_parser_refuses(version: str) -> None:
    rel = release(version)
    for argv in ARGVS:
        errors = [p for p in check_argv(rel, argv) if p.severity == "error"]
        assert (not errors) == _parser_accepts(rel, argv), (argv, errors)


def test_resolution_follows_argparse_abbreviation_rules() -> None:
    rel = release("0.5.23")
    assert resolve(rel, "--cuda-graph-max-bs").how == "ambiguous"
    got = resolve(rel, "--mem-frac")
    assert got.how == "abbreviation" and got.option is not None
    assert got.option.dest == "mem_fraction_static"
    assert resolve(rel, "--model").how == "exact"


def test_problems_carry_the_index_of_their_token() -> None:
    got = check_argv(release("0.5.23"), ["--log-level", "info", "--model", "/x", "--frob"], MANAGED)
    assert [(p.kind, p.index) for p in got] == [("managed", 2), ("unknown", 4)]


@pytest.mark.parametrize("token", ["--help", "-h", "--he"])
def test_help_is_refused_and_never_exits(token: str) -> None:
    p = only(check("0.5.23", [token]))
    assert p.kind == "exits" and p.fix == "remove it"
    assert release("0.5.23").parser().parse_args(["--model-path", "/m", token])
