"""Cross-field rules of a profile file: what no single field can say (the kdtree kernel
needs the triton backend, per-context thresholds name gated contexts, ...). Each section's
``_judge`` validator calls its function here once every field of the section is valid,
so a rule never reports a consequence of an earlier mistake; paths are relative to the
section. Pure functions of the validated values.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from kctl.profile.release import release_problems
from kctl.profile.rules import SIMULATOR_ENV, Found
from kctl.profile.secretnames import Hidden, looks_secret
from kctl.sglang.kernel_support import KDTREE_BACKEND

if TYPE_CHECKING:
    from kctl.profile.model import (
        GateSpec,
        HealthSpec,
        ImageSpec,
        RuntimeSpec,
        ServerSpec,
        SpeculativeSpec,
    )

#: the spellings of the model's own (bf16) KV cache for these models
BF16_KV_DTYPES = ("auto", "bf16", "bfloat16")
#: the KV cache dtypes the kdtree kernel reads (fp8 only on releases whose own Triton MLA
#: path reads fp8: :func:`kctl.launch.argv_problems` checks that per release)
KERNEL_KV_DTYPES: tuple[str, ...] = (*BF16_KV_DTYPES, "fp8_e4m3", "fp8_e5m2")


def image_problems(image: ImageSpec) -> list[Found]:
    found = release_problems(image)
    if not image.cuda_archs:
        return [*found, (("cuda_archs",), "must list at least one CUDA arch, e.g. ['12.0']", [])]
    if len(set(image.cuda_archs)) != len(image.cuda_archs):
        found.append(
            (
                ("cuda_archs",),
                "lists an arch twice; remove the duplicate",
                list(image.cuda_archs),
            )
        )
    return found


def _kernel_problems(s: ServerSpec) -> list[Found]:
    env = s.env_dict()
    found: list[Found] = []
    if s.verify_kernel != "kdtree":
        if env.get("KDTREE_VERIFY") == "1":
            found.append(
                (
                    ("env", "KDTREE_VERIFY"),
                    "switches the kdtree kernel on but server.verify_kernel is 'none'; set "
                    "server.verify_kernel: kdtree or remove the variable",
                    "1",
                )
            )
        if s.attention_backend == KDTREE_BACKEND:
            found.append(
                (
                    ("verify_kernel",),
                    "must be 'kdtree' with attention_backend 'kdtree' (the kernel's backend)",
                    s.verify_kernel,
                )
            )
        return found
    if s.attention_backend == KDTREE_BACKEND and env.get("KDTREE_VERIFY") == "1":
        found.append(
            (
                ("env", "KDTREE_VERIFY"),
                "switches on the kernel's startup hook, which attention_backend 'kdtree' (the "
                "plugin path) does not use and which declines there; remove the variable",
                "1",
            )
        )
    if s.attention_backend not in ("triton", KDTREE_BACKEND):
        found.append(
            (
                ("attention_backend",),
                "the kdtree verify kernel serves through SGLang's triton backend: set "
                "'kdtree' (its plugin backend, SGLang 0.5.11 and later) or 'triton' (the "
                "startup hook, with KDTREE_VERIFY=1), or set server.verify_kernel: none",
                s.attention_backend,
            )
        )
    if s.attention_backend == "triton" and env.get("KDTREE_VERIFY") != "1":
        found.append(
            (
                ("env", "KDTREE_VERIFY"),
                "server.verify_kernel is 'kdtree' on the triton backend, so the kernel's "
                "startup hook must be switched on: set server.env.KDTREE_VERIFY: '1' (or "
                "attention_backend: kdtree on SGLang 0.5.11 and later)",
                env.get("KDTREE_VERIFY"),
            )
        )
    if s.speculative is None:
        found.append(
            (
                ("speculative",),
                "server.verify_kernel 'kdtree' serves speculative target verification, which "
                "only runs with speculative decoding; configure server.speculative",
                None,
            )
        )
    if s.kv_cache_dtype not in KERNEL_KV_DTYPES:
        found.append(
            (
                ("kv_cache_dtype",),
                "the kdtree verify kernel reads a bf16 or fp8 (e4m3, e5m2) KV cache; set "
                "'auto', 'bf16', 'fp8_e4m3' or 'fp8_e5m2'",
                s.kv_cache_dtype,
            )
        )
    return found


def _speculative_problems(spec: SpeculativeSpec) -> list[Found]:
    found: list[Found] = []
    if spec.algorithm in ("EAGLE3", "STANDALONE") and spec.draft_model_path is None:
        found.append(
            (
                ("speculative", "draft_model_path"),
                f"is required for {spec.algorithm}: the draft model directory, e.g. "
                "'/models/Kimi-K26-eagle3'",
                None,
            )
        )
    if spec.eagle_topk == 1 and spec.num_draft_tokens != spec.num_steps + 1:
        found.append(
            (
                ("speculative", "num_draft_tokens"),
                f"must be num_steps + 1 ({spec.num_steps + 1}) when eagle_topk is 1 (SGLang "
                "would silently override it)",
                spec.num_draft_tokens,
            )
        )
    return found


def _secret_problems(s: ServerSpec) -> list[Found]:
    """A secret-looking variable in clear, or a variable set both ways."""
    found: list[Found] = []
    secrets = s.secrets_dict()
    for name, value in s.env:
        if name in secrets:
            found.append(
                (
                    ("env", name),
                    "is also in server.secrets; keep it in one place (server.secrets)",
                    Hidden(),
                )
            )
        elif value and looks_secret(name):
            found.append(
                (
                    ("env", name),
                    "looks like a secret and is written in clear; name where it lives "
                    f"instead: remove it here, set server.secrets.{name}.env: {name} and "
                    f"export {name} where kctl runs (or server.secrets.{name}.file: a file "
                    "only you can read)",
                    Hidden(),
                )
            )
    return found


def server_problems(s: ServerSpec) -> list[Found]:
    found = _kernel_problems(s) + _secret_problems(s)
    env = s.env_dict()
    for var, owner in SIMULATOR_ENV.items():
        if var in env:
            found.append((("env", var), f"is set by kctl from {owner}; set that instead", env[var]))
    if s.speculative is not None:
        found += _speculative_problems(s.speculative)
    return found


def health_problems(h: HealthSpec) -> list[Found]:
    found: list[Found] = []
    if h.poll_interval_s >= h.deadline_s:
        found.append(
            (
                ("poll_interval_s",),
                f"must be shorter than health.deadline_s ({h.deadline_s:g})",
                h.poll_interval_s,
            )
        )
    for i, pattern in enumerate(h.fatal_patterns):
        try:
            re.compile(pattern)
        except re.error as exc:
            found.append(
                (
                    ("fatal_patterns", i),
                    f"is not a valid regular expression ({exc}); escape special characters "
                    "with a backslash",
                    pattern,
                )
            )
    return found


def _named_contexts(
    pairs: tuple[tuple[int, float], ...], gated: set[int], where: tuple[str, ...], what: str
) -> list[Found]:
    return [
        (
            (*where, str(ctx)),
            f"names a context that gate.contexts does not measure; add it there or {what}",
            ctx,
        )
        for ctx, _ in pairs
        if ctx not in gated
    ]


def gate_problems(gate: GateSpec) -> list[Found]:
    found: list[Found] = []
    if not gate.contexts:
        found.append((("contexts",), "must list at least one context length", []))
    seen: set[int] = set()
    for i, c in enumerate(gate.contexts):
        if c in seen:
            found.append((("contexts", i), "is listed twice; remove the duplicate", c))
        seen.add(c)
    policy = gate.policy
    found += _named_contexts(
        policy.min_ratio_per_context,
        seen,
        ("policy", "min_ratio_per_context"),
        "remove this override",
    )
    if policy.objective is not None:
        if not policy.objective.weights:
            found.append(
                (
                    ("policy", "objective", "weights"),
                    "must weight at least one context, e.g. {5700: 0.6, 23000: 0.3, 91000: 0.1}",
                    {},
                )
            )
        found += _named_contexts(
            policy.objective.weights,
            seen,
            ("policy", "objective", "weights"),
            "remove the weight",
        )
    corr = gate.correctness
    if corr.max_mismatched_prompts > corr.prompts:
        found.append(
            (
                ("correctness", "max_mismatched_prompts"),
                f"must not exceed gate.correctness.prompts ({corr.prompts})",
                corr.max_mismatched_prompts,
            )
        )
    return found


def runtime_problems(runtime: RuntimeSpec) -> list[Found]:
    seen: set[str] = set()
    found: list[Found] = []
    for i, v in enumerate(runtime.volumes):
        if v.container in seen:
            found.append(
                (
                    ("volumes", i, "container"),
                    "is mounted twice; each container path may appear once",
                    v.container,
                )
            )
        seen.add(v.container)
    return found
