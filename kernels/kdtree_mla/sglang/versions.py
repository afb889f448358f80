"""Which SGLang versions the startup hook patches, and how their Triton backend calls differ.

Only versions whose code was read are listed (``python/sglang/srt/layers/attention/
triton_backend.py`` and ``triton_ops/extend_attention.py`` of the published wheels). Any other
version is declined: the hook then leaves SGLang untouched rather than guess at its layout.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The distribution whose version decides (``importlib.metadata``), as the image installs it.
DISTRIBUTION = "sglang"


@dataclass(frozen=True)
class SglangLayout:
    """What differs between supported versions at the points the patch touches.

    ``extend_positional`` names the positional arguments ``TritonAttnBackend.forward_extend``
    passes to ``extend_attention_fwd`` after ``max_len_extend``: 0.5.10 inserted the KV scales
    before ``sm_scale``.
    """

    version: str
    extend_positional: tuple[str, ...]


#: Versions read and supported. 0.5.10 is the one the shipped profiles pin.
SUPPORTED: dict[str, SglangLayout] = {
    "0.5.9": SglangLayout("0.5.9", ("sm_scale",)),
    "0.5.10": SglangLayout("0.5.10", ("k_scale", "v_scale", "sm_scale")),
    # Same triton_backend.py and extend_attention.py as 0.5.10 (read in the wheel).
    "0.5.10.post1": SglangLayout("0.5.10.post1", ("k_scale", "v_scale", "sm_scale")),
}


def installed_version() -> str | None:
    """SGLang's version from its distribution metadata, or None when it is not installed.

    Read from metadata rather than ``sglang.__version__`` so it can be asked before SGLang's
    package runs (and without importing it).
    """
    from importlib import metadata

    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return None


def layout_for(version: str | None) -> SglangLayout | None:
    """The layout of a supported version, or None when the version is not supported."""
    if version is None:
        return None
    return SUPPORTED.get(version)


def unsupported_reason(version: str | None) -> str:
    """Why a version is declined, naming what is supported (for the decline line)."""
    supported = ", ".join(sorted(SUPPORTED))
    if version is None:
        return f"sglang distribution metadata not found; supported versions: {supported}"
    reason = (
        f"sglang {version} is not supported by the startup hook; supported versions: {supported}"
    )
    key = version_key(version)
    if key is not None and key >= (0, 5, 11, -1):
        reason += "; on 0.5.11 and later select the kernel with --attention-backend kdtree"
    return reason


def version_key(version: str) -> tuple[int, ...] | None:
    """``0.5.10.post1`` -> (0, 5, 10, 1); ``0.5.10`` -> (0, 5, 10, -1); None if not a release."""
    import re

    m = re.match(r"^v?(\d+)\.(\d+)\.(\d+)(?:\.post(\d+))?$", version.strip())
    if m is None:
        return None
    major, minor, patch, post = m.groups()
    return (int(major), int(minor), int(patch), int(post or -1))
