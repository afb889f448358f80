"""A release's server options as its table records them (:class:`Option`), and the
argparse parser rebuilt from them (see :meth:`kctl.sglang.releases.Release.parser`).
Imports nothing of the release table, which builds on it."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from kctl.errors import InvalidInput

_BUILTIN_KINDS = {"store_true", "store_false", "store_const", "append", "append_const", "count"}
_TYPES: dict[str | None, Callable[[str], Any] | None] = {
    "int": int,
    "float": float,
    "str": str,
    None: None,
}


@dataclass(frozen=True)
class Option:
    """One argparse action of a release's server parser."""

    options: tuple[str, ...]
    dest: str
    kind: str
    nargs: int | str | None
    type: str | None
    choices: tuple[Any, ...] | None
    default: Any
    const: Any
    required: bool
    deprecated: str | None
    hidden: bool
    action: str | None = None

    @property
    def takes_value(self) -> bool:
        """Whether the option consumes argument tokens (``--x V``), not a bare switch."""
        return self.nargs != 0

    @property
    def is_flag(self) -> bool:
        """A boolean switch: ``store_true``/``store_false``, a ``--x/--no-x`` pair, or a
        deprecated switch kept for compatibility."""
        return self.nargs == 0 and self.kind not in ("help", "version", "count")

    def convert(self, value: str) -> Any:
        """``value`` converted as the release's parser does for ``int``/``float``
        (``ValueError`` if it cannot be); other types are kept as the string."""
        if self.type == "int":
            return int(value)
        if self.type == "float":
            return float(value)
        return value


class ParserError(InvalidInput):
    """What the release's parser would have printed before exiting with status 2."""


class ReleaseParser(argparse.ArgumentParser):
    """Raises :class:`ParserError` where argparse would print usage and exit."""

    def error(self, message: str) -> NoReturn:
        raise ParserError(message)


class _Switch(argparse.Action):
    """A zero-argument option the release implements with its own action class (a
    deprecated switch) or as a ``--x/--no-x`` pair: stores True, False for ``--no-``."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        negative = self.const == "boolean_optional" and bool(
            option_string and option_string.startswith("--no-")
        )
        setattr(namespace, self.dest, not negative)


def _default(value: Any) -> Any:
    return None if isinstance(value, dict) and "$type" in value else value


def _kwargs(opt: Option, extra: Sequence[str]) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"dest": opt.dest, "default": _default(opt.default)}
    if opt.kind in ("help", "version"):
        # a switch here: the rebuilt parser is a library's, it must not print and exit
        return {"dest": opt.dest, "action": _Switch, "nargs": 0, "const": opt.kind}
    if opt.nargs == 0 and opt.kind not in _BUILTIN_KINDS:
        return {**kwargs, "action": _Switch, "nargs": 0, "const": opt.kind}
    if opt.kind in _BUILTIN_KINDS and opt.kind != "append":
        kwargs["action"] = opt.kind
        if opt.kind in ("store_const", "append_const"):
            kwargs["const"] = opt.const
        return kwargs
    kwargs["action"] = "append" if opt.kind == "append" else "store"
    kwargs["nargs"] = opt.nargs
    kwargs["type"] = _TYPES.get(opt.type, str)
    kwargs["required"] = opt.required
    if opt.choices is not None:
        kwargs["choices"] = [*opt.choices, *extra]
    if opt.nargs == "?":
        kwargs["const"] = opt.const
    return kwargs


def build_parser(
    options: Sequence[Option],
    *,
    prog: str,
    allow_abbrev: bool,
    prefix_chars: str,
    fromfile_prefix_chars: str | None,
    extra_choices: dict[str, Any],
) -> ReleaseParser:
    """The parser of ``options`` with the parser settings a release's table records;
    ``extra_choices`` adds choices by dest."""
    parser = ReleaseParser(
        prog=prog,
        allow_abbrev=allow_abbrev,
        prefix_chars=prefix_chars,
        fromfile_prefix_chars=fromfile_prefix_chars,
        add_help=False,
    )
    for opt in options:
        extra = list(extra_choices.get(opt.dest, ()))
        if not opt.options:
            continue  # ServerArgs has no positional arguments; none to rebuild
        parser.add_argument(*opt.options, **_kwargs(opt, extra))
    return parser
