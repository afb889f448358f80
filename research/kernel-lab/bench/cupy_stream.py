"""CuPy launches on torch's current stream, so that a torch CUDA graph captures them (the bench
scripts' CuPy/NVRTC kernels: code_evict.py, sol_probe.py, endgame_probe.py)."""

from __future__ import annotations

import warnings

import torch


def torch_stream(cp):
    """torch's current stream as a CuPy stream: `with torch_stream(cp): kernel(...)`."""
    with warnings.catch_warnings():  # (ExternalStream: deprecated in newer CuPy, still there)
        warnings.simplefilter("ignore", DeprecationWarning)
        return cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
