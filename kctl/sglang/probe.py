"""Describe the SGLang server parser of the Python this runs in (standard library only).

Run inside an image, with SGLang installed for real, as the image's own answer to "what
does your ``sglang serve`` accept":

    docker run --rm --entrypoint python3 IMAGE -c "$(cat kctl/sglang/probe.py)"

It prints one JSON object: ``version`` (the installed sglang's), ``parser`` (the settings
and every action of the parser ``prepare_server_args`` builds, captured at the moment it
would parse) and ``launcher``. :func:`kctl.sglang.releases.release_from_probe` turns it
into a :class:`~kctl.sglang.releases.Release`. The release table's generator describes the
published wheels with the same functions (:mod:`kctl.sglang._extract`), so both read alike.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.metadata
import importlib.util
import io
import json
import logging
import re
import sys
import warnings
from typing import Any

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


def capture_server_parser() -> argparse.ArgumentParser:
    """The parser that the importable ``sglang``'s ``prepare_server_args`` builds."""
    original = argparse.ArgumentParser.parse_args

    def capture(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> Any:
        raise _Captured(self)

    argparse.ArgumentParser.parse_args = capture  # type: ignore[method-assign]
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            logging.disable(logging.CRITICAL)
            module = importlib.import_module("sglang.srt.server_args")
            module.prepare_server_args(["--model-path", "kctl-probe"])
    except _Captured as got:
        return got.parser
    finally:
        argparse.ArgumentParser.parse_args = original  # type: ignore[method-assign]
        logging.disable(logging.NOTSET)
    raise RuntimeError("sglang's prepare_server_args returned without parsing")


class _Refused(Exception):
    pass


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


def launcher() -> dict[str, Any]:
    """``sglang serve`` where the ``sglang`` console script and ``sglang.cli.serve`` exist."""
    scripts = importlib.metadata.entry_points(group="console_scripts")
    console = any(ep.name == "sglang" for ep in scripts)
    serve = console and importlib.util.find_spec("sglang.cli.serve") is not None
    return {
        "argv": ["sglang", "serve"] if serve else ["python3", "-m", "sglang.launch_server"],
        "serve_subcommand": serve,
        "launch_server_module": importlib.util.find_spec("sglang.launch_server") is not None,
    }


def installed_version() -> str:
    """The installed ``sglang``'s version: its distribution's, else the package's own
    ``__version__`` (a source tree on the path, or kctl's simulator shim)."""
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return str(importlib.import_module("sglang").__version__)


def main() -> int:
    out = {
        "version": installed_version(),
        "parser": describe_parser(capture_server_parser()),
        "launcher": launcher(),
    }
    sys.stdout.write(json.dumps(out, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
