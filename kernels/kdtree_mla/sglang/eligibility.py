"""Pure decisions: may this server, and this one call, use the verify kernel? If not, why?

Two levels, both plain functions of plain values so they are tested by equality on a CPU:

* :func:`decide` runs once per attention backend, when SGLang builds it for the target model. It
  returns the :class:`Decision` that becomes the one activation or decline log line.
* :func:`call_refusal` runs on every ``extend_attention_fwd`` call of a target-verify step. It
  returns None when the kernel takes the call, else the reason it stays on SGLang's Triton kernel
  (a layer with a logit cap or a sliding window, say). It costs about a microsecond.

The kernel limits are repeated here (not imported from :mod:`kdtree_mla.api`, which imports
torch); the GPU tests check that they equal the API's.
"""

from __future__ import annotations

from dataclasses import dataclass

HEAD_DIM_QK = 576
HEAD_DIM_V = 512
MAX_DRAFT = 16
SUPPORTED_HEADS = (8, 16, 32, 64, 128)
#: Backend names that serve target verify through a Triton backend the router sits on: the
#: startup hook patches ``triton``; ``kdtree`` is the plugin's subclass of it.
VERIFY_BACKENDS = ("triton", "kdtree")
#: KV-cache dtypes the kernel reads (``str(torch.bfloat16)``).
SUPPORTED_KV_DTYPES = ("torch.bfloat16",)
#: fp8 KV caches the kernel reads with SGLang's per-layer descales, on releases whose own
#: Triton MLA path reads one (``ServerFacts.fp8_kv``).
FP8_KV_DTYPES = ("torch.float8_e4m3fn", "torch.float8_e5m2")


@dataclass(frozen=True)
class ServerFacts:
    """What the patch reads from SGLang's ``ModelRunner`` and the new ``TritonAttnBackend``.

    Attributes:
        sglang_version: SGLang's distribution version.
        kernel_version: ``kdtree_mla.__version__``.
        kernel_error: why the compiled extension did not load, or None when it loaded.
        arch: the GPU's compute capability as digits (90 for sm_90, 120 for sm_120), or None.
        kernel_archs: archs the extension was built for, or None when it does not say.
        use_mla: the model's attention is MLA (``AttentionArch.MLA``).
        qk_head_dim: ``kv_lora_rank + qk_rope_head_dim`` (576 for DeepSeek-V3 / Kimi K2), or None.
        v_head_dim: the KV pool's value width (512 for those models).
        kv_cache_dtype: ``str()`` of the KV pool dtype, e.g. ``"torch.bfloat16"``.
        page_size: the server's ``--page-size``.
        speculative: speculative decoding is on (there are target-verify steps at all).
        num_draft_tokens: ``--speculative-num-draft-tokens`` (tokens verified per request).
        num_heads: query heads per attention-TP rank.
        sliding_window: the model uses sliding-window attention.
        deterministic: ``--enable-deterministic-inference`` (SGLang then uses its unified kernel).
        verify_backend: the attention backend that serves target verify (``"triton"``...), or None
            when unknown.
        fp8_kv: the release's Triton MLA path reads an fp8 KV cache (scales K by ``k_scale``
            when storing, passes ``k_descale``/``v_descale``); then the kernel reads it too.
    """

    sglang_version: str
    kernel_version: str
    kernel_error: str | None
    arch: int | None
    kernel_archs: tuple[int, ...] | None
    use_mla: bool
    qk_head_dim: int | None
    v_head_dim: int | None
    kv_cache_dtype: str
    page_size: int
    speculative: bool
    num_draft_tokens: int | None
    num_heads: int
    sliding_window: bool
    deterministic: bool
    verify_backend: str | None
    fp8_kv: bool = False


@dataclass(frozen=True)
class Decision:
    """``active`` is True when target verify goes to the kernel; ``reason`` says why not."""

    active: bool
    reason: str = ""


ACTIVE = Decision(True)


def decide(facts: ServerFacts) -> Decision:
    """Whether the backend described by ``facts`` routes target verify to the kernel.

    The first failed condition wins, in the order a reader would check them: kernel, GPU,
    model, cache, server mode.
    """
    no = _Refuse()
    if facts.kernel_error is not None:
        return no(f"kdtree_mla extension not usable: {facts.kernel_error}")
    if facts.arch is None:
        return no("no CUDA device visible")
    if facts.kernel_archs is not None and facts.arch not in facts.kernel_archs:
        built = ",".join(f"sm_{a}" for a in facts.kernel_archs) or "none"
        return no(f"kdtree_mla was built for {built}, this GPU is sm_{facts.arch}")
    if facts.verify_backend is not None and facts.verify_backend not in VERIFY_BACKENDS:
        return no(f"target verify runs on the {facts.verify_backend} attention backend, not triton")
    if not facts.use_mla:
        return no("model attention is not MLA")
    if facts.qk_head_dim != HEAD_DIM_QK or facts.v_head_dim != HEAD_DIM_V:
        return no(
            f"MLA head dims are q {facts.qk_head_dim} / v {facts.v_head_dim}, "
            f"the kernel needs q {HEAD_DIM_QK} / v {HEAD_DIM_V}"
        )
    if facts.kv_cache_dtype in FP8_KV_DTYPES and not facts.fp8_kv:
        return no(
            f"KV cache dtype {facts.kv_cache_dtype}: sglang {facts.sglang_version}'s Triton MLA "
            "path does not read a quantised KV cache"
        )
    if facts.kv_cache_dtype not in (*SUPPORTED_KV_DTYPES, *FP8_KV_DTYPES):
        return no(f"KV cache dtype {facts.kv_cache_dtype} is not bf16 or fp8")
    if facts.page_size != 1:
        return no(f"page size {facts.page_size}, the kernel needs page size 1")
    if not facts.speculative:
        return no("speculative decoding is off: there is no target-verify step")
    if facts.num_draft_tokens is None or not 1 <= facts.num_draft_tokens <= MAX_DRAFT:
        return no(
            f"{facts.num_draft_tokens} draft tokens per request, the kernel takes 1..{MAX_DRAFT}"
        )
    if facts.num_heads not in SUPPORTED_HEADS:
        return no(f"{facts.num_heads} query heads per rank, the kernel takes {SUPPORTED_HEADS}")
    if facts.sliding_window:
        return no("sliding-window attention")
    if facts.deterministic:
        return no("deterministic inference uses SGLang's unified extend kernel")
    return ACTIVE


class _Refuse:
    def __call__(self, reason: str) -> Decision:
        return Decision(False, reason)


def call_refusal(
    *,
    q_shape: tuple[int, ...],
    o_shape: tuple[int, ...],
    kv_buffer_shape: tuple[int, ...],
    kv_dtype: str,
    has_custom_mask: bool,
    is_causal: bool,
    logit_cap: float,
    sliding_window_size: int,
    has_sinks: bool,
    has_window_offsets: bool,
    xai_temperature_len: int,
    k_scale: float,
    v_scale: float,
    max_tokens: int,
    max_batch: int,
    batch: int,
    fp8_ok: bool = False,
) -> str | None:
    """None when one ``extend_attention_fwd`` call of a verify step can go to the kernel.

    Otherwise the reason it stays on SGLang's kernel. Everything here is known from shapes and
    Python scalars, so the check never synchronises with the GPU.
    """
    if len(q_shape) != 3 or q_shape[-1] != HEAD_DIM_QK:
        return f"q shape {q_shape}"
    if len(o_shape) != 3 or o_shape[-1] != HEAD_DIM_V:
        return f"o shape {o_shape}"
    if len(kv_buffer_shape) != 3 or kv_buffer_shape[1] != 1 or kv_buffer_shape[2] != HEAD_DIM_QK:
        return f"KV buffer shape {kv_buffer_shape}"
    fp8 = fp8_ok and kv_dtype in FP8_KV_DTYPES
    if kv_dtype not in SUPPORTED_KV_DTYPES and not fp8:
        return f"KV buffer dtype {kv_dtype}"
    if not has_custom_mask or not is_causal:
        return "no tree mask (not a target-verify call)"
    if logit_cap != 0:
        return f"logit cap {logit_cap}"
    if sliding_window_size is not None and sliding_window_size >= 0:
        return f"sliding window {sliding_window_size}"
    if has_sinks or has_window_offsets:
        return "attention sinks / window offsets"
    if xai_temperature_len is not None and xai_temperature_len > 0:
        return "xai temperature"
    if not fp8 and (k_scale != 1.0 or v_scale != 1.0):
        return "scaled (quantised) KV"
    if q_shape[0] > max_tokens or batch > max_batch:
        return f"batch {batch} / {q_shape[0]} tokens exceeds the workspace ({max_batch} / {max_tokens})"
    return None
