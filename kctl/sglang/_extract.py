"""Read one SGLang wheel's real server-argument parser (run in a child process).

``python -m kctl.sglang._extract WHEEL`` unpacks the wheel's ``sglang`` package into a
temporary folder, imports ``sglang.srt.server_args`` from it with every heavy dependency
stubbed (:mod:`kctl.sglang._stubs`), calls the wheel's own ``prepare_server_args`` and
captures the parser it builds at the moment it would parse, then prints that parser as
JSON on stdout. A child process per wheel keeps each release's modules apart.

Nothing of the wheel is installed and none of its dependencies are imported.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import logging
import re
import sys
import tempfile
import warnings
import zipfile
from pathlib import Path
from typing import Any

from kctl.sglang._stubs import REAL_PACKAGES, StubFinder

_KINDS: dict[type[argparse.Action], str] = {
    argparse._StoreAction: "store",
    argparse._StoreTrueAction: "store_true",
    argparse._StoreFalseAction: "store_false",
    argparse._StoreConstAction: "store_const",
    argparse._AppendAction: "append",
    argparse._AppendConstAction: "append_const",
    argparse._CountAction: "count",
    argparse._HelpAction: "help",
    argparse._VersionAction: "version",
    argparse.BooleanOptionalAction: "boolean_optional",
}

_JSON_SCALARS = (str, int, float, bool, type(None))


class _Captured(Exception):
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__("parser captured")
        self.parser = parser


def json_value(value: Any) -> Any:
    """``value`` if JSON can carry it faithfully, else ``{"$type": <its type's name>}``."""
    if isinstance(value, _JSON_SCALARS):
        return value
    if isinstance(value, (list, tuple)):
        return [json_value(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((json_value(v) for v in value), key=repr)
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: json_value(v) for k, v in value.items()}
    return {"$type": type(value).__name__}


def _type_name(fn: Any) -> str | None:
    if fn is None:
        return None
    if fn in (str, int, float):
        return str(fn.__name__)
    return "callable:" + str(getattr(fn, "__name__", type(fn).__name__))


_LEADING_DEPRECATED = re.compile(r"^\W*deprecated\b", re.IGNORECASE)


def _deprecation(action: argparse.Action) -> str | None:
    """The help text of a deprecated option ("deprecated" if it has none), else None.

    Deprecated means: a deprecation action class, argparse's own ``deprecated=True``, a
    help text that starts with "Deprecated" (also "[Deprecated]", "(Deprecated: ..."), or
    one that says "<this option> is deprecated"; a help text that only mentions some other
    deprecated thing does not count."""
    text = " ".join(action.help.split()) if isinstance(action.help, str) else ""
    marked = "deprecated" in type(action).__name__.lower() or bool(
        getattr(action, "deprecated", False)
    )
    says = _LEADING_DEPRECATED.search(text) is not None or any(
        f"{opt} is deprecated" in text for opt in action.option_strings
    )
    return (text or "deprecated") if marked or says else None


def describe_action(action: argparse.Action) -> dict[str, Any]:
    """One argparse action as the table stores it."""
    kind = _KINDS.get(type(action), "custom")
    record: dict[str, Any] = {
        "options": list(action.option_strings),
        "dest": action.dest,
        "kind": kind,
        "nargs": action.nargs,
        "type": _type_name(action.type),
        "choices": None if action.choices is None else json_value(action.choices),
        "default": json_value(action.default),
        "const": json_value(action.const),
        "required": bool(action.required),
        "deprecated": _deprecation(action),
        "hidden": action.help == argparse.SUPPRESS,
    }
    if kind == "custom":
        record["action"] = type(action).__name__
    return record


def describe_parser(parser: argparse.ArgumentParser) -> dict[str, Any]:
    """The parser's own settings and every action it holds, in the order it holds them."""
    return {
        "allow_abbrev": parser.allow_abbrev,
        "prefix_chars": parser.prefix_chars,
        "fromfile_prefix_chars": parser.fromfile_prefix_chars,
        "actions": [describe_action(a) for a in parser._actions],
    }


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
    """The parser the wheel's ``prepare_server_args`` builds, and the stubbed packages."""
    for name in sorted(REAL_PACKAGES):
        importlib.import_module(name)  # missing: fail here, not as a degraded flag table
    with tempfile.TemporaryDirectory(prefix="kctl-sglang-") as tmp:
        root = Path(tmp)
        _unpack(wheel, root)
        finder = StubFinder(["sglang"])
        sys.path.insert(0, str(root))
        sys.meta_path.insert(0, finder)
        original = argparse.ArgumentParser.parse_args

        def capture(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> Any:
            raise _Captured(self)

        argparse.ArgumentParser.parse_args = capture  # type: ignore[method-assign]
        try:
            with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
                warnings.simplefilter("ignore")
                logging.disable(logging.CRITICAL)
                from sglang.srt.server_args import prepare_server_args

                prepare_server_args(["--model-path", "kctl-probe"])
        except _Captured as got:
            _refuse_degraded_flag_modules(finder)
            return got.parser, finder
        finally:
            argparse.ArgumentParser.parse_args = original  # type: ignore[method-assign]
            sys.meta_path.remove(finder)
            sys.path.remove(str(root))
    raise RuntimeError(f"{wheel.name}: prepare_server_args returned without parsing")


def try_parse(parser: argparse.ArgumentParser, argv: list[str]) -> str | None:
    """None if the real parser accepts ``argv``, else the message it would exit with."""

    def error(message: str) -> Any:
        raise _Refused(message)

    parser.error = error  # type: ignore[method-assign]
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            parser.parse_args(argv)
    except _Refused as refused:
        return str(refused)
    except SystemExit as ex:  # --help, --version
        return f"exit {ex.code}"
    return None


class _Refused(Exception):
    pass


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
