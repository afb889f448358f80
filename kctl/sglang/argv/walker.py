"""The walk over an argv, token by token, as the release's ``ServerArgs`` parser reads it."""

from __future__ import annotations

import difflib
import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from kctl.sglang.argv.effects import Span
from kctl.sglang.argv.options import (
    Problem,
    Resolved,
    Severity,
    canonical,
    looks_like_option,
    resolve,
)
from kctl.sglang.releases import Option, Release


class Walker:
    """One pass over an argv: a :class:`Problem` for each token the parser would refuse or
    that would override a dest kctl manages; :meth:`run` returns them in argv order."""

    def __init__(
        self,
        release: Release,
        argv: Sequence[str],
        managed: Mapping[str, str],
        own: int,
        extra_choices: Mapping[str, Collection[str]],
        others: Sequence[Release],
    ) -> None:
        self.release = release
        self.argv = list(argv)
        self.managed = managed
        self.own = own
        self.extra_choices = extra_choices
        self.others = others
        self.problems: list[Problem] = []
        self.own_spelling: dict[str, str] = {}
        #: every option read at or after ``own`` (what :mod:`.effects` judges one by one)
        self.spans: list[Span] = []
        self.at = 0

    def add(self, flag: str, message: str, fix: str, kind: str, sev: Severity = "error") -> None:
        self.problems.append(Problem(flag, message, fix, kind, sev, self.at))

    def run(self) -> list[Problem]:
        i = 0
        while i < len(self.argv):
            token = self.argv[i]
            self.at = i
            if token == "--":
                for j in range(i + 1, len(self.argv)):
                    self.at = j
                    self._positional(self.argv[j])
                break
            if not looks_like_option(self.release, token):
                self._positional(token)
                i += 1
            elif self._from_file(token):
                i += 1
            else:
                i = self._option(i)
        return self.problems

    def _positional(self, token: str) -> None:
        self.add(
            token,
            f"SGLang {self.release.version} takes no positional argument; {token!r} is not "
            "the value of any option",
            "remove it, or put the option it belongs to before it",
            "positional",
        )

    def _from_file(self, token: str) -> bool:
        chars = self.release.fromfile_prefix_chars
        if not chars or token[0] not in chars:
            return False
        self.add(
            token,
            f"{token} reads more arguments from a file, which can set anything kctl manages",
            "write the arguments themselves in extra_args",
            "config",
        )
        return True

    def _option(self, i: int) -> int:
        token = self.argv[i]
        name, eq, inline = token.partition("=") if "=" in token else (token, "", "")
        found = resolve(self.release, name)
        if found.option is None:
            self._unresolved(name, found)
            return self._skip_values(i + 1)
        values, nxt = self._consume(found.option, name, inline if eq else None, i + 1)
        self._check(found, name, values, extra=i >= self.own)
        if i >= self.own:
            self.spans.append(Span(i, nxt, name, found))
        return nxt

    def _skip_values(self, i: int) -> int:
        while i < len(self.argv) and not looks_like_option(self.release, self.argv[i]):
            i += 1
        return i

    def _take(self, i: int, limit: int | None) -> list[str]:
        out: list[str] = []
        while i + len(out) < len(self.argv) and (limit is None or len(out) < limit):
            nxt = self.argv[i + len(out)]
            if looks_like_option(self.release, nxt):
                break
            out.append(nxt)
        return out

    def _consume(
        self, opt: Option, name: str, inline: str | None, i: int
    ) -> tuple[list[str] | None, int]:
        """The option's values and the index after them; None when they are wrong."""
        nargs = opt.nargs
        if nargs == 0:
            if inline is not None:
                self.add(
                    name,
                    f"{name} is a switch and takes no value",
                    f"write {name} alone",
                    "unexpected_value",
                )
            return [], i
        if inline is not None:
            return [inline], i
        limit = 1 if nargs in (None, "?") else nargs if isinstance(nargs, int) else None
        values = self._take(i, limit)
        need = nargs if isinstance(nargs, int) else (1 if nargs in (None, "+") else 0)
        if len(values) < need:
            self.add(
                name,
                f"{name} expects {'a value' if need == 1 else f'{need} values'}",
                f"give {name} its value",
                "missing_value",
            )
            return None, i + len(values)
        return values, i + len(values)

    def _check(self, found: Resolved, name: str, values: list[str] | None, extra: bool) -> None:
        opt = found.option
        assert opt is not None
        if opt.dest == "config":
            self._config(name)
            return
        if opt.kind in ("help", "version"):
            self.add(
                name,
                f"{name} makes SGLang print its {opt.kind} and exit instead of serving",
                "remove it",
                "exits",
            )
            return
        if not extra:
            self.own_spelling.setdefault(opt.dest, found.matches[0])
        elif opt.dest in self.managed:
            self._managed(found, name)
        if values:
            self._values(opt, name, values)
        if opt.deprecated:
            self.add(
                name,
                f"{name} is deprecated in SGLang {self.release.version}: {opt.deprecated}",
                replacement(opt.deprecated) or "remove it",
                "deprecated",
                "warning",
            )

    def _config(self, name: str) -> None:
        self.add(
            name,
            f"{name} loads a YAML file of server arguments, which can set anything kctl "
            "manages; kctl refuses it",
            "write the arguments themselves in extra_args (kctl checks each one)",
            "config",
        )

    def _managed(self, found: Resolved, name: str) -> None:
        opt = found.option
        assert opt is not None
        main = self.own_spelling.get(opt.dest) or canonical(self.release, opt.dest) or name
        if found.how == "abbreviation":
            how = f" (an abbreviation of {found.matches[0]})"
        elif name != main:
            how = f" (an alias of {main})"
        else:
            how = ""
        self.add(
            name,
            f"{name}{how} sets {opt.dest}, which kctl manages; as an extra argument it "
            "would override kctl's value",
            self.managed.get(opt.dest)
            or f"remove {name} from extra_args; kctl renders {main} from the profile",
            "managed",
        )

    def _values(self, opt: Option, name: str, values: list[str]) -> None:
        allowed = None
        if opt.choices is not None:
            allowed = [*opt.choices, *self.extra_choices.get(opt.dest, ())]
        for value in values:
            try:
                converted: Any = opt.convert(value)
            except ValueError:
                self.add(
                    name,
                    f"{name} expects {'an integer' if opt.type == 'int' else 'a number'} "
                    f"(got {value!r})",
                    f"give {name} {'an integer' if opt.type == 'int' else 'a number'}",
                    "value",
                )
                continue
            if allowed is not None and converted not in allowed:
                shown = ", ".join(str(c) for c in allowed)
                self.add(
                    name,
                    f"{value!r} is not a choice of {name} in SGLang {self.release.version}",
                    f"use one of: {shown}",
                    "choice",
                )

    def _unresolved(self, name: str, found: Resolved) -> None:
        rel = self.release
        have = [r for r in self.others if r.has(name)]
        if have:
            self._removed(name, found, have)
        elif found.how == "ambiguous":
            self.add(
                name,
                f"{name} is ambiguous in SGLang {rel.version}: it could be "
                + ", ".join(found.matches),
                "write the whole option name",
                "ambiguous",
            )
        else:
            close = difflib.get_close_matches(name, sorted(rel.flags), n=1)
            self.add(
                name,
                f"{name} is not an option of SGLang {rel.version}",
                f"did you mean {close[0]}?" if close else "remove it",
                "unknown",
            )

    def _removed(self, name: str, found: Resolved, have: Sequence[Release]) -> None:
        rel = self.release
        older = [r for r in have if r.key < rel.key]
        when = (
            f"it was removed after {older[-1].version}"
            if older
            else f"it arrives in {have[0].version}"
        )
        also = (
            f" (as an abbreviation it could be {', '.join(found.matches)})"
            if found.how == "ambiguous"
            else ""
        )
        self.add(
            name,
            f"{name} is not an option of SGLang {rel.version}: {when}{also}",
            self._successor(name, have[-1] if older else have[0]),
            "removed",
        )

    def _successor(self, name: str, last: Release) -> str:
        opt = last.option(name)
        assert opt is not None
        hint = replacement(opt.deprecated or "")
        if hint and names_present(self.release, hint):
            return hint
        spelled = canonical(self.release, opt.dest)
        if spelled is not None:
            return f"use {spelled}"
        return f"remove it (SGLang {self.release.version} has no option for {opt.dest})"


_USE = re.compile(r"(?:use|alias for)\s+(--[\w-]+(?:[={][^\s.]*)?)", re.IGNORECASE)


def names_present(release: Release, hint: str) -> bool:
    """Whether the option a ``use --x`` hint names exists in ``release``
    (``--x-{a,b}=v`` counts when some ``--x-...`` does)."""
    m = re.search(r"--[\w-]+", hint)
    if m is None:
        return False
    name = m.group(0)
    if name.endswith("-"):
        return any(f.startswith(name) for f in release.flags)
    return release.has(name)


def replacement(text: str) -> str | None:
    """``use --x`` from a deprecation message that names its replacement."""
    m = _USE.search(text)
    return f"use {m.group(1).rstrip(',;)')}" if m else None
