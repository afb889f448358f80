// LSE combine kernel of the verify attention (partial slots: see verify_common.cuh).
#pragma once

#include "verify_common.cuh"

namespace kdtree_mla {
namespace detail {

// Merges the partials of every segment that CTA boundaries cut. Grid: (row groups, splits);
// each CTA takes kW / wpr rows at a time (wpr = VerifyParams::combine_wpr warps a row, chosen by
// the launcher from the shape: a segment has about num_ctas * 32 / (T * H) parts, so few rows
// mean many parts a row and many warps on each), columns [y * 64, y * 64 + 64) of them. Rows
// whose segment was not cut were written by the main kernel.
// Latency is what matters (a few MB, read from L2): after the main grid's writes are visible,
// one round of loads fetches the schedule and the rows' token info together, and one more
// fetches up to kBatch parts a warp, merged without a serial exp2 chain.
// kTrace (diagnostic): CTAs (x < kTraceCombineCtas, 0) record 0 entry, 1 main grid's writes
// visible, 3 exit.
template <bool kTrace>
__global__ void __launch_bounds__(kCombineThreads, 65536 / (kCombineThreads * kCombineRegs))
    verify_combine_kernel(const VerifyParams p) {
  constexpr int kW = kCombineThreads / 32;
  constexpr int kCols = T::kHeadDimV / kCombineSplits;  // 64: 2 per lane
  constexpr int kBatch = kCombineBatch;                  // parts per warp per round
  static_assert(kCols == 64, "a lane merges 2 columns");
  static_assert(kBatch <= 64, "a lane holds at most two parts' LSEs");
  __shared__ float2 red[kW][32];
  __shared__ float scal_m[kW], scal_l[kW];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  // (recomputed at each point: nothing of the trace stays live across the merge)
  auto tracer = [] { return kTrace && threadIdx.x == 0 && blockIdx.y == 0 && blockIdx.x < kTraceCombineCtas; };
  if (tracer()) trace_begin<kTrace>(p, kTraceCombineRow + blockIdx.x);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // The next call's main kernel (a programmatic dependent) may be scheduled now; it waits for
  // this grid's completion before reading anything.
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  asm volatile("griddepcontrol.wait;\n" ::: "memory");  // main grid done, its writes visible
#endif
  if (tracer()) trace_point<kTrace>(p, kTraceCombineRow + blockIdx.x, 1);
  const int wpr = p.combine_wpr;         // 1, 2, 4 or 8 (uniform: branches on it are too)
  const int rows_per_cta = kW / wpr;
  const int sub = warp / wpr, wr = warp % wpr;  // this warp's row in the group, rank in the row
  const int per_cta = p.sched[0];               // units per CTA
  // Rows past qo_indptr[B] belong to no request (T larger than the batch's drafts): skip them.
  const int used_tokens = static_cast<int>(load_index(p.qo_indptr, p.batch, p.index64 & kQoIndptr64));
  const int col0 = blockIdx.y * kCols;
  const int all_rows = p.num_tokens * p.num_heads;  // T * H < 2^31 (T <= 16 * 4096)

  for (int row0 = blockIdx.x * rows_per_cta; row0 < all_rows; row0 += gridDim.x * rows_per_cta) {
    const int row = row0 + sub;
    const int t = min(row, all_rows - 1) >> p.head_shift;
    const int h = row & (p.num_heads - 1);
    // Loaded before the checks on purpose: t < num_tokens <= the table's rows, and the load
    // then shares its round trip with per_cta's and used_tokens'.
    const int4 info = reinterpret_cast<const int4*>(p.tokinfo)[t];  // qo_begin, prefix, seg_units
    const int local = (t - info.x) * p.num_heads + h;
    const int mt = local / T::kBlockM, r = local % T::kBlockM;
    const int seg_start = info.y + mt * info.z;
    const int c0 = seg_start / per_cta;
    const int c1 = min((seg_start + info.z - 1) / per_cta, p.num_ctas - 1);
    // Warp-uniform: a row past the batch's tokens, or not cut (the main kernel wrote it).
    const bool live = row < all_rows && t < used_tokens && c0 < c1;
    const int nparts = live ? c1 - c0 + 1 : 0;
    auto slot_of = [&](int k) { return k == 0 ? 2 * c0 + 1 : 2 * (c0 + k); };

    // This warp merges parts wr, wr + wpr, ... (all of a round's loads issued before any is
    // used; the lanes load the round's LSEs and broadcast the weights).
    float m = -CUDART_INF_F, l = 0.f;  // m: warp-uniform running max; l: this lane's parts
    float2 a = make_float2(0.f, 0.f);
    // bf16 pairs of this lane's 2 columns; + slot * 32 * 512 (< 2^31)
    const uint32_t* obase = reinterpret_cast<const uint32_t*>(static_cast<const __nv_bfloat16*>(p.part_o) +
                                                              r * T::kHeadDimV + col0 + lane * 2);
    for (int k0 = wr; k0 < nparts; k0 += wpr * kBatch) {
      uint32_t x[kBatch];  // this lane's bf16 pair of each part
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {  // past the last part: re-read it (weight 0 below)
        const int k = min(k0 + u * wpr, nparts - 1);
        x[u] = obase[slot_of(k) * (T::kBlockM * T::kHeadDimV / 2)];
      }
      // Lane j holds the LSEs of the round's parts j and j + 32.
      const int kl0 = k0 + lane * wpr, kl1 = k0 + (lane + 32) * wpr;
      const float v0 = lane < kBatch && kl0 < nparts ? p.part_lse[slot_of(kl0) * T::kBlockM + r] : -CUDART_INF_F;
      const float v1 = lane + 32 < kBatch && kl1 < nparts ? p.part_lse[slot_of(kl1) * T::kBlockM + r] : -CUDART_INF_F;
      float m_new = fmaxf(m, fmaxf(v0, v1));
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) m_new = fmaxf(m_new, __shfl_xor_sync(0xffffffffu, m_new, o));
      if (m_new == -CUDART_INF_F) continue;  // every part so far empty
      // Weights; 0 for absent parts (the re-read ones above among them).
      const float so = exp2f(m - m_new), sl0 = exp2f(v0 - m_new), sl1 = exp2f(v1 - m_new);
      a.x *= so;
      a.y *= so;
      l = l * so + sl0 + sl1;
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const float sn = __shfl_sync(0xffffffffu, u < 32 ? sl0 : sl1, u & 31);
        const float2 xu = unpack_bf16x2(x[u]);
        a.x += sn * xu.x;
        a.y += sn * xu.y;
      }
      m = m_new;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) l += __shfl_xor_sync(0xffffffffu, l, o);
    // The row's wpr warp results meet (through shared memory when wpr > 1); its first warp
    // writes the output slice and, for slice 0, the LSE.
    if (wpr > 1) {
      red[warp][lane] = a;
      if (lane == 0) {
        scal_m[warp] = m;
        scal_l[warp] = l;
      }
      __syncthreads();
      if (wr == 0 && live) {
        float mx = -CUDART_INF_F;
        for (int i = 0; i < wpr; ++i) mx = fmaxf(mx, scal_m[warp + i]);
        const float mref = mx == -CUDART_INF_F ? 0.f : mx;
        a = make_float2(0.f, 0.f);
        l = 0.f;
        for (int i = 0; i < wpr; ++i) {
          const float w = exp2f(scal_m[warp + i] - mref);
          a.x += w * red[warp + i][lane].x;
          a.y += w * red[warp + i][lane].y;
          l += w * scal_l[warp + i];
        }
        m = mref;
      }
      __syncthreads();
    }
    if (wr == 0 && live) {
      const float inv = l > 0.f ? 1.f / l : 0.f;
      __nv_bfloat16* dst = static_cast<__nv_bfloat16*>(p.o) + int64_t(t) * p.o_stride_t + h * p.o_stride_h + col0;
      *reinterpret_cast<uint32_t*>(dst + lane * 2) = pack_bf16x2(a.x * inv, a.y * inv);
      if (lane == 0 && blockIdx.y == 0 && p.lse != nullptr)
        p.lse[int64_t(t) * p.lse_stride_t + h] =
            l > 0.f ? (m + __log2f(l)) * 0.69314718055994530942f : -CUDART_INF_F;
    }
  }
  if (tracer()) trace_point<kTrace>(p, kTraceCombineRow + blockIdx.x, 3);
}

}  // namespace detail
}  // namespace kdtree_mla
