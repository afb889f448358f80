"""A profile names its SGLang release (``image.sglang`` or ``image.base``'s tag); kctl
spells the launch as that release does, and the release's own parser (rebuilt from the
release table) checks the whole argv when the profile is loaded."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from kctl.errors import ProfileError
from kctl.launch import (
    argv_problems,
    check_launch,
    launch_spec,
    release_info,
    release_line,
    server_args,
)
from kctl.profile import load_profile
from kctl.profile.model import ImageSpec, Profile, ServerSpec, SpeculativeSpec
from kctl.profile.release import image_release, tag_version
from kctl.sglang.kernel_support import kernel_choices, reads_fp8_mla
from kctl.sglang.releases import UnknownRelease, known_versions, newest, release

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted(p for p in (REPO / "profiles").glob("*.yaml"))
Write = Callable[[str, str], str]


def kctl(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    code = "import sys; from kctl.cli import main; sys.exit(main())"
    return subprocess.run(
        [sys.executable, "-c", code, *args], cwd=cwd, env=env, capture_output=True, text=True
    )


@pytest.mark.parametrize(
    ("ref", "version"),
    [
        ("lmsysorg/sglang:v0.5.10-cu130", "0.5.10"),
        ("lmsysorg/sglang:v0.5.10.post1-cu129-amd64", "0.5.10.post1"),
        ("lmsysorg/sglang:0.5.23", "0.5.23"),
        ("registry:5000/sglang:v0.5.14-cu130@sha256:" + "0" * 64, "0.5.14"),
        ("registry:5000/sglang", None),
        ("lmsysorg/sglang:latest", None),
        ("lmsysorg/sglang:v0.5.10rc1", None),
    ],
)
def test_the_release_in_an_image_tag(ref: str, version: str | None) -> None:
    assert tag_version(ref) == version


def test_image_sglang_wins_over_the_tag() -> None:
    image = ImageSpec(base="lmsysorg/sglang:v0.5.10-cu130", sglang="0.5.23")
    assert image_release(image).version == "0.5.23"
    assert image_release(ImageSpec()).version == "0.5.10"
    with pytest.raises(UnknownRelease, match="names no SGLang release"):
        image_release(ImageSpec(base="x/y:latest"))


@pytest.mark.parametrize(
    ("image", "message"),
    [
        ("  base: x/sglang:latest\n", "image.base: names no SGLang release in its tag; set image.sglang"),
        ("  base: x/sglang:v0.4.6\n", "image.base: holds SGLang 0.4.6, which kctl does not know"),
        ("  sglang: '0.5.99'\n", "image.sglang: is not an SGLang release kctl knows"),
        ("  sglang: latest\n", "image.sglang: must be an SGLang release version"),
    ],
)  # fmt: skip
def test_a_profile_without_a_known_release_is_refused(
    write: Write, image: str, message: str
) -> None:
    path = write("x.yaml", f"extends: ok.yaml\nimage:\n{image}")
    with pytest.raises(ProfileError) as exc:
        load_profile(path)
    assert message in str(exc.value)
    if "kctl knows" in str(exc.value):
        known = known_versions()
        assert f"kctl knows {known[0]} to {known[-1]}" in str(exc.value)


def test_image_sglang_unset_keeps_the_hash_and_set_changes_it(write: Write) -> None:
    plain = load_profile(write("a.yaml", "extends: ok.yaml\n"))
    same = load_profile(write("b.yaml", "extends: ok.yaml\nimage: {sglang: null}\n"))
    pinned = load_profile(write("c.yaml", "extends: ok.yaml\nimage: {sglang: '0.5.10'}\n"))
    assert plain.content_hash == same.content_hash != pinned.content_hash


# -- spelling per release ----------------------------------------------------------------


def test_graph_flags_in_each_release_spelling() -> None:
    graphs = ServerSpec(model_path="/m", cuda_graph_max_bs=48)
    eager = ServerSpec(model_path="/m", cuda_graphs=False)
    old, new = release("0.5.10"), release("0.5.23")
    assert server_args(graphs, old)[10:12] == ("--cuda-graph-max-bs", "48")
    assert server_args(graphs, new)[10:12] == ("--cuda-graph-max-bs-decode", "48")
    assert server_args(eager, old)[10] == "--disable-cuda-graph"
    assert server_args(eager, new)[10:14] == (
        "--cuda-graph-backend-decode", "disabled", "--cuda-graph-backend-prefill", "disabled",
    )  # fmt: skip
    assert server_args(graphs, release("0.5.14"))[10] == "--cuda-graph-max-bs-decode"
    assert server_args(graphs, release("0.5.13.post1"))[10] == "--cuda-graph-max-bs"


def test_the_release_launcher_and_the_shim_entry() -> None:
    profile = load_profile(REPO / "profiles" / "triton-graphs.yaml")
    assert launch_spec(profile, "d", simulate=False).argv[:2] == ("sglang", "serve")
    shim = dataclasses.replace(
        profile, image=dataclasses.replace(profile.image, install_simulator=True)
    )
    argv = launch_spec(shim, "d", simulate=False).argv
    assert argv[:3] == ("python3", "-m", "sglang.launch_server")
    assert release_line(profile) == (
        "SGLang 0.5.10 (from image.base's tag; launcher: sglang serve); attention backend triton"
    )
    kernel = load_profile(REPO / "profiles" / "kdtree-graphs.yaml")
    assert release_info(kernel) == {
        "version": "0.5.10",
        "source": "image.base's tag",
        "launcher": "sglang serve",
        "attention_backend": "triton",
        "kernel": "startup hook",
    }


def _for(profile: Profile, version: str) -> Profile:
    """``profile`` as it is written for ``version``: the kdtree kernel through its plugin
    backend where the release has plugin entry points (0.5.11 on), else its startup hook;
    an fp8 KV cache only where the release's Triton MLA path reads one (0.5.13 on)."""
    server, rel = profile.server, release(version)
    if server.verify_kernel == "kdtree":
        env = tuple((k, v) for k, v in server.env if k != "KDTREE_VERIFY")
        if kernel_choices(rel):
            server = dataclasses.replace(server, attention_backend="kdtree", env=env)
        else:
            env = (*env, ("KDTREE_VERIFY", "1"))
            server = dataclasses.replace(server, attention_backend="triton", env=env)
        if server.kv_cache_dtype.startswith("fp8") and not reads_fp8_mla(rel):
            server = dataclasses.replace(server, kv_cache_dtype="bf16")
    return dataclasses.replace(profile, server=server)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_profiles_for_the_newest_release_parse_with_its_parser(path: Path) -> None:
    rel = newest()
    profile = _for(load_profile(path), rel.version)
    args = list(server_args(profile.server, rel))
    assert argv_problems(profile, rel) == []
    parsed = rel.parser(kernel_choices(rel)).parse_args(args)
    assert parsed.model_path == profile.server.model_path
    assert parsed.attention_backend == profile.server.attention_backend
    if profile.server.attention_backend == "kdtree":
        assert parsed.speculative_draft_attention_backend == "triton"
    # the newest release has no --cuda-graph-max-bs / --disable-cuda-graph any more
    assert "--cuda-graph-max-bs" not in args and "--disable-cuda-graph" not in args


@pytest.mark.parametrize("version", ["0.5.9", "0.5.10.post1", "0.5.11", "0.5.14", "0.5.20"])
def test_shipped_profiles_pass_on_every_kind_of_release(version: str) -> None:
    for path in SHIPPED:
        assert argv_problems(_for(load_profile(path), version), release(version)) == [], path


def test_the_startup_hook_is_refused_where_the_plugin_path_exists() -> None:
    profile = load_profile(REPO / "profiles" / "kdtree-graphs.yaml")
    (found,) = argv_problems(profile, release("0.5.11"))
    assert found[0] == ("server", "attention_backend")
    assert (
        "fix: set server.attention_backend: kdtree and remove server.env.KDTREE_VERIFY"
        in (found[1])
    )
    assert argv_problems(profile, release("0.5.10.post1")) == []


# -- what the release's parser refuses -----------------------------------------------------

BASE = "extends: {repo}/profiles/triton-graphs.yaml\n"
#: the extra args issue 34 names, and what the line must say (flag, then fix)
REFUSED = {
    "model": (["--model", "/x"], "--model (an alias of --model-path)", "fix: set server.model_path instead"),
    "tp": (["--tensor-parallel-size", "2"], "--tensor-parallel-size (an alias of --tp-size)", "fix: set server.tp instead"),
    "abbrev": (["--mem-frac", "0.5"], "--mem-frac (an abbreviation of --mem-fraction-static)", "fix: set server.mem_fraction_static instead"),
    "draft": (["--speculative-draft-model", "/y"], "--speculative-draft-model (an alias of --speculative-draft-model-path)", "fix: set server.speculative.draft_model_path instead"),
    "config": (["--config", "c.yaml"], "--config loads a YAML file", "fix: write the arguments themselves in extra_args"),
    "unknown": (["--no-such-flag"], "--no-such-flag is not an option of SGLang 0.5.10", "fix: remove it"),
    "choice": (["--load-format", "nonsense"], "'nonsense' is not a choice of --load-format", "fix: use one of"),
}  # fmt: skip


def _profile(tmp_path: Path, name: str, body: str) -> str:
    (tmp_path / f"{name}.yaml").write_text(BASE.format(repo=REPO) + body)
    return f"{name}.yaml"


def test_validate_refuses_extra_args_the_release_would_misread(tmp_path: Path) -> None:
    files = [
        _profile(tmp_path, name, f"server:\n  extra_args: {args!r}\n")
        for name, (args, _, _) in REFUSED.items()
    ]
    run = kctl("validate", *files, cwd=tmp_path)
    assert run.returncode == 2, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    for name, (_, flag, fix) in REFUSED.items():
        mine = [line for line in lines if line.startswith(f"{name}.yaml: server.extra_args[0]: ")]
        assert len(mine) == 1, (name, run.stdout)
        assert flag in mine[0] and fix in mine[0], mine[0]
    assert "Traceback" not in run.stdout + run.stderr


def test_validate_passes_a_valid_extra_arg(tmp_path: Path) -> None:
    ok = _profile(tmp_path, "ok", "server:\n  extra_args: ['--log-level', 'info']\n")
    run = kctl("validate", ok, cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.startswith("ok ok.yaml")


def test_a_flag_the_release_removed_is_refused_at_plan_time(tmp_path: Path) -> None:
    body = "image: {sglang: '0.5.23'}\nserver:\n  extra_args: ['--cuda-graph-bs', '8']\n"
    path = _profile(tmp_path, "gone", body)
    run = kctl("--state-dir", str(tmp_path / "state"), "plan", path, "--simulate", cwd=tmp_path)
    assert run.returncode == 2, run.stdout + run.stderr
    out = run.stdout + run.stderr
    assert "gone.yaml: server.extra_args[0]: --cuda-graph-bs" in out
    assert "removed after 0.5.19" in out and "fix: use --cuda-graph-bs-decode" in out


def test_own_fields_are_checked_against_the_release(write: Write) -> None:
    path = write(
        "x.yaml",
        "extends: ok.yaml\nimage: {sglang: '0.5.23'}\n"
        "server: {attention_backend: cutlass_mla, kv_cache_dtype: fp4_e2m1}\n",
    )
    with pytest.raises(ProfileError) as exc:
        load_profile(path)
    lines = exc.value.problems
    assert lines[0].startswith(
        "x.yaml: server.attention_backend: --attention-backend: 'cutlass_mla' is not a choice "
        "of --attention-backend in SGLang 0.5.23"
    )
    assert lines[0].endswith("(got 'cutlass_mla')")
    assert lines[1].startswith("x.yaml: server.kv_cache_dtype: --kv-cache-dtype: 'fp4_e2m1'")


KDTREE = (
    "extends: ok.yaml\nimage: {{sglang: '{version}'}}\nserver:\n  attention_backend: kdtree\n"
    "  verify_kernel: kdtree\n  speculative: {{draft_model_path: /d}}\n"
)


def test_the_kdtree_backend_needs_the_plugin_path(write: Write) -> None:
    profile = load_profile(write("new.yaml", KDTREE.format(version="0.5.11")))
    args = server_args(profile.server, release("0.5.11"))
    assert args[8:12] == (
        "--attention-backend", "kdtree", "--speculative-draft-attention-backend", "triton",
    )  # fmt: skip
    assert release_info(profile)["kernel"] == "plugin backend"
    with pytest.raises(ProfileError) as exc:
        load_profile(write("old.yaml", KDTREE.format(version="0.5.10")))
    assert "old.yaml: server.attention_backend: --attention-backend: 'kdtree' is not a choice" in (
        str(exc.value)
    )


def test_check_launch_rechecks_a_profile_for_its_release() -> None:
    profile = load_profile(REPO / "profiles" / "triton-graphs.yaml")
    check_launch(profile)  # a valid profile passes
    server = dataclasses.replace(profile.server, extra_args=("--cuda-graph-bs", "8"))
    image = dataclasses.replace(profile.image, sglang="0.5.23")
    bad = dataclasses.replace(profile, server=server, image=image)
    with pytest.raises(ProfileError, match=r"server\.extra_args\[0\]: --cuda-graph-bs"):
        check_launch(bad)


def test_speculative_flags_checked_on_every_release() -> None:
    server = ServerSpec(model_path="/m", speculative=SpeculativeSpec(algorithm="DFLASH"))
    profile = load_profile(REPO / "profiles" / "triton-graphs.yaml")
    on = dataclasses.replace(profile, server=server)
    assert argv_problems(on, release("0.5.11")) == []
    found = argv_problems(on, release("0.5.10"))
    assert found and found[0][0] == ("server", "speculative", "algorithm")


@pytest.mark.parametrize(
    ("version", "line"),
    [
        ("0.5.10", "SGLang 0.5.10 (from image.sglang; launcher: sglang serve); "
         "attention backend triton (kdtree kernel: startup hook)"),
        ("0.5.23", "SGLang 0.5.23 (from image.sglang; launcher: sglang serve); "
         "attention backend kdtree (kdtree kernel: plugin backend)"),
    ],
)  # fmt: skip
def test_plan_names_the_release_and_the_kernels_path(
    tmp_path: Path, version: str, line: str
) -> None:
    backend = "kdtree" if version == "0.5.23" else "triton"
    body = (
        f"image: {{sglang: '{version}'}}\nserver:\n  attention_backend: {backend}\n"
        "  verify_kernel: kdtree\n  speculative: {draft_model_path: /d}\n"
    )
    if backend == "triton":
        body += "  env: {KDTREE_VERIFY: '1'}\n"
    path = _profile(tmp_path, "k", body)
    state = str(tmp_path / "state")
    run = kctl("--state-dir", state, "plan", path, "--simulate", cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert line in run.stdout.splitlines()
    run = kctl("--state-dir", state, "--json", "plan", path, "--simulate", cwd=tmp_path)
    info = json.loads(run.stdout)["result"]["sglang"]
    assert info["version"] == version and info["attention_backend"] == backend


@pytest.mark.parametrize(
    ("version", "refused"),
    [("0.5.10", True), ("0.5.11", True), ("0.5.13", False), ("0.5.23", False)],
)
def test_the_kernel_takes_fp8_kv_where_the_release_reads_it(version: str, refused: bool) -> None:
    profile = load_profile(REPO / "profiles" / "kdtree-graphs-fp8.yaml")
    profile = dataclasses.replace(profile, image=dataclasses.replace(profile.image, sglang=version))
    if not kernel_choices(release(version)):  # the startup hook on releases before plugins
        env = (*profile.server.env, ("KDTREE_VERIFY", "1"))
        server = dataclasses.replace(profile.server, attention_backend="triton", env=env)
        profile = dataclasses.replace(profile, server=server)
    found = argv_problems(profile)
    if refused:
        (problem,) = found
        assert problem[0] == ("server", "kv_cache_dtype") and problem[2] == "fp8_e4m3"
        assert f"SGLang {version}'s Triton MLA path does not read an fp8 KV cache" in problem[1]
        assert "fix: kv_cache_dtype: bf16, or an image with SGLang 0.5.13 or later" in problem[1]
    else:
        assert found == []


def test_a_deprecated_flag_is_a_warning_with_its_replacement(tmp_path: Path) -> None:
    body = "image: {sglang: '0.5.23'}\nserver:\n  extra_args: ['--enable-flashinfer-allreduce-fusion']\n"
    path = _profile(tmp_path, "dep", body)
    run = kctl("--json", "validate", path, cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    (row,) = json.loads(run.stdout)["result"]
    (warning,) = row["warnings"]
    assert warning.startswith(f"{path}: server.extra_args[0]: --enable-flashinfer-allreduce-fusion")
    assert "deprecated in SGLang 0.5.23" in warning
    assert "fix: use --flashinfer-allreduce-fusion-backend=auto" in warning
    state = str(tmp_path / "state")
    run = kctl("--state-dir", state, "plan", path, "--simulate", cwd=tmp_path)
    assert run.returncode == 0 and "  warning: server.extra_args[0]: " in run.stdout
