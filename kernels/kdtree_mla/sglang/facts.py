"""What the server process says: the facts :func:`~.eligibility.decide` reads, from SGLang's
model runner and backend and from the device and the built extension."""

from __future__ import annotations

from typing import Any

from kdtree_mla.sglang.eligibility import ServerFacts


def gather_facts(
    backend: Any, model_runner: Any, version: str, *, fp8_kv: bool = False
) -> ServerFacts:
    """Read what :func:`~.eligibility.decide` needs from SGLang's objects."""
    import kdtree_mla

    kernel_error, kernel_archs = probe_kernel(getattr(model_runner, "gpu_id", None))
    model_config = model_runner.model_config
    server_args = model_runner.server_args
    use_mla = getattr(backend, "use_mla", None)
    if use_mla is None:  # 0.5.9 keeps it on the model runner only
        arch_name = getattr(getattr(model_config, "attention_arch", None), "name", "")
        use_mla = arch_name == "MLA"
    lora = getattr(model_config, "kv_lora_rank", None)
    rope = getattr(model_config, "qk_rope_head_dim", None)
    qk_head_dim = lora + rope if isinstance(lora, int) and isinstance(rope, int) else None
    sliding = getattr(backend, "sliding_window_size", None)
    return ServerFacts(
        sglang_version=version,
        kernel_version=str(kdtree_mla.__version__),
        kernel_error=kernel_error,
        arch=device_arch(model_runner),
        kernel_archs=kernel_archs,
        use_mla=bool(use_mla),
        qk_head_dim=qk_head_dim,
        v_head_dim=int_or_none(getattr(backend, "v_head_dim", None)),
        kv_cache_dtype=str(getattr(model_runner, "kv_cache_dtype", "unknown")),
        page_size=int(
            getattr(model_runner, "page_size", getattr(server_args, "page_size", 1)) or 1
        ),
        speculative=speculative(model_runner),
        num_draft_tokens=int_or_none(getattr(backend, "num_draft_tokens", None)),
        num_heads=int(backend.num_head),
        sliding_window=sliding is not None and sliding > 0,
        deterministic=bool(getattr(backend, "enable_deterministic", False)),
        verify_backend=verify_backend_name(model_runner),
        fp8_kv=fp8_kv,
    )


def probe_kernel(gpu: int | None = None) -> tuple[str | None, tuple[int, ...] | None]:
    """(why the extension is unusable on GPU ``gpu`` or None, the archs it was built for or None).

    Uses the API's ``load``/``compiled_archs``/``device_supported`` when present (the last one
    also checks that a kernel variant fits the device's shared memory).
    """
    try:
        from kdtree_mla import api

        api.load()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}", None
    archs: tuple[int, ...] | None = None
    compiled = getattr(api, "compiled_archs", None)
    if callable(compiled):
        try:
            # [] means "no build information": unknown, not "built for nothing".
            archs = tuple(int(str(a).removeprefix("sm_").rstrip("af")) for a in compiled()) or None
        except (TypeError, ValueError):
            archs = None
    supported = getattr(api, "device_supported", None)
    if callable(supported) and device_arch_index(gpu) is not None:
        ok, why = supported(device_arch_index(gpu))
        if not ok:
            return str(why), archs
    return None, archs


def device_arch_index(gpu: int | None) -> int | None:
    """The CUDA device index to probe, or None when no CUDA device is visible."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    return torch.cuda.current_device() if gpu is None else int(gpu)


def device_arch(model_runner: Any) -> int | None:
    """The model runner's GPU compute capability as digits (90, 120), None without CUDA."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    gpu = getattr(model_runner, "gpu_id", None)
    index = torch.cuda.current_device() if gpu is None else int(gpu)
    major, minor = torch.cuda.get_device_capability(index)
    return int(major) * 10 + int(minor)


def max_batch(model_runner: Any) -> int:
    # The largest verify batch the server can form: every running request at once. Graph
    # capture never exceeds it; init_cuda_graph_state grows the workspace if it did.
    pool = getattr(getattr(model_runner, "req_to_token_pool", None), "size", None)
    graph_bs = getattr(model_runner.server_args, "cuda_graph_max_bs", None)
    return max(int(pool or 1), int(graph_bs or 1))


def speculative(model_runner: Any) -> bool:
    algo = getattr(model_runner, "spec_algorithm", None)
    if algo is not None and callable(getattr(algo, "is_none", None)):
        return not algo.is_none()
    return bool(getattr(model_runner.server_args, "speculative_algorithm", None))


def verify_backend_name(model_runner: Any) -> str | None:
    mode = getattr(model_runner.server_args, "speculative_attention_mode", "prefill") or "prefill"
    name = getattr(model_runner, f"{mode}_attention_backend_str", None)
    if name is None:
        name = getattr(model_runner.server_args, "attention_backend", None)
    return None if name is None else str(name)


def int_or_none(value: Any) -> int | None:
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None


def cuda_device(device: Any) -> Any:
    import torch

    if device is None:
        return torch.device("cuda", torch.cuda.current_device())
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return dev
