"""What kctl's kdtree kernel can do on an SGLang release: the attention backend name it
registers, where the release lets it register one, and whether the release's own Triton MLA
path (and so the kernel on it) reads an fp8 KV cache. Derived from the release table
(:mod:`kctl.sglang.releases`)."""

from __future__ import annotations

from kctl.sglang.releases import Release, version_key

#: the attention backend kctl's kernel package registers through SGLang's plugin API
KDTREE_BACKEND = "kdtree"


def kernel_choices(rel: Release) -> dict[str, list[str]]:
    """Choices kctl's kernel package adds to ``rel``'s parser (by dest): the ``kdtree``
    attention backend, registered through the ``sglang.srt.plugins`` entry points where
    the release has them and its attention registry; nothing on older releases."""
    hooks = rel.hooks
    if hooks.has_plugin_entry_points and hooks.register_attention_backend:
        return {"attention_backend": [KDTREE_BACKEND]}
    return {}


#: The first release whose own Triton MLA path reads an fp8 KV cache (it divides K by the
#: layer's ``k_scale`` before storing it in the MLA pool and passes ``k_descale`` /
#: ``v_descale`` to its kernels); 0.5.9 to 0.5.11 refuse one ("Triton MLA currently doesn't
#: support quantized kv cache"). Read from the 0.5.11 and 0.5.13 wheels' ``triton_backend.py``;
#: 0.5.12's wheel was not read, so it counts as not reading fp8. The kernel package decides
#: the same at startup from the running release's source (``backend.reads_fp8_mla``).
FP8_MLA_SINCE = "0.5.13"


def reads_fp8_mla(rel: Release) -> bool:
    """Whether ``rel``'s Triton MLA path (and so the kdtree kernel on it) reads an fp8 KV
    cache (:data:`FP8_MLA_SINCE`)."""
    return rel.key >= version_key(FP8_MLA_SINCE)
