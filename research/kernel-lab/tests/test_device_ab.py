"""research/kernel-lab/scripts/device_ab.sh without a GPU: fake `python3` and `nvidia-smi` on PATH record
what the script runs, where and under which environment."""

from __future__ import annotations

import os
import pathlib
import subprocess

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "scripts" / "device_ab.sh"

# Records one line per python3 run: the working directory, KDTREE_DIAG_FLAGS and the arguments.
# A bench run writes the JSON file it is given, so the summary step finds it.
FAKE_PY = """#!/usr/bin/env bash
echo "$(pwd)|${KDTREE_DIAG_FLAGS:-}|$*" >> "$LOG"
prev=""
for a in "$@"; do
  if [ "$prev" = "--json" ]; then echo '{"cases": []}' > "$a"; fi
  prev=$a
done
exit 0
"""


@pytest.fixture()
def rig(tmp_path: pathlib.Path) -> tuple[pathlib.Path, dict[str, str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("python3", FAKE_PY), ("nvidia-smi", "#!/usr/bin/env bash\necho fake\n")):
        exe = bin_dir / name
        exe.write_text(text)
        exe.chmod(0o755)
    repo = tmp_path / "repo"
    for tree in ("kernels", "other/kernels"):
        (repo / tree).mkdir(parents=True)
    env = dict(os.environ)
    env.update(
        PATH=f"{bin_dir}:{env['PATH']}",
        LOG=str(tmp_path / "runs.log"),
        OUT=str(tmp_path / "out"),
        PASSES="2",
        AB_NAME="t",
    )
    env.pop("KDTREE_DIAG_FLAGS", None)
    return repo, env


def _device_ab(repo: pathlib.Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        ["bash", str(SCRIPT)], cwd=repo, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done


def _runs(env: dict[str, str]) -> list[tuple[str, str, str]]:
    lines = pathlib.Path(env["LOG"]).read_text().splitlines()
    return [tuple(line.split("|", 2)) for line in lines]  # type: ignore[misc]


def test_labels_of_one_path_share_its_build_and_keep_their_environments(rig) -> None:
    repo, env = rig
    env["TREES"] = "base=kernels off=other/kernels on=other/kernels%KDTREE_DIAG_FLAGS=4"
    done = _device_ab(repo, env)
    runs = _runs(env)
    builds = sorted(cwd for cwd, _, args in runs if args.startswith("setup.py build_ext"))
    assert builds == sorted([str(repo / "kernels"), str(repo / "other/kernels")])
    benches = [
        (cwd, flags) for cwd, flags, args in runs if args.startswith("bench/bench_verify.py")
    ]
    # two passes of three labels, each label in its tree under its own environment
    assert len(benches) == 6
    assert benches.count((str(repo / "other/kernels"), "4")) == 2
    assert benches.count((str(repo / "other/kernels"), "")) == 2
    assert benches.count((str(repo / "kernels"), "")) == 2
    tests = [flags for cwd, flags, args in runs if args.startswith("-m pytest")]
    assert sorted(tests) == ["", "", "4"]
    assert "build base rc=0" in done.stdout and "build off rc=0" in done.stdout
    assert "build on" not in done.stdout  # the label sharing off's tree has no build of its own
    assert pathlib.Path(env["OUT"], "t.tgz").is_file()


def test_a_plain_tree_list_still_builds_every_tree(rig) -> None:
    repo, env = rig
    env["TREES"] = "old=other/kernels new=kernels"
    done = _device_ab(repo, env)
    builds = [cwd for cwd, _, args in _runs(env) if args.startswith("setup.py build_ext")]
    assert sorted(builds) == sorted([str(repo / "kernels"), str(repo / "other/kernels")])
    assert "build old rc=0" in done.stdout and "build new rc=0" in done.stdout
