// What would a 64-row M tile buy the math of the block loop? (diagnostic, run on the device;
// standalone CUDA C++, no torch)
//
// At H=64 the verify kernel is bound by its math warps: 32 rows a CTA tile, 8 math warps + 2
// load warps, 168 registers a thread (10 warps: a scheduler holds 3), ~190 KB of shared-memory
// traffic a 32-token block for 544 MMAs, 38.9% of the measured mma.sync rate
// (docs/kernel-benchmarks.md; the 2026-12-01 07:49-08:06 UTC profile in
// research/kernel-history.md). A 64-row tile
// feeds each K and V fragment to twice the MMAs, but holds twice the Q fragments and O
// accumulators: it fits no register budget with 10 warps. With 8 warps and no load warps (the
// math warps issue the bulk copies) a thread may have 255.
//
// The probe runs the block loop alone, the kernel's fragment code generalised to R rows: every
// CTA (one an SM) streams NB blocks of 32 KV rows (1152 B each, one cp.async.bulk a row, from
// an L2-resident pool in a random order) through a ring of stages, computes S = Q K^T (warp =
// row half x k-group of 144 dims, Q in registers), reduces the k-groups in shared memory, runs
// the lazy-max softmax (a CTA-wide vote, as the kernel) and accumulates O += P V (64 columns a
// warp); then it writes O / l. No schedule, masking, partials or merge. Configurations:
//
//   r32-l2   32 rows, 8 math + 2 load warps (the kernel's shape: 320 threads, 168 registers)
//   r32-l0   32 rows, 8 warps that also issue the copies (256 threads, up to 255 registers)
//   r64-l0   64 rows, 8 warps that also issue the copies (256 threads, up to 255 registers)
//
// each with the copies ("copy") and without them ("math": the stages are filled once and
// reused, the kernel's math-only diagnostic). Printed per configuration: registers and local
// memory (spills) from the compiled kernel, the time a block (median of the reps), the rate
// in TFLOP/s (2 x rows x 32 x 1088 a block) and its share of a register-only mma.sync loop
// measured in the same run, and the relative Frobenius error of one CTA's output against an
// fp64 reference on the host (the same tokens in the same order).
//
//   nvcc -O3 -arch=sm_90 -o /tmp/tile_probe research/kernel-lab/bench/tile_probe.cu && /tmp/tile_probe [NB [REPS [CONFIG]]]
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "probe_util.h"
#include "../csrc/verify_main.cuh"

namespace {

using kdtree_mla::detail::bulk_copy_g2s;
using kdtree_mla::detail::ldmatrix_x4;
using kdtree_mla::detail::ldmatrix_x4_trans;
using kdtree_mla::detail::math_sync;
using kdtree_mla::detail::math_sync_or;
using kdtree_mla::detail::mbar_arrive;
using kdtree_mla::detail::mbar_expect_tx;
using kdtree_mla::detail::mbar_init;
using kdtree_mla::detail::mbar_wait;
using kdtree_mla::detail::mma_bf16;
using kdtree_mla::detail::pack_bf16x2;
using kdtree_mla::detail::smem_u32;

constexpr int kDim = 576, kDimV = 512, kBlockN = 32, kKGroups = 4, kKSteps = 9;
constexpr int kRowBytes = kDim * 2;
constexpr int kKvRowBytes = (kDim + 8) * 2;  // the kernel's padded smem row
constexpr int kStageBytes = kBlockN * kKvRowBytes;
constexpr int kRedRow = kBlockN + 8, kPRow = kBlockN + 8;
constexpr int kMathThreads = kdtree_mla::VerifyTraits::kMathThreads;  // math_sync's barrier: 8 warps
constexpr int kPool = 8192;   // KV rows in the pool (9.4 MB: L2-resident)
constexpr float kScaleLog2 = 0.0721687836f * 1.44269504f;  // 192^-0.5, in log2 units

template <int kRows, int kStages>
constexpr int smem_bytes() {
  return kStages * kStageBytes + kKGroups * kRows * kRedRow * 4 + kRows * kPRow * 2 + 2 * kRows * 4;
}

// Pool row of token r of block i: a random permutation of the pool, walked block by block.
__device__ __forceinline__ const __nv_bfloat16* kv_row(const __nv_bfloat16* pool, const int* perm, int i, int r) {
  return pool + int64_t(perm[(i * kBlockN + r) % kPool]) * kDim;
}

// How the blocks reach the ring (kCopyMode; with load warps only kMath and kBulk apply).
enum CopyMode : int {
  kMath = 0,     // none: the stages are filled once and reused (the math alone)
  kBulk = 1,     // one cp.async.bulk a row, by the load warps or, without them, right after the
                 // block's S barrier by lanes 0-3 of every math warp
  kSpread = 2,   // the same copies, one lane at a time between the first P V MMAs
  kCpAsync = 3,  // 16-byte cp.async, 9 a thread, right after the S barrier, completing on the
                 // stage's mbarrier (cp.async.mbarrier.arrive.noinc)
};

// kRows query rows, kLoaders load warps (0: the math warps issue the copies), kCopyMode above.
template <int kRows, int kLoaders, int kCopyMode, int kStages>
__global__ void __launch_bounds__(kMathThreads + 32 * kLoaders, 1)
    tile_kernel(const __nv_bfloat16* q, const __nv_bfloat16* pool, const int* perm, int nb, float* out,
                long long* stats) {
  constexpr int kMt = kRows / 32;           // m16 tiles a warp holds in S (its row half)
  constexpr int kMa = kRows / 16;           // m16 tiles of P V
  constexpr int kTpr = kMathThreads / kRows;  // softmax threads a row
  constexpr int kCols = kBlockN / kTpr;       // and columns a thread
  constexpr bool kCopy = kCopyMode != kMath;
  static_assert(kLoaders == 0 || kCopyMode <= kBulk, "load warps copy with cp.async.bulk");
  static_assert(kRows == 32 || kRows == 64, "32 or 64 rows");
  extern __shared__ __align__(128) uint8_t smem[];
  float* red_s = reinterpret_cast<float*>(smem + kStages * kStageBytes);
  __nv_bfloat16* p_s = reinterpret_cast<__nv_bfloat16*>(smem + kStages * kStageBytes + kKGroups * kRows * kRedRow * 4);
  float* alpha_s = reinterpret_cast<float*>(smem + kStages * kStageBytes + kKGroups * kRows * kRedRow * 4 + kRows * kPRow * 2);
  float* inv_s = alpha_s + kRows;
  __shared__ __align__(8) uint64_t full_bar[kStages];
  __shared__ __align__(8) uint64_t empty_bar[kStages];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const uint32_t base = smem_u32(smem);
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(smem_u32(&full_bar[s]), kCopyMode == kCpAsync ? kMathThreads : 1);
      mbar_init(smem_u32(&empty_bar[s]), 8);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  // Q tile into the first stages (16-byte pieces), then its fragments into registers.
  const __nv_bfloat16* qc = q + int64_t(blockIdx.x % 4) * kRows * kDim;
  for (int i = tid; i < kRows * kDim / 8; i += blockDim.x) {
    const int r = i / (kDim / 8), c = i % (kDim / 8);
    *reinterpret_cast<uint4*>(smem + r * kKvRowBytes + c * 16) = reinterpret_cast<const uint4*>(qc + r * kDim)[c];
  }
  __syncthreads();
  const int mi = warp & 1, kg = warp >> 1;
  const int g = lane >> 2, t4 = lane & 3, mat = lane >> 3, r8 = lane & 7;
  uint32_t qf[kMt][kKSteps][4];
  if (warp < 8) {
#pragma unroll
    for (int mt = 0; mt < kMt; ++mt)
#pragma unroll
      for (int ks = 0; ks < kKSteps; ++ks)
        ldmatrix_x4(qf[mt][ks], base + (mi * (kRows / 2) + mt * 16 + (mat & 1) * 8 + r8) * kKvRowBytes +
                                    (kg * kKSteps * 16 + ks * 16 + (mat >> 1) * 8) * 2);
  }
  __syncthreads();  // the stages are free for KV

  // Copies block i into its stage: row `row` by this thread (the caller picks who).
  auto put_row = [&](int i, int row, const __nv_bfloat16* src) {
    bulk_copy_g2s(base + (i % kStages) * kStageBytes + row * kKvRowBytes, src, kRowBytes,
                  smem_u32(&full_bar[i % kStages]));
  };
  // cp.async: warp w copies rows 4w..4w+3 (288 pieces of 16 B, 9 a lane); lane l < 4 holds
  // row 4w + l's source, which the others read by shuffle.
  auto put_cpasync = [&](int i, const __nv_bfloat16* src) {
    const uint32_t dst = base + (i % kStages) * kStageBytes + warp * 4 * kKvRowBytes;
#pragma unroll
    for (int k = 0; k < 9; ++k) {
      const int c = lane + 32 * k, rl = c / 72, col = c % 72;
      const auto* s = reinterpret_cast<const __nv_bfloat16*>(
          __shfl_sync(0xffffffffu, reinterpret_cast<uintptr_t>(src), rl));
      kdtree_mla::detail::cp_async_cg16(dst + rl * kKvRowBytes + col * 16, s + col * 8);
    }
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_u32(&full_bar[i % kStages]))
                 : "memory");
  };
  const int first = kCopy ? min(nb, kStages) : kStages;
  if constexpr (kCopyMode == kCpAsync) {
    __syncthreads();
    for (int i = 0; i < first; ++i) put_cpasync(i, lane < 4 ? kv_row(pool, perm, i, warp * 4 + lane) : nullptr);
  } else {
    if (tid == 0)
      for (int i = 0; i < first; ++i) mbar_expect_tx(smem_u32(&full_bar[i]), kBlockN * kRowBytes);
    __syncthreads();
    if (tid < kBlockN)
      for (int i = 0; i < first; ++i) put_row(i, tid, kv_row(pool, perm, i, tid));
  }

  if constexpr (kLoaders > 0) {
    if (warp >= 8) {  // load warps: blocks kStages.. into the ring, rows split between them
      if (!kCopy) return;
      constexpr int kLoadRows = kBlockN / kLoaders;
      const int lw = warp - 8, row = lw * kLoadRows + (lane < kLoadRows ? lane : 0);
      const __nv_bfloat16* src = kStages < nb ? kv_row(pool, perm, kStages, row) : nullptr;
      for (int i = kStages; i < nb; ++i) {
        mbar_wait(smem_u32(&empty_bar[i % kStages]), ((i / kStages) & 1) ^ 1);
        if (lw == 0 && lane == 0) mbar_expect_tx(smem_u32(&full_bar[i % kStages]), kBlockN * kRowBytes);
        __syncwarp();
        if (lane < kLoadRows) put_row(i, row, src);
        if (i + 1 < nb) src = kv_row(pool, perm, i + 1, row);
      }
      return;
    }
  }

  // Math warps. Copy role without load warps: warp w's lanes 0-3 copy rows 4w..4w+3 of block
  // i - 1 + kStages into the stage block i - 1 left, once every warp is past its P V.
  const bool copier = kLoaders == 0 && lane < 4;
  const int crow = warp * 4 + lane;
  const __nv_bfloat16* next_src = copier && kStages < nb ? kv_row(pool, perm, kStages, crow) : nullptr;
  float acc[kMa][8][4];
#pragma unroll
  for (int a = 0; a < kMa; ++a)
#pragma unroll
    for (int ni = 0; ni < 8; ++ni)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[a][ni][c] = 0.f;
  const int sm_row = tid / kTpr, sm_col = (tid % kTpr) * kCols;
  float m_run = -INFINITY, l_part = 0.f;
  // Thread 0's clock: cycles in the loop, waiting for a stage, issuing its refill (stats).
  long long t_wait = 0, t_copy = 0, t_mark = 0;
  const long long t_loop = clock64();
  for (int i = 0; i < nb; ++i) {
    const uint32_t stage = base + (i % kStages) * kStageBytes;
    if (tid == 0) t_mark = clock64();
    if (kCopy || i < kStages) mbar_wait(smem_u32(&full_bar[i % kStages]), (i / kStages) & 1);
    if (tid == 0) t_wait += clock64() - t_mark;
    // S = Q K^T over this warp's k-group, one token half h at a time with 64 rows (16
    // accumulators fewer live: no spills), both halves together with 32 (the kernel's order).
    const uint32_t kaddr = stage + ((mat >> 1) * 8 + r8) * kKvRowBytes + (kg * kKSteps * 16 + (mat & 1) * 8) * 2;
    constexpr int kHalves = kRows == 64 ? 1 : 2;  // token halves a pass
#pragma unroll
    for (int h0 = 0; h0 < 2; h0 += kHalves) {
      float sa[kMt][kHalves][2][4];
#pragma unroll
      for (int mt = 0; mt < kMt; ++mt)
#pragma unroll
        for (int h = 0; h < kHalves; ++h)
#pragma unroll
          for (int ni = 0; ni < 2; ++ni)
#pragma unroll
            for (int c = 0; c < 4; ++c) sa[mt][h][ni][c] = 0.f;
#pragma unroll
      for (int ks = 0; ks < kKSteps; ++ks)
#pragma unroll
        for (int h = 0; h < kHalves; ++h) {
          uint32_t kb[4];
          ldmatrix_x4(kb, kaddr + (h0 + h) * 16 * kKvRowBytes + ks * 32);
#pragma unroll
          for (int mt = 0; mt < kMt; ++mt) {
            mma_bf16(sa[mt][h][0], qf[mt][ks], kb[0], kb[1]);
            mma_bf16(sa[mt][h][1], qf[mt][ks], kb[2], kb[3]);
          }
        }
#pragma unroll
      for (int mt = 0; mt < kMt; ++mt)
#pragma unroll
        for (int h = 0; h < kHalves; ++h)
#pragma unroll
          for (int ni = 0; ni < 2; ++ni)
#pragma unroll
            for (int half = 0; half < 2; ++half) {
              const int r = mi * (kRows / 2) + mt * 16 + g + half * 8, c = (h0 + h) * 16 + ni * 8 + t4 * 2;
              *reinterpret_cast<float2*>(&red_s[(kg * kRows + r) * kRedRow + c]) =
                  make_float2(sa[mt][h][ni][half * 2], sa[mt][h][ni][half * 2 + 1]);
            }
    }
    math_sync();  // S partials complete; every warp is past P V of block i - 1
    // The refill of the stage block i - 1 left (every warp is past its P V): block j.
    const int j = i - 1 + kStages;
    const bool refill = kLoaders == 0 && kCopy && i >= 1 && j < nb;
    if (tid == 0) t_mark = clock64();
    if (kCopyMode == kBulk && refill && copier) {
      if (crow == 0) mbar_expect_tx(smem_u32(&full_bar[j % kStages]), kBlockN * kRowBytes);
      put_row(j, crow, next_src);
      if (j + 1 < nb) next_src = kv_row(pool, perm, j + 1, crow);
    }
    if (kCopyMode == kCpAsync && refill) {
      put_cpasync(j, next_src);
      if (copier && j + 1 < nb) next_src = kv_row(pool, perm, j + 1, crow);
    }
    if (tid == 0) t_copy += clock64() - t_mark;
    // Softmax (lazy max, as the kernel's): kCols logits of row sm_row.
    float v[kCols];
#pragma unroll
    for (int c4 = 0; c4 < kCols / 4; ++c4) {
      float4 x = *reinterpret_cast<const float4*>(&red_s[sm_row * kRedRow + sm_col + c4 * 4]);
#pragma unroll
      for (int k = 1; k < kKGroups; ++k) {
        const float4 y = *reinterpret_cast<const float4*>(&red_s[(k * kRows + sm_row) * kRedRow + sm_col + c4 * 4]);
        x.x += y.x;
        x.y += y.y;
        x.z += y.z;
        x.w += y.w;
      }
      v[c4 * 4 + 0] = x.x * kScaleLog2;
      v[c4 * 4 + 1] = x.y * kScaleLog2;
      v[c4 * 4 + 2] = x.z * kScaleLog2;
      v[c4 * 4 + 3] = x.w * kScaleLog2;
    }
    auto write_p = [&](float m) {
      const float mu = m == -INFINITY ? 0.f : m;
      float s = 0.f;
      uint32_t pk[kCols / 2];
#pragma unroll
      for (int j = 0; j < kCols; j += 2) {
        const float a = exp2f(v[j] - mu), b = exp2f(v[j + 1] - mu);
        s += a + b;
        pk[j / 2] = pack_bf16x2(a, b);
      }
      if constexpr (kCols == 4)
        *reinterpret_cast<uint2*>(&p_s[sm_row * kPRow + sm_col]) = make_uint2(pk[0], pk[1]);
      else
        *reinterpret_cast<uint4*>(&p_s[sm_row * kPRow + sm_col]) = make_uint4(pk[0], pk[1], pk[2], pk[3]);
      return s;
    };
    bool need = false;
#pragma unroll
    for (int j = 0; j < kCols; ++j) need |= v[j] > m_run + 8.f;
    const float psum = write_p(m_run);
    if (!math_sync_or(need)) {
      l_part += psum;
    } else {
      float bmax = v[0];
#pragma unroll
      for (int j = 1; j < kCols; ++j) bmax = fmaxf(bmax, v[j]);
#pragma unroll
      for (int o = 1; o < kTpr; o <<= 1) bmax = fmaxf(bmax, __shfl_xor_sync(0xffffffffu, bmax, o));
      const float m_new = fmaxf(m_run, bmax);
      const float alpha = exp2f(m_run - (m_new == -INFINITY ? 0.f : m_new));
      l_part = l_part * alpha + write_p(m_new);
      m_run = m_new;
      if (tid % kTpr == 0) alpha_s[sm_row] = alpha;
      math_sync();
#pragma unroll
      for (int a = 0; a < kMa; ++a) {
        const float a0 = alpha_s[a * 16 + g], a1 = alpha_s[a * 16 + g + 8];
#pragma unroll
        for (int ni = 0; ni < 8; ++ni) {
          acc[a][ni][0] *= a0;
          acc[a][ni][1] *= a0;
          acc[a][ni][2] *= a1;
          acc[a][ni][3] *= a1;
        }
      }
    }
    // O += P V, this warp's 64 columns.
#pragma unroll
    for (int kk = 0; kk < 2; ++kk) {
      uint32_t pa[kMa][4];
#pragma unroll
      for (int a = 0; a < kMa; ++a)
        ldmatrix_x4(pa[a], smem_u32(&p_s[(a * 16 + (mat & 1) * 8 + r8) * kPRow + kk * 16 + (mat >> 1) * 8]));
      const uint32_t vrow = stage + (kk * 16 + (mat & 1) * 8 + r8) * kKvRowBytes;
#pragma unroll
      for (int nj = 0; nj < 4; ++nj) {
        uint32_t vb[4];
        ldmatrix_x4_trans(vb, vrow + (warp * 64 + nj * 16 + (mat >> 1) * 8) * 2);
#pragma unroll
        for (int a = 0; a < kMa; ++a) {
          mma_bf16(acc[a][nj * 2], pa[a], vb[0], vb[1]);
          mma_bf16(acc[a][nj * 2 + 1], pa[a], vb[2], vb[3]);
        }
        if (kCopyMode == kSpread && kk == 0 && refill && lane == nj) {
          if (crow == 0) mbar_expect_tx(smem_u32(&full_bar[j % kStages]), kBlockN * kRowBytes);
          put_row(j, crow, next_src);
          if (j + 1 < nb) next_src = kv_row(pool, perm, j + 1, crow);
        }
      }
    }
    if (kLoaders > 0 && kCopy) {
      __syncwarp();
      if (lane == 0) mbar_arrive(smem_u32(&empty_bar[i % kStages]));
    }
  }
  if (tid == 0) {
    stats[blockIdx.x * 3 + 0] = clock64() - t_loop;
    stats[blockIdx.x * 3 + 1] = t_wait;
    stats[blockIdx.x * 3 + 2] = t_copy;
  }
  // O / l.
  float l = l_part;
#pragma unroll
  for (int o = 1; o < kTpr; o <<= 1) l += __shfl_xor_sync(0xffffffffu, l, o);
  if (tid % kTpr == 0) inv_s[sm_row] = 1.f / l;
  math_sync();
  float* oc = out + int64_t(blockIdx.x) * kRows * kDimV;
#pragma unroll
  for (int a = 0; a < kMa; ++a)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = a * 16 + g + half * 8;
      const float inv = inv_s[r];
#pragma unroll
      for (int ni = 0; ni < 8; ++ni) {
        const int c = warp * 64 + ni * 8 + t4 * 2;
        oc[r * kDimV + c] = acc[a][ni][half * 2] * inv;
        oc[r * kDimV + c + 1] = acc[a][ni][half * 2 + 1] * inv;
      }
    }
}

// Register-only mma.sync loop, 8 independent chains a warp (the bench's rate microbenchmark).
__global__ void mma_loop(float* out, int iters) {
  const unsigned t = threadIdx.x + blockIdx.x * 977u;
  uint32_t a[4], b0 = (0x3F00u | ((t * 5u) & 0x3Fu)) * 0x10001u, b1 = (0x3F00u | ((t * 3u) & 0x3Fu)) * 0x10001u;
  for (int i = 0; i < 4; ++i) a[i] = (0x3F80u | ((t * 7u + i) & 0x3Fu)) * 0x10001u;
  float acc[8][4] = {};
  for (int it = 0; it < iters; ++it)
#pragma unroll
    for (int j = 0; j < 8; ++j) mma_bf16(acc[j], a, b0, b1);
  float s = 0.f;
  for (int j = 0; j < 8; ++j)
    for (int c = 0; c < 4; ++c) s += acc[j][c];
  if (s == 1234.5f) out[0] = s;
}

struct Data {
  std::vector<__nv_bfloat16> q, pool;
  std::vector<int> perm;
  __nv_bfloat16 *dq = nullptr, *dpool = nullptr;
  int* dperm = nullptr;
  float* dout = nullptr;
  long long* dstats = nullptr;
};

// Relative Frobenius error of CTA 0's output (rows of Q tile 0) against fp64 over the tokens
// the CTA read: block i's rows from the permutation (kCopy), or block i % kStages's (reused).
double check(const Data& d, const std::vector<float>& out, int rows, int nb, bool copy, int stages) {
  std::vector<int> toks;
  for (int i = 0; i < nb; ++i)
    for (int r = 0; r < kBlockN; ++r) toks.push_back(d.perm[((copy ? i : i % stages) * kBlockN + r) % kPool]);
  double num = 0, den = 0;
  std::vector<double> s(toks.size()), o(kDimV);
  for (int row = 0; row < rows; ++row) {
    double mx = -1e300;
    for (size_t j = 0; j < toks.size(); ++j) {
      double acc = 0;
      for (int c = 0; c < kDim; ++c)
        acc += double(__bfloat162float(d.q[row * kDim + c])) * __bfloat162float(d.pool[int64_t(toks[j]) * kDim + c]);
      s[j] = acc * 0.0721687836;
      mx = std::max(mx, s[j]);
    }
    double l = 0;
    std::fill(o.begin(), o.end(), 0.0);
    for (size_t j = 0; j < toks.size(); ++j) {
      const double p = std::exp(s[j] - mx);
      l += p;
      for (int c = 0; c < kDimV; ++c) o[c] += p * __bfloat162float(d.pool[int64_t(toks[j]) * kDim + c]);
    }
    for (int c = 0; c < kDimV; ++c) {
      const double ref = o[c] / l, got = out[row * kDimV + c];
      num += (got - ref) * (got - ref);
      den += ref * ref;
    }
  }
  return std::sqrt(num / den);
}

// Median over reps of launch()'s time between two events, us; the first `skip` samples dropped.
template <class F>
double median_event_us(F launch, int reps, int skip) {
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  std::vector<double> ts;
  for (int r = 0; r < reps + skip; ++r) {
    CHECK(cudaEventRecord(e0));
    launch();
    CHECK(cudaEventRecord(e1));
    CHECK(cudaEventSynchronize(e1));
    float ms = 0.f;
    CHECK(cudaEventElapsedTime(&ms, e0, e1));
    if (r >= skip) ts.push_back(ms * 1e3);
  }
  CHECK(cudaGetLastError());
  CHECK(cudaEventDestroy(e0));
  CHECK(cudaEventDestroy(e1));
  return median(ts);
}

struct Result {
  int regs;
  size_t local;
  double us_block, tflops, err;
  double cyc_block, cyc_wait, cyc_copy;  // thread 0's cycles a block: all, waiting, refilling (CTA medians)
};

template <int kRows, int kLoaders, int kCopy, int kStages = 3>
Result run(const Data& d, int sms, int nb, int reps) {
  auto kern = tile_kernel<kRows, kLoaders, kCopy, kStages>;
  constexpr int kSmem = smem_bytes<kRows, kStages>();
  CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  cudaFuncAttributes attr;
  CHECK(cudaFuncGetAttributes(&attr, kern));
  const int threads = kMathThreads + 32 * kLoaders;
  // Correctness: a short run, CTA 0 against fp64.
  const int nb_check = 24;
  kern<<<sms, threads, kSmem>>>(d.dq, d.dpool, d.dperm, nb_check, d.dout, d.dstats);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::vector<float> out(kRows * kDimV);
  CHECK(cudaMemcpy(out.data(), d.dout, out.size() * 4, cudaMemcpyDeviceToHost));
  const double err = check(d, out, kRows, nb_check, kCopy != kMath, kStages);
  const double us =
      median_event_us([&] { kern<<<sms, threads, kSmem>>>(d.dq, d.dpool, d.dperm, nb, d.dout, d.dstats); }, reps, 2);
  const double flops = double(sms) * nb * 2.0 * kRows * kBlockN * (kDim + kDimV);
  std::vector<long long> st(size_t(sms) * 3);
  CHECK(cudaMemcpy(st.data(), d.dstats, st.size() * 8, cudaMemcpyDeviceToHost));
  std::vector<double> cyc[3];
  for (int c = 0; c < sms; ++c)
    for (int k = 0; k < 3; ++k) cyc[k].push_back(double(st[c * 3 + k]) / nb);
  return Result{attr.numRegs, attr.localSizeBytes, us / nb, flops / (us * 1e-6) / 1e12, err,
                median(cyc[0]),  median(cyc[1]),  median(cyc[2])};
}

}  // namespace

int main(int argc, char** argv) {
  const int nb = argc > 1 ? std::atoi(argv[1]) : 1024;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 15;
  int dev = 0, sms = 0;
  CHECK(cudaGetDevice(&dev));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, dev));
  std::printf("device %s, %d SMs; %d blocks a CTA, median of %d reps\n", prop.name, sms, nb, reps);

  Data d;
  uint64_t st = 0x9E3779B97F4A7C15ull;
  auto rnd = [&] {  // uniform in [-1, 1)
    st = st * 6364136223846793005ull + 1442695040888963407ull;
    return float((st >> 40) & 0xFFFFFF) / float(1 << 23) - 1.f;
  };
  d.q.resize(4 * 64 * kDim);
  for (auto& x : d.q) x = __float2bfloat16(rnd());
  d.pool.resize(int64_t(kPool) * kDim);
  for (auto& x : d.pool) x = __float2bfloat16(rnd());
  d.perm.resize(kPool);
  for (int i = 0; i < kPool; ++i) d.perm[i] = i;
  for (int i = kPool - 1; i > 0; --i) std::swap(d.perm[i], d.perm[int((rnd() + 1.f) * 0.5f * (i + 1)) % (i + 1)]);
  CHECK(cudaMalloc(&d.dq, d.q.size() * 2));
  CHECK(cudaMalloc(&d.dpool, d.pool.size() * 2));
  CHECK(cudaMalloc(&d.dperm, d.perm.size() * 4));
  CHECK(cudaMalloc(&d.dout, size_t(sms) * 64 * kDimV * 4));
  CHECK(cudaMalloc(&d.dstats, size_t(sms) * 3 * 8));
  CHECK(cudaMemcpy(d.dq, d.q.data(), d.q.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d.dpool, d.pool.data(), d.pool.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d.dperm, d.perm.data(), d.perm.size() * 4, cudaMemcpyHostToDevice));

  // The mma.sync rate, as bench_verify.py measures it.
  float* dsink = nullptr;
  CHECK(cudaMalloc(&dsink, 4));
  const int mblocks = sms * 8, mthreads = 256, iters = 4096;
  mma_loop<<<mblocks, mthreads>>>(dsink, iters);
  CHECK(cudaDeviceSynchronize());
  const double mma_us = median_event_us([&] { mma_loop<<<mblocks, mthreads>>>(dsink, iters); }, 10, 0);
  const double peak = double(mblocks) * (mthreads / 32) * iters * 8 * (16 * 8 * 16 * 2) / (mma_us * 1e-6) / 1e12;
  std::printf("mma.sync bf16 rate: %.1f TFLOP/s\n\n", peak);

  std::printf("%-10s %-7s %5s %6s %9s %9s %7s %9s %8s %8s %8s\n", "config", "mode", "regs", "local", "us/block",
              "TFLOP/s", "of mma", "rel err", "cyc/blk", "wait", "refill");
  auto show = [&](const char* name, const char* mode, const Result& r) {
    std::printf("%-10s %-7s %5d %6zu %9.3f %9.1f %6.1f%% %9.2e %8.0f %8.0f %8.0f\n", name, mode, r.regs, r.local,
                r.us_block, r.tflops, 100.0 * r.tflops / peak, r.err, r.cyc_block, r.cyc_wait, r.cyc_copy);
  };
  // Passes in both orders, so drift shows.
  using Run = Result (*)(const Data&, int, int, int);
  struct Config {
    const char *name, *mode;
    Run fn;
  };
  const Config configs[] = {
      {"r32-l2", "math", run<32, 2, kMath>},      {"r32-l2", "bulk", run<32, 2, kBulk>},
      {"r32-l0", "math", run<32, 0, kMath>},      {"r32-l0", "bulk", run<32, 0, kBulk>},
      {"r32-l0", "spread", run<32, 0, kSpread>},  {"r32-l0", "cpasync", run<32, 0, kCpAsync>},
      {"r64-l0", "math", run<64, 0, kMath>},      {"r64-l0", "bulk", run<64, 0, kBulk>},
      {"r64-l0", "spread", run<64, 0, kSpread>},  {"r64-l0", "cpasync", run<64, 0, kCpAsync>},
      {"r32-l0-s4", "bulk", run<32, 0, kBulk, 4>}, {"r64-l0-s4", "bulk", run<64, 0, kBulk, 4>},
      {"r64-l0-s4", "math", run<64, 0, kMath, 4>}, {"r32-l2-s4", "bulk", run<32, 2, kBulk, 4>},
  };
  constexpr int kConfigs = sizeof(configs) / sizeof(configs[0]);
  if (argc > 3) {  // one configuration, one pass (for a profiler)
    const int k = std::atoi(argv[3]);
    if (k < 0 || k >= kConfigs) {
      std::printf("configuration %d: there are %d (0-%d)\n", k, kConfigs, kConfigs - 1);
      return 2;
    }
    show(configs[k].name, configs[k].mode, configs[k].fn(d, sms, nb, reps));
    return 0;
  }
  for (int pass = 0; pass < 2; ++pass) {
    std::printf("pass %d\n", pass + 1);
    for (int k = 0; k < kConfigs; ++k) {
      const Config& c = configs[pass == 0 ? k : kConfigs - 1 - k];
      show(c.name, c.mode, c.fn(d, sms, nb, reps));
    }
  }
  return 0;
}
