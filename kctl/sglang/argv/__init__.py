"""Check an SGLang server argv against the release that will run it.

:func:`check_argv` reads the argv the way the release's own ``ServerArgs`` parser does
(exact option strings, aliases, unique-prefix abbreviations when ``allow_abbrev``, the
``--flag=value`` form, nargs) and returns one :class:`Problem` per thing that parser
would refuse or that would quietly override what kctl manages:

- ``unknown``: no such option in this release (with a close spelling as the fix);
- ``removed``: an option of another release (when it left or arrives, and its successor);
- ``ambiguous``: an abbreviation that matches several options;
- ``choice`` / ``value``: a value outside the choices or not of the option's type;
  ``missing_value`` / ``unexpected_value``: a value missing or given to a switch;
- ``managed``: an extra argument that sets a dest kctl manages, by any spelling (alias,
  abbreviation, the flag itself);
- ``config``: ``--config FILE`` (or an abbreviation of it) anywhere: the file can set any
  argument, so it is always refused;
- ``positional``: a stray value; ``exits``: ``--help``, which prints and exits;
- ``deprecated`` (severity ``warning``): accepted today, with the replacement as the fix;
- ``effect``: with ``settings``, an extra argument that changes a setting kctl manages
  through any other flag (``--cuda-graph-config``, ``--decode-attention-backend``, ...),
  judged by the value the release's parser gives it (:mod:`kctl.sglang.argv.effects`).

Nothing is printed; the caller renders the problems.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from kctl.sglang._rebuild import ParserError
from kctl.sglang.argv.effects import SETTINGS, effect_problems
from kctl.sglang.argv.options import Problem, canonical, managed_dests, resolve
from kctl.sglang.argv.walker import Walker
from kctl.sglang.releases import Release, releases

__all__ = ["SETTINGS", "Problem", "canonical", "check_argv", "managed_dests", "resolve"]


def check_argv(
    release: Release,
    argv: Sequence[str],
    managed: Mapping[str, str] | Collection[str] = (),
    *,
    own: int = 0,
    extra_choices: Mapping[str, Collection[str]] | None = None,
    others: Sequence[Release] | None = None,
    settings: Mapping[str, str] | None = None,
) -> list[Problem]:
    """Every problem with ``argv`` (the server arguments, without the launcher) for
    ``release``.

    ``managed``: the dests (or option strings) kctl sets itself, optionally mapped to the
    fix to show (e.g. ``{"model_path": "set model.path in the profile"}``). ``own``: how
    many leading tokens of ``argv`` kctl rendered itself; a managed dest set at or after
    that index is a problem (``own=0``: every token is an extra argument).
    ``extra_choices``: choices a plugin adds, by dest. ``others``: the releases that say
    where a removed option went (default: every known release). ``settings``: the
    :data:`~kctl.sglang.argv.effects.SETTINGS` keys whose value ``argv[:own]`` decides,
    mapped to the fix to show; an extra argument that changes one, by whatever flag, is an
    ``effect`` problem (judged once the whole argv parses)."""
    dests = managed_dests(release, managed)
    fixes = dict(managed) if isinstance(managed, Mapping) else {}
    named = {d: fixes.get(d, "") or fixes.get(canonical(release, d) or "", "") for d in dests}
    walker = Walker(
        release,
        argv,
        named,
        own,
        extra_choices or {},
        releases() if others is None else others,
    )
    problems = walker.run()
    if not any(p.severity == "error" for p in problems):
        problems += _parse_check(release, argv, extra_choices or {})
    if settings and not any(p.severity == "error" and p.kind != "managed" for p in problems):
        refused = {p.index for p in problems if p.index is not None and p.severity == "error"}
        problems += effect_problems(
            release, argv, own, walker.spans, settings, extra_choices or {}, refused
        )
        problems.sort(key=lambda p: len(argv) if p.index is None else p.index)
    return problems


def _parse_check(
    release: Release, argv: Sequence[str], extra_choices: Mapping[str, Collection[str]]
) -> list[Problem]:
    """What the rebuilt parser says when the walk found nothing (required options aside:
    a partial argv may leave out ``--model-path``)."""
    try:
        release.parser(extra_choices).parse_args(list(argv))
    except ParserError as exc:
        if "arguments are required" not in str(exc):
            return [Problem("", f"SGLang {release.version}: {exc}", "fix the argument", "parser")]
    return []
