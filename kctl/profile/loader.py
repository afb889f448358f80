"""Load a profile file: YAML, ``extends:`` chains, ``baseline:``, validation, content hash.

Rules (the user-facing version is ``docs/profiles.md``):

* ``extends: <path>`` names a base profile relative to the extending file. Chains are
  allowed; a cycle or a missing file is an error. Mappings deep-merge (so ``server.env``
  merges by variable), everything else (lists, scalars) is replaced by the extending file.
  ``name`` is never inherited: it defaults to the stem of the file given.
* ``baseline: <path>`` names the known-good profile, relative to the file that declares
  it. It is loaded and validated too; a baseline chain that leads back to a profile
  already in the chain is refused.
* Top-level keys starting with ``x-`` are ignored: they hold YAML anchors for reuse.
* Every problem is collected and raised together as one :class:`ProfileError`, each line
  ``<file>: <field.path>: <what is wrong and the fix> (got <value>)``, where ``<file>``
  is the file that set the offending value (a base file when inherited).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from kctl.errors import ProfileError
from kctl.profile.argv import argv_problems
from kctl.profile.model import Profile
from kctl.profile.overrides import Override, apply_overrides, parse_overrides
from kctl.profile.reader import ReadError, read_profile_data
from kctl.profile.serialize import content_hash
from kctl.profile.validate import FieldPath, Problems, build_profile

EXTENSION_PREFIX = "x-"


def _read_yaml(
    display: str, real: str, problems: Problems, referrer: tuple[str, str] | None = None
) -> dict[str, Any] | None:
    """The mapping in ``display``, or None with the problem added. A file another profile
    names (``referrer``: that file and its field) that is not a profile is refused there,
    in the referrer's words: what the file holds is never shown (it may be any file)."""
    try:
        data = read_profile_data(real)
    except ReadError as exc:
        if referrer is not None:
            problems.raw(_foreign(referrer, display, f"it cannot be read as one: {exc.brief}"))
        else:
            problems.raw(f"{display}: {exc}")
        return None
    if data is None or not isinstance(data, dict):
        what = "it is empty" if data is None else f"its top level is a {type(data).__name__}"
        if referrer is not None:
            problems.raw(_foreign(referrer, display, f"{what}, not a mapping of profile sections"))
        elif data is None:
            problems.raw(
                f"{display}: the file is empty; a profile needs at least server.model_path"
            )
        else:
            problems.raw(
                f"{display}: (top level): must be a mapping of profile sections "
                f"(got {type(data).__name__})"
            )
        return None
    return data


def _foreign(referrer: tuple[str, str], display: str, why: str) -> str:
    return (
        f"{referrer[0]}: {referrer[1]}: {display} is not a kctl profile ({why}); name a "
        f"profile file (`kctl validate {display}` shows its own problems)"
    )


def _relative_to(declaring: str, value: str) -> str:
    """A path written in ``declaring`` (a file path as displayed), made usable from here."""
    expanded = os.path.expanduser(value)
    if os.path.isabs(expanded):
        return os.path.normpath(expanded)
    return os.path.normpath(os.path.join(os.path.dirname(declaring), expanded))


class _Origins:
    """Which file set each field, so problems name the file to edit."""

    def __init__(self, default: str) -> None:
        self.default = default
        self.by_path: dict[tuple[str, ...], str] = {}

    def record(self, data: Any, display: str, prefix: tuple[str, ...] = ()) -> None:
        if not isinstance(data, dict):
            return
        for key, value in data.items():
            path = (*prefix, str(key))
            self.by_path[path] = display
            self.record(value, display, path)

    def __call__(self, path: FieldPath) -> str:
        keys = tuple(p for p in path if isinstance(p, str))
        # list items and nested keys belong to the nearest recorded mapping key
        for end in range(len(keys), 0, -1):
            if keys[:end] in self.by_path:
                return self.by_path[keys[:end]]
        return self.default


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` onto ``base``: mappings merge key by key, anything else replaces."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


#: top-level keys of which a profile has at least one
PROFILE_KEYS = frozenset(
    {"extends", "baseline", "name", "description", "image", "server", "runtime", "health"}
    | {"gate", "simulator"}
)


def _reference_problem(referrer: str, field: str, path: str) -> str | None:
    """Why the file ``field`` (``extends``/``baseline``) of ``referrer`` names cannot be
    opened as a profile: a symlink, or not a regular file (a FIFO would hang kctl)."""
    if os.path.islink(path):
        return (
            f"{referrer}: {field}: {path} is a symlink; name the profile file itself "
            "(kctl follows no symlink from one profile to another)"
        )
    if os.path.exists(path) and not os.path.isfile(path):
        return f"{referrer}: {field}: {path} is not a regular file; name a profile (.yaml) file"
    return None


def _not_a_profile(data: dict[str, Any]) -> bool:
    return not any(str(k) in PROFILE_KEYS or str(k).startswith(EXTENSION_PREFIX) for k in data)


def _resolve(
    display: str,
    problems: Problems,
    origins: _Origins,
    chain: list[tuple[str, str]],
    referrer: tuple[str, str] | None = None,
) -> tuple[dict[str, Any], dict[str, str]] | None:
    """The merged mapping of ``display`` and its ``extends`` chain, plus, per key that
    names a path (``baseline``), the file that declared it. ``referrer``: the file and
    field that named ``display`` (a file that is not a profile is refused there, its
    content never shown)."""
    real = os.path.realpath(display)
    data = _read_yaml(display, real, problems, referrer)
    if data is None:
        return None
    if referrer is not None and _not_a_profile(data):
        keys = ", ".join(sorted(PROFILE_KEYS))
        problems.raw(_foreign(referrer, display, f"none of {keys} at its top level"))
        return None
    data = {k: v for k, v in data.items() if not str(k).startswith(EXTENSION_PREFIX)}
    declared = {"baseline": display} if "baseline" in data else {}
    merged: dict[str, Any] = {}
    if "extends" in data:
        parent = data.pop("extends")
        if not isinstance(parent, str) or not parent.strip():
            problems.raw(
                f"{display}: extends: must be the path of a base profile, relative to "
                f"this file (got {parent!r})"
            )
            return None
        parent_display = _relative_to(display, parent)
        parent_real = os.path.realpath(parent_display)
        reals = [r for r, _ in chain]
        if parent_real in reals:
            loop = [d for _, d in chain[reals.index(parent_real) :]] + [parent_display]
            names = " -> ".join(loop)
            problems.raw(
                f"{display}: extends: cycle {names}; remove one of these extends (got {parent!r})"
            )
            return None
        why = _reference_problem(display, "extends", parent_display)
        if why is not None:
            problems.raw(why)
            return None
        if not os.path.exists(parent_real):
            problems.raw(
                f"{display}: extends: file not found: {parent_display}; the path is "
                f"relative to this file's directory (got {parent!r})"
            )
            return None
        resolved = _resolve(
            parent_display,
            problems,
            origins,
            [*chain, (parent_real, parent_display)],
            (display, "extends"),
        )
        if resolved is None:
            return None
        merged, parent_declared = resolved
        merged.pop("name", None)  # a name belongs to its own file
        declared = {**parent_declared, **declared}
    origins.record(data, display)
    return deep_merge(merged, data), declared


def resolve_file(path: str | Path) -> dict[str, Any]:
    """The mapping ``path`` stands for once its ``extends`` chain is merged (``x-`` keys
    dropped, before validation): what the JSON Schema of ``kctl schema`` describes."""
    display = str(path)
    origins = _Origins(display)
    problems = Problems(origins)
    resolved = _resolve(display, problems, origins, [(os.path.realpath(display), display)])
    if resolved is None:
        raise ProfileError(problems.lines)
    return resolved[0]


def load_profile(
    path: str | Path,
    *,
    overrides: Sequence[str | Override] = (),
    _baseline_chain: tuple[tuple[str, str], ...] = (),
    _referrer: tuple[str, str] | None = None,
) -> Profile:
    """Load, resolve and validate one profile; raise :class:`ProfileError` listing every
    problem. ``path`` is shown in messages exactly as given. ``overrides``: ``--set
    FIELD=VALUE`` items (:mod:`kctl.profile.overrides`), applied to the profile and to its
    baseline; a problem with one names the ``--set`` rather than a file."""
    display = str(path)
    real = os.path.realpath(display)
    sets = _parsed(overrides)
    origins = _Origins(display)
    problems = Problems(origins)
    resolved = _resolve(display, problems, origins, [(real, display)], _referrer)
    if resolved is None:
        raise ProfileError(problems.lines)
    data, declared = resolved
    if sets:
        data, unset = apply_overrides(data, sets)
        for o in sets:
            origins.by_path[tuple(p for p in o.path if isinstance(p, str))] = o.origin
        for line in unset:
            problems.raw(line)
    name = data.get("name") if isinstance(data.get("name"), str) else None
    name = name or Path(display).stem

    baseline_path: str | None = None
    baseline_profile: Profile | None = None
    raw_baseline = data.get("baseline")
    if raw_baseline is not None:
        declaring = declared.get("baseline", display)
        if not isinstance(raw_baseline, str) or not raw_baseline.strip():
            problems.add(
                ("baseline",),
                "must be the path of the known-good profile, relative "
                "to this file, or null when this profile is the baseline",
                raw_baseline,
            )
        else:
            baseline_path = _relative_to(declaring, raw_baseline)
            why = _reference_problem(declaring, "baseline", baseline_path)
            if why is not None:
                problems.raw(why)
            else:
                baseline_profile = _load_baseline(
                    baseline_path,
                    raw_baseline,
                    problems,
                    (*_baseline_chain, (real, display)),
                    declaring,
                    sets,
                )

    profile = build_profile(data, problems, name=name, source=display, baseline=baseline_path)
    if profile is not None:
        _check_argv(profile, problems)
    if profile is not None and baseline_profile is not None:
        _check_pair(profile, baseline_profile, problems)
    if profile is None or problems:
        raise ProfileError(list(dict.fromkeys(problems.lines)))  # a --set's line once
    digest = content_hash(
        profile, baseline_hash=baseline_profile.content_hash if baseline_profile else None
    )
    return _with_hash(profile, digest, tuple(o.text for o in sets))


def _parsed(overrides: Sequence[str | Override]) -> tuple[Override, ...]:
    texts = [o for o in overrides if isinstance(o, str)]
    done = tuple(o for o in overrides if isinstance(o, Override))
    return done + parse_overrides(texts) if texts else done


def _load_baseline(
    path: str,
    raw: str,
    problems: Problems,
    chain: tuple[tuple[str, str], ...],
    declaring: str,
    sets: tuple[Override, ...],
) -> Profile | None:
    real = os.path.realpath(path)
    reals = [r for r, _ in chain]
    if real in reals:
        loop = [d for _, d in chain[reals.index(real) :]] + [path]
        names = " -> ".join(loop)
        problems.add(
            ("baseline",),
            f"circular baseline chain {names}; the known-good "
            "baseline must not lead back to this profile (set baseline: null in the "
            "known-good one)",
            raw,
        )
        return None
    if not os.path.exists(real):
        problems.add(
            ("baseline",),
            f"file not found: {path}; the path is relative to the file that declares it",
            raw,
        )
        return None
    try:
        return load_profile(
            path, overrides=sets, _baseline_chain=chain, _referrer=(declaring, "baseline")
        )
    except ProfileError as exc:
        if len(exc.problems) == 1 and exc.problems[0].startswith(f"{declaring}: baseline: "):
            problems.raw(exc.problems[0])  # not a profile: said once, content not shown
            return None
        if all(line.startswith("--set ") for line in exc.problems):
            for line in exc.problems:  # the fix is the --set, the same for both profiles
                problems.raw(line)
            return None
        problems.add(("baseline",), "the baseline profile is invalid (its problems follow)", raw)
        for line in exc.problems:
            problems.raw(line)
        return None


def _check_argv(profile: Profile, problems: Problems) -> None:
    """The launch argv as the server parser of the profile's SGLang release reads it."""
    for path, message, value in argv_problems(profile):
        problems.add(path, message, value)


def _check_pair(profile: Profile, baseline: Profile, problems: Problems) -> None:
    """A candidate must be comparable with, and revertible to, its baseline."""
    if baseline.runtime.kind != profile.runtime.kind:
        problems.add(
            ("runtime", "kind"),
            f"differs from the baseline's "
            f"({baseline.runtime.kind!r} in {baseline.source}); a candidate and its "
            "baseline must use the same runtime",
            profile.runtime.kind,
        )
    if baseline.server.model_path != profile.server.model_path:
        problems.add(
            ("server", "model_path"),
            f"differs from the baseline's "
            f"({baseline.server.model_path!r} in {baseline.source}); the gate compares "
            "the same model only",
            profile.server.model_path,
        )


def _with_hash(profile: Profile, digest: str, overrides: tuple[str, ...]) -> Profile:
    import dataclasses

    return dataclasses.replace(profile, content_hash=digest, overrides=overrides)


def load_profiles(
    paths: Iterable[str | Path], *, overrides: Sequence[str | Override] = ()
) -> list[Profile]:
    """Load several profiles (``kctl validate``); raise one :class:`ProfileError` with the
    problems of every invalid file, in order, after trying them all."""
    loaded: list[Profile] = []
    lines: list[str] = []
    sets = _parsed(overrides)
    for path in paths:
        try:
            loaded.append(load_profile(path, overrides=sets))
        except ProfileError as exc:
            lines.extend(line for line in exc.problems if line not in lines)
    if lines:
        raise ProfileError(lines)
    return loaded
