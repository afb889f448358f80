"""The compiled extension, ``kdtree_mla._C``: loading it, what it was built for, and whether a
device can run it. :mod:`kdtree_mla.api` exports :func:`load`, :func:`compiled_archs` and
:func:`device_supported`."""

from __future__ import annotations

import importlib
from typing import Any

import torch

_EXT: Any = None  # the compiled extension, kdtree_mla._C, once imported


def load_ext() -> Any:  # pragma: no cover - needs the compiled extension
    """The extension module, imported on first use (ImportError as Python raises it)."""
    global _EXT
    if _EXT is None:
        _EXT = importlib.import_module("kdtree_mla._C")
    return _EXT


def load() -> Any:
    """Imports the compiled extension and returns it; raises ImportError with the reason when it
    is not built or does not load (e.g. built against another torch)."""
    try:
        return load_ext()
    except ImportError as exc:
        raise ImportError(
            f"kdtree_mla._C is not available ({exc}); build it with "
            "`TORCH_CUDA_ARCH_LIST=... pip install --no-build-isolation ./kernels`"
        ) from exc


def parse_arch_list(arch_list: str) -> list[str]:
    """TORCH_CUDA_ARCH_LIST's spelling ("9.0;12.0a", "8.6,9.0+PTX") as ["sm_90", "sm_120"]."""
    archs = []
    for item in arch_list.replace(",", ";").replace(" ", ";").split(";"):
        item = item.strip().removesuffix("+PTX")
        if not item:
            continue
        major, _, minor = item.partition(".")
        archs.append(f"sm_{major}{minor.rstrip('af') or '0'}")
    return archs


def compiled_archs() -> list[str]:
    """Architectures the installed extension was built for, e.g. ["sm_90", "sm_120"] (its
    TORCH_CUDA_ARCH_LIST at build time, compiled into it); [] when it is not built or does not
    load."""
    try:
        ext = load_ext()
    except ImportError:
        return []
    return parse_arch_list(getattr(ext, "ARCH_LIST", ""))


def device_supported(device: torch.device | str | int | None = None) -> tuple[bool, str]:
    """(True, "") when the kernel can run on `device`, else (False, reason). Never raises."""
    try:
        ext = load()
    except ImportError as exc:
        return False, str(exc)
    if not torch.cuda.is_available():
        return False, "no CUDA device visible"
    dev = torch.device("cuda" if device is None else device)
    idx = dev.index if dev.index is not None else torch.cuda.current_device()
    major, minor = torch.cuda.get_device_capability(idx)
    arch = f"sm_{major}{minor}"
    built = compiled_archs()
    if built and arch not in built:
        return False, f"extension built for {', '.join(built)}, device is {arch}"
    if ext.variant_for_device(idx) == 0:
        if ext.unsupported_reason(idx) == 1:
            return (
                False,
                f"{arch}: not a target of this kernel (it runs on sm_90 and the sm_120 family)",
            )
        return False, f"{arch}: no kernel variant fits the device's shared memory"
    return True, ""
