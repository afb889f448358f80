// LSE combine kernel of the verify attention (partial slots: see verify_common.cuh).
#pragma once

#include "verify_common.cuh"

namespace kdtree_mla {
namespace detail {

// Merges the partials of every segment that CTA boundaries cut. Grid: (row groups, splits);
// CTA (x, y) handles rows x, x + gridDim.x, ... of the T*H output rows, columns
// [y * 64, y * 64 + 64). Rows whose segment was not cut were written by the main kernel.
// kTrace (diagnostic): CTAs (x < kTraceCombineCtas, 0) record 0 entry, 1 main grid's writes
// visible, 2 first cut row's token info loaded, 3 exit.
template <bool kTrace>
__global__ void __launch_bounds__(kCombineThreads) verify_combine_kernel(const VerifyParams p) {
  constexpr int kW = kCombineThreads / 32;
  constexpr int kCols = T::kHeadDimV / kCombineSplits;  // 128: 4 per lane
  __shared__ float red[kW][kCols];
  __shared__ float scal_m[kW], scal_l[kW];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const bool tracer = kTrace && tid == 0 && blockIdx.y == 0 && blockIdx.x < kTraceCombineCtas;
  const int trace_row = kTraceCombineRow + blockIdx.x;
  if (tracer) trace_begin<kTrace>(p, trace_row);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // The next call's main kernel (a programmatic dependent) may be scheduled now; it waits for
  // this grid's completion before reading anything.
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  asm volatile("griddepcontrol.wait;\n" ::: "memory");  // main grid done, its writes visible
#endif
  if (tracer) trace_point<kTrace>(p, trace_row, 1);
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
    if (tracer && p.trace[trace_row * kTraceSlots + 2] == 0ull) trace_point<kTrace>(p, trace_row, 2);
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
  if (tracer) trace_point<kTrace>(p, trace_row, 3);
}

}  // namespace detail
}  // namespace kdtree_mla
