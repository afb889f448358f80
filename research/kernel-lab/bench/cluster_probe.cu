// What would a merge through thread-block clusters save over the fused merge's all-global one?
// (diagnostic, run on the device; standalone CUDA C++, no torch)
//
// At B=1 the verify call's end game (epilogue, publish, merge) is ~5-6 us of every call, and
// much of it is the partials' round trip through L2: 132 CTAs each store a 32 x 512 bf16
// partial (4.3 MB in all, two thirds of 5.7k tokens' KV), then each reads its 1/132 of the
// outputs from all 132 (research/kernel-lab/bench/endgame_probe.py, research/kernel-history.md,
// the 2026-12-01 11:27-11:45 UTC runs, results commit b493fdb).
// Its results (2026-12-01, commits cb29c0e and 3d1e8a8): research/kernel-history.md,
// "What the 2026-12-01 17:54-18:47 UTC runs measured and changed".
// Clusters (sm_90 and sm_120 both have them; portable size 8) let C CTAs merge in distributed
// shared memory first, so only n / C partials go through L2. The probe runs the end game
// alone, no attention math, one CTA an SM (137,472 B of dynamic shared memory, as the
// kernel's H200 variant), in these configurations:
//
//   flag N        the fused merge's protocol as endgame_probe.py's "flag" mode: N CTAs store
//                 a partial each, `fence.acq_rel.gpu`, set their flag; CTA c polls the flags
//                 (`ld.acquire.gpu`) and reads its 1/N of every part, merges, stores
//   cluster C     N CTAs in clusters of C: each CTA writes its partial into its own shared
//                 memory; a cluster barrier; CTA rank r merges rows [32 r / C, 32 (r+1) / C)
//                 of its C peers' partials read through `ld.shared::cluster`; stores that
//                 slice of the cluster's partial (one flag a slice, published as above); then
//                 the flag protocol over the N / C cluster partials, CTA c merging its 1/N
//   stage1 C      the cluster configuration's first stage alone (to the cluster barrier after
//                 the distributed reads)
//   push C        as "cluster C", but each CTA pushes the rows its peers own into their shared
//                 memory with one `cp.async.bulk.shared::cluster.shared::cta` a peer (and one
//                 for the LSEs), completing on the owner's mbarrier: no remote loads, no round
//                 trip; the owner waits on its own mbarrier and merges from local memory
//   pstage1 C     the push configuration's first stage alone
//
// Every value read is checked against what its writer stored in that call (integer
// patterns); polls give up after 2 ms and count as errors, so a protocol bug cannot hang the
// device. Also printed: cudaOccupancyMaxActiveClusters for each cluster size with this
// kernel's shared memory, and whether the driver accepts a cooperative launch with clusters.
//
//   nvcc -O2 -arch=sm_90 -o /tmp/cluster_probe research/kernel-lab/bench/cluster_probe.cu && /tmp/cluster_probe
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "probe_util.h"

typedef unsigned long long u64;
typedef unsigned int u32;

constexpr int kSlot = 8192;   // bf16 pairs a partial (32 rows x 512 columns)
constexpr int kRowW = 256;    // pair words a row
constexpr int kSmem = 137472;  // the kernel's H200 variant (one CTA an SM)
constexpr int kThreads = 256;
constexpr int kStride = 72;   // words between two parts' slices in the final stage
constexpr int kMaxParts = 136;
constexpr u64 kPollNs = 2000000;


struct Bufs {
  u64* ctr;      // CTAs ended (the call number is ctr / n + 1)
  u64* flags;    // [n] flag a slot
  u32* part;     // [n][kSlot]
  float* lse;    // [n][32]
  u32* out;      // [kSlot]
  int* errors;
  u64* stamps;   // [n][5] %globaltimer
  int cluster;   // C (cluster kernel)
  int stage1_only;
  int push;      // stage 1 by bulk copies into the owners' shared memory
};

__device__ __forceinline__ u32 pair_of(int j, int w, u64 t) { return (u32)(j * 8192 + w) ^ ((u32)t * 0x9E3779B9u); }
__device__ __forceinline__ float lse_of(int j, int r, u64 t) { return (float)((j + r + (int)t) & 7) * 0.25f; }
__device__ __forceinline__ float bf16f(u32 b) { return __uint_as_float(b << 16); }
__device__ __forceinline__ u32 bf16bits(float x) { return __float_as_uint(x) >> 16; }
__device__ __forceinline__ u64 now_ns() {
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
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
__device__ __forceinline__ void publish(u64* flag, u64 t) {
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
  asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(flag), "l"(t) : "memory");
}
__device__ __forceinline__ u32 cluster_rank() {
  u32 r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }
// The address of `p` (this CTA's shared memory) in cluster rank q's shared memory.
__device__ __forceinline__ u32 peer_addr(const void* p, u32 q) {
  u32 a = static_cast<u32>(__cvta_generic_to_shared(p)), r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(q));
  return r;
}
__device__ __forceinline__ uint4 ld_peer_v4(u32 a) {
  uint4 v;
  asm volatile("ld.shared::cluster.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(a)
               : "memory");
  return v;
}
__device__ __forceinline__ float ld_peer_f32(u32 a) {
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(a) : "memory");
  return v;
}

__device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(u32 bar, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ bool mbar_wait_bounded(u32 bar, u32 parity) {
  const u64 t0 = now_ns();
  u32 done = 0;
  while (!done) {
    asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done)
                 : "r"(bar), "r"(parity)
                 : "memory");
    if (!done && now_ns() - t0 > kPollNs) return false;
  }
  return true;
}
// `bytes` of this CTA's shared memory at src into rank q's shared memory at the same offset as
// dst, completing on rank q's mbarrier at the offset of bar.
__device__ __forceinline__ void push_to_peer(const void* dst, const void* src, u32 bytes, u32 bar, u32 q) {
  const u32 d = peer_addr(dst, q);
  u32 b;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(b) : "r"(bar), "r"(q));
  asm volatile("cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               ::"r"(d), "r"(static_cast<u32>(__cvta_generic_to_shared(src))), "r"(bytes), "r"(b)
               : "memory");
}

// The final merge both configurations share: CTA c merges pair words [w_lo, w_hi) (1/n of the
// outputs, 16-byte aligned) from `np` parts; part j's words live in slot slot0 + j * slot_step,
// its flag is flags[flag0 + j * flag_step]; warp w reads parts w, w + 8, ... as their flags are
// seen (one 16-byte load a lane and part), checking the values part j's writer stored
// (pair_of(tag0 + j, ...)).
__device__ void merge_parts(const Bufs& b, u32* stg, float* stl, int np, int slot0, int slot_step, int flag0,
                            int flag_step, int tag0, u64 t, int& bad, float (*s_w)[kMaxParts], float* s_inv) {
  const int n = gridDim.x, c = blockIdx.x, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int w_lo = (int)((long long)c * kSlot / n) & ~3;
  const int w_hi = c == n - 1 ? kSlot : (int)((long long)(c + 1) * kSlot / n) & ~3;
  const int nw = w_hi - w_lo, r_lo = w_lo / kRowW;
  u64 pending = 0;
  for (int i = 0; i < 17; ++i)
    if (warp + 8 * i < np) pending |= 1ull << i;
  const u64 t0 = now_ns();
  while (pending) {
    bool seen = false;
    if (lane < 17 && (pending >> lane & 1)) seen = ld_acquire(b.flags + flag0 + (warp + 8 * lane) * flag_step) == t;
    const u64 now_mask = (u64)__ballot_sync(0xffffffffu, seen) & pending;
    __syncwarp();
    uint4 x[17];
    float l[17];
#pragma unroll
    for (int i = 0; i < 17; ++i) {
      x[i] = make_uint4(0u, 0u, 0u, 0u);
      l[i] = 0.f;
      if (now_mask >> i & 1) {
        const int j = warp + 8 * i, slot = slot0 + j * slot_step;
        if (4 * lane < nw) x[i] = __ldcg(reinterpret_cast<const uint4*>(b.part + (size_t)slot * kSlot + w_lo) + lane);
        if (lane < 2) l[i] = __ldcg(b.lse + slot * 32 + min(r_lo + lane, 31));
      }
    }
#pragma unroll
    for (int i = 0; i < 17; ++i) {
      if (!(now_mask >> i & 1)) continue;
      const int j = warp + 8 * i;
      if (4 * lane < nw) {
        *reinterpret_cast<uint4*>(stg + j * kStride + 4 * lane) = x[i];
        const int w = w_lo + 4 * lane, tag = tag0 + j;
        bad += (x[i].x != pair_of(tag, w, t)) + (x[i].y != pair_of(tag, w + 1, t)) +
               (x[i].z != pair_of(tag, w + 2, t)) + (x[i].w != pair_of(tag, w + 3, t));
      }
      if (lane < 2) stl[j * 2 + lane] = l[i];
    }
    pending &= ~now_mask;
    if (pending && now_ns() - t0 > kPollNs) {  // a protocol bug: count it, do not hang
      bad += 1000000;
      break;
    }
  }
  __syncthreads();
  if (tid == 0) b.stamps[c * 5 + 3] = now_ns();  // every part's range read
  if (warp < 2) {
    float m = __int_as_float(0xff800000);
    for (int j = lane; j < np; j += 32) m = fmaxf(m, stl[j * 2 + warp]);
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    float s = 0.f;
    for (int j = lane; j < np; j += 32) {
      const float wt = exp2f(stl[j * 2 + warp] - m);
      s_w[warp][j] = wt;
      s += wt;
    }
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) s_inv[warp] = 1.f / s;
  }
  __syncthreads();
  const int u = tid >> 2, q = tid & 3;
  float a0 = 0.f, a1 = 0.f;
  const int rr = u < nw ? (w_lo + u) / kRowW - r_lo : 0;
  if (u < nw)
    for (int j = q; j < np; j += 4) {
      const u32 x = stg[j * kStride + u];
      const float wt = s_w[rr][j];
      a0 += wt * bf16f(x & 0xffffu);
      a1 += wt * bf16f(x >> 16);
    }
  for (int o = 1; o < 4; o <<= 1) {
    a0 += __shfl_xor_sync(0xffffffffu, a0, o);
    a1 += __shfl_xor_sync(0xffffffffu, a1, o);
  }
  if (u < nw && q == 0) b.out[w_lo + u] = bf16bits(a0 * s_inv[rr]) | (bf16bits(a1 * s_inv[rr]) << 16);
}

__device__ __forceinline__ void report(const Bufs& b, int bad) {
  for (int o = 16; o > 0; o >>= 1) bad += __shfl_xor_sync(0xffffffffu, bad, o);
  if ((threadIdx.x & 31) == 0 && bad) atomicAdd(b.errors, bad);
}

extern "C" __global__ void __launch_bounds__(kThreads, 1) endgame_flag(Bufs b) {
  extern __shared__ __align__(16) u32 smem[];
  __shared__ u64 s_t;
  __shared__ float s_w[2][kMaxParts];
  __shared__ float s_inv[2];
  const int n = gridDim.x, c = blockIdx.x, tid = threadIdx.x;
  if (tid == 0) s_t = ld_relaxed(b.ctr) / (u64)n + 1;
  __syncthreads();
  const u64 t = s_t;
  if (tid == 0) b.stamps[c * 5 + 0] = now_ns();
  for (int w = tid * 4; w < kSlot; w += 4 * kThreads)
    *reinterpret_cast<uint4*>(b.part + (size_t)c * kSlot + w) =
        make_uint4(pair_of(c, w, t), pair_of(c, w + 1, t), pair_of(c, w + 2, t), pair_of(c, w + 3, t));
  if (tid < 32) b.lse[c * 32 + tid] = lse_of(c, tid, t);
  __syncthreads();
  if (tid == 0) {
    b.stamps[c * 5 + 1] = now_ns();
    publish(b.flags + c, t);
    b.stamps[c * 5 + 2] = now_ns();
  }
  int bad = 0;
  merge_parts(b, smem, reinterpret_cast<float*>(smem + kMaxParts * kStride), n, 0, 1, 0, 1, 0, t, bad, s_w, s_inv);
  report(b, bad);
  __syncthreads();
  if (tid == 0) {
    b.stamps[c * 5 + 4] = now_ns();
    asm volatile("red.relaxed.gpu.global.add.u64 [%0], 1;" ::"l"(b.ctr) : "memory");
  }
}

extern "C" __global__ void __launch_bounds__(kThreads, 1) endgame_cluster(Bufs b) {
  extern __shared__ __align__(16) u32 smem[];
  u32* ps = smem;                                          // this CTA's partial [kSlot]
  float* pl = reinterpret_cast<float*>(smem + kSlot);      // its LSEs [32]
  u32* recv = smem + kSlot + 32;                           // push: [C][rows of a slice] from each peer
  float* recv_lse = reinterpret_cast<float*>(recv + kSlot);  // push: [C][8] LSEs from each peer
  u32* stg = recv + kSlot + 64;                             // final stage [parts][kStride]
  float* stl = reinterpret_cast<float*>(stg + kMaxParts * kStride);
  __shared__ __align__(8) u64 s_bar;  // push: the peers' slices landed
  __shared__ u64 s_t;
  __shared__ float s_w[2][kMaxParts];
  __shared__ float s_inv[2];
  __shared__ float s_w1[8][8];  // stage 1: weights [row of the slice][peer]
  const int n = gridDim.x, c = blockIdx.x, tid = threadIdx.x;
  const int C = b.cluster, G = n / C, g = c / C;
  const int r = static_cast<int>(cluster_rank());
  const int rps = 32 / C, row0 = r * rps, w0 = row0 * kRowW;
  const u32 bar = static_cast<u32>(__cvta_generic_to_shared(&s_bar));
  if (tid == 0) {
    s_t = ld_relaxed(b.ctr) / (u64)n + 1;
    if (b.push) {  // (a kernel would do this at its start, long before its epilogue)
      mbar_init(bar, 1);
      asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
      mbar_expect_tx(bar, C * (rps * kRowW * 4 + 32));
    }
  }
  __syncthreads();
  const u64 t = s_t;
  if (tid == 0) b.stamps[c * 5 + 0] = now_ns();
  if (b.push) cluster_arrive();  // every peer's mbarrier is armed before anyone pushes
  for (int w = tid * 4; w < kSlot; w += 4 * kThreads)
    *reinterpret_cast<uint4*>(ps + w) =
        make_uint4(pair_of(c, w, t), pair_of(c, w + 1, t), pair_of(c, w + 2, t), pair_of(c, w + 3, t));
  if (tid < 32) pl[tid] = lse_of(c, tid, t);
  int bad = 0;
  if (b.push) {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the stores above, before the copy engine reads
    __syncthreads();
    cluster_wait();
    if (tid < C) {  // thread q pushes peer q's rows and their LSEs
      const int q = tid, qrow = q * rps;
      push_to_peer(recv + r * rps * kRowW, ps + qrow * kRowW, rps * kRowW * 4, bar, q);
      push_to_peer(recv_lse + r * 8, pl + qrow, 32, bar, q);
    }
    if (!mbar_wait_bounded(bar, 0)) bad += 1000000;
    if (tid < rps * C) {
      const int i = tid / C, q = tid % C;
      s_w1[i][q] = recv_lse[q * 8 + i];
    }
  } else {
    cluster_arrive();
    cluster_wait();
    // Stage 1: rows [r * rps, (r + 1) * rps) of the C peers' partials.
    if (tid < rps * C) {
      const int i = tid / C, q = tid % C;
      s_w1[i][q] = ld_peer_f32(peer_addr(pl + row0 + i, q));
    }
  }
  if (tid == 0) b.stamps[c * 5 + 1] = now_ns();
  __syncthreads();
  float lse_out = 0.f;
  if (tid < rps) {
    float m = s_w1[tid][0];
    for (int q = 1; q < C; ++q) m = fmaxf(m, s_w1[tid][q]);
    float s = 0.f;
    for (int q = 0; q < C; ++q) s += exp2f(s_w1[tid][q] - m);
    const float inv = 1.f / s;
    for (int q = 0; q < C; ++q) s_w1[tid][q] = exp2f(s_w1[tid][q] - m) * inv;
    lse_out = m + log2f(s);
  }
  __syncthreads();
  float sink = 0.f;
  const int tag = 100000 + g;  // the cluster partial's pattern (what stage 2 stores)
  for (int v = tid; v < rps * kRowW / 4; v += kThreads) {
    const int w = w0 + 4 * v, i = (4 * v) / kRowW;
    uint4 x[8];
#pragma unroll
    for (int q = 0; q < 8; ++q)
      if (q < C) x[q] = b.push ? *reinterpret_cast<const uint4*>(recv + q * rps * kRowW + 4 * v)
                               : ld_peer_v4(peer_addr(ps + w, q));
    float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int q = 0; q < 8; ++q) {
      if (q >= C) continue;
      const int src = g * C + q;
      bad += (x[q].x != pair_of(src, w, t)) + (x[q].y != pair_of(src, w + 1, t)) +
             (x[q].z != pair_of(src, w + 2, t)) + (x[q].w != pair_of(src, w + 3, t));
      const float wt = s_w1[i][q];
      const u32 e[4] = {x[q].x, x[q].y, x[q].z, x[q].w};
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        acc[2 * k] += wt * bf16f(e[k] & 0xffffu);
        acc[2 * k + 1] += wt * bf16f(e[k] >> 16);
      }
    }
#pragma unroll
    for (int k = 0; k < 8; ++k) sink += acc[k];
    if (!b.stage1_only)  // the merged slice (as a checkable pattern; the arithmetic stays live via sink)
      *reinterpret_cast<uint4*>(b.part + (size_t)g * kSlot + w) =
          make_uint4(pair_of(tag, w, t), pair_of(tag, w + 1, t), pair_of(tag, w + 2, t), pair_of(tag, w + 3, t));
  }
  if (sink == 1234.5f) bad += 1;  // keeps the merge's arithmetic
  cluster_arrive();  // done reading the peers (they wait for it before leaving)
  if (!b.stage1_only) {
    if (tid < rps) b.lse[g * 32 + row0 + tid] = lse_out * 0.f + lse_of(tag, row0 + tid, t);
    __syncthreads();
    if (tid == 0) {
      b.stamps[c * 5 + 2] = now_ns();
      publish(b.flags + g * C + r, t);
    }
    // Final: CTA c's words lie in row w_lo / 256, whose stage-1 slice is rank (row / rps).
    const int w_lo = (int)((long long)c * kSlot / n) & ~3;
    const int rs = (w_lo / kRowW) / rps;
    merge_parts(b, stg, stl, G, 0, 1, rs, C, 100000, t, bad, s_w, s_inv);
  }
  report(b, bad);
  cluster_wait();
  if (tid == 0) {
    b.stamps[c * 5 + 4] = now_ns();
    asm volatile("red.relaxed.gpu.global.add.u64 [%0], 1;" ::"l"(b.ctr) : "memory");
  }
}

namespace {

struct Config {
  const char* name;
  bool cluster;
  int n, C, stage1_only, push;
  Bufs b{};
  bool coop = false;
};

cudaError_t launch(const Config& k, cudaStream_t s, bool coop) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(k.n);
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = kSmem;
  cfg.stream = s;
  cudaLaunchAttribute attr[2];
  int na = 0;
  if (k.cluster) {
    attr[na].id = cudaLaunchAttributeClusterDimension;
    attr[na].val.clusterDim.x = k.C;
    attr[na].val.clusterDim.y = 1;
    attr[na++].val.clusterDim.z = 1;
  }
  if (coop) {
    attr[na].id = cudaLaunchAttributeCooperative;
    attr[na++].val.cooperative = 1;
  }
  cfg.attrs = attr;
  cfg.numAttrs = na;
  const cudaError_t e = k.cluster ? cudaLaunchKernelEx(&cfg, endgame_cluster, k.b) : cudaLaunchKernelEx(&cfg, endgame_flag, k.b);
  if (e != cudaSuccess) cudaGetLastError();
  return e;
}

// us a call: a graph of `layers` launches replayed `reps` times, median replay / layers.
double graph_us(const Config& k, cudaStream_t s, int layers, int reps) {
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < layers; ++i) CHECK(launch(k, s, k.coop));
  CHECK(cudaStreamEndCapture(s, &g));
  CHECK(cudaGraphInstantiate(&ge, g, 0));
  cudaEvent_t a, z;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&z));
  std::vector<double> v;
  for (int i = 0; i < reps + 3; ++i) {
    CHECK(cudaEventRecord(a, s));
    CHECK(cudaGraphLaunch(ge, s));
    CHECK(cudaEventRecord(z, s));
    CHECK(cudaEventSynchronize(z));
    float ms;
    CHECK(cudaEventElapsedTime(&ms, a, z));
    if (i >= 3) v.push_back(ms * 1000.0 / layers);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(z);
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  return median(v);
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 30;
  int dev = 0, sms = 0;
  CHECK(cudaGetDevice(&dev));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, dev));
  std::printf("%s, %d SMs\n", prop.name, sms);
  CHECK(cudaFuncSetAttribute(endgame_flag, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  CHECK(cudaFuncSetAttribute(endgame_cluster, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));

  // How many clusters of each size fit at once with one CTA an SM.
  int max_clusters[9] = {};
  for (int C : {2, 4, 8}) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(C * 64);
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = kSmem;
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = C;
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = 1;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    const cudaError_t e = cudaOccupancyMaxActiveClusters(&max_clusters[C], endgame_cluster, &cfg);
    std::printf("cluster size %d: at most %d clusters at once (%d CTAs)%s%s\n", C, max_clusters[C],
                C * max_clusters[C], e == cudaSuccess ? "" : ", query failed: ", e == cudaSuccess ? "" : cudaGetErrorString(e));
  }

  std::vector<Config> ks;
  ks.push_back({"flag 132", false, sms, 1, 0, 0});
  ks.push_back({"flag 128", false, 128, 1, 0, 0});
  ks.push_back({"flag 120", false, 120, 1, 0, 0});
  static char names[8][32];
  int nn = 0;
  for (int C : {4, 8}) {
    const int n = std::min(128, C * max_clusters[C]) / C * C;
    if (n < 16) continue;
    for (int push = 0; push < 2; ++push)
      for (int st1 = 0; st1 < 2; ++st1) {
        std::snprintf(names[nn], 32, "%s %d x %d", push ? (st1 ? "pstage1" : "push") : (st1 ? "stage1" : "cluster"), C,
                      n / C);
        ks.push_back({names[nn++], true, n, C, st1, push});
      }
  }
  for (Config& k : ks) {
    Bufs& b = k.b;
    CHECK(cudaMalloc(&b.ctr, 8));
    CHECK(cudaMalloc(&b.flags, 8 * kMaxParts));
    CHECK(cudaMalloc(&b.part, 4ull * kSlot * kMaxParts));
    CHECK(cudaMalloc(&b.lse, 4 * 32 * kMaxParts));
    CHECK(cudaMalloc(&b.out, 4 * kSlot));
    CHECK(cudaMalloc(&b.errors, 4));
    CHECK(cudaMalloc(&b.stamps, 8 * 5 * kMaxParts));
    CHECK(cudaMemset(b.ctr, 0, 8));
    CHECK(cudaMemset(b.flags, 0, 8 * kMaxParts));
    CHECK(cudaMemset(b.errors, 0, 4));
    CHECK(cudaMemset(b.stamps, 0, 8 * 5 * kMaxParts));
    b.cluster = k.C;
    b.stage1_only = k.stage1_only;
    b.push = k.push;
  }
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  // Cooperative launches: every config tries one; the cluster ones report whether the driver
  // takes the pair (else they run as plain launches; 128 CTAs of one an SM are co-resident on
  // an idle GPU, and the polls give up after 2 ms).
  for (Config& k : ks) {
    const cudaError_t e = launch(k, s, true);
    k.coop = e == cudaSuccess;
    if (!k.coop) CHECK(launch(k, s, false));
    CHECK(cudaStreamSynchronize(s));
    std::printf("%-16s cooperative launch: %s\n", k.name, k.coop ? "accepted" : cudaGetErrorString(e));
  }
  // Correctness: 300 eager calls each, every value checked in the kernels.
  for (Config& k : ks) {
    CHECK(cudaMemset(k.b.errors, 0, 4));
    for (int i = 0; i < 300; ++i) CHECK(launch(k, s, k.coop));
    CHECK(cudaStreamSynchronize(s));
    int err = 0;
    CHECK(cudaMemcpy(&err, k.b.errors, 4, cudaMemcpyDeviceToHost));
    std::printf("%-16s 300 eager calls, values read wrong or polls timed out: %d\n", k.name, err);
  }
  // Phases of one eager call: us after the grid's first entry, median CTA / last CTA, median
  // of 20 calls. Points: 1 stored (cluster: first cluster barrier passed; push: the peers' rows
  // landed), 2 published (before the fence; cluster and push: its slice stored), 3 every range
  // read, 4 done.
  std::printf("\n| config | stored | published | read | done |\n|---|---:|---:|---:|---:|\n");
  for (Config& k : ks) {
    std::vector<std::vector<double>> med(5), last(5);
    std::vector<u64> st(5 * k.n);
    for (int i = 0; i < 20; ++i) {
      CHECK(cudaMemset(k.b.stamps, 0, 8 * 5 * kMaxParts));
      CHECK(launch(k, s, k.coop));
      CHECK(cudaStreamSynchronize(s));
      CHECK(cudaMemcpy(st.data(), k.b.stamps, 8 * 5 * k.n, cudaMemcpyDeviceToHost));
      u64 t0 = ~0ull;
      for (int c = 0; c < k.n; ++c) t0 = std::min(t0, st[c * 5]);
      for (int p = 1; p < 5; ++p) {
        std::vector<double> v;
        for (int c = 0; c < k.n; ++c)
          if (st[c * 5 + p]) v.push_back((st[c * 5 + p] - t0) / 1e3);
        if (v.empty()) continue;
        med[p].push_back(median(v));
        last[p].push_back(*std::max_element(v.begin(), v.end()));
      }
    }
    std::printf("| %s |", k.name);
    for (int p = 1; p < 5; ++p) {
      if (med[p].empty())
        std::printf(" - |");
      else
        std::printf(" %.2f / %.2f |", median(med[p]), median(last[p]));
    }
    std::printf("\n");
  }
  // Graph us a call, two passes in alternating order.
  std::vector<std::vector<double>> us(ks.size());
  for (int pass = 0; pass < 2; ++pass)
    for (size_t i = 0; i < ks.size(); ++i) {
      const size_t j = pass % 2 ? ks.size() - 1 - i : i;
      us[j].push_back(graph_us(ks[j], s, 12, reps));
    }
  std::printf("\ngraph of 12 launches, median of %d replays, us a call (pass 1 / pass 2)\n", reps);
  for (size_t i = 0; i < ks.size(); ++i)
    std::printf("%-16s %7.2f / %7.2f   (%s)\n", ks[i].name, us[i][0], us[i][1], ks[i].coop ? "cooperative" : "plain");
  int total = 0;
  for (Config& k : ks) {
    int err = 0;
    CHECK(cudaMemcpy(&err, k.b.errors, 4, cudaMemcpyDeviceToHost));
    total += err;
  }
  std::printf("errors after the graphs: %d\n", total);
  return 0;
}
