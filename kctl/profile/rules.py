"""What the model's types cannot say about a profile field: ranges, choices, patterns,
and the SGLang 0.5.10 vocabularies they come from. Keyed by dotted field path ("[]" for
list items) and used by :mod:`kctl.profile.validate`.

Each rule is ``(convert, message)``: ``convert`` returns the value to store, or
:data:`INVALID`; ``message`` says what is expected and how to fix it, since the same
line has to serve a wrong type and an out-of-range value alike.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

INVALID = object()

#: SGLang 0.5.10 ``--attention-backend`` choices (sglang/srt/server_args.py)
ATTENTION_BACKENDS = (
    "triton",
    "torch_native",
    "flex_attention",
    "nsa",
    "cutlass_mla",
    "fa3",
    "fa4",
    "flashinfer",
    "flashmla",
    "trtllm_mla",
    "trtllm_mha",
    "dual_chunk_flash_attn",
    "aiter",
    "wave",
    "intel_amx",
    "ascend",
    "intel_xpu",
)
#: SGLang 0.5.10 ``--kv-cache-dtype`` choices
KV_CACHE_DTYPES = ("auto", "fp8_e5m2", "fp8_e4m3", "bf16", "bfloat16", "fp4_e2m1")
#: SGLang 0.5.10 ``--speculative-algorithm`` choices
SPECULATIVE_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")
#: flags kctl derives from typed fields; ``extra_args`` must not repeat them
MANAGED_FLAGS = (
    "--model-path",
    "--served-model-name",
    "--host",
    "--port",
    "--tp-size",
    "--tp",
    "--attention-backend",
    "--disable-cuda-graph",
    "--cuda-graph-max-bs",
    "--mem-fraction-static",
    "--trust-remote-code",
    "--kv-cache-dtype",
    "--speculative-algorithm",
    "--speculative-draft-model-path",
    "--speculative-num-steps",
    "--speculative-eagle-topk",
    "--speculative-num-draft-tokens",
)
#: env the ``simulator:`` section owns (see :func:`kctl.launch.launch_spec`)
SIMULATOR_ENV = {"KCTL_SIM_SPEEDUP": "simulator.speedup", "KCTL_SIM_LOAD_S": "simulator.load_s"}

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# TORCH_CUDA_ARCH_LIST entries: "12.0", "9.0a", "10.0f", "8.6+PTX"
_CUDA_ARCH = re.compile(r"^\d{1,2}\.\d[af]?(\+PTX)?$")
# docker's size syntax for --shm-size
_DOCKER_SIZE = re.compile(r"^\d+[bkmgBKMG]?$")

# -- scalar rules ------------------------------------------------------------------------

#: a rule returns the converted value, or INVALID when it does not apply
Rule = tuple[Callable[[Any], Any], str]


def is_int(v: Any) -> bool:
    # YAML gives True/False for yes/no; a bool is never a count
    return isinstance(v, int) and not isinstance(v, bool)


def is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _int(lo: int | None = None, hi: int | None = None) -> Callable[[Any], Any]:
    def conv(v: Any) -> Any:
        if not is_int(v) or (lo is not None and v < lo) or (hi is not None and v > hi):
            return INVALID
        return v

    return conv


def _num(
    lo: float | None = None,
    hi: float | None = None,
    *,
    lo_open: bool = False,
    hi_open: bool = False,
) -> Callable[[Any], Any]:
    def conv(v: Any) -> Any:
        if not is_num(v) or v != v:  # NaN compares unequal to itself
            return INVALID
        f = float(v)
        if lo is not None and (f < lo or (lo_open and f == lo)):
            return INVALID
        if hi is not None and (f > hi or (hi_open and f == hi)):
            return INVALID
        return f

    return conv


def _str(pattern: re.Pattern[str] | None = None, *, nonempty: bool = False) -> Callable[[Any], Any]:
    def conv(v: Any) -> Any:
        if not isinstance(v, str) or (nonempty and not v.strip()):
            return INVALID
        if pattern is not None and not pattern.match(v):
            return INVALID
        return v

    return conv


def _choice(choices: tuple[str, ...]) -> Callable[[Any], Any]:
    return lambda v: v if isinstance(v, str) and v in choices else INVALID


def choices_text(choices: tuple[str, ...]) -> str:
    return ", ".join(repr(c) for c in choices)


_POS_INT: Rule = (_int(lo=1), "must be a positive integer")
_NONNEG_INT: Rule = (_int(lo=0), "must be an integer >= 0")
_POS_NUM: Rule = (_num(lo=0, lo_open=True), "must be a positive number")
_NONNEG_NUM: Rule = (_num(lo=0), "must be a number >= 0")

#: rules by dotted field path ("[]" for list items); fields not named here get the
#: plain type check their model annotation implies
RULES: dict[str, Rule] = {
    "name": (
        _str(re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")),
        "must be letters, digits, '.', '_' or '-', starting with a letter or digit",
    ),
    "image.base": (
        _str(nonempty=True),
        "must be an image reference, e.g. 'lmsysorg/sglang:v0.5.10-cu130'",
    ),
    "image.kernel_source": (
        _str(nonempty=True),
        "must be a directory relative to the repository root, e.g. "
        "'kernels', or null for no kernel",
    ),
    "image.cuda_archs[]": (
        _str(_CUDA_ARCH),
        "must be a CUDA arch as TORCH_CUDA_ARCH_LIST "
        "spells it, a quoted string such as '12.0' (sm_120) or '9.0a'",
    ),
    "server.model_path": (
        _str(nonempty=True),
        "is required: the model directory as the server sees it, e.g. '/models/Kimi-K2.6'",
    ),
    "server.served_model_name": (_str(nonempty=True), "must be a non-empty string or null"),
    "server.host": (
        _str(nonempty=True),
        "must be an address to bind, e.g. '127.0.0.1' or '0.0.0.0'",
    ),
    "server.port": (_int(lo=1, hi=65535), "must be a TCP port between 1 and 65535"),
    "server.tp": _POS_INT,
    "server.attention_backend": (
        _choice(ATTENTION_BACKENDS),
        "must be one of SGLang 0.5.10's attention backends: " + choices_text(ATTENTION_BACKENDS),
    ),
    "server.cuda_graph_max_bs": (
        _int(lo=1),
        "must be a positive integer or null (SGLang picks it from the GPU memory)",
    ),
    "server.mem_fraction_static": (
        _num(lo=0, hi=1, lo_open=True, hi_open=True),
        "must be a fraction between 0 and 1 (exclusive), e.g. 0.85, or null for SGLang's default",
    ),
    "server.kv_cache_dtype": (
        _choice(KV_CACHE_DTYPES),
        "must be one of " + choices_text(KV_CACHE_DTYPES),
    ),
    "server.speculative.algorithm": (
        _choice(SPECULATIVE_ALGORITHMS),
        "must be one of " + choices_text(SPECULATIVE_ALGORITHMS),
    ),
    "server.speculative.draft_model_path": (
        _str(nonempty=True),
        "must be a non-empty path or null",
    ),
    "server.speculative.num_steps": _POS_INT,
    "server.speculative.eagle_topk": _POS_INT,
    "server.speculative.num_draft_tokens": _POS_INT,
    "server.extra_args[]": (
        _str(nonempty=True),
        "must be a non-empty string; quote numbers, e.g. ['--max-running-requests', '48']",
    ),
    "runtime.shm_size": (_str(_DOCKER_SIZE), "must be a size as docker writes it, e.g. '32g'"),
    "runtime.stop_timeout_s": _POS_NUM,
    "runtime.retain": _NONNEG_INT,
    "runtime.volumes[].host": (
        _str(re.compile(r"^/")),
        "must be an absolute host path, e.g. '/models'",
    ),
    "runtime.volumes[].container": (
        _str(re.compile(r"^/")),
        "must be an absolute path inside the container, e.g. '/models'",
    ),
    "health.deadline_s": _POS_NUM,
    "health.poll_interval_s": _POS_NUM,
    "health.request_timeout_s": _POS_NUM,
    "health.fatal_patterns[]": (_str(nonempty=True), "must be a non-empty regular expression"),
    "gate.contexts[]": _POS_INT,
    "gate.output_tokens": _POS_INT,
    "gate.repeats": _POS_INT,
    "gate.warmup": _NONNEG_INT,
    "gate.concurrency": (
        _int(lo=1),
        "must be a positive integer, or null for one request at a time",
    ),
    "gate.request_timeout_s": _POS_NUM,
    "gate.seed": _NONNEG_INT,
    "gate.policy.min_ratio": (
        _num(lo=0, lo_open=True),
        "must be a ratio > 0 (candidate tok/s over baseline tok/s; 1.0 = no slower)",
    ),
    "gate.policy.objective.min_ratio": (_num(lo=0, lo_open=True), "must be a ratio > 0"),
    "gate.policy.baseline_max_age_s": _POS_NUM,
    "gate.policy.max_extra_repeats": _NONNEG_INT,
    "gate.policy.min_completed_fraction": (
        _num(lo=0, hi=1, lo_open=True),
        "must be a fraction in (0, 1], e.g. 1.0",
    ),
    "gate.correctness.prompts": _NONNEG_INT,
    "gate.correctness.tokens": _POS_INT,
    "gate.correctness.max_mismatched_prompts": _NONNEG_INT,
    "simulator.speedup": (
        _num(lo=1),
        "must be a number >= 1 (how many times faster than real time the simulator runs)",
    ),
    "simulator.load_s": _NONNEG_NUM,
}

#: mappings whose keys are data, not field names: path -> (key rule, value rule, key hint)
MAPS: dict[str, tuple[Rule, Rule]] = {
    "server.env": (
        (_str(_ENV_NAME), "must be an environment variable name ([A-Za-z_][A-Za-z0-9_]*)"),
        (
            _str(),
            "must be a string; quote it in YAML, e.g. '1' (null removes an inherited variable)",
        ),
    ),
    "gate.policy.min_ratio_per_context": (
        (_int(lo=1), "keys must be context lengths in tokens (positive integers)"),
        (_num(lo=0, lo_open=True), "must be a ratio > 0"),
    ),
    "gate.policy.objective.weights": (
        (_int(lo=1), "keys must be context lengths in tokens (positive integers)"),
        (_num(lo=0, lo_open=True), "must be a positive weight (share of traffic)"),
    ),
}
