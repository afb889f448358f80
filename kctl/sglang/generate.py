"""Write kctl's SGLang release table from the published wheels.

    python -m kctl.sglang.generate                 # every release from 0.5.9 to the newest
    python -m kctl.sglang.generate --check         # exit 1 if the committed table differs

For each release ``pip download --no-deps`` fetches the wheel (cached under
``--wheel-dir``, the same platform tag on every machine), a child process builds the
wheel's real ``ServerArgs`` parser with SGLang's dependencies stubbed
(:mod:`kctl.sglang._extract`), and the wheel's files are read by syntax tree for the
launcher, the hooks and the metric names (:mod:`kctl.sglang._wheel`). Option records that
several releases share are stored once.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from kctl.sglang import _wheel

SCHEMA = 1
OLDEST = "0.5.9"
DATA = Path(__file__).parent / "data" / "releases.json"
GENERATOR = "python -m kctl.sglang.generate"
#: One platform tag for every machine: the Python sources are the same in every wheel of
#: a release, but from 0.5.11 the wheels are platform wheels.
PLATFORM = ("manylinux_2_34_x86_64", "3.11")

_VERSION = re.compile(r"^(\d+)\.(\d+)\.(\d+)(?:\.post(\d+))?$")


def version_key(version: str) -> tuple[int, int, int, int]:
    """Sort key of a final release or ``.postN`` (pre-releases are not accepted)."""
    m = _VERSION.match(version)
    if m is None:
        raise ValueError(f"not a final SGLang release: {version!r}")
    major, minor, patch, post = m.groups()
    return (int(major), int(minor), int(patch), int(post or -1))


def published_versions(oldest: str = OLDEST) -> list[str]:
    """Every final release on the package index from ``oldest`` on, oldest first."""
    out = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", "sglang"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    line = next(x for x in out.splitlines() if x.startswith("Available versions:"))
    found = [v.strip() for v in line.split(":", 1)[1].split(",")]
    keep = [v for v in found if _VERSION.match(v) and version_key(v) >= version_key(oldest)]
    return sorted(keep, key=version_key)


def wheel_path(version: str, wheel_dir: Path) -> Path | None:
    found = sorted(wheel_dir.glob(f"sglang-{version}-*.whl"))
    return found[0] if found else None


def download(version: str, wheel_dir: Path) -> Path:
    """The wheel of ``version``, downloaded into ``wheel_dir`` unless already there."""
    cached = wheel_path(version, wheel_dir)
    if cached is not None:
        return cached
    wheel_dir.mkdir(parents=True, exist_ok=True)
    platform, python = PLATFORM
    subprocess.run(
        [
            *(sys.executable, "-m", "pip", "download", "--no-deps", "--quiet"),
            *("--only-binary=:all:", "--platform", platform, "--python-version", python),
            *("--dest", str(wheel_dir), f"sglang=={version}"),
        ],
        check=True,
    )
    got = wheel_path(version, wheel_dir)
    if got is None:
        raise FileNotFoundError(f"pip download left no wheel for sglang=={version} in {wheel_dir}")
    return got


def _child_env() -> dict[str, str]:
    """The environment without SGLang's own switches (they change choices and defaults),
    and with this kctl importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_", "SGL_"))}
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    return env


def read_parser(wheel: Path, argvs: Sequence[Sequence[str]] = ()) -> dict[str, Any]:
    """The wheel's ``ServerArgs`` parser, described by a child process; with ``argvs``,
    also ``verdicts``: None where the real parser accepts an argv, else its message."""
    parse = ["--parse", json.dumps(argvs)] if argvs else []
    done = subprocess.run(
        [sys.executable, "-m", "kctl.sglang._extract", str(wheel), *parse],
        check=True,
        capture_output=True,
        text=True,
        env=_child_env(),
    )
    parsed: dict[str, Any] = json.loads(done.stdout)
    return parsed


def describe_release(
    version: str, wheel: Path, parser: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Everything the table records for one release, ``parser.actions`` inline;
    ``parser``: what :func:`read_parser` returned for the wheel, if already read."""
    parser = read_parser(wheel) if parser is None else parser
    with zipfile.ZipFile(wheel) as zf:
        facts = _wheel.read_facts(zf)
    return {
        "version": version,
        "wheel": wheel.name,
        "sha256": hashlib.sha256(wheel.read_bytes()).hexdigest(),
        "parser": {
            "allow_abbrev": parser["allow_abbrev"],
            "prefix_chars": parser["prefix_chars"],
            "fromfile_prefix_chars": parser["fromfile_prefix_chars"],
            "actions": parser["actions"],
        },
        "degraded_modules": sorted(parser["degraded"]),
        **facts,
    }


def build_table(releases: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The committed table: option records stored once, each release naming its own by
    index in its parser's order."""
    options: list[dict[str, Any]] = []
    index: dict[str, int] = {}
    out: list[dict[str, Any]] = []
    for rel in releases:
        ids = []
        for action in rel["parser"]["actions"]:
            key = json.dumps(action, sort_keys=True)
            if key not in index:
                index[key] = len(options)
                options.append(action)
            ids.append(index[key])
        parser = {k: v for k, v in rel["parser"].items() if k != "actions"}
        out.append({**rel, "parser": {**parser, "actions": ids}})
    return {
        "schema": SCHEMA,
        "generated_by": GENERATOR,
        "source": "the published sglang wheels (pip download --no-deps), read without installing",
        "options": options,
        "releases": out,
    }


def expand(table: Mapping[str, Any], version: str) -> dict[str, Any]:
    """One release of a table as :func:`describe_release` returns it (options inline)."""
    rel = next(r for r in table["releases"] if r["version"] == version)
    actions = [table["options"][i] for i in rel["parser"]["actions"]]
    return {**rel, "parser": {**rel["parser"], "actions": actions}}


def dumps(table: dict[str, Any]) -> str:
    """The table as committed: one option record or release per line."""
    head = {k: v for k, v in table.items() if k not in ("options", "releases")}
    lines = ["{"]
    lines += [f"{json.dumps(k)}: {json.dumps(v)}," for k, v in head.items()]
    for key in ("options", "releases"):
        rows = [json.dumps(x, sort_keys=True, separators=(",", ":")) for x in table[key]]
        lines.append(f'"{key}": [')
        lines.append(",\n".join(rows))
        lines.append("]," if key == "options" else "]")
    lines.append("}")
    return "\n".join(lines) + "\n"


def generate(versions: list[str], wheel_dir: Path) -> dict[str, Any]:
    return build_table(describe_release(v, download(v, wheel_dir)) for v in versions)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kctl.sglang.generate", description=__doc__)
    ap.add_argument("--wheel-dir", type=Path, default=Path(".whl-sglang"))
    ap.add_argument("--out", type=Path, default=DATA)
    ap.add_argument("--versions", nargs="+", help="default: every release from 0.5.9 on")
    ap.add_argument("--check", action="store_true", help="compare with --out, write nothing")
    args = ap.parse_args(argv)
    versions = args.versions or published_versions()
    text = dumps(generate(versions, args.wheel_dir))
    if args.check:
        same = args.out.is_file() and args.out.read_text() == text
        print(f"{args.out}: {'up to date' if same else 'differs from the wheels'}")
        return 0 if same else 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"{args.out}: {len(versions)} releases, {len(text)} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
