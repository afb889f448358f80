"""How fast can every SM read back data the other SMs have just written? (diagnostic)

The fused merge (csrc/verify_merge.cuh) reads ~32 KB a CTA of partials that 90-130 other CTAs
stored a microsecond earlier, and that read takes ~2.5 us on the H200 whether it goes through
registers or the bulk-copy engine (research/kernel-history.md). This probe isolates the access
pattern: n CTAs (one per SM) each own a 32 KB slot; each CTA then reads the c-th n-th of every
slot (n pieces of 32 KB / n: 32 KB a CTA, like the merge) and times that read with
%globaltimer. Three cases, each the median over CTAs and repetitions:

  fresh   the slots were written in the same kernel just before (release add + acquire count,
          as the merge does)
  earlier the slots were written by the previous launch (kernel boundary in between)
  own     each CTA reads its own slot only (32 KB it just wrote; no other SM's data)

    python3 research/kernel-lab/bench/merge_read_probe.py [--ctas N] [--reps 50]

Needs CuPy (the bench's mma microbenchmark uses it too).
"""

from __future__ import annotations

import argparse
import statistics

import cupy as cp

SRC = r"""
extern "C" __global__ void probe(uint4* buf, int* count, unsigned long long* out, int n, int target,
                                 int write, int own) {
  const int c = blockIdx.x, tid = threadIdx.x;
  constexpr int kSlot = 2048;  // uint4 a slot (32 KB)
  if (write) {
    for (int i = tid; i < kSlot; i += blockDim.x) buf[c * kSlot + i] = make_uint4(c, i, target, 1);
    __syncthreads();
    if (tid == 0) {
      asm volatile("red.release.gpu.global.add.s32 [%0], 1;" ::"l"(count) : "memory");
      int v = 0;
      do {
        asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(count) : "memory");
      } while (v < target);
    }
    __syncthreads();
  }
  unsigned long long t0, t1;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  // This CTA's n-th of every slot (or all of its own slot): 2048 uint4, 8 a thread, all loads
  // issued before any is used.
  const int piece = kSlot / n, first = c * piece;
  uint4 v[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const int idx = tid + k * blockDim.x;  // 0 .. 2047
    const int j = own ? c : idx / piece, e = own ? idx : first + idx % piece;
    v[k] = (own || j < n) ? __ldcg(buf + j * kSlot + e) : make_uint4(0, 0, 0, 0);
  }
  unsigned acc = 0;
#pragma unroll
  for (int k = 0; k < 8; ++k) acc ^= v[k].x ^ v[k].y ^ v[k].z ^ v[k].w;
  __syncthreads();
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
  if (tid == 0) out[c] = t1 - t0;
  if (acc == 0xffffffffu) out[n + c] = acc;  // keeps the loads
}
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ctas", type=int, default=0, help="default: the SM count")
    ap.add_argument("--reps", type=int, default=50)
    args = ap.parse_args()
    dev = cp.cuda.Device()
    n = args.ctas or dev.attributes["MultiProcessorCount"]
    kern = cp.RawKernel(SRC, "probe")
    buf = cp.zeros((n * 2048 * 4,), dtype=cp.uint32)
    count = cp.zeros((1,), dtype=cp.int32)
    out = cp.zeros((2 * n,), dtype=cp.uint64)
    calls = [0]

    def run(write: int, own: int) -> list[float]:
        calls[0] += 1
        kern(
            (n,),
            (256,),
            (buf, count, out, cp.int32(n), cp.int32(n * calls[0]), cp.int32(write), cp.int32(own)),
        )
        if not write:
            calls[0] -= 1  # the count only moves when the slots are written
        cp.cuda.Device().synchronize()
        return [float(x) / 1e3 for x in out[:n].get()]

    results = {}
    for name, write, own in (("fresh", 1, 0), ("earlier", 0, 0), ("own", 1, 1)):
        samples = []
        for _ in range(args.reps):
            if name == "earlier":
                run(1, 0)  # written by the previous launch
            samples += run(write, own)
        results[name] = statistics.median(samples)
    print(
        f"{dev.attributes['MultiProcessorCount']} SMs, {n} CTAs, 32 KB read a CTA ({n * 32} KB in all)"
    )
    for name, us in results.items():
        print(
            f"  {name:8s} median read {us:.2f} us  ({n * 32768 / us / 1e6:.2f} TB/s over all CTAs)"
        )


if __name__ == "__main__":
    main()
