"""A kernel that pushes other kernels' code out of the SMs' instruction caches (bench helper).

In a model step, dozens of other kernels (projections, norms, MoE) run on every SM between two
attention calls of the same layer stack; in a benchmark graph of back-to-back verify calls they
do not, so the verify kernel's code stays in the SMs' instruction caches from one call to the
next. `CodeEvictor()` launched before a call, on torch's current stream (a graph captures it),
runs 256 KB of straight-line code on every SM (16 warps, each its own 16 KB), more than the
instruction caches hold (bench/icache_probe.py measures them), so the call after it starts with
its code where a model step would leave it: in L2 at best.

With `trigger=True` (the default) the evictor lets the next kernel launch at once
(`griddepcontrol.launch_dependents`, as a PDL-aware predecessor would), so our call's set-up
before its `griddepcontrol.wait` overlaps the evictor as it overlaps the previous layer's call
in a plain graph: the difference from back-to-back calls is then the cold code alone. With
`trigger=False` our call launches only once the evictor has ended (a predecessor that knows
nothing of PDL): cold code plus the lost overlap.
"""

from __future__ import annotations

import torch
from cupy_stream import torch_stream

CHUNKS = 16  # warps a CTA, one CTA an SM, each running its own chunk
CHUNK_FFMAS = 1024  # 16 KB of code a chunk


TRIGGER = '  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");'


def _source(trigger: bool) -> str:
    cases = []
    for w in range(CHUNKS):
        body = " ".join(
            f"x{i % 4} = fmaf(x{i % 4}, a, {1.0 + 1e-7 * ((i * 13 + w * 101) % 89):.9f}f);"
            for i in range(CHUNK_FFMAS)
        )
        cases.append(f"    case {w}: {body} break;")
    cases = "\n".join(cases)
    return f"""
extern "C" __global__ void __launch_bounds__({32 * CHUNKS}) evict_code(const float* in, float* out) {{
{TRIGGER if trigger else ""}
  const float a = in[0];
  float x0 = in[1] + threadIdx.x, x1 = x0 + 1, x2 = x0 + 2, x3 = x0 + 3;
  switch (threadIdx.x / 32) {{
{cases}
  }}
  if (x0 + x1 + x2 + x3 == 1234.5f) out[threadIdx.x] = x0;  // (never: keeps the code)
}}
"""


class CodeEvictor:
    def __init__(self, trigger: bool = True):
        import cupy as cp

        self.cp = cp
        major, minor = torch.cuda.get_device_capability()
        self.kern = cp.RawKernel(
            _source(trigger), "evict_code", options=(f"--gpu-architecture=sm_{major}{minor}",)
        )
        self.sms = torch.cuda.get_device_properties(0).multi_processor_count
        self.buf = torch.tensor([0.999999, 0.5] + [0.0] * (32 * CHUNKS), device="cuda")

    def __call__(self) -> None:
        cp = self.cp
        stream = torch_stream(cp)
        with stream:
            ptr = cp.uint64(self.buf.data_ptr())
            self.kern((self.sms,), (32 * CHUNKS,), (ptr, cp.uint64(self.buf.data_ptr() + 8)))
