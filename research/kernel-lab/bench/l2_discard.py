"""A kernel that drops a tensor's lines from L2 without writing them back (bench helper).

A call leaves its partials (up to 2 x SMs x 32 KB in the workspace) dirty in L2. Back to back,
the next call rewrites them there; in a model step the other kernels' reads evict them, and L2
writes them back to DRAM, traffic that `--cold-l2` charges to the call (the flush after it
pays the write-back). `L2Discard(t)()` drops every 128-byte line of `t` (`discard.global.L2`),
so graph(flush + call + discard) - graph(flush + discard) is the call with none of its
partials written back. The 2026-12-02 run of commit bbb0658 measured that write-back with it (1.1-1.9 us a B=1 call
L2 cold); since then the merge reads the partials with an evict-last policy
(verify_merge.cuh), which keeps them in L2, and the drop saves nothing more.
"""

from __future__ import annotations

import torch
from cupy_stream import torch_stream

_SOURCE = r"""
extern "C" __global__ void discard_lines(unsigned long long base, long long lines) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < lines;
       i += (long long)gridDim.x * blockDim.x)
    asm volatile("discard.global.L2 [%0], 128;" ::"l"(base + 128 * i) : "memory");
}
"""


class L2Discard:
    """Drops the 128-byte lines that lie wholly inside each tensor from L2, on torch's current
    stream (a graph captures it)."""

    def __init__(self, tensors):
        import cupy as cp

        self.cp = cp
        major, minor = torch.cuda.get_device_capability()
        self.kern = cp.RawKernel(
            _SOURCE, "discard_lines", options=(f"--gpu-architecture=sm_{major}{minor}",)
        )
        self.ranges = []
        for t in tensors:
            a = t.data_ptr()
            lo = (a + 127) // 128 * 128
            hi = (a + t.numel() * t.element_size()) // 128 * 128
            if hi > lo:
                self.ranges.append((lo, (hi - lo) // 128))

    def __call__(self) -> None:
        cp = self.cp
        with torch_stream(cp):
            for lo, n in self.ranges:
                self.kern(((n + 255) // 256,), (256,), (cp.uint64(lo), cp.int64(n)))
