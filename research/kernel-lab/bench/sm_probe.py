"""Which SMs are slow? A probe for the slow-region lead of the 2026-12-01
15:45-16:25 UTC runs (results commit b3d18ae; run on the device).

At B=1 the CTAs on a few SMs finish 1-1.6 us after the median in every call, and the end game
waits for them. They sit in groups of four SMs (two TPCs), e.g. 44-47, 88-91 and 120-123;
keeping that whole region idle took 0.4 us off 23k (research/kernel-history.md, the 2026-12-01 15:45-16:25 UTC runs),
but a calibration from the kernel's own trace was too noisy to find it. This probe asks
whether a plain measurement can: one CTA per SM, all SMs at once, each gathering `rows`
random 1152-byte rows (as the verify kernel's KV blocks) or reading the same 36 KB (as its Q
tile, from L2), timed with %globaltimer around its loads; repeated, per-SM medians, then the
mean of each group of four SMs. It prints the slowest SMs and groups of each mode, so runs in
separate processes show whether the answer is stable.

  python3 bench/sm_probe.py [--rows 64] [--reps 200] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch

SRC = r"""
extern "C" __global__ void __launch_bounds__(256) probe(
    const uint4* __restrict__ pool, const int* __restrict__ idx, int rows, int same,
    unsigned long long* __restrict__ out, unsigned long long* __restrict__ sink) {
  // 72 uint4 a 1152-byte row; the block's 8 warps take rows in turn, a lane 2-3 pieces a row.
  __shared__ unsigned long long t0;
  unsigned smid;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
  __syncthreads();
  if (threadIdx.x == 0) asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  __syncthreads();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  uint4 acc = make_uint4(0, 0, 0, 0);
  for (int r = warp; r < rows; r += 8) {
    const long long row = same ? r : idx[blockIdx.x * rows + r];
    const uint4* src = pool + row * 72;
    for (int k = lane; k < 72; k += 32) {
      const uint4 v = __ldcg(src + k);
      acc.x ^= v.x; acc.y ^= v.y; acc.z ^= v.z; acc.w ^= v.w;
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned long long t1;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
    out[blockIdx.x * 2] = smid;
    out[blockIdx.x * 2 + 1] = t1 - t0;
  }
  if ((acc.x ^ acc.y ^ acc.z ^ acc.w) == 0x12345678u) sink[0] = 1;  // keep the loads
}
"""


def run(mode: str, rows: int, reps: int, sms: int) -> dict[int, float]:
    import cupy as cp

    kern = cp.RawKernel(SRC, "probe", options=("-std=c++17",))
    n_pool = (1 << 30) // 1152  # 1 GiB of rows: far beyond the 50 MB L2
    pool = cp.random.randint(0, 2**31 - 1, size=n_pool * 288, dtype=cp.int32)
    out = cp.zeros(sms * 2, dtype=cp.uint64)
    sink = cp.zeros(1, dtype=cp.uint64)
    # more shared memory than half an SM holds: one CTA an SM, every SM busy at once
    smem = 160 * 1024
    kern.max_dynamic_shared_size_bytes = smem
    per_sm: dict[int, list[float]] = {}
    for rep in range(reps + 5):
        idx = cp.random.randint(0, n_pool, size=sms * rows, dtype=cp.int32)
        kern((sms,), (256,), (pool, idx, cp.int32(rows), cp.int32(mode == "same"), out, sink),
             shared_mem=smem)  # fmt: skip
        cp.cuda.Device().synchronize()
        if rep < 5:
            continue
        vals = out.get().reshape(-1, 2)
        for smid, ns in vals:
            per_sm.setdefault(int(smid), []).append(float(ns) / 1e3)
    return {sm: statistics.median(v) for sm, v in per_sm.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    res = {}
    for mode in ("gather", "same"):
        us = run(mode, args.rows, args.reps, sms)
        med = statistics.median(us.values())
        late = sorted(us.items(), key=lambda x: -x[1])
        groups: dict[int, list[float]] = {}
        for sm, v in us.items():
            groups.setdefault(sm // 4, []).append(v - med)
        glate = sorted(((g, statistics.fmean(v)) for g, v in groups.items()), key=lambda x: -x[1])
        res[mode] = {
            "median_us": round(med, 3),
            "sms_seen": len(us),
            "latest_sms": [(sm, round(v - med, 3)) for sm, v in late[:12]],
            "latest_groups": [(f"{4 * g}-{4 * g + 3}", round(v, 3)) for g, v in glate[:6]],
            "all_sms": {str(sm): round(v - med, 3) for sm, v in us.items()},
        }
        print(f"{mode}: median {med:.2f} us over {len(us)} SMs; latest SMs "
              f"{res[mode]['latest_sms'][:8]}; latest groups {res[mode]['latest_groups']}")  # fmt: skip
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
