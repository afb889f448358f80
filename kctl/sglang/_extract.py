"""Read one SGLang wheel's real server-argument parser (run in a child process).

``python -m kctl.sglang._extract WHEEL`` unpacks the wheel's ``sglang`` package into a
temporary folder, imports ``sglang.srt.server_args`` from it with every heavy dependency
stubbed (:mod:`kctl.sglang._stubs`), calls the wheel's own ``prepare_server_args`` and
captures the parser it builds at the moment it would parse (:mod:`kctl.sglang.probe`),
then prints that parser as JSON on stdout. A child process per wheel keeps each release's
modules apart.

Nothing of the wheel is installed and none of its dependencies are imported.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import tempfile
import zipfile
from pathlib import Path

from kctl.sglang._stubs import REAL_PACKAGES, StubFinder
from kctl.sglang.probe import capture_server_parser, describe_parser, try_parse


def _unpack(wheel: Path, into: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            if name.startswith("sglang/") and not name.endswith((".so", ".pyd")):
                zf.extract(name, into)


#: Modules that define flags or choices: one of them degraded means the table is wrong.
FLAG_MODULES = ("sglang.srt.server_args", "sglang.srt.arg_groups")


def _refuse_degraded_flag_modules(finder: StubFinder) -> None:
    bad = {m: e for m, e in finder.failed.items() if m.startswith(FLAG_MODULES)}
    if bad:
        raise RuntimeError(f"modules that define server flags failed to import: {bad}")


def capture_parser(wheel: Path) -> tuple[argparse.ArgumentParser, StubFinder]:
    """The parser the wheel's ``prepare_server_args`` builds, and the stub finder used."""
    for name in sorted(REAL_PACKAGES):
        importlib.import_module(name)  # missing: fail here, not as a degraded flag table
    with tempfile.TemporaryDirectory(prefix="kctl-sglang-") as tmp:
        root = Path(tmp)
        _unpack(wheel, root)
        finder = StubFinder(["sglang"])
        sys.path.insert(0, str(root))
        sys.meta_path.insert(0, finder)
        try:
            parser = capture_server_parser()
        finally:
            sys.meta_path.remove(finder)
            sys.path.remove(str(root))
    _refuse_degraded_flag_modules(finder)
    return parser, finder


def main(argv: list[str]) -> int:
    """``WHEEL [--parse ARGVS_JSON]``: the parser as JSON; with ``--parse``, also
    ``verdicts``: for each argv in the JSON list, null if the real parser accepts it, else
    the message it would exit with."""
    wheel = Path(argv[0])
    parser, finder = capture_parser(wheel)
    out = describe_parser(parser)
    out["stubbed"] = sorted(finder.stubbed)
    out["degraded"] = dict(sorted(finder.failed.items()))
    if argv[1:2] == ["--parse"]:
        out["verdicts"] = [try_parse(parser, list(a)) for a in json.loads(argv[2])]
    json.dump(out, sys.stdout, sort_keys=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
