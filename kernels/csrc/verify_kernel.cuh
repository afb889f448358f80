// MLA target-verify attention: split-KV main kernel and LSE combine kernel.
//
// Work decomposition. A request b has M_b = D_b * H query rows (draft token major, head minor,
// the order of q's rows) and L_b = P_b + D_b KV tokens (its prefix through kv_indices, then its
// draft tokens from k_extend). Its rows are cut into ceil(M_b / 32) M-tiles; each (b, M-tile)
// is a "segment" of ceil(L_b / 32) KV blocks, cut into units of q blocks (make_schedule); all
// units laid end to end are split evenly over the fixed grid of num_ctas CTAs.
// A segment entirely inside one CTA's range is written straight to o; a segment cut by CTA
// boundaries leaves one partial (normalised O, LSE) per CTA, in slot 2c + (started here ? 1 : 0),
// and the combine kernel merges them. Every CTA recomputes the schedule from the index pointers,
// so the launch geometry never depends on device data (CUDA-graph safe).
//
// Per piece, the Q tile (32 rows x 576) arrives by cp.async and is kept in registers as mma A
// fragments. Per 32-token KV block (gathered row by row with cp.async, its pool indices
// prefetched into a smem ring kStages blocks earlier), the 8 warps compute S = Q K^T split over
// 4 k-groups x 2 token halves, reduce the k-groups through shared memory, run an online softmax
// (8 threads per row), and then each warp accumulates its 64 output columns of P V from the
// same shared-memory tile (V = first 512 columns of each K row). The kPipe variant (sm_90)
// computes S of block i+1 while the softmax of block i runs (double-buffered partials).
// The O tile leaves through shared memory with coalesced 16-byte stores.
// Only mma.sync m16n8k16 bf16, ldmatrix, cp.async and griddepcontrol: builds unchanged for
// sm_90 and sm_120.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math_constants.h>

#include <cstdint>

#include "params.h"
#include "traits.h"

namespace kdtree_mla {
namespace detail {

using T = VerifyTraits;

__device__ __forceinline__ int64_t load_index(const void* p, int64_t i, bool is64) {
  return is64 ? static_cast<const int64_t*>(p)[i] : static_cast<const int32_t*>(p)[i];
}

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte async copy; src_bytes == 0 zero-fills the destination (used for padding tokens, so
// the P*V product never sees stale NaN/Inf bits).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes));
}
template <int kBytes>
__device__ __forceinline__ void cp_async_small(uint32_t dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(dst), "l"(src), "n"(kBytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// D = A(16x16 bf16, row) * B(16x8 bf16, col) + D, fp32 accumulate.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// Per-request geometry, read from the index pointers.
struct Request {
  int qo_begin;       // first draft token (row of q / k_extend; T < 2^31)
  int64_t kv_begin;   // offset into kv_indices
  int64_t mask_begin;
  int draft;          // D_b
  int prefix;         // P_b
  int kv_len;         // L_b = P_b + D_b
  int rows;           // M_b = D_b * H
  int mtiles;
  int nblk;           // KV blocks per segment
};

template <int kN>
__device__ __forceinline__ Request load_request(const VerifyParams& p, int b) {
  Request r;
  const int64_t q0 = load_index(p.qo_indptr, b, p.index64 & kQoIndptr64);
  const int64_t q1 = load_index(p.qo_indptr, b + 1, p.index64 & kQoIndptr64);
  const int64_t k0 = load_index(p.kv_indptr, b, p.index64 & kKvIndptr64);
  const int64_t k1 = load_index(p.kv_indptr, b + 1, p.index64 & kKvIndptr64);
  r.qo_begin = static_cast<int>(q0);
  r.kv_begin = k0;
  r.draft = static_cast<int>(q1 - q0);
  r.prefix = static_cast<int>(k1 - k0);
  r.kv_len = r.prefix + r.draft;
  r.rows = r.draft * p.num_heads;
  r.mtiles = (r.rows + T::kBlockM - 1) / T::kBlockM;
  r.nblk = r.draft > 0 ? (r.kv_len + kN - 1) / kN : 0;
  r.mask_begin = p.mask != nullptr ? load_index(p.mask_indptr, b, p.index64 & kMaskIndptr64) : 0;
  return r;
}

// Block-wide sum of x over the CTA (all threads get it). warp_sums: kThreads / 32 ints of smem.
template <int kThreads>
__device__ __forceinline__ int block_sum(int x, int* warp_sums) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  __syncthreads();
  if (lane == 0) warp_sums[warp] = x;
  __syncthreads();
  int total = 0;
  for (int i = 0; i < kThreads / 32; ++i) total += warp_sums[i];
  return total;
}

// The schedule, identical in every CTA. A segment (request b, M-tile) of nblk KV blocks is cut
// into ceil(nblk / q) "units" of q blocks (the last one shorter), so every segment starts on a
// unit boundary; CTA c takes units [c * u, (c + 1) * u). When there are few segments
// (S <= G / 4), q is chosen so that the units fit the grid (u = 1): the M-tiles of a request
// then split their KV at the same places and the CTAs reading the same KV run concurrently
// (the L2 serves the re-reads). With many segments q = 1: plain block-level balancing.
struct Schedule {
  int blocks_per_unit;  // q
  int units_per_cta;    // u
  int total_units;      // U
};

__device__ __forceinline__ int units_of(const Request& r, int q) {
  return r.mtiles * ((r.nblk + q - 1) / q);
}

// Fills scan[0..B] with the exclusive prefix of units per request (scan[B] = U).
template <int kN, int kThreads>
__device__ Schedule make_schedule(const VerifyParams& p, int* scan, int* warp_sums) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  int w = 0, segs = 0;
  for (int b = tid; b < p.batch; b += kThreads) {
    const Request r = load_request<kN>(p, b);
    w += r.mtiles * r.nblk;
    segs += r.nblk > 0 ? r.mtiles : 0;
  }
  const int total_blocks = block_sum<kThreads>(w, warp_sums);
  const int total_segs = block_sum<kThreads>(segs, warp_sums);
  const int min_blocks = max(p.min_blocks_per_cta, 1);
  Schedule s;
  if (total_segs * 4 <= p.num_ctas) {
    const int denom = p.num_ctas - total_segs;
    s.blocks_per_unit = max(min_blocks, (total_blocks + denom - 1) / denom);
  } else {
    s.blocks_per_unit = 1;
  }
  const int q = s.blocks_per_unit;
  int carry = 0;
  for (int base = 0; base < p.batch; base += kThreads) {
    const int b = base + tid;
    int x = b < p.batch ? units_of(load_request<kN>(p, b), q) : 0;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, x, o);
      if (lane >= o) x += y;
    }
    __syncthreads();
    if (lane == 31) warp_sums[warp] = x;
    __syncthreads();
    int before = 0, total = 0;
    for (int i = 0; i < kThreads / 32; ++i) {
      if (i < warp) before += warp_sums[i];
      total += warp_sums[i];
    }
    if (b < p.batch) scan[b + 1] = carry + before + x;
    carry += total;
  }
  if (tid == 0) scan[0] = 0;
  __syncthreads();
  s.total_units = scan[p.batch];
  s.units_per_cta = max((s.total_units + p.num_ctas - 1) / p.num_ctas, q == 1 ? min_blocks : 1);
  return s;
}

template <int kStages, int kN, bool kPipe>
__global__ void __launch_bounds__(T::kThreads, 1) verify_main_kernel(const VerifyParams p) {
  static_assert(!kPipe || kStages >= 3, "the pipelined loop keeps two blocks resident");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000
  if constexpr (kN != 32 || kPipe) {  // sm_90-only variants: smem beyond sm_120's limit, never launched there
    __trap();
    return;
  } else
#endif
  {
  using K = KvTile<kN>;
  extern __shared__ __align__(128) uint8_t smem[];
  uint8_t* kv_s = smem;
  constexpr int kReds = kPipe ? 2 : 1;
  float* red_s = reinterpret_cast<float*>(smem + kStages * K::kStageBytes);
  float* red2_s = red_s + (kPipe ? K::kRedBytes / 4 : 0);  // second partial buffer (kPipe)
  __nv_bfloat16* p_s =
      reinterpret_cast<__nv_bfloat16*>(smem + kStages * K::kStageBytes + kReds * K::kRedBytes);
  float* alpha_s = reinterpret_cast<float*>(smem + kStages * K::kStageBytes + kReds * K::kRedBytes + K::kPBytes);
  float* inv_s = alpha_s + T::kBlockM;  // 1 / l per row, written in the epilogue
  uint8_t* idx_s = smem + kStages * K::kStageBytes + kReds * K::kRedBytes + K::kPBytes + T::kRowStatBytes;
  __shared__ int warp_sums[T::kWarps];
  __shared__ int start_info[2];
  // Draft-to-draft mask bytes of the (at most 4) draft tokens of this M-tile: [token][16].
  __shared__ uint8_t mask_s[4 * 16];

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int kg = warp % T::kKGroups, ng = warp / T::kKGroups;
  const int g = lane >> 2, t4 = lane & 3;
  const int cta = blockIdx.x;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // Let the combine kernel (launched with programmatic stream serialization) get scheduled
  // early; it waits on griddepcontrol.wait for this grid's memory before reading anything.
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif

  // ---- schedule (identical in every CTA) ----
  int* scan = reinterpret_cast<int*>(red_s);
  const Schedule sch = make_schedule<kN, T::kThreads>(p, scan, warp_sums);
  const int q = sch.blocks_per_unit;
  if (cta == 0) {
    for (int i = tid; i <= p.batch; i += T::kThreads) p.sched[2 + i] = scan[i];
    if (tid == 0) {
      p.sched[0] = sch.units_per_cta;
      p.sched[1] = q;
    }
    // Per draft token: where its request's rows and segments are, for the combine kernel
    // (one 16-byte load there instead of a search over qo_indptr).
    for (int b = tid; b < p.batch; b += T::kThreads) {
      const Request r = load_request<kN>(p, b);
      const int4 info = make_int4(static_cast<int>(r.qo_begin), scan[b], (r.nblk + q - 1) / q, 0);
      for (int i = 0; i < r.draft; ++i) reinterpret_cast<int4*>(p.tokinfo)[r.qo_begin + i] = info;
    }
  }
  // Units fit in int: U <= W <= 4096 requests * 64 M-tiles * 8193 blocks.
  const int range_lo = cta * sch.units_per_cta;
  const int range_hi = min(range_lo + sch.units_per_cta, sch.total_units);
  if (range_lo >= sch.total_units) return;
  if (tid == 0) {
    int lo = 0, hi = p.batch - 1;  // largest b with scan[b] <= range_lo
    while (lo < hi) {
      const int mid = (lo + hi + 1) >> 1;
      if (scan[mid] <= range_lo) lo = mid; else hi = mid - 1;
    }
    start_info[0] = lo;
    start_info[1] = scan[lo];
  }
  __syncthreads();
  int b = start_info[0];
  int req_start = start_info[1];
  __syncthreads();  // scan (red buffer) is reused below

  Request req = load_request<kN>(p, b);
  int seg_units = (req.nblk + q - 1) / q;
  int off = range_lo - req_start;
  int mt = off / seg_units;
  int unit_lo = off - mt * seg_units;
  int seg_start = req_start + mt * seg_units;  // in units

  const bool idx64 = p.index64 & kKvIndices64;
  const __nv_bfloat16* qg = static_cast<const __nv_bfloat16*>(p.q);
  const __nv_bfloat16* kbuf = static_cast<const __nv_bfloat16*>(p.k_buf);
  const __nv_bfloat16* kext = static_cast<const __nv_bfloat16*>(p.k_ext);
  const uint32_t kv_base = smem_u32(kv_s);

  // Loader mapping: 8 threads per token row, each copying 9 chunks of 16 B (stride 128 B).
  const int ld_tok = tid / K::kLoadTpt, ld_chunk = tid % K::kLoadTpt;

  while (true) {
    const int unit_hi = min(seg_units, range_hi - seg_start);
    const int blk_lo = unit_lo * q;
    const int blk_hi = min(unit_hi * q, req.nblk);
    const int nb = blk_hi - blk_lo;
    const int row0 = mt * T::kBlockM;
    const int tok_lo = blk_lo * K::kBlockN;
    const int tok_hi = min(blk_hi * K::kBlockN, req.kv_len);

    const uint32_t idx_base = smem_u32(idx_s);
    // Pool index of token (tok_lo + blk * 32 + tid) into ring slot, by cp.async (tid < 32).
    auto issue_idx = [&](int blk) {
      if (tid < K::kBlockN && blk < nb) {
        const int k = tok_lo + blk * K::kBlockN + tid;
        if (k < tok_hi && k < req.prefix) {
          const uint32_t dst = idx_base + ((blk % T::kIdxRingBlocks) * K::kBlockN + tid) * 8;
          if (idx64)
            cp_async_small<8>(dst, static_cast<const int64_t*>(p.kv_indices) + req.kv_begin + k);
          else
            cp_async_small<4>(dst, static_cast<const int32_t*>(p.kv_indices) + req.kv_begin + k);
        }
      }
    };
    // Source row of this thread's token in block blk, or null past the piece's range.
    auto token_src = [&](int blk) -> const __nv_bfloat16* {
      const int k = tok_lo + blk * K::kBlockN + ld_tok;
      if (k >= tok_hi) return nullptr;
      if (k < req.prefix) {
        const uint8_t* slot = idx_s + ((blk % T::kIdxRingBlocks) * K::kBlockN + ld_tok) * 8;
        const int64_t idx = idx64 ? *reinterpret_cast<const int64_t*>(slot)
                                  : static_cast<int64_t>(*reinterpret_cast<const int32_t*>(slot));
        return kbuf + idx * p.k_buf_stride;
      }
      return kext + (req.qo_begin + (k - req.prefix)) * p.k_ext_stride;
    };
    auto issue_block = [&](int stage, const __nv_bfloat16* src) {
      const uint32_t dst = kv_base + stage * K::kStageBytes + ld_tok * T::kKvRowBytes + ld_chunk * 16;
      const __nv_bfloat16* s = src != nullptr ? src + ld_chunk * 8 : kbuf;
      const int n = src != nullptr ? 16 : 0;
#pragma unroll
      for (int j = 0; j < K::kLoadChunks; ++j)
        cp_async16(dst + j * 16 * K::kLoadTpt, s + (src != nullptr ? j * 8 * K::kLoadTpt : 0), n);
    };

    // First cp.async group: the Q tile (32 rows x 576, coalesced 16 B copies) into the last
    // stage buffer, which no KV block uses before iteration 0, and the pool indices of the
    // first kStages blocks. One exposed latency per piece.
    const uint32_t q_base = kv_base + (kStages - 1) * K::kStageBytes;
    {
      const int qr = tid >> 3, qc = tid & 7;
      const int r = row0 + qr;
      const __nv_bfloat16* src = nullptr;
      if (r < req.rows) {
        const int64_t tok = req.qo_begin + r / p.num_heads;
        src = qg + tok * p.q_stride_t + (r % p.num_heads) * p.q_stride_h + qc * 8;
      }
      const uint32_t dst = q_base + qr * T::kKvRowBytes + qc * 16;
#pragma unroll
      for (int j = 0; j < T::kHeadDim / 64; ++j)
        cp_async16(dst + j * 128, src != nullptr ? src + j * 64 : kbuf, src != nullptr ? 16 : 0);
    }
#pragma unroll
    for (int blk = 0; blk < kStages; ++blk) issue_idx(blk);
    cp_async_commit();

    // Mask bytes this tile's softmax will need, loaded once per piece (not per element).
    const int tok0 = row0 / p.num_heads;
    if (p.mask != nullptr && tok_hi > req.prefix && tid < 64) {
      const int i = tok0 + (tid >> 4), j = tid & 15;
      if (i < req.draft && j < req.draft)
        mask_s[tid] = p.mask[req.mask_begin + int64_t(i) * req.kv_len + req.prefix + j];
    }
    cp_async_wait<0>();
    __syncthreads();

    // Q fragments of this warp's k-group (mma A operands), kept in registers for the piece.
    uint32_t qf[2][T::kKSteps][4];
    {
      const int mat = lane >> 3, r8 = lane & 7;
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int ks = 0; ks < T::kKSteps; ++ks)
          ldmatrix_x4(qf[mi][ks], q_base + (mi * 16 + (mat & 1) * 8 + r8) * T::kKvRowBytes +
                                      (kg * T::kKSteps * 16 + ks * 16 + (mat >> 1) * 8) * 2);
    }

    // Prologue: KV of the first kStages-1 blocks. The index of block m always travels in the
    // cp.async group of KV block m - kStages, which is complete before block m is issued.
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
      if (s < nb) issue_block(s, token_src(s));
      issue_idx(s + kStages);
      cp_async_commit();
    }

    float acc[2][8][4];
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int ni = 0; ni < 8; ++ni)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[mi][ni][c] = 0.f;

    // Softmax state: thread owns row sm_row, columns sm_col..sm_col+3 of each block.
    const int sm_row = tid >> 3, sm_col = (tid & 7) * K::kSmCols;
    const int q_row = row0 + sm_row;
    const bool row_ok = q_row < req.rows;
    const int q_tok = row_ok ? q_row / p.num_heads : 0;  // draft index i of this row
    float m_run = -CUDART_INF_F, l_run = 0.f;

    auto stage_of = [&](int blk) { return kv_base + (blk % kStages) * K::kStageBytes; };
    // S partial of block blk = Q[:, k-group] K[n-group tokens, k-group]^T, into red_buf.
    auto compute_s = [&](int blk, float* red_buf) {
      // ---- S partial = Q[:, kgroup] K[ngroup tokens, kgroup]^T ----
      float s[2][K::kNT8][4];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int ni = 0; ni < K::kNT8; ++ni)
#pragma unroll
          for (int c = 0; c < 4; ++c) s[mi][ni][c] = 0.f;
      {
        const int mat = lane >> 3, r8 = lane & 7;
        const uint32_t kaddr = stage_of(blk) + (ng * (kN / 2) + (mat >> 1) * 8 + r8) * T::kKvRowBytes +
                               (kg * T::kKSteps * 16 + (mat & 1) * 8) * 2;
#pragma unroll
        for (int ks = 0; ks < T::kKSteps; ++ks) {
#pragma unroll
          for (int nj = 0; nj < K::kNT8 / 2; ++nj) {
            uint32_t kb[4];
            ldmatrix_x4(kb, kaddr + nj * 16 * T::kKvRowBytes + ks * 32);
#pragma unroll
            for (int mi = 0; mi < 2; ++mi) {
              mma_bf16(s[mi][2 * nj], qf[mi][ks], kb[0], kb[1]);
              mma_bf16(s[mi][2 * nj + 1], qf[mi][ks], kb[2], kb[3]);
            }
          }
        }
      }
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int ni = 0; ni < K::kNT8; ++ni)
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const int r = mi * 16 + g + half * 8;
            const int c = ng * (kN / 2) + ni * 8 + t4 * 2;
            *reinterpret_cast<float2*>(&red_buf[(kg * T::kBlockM + r) * K::kRedRowFloats + c]) =
                make_float2(s[mi][ni][half * 2], s[mi][ni][half * 2 + 1]);
          }
    };
    // Online softmax of block blk from the k-group partials in red_buf: P and alpha to smem.
    auto softmax = [&](int blk, const float* red_buf) {
      // ---- online softmax over this block ----
      {
        float v[K::kSmCols];
#pragma unroll
        for (int c4 = 0; c4 < K::kSmCols; c4 += 4) {
          float4 x = *reinterpret_cast<const float4*>(&red_buf[sm_row * K::kRedRowFloats + sm_col + c4]);
#pragma unroll
          for (int k = 1; k < T::kKGroups; ++k) {
            const float4 y = *reinterpret_cast<const float4*>(
                &red_buf[(k * T::kBlockM + sm_row) * K::kRedRowFloats + sm_col + c4]);
            x.x += y.x; x.y += y.y; x.z += y.z; x.w += y.w;
          }
          v[c4] = x.x; v[c4 + 1] = x.y; v[c4 + 2] = x.z; v[c4 + 3] = x.w;
        }
        const int kbase = tok_lo + blk * K::kBlockN + sm_col;
        float bmax = -CUDART_INF_F;
#pragma unroll
        for (int j = 0; j < K::kSmCols; ++j) {
          const int k = kbase + j;
          bool ok = row_ok && k < tok_hi;
          if (ok && k >= req.prefix) {
            const int dj = k - req.prefix;
            if (p.mask == nullptr)
              ok = dj <= q_tok;
            else if (dj < 16)
              ok = mask_s[(q_tok - tok0) * 16 + dj] != 0;
            else  // more than 16 drafts: outside the documented range, still correct
              ok = p.mask[req.mask_begin + int64_t(q_tok) * req.kv_len + req.prefix + dj] != 0;
          }
          v[j] = ok ? v[j] * p.scale_log2 : -CUDART_INF_F;
          bmax = fmaxf(bmax, v[j]);
        }
        bmax = fmaxf(bmax, __shfl_xor_sync(0xffffffffu, bmax, 1));
        bmax = fmaxf(bmax, __shfl_xor_sync(0xffffffffu, bmax, 2));
        bmax = fmaxf(bmax, __shfl_xor_sync(0xffffffffu, bmax, 4));
        const float m_new = fmaxf(m_run, bmax);
        const float m_use = m_new == -CUDART_INF_F ? 0.f : m_new;
        const float alpha = exp2f(m_run - m_use);  // m_run = -inf -> 0
        float psum = 0.f;
#pragma unroll
        for (int j = 0; j < K::kSmCols; ++j) {
          v[j] = exp2f(v[j] - m_use);
          psum += v[j];
        }
        psum += __shfl_xor_sync(0xffffffffu, psum, 1);
        psum += __shfl_xor_sync(0xffffffffu, psum, 2);
        psum += __shfl_xor_sync(0xffffffffu, psum, 4);
        l_run = l_run * alpha + psum;
        m_run = m_new;
#pragma unroll
        for (int j = 0; j < K::kSmCols; j += 4)
          *reinterpret_cast<uint2*>(&p_s[sm_row * K::kPRowElems + sm_col + j]) =
              make_uint2(pack_bf16x2(v[j], v[j + 1]), pack_bf16x2(v[j + 2], v[j + 3]));
        if ((tid & 7) == 0) alpha_s[sm_row] = alpha;
      }
    };
    // O = O * alpha + P V of block blk (this warp's 64 columns).
    auto pv = [&](int blk) {
      // ---- O = O * alpha + P V (this warp's 64 columns) ----
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        const float a0 = alpha_s[mi * 16 + g], a1 = alpha_s[mi * 16 + g + 8];
#pragma unroll
        for (int ni = 0; ni < 8; ++ni) {
          acc[mi][ni][0] *= a0; acc[mi][ni][1] *= a0;
          acc[mi][ni][2] *= a1; acc[mi][ni][3] *= a1;
        }
      }
      {
        const int mat = lane >> 3, r8 = lane & 7;
#pragma unroll
        for (int kk = 0; kk < K::kBlockN / 16; ++kk) {
          uint32_t pa[2][4];
#pragma unroll
          for (int mi = 0; mi < 2; ++mi)
            ldmatrix_x4(pa[mi], smem_u32(&p_s[(mi * 16 + (mat & 1) * 8 + r8) * K::kPRowElems +
                                               kk * 16 + (mat >> 1) * 8]));
          const uint32_t vrow = stage_of(blk) + (kk * 16 + (mat & 1) * 8 + r8) * T::kKvRowBytes;
#pragma unroll
          for (int nj = 0; nj < 4; ++nj) {
            uint32_t vb[4];
            ldmatrix_x4_trans(vb, vrow + (warp * T::kColsPerWarp + nj * 16 + (mat >> 1) * 8) * 2);
#pragma unroll
            for (int mi = 0; mi < 2; ++mi) {
              mma_bf16(acc[mi][nj * 2], pa[mi], vb[0], vb[1]);
              mma_bf16(acc[mi][nj * 2 + 1], pa[mi], vb[2], vb[3]);
            }
          }
        }
      }
    };
    auto issue_next = [&](int i) {
      const int nxt = i + kStages - 1;
      if (nxt < nb) issue_block(nxt % kStages, token_src(nxt));
      issue_idx(nxt + kStages);
      cp_async_commit();
    };

    if constexpr (!kPipe) {
      for (int i = 0; i < nb; ++i) {
        cp_async_wait<kStages - 2>();  // block i landed
        __syncthreads();
        issue_next(i);
        compute_s(i, red_s);
        __syncthreads();
        softmax(i, red_s);
        __syncthreads();
        pv(i);
      }
    } else {
      // S of block i+1 overlaps the softmax of block i (double-buffered partials): one barrier
      // fewer per block and tensor work in flight during the softmax.
      cp_async_wait<kStages - 2>();  // block 0 landed
      __syncthreads();
      compute_s(0, red_s);
      for (int i = 0; i < nb; ++i) {
        cp_async_wait<kStages - 3>();  // block i+1 landed
        __syncthreads();
        issue_next(i);
        if (i + 1 < nb) compute_s(i + 1, (i + 1) & 1 ? red2_s : red_s);
        softmax(i, i & 1 ? red2_s : red_s);
        __syncthreads();
        pv(i);
      }
    }

    // ---- epilogue ----
    const bool full = unit_lo == 0 && unit_hi == seg_units;
    const int slot = 2 * cta + (unit_lo > 0 ? 0 : 1);
    if ((tid & 7) == 0) {
      const float lse2 = l_run > 0.f ? m_run + __log2f(l_run) : -CUDART_INF_F;
      inv_s[sm_row] = l_run > 0.f ? 1.f / l_run : 0.f;
      if (full) {
        if (row_ok && p.lse != nullptr) {
          const int64_t tok = req.qo_begin + q_row / p.num_heads;
          p.lse[tok * p.lse_stride_t + q_row % p.num_heads] = lse2 * 0.69314718055994530942f;
        }
      } else {
        p.part_lse[slot * T::kBlockM + sm_row] = lse2;
      }
    }
    __syncthreads();
    // Stage the normalised O tile (fp32) in the now idle KV stage buffers, then copy it out
    // with coalesced 16-byte stores: to the fp32 partial slot, or as bf16 rows of o.
    constexpr int kORow = T::kHeadDimV + 8;  // floats per staged row (pad against bank conflicts)
    static_assert(T::kBlockM * kORow * 4 <= 2 * KvTile<32>::kStageBytes, "O tile fits the stages");
    float* o_s = reinterpret_cast<float*>(kv_s);
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = mi * 16 + g + half * 8;
        const float inv = inv_s[r];
#pragma unroll
        for (int ni = 0; ni < 8; ++ni)
          *reinterpret_cast<float2*>(&o_s[r * kORow + warp * T::kColsPerWarp + ni * 8 + t4 * 2]) =
              make_float2(acc[mi][ni][half * 2] * inv, acc[mi][ni][half * 2 + 1] * inv);
      }
    __syncthreads();
    if (full) {
      constexpr int kChunks = T::kHeadDimV / 8;  // 8 outputs (16 B of bf16) per chunk
#pragma unroll 4
      for (int idx = tid; idx < T::kBlockM * kChunks; idx += T::kThreads) {
        const int r = idx / kChunks, c = idx % kChunks;
        const int qr = row0 + r;
        if (qr < req.rows) {
          const float4 x0 = *reinterpret_cast<const float4*>(&o_s[r * kORow + c * 8]);
          const float4 x1 = *reinterpret_cast<const float4*>(&o_s[r * kORow + c * 8 + 4]);
          __nv_bfloat16* dst = static_cast<__nv_bfloat16*>(p.o) +
                               (req.qo_begin + qr / p.num_heads) * p.o_stride_t +
                               (qr % p.num_heads) * p.o_stride_h + c * 8;
          *reinterpret_cast<uint4*>(dst) = make_uint4(pack_bf16x2(x0.x, x0.y), pack_bf16x2(x0.z, x0.w),
                                                      pack_bf16x2(x1.x, x1.y), pack_bf16x2(x1.z, x1.w));
        }
      }
    } else {
      constexpr int kChunks = T::kHeadDimV / 4;
      float* dst = p.part_o + int64_t(slot) * T::kBlockM * T::kHeadDimV;
#pragma unroll 4
      for (int idx = tid; idx < T::kBlockM * kChunks; idx += T::kThreads) {
        const int r = idx / kChunks, c = idx % kChunks;
        *reinterpret_cast<float4*>(dst + r * T::kHeadDimV + c * 4) =
            *reinterpret_cast<const float4*>(&o_s[r * kORow + c * 4]);
      }
    }

    // ---- next segment ----
    if (seg_start + seg_units >= range_hi) break;
    seg_start += seg_units;
    unit_lo = 0;
    if (++mt >= req.mtiles) {
      mt = 0;
      do {
        ++b;
        req = load_request<kN>(p, b);
      } while (req.nblk == 0);
      seg_units = (req.nblk + q - 1) / q;
    }
    __syncthreads();  // inv_s / stages reused by the next piece
  }
  }  // kN supported on this arch
}

// Merges the partials of every segment that CTA boundaries cut. Grid: (row groups, splits);
// CTA (x, y) handles rows x, x + gridDim.x, ... of the T*H output rows, columns
// [y * 64, y * 64 + 64). Rows whose segment was not cut were written by the main kernel.
__global__ void __launch_bounds__(kCombineThreads) verify_combine_kernel(const VerifyParams p) {
  constexpr int kW = kCombineThreads / 32;
  constexpr int kCols = T::kHeadDimV / kCombineSplits;  // 128: 4 per lane
  __shared__ float red[kW][kCols];
  __shared__ float scal_m[kW], scal_l[kW];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // The next call's main kernel (a programmatic dependent) may be scheduled now; it waits for
  // this grid's completion before reading anything.
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  asm volatile("griddepcontrol.wait;\n" ::: "memory");  // main grid done, its writes visible
#endif
  const int per_cta = p.sched[0];  // units per CTA
  // Rows past qo_indptr[B] belong to no request (T larger than the batch's drafts): skip them.
  const int64_t nrows =
      min(int64_t(p.num_tokens), load_index(p.qo_indptr, p.batch, p.index64 & kQoIndptr64)) * p.num_heads;
  const int col0 = blockIdx.y * kCols;

  for (int64_t row = blockIdx.x; row < nrows; row += gridDim.x) {
    const int64_t t = row / p.num_heads;
    const int h = static_cast<int>(row % p.num_heads);
    const int4 info = reinterpret_cast<const int4*>(p.tokinfo)[t];  // qo_begin, prefix, seg_units
    const int local = static_cast<int>(t - info.x) * p.num_heads + h;
    const int mt = local / T::kBlockM, r = local % T::kBlockM;
    const int seg_units = info.z;
    const int seg_start = info.y + mt * seg_units;
    const int c0 = seg_start / per_cta;
    const int c1 = min((seg_start + seg_units - 1) / per_cta, p.num_ctas - 1);
    if (c0 >= c1) continue;  // written by the main kernel; uniform across the CTA
    const int nparts = c1 - c0 + 1;
    auto slot_of = [&](int k) { return k == 0 ? 2 * c0 + 1 : 2 * (c0 + k); };

    // One pass: warp w merges parts w, w+8, ... online (LSE and O loads issued together),
    // then the 8 warp results are merged through shared memory.
    float m = -CUDART_INF_F, l = 0.f;
    float4 a = make_float4(0.f, 0.f, 0.f, 0.f);
    // Batches of kBatch parts per warp: all their loads are issued before any is used.
    constexpr int kBatch = 8;
    for (int k0 = warp; k0 < nparts; k0 += kW * kBatch) {
      float v[kBatch];
      float4 x[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int k = k0 + u * kW;
        v[u] = -CUDART_INF_F;
        x[u] = make_float4(0.f, 0.f, 0.f, 0.f);
        if (k < nparts) {
          const int slot = slot_of(k);
          v[u] = p.part_lse[slot * T::kBlockM + r];
          x[u] = *reinterpret_cast<const float4*>(
              p.part_o + (int64_t(slot) * T::kBlockM + r) * T::kHeadDimV + col0 + lane * 4);
        }
      }
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const float m_new = fmaxf(m, v[u]);
        if (m_new != -CUDART_INF_F) {
          const float so = exp2f(m - m_new), sn = exp2f(v[u] - m_new);
          a.x = a.x * so + sn * x[u].x;
          a.y = a.y * so + sn * x[u].y;
          a.z = a.z * so + sn * x[u].z;
          a.w = a.w * so + sn * x[u].w;
          l = l * so + sn;
          m = m_new;
        }
      }
    }
    *reinterpret_cast<float4*>(&red[warp][lane * 4]) = a;
    if (lane == 0) {
      scal_m[warp] = m;
      scal_l[warp] = l;
    }
    __syncthreads();
    if (tid < kCols / 2) {
      float mx = -CUDART_INF_F;
      for (int i = 0; i < kW; ++i) mx = fmaxf(mx, scal_m[i]);
      const float mref = mx == -CUDART_INF_F ? 0.f : mx;
      float x = 0.f, y = 0.f, sum = 0.f;
      for (int i = 0; i < kW; ++i) {
        const float w = exp2f(scal_m[i] - mref);
        x += w * red[i][tid * 2];
        y += w * red[i][tid * 2 + 1];
        sum += w * scal_l[i];
      }
      const float inv = sum > 0.f ? 1.f / sum : 0.f;
      __nv_bfloat16* dst = static_cast<__nv_bfloat16*>(p.o) + t * p.o_stride_t + h * p.o_stride_h + col0;
      *reinterpret_cast<uint32_t*>(dst + tid * 2) = pack_bf16x2(x * inv, y * inv);
      if (tid == 0 && blockIdx.y == 0 && p.lse != nullptr)
        p.lse[t * p.lse_stride_t + h] =
            sum > 0.f ? (mref + __log2f(sum)) * 0.69314718055994530942f : -CUDART_INF_F;
    }
    __syncthreads();
  }
}

}  // namespace detail
}  // namespace kdtree_mla
