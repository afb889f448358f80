"""Turn a merged profile mapping into the frozen :class:`~kctl.profile.model.Profile`,
collecting every problem instead of stopping at the first.

The schema is the model itself: keys and types come from the dataclasses' fields and
type hints, so a field added to :mod:`kctl.profile.model` is accepted (and type-checked)
here without further work. What the type alone cannot say (ranges, choices, patterns)
lives in :data:`RULES`, keyed by the dotted field path; cross-field rules (the kernel
needs the triton backend, per-context thresholds name gated contexts...) run last, once
every field is individually valid, so they never report a consequence of an earlier
problem.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import types
import typing
from collections.abc import Callable
from typing import Any, Literal, Union

from kctl.profile.model import (
    GateSpec,
    ImageSpec,
    ObjectiveSpec,
    PolicySpec,
    Profile,
    ServerSpec,
    VolumeSpec,
)
from kctl.profile.rules import (
    INVALID,
    MANAGED_FLAGS,
    MAPS,
    RULES,
    SIMULATOR_ENV,
    Rule,
    choices_text,
    is_int,
    is_num,
)

#: a field path: mapping keys as str, list indices as int
FieldPath = tuple[str | int, ...]


def format_path(path: FieldPath) -> str:
    """``("gate", "contexts", 1)`` -> ``gate.contexts[1]``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out or "(top level)"


def _got(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class Problems:
    """Collects problem lines ``<file>: <field>: <what and fix> (got <value>)``.

    ``origin`` maps a field path to the file that set it, so a mistake inherited through
    ``extends:`` names the file that has to be edited."""

    def __init__(self, origin: Callable[[FieldPath], str]) -> None:
        self.origin = origin
        self.lines: list[str] = []
        #: paths that failed, so cross-field rules can stay quiet about them
        self.bad: set[str] = set()

    def add(self, path: FieldPath, what: str, value: Any) -> None:
        self.lines.append(f"{self.origin(path)}: {format_path(path)}: {what} (got {_got(value)})")
        self.bad.add(format_path(path))

    def raw(self, line: str) -> None:
        self.lines.append(line)

    def __bool__(self) -> bool:
        return bool(self.lines)


def _rule_key(path: FieldPath) -> str:
    return format_path(tuple("[]" if isinstance(p, int) else p for p in path)).replace(".[]", "[]")


# -- the converter -----------------------------------------------------------------------


class _Builder:
    def __init__(self, problems: Problems) -> None:
        self.p = problems

    def dataclass(
        self,
        cls: type,
        data: Any,
        path: FieldPath,
        fixed: dict[str, Any] | None = None,
        also_valid: tuple[str, ...] = (),
    ) -> Any:
        """Build ``cls`` from a mapping; unknown keys, missing required keys and bad values
        are reported. Returns INVALID when a required field is missing or invalid."""
        if not isinstance(data, dict):
            self.p.add(path, f"must be a mapping of {', '.join(_field_names(cls))}", data)
            return INVALID
        hints = typing.get_type_hints(cls)
        fields = {f.name: f for f in dataclasses.fields(cls)}
        settable = [n for n in fields if not (fixed and n in fixed)]
        kwargs: dict[str, Any] = dict(fixed or {})
        ok = True
        for key, value in data.items():
            kpath = (*path, str(key))
            if key not in settable:
                # keys the loader consumed still count when suggesting a spelling
                self.p.add(kpath, _unknown(str(key), [*also_valid, *settable]), value)
                continue
            conv = self.value(hints[key], value, kpath)
            if conv is INVALID:
                ok = ok and _has_default(fields[key])
                continue
            kwargs[key] = conv
        for name in settable:
            if name not in data and not _has_default(fields[name]):
                self.p.add((*path, name), "is required", None)
                ok = False
        return cls(**kwargs) if ok else INVALID

    def value(self, tp: Any, value: Any, path: FieldPath) -> Any:
        key = _rule_key(path)
        if key in MAPS:
            return self.mapping(value, path, *MAPS[key])
        if key == "runtime.gpus":
            return self.gpus(value, path)
        origin = typing.get_origin(tp)
        args = typing.get_args(tp)
        if origin in (Union, types.UnionType):
            inner = [a for a in args if a is not type(None)]
            if value is None and len(inner) < len(args):
                return None
            return self.value(inner[0], value, path)
        if origin is tuple:
            return self.sequence(args[0], value, path)
        if dataclasses.is_dataclass(tp):
            return self.dataclass(tp, value, path)  # type: ignore[arg-type]
        if key in RULES:
            conv, msg = RULES[key]
            out = conv(value)
            if out is INVALID:
                self.p.add(path, msg, value)
            return out
        if origin is Literal:
            if value in args and isinstance(value, str):
                return value
            self.p.add(path, "must be one of " + choices_text(args), value)
            return INVALID
        return self.plain(tp, value, path)

    def plain(self, tp: Any, value: Any, path: FieldPath) -> Any:
        if tp is bool:
            if isinstance(value, bool):
                return value
            self.p.add(path, "must be true or false", value)
        elif tp is int:
            if is_int(value):
                return value
            self.p.add(path, "must be an integer", value)
        elif tp is float:
            if is_num(value):
                return float(value)
            self.p.add(path, "must be a number", value)
        elif tp is str:
            if isinstance(value, str):
                return value
            self.p.add(path, "must be a string", value)
        else:  # pragma: no cover - a model field of a type this builder does not know
            raise TypeError(f"profile field {format_path(path)} has unsupported type {tp!r}")
        return INVALID

    def sequence(self, item_tp: Any, value: Any, path: FieldPath) -> Any:
        if not isinstance(value, list):
            self.p.add(path, "must be a list", value)
            return INVALID
        items = [self.value(item_tp, v, (*path, i)) for i, v in enumerate(value)]
        return INVALID if any(i is INVALID for i in items) else tuple(items)

    def mapping(self, value: Any, path: FieldPath, key_rule: Rule, value_rule: Rule) -> Any:
        if not isinstance(value, dict):
            self.p.add(path, "must be a mapping", value)
            return INVALID
        out: list[tuple[Any, Any]] = []
        ok = True
        for k, v in value.items():
            kpath = (*path, str(k))
            if key_rule[0](k) is INVALID:
                self.p.add(kpath, key_rule[1], k)
                ok = False
                continue
            if v is None and _rule_key(path) == "server.env":
                continue  # an inherited variable removed by this profile
            conv = value_rule[0](v)
            if conv is INVALID:
                self.p.add(kpath, value_rule[1], v)
                ok = False
                continue
            out.append((k, conv))
        # sorted so that the resolved profile (and its hash) ignores key order
        return tuple(sorted(out)) if ok else INVALID

    def gpus(self, value: Any, path: FieldPath) -> Any:
        if value == "all":
            return "all"
        if (
            isinstance(value, list)
            and all(is_int(v) and v >= 0 for v in value)
            and len(set(value)) == len(value)
        ):
            return tuple(value)
        self.p.add(
            path,
            "must be 'all' or a list of distinct GPU indices, e.g. [0, 1] ([] for no GPUs)",
            value,
        )
        return INVALID


def _has_default(f: dataclasses.Field[Any]) -> bool:
    return f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING


def _field_names(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def _unknown(key: str, valid: list[str]) -> str:
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    if close:
        return f"unknown key; did you mean {close[0]!r}?"
    return "unknown key; valid keys: " + ", ".join(valid)


# -- entry point -------------------------------------------------------------------------


def build_profile(
    data: dict[str, Any], problems: Problems, *, name: str, source: str, baseline: str | None
) -> Profile | None:
    """Build the profile from the merged mapping (``extends`` and ``x-`` keys already
    removed); None when there were problems (they are in ``problems``)."""
    body = {k: v for k, v in data.items() if k not in ("name", "baseline")}
    # name and baseline were resolved by the loader; validate the name as written
    if "name" in data:
        _Builder(problems).value(str, data["name"], ("name",))
    fixed = {"name": name, "source": source, "baseline": baseline, "content_hash": ""}
    profile = _Builder(problems).dataclass(
        Profile, body, (), fixed=fixed, also_valid=("extends", "name", "baseline")
    )
    if profile is INVALID:
        return None
    if not profile.server.model_path and "server.model_path" not in problems.bad:
        # the model's default is "" so that the dataclass can be built; a file must say it
        problems.add(("server", "model_path"), RULES["server.model_path"][1], "")
    if problems:
        return None
    _cross_checks(profile, problems)
    return None if problems else profile


def _cross_checks(profile: Profile, p: Problems) -> None:
    s: ServerSpec = profile.server
    env = s.env_dict()
    if s.verify_kernel == "kdtree":
        if s.attention_backend != "triton":
            p.add(
                ("server", "attention_backend"),
                "the kdtree verify kernel patches SGLang's "
                "triton backend only; set 'triton' or set server.verify_kernel: none",
                s.attention_backend,
            )
        if env.get("KDTREE_VERIFY") != "1":
            p.add(
                ("server", "env", "KDTREE_VERIFY"),
                "server.verify_kernel is 'kdtree', so "
                "the kernel must be switched on: set server.env.KDTREE_VERIFY: '1'",
                env.get("KDTREE_VERIFY"),
            )
        if s.speculative is None:
            p.add(
                ("server", "speculative"),
                "server.verify_kernel 'kdtree' serves speculative "
                "target verification, which only runs with speculative decoding; configure "
                "server.speculative",
                None,
            )
        if s.kv_cache_dtype not in ("auto", "bf16", "bfloat16"):
            p.add(
                ("server", "kv_cache_dtype"),
                "the kdtree verify kernel reads a bf16 KV cache only; set 'auto' or 'bf16'",
                s.kv_cache_dtype,
            )
    elif env.get("KDTREE_VERIFY") == "1":
        p.add(
            ("server", "env", "KDTREE_VERIFY"),
            "switches the kdtree kernel on but "
            "server.verify_kernel is 'none'; set server.verify_kernel: kdtree or remove the "
            "variable",
            "1",
        )
    for var, field_name in SIMULATOR_ENV.items():
        if var in env:
            p.add(
                ("server", "env", var),
                f"is set by kctl from {field_name}; set that instead",
                env[var],
            )
    managed = set(MANAGED_FLAGS)
    for i, arg in enumerate(s.extra_args):
        flag = arg.split("=", 1)[0]
        if flag in managed:
            p.add(
                ("server", "extra_args", i),
                "is derived from a typed server field; set that "
                "field instead of passing the flag in extra_args",
                arg,
            )
    spec = s.speculative
    if spec is not None:
        if spec.algorithm in ("EAGLE3", "STANDALONE") and spec.draft_model_path is None:
            p.add(
                ("server", "speculative", "draft_model_path"),
                f"is required for "
                f"{spec.algorithm}: the draft model directory, e.g. "
                "'/models/Kimi-K26-eagle3'",
                None,
            )
        if spec.eagle_topk == 1 and spec.num_draft_tokens != spec.num_steps + 1:
            p.add(
                ("server", "speculative", "num_draft_tokens"),
                "must be num_steps + 1 "
                f"({spec.num_steps + 1}) when eagle_topk is 1 (SGLang would silently "
                "override it)",
                spec.num_draft_tokens,
            )
    _gate_checks(profile.gate, p)
    _image_checks(profile.image, p)
    _volume_checks(profile.runtime.volumes, p)
    if profile.health.poll_interval_s >= profile.health.deadline_s:
        p.add(
            ("health", "poll_interval_s"),
            f"must be shorter than health.deadline_s ({profile.health.deadline_s:g})",
            profile.health.poll_interval_s,
        )
    for i, pattern in enumerate(profile.health.fatal_patterns):
        try:
            re.compile(pattern)
        except re.error as exc:
            p.add(
                ("health", "fatal_patterns", i),
                f"is not a valid regular expression "
                f"({exc}); escape special characters with a backslash",
                pattern,
            )


def _gate_checks(gate: GateSpec, p: Problems) -> None:
    if not gate.contexts:
        p.add(("gate", "contexts"), "must list at least one context length", [])
    seen: set[int] = set()
    for i, c in enumerate(gate.contexts):
        if c in seen:
            p.add(("gate", "contexts", i), "is listed twice; remove the duplicate", c)
        seen.add(c)
    policy: PolicySpec = gate.policy
    for ctx, _ in policy.min_ratio_per_context:
        if ctx not in seen:
            p.add(
                ("gate", "policy", "min_ratio_per_context", str(ctx)),
                "names a context that "
                "gate.contexts does not measure; add it there or remove this override",
                ctx,
            )
    obj: ObjectiveSpec | None = policy.objective
    if obj is not None:
        if not obj.weights:
            p.add(
                ("gate", "policy", "objective", "weights"),
                "must weight at least one context, e.g. {5700: 0.6, 23000: 0.3, 91000: 0.1}",
                {},
            )
        for ctx, _ in obj.weights:
            if ctx not in seen:
                p.add(
                    ("gate", "policy", "objective", "weights", str(ctx)),
                    "names a context "
                    "that gate.contexts does not measure; add it there or remove the weight",
                    ctx,
                )
    corr = gate.correctness
    if corr.max_mismatched_prompts > corr.prompts:
        p.add(
            ("gate", "correctness", "max_mismatched_prompts"),
            f"must not exceed gate.correctness.prompts ({corr.prompts})",
            corr.max_mismatched_prompts,
        )


def _image_checks(image: ImageSpec, p: Problems) -> None:
    if not image.cuda_archs:
        p.add(("image", "cuda_archs"), "must list at least one CUDA arch, e.g. ['12.0']", [])
    elif len(set(image.cuda_archs)) != len(image.cuda_archs):
        p.add(
            ("image", "cuda_archs"),
            "lists an arch twice; remove the duplicate",
            list(image.cuda_archs),
        )


def _volume_checks(volumes: tuple[VolumeSpec, ...], p: Problems) -> None:
    seen: set[str] = set()
    for i, v in enumerate(volumes):
        if v.container in seen:
            p.add(
                ("runtime", "volumes", i, "container"),
                "is mounted twice; each container path may appear once",
                v.container,
            )
        seen.add(v.container)
