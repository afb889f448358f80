"""Speed-of-light probe for the verify kernel's KV stream (run on the device).

What would a call cost if the math and the merge were free? A gather kernel (CuPy/NVRTC) does
only what every paged split-KV kernel must: read the index pointers, read the pool indices,
read every prefix row (1152 B) the call touches, split evenly over the grid. It reduces what it
reads to one word per warp, so nothing is skipped. It runs over the same per-layer pools, in
the same kind of CUDA graph (one launch per layer) as `bench_verify.py`, next to our kernel in
the same run, so

    our graph time - gather time  =  what the math, the merge and our front add

and the gather time itself is the floor of this access pattern on this GPU (launch, the
metadata round trips, and the DRAM stream of random 1152-byte rows). Also measured: the same
gather over 2 GiB of rows, sorted and in random order, as the chip's read bandwidth for this
pattern, and the copy bandwidth the issue's floor uses.

  python3 bench/sol_probe.py [--json out.json] [--reps 30]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_verify import (  # noqa: E402
    DEFAULT_CASES,
    Case,
    copy_bandwidth,
    events_ms,
    graph_us,
    launch_floor_us,
)
from cupy_stream import torch_stream  # noqa: E402

# bench_verify's B=1 H=8 cases (empty, 5.7k, 23k, 91k, 91k sorted) and B=8 91k.
CASES = [DEFAULT_CASES[i] for i in (0, 2, 3, 4, 5, 10)]
# Gather configurations, by name:
#   "lsu PxT": P CTAs an SM of T threads, loads through the LSU; a warp keeps 8 rows (9 KB) in
#     flight, so 256 threads ~ our 2 stages, 384 ~ 3 stages (110 KB an SM); at ~120 registers a
#     thread two 512-thread CTAs do not fit one SM, so "lsu 2x512" runs in two waves;
#   "coop": the same launched cooperatively, as our fused-merge kernel is;
#   "bulk WwxS": one CTA an SM of W warps, each keeping S slots of 8 rows in flight through
#     cp.async.bulk (the copy engine, as our kernel); W x S x 9 KB in flight an SM.
CONFIGS = [
    "lsu 1x256",
    "lsu 1x384",
    "lsu 1x512",
    "lsu 2x512",
    "coop 1x512",
    "bulk 4wx3",
    "bulk 4wx4",
    "bulk 4wx5",
    "bulk 8wx2",
]

GATHER_SRC = r"""
// Rows [lo, hi) of the call's prefix rows (all requests back to back), this CTA's even share.
// Warp w reads groups of 8 rows (a lane loads 3 of a row's 72 16-byte pieces for each of the 8),
// all 24 loads of a group in flight together; the next group's indices are loaded first.
extern "C" __global__ void gather_rows(const int* __restrict__ kv_indptr, const int* __restrict__ kv_indices,
                                       const uint4* __restrict__ pool, long long stride16, int batch,
                                       unsigned* __restrict__ out) {
  const int total = kv_indptr[batch] - kv_indptr[0];
  const int per = (total + gridDim.x - 1) / gridDim.x;
  const int lo = blockIdx.x * per, hi = min(lo + per, total);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  const int base = kv_indptr[0];
  unsigned acc = 0u;
  int r0 = lo + warp * 8;
  int idx = r0 + (lane & 7) < hi ? kv_indices[base + r0 + (lane & 7)] : -1;
  for (; r0 < hi; r0 += nw * 8) {
    const int r1 = r0 + nw * 8;
    const int nxt = r1 + (lane & 7) < hi ? kv_indices[base + r1 + (lane & 7)] : -1;
    uint4 v[8][3];
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      const int iu = __shfl_sync(0xffffffffu, idx, u);
#pragma unroll
      for (int c = 0; c < 3; ++c) {
        const int col = lane + 32 * c;
        v[u][c] = iu >= 0 && col < 72 ? __ldcs(pool + iu * stride16 + col) : make_uint4(0u, 0u, 0u, 0u);
      }
    }
#pragma unroll
    for (int u = 0; u < 8; ++u)
#pragma unroll
      for (int c = 0; c < 3; ++c) acc ^= v[u][c].x ^ v[u][c].y ^ v[u][c].z ^ v[u][c].w;
    idx = nxt;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) acc ^= __shfl_xor_sync(0xffffffffu, acc, o);
  if (lane == 0) out[blockIdx.x * nw + warp] = acc;
}
"""


BULK_SRC = r"""
// The same rows through the copy engine, as our kernel streams them: one 1152-byte
// cp.async.bulk a row into shared memory. Warp w owns `slots` slots of 8 rows, each completing
// on its own mbarrier, and keeps them all in flight: it waits for its oldest slot, reads one
// word a row from it, and refills the slot with its next group (whose pool indices it loaded
// while the previous group was in flight).
__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
extern "C" __global__ void gather_bulk(const int* __restrict__ kv_indptr, const int* __restrict__ kv_indices,
                                       const char* __restrict__ pool, long long stride_bytes, int batch, int slots,
                                       unsigned* __restrict__ out) {
  extern __shared__ __align__(128) unsigned char sm[];
  const int total = kv_indptr[batch] - kv_indptr[0];
  const int per = (total + gridDim.x - 1) / gridDim.x;
  const int lo = blockIdx.x * per, hi = min(lo + per, total);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  const int base = kv_indptr[0];
  unsigned char* mine = sm + warp * slots * 9216;
  unsigned long long* bars = reinterpret_cast<unsigned long long*>(sm + nw * slots * 9216) + warp * slots;
  if (lane == 0)
    for (int s = 0; s < slots; ++s)
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(bars + s)) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  __syncwarp();
  const int first = lo + warp * 8;
  const int groups = first < hi ? (hi - first + nw * 8 - 1) / (nw * 8) : 0;
  int idx = first + lane < hi && lane < 8 ? kv_indices[base + first + lane] : 0;
  auto issue = [&](int g) {
    const int r0 = first + g * nw * 8, n = min(8, hi - r0);
    const unsigned bar = smem_addr(bars + g % slots);
    if (lane == 0) asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(n * 1152) : "memory");
    __syncwarp();
    if (lane < n)
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], 1152, [%2];" ::"r"(
                       smem_addr(mine + (g % slots) * 9216 + lane * 1152)),
                   "l"(pool + idx * stride_bytes), "r"(bar)
                   : "memory");
    const int r1 = r0 + nw * 8;  // the next group's indices
    idx = r1 + lane < hi && lane < 8 ? kv_indices[base + r1 + lane] : 0;
  };
  for (int g = 0; g < groups && g < slots; ++g) issue(g);
  unsigned acc = 0u;
  for (int g = 0; g < groups; ++g) {
    const unsigned bar = smem_addr(bars + g % slots), parity = (g / slots) & 1;
    unsigned done = 0;
    while (!done)
      asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                   : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    if (lane < 8) acc ^= *reinterpret_cast<const unsigned*>(mine + (g % slots) * 9216 + lane * 1152 + (g & 63) * 16);
    __syncwarp();
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // our read before the refill
    if (g + slots < groups) issue(g + slots);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) acc ^= __shfl_xor_sync(0xffffffffu, acc, o);
  if (lane == 0) out[blockIdx.x * nw + warp] = acc;
}
"""


class Gather:
    def __init__(self):
        import cupy as cp

        self.cp = cp
        major, minor = torch.cuda.get_device_capability()
        opts = (f"--gpu-architecture=sm_{major}{minor}",)
        self.kern = cp.RawKernel(GATHER_SRC, "gather_rows", options=opts)
        self.coop = cp.RawKernel(
            GATHER_SRC, "gather_rows", options=opts, enable_cooperative_groups=True
        )
        self.bulk = cp.RawKernel(BULK_SRC, "gather_bulk", options=opts)
        self.bulk.max_dynamic_shared_size_bytes = 200 * 1024
        self.sms = torch.cuda.get_device_properties(0).multi_processor_count
        self.out = torch.zeros(4 * self.sms * 32, dtype=torch.int32, device="cuda")

    def __call__(self, kv_indptr, kv_indices, pool, batch, config):
        """One launch of `config` (CONFIGS) on torch's current stream (a torch graph captures it)."""
        assert kv_indptr.dtype == torch.int32 and kv_indices.dtype == torch.int32
        assert pool.stride(0) * 2 % 16 == 0 and pool.data_ptr() % 16 == 0
        kind, shape = config.split()
        cp = self.cp
        ptrs = (
            cp.uint64(kv_indptr.data_ptr()),
            cp.uint64(kv_indices.data_ptr()),
            cp.uint64(pool.data_ptr()),
        )
        stream = torch_stream(cp)
        with stream:
            if kind == "bulk":
                warps, slots = (int(x) for x in shape.split("wx"))
                # per warp: slots x 9216 B of rows, then slots 8-byte mbarriers
                smem = warps * slots * (9216 + 8)
                args = (cp.int64(pool.stride(0) * 2), cp.int32(batch), cp.int32(slots))
                self.bulk(
                    (self.sms,),
                    (32 * warps,),
                    ptrs + args + (cp.uint64(self.out.data_ptr()),),
                    shared_mem=smem,
                )
            else:
                per_sm, threads = (int(x) for x in shape.split("x"))
                kern = self.coop if kind == "coop" else self.kern
                args = (cp.int64(pool.stride(0) * 2 // 16), cp.int32(batch))
                kern(
                    (per_sm * self.sms,),
                    (threads,),
                    ptrs + args + (cp.uint64(self.out.data_ptr()),),
                )


def warm_graph_us(call, n_layers, reps):
    """bench_verify.graph_us after one eager pass over the layers."""
    for i in range(n_layers):
        call(i)
    torch.cuda.synchronize()
    return graph_us(call, n_layers, reps)


def read_bandwidth(gather, config, sorted_rows, reps=20):
    """Bytes/s of the gather over 2 GiB of 1152-byte rows, sorted or in random order."""
    n = (2 << 30) // 1152
    pool = torch.empty(n, 576, dtype=torch.bfloat16, device="cuda").random_()
    idx = torch.arange(n, device="cuda", dtype=torch.int32)
    if not sorted_rows:
        idx = idx[torch.randperm(n, device="cuda")].contiguous()
    indptr = torch.tensor([0, n], dtype=torch.int32, device="cuda")

    def call():
        gather(indptr, idx, pool, 1, config)

    call()
    ms = statistics.median(events_ms(call, reps))
    return n * 1152 / (ms * 1e-3)


def gather_layers(gather, case, config):
    """Layer i's gather of a bench case (its metadata, layer i's pool)."""
    m = case.meta

    def call(i):
        gather(m.kv_indptr, m.kv_indices, case.layers[i].k_buffer, case.b, config)

    return call


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument("--reps", type=int, default=30)
    args = ap.parse_args()
    props = torch.cuda.get_device_properties(0)
    gather = Gather()
    from kdtree_mla import _C

    res = {"device": props.name, "sms": props.multi_processor_count, "configs": CONFIGS}
    res["copy_bw_Bps"] = copy_bandwidth()
    res["launch_floor_us"] = launch_floor_us()
    res["read_bw_Bps"] = {
        f"{'sorted' if s else 'random'} {c}": read_bandwidth(gather, c, s)
        for s in (True, False)
        for c in CONFIGS
    }
    print(f"device {props.name}; copy bandwidth {res['copy_bw_Bps'] / 1e12:.3f} TB/s (read+write)")
    print(f"launch floor (two dependent kernels, graph) {res['launch_floor_us']:.2f} us")
    for k, v in res["read_bw_Bps"].items():
        print(f"gather read bandwidth, 2 GiB, {k}: {v / 1e12:.3f} TB/s")
    res["cases"] = []
    print(
        "\n| B | H | D | prefix | pages | floor us | gather graph us ("
        + " / ".join(CONFIGS)
        + ") | ours graph us | ours loads only us | ours - best gather |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for spec in CASES:
        b, h, d, prefix = spec[:4]
        srt = len(spec) > 4 and spec[4] == "sorted"
        case = Case(b, h, d, prefix, sorted_pages=srt)
        row = {"B": b, "H": h, "D": d, "prefix": prefix, "sorted": srt, "layers": case.n_layers}
        row["floor_us"] = case.kv_bytes / res["copy_bw_Bps"] * 1e6
        row["gather_graph_us"] = [
            warm_graph_us(gather_layers(gather, case, c), case.n_layers, args.reps) for c in CONFIGS
        ]
        row["ours_graph_us"] = warm_graph_us(case.ours, case.n_layers, args.reps)
        # The default's loads-only twin (traits.h kVariants 12, H200 default 11 only): our
        # kernel with the math skipped but the front, the epilogue and the merge kept.
        if _C.variant_for_device(torch.cuda.current_device()) == 11:
            from kdtree_mla import _diag

            _diag.set_force_variant(case.ws, 12)
            row["ours_loads_only_graph_us"] = warm_graph_us(case.ours, case.n_layers, args.reps)
            _diag.set_force_variant(case.ws, 0)
        best = min(row["gather_graph_us"])
        res["cases"].append(row)
        print(
            f"| {b} | {h} | {d} | {prefix} | {'sorted' if srt else 'random'} | {row['floor_us']:.1f} | "
            + " / ".join(f"{t:.1f}" for t in row["gather_graph_us"])
            + f" | {row['ours_graph_us']:.1f} | {row.get('ours_loads_only_graph_us', float('nan')):.1f}"
            + f" | {row['ours_graph_us'] - best:.1f} |",
            flush=True,
        )
        del case
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
