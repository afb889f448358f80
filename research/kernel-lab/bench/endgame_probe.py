"""What does the fused merge's handshake cost, and what would partials that carry their own
call number save? (diagnostic, run on the device; CuPy/NVRTC)

At B=1 the end of a verify call (epilogue, publish, merge) takes ~3.5 us from the grid's last
published partial (research/kernel-history.md). Part of that is the handshake itself: the
publisher's release fence waits for its stores before it sets the part's flag, and a merging
CTA must first see the flag (one L2 round trip) and only then read the data (another). This
probe isolates the end game, with no attention math: a cooperative grid of one CTA an SM, each
CTA storing one 32 x 512 bf16 partial (+ 32 LSEs) into its slot, then merging its n-th of the
outputs from all n slots, like csrc/verify_merge.cuh, in four modes:

  empty   no partials (the launch, the call-number read and the ended-CTA count only)
  flag    our protocol: stores, barrier, `fence.acq_rel.gpu`, the slot's 64-bit flag set to
          the call's number; readers poll the flags (`ld.acquire.gpu`, one lane a part) and
          read a part's range once its flag is seen
  tagged  no flags: every 8-byte word of a partial holds one bf16 pair and the call's number
          (low 32 bits), stored with `st.relaxed.gpu`; readers load the words themselves
          (`ld.relaxed.gpu`, single-copy atomic) and re-read a part until every word carries
          this call's number. Twice the bytes, one round trip less, no fence
  nowait  the flag mode's stores and reads with no handshake at all (wrong data; the floor)

Readers: warp w reads parts w, w + 8, ..., each part's range (60 or 64 words, 16-byte aligned)
coalesced, one 16-byte load a lane and part, every pending part's loads issued before any is
used. Every value read is checked against
the value its writer stores in that call (`errors`, flag and tagged modes must read 0); the
values are cheap integer patterns, so writing and checking them costs little. A
CTA's store can be delayed (`--stagger`: CTA c waits up to that many ns after it starts, in
a scattered order) to put a late publisher on the critical path, as the slow SMs are in the
kernel. Time per call: a CUDA graph of 12 launches (bench_verify.graph_us), median.

  python3 research/kernel-lab/bench/endgame_probe.py [--reps 30] [--stagger 0,1000,3000] [--json out.json]

What it does not model: the bulk copies into shared memory the kernel's merge uses (here
both modes read through the LSU, so the comparison is between protocols), merge tickets,
the epilogue's staging through shared memory, and the attention work before it. The tagged
form's 32-bit call number wraps after 2^32 calls; a kernel using it would need a full-width
guard against a slot last written exactly 2^32 calls earlier.
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
from bench_verify import graph_us  # noqa: E402
from cupy_stream import torch_stream  # noqa: E402

MODES = {"empty": 0, "flag": 1, "tagged": 2, "nowait": 3}
SLOT_WORDS = 8192  # bf16 pairs a partial (32 rows x 512 columns)
MAX_PARTS_PER_WARP = 17  # n <= 136 parts over 8 warps
# Words between two parts' slices in shared memory (a slice is at most 64; 72 puts the merge
# loop's 4 parts a step in distinct banks).
SLICE_STRIDE = 72

SRC = r"""
typedef unsigned long long u64;
typedef unsigned int u32;
// SLOT, MAXP and WPP come from the Python constants (compile options).
#define ROWW 256

__device__ __forceinline__ u32 bf16bits(float x) { return __float_as_uint(x) >> 16; }
__device__ __forceinline__ float bf16f(u32 b) { return __uint_as_float(b << 16); }
// A cheap value for word w of part j in call t (a few integer operations, so that writing and
// checking cost little next to the memory traffic; the merge's arithmetic on them is timing
// only), and LSEs that keep the weights finite.
__device__ __forceinline__ u32 pair_of(int j, int w, u64 t) {
  return (u32)(j * 8192 + w) ^ ((u32)t * 0x9E3779B9u);
}
__device__ __forceinline__ float lse_of(int j, int r, u64 t) {
  return (float)((j + r + (int)t) & 7) * 0.25f;
}
__device__ __forceinline__ u64 ld_relaxed(const u64* p) {
  u64 v;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ u64 ld_acquire(const u64* p) {
  u64 v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

extern "C" __global__ void __launch_bounds__(256, 1)
endgame(int mode, u64* ctr, u64* flags, u32* part, float* lse, u64* tpart, u64* tlse, u32* out,
        int* errors, long long stagger_ns, u64* stamps) {
  extern __shared__ u32 stage[];  // [n][wpp] pair words of this CTA's slice, then float [n][2] LSEs
  __shared__ u64 s_t;
  __shared__ float s_w[2][160];   // weights [row of the slice][part]
  __shared__ float s_inv[2];
  const int n = gridDim.x, c = blockIdx.x, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  if (tid == 0) s_t = ld_relaxed(ctr) / (u64)n + 1;  // the call's number (no CTA of it ended yet)
  __syncthreads();
  const u64 t = s_t;
  u64 ts;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ts));
  if (tid == 0) stamps[c * 4 + 0] = ts;
  const u64 tagw = (u64)(u32)t << 32;
  if (mode != 0) {
    if (stagger_ns > 0) {
      u64 t0, now;
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
      const u64 d = (u64)stagger_ns * (u64)((c * 37) % n) / (u64)(n > 1 ? n - 1 : 1);
      do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
      } while (now - t0 < d);
    }
    // ---- this CTA's partial, slot c ----
    if (mode == 2) {
      for (int w = tid * 2; w < SLOT; w += 512) {
        const u64 a = (u64)pair_of(c, w, t) | tagw, b = (u64)pair_of(c, w + 1, t) | tagw;
        asm volatile("st.relaxed.gpu.global.v2.u64 [%0], {%1, %2};"
                     :: "l"(tpart + (size_t)c * SLOT + w), "l"(a), "l"(b) : "memory");
      }
      if (tid < 32) {
        const u64 v = (u64)__float_as_uint(lse_of(c, tid, t)) | tagw;
        asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" :: "l"(tlse + c * 32 + tid), "l"(v) : "memory");
      }
    } else {
      for (int w = tid * 4; w < SLOT; w += 1024)
        *reinterpret_cast<uint4*>(part + (size_t)c * SLOT + w) =
            make_uint4(pair_of(c, w, t), pair_of(c, w + 1, t), pair_of(c, w + 2, t), pair_of(c, w + 3, t));
      if (tid < 32) lse[c * 32 + tid] = lse_of(c, tid, t);
      __syncthreads();
      if (mode == 1 && tid == 0) {
        asm volatile("fence.acq_rel.gpu;" ::: "memory");
        asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" :: "l"(flags + c), "l"(t) : "memory");
      }
    }
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ts));
    if (tid == 0) stamps[c * 4 + 1] = ts;  // thread 0's stores issued (and, flag mode, published)
    // ---- read slice c (pair words [w_lo, w_hi)) of every part ----
    // Slices start on 4-word (16-byte) boundaries: 60 or 64 words each (132 CTAs).
    const int w_lo = (int)((long long)c * SLOT / n) & ~3;
    const int w_hi = c == n - 1 ? SLOT : (int)((long long)(c + 1) * SLOT / n) & ~3;
    const int nw = w_hi - w_lo, r_lo = w_lo / ROWW;  // nw <= 64: rows r_lo and r_lo + 1 at most
    const int wpp = WPP;
    float* lse_s = reinterpret_cast<float*>(stage + n * wpp);
    int bad = 0;
    u32 pending = 0;  // bit i: part warp + 8 i not read yet
    for (int i = 0; i < MAXP; ++i)
      if (warp + 8 * i < n) pending |= 1u << i;
    while (pending) {  // warp-uniform
      if (mode == 2) {
        // One 16-byte load a lane and part: words 2 lane, 2 lane + 1 of the slice, with tags.
        u64 x[MAXP][2], l[MAXP];
#pragma unroll
        for (int i = 0; i < MAXP; ++i) {
          x[i][0] = x[i][1] = l[i] = tagw;
          if (pending >> i & 1) {
            const int p = warp + 8 * i;
            if (2 * lane < nw)
              asm volatile("ld.relaxed.gpu.global.v2.u64 {%0, %1}, [%2];"
                           : "=l"(x[i][0]), "=l"(x[i][1])
                           : "l"(tpart + (size_t)p * SLOT + w_lo + 2 * lane)
                           : "memory");
            if (lane < 2) l[i] = ld_relaxed(tlse + p * 32 + min(r_lo + lane, 31));
          }
        }
#pragma unroll
        for (int i = 0; i < MAXP; ++i) {
          if (!(pending >> i & 1)) continue;
          const bool ok = (x[i][0] >> 32) == (tagw >> 32) && (x[i][1] >> 32) == (tagw >> 32) &&
                          (l[i] >> 32) == (tagw >> 32);
          if (__all_sync(0xffffffffu, ok)) {
            const int p = warp + 8 * i;
            if (2 * lane < nw) {
              const u32 a = (u32)x[i][0], b = (u32)x[i][1];
              *reinterpret_cast<uint2*>(stage + p * wpp + 2 * lane) = make_uint2(a, b);
              bad += (a != pair_of(p, w_lo + 2 * lane, t)) + (b != pair_of(p, w_lo + 2 * lane + 1, t));
            }
            if (lane < 2) lse_s[p * 2 + lane] = __uint_as_float((u32)l[i]);
            pending &= ~(1u << i);
          }
        }
      } else {
        bool seen = false;  // lane i watches part warp + 8 i
        if (lane < MAXP && (pending >> lane & 1))
          seen = mode == 3 || ld_acquire(flags + warp + 8 * lane) == t;
        const u32 now = __ballot_sync(0xffffffffu, seen) & pending;
        __syncwarp();  // the watching lane's acquire, before the other lanes' loads
        // One 16-byte load a lane and part (lanes 0-15: words 4 lane .. 4 lane + 3).
        uint4 x[MAXP];
        float l[MAXP];
#pragma unroll
        for (int i = 0; i < MAXP; ++i) {
          x[i] = make_uint4(0u, 0u, 0u, 0u);
          l[i] = 0.f;
          if (now >> i & 1) {
            const int p = warp + 8 * i;
            if (4 * lane < nw) x[i] = __ldcg(reinterpret_cast<const uint4*>(part + (size_t)p * SLOT + w_lo) + lane);
            if (lane < 2) l[i] = __ldcg(lse + p * 32 + min(r_lo + lane, 31));
          }
        }
#pragma unroll
        for (int i = 0; i < MAXP; ++i) {
          if (!(now >> i & 1)) continue;
          const int p = warp + 8 * i;
          if (4 * lane < nw) {
            *reinterpret_cast<uint4*>(stage + p * wpp + 4 * lane) = x[i];
            const int w = w_lo + 4 * lane;
            bad += (x[i].x != pair_of(p, w, t)) + (x[i].y != pair_of(p, w + 1, t)) +
                   (x[i].z != pair_of(p, w + 2, t)) + (x[i].w != pair_of(p, w + 3, t));
          }
          if (lane < 2) lse_s[p * 2 + lane] = l[i];
        }
        pending &= ~now;
      }
    }
    __syncthreads();
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ts));
    if (tid == 0) stamps[c * 4 + 2] = ts;  // every part's range read
    // ---- merge: weights a (row, part), then 4 threads a word over the parts ----
    if (warp < 2) {
      float m = __int_as_float(0xff800000);
      for (int p = lane; p < n; p += 32) m = fmaxf(m, lse_s[p * 2 + warp]);
      for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
      float s = 0.f;
      for (int p = lane; p < n; p += 32) {
        const float wt = exp2f(lse_s[p * 2 + warp] - m);
        s_w[warp][p] = wt;
        s += wt;
      }
      for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
      if (lane == 0) s_inv[warp] = 1.f / s;
    }
    __syncthreads();
    const int u = tid >> 2, q = tid & 3;
    float a0 = 0.f, a1 = 0.f;
    const int rr = u < nw ? (w_lo + u) / ROWW - r_lo : 0;
    if (u < nw)
      for (int p = q; p < n; p += 4) {
        const u32 x = stage[p * wpp + u];
        const float wt = s_w[rr][p];
        a0 += wt * bf16f(x & 0xffffu);
        a1 += wt * bf16f(x >> 16);
      }
    for (int o = 1; o < 4; o <<= 1) {
      a0 += __shfl_xor_sync(0xffffffffu, a0, o);
      a1 += __shfl_xor_sync(0xffffffffu, a1, o);
    }
    if (u < nw && q == 0) out[w_lo + u] = bf16bits(a0 * s_inv[rr]) | (bf16bits(a1 * s_inv[rr]) << 16);
    if (mode != 3) {
      for (int o = 16; o > 0; o >>= 1) bad += __shfl_xor_sync(0xffffffffu, bad, o);
      if (lane == 0 && bad) atomicAdd(errors, bad);
    }
  }
  __syncthreads();
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ts));
  if (tid == 0) stamps[c * 4 + 3] = ts;  // merged
  if (tid == 0) asm volatile("red.relaxed.gpu.global.add.u64 [%0], 1;" :: "l"(ctr) : "memory");
}
"""


class Endgame:
    """The probe kernel and its buffers, launched on torch's current stream (graph-capturable)."""

    def __init__(self, n: int):
        import cupy as cp

        # A slice is at most 64 pair words (one 16-byte load a lane) and a warp reads at most
        # MAX_PARTS_PER_WARP parts.
        if not 128 <= n <= 8 * MAX_PARTS_PER_WARP:
            raise ValueError(f"the probe needs 128..{8 * MAX_PARTS_PER_WARP} CTAs (got {n})")
        self.cp = cp
        major, minor = torch.cuda.get_device_capability()
        self.kern = cp.RawKernel(
            SRC,
            "endgame",
            options=(
                f"--gpu-architecture=sm_{major}{minor}",
                f"-DSLOT={SLOT_WORDS}",
                f"-DMAXP={MAX_PARTS_PER_WARP}",
                f"-DWPP={SLICE_STRIDE}",
            ),
            enable_cooperative_groups=True,
        )
        self.n = n
        dev = "cuda"
        i64, i32 = torch.int64, torch.int32
        self.ctr = torch.zeros(1, dtype=i64, device=dev)
        self.flags = torch.zeros(n, dtype=i64, device=dev)
        self.part = torch.zeros(n * SLOT_WORDS, dtype=i32, device=dev)
        self.lse = torch.zeros(n * 32, dtype=torch.float32, device=dev)
        self.tpart = torch.zeros(n * SLOT_WORDS, dtype=i64, device=dev)
        self.tlse = torch.zeros(n * 32, dtype=i64, device=dev)
        self.out = torch.zeros(SLOT_WORDS, dtype=i32, device=dev)
        self.errors = torch.zeros(1, dtype=i32, device=dev)
        # %globaltimer of each CTA: entry, its stores issued, every range read, merged.
        self.stamps = torch.zeros((n, 4), dtype=i64, device=dev)
        # Dynamic shared memory: every part's slice, SLICE_STRIDE words apart, then 2 LSEs a part.
        self.smem = n * SLICE_STRIDE * 4 + n * 2 * 4

    def __call__(self, mode: int, stagger_ns: int = 0) -> None:
        cp = self.cp
        stream = torch_stream(cp)
        ptrs = [
            cp.uint64(t.data_ptr())
            for t in (
                self.ctr,
                self.flags,
                self.part,
                self.lse,
                self.tpart,
                self.tlse,
                self.out,
                self.errors,
            )
        ]
        stamps = cp.uint64(self.stamps.data_ptr())
        with stream:
            self.kern(
                (self.n,),
                (256,),
                (cp.int32(mode), *ptrs, cp.int64(stagger_ns), stamps),
                shared_mem=self.smem,
            )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--layers", type=int, default=12, help="launches a graph holds")
    ap.add_argument("--stagger", default="0,1000,3000", help="comma-separated ns")
    ap.add_argument("--ctas", type=int, default=0, help="grid size (default: the SM count)")
    ap.add_argument("--passes", type=int, default=2, help="passes over the modes, alternating")
    ap.add_argument("--check-calls", type=int, default=500, help="eager calls a checked mode")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    n = args.ctas or torch.cuda.get_device_properties(0).multi_processor_count
    probe = Endgame(n)
    res = {"device": torch.cuda.get_device_name(0), "ctas": n, "layers": args.layers, "rows": []}

    # Correctness first: flag and tagged calls back to back, every value checked in the kernel.
    for mode in ("flag", "tagged"):
        probe.errors.zero_()
        for i in range(args.check_calls):
            probe(MODES[mode], 1000 * (i % 4))
        torch.cuda.synchronize()
        res[f"errors_{mode}"] = int(probe.errors.item())
        print(f"{mode}: {args.check_calls} eager calls, values read wrong: {res[f'errors_{mode}']}")
    for mode in MODES.values():  # first launches outside the graphs
        probe(mode)
    torch.cuda.synchronize()

    # Where a call's time goes: the phases of one eager call (after a warm-up), us from the
    # grid's first entry, median over CTAs / the last CTA, median over calls.
    phases = ("entry", "stored", "read", "merged")
    res["phases"] = {}
    print("\none eager call, us after the grid's first CTA entered: median CTA / last CTA")
    print("| mode | stagger ns | " + " | ".join(phases) + " |")
    print("|---|---:|" + "---:|" * len(phases))
    for mode in ("empty", "flag", "tagged", "nowait"):
        for stagger in (0, 3000):
            per_call = []
            for _ in range(20):
                probe(MODES[mode], stagger)
                torch.cuda.synchronize()
                st = probe.stamps.clone()
                st = (st - st[:, 0].min()).double() / 1e3
                per_call.append(
                    [(st[:, k].median().item(), st[:, k].max().item()) for k in range(4)]
                )
            cells = []
            for k in range(4):
                if mode == "empty" and k in (1, 2):  # (no stores, no reads)
                    cells.append("-")
                    continue
                med = statistics.median(c[k][0] for c in per_call)
                last = statistics.median(c[k][1] for c in per_call)
                cells.append(f"{med:.2f} / {last:.2f}")
            res["phases"][f"{mode}_{stagger}"] = per_call
            print(f"| {mode} | {stagger} | " + " | ".join(cells) + " |")

    staggers = [int(s) for s in args.stagger.split(",") if s.strip()]
    times: dict[tuple[str, int], list[float]] = {}
    for pass_ in range(args.passes):
        order = list(MODES) if pass_ % 2 == 0 else list(reversed(MODES))
        for stagger in staggers:
            for mode in order:
                t = graph_us(
                    lambda i, m=MODES[mode], s=stagger: probe(m, s), args.layers, args.reps
                )
                times.setdefault((mode, stagger), []).append(t)
    probe.errors.zero_()
    for mode in ("flag", "tagged"):  # the graphs' calls checked too
        graph_us(lambda i, m=MODES[mode]: probe(m, 1000), args.layers, 3)
    torch.cuda.synchronize()
    res["errors_after_graphs"] = int(probe.errors.item())

    print(
        f"\n{res['device']}, {n} CTAs, graph of {args.layers} launches, median of {args.reps} replays, "
        f"{args.passes} passes (us a call)"
    )
    print("| stagger ns | " + " | ".join(MODES) + " | flag - tagged | flag - nowait |")
    print("|---:|" + "---:|" * (len(MODES) + 2))
    for stagger in staggers:
        med = {m: statistics.median(times[(m, stagger)]) for m in MODES}
        cells = " | ".join(" / ".join(f"{t:.2f}" for t in times[(m, stagger)]) for m in MODES)
        print(
            f"| {stagger} | {cells} | {med['flag'] - med['tagged']:+.2f} | {med['flag'] - med['nowait']:+.2f} |"
        )
        res["rows"].append({"stagger_ns": stagger, **{m: times[(m, stagger)] for m in MODES}})
    print(f"values read wrong in the graphs' calls: {res['errors_after_graphs']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
