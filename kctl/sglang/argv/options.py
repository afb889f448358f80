"""What an option string means to a release's parser, and the :class:`Problem` record."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from kctl.sglang.releases import Option, Release

Severity = Literal["error", "warning"]
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


@dataclass(frozen=True)
class Problem:
    """One refused argument: the flag as written, what is wrong, and how to fix it."""

    flag: str
    message: str
    fix: str
    kind: str
    severity: Severity = "error"
    #: position of the offending token in the argv given to :func:`check_argv`
    index: int | None = None


@dataclass(frozen=True)
class Resolved:
    option: Option | None
    how: Literal["exact", "abbreviation", "ambiguous", "unknown"]
    matches: tuple[str, ...] = ()


def resolve(release: Release, name: str) -> Resolved:
    """What the option string ``name`` means to the release's parser."""
    opt = release.option(name)
    if opt is not None:
        return Resolved(opt, "exact", (name,))
    if release.allow_abbrev and name.startswith("--"):
        matches = tuple(sorted(f for f in release.flags if f.startswith(name)))
        if len(matches) == 1:
            return Resolved(release.option(matches[0]), "abbreviation", matches)
        if matches:
            return Resolved(None, "ambiguous", matches)
    return Resolved(None, "unknown")


def canonical(release: Release, dest: str) -> str | None:
    """The spelling kctl would render for ``dest``: the first option string of the first
    non-deprecated option storing into it."""
    opts = release.by_dest(dest)
    current = [o for o in opts if not o.deprecated] or list(opts)
    return current[0].options[0] if current and current[0].options else None


def managed_dests(release: Release, managed: Iterable[str]) -> set[str]:
    """Dests from a mix of dests and option strings (``--tp-size`` is ``tp_size`` on
    0.5.23 and ``tensor_parallel_size`` on 0.5.10)."""
    out: set[str] = set()
    for item in managed:
        if item[:1] in release.prefix_chars:
            dest = release.dest_of(item)
            if dest is not None:
                out.add(dest)
        else:
            out.add(item)
    return out


def looks_like_option(release: Release, token: str) -> bool:
    """argparse's test for an optional: a prefix char, not a negative number, no space
    (unless it is an option string or, where ``allow_abbrev``, an abbreviation of one:
    argparse reads ``--cuda-graph-conf={"decode": {...}}`` as an option before it looks
    for the space)."""
    if len(token) < 2 or token[0] not in release.prefix_chars:
        return False
    name = token.partition("=")[0]
    if release.has(name):
        return True
    abbreviation = release.allow_abbrev and name.startswith("--") and len(name) > 2
    if abbreviation and any(f.startswith(name) for f in release.flags):
        return True
    return not _NEGATIVE_NUMBER.match(token) and " " not in token
