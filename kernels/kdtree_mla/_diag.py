"""Diagnostic launch switches of a :class:`~kdtree_mla.api.VerifyWorkspace` (benchmarks, tests,
the lab tools in research/kernel-lab/); not part of the API. Each sets the value on the
workspace and, once it exists, on the extension's Workspace object, as the workspace's own
options are kept: between eager calls a change takes effect at the next call; a captured graph
keeps the values it was captured with.
"""

from __future__ import annotations

import torch

from kdtree_mla.workspace import VerifyWorkspace

#: launch_parts values: the main kernel, the combine kernel, both (the default).
MAIN_ONLY, COMBINE_ONLY, ALL_PARTS = 1, 2, 3


def set_launch_parts(ws: VerifyWorkspace, parts: int) -> None:
    """Which kernels a call launches (a bitmask: 1 main, 2 combine; 0 none, for host-path
    timing; the extension's other bits as csrc/verify_launch.h defines them)."""
    ws._set_option("launch_parts", parts)


def launch_parts(ws: VerifyWorkspace) -> int:
    return ws._options["launch_parts"]


def set_force_variant(ws: VerifyWorkspace, index: int) -> None:
    """Run every call on kernel variant ``index`` of ``_C.VARIANTS`` (0: the device's default).
    A variant that does not fit the device's shared memory fails at launch."""
    ws._set_option("force_variant", index)


def force_variant(ws: VerifyWorkspace) -> int:
    return ws._options["force_variant"]


def set_split_combine(ws: VerifyWorkspace, on: bool) -> None:
    """Switch an existing workspace between the fused merge and the combine kernel (A/B on one
    workspace); a product caller passes ``split_combine`` to the constructor instead."""
    ws._set_option("split_combine", int(bool(on)))


def set_trace(ws: VerifyWorkspace, buf: torch.Tensor) -> None:
    """The int64 [TRACE_ROWS, TRACE_SLOTS] buffer the traced kernel variant (``_C.VARIANTS``
    mode 8, ``KDTREE_DIAG=1`` builds only) writes timestamps to; see
    research/kernel-lab/bench/trace_verify.py."""
    ws._trace = buf
    if ws._handle is not None:
        ws._handle.trace = buf


def trace(ws: VerifyWorkspace) -> torch.Tensor | None:
    return ws._trace
