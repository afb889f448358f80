"""What an argv does to the settings kctl manages, whatever flag spells it.

A name check refuses every spelling of a flag kctl renders, but other flags reach the same
settings: ``--cuda-graph-config '{"decode": {"max_bs": 8}}'`` takes precedence over
``--cuda-graph-max-bs-decode``, ``--disable-decode-cuda-graph`` turns decode graphs off,
``--decode-attention-backend`` replaces the main backend in decode. :data:`SETTINGS` names
each managed setting and derives its value from the parsed arguments the way SGLang
resolves them (defaults, fallbacks, precedence), so two argvs that serve the same way
compare equal and any that serves differently does not.

:func:`effect_problems` parses kctl's own part of the argv with the release's parser, then
that part with each extra option added, and returns one :class:`Problem` (kind ``effect``)
per extra option that changes a setting, naming the flag, the setting, both values and the
fix the caller gives for that setting.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kctl.sglang._rebuild import ParserError
from kctl.sglang.argv.options import Problem, Resolved
from kctl.sglang.releases import Release

__all__ = ["SETTINGS", "Setting", "Span", "Values", "effect_problems", "settings_of"]


@dataclass(frozen=True)
class Span:
    """One extra option as the walk read it: its tokens ``argv[start:end]``."""

    start: int
    end: int
    name: str
    found: Resolved


class Values:
    """The parsed arguments read by option string: ``v("--tp-size")`` is the value of that
    flag's dest in this release (``tensor_parallel_size`` on 0.5.10, ``tp_size`` on 0.5.23),
    None where the release has no such flag."""

    def __init__(self, release: Release, namespace: argparse.Namespace) -> None:
        self.release = release
        self.ns = vars(namespace)

    def __call__(self, flag: str) -> Any:
        dest = self.release.dest_of(flag)
        return None if dest is None else self.ns.get(dest)

    def has(self, flag: str) -> bool:
        return self.release.has(flag)


@dataclass(frozen=True)
class Setting:
    """A setting kctl manages: ``key`` (what callers map to a fix), ``label`` (how a
    message names it) and ``derive`` (its value from the parsed arguments)."""

    key: str
    label: str
    derive: Callable[[Values], Any]
    #: a value never shown in a message (it would land in logs and terminals)
    secret: bool = False


def _json(raw: Any) -> Any:
    """A JSON argument as the value it means (unparsable text stays text, and differs)."""
    if raw is None or isinstance(raw, dict | list):
        return raw or {}
    try:
        return json.loads(raw) or {}
    except ValueError:
        return raw


def _phase_config(v: Values, phase: str) -> dict[str, Any]:
    cfg = _json(v("--cuda-graph-config"))
    section = cfg.get(phase) if isinstance(cfg, dict) else None
    if cfg and not isinstance(cfg, dict):
        return {"backend": f"unparsable --cuda-graph-config {cfg!r}"}
    return section if isinstance(section, dict) else {}


def _cuda_graph(v: Values, phase: str) -> dict[str, Any]:
    """One phase's CUDA graphs: ``backend`` and the sizes, with ``--cuda-graph-config``
    taking precedence over the single flags (SGLang 0.5.14 on); before 0.5.14, decode
    graphs are ``--disable-cuda-graph``/``--cuda-graph-max-bs``/``--cuda-graph-bs`` and
    prefill graphs the piecewise and breakable switches."""
    if not v.has("--cuda-graph-config"):
        off = bool(v("--disable-cuda-graph"))
        if phase == "decode":
            return {
                "backend": "disabled" if off else "default",
                "sizes": (v("--cuda-graph-max-bs"), v("--cuda-graph-bs")),
            }
        switches = (
            "--enable-piecewise-cuda-graph",
            "--disable-piecewise-cuda-graph",
            "--enforce-piecewise-cuda-graph",
            "--enable-breakable-cuda-graph",
        )
        return {
            "backend": (off, *(v(f) for f in switches)),
            "sizes": (v("--piecewise-cuda-graph-max-tokens"), v("--piecewise-cuda-graph-tokens")),
        }
    cfg = _phase_config(v, phase)
    if "backend" in cfg:
        backend = cfg["backend"]
    elif v(f"--disable-{phase}-cuda-graph") or v("--disable-cuda-graph"):
        backend = "disabled"
    else:
        backend = v(f"--cuda-graph-backend-{phase}") or "default"
    sizes: tuple[Any, ...] = (
        cfg["max_bs"] if "max_bs" in cfg else v(f"--cuda-graph-max-bs-{phase}"),
        cfg["bs"] if "bs" in cfg else v(f"--cuda-graph-bs-{phase}"),
    )
    if phase == "prefill":
        sizes += (v("--cuda-graph-max-seq-len-prefill"), v("--cuda-graph-prefill-max-context"))
    return {"backend": backend, "sizes": sizes}


def _backend(v: Values, flag: str) -> Any:
    """A phase's attention backend: its own flag, else the main ``--attention-backend``."""
    return v(flag) or v("--attention-backend")


#: every setting kctl manages beyond the flags it renders itself, in the order messages
#: list them
SETTINGS: tuple[Setting, ...] = (
    Setting("model", "the model served", lambda v: v("--model-path")),
    Setting("tokenizer", "the tokenizer", lambda v: v("--tokenizer-path") or v("--model-path")),
    Setting("revision", "the model revision", lambda v: v("--revision")),
    Setting("load_format", "how the weights load", lambda v: v("--load-format")),
    Setting(
        "model_override",
        "the model config override",
        lambda v: _json(v("--json-model-override-args")),
    ),
    Setting("tp", "tensor parallelism", lambda v: v("--tp-size")),
    Setting("dp", "data parallelism", lambda v: v("--dp-size")),
    Setting(
        "attn_dp",
        "attention data parallelism",
        lambda v: (v("--attn-dp-size"), bool(v("--enable-dp-attention"))),
    ),
    Setting("pp", "pipeline parallelism", lambda v: v("--pp-size")),
    Setting("attention_backend", "the attention backend", lambda v: v("--attention-backend")),
    Setting(
        "prefill_attention_backend",
        "the prefill attention backend",
        lambda v: _backend(v, "--prefill-attention-backend"),
    ),
    Setting(
        "decode_attention_backend",
        "the decode attention backend",
        lambda v: _backend(v, "--decode-attention-backend"),
    ),
    Setting(
        "draft_attention_backend",
        "the draft model's attention backend",
        lambda v: _backend(v, "--speculative-draft-attention-backend"),
    ),
    Setting(
        "speculative_attention_mode",
        "the speculative attention mode",
        lambda v: v("--speculative-attention-mode"),
    ),
    Setting(
        "draft_kv_cache_dtype",
        "the draft model's KV cache type",
        lambda v: v("--speculative-draft-kv-cache-dtype") or v("--kv-cache-dtype"),
    ),
    Setting(
        "speculative_adaptive",
        "adaptive speculative decoding",
        lambda v: (bool(v("--speculative-adaptive")), v("--speculative-adaptive-config")),
    ),
    Setting(
        "draft_model",
        "the draft model's weights",
        lambda v: (
            v("--speculative-draft-model-revision"),
            v("--speculative-draft-load-format"),
        ),
    ),
    Setting(
        "decode_cuda_graphs",
        "decode CUDA graphs",
        lambda v: _cuda_graph(v, "decode")["backend"],
    ),
    Setting(
        "decode_cuda_graph_sizes",
        "the decode CUDA-graph batch sizes",
        lambda v: _cuda_graph(v, "decode")["sizes"],
    ),
    Setting(
        "prefill_cuda_graphs",
        "prefill CUDA graphs",
        lambda v: _cuda_graph(v, "prefill")["backend"],
    ),
    Setting(
        "prefill_cuda_graph_sizes",
        "the prefill CUDA-graph sizes",
        lambda v: _cuda_graph(v, "prefill")["sizes"],
    ),
    Setting("api_key", "the API key", lambda v: v("--api-key"), secret=True),
)


def settings_of(release: Release, namespace: argparse.Namespace) -> dict[str, Any]:
    """Every setting's value from a parsed namespace, by key."""
    values = Values(release, namespace)
    return {s.key: s.derive(values) for s in SETTINGS}


def _parsed(
    parser: argparse.ArgumentParser, release: Release, argv: Sequence[str]
) -> dict[str, Any] | None:
    try:
        return settings_of(release, parser.parse_args(list(argv)))
    except ParserError:
        return None


def effect_problems(
    release: Release,
    argv: Sequence[str],
    own: int,
    spans: Sequence[Span],
    fixes: Mapping[str, str],
    extra_choices: Mapping[str, Collection[str]],
    skip: Collection[int] = (),
) -> list[Problem]:
    """A problem for each extra option (``spans``, at or after ``own``) that changes a
    setting in ``fixes`` from what ``argv[:own]`` gives it; ``fixes`` maps a
    :data:`SETTINGS` key to the fix to show. Spans starting at an index in ``skip``
    (already refused) are not judged again. Nothing is reported when kctl's own part does
    not parse on its own."""
    parser = release.parser(extra_choices)
    head = list(argv[:own])
    declared = _parsed(parser, release, head)
    if declared is None:
        return []
    by_key = {s.key: s for s in SETTINGS}
    out: list[Problem] = []
    for span in spans:
        if span.start < own or span.start in skip:
            continue
        got = _parsed(parser, release, [*head, *argv[span.start : span.end]])
        if got is None:
            continue
        for key, fix in fixes.items():
            if got[key] != declared[key]:
                out.append(_problem(span, by_key[key], got[key], declared[key], fix))
    return out


def _shown(value: Any) -> str:
    if value is None:
        return "the default"
    if isinstance(value, tuple):
        parts = [_shown(v) for v in value if v not in (None, False)]
        return ", ".join(parts) if parts else "the default"
    return repr(value)


def _problem(span: Span, setting: Setting, got: Any, declared: Any, fix: str) -> Problem:
    name, found = span.name, span.found
    how = f" (an abbreviation of {found.matches[0]})" if found.how == "abbreviation" else ""
    change = (
        f"sets {setting.label}"
        if setting.secret
        else f"changes {setting.label}: {_shown(got)} instead of the profile's {_shown(declared)}"
    )
    return Problem(
        name,
        f"{name}{how} {change}; the gate would judge one configuration and serve another",
        fix,
        "effect",
        index=span.start,
    )
