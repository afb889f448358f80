// MLA target-verify attention, 16-warp main kernel (same schedule, partials and combine as
// verify_kernel.cuh; this file only changes how one CTA works through its KV blocks).
//
// Why a second main loop. The 8-warp kernel keeps the whole 32 x 576 Q tile in registers
// twice over (72 registers a thread) and runs one CTA of 8 warps per SM: two warps per
// scheduler, too few to hide the S -> softmax -> PV chain of each KV block. Here 16 warps
// share the tile at <= 128 registers a thread:
//   * S = Q K^T: warp w takes row half mi = w & 1 (16 rows), k-group kg = (w >> 1) & 3 (144 of
//     the 576 dims) and token half ng = w >> 3 (16 of the 32 tokens); its Q fragments are
//     16 x 144 (36 registers). The four k-group partials meet in shared memory as before.
//   * Softmax: 16 threads a row, 2 columns each, with a lazy running max. A row's max is only
//     raised (and O rescaled) when a logit exceeds it by more than kRescaleLog2; otherwise
//     P = exp2(s - m) stays below 2^kRescaleLog2 and nothing is rescaled. Whether any row
//     needs it is one CTA-wide __syncthreads_or, so the common block has no shuffles and no
//     rescale; the row sum is kept per thread and reduced once in the epilogue.
//   * O += P V: warp w owns output columns [32 w, 32 w + 32) of all 32 rows.
//   * KV loads: 16 threads a token row, 4 or 5 16-byte cp.async each.
// Same instructions as the 8-warp kernel (mma.sync m16n8k16, ldmatrix, cp.async): builds for
// sm_90 and sm_120.
#pragma once

#include "verify_kernel.cuh"

namespace kdtree_mla {
namespace detail {

struct W16 {
  static constexpr int kWarps = 16;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kBlockN = 32;
  static constexpr int kKSteps = T::kKSteps;        // 9 k16 steps per k-group
  static constexpr int kColsPerWarp = T::kHeadDimV / kWarps;  // 32
  static constexpr int kLoadTpt = 16;               // loader threads per token row
  static constexpr int kRowChunks = T::kHeadDim * 2 / 16;  // 72 16-byte chunks a row
  static constexpr int kSmTpr = 16;                 // softmax threads per row
  static constexpr int kSmCols = kBlockN / kSmTpr;  // 2
  // A logit may exceed the row's running max by this much (log2 units) before the max is
  // raised: P stays <= 256, exact in bf16's exponent range, and O accumulates in fp32.
  static constexpr float kRescaleLog2 = 8.f;
  static_assert(kThreads / kLoadTpt == kBlockN, "one loader group per token row");
  static_assert(kThreads / kSmTpr == T::kBlockM, "one softmax group per row");
};

// Bulk row copy (sm_90+, no tensor map): `bytes` from global to shared, completing on `bar`.
__device__ __forceinline__ void bulk_copy_g2s(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
}
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  while (!done)
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
}
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// kMode bit 0: KV rows by bulk copies (one 1152-byte cp.async.bulk per token row, issued by
// warp 0, completing on a per-stage mbarrier) instead of 16-byte cp.async from every thread.
// kMode bit 1: diagnostic only, loads without any math (benchmarks the load path; wrong output).
// kMode bit 2: diagnostic only, math without the KV loads (on whatever the stages hold).
template <int kStages, bool kPipe, int kMode>
__global__ void __launch_bounds__(W16::kThreads, 1) verify_main16_kernel(const VerifyParams p) {
  constexpr bool kBulk = kMode & 1, kMath = !(kMode & 2), kLoads = !(kMode & 4);
  static_assert(!kPipe || kStages >= 3, "the pipelined loop keeps two blocks resident");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000
  if constexpr (kPipe) {  // sm_90-only variant: smem beyond sm_120's limit, never launched there
    __trap();
    return;
  } else
#endif
  {
  using K = KvTile<32>;
  extern __shared__ __align__(128) uint8_t smem[];
  uint8_t* kv_s = smem;
  constexpr int kReds = kPipe ? 2 : 1;
  float* red_s = reinterpret_cast<float*>(smem + kStages * K::kStageBytes);
  float* red2_s = red_s + (kPipe ? K::kRedBytes / 4 : 0);
  __nv_bfloat16* p_s =
      reinterpret_cast<__nv_bfloat16*>(smem + kStages * K::kStageBytes + kReds * K::kRedBytes);
  float* alpha_s = reinterpret_cast<float*>(smem + kStages * K::kStageBytes + kReds * K::kRedBytes + K::kPBytes);
  float* inv_s = alpha_s + T::kBlockM;
  uint8_t* idx_s = smem + kStages * K::kStageBytes + kReds * K::kRedBytes + K::kPBytes + T::kRowStatBytes;
  __shared__ int warp_sums[W16::kWarps];
  __shared__ int start_info[2];
  __shared__ uint8_t mask_s[4 * 16];
  __shared__ __align__(8) uint64_t full_bar[kStages];  // bulk mode: stage s's rows landed

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int mi = warp & 1, kg = (warp >> 1) & 3, ng = warp >> 3;
  const int g = lane >> 2, t4 = lane & 3;
  const int cta = blockIdx.x;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
  if (kBulk && tid == 0) {
    for (int s = 0; s < kStages; ++s) mbar_init(smem_u32(&full_bar[s]), 1);
  }
  uint32_t phase = 0;  // bulk mode: bit s = parity of stage s's next completion

  // ---- schedule (identical in every CTA; see verify_kernel.cuh) ----
  int* scan = reinterpret_cast<int*>(red_s);
  const Schedule sch = make_schedule<32, W16::kThreads>(p, scan, warp_sums);
  const int q = sch.blocks_per_unit;
  if (cta == 0) {
    for (int i = tid; i <= p.batch; i += W16::kThreads) p.sched[2 + i] = scan[i];
    if (tid == 0) {
      p.sched[0] = sch.units_per_cta;
      p.sched[1] = q;
    }
    for (int b = tid; b < p.batch; b += W16::kThreads) {
      const Request r = load_request<32>(p, b);
      const int4 info = make_int4(static_cast<int>(r.qo_begin), scan[b], (r.nblk + q - 1) / q, 0);
      for (int i = 0; i < r.draft; ++i) reinterpret_cast<int4*>(p.tokinfo)[r.qo_begin + i] = info;
    }
  }
  const int range_lo = cta * sch.units_per_cta;
  const int range_hi = min(range_lo + sch.units_per_cta, sch.total_units);
  if (range_lo >= sch.total_units) return;
  if (tid == 0) {
    int lo = 0, hi = p.batch - 1;
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
  __syncthreads();

  Request req = load_request<32>(p, b);
  int seg_units = (req.nblk + q - 1) / q;
  int off = range_lo - req_start;
  int mt = off / seg_units;
  int unit_lo = off - mt * seg_units;
  int seg_start = req_start + mt * seg_units;

  const bool idx64 = p.index64 & kKvIndices64;
  const __nv_bfloat16* qg = static_cast<const __nv_bfloat16*>(p.q);
  const __nv_bfloat16* kbuf = static_cast<const __nv_bfloat16*>(p.k_buf);
  const __nv_bfloat16* kext = static_cast<const __nv_bfloat16*>(p.k_ext);
  const uint32_t kv_base = smem_u32(kv_s);
  const uint32_t idx_base = smem_u32(idx_s);

  // Loader mapping: 16 threads per token row; thread copies chunks ld_sub + 16 j (j < 4, and
  // j = 4 for the first 8), i.e. 4 or 5 of the row's 72 16-byte chunks.
  const int ld_tok = tid / W16::kLoadTpt, ld_sub = tid % W16::kLoadTpt;
  // Softmax mapping: row sm_row, columns sm_col, sm_col + 1 of each block.
  const int sm_row = tid / W16::kSmTpr, sm_col = (tid % W16::kSmTpr) * W16::kSmCols;

  while (true) {
    const int unit_hi = min(seg_units, range_hi - seg_start);
    const int blk_lo = unit_lo * q;
    const int blk_hi = min(unit_hi * q, req.nblk);
    const int nb = blk_hi - blk_lo;
    const int row0 = mt * T::kBlockM;
    const int tok_lo = blk_lo * 32;
    const int tok_hi = min(blk_hi * 32, req.kv_len);
    // Blocks before this one hold only prefix tokens inside the piece: no masking needed.
    const int plain_blocks = (min(req.prefix, tok_hi) - tok_lo) / 32;

    auto issue_idx = [&](int blk) {
      if (tid < 32 && blk < nb) {
        const int k = tok_lo + blk * 32 + tid;
        if (k < tok_hi && k < req.prefix) {
          const uint32_t dst = idx_base + ((blk % T::kIdxRingBlocks) * 32 + tid) * 8;
          if (idx64)
            cp_async_small<8>(dst, static_cast<const int64_t*>(p.kv_indices) + req.kv_begin + k);
          else
            cp_async_small<4>(dst, static_cast<const int32_t*>(p.kv_indices) + req.kv_begin + k);
        }
      }
    };
    auto token_src = [&](int blk) -> const __nv_bfloat16* {
      const int k = tok_lo + blk * 32 + ld_tok;
      if (k >= tok_hi) return nullptr;
      if (k < req.prefix) {
        const uint8_t* slot = idx_s + ((blk % T::kIdxRingBlocks) * 32 + ld_tok) * 8;
        const int64_t idx = idx64 ? *reinterpret_cast<const int64_t*>(slot)
                                  : static_cast<int64_t>(*reinterpret_cast<const int32_t*>(slot));
        return kbuf + idx * p.k_buf_stride;
      }
      return kext + (req.qo_begin + (k - req.prefix)) * p.k_ext_stride;
    };
    // Copies this thread's chunks of one 1152-byte row (src null: zero-fill).
    auto copy_row = [&](uint32_t dst_row, const __nv_bfloat16* src) {
      const __nv_bfloat16* s = src != nullptr ? src + ld_sub * 8 : kbuf;
      const int n = src != nullptr ? 16 : 0;
#pragma unroll
      for (int j = 0; j < 4; ++j)
        cp_async16(dst_row + (ld_sub + 16 * j) * 16, s + (src != nullptr ? j * 128 : 0), n);
      if (ld_sub < W16::kRowChunks - 64)
        cp_async16(dst_row + (ld_sub + 64) * 16, s + (src != nullptr ? 512 : 0), n);
    };
    // Bulk mode: lane r of warp 0 copies token row r; rows past the piece copy the block's
    // first row instead (finite data; their P is exactly 0), so every stage expects 32 rows.
    auto issue_block_bulk = [&](int blk) {
      if (warp != 0) return;
      const int stage = blk % kStages;
      const uint32_t bar = smem_u32(&full_bar[stage]);
      fence_proxy_async();  // the stage was last touched by ordinary loads/stores
      if (lane == 0) mbar_expect_tx(bar, 32 * T::kHeadDim * 2);
      __syncwarp();
      const int k0 = tok_lo + blk * 32;
      const int r = k0 + lane < tok_hi ? lane : 0;
      const int k = k0 + r;
      const __nv_bfloat16* src;
      if (k < req.prefix) {
        const uint8_t* slot = idx_s + ((blk % T::kIdxRingBlocks) * 32 + r) * 8;
        const int64_t idx = idx64 ? *reinterpret_cast<const int64_t*>(slot)
                                  : static_cast<int64_t>(*reinterpret_cast<const int32_t*>(slot));
        src = kbuf + idx * p.k_buf_stride;
      } else {
        src = kext + (req.qo_begin + (k - req.prefix)) * p.k_ext_stride;
      }
      bulk_copy_g2s(kv_base + stage * K::kStageBytes + lane * T::kKvRowBytes, src, T::kHeadDim * 2, bar);
    };
    auto issue_block = [&](int blk) {
      if constexpr (kBulk)
        issue_block_bulk(blk);
      else
        copy_row(kv_base + (blk % kStages) * K::kStageBytes + ld_tok * T::kKvRowBytes, token_src(blk));
    };
    // Waits for block blk's KV rows (bulk mode: its stage's mbarrier; cp.async mode: the
    // caller's cp_async_wait does it).
    auto wait_block = [&](int blk) {
      if constexpr (kBulk) {
        const int stage = blk % kStages;
        mbar_wait(smem_u32(&full_bar[stage]), (phase >> stage) & 1);
        phase ^= 1u << stage;
      }
    };

    // First cp.async group: the Q tile into the last stage buffer and the first indices.
    const uint32_t q_base = kv_base + (kStages - 1) * K::kStageBytes;
    {
      const int r = row0 + ld_tok;
      const __nv_bfloat16* src = nullptr;
      if (r < req.rows) {
        const int64_t tok = req.qo_begin + r / p.num_heads;
        src = qg + tok * p.q_stride_t + (r % p.num_heads) * p.q_stride_h;
      }
      copy_row(q_base + ld_tok * T::kKvRowBytes, src);
    }
#pragma unroll
    for (int blk = 0; blk < kStages; ++blk) issue_idx(blk);
    cp_async_commit();

    const int tok0 = row0 / p.num_heads;
    if (p.mask != nullptr && tok_hi > req.prefix && tid < 64) {
      const int i = tok0 + (tid >> 4), j = tid & 15;
      if (i < req.draft && j < req.draft)
        mask_s[tid] = p.mask[req.mask_begin + int64_t(i) * req.kv_len + req.prefix + j];
    }
    cp_async_wait<0>();
    __syncthreads();

    // Q fragments: rows mi*16.., dims of k-group kg.
    uint32_t qf[W16::kKSteps][4];
    {
      const int mat = lane >> 3, r8 = lane & 7;
#pragma unroll
      for (int ks = 0; ks < W16::kKSteps; ++ks)
        ldmatrix_x4(qf[ks], q_base + (mi * 16 + (mat & 1) * 8 + r8) * T::kKvRowBytes +
                                (kg * W16::kKSteps * 16 + ks * 16 + (mat >> 1) * 8) * 2);
    }

#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
      if (kLoads && s < nb) issue_block(s);
      issue_idx(s + kStages);
      cp_async_commit();
    }

    float acc[2][4][4];
#pragma unroll
    for (int a = 0; a < 2; ++a)
#pragma unroll
      for (int ni = 0; ni < 4; ++ni)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[a][ni][c] = 0.f;

    const int q_row = row0 + sm_row;
    const bool row_ok = q_row < req.rows;
    const int q_tok = row_ok ? q_row / p.num_heads : 0;
    const uint8_t* mask_row = mask_s + (q_tok - tok0) * 16;  // this row's draft-column bytes
    float m_run = -CUDART_INF_F;  // same in the 16 threads of a row
    float l_part = 0.f;           // this thread's columns' share of the row sum (vs m_run)
    float v0 = 0.f, v1 = 0.f;     // scaled logits of the current block (slow path reuses them)

    auto stage_of = [&](int blk) { return kv_base + (blk % kStages) * K::kStageBytes; };
    auto compute_s = [&](int blk, float* red_buf) {
      float s[2][4];
#pragma unroll
      for (int ni = 0; ni < 2; ++ni)
#pragma unroll
        for (int c = 0; c < 4; ++c) s[ni][c] = 0.f;
      const int mat = lane >> 3, r8 = lane & 7;
      const uint32_t kaddr = stage_of(blk) + (ng * 16 + (mat >> 1) * 8 + r8) * T::kKvRowBytes +
                             (kg * W16::kKSteps * 16 + (mat & 1) * 8) * 2;
#pragma unroll
      for (int ks = 0; ks < W16::kKSteps; ++ks) {
        uint32_t kb[4];
        ldmatrix_x4(kb, kaddr + ks * 32);
        mma_bf16(s[0], qf[ks], kb[0], kb[1]);
        mma_bf16(s[1], qf[ks], kb[2], kb[3]);
      }
#pragma unroll
      for (int ni = 0; ni < 2; ++ni)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int r = mi * 16 + g + half * 8;
          const int c = ng * 16 + ni * 8 + t4 * 2;
          *reinterpret_cast<float2*>(&red_buf[(kg * T::kBlockM + r) * K::kRedRowFloats + c]) =
              make_float2(s[ni][half * 2], s[ni][half * 2 + 1]);
        }
    };
    // Sums the k-group partials, masks, and writes P against the current running max.
    // Returns whether this thread saw a logit that needs the max raised; the row sum is only
    // committed (by the caller) when no thread of the CTA did.
    auto softmax_fast = [&](int blk, const float* red_buf, float& psum) -> bool {
      float2 x = *reinterpret_cast<const float2*>(&red_buf[sm_row * K::kRedRowFloats + sm_col]);
#pragma unroll
      for (int k = 1; k < T::kKGroups; ++k) {
        const float2 y = *reinterpret_cast<const float2*>(
            &red_buf[(k * T::kBlockM + sm_row) * K::kRedRowFloats + sm_col]);
        x.x += y.x;
        x.y += y.y;
      }
      v0 = x.x * p.scale_log2;
      v1 = x.y * p.scale_log2;
      if (!row_ok) {
        v0 = v1 = -CUDART_INF_F;
      } else if (blk >= plain_blocks) {
        const int kbase = tok_lo + blk * 32 + sm_col;
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int k = kbase + j;
          bool ok = k < tok_hi;
          if (ok && k >= req.prefix) {
            const int dj = k - req.prefix;
            if (p.mask == nullptr)
              ok = dj <= q_tok;
            else if (dj < 16)
              ok = mask_row[dj] != 0;
            else
              ok = p.mask[req.mask_begin + int64_t(q_tok) * req.kv_len + req.prefix + dj] != 0;
          }
          if (!ok) (j == 0 ? v0 : v1) = -CUDART_INF_F;
        }
      }
      const float lim = m_run + W16::kRescaleLog2;  // -inf while the row has no max yet
      const bool need = v0 > lim || v1 > lim;
      const float m_use = m_run == -CUDART_INF_F ? 0.f : m_run;
      const float p0 = exp2f(v0 - m_use), p1 = exp2f(v1 - m_use);
      psum = p0 + p1;
      *reinterpret_cast<uint32_t*>(&p_s[sm_row * K::kPRowElems + sm_col]) = pack_bf16x2(p0, p1);
      return need;
    };
    // Rare path: raise every row's max to its true running max, rewrite P, rescale O.
    auto softmax_slow = [&]() {
      float bmax = fmaxf(v0, v1);
#pragma unroll
      for (int o = 1; o < W16::kSmTpr; o <<= 1) bmax = fmaxf(bmax, __shfl_xor_sync(0xffffffffu, bmax, o));
      const float m_new = fmaxf(m_run, bmax);
      const float m_use = m_new == -CUDART_INF_F ? 0.f : m_new;
      const float alpha = exp2f(m_run - m_use);  // m_run = -inf -> 0
      const float p0 = exp2f(v0 - m_use), p1 = exp2f(v1 - m_use);
      l_part = l_part * alpha + p0 + p1;
      m_run = m_new;
      *reinterpret_cast<uint32_t*>(&p_s[sm_row * K::kPRowElems + sm_col]) = pack_bf16x2(p0, p1);
      if (tid % W16::kSmTpr == 0) alpha_s[sm_row] = alpha;
      __syncthreads();
#pragma unroll
      for (int a = 0; a < 2; ++a) {
        const float a0 = alpha_s[a * 16 + g], a1 = alpha_s[a * 16 + g + 8];
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) {
          acc[a][ni][0] *= a0; acc[a][ni][1] *= a0;
          acc[a][ni][2] *= a1; acc[a][ni][3] *= a1;
        }
      }
    };
    auto softmax = [&](int blk, const float* red_buf) {
      float psum;
      const bool need = softmax_fast(blk, red_buf, psum);
      if (__syncthreads_or(need))
        softmax_slow();
      else
        l_part += psum;
    };
    auto pv = [&](int blk) {
      const int mat = lane >> 3, r8 = lane & 7;
#pragma unroll
      for (int kk = 0; kk < 2; ++kk) {
        uint32_t pa[2][4];
#pragma unroll
        for (int a = 0; a < 2; ++a)
          ldmatrix_x4(pa[a], smem_u32(&p_s[(a * 16 + (mat & 1) * 8 + r8) * K::kPRowElems + kk * 16 +
                                           (mat >> 1) * 8]));
        const uint32_t vrow = stage_of(blk) + (kk * 16 + (mat & 1) * 8 + r8) * T::kKvRowBytes;
#pragma unroll
        for (int nj = 0; nj < 2; ++nj) {
          uint32_t vb[4];
          ldmatrix_x4_trans(vb, vrow + (warp * W16::kColsPerWarp + nj * 16 + (mat >> 1) * 8) * 2);
#pragma unroll
          for (int a = 0; a < 2; ++a) {
            mma_bf16(acc[a][nj * 2], pa[a], vb[0], vb[1]);
            mma_bf16(acc[a][nj * 2 + 1], pa[a], vb[2], vb[3]);
          }
        }
      }
    };
    auto issue_next = [&](int i) {
      const int nxt = i + kStages - 1;
      if (kLoads && nxt < nb) issue_block(nxt);
      issue_idx(nxt + kStages);
      cp_async_commit();
    };

    if constexpr (!kPipe) {
      for (int i = 0; i < nb; ++i) {
        // Block i landed (cp.async mode), or the indices block i+kStages-1 needs (bulk mode).
        cp_async_wait<kBulk ? kStages - 1 : kStages - 2>();
        wait_block(i);
        __syncthreads();  // and every warp is done with block i-1
        if (kMath) compute_s(i, red_s);
        issue_next(i);  // after S: issuing first costs this variant a register spill
        __syncthreads();
        if (kMath) softmax(i, red_s);  // ends with a barrier: P (and alpha) complete
        if (kMath) pv(i);
      }
    } else {
      if constexpr (!kBulk) cp_async_wait<kStages - 2>();
      wait_block(0);
      __syncthreads();
      if (kMath) compute_s(0, red_s);
      for (int i = 0; i < nb; ++i) {
        cp_async_wait<kBulk ? kStages - 1 : kStages - 3>();  // block i+1 landed / indices (bulk)
        if (i + 1 < nb) wait_block(i + 1);
        __syncthreads();  // S partials of block i complete; PV of i-1 done
        issue_next(i);
        if (kMath) {
          if (i + 1 < nb) compute_s(i + 1, (i + 1) & 1 ? red2_s : red_s);
          softmax(i, i & 1 ? red2_s : red_s);
          pv(i);
        } else {
          __syncthreads();
        }
      }
    }

    // ---- epilogue ----
    float l_run = l_part;
#pragma unroll
    for (int o = 1; o < W16::kSmTpr; o <<= 1) l_run += __shfl_xor_sync(0xffffffffu, l_run, o);
    const bool full = unit_lo == 0 && unit_hi == seg_units;
    const int slot = 2 * cta + (unit_lo > 0 ? 0 : 1);
    if (tid % W16::kSmTpr == 0) {
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
    constexpr int kORow = T::kHeadDimV + 8;
    static_assert(T::kBlockM * kORow * 4 <= 2 * KvTile<32>::kStageBytes, "O tile fits the stages");
    float* o_s = reinterpret_cast<float*>(kv_s);
#pragma unroll
    for (int a = 0; a < 2; ++a)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = a * 16 + g + half * 8;
        const float inv = inv_s[r];
#pragma unroll
        for (int ni = 0; ni < 4; ++ni)
          *reinterpret_cast<float2*>(&o_s[r * kORow + warp * W16::kColsPerWarp + ni * 8 + t4 * 2]) =
              make_float2(acc[a][ni][half * 2] * inv, acc[a][ni][half * 2 + 1] * inv);
      }
    __syncthreads();
    if (full) {
      constexpr int kChunks = T::kHeadDimV / 8;
#pragma unroll 2
      for (int idx = tid; idx < T::kBlockM * kChunks; idx += W16::kThreads) {
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
#pragma unroll 2
      for (int idx = tid; idx < T::kBlockM * kChunks; idx += W16::kThreads) {
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
        req = load_request<32>(p, b);
      } while (req.nblk == 0);
      seg_units = (req.nblk + q - 1) / q;
    }
    __syncthreads();
  }
  }
}

}  // namespace detail
}  // namespace kdtree_mla
