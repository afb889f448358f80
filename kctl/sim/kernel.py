"""Which verify-attention path the simulated server runs, and the kernel activation log
line it prints, under the same conditions as the real SGLang startup hook (issue 5):

- ``KDTREE_VERIFY`` not exactly ``1``: no line, SGLang's Triton path.
- ``1``, and there is a target-verify step on the triton backend (speculative decoding on,
  1..16 draft tokens, bf16 KV cache or fp8 where the release reads one, page size 1): the
  *active* line, kdtree path.
- ``1``, otherwise (or the ``kernel_declined`` fault): the *declined* line, Triton path.

The conditions and reasons mirror ``kdtree_mla.sglang.eligibility.decide`` for what a
launch command can show (the GPU and model checks always pass here).

The line formats are a shared contract; kctl's health check matches
``kdtree-verify: active\\b`` and ``kdtree-verify: declined\\b``.
"""

from __future__ import annotations

from dataclasses import dataclass

from kctl.sim.args import ServerArgs
from kctl.sim.settings import Settings

KERNEL_NAME = "kdtree_mla"
#: version the simulator claims for the kernel package
KERNEL_VERSION = "0.1.0"
#: RTX PRO 6000 Blackwell, the simulated GPU
ARCH = "sm_120"
#: KV cache dtypes on which the kernel serves: bf16, and fp8 on releases whose own Triton
#: MLA path reads an fp8 cache (0.5.13 on); other quantised caches stay on SGLang
BF16_KV_DTYPES = ("auto", "bf16", "bfloat16")
FP8_KV_DTYPES = ("fp8_e4m3", "fp8_e5m2")
#: most draft tokens per request the kernel takes
MAX_DRAFT = 16


@dataclass(frozen=True)
class VerifyChoice:
    """The verify path chosen at startup and the log line announcing it (None: no line)."""

    path: str  # "triton" | "kdtree"
    line: str | None
    declined_reason: str | None = None


def active_line(sglang_version: str, path: str = "startup-hook") -> str:
    """``path``: ``plugin`` (``--attention-backend kdtree``) or ``startup-hook``."""
    return (
        f"kdtree-verify: active kernel={KERNEL_NAME}-{KERNEL_VERSION} arch={ARCH} "
        f"sglang={sglang_version} path={path}"
    )


def _path_reason(backend: str, version: str) -> str | None:
    """Why the release refuses the path ``backend`` takes: the startup hook declines on
    releases with plugin entry points (0.5.11 on), as the real kernel does."""
    from kctl.sglang.kernel_support import kernel_choices
    from kctl.sglang.releases import release

    if backend == "triton" and kernel_choices(release(version)):
        return (
            f"sglang {version} has the plugin framework: on 0.5.11 and later select the "
            "kernel with --attention-backend kdtree"
        )
    return None


def _kv_reason(kv_cache_dtype: str, version: str) -> str | None:
    """Why the kernel declines the KV cache: fp8 only where the release's own Triton MLA
    path reads it (as the real router decides from the release's source), nothing else
    but bf16."""
    from kctl.sglang.kernel_support import reads_fp8_mla
    from kctl.sglang.releases import release

    if kv_cache_dtype in FP8_KV_DTYPES:
        if reads_fp8_mla(release(version)):
            return None
        return (
            f"KV cache dtype {kv_cache_dtype}: sglang {version}'s Triton MLA path does not "
            "read a quantised KV cache"
        )
    if kv_cache_dtype not in BF16_KV_DTYPES:
        return f"KV cache dtype {kv_cache_dtype} is not bf16 or fp8"
    return None


def declined_line(reason: str, sglang_version: str) -> str:
    # the reason is quoted, so it must not carry a double quote itself
    safe = reason.replace('"', "'")
    return f'kdtree-verify: declined reason="{safe}" sglang={sglang_version}'


def choose(args: ServerArgs, settings: Settings) -> VerifyChoice:
    """Decide the verify path from the launch args and env (pure)."""
    backend = args.effective_attention_backend
    # the kernel serves through its own plugin backend, or the startup hook switched on
    if not settings.kdtree_verify and backend != "kdtree":
        return VerifyChoice(path="triton", line=None)
    version = settings.sglang_version
    reason: str | None = None
    if settings.has("kernel_declined"):
        reason = "simulated decline (KCTL_SIM_FAULT=kernel_declined)"
    elif backend not in ("triton", "kdtree"):
        reason = f"target verify runs on the {backend} attention backend, not triton"
    elif (hook := _path_reason(backend, version)) is not None:
        reason = hook
    elif (kv := _kv_reason(args.kv_cache_dtype, version)) is not None:
        reason = kv
    elif args.page_size != 1:
        reason = f"page size {args.page_size}, the kernel needs page size 1"
    elif not args.speculative:
        reason = "speculative decoding is off: there is no target-verify step"
    elif not 1 <= args.num_draft_tokens <= MAX_DRAFT:
        reason = (
            f"{args.num_draft_tokens} draft tokens per request, the kernel takes 1..{MAX_DRAFT}"
        )
    if reason is not None:
        return VerifyChoice(
            path="triton", line=declined_line(reason, version), declined_reason=reason
        )
    path = "plugin" if backend == "kdtree" else "startup-hook"
    return VerifyChoice(path="kdtree", line=active_line(version, path))
