// LSE combine kernel of the verify attention (partial slots: see verify_common.cuh).
#pragma once

#include "verify_common.cuh"

namespace kdtree_mla {
namespace detail {

// Merges the partials of every segment that CTA boundaries cut. Grid: (row groups, splits);
// CTA (x, y) handles rows x, x + gridDim.x, ... of the T*H output rows, columns
// [y * 64, y * 64 + 64). Rows whose segment was not cut were written by the main kernel.
// Latency is what matters here (a few MB, read from L2): after the main grid's writes are
// visible, one round of loads fetches the schedule and the row's token info together, and one
// more fetches up to kW * kBatch parts (a segment has at most num_ctas parts: one round on
// GPUs of up to 136 SMs), merged without a serial exp2 chain.
// kTrace (diagnostic): CTAs (x < kTraceCombineCtas, 0) record 0 entry, 1 main grid's writes
// visible, 3 exit.
template <bool kTrace>
__global__ void __launch_bounds__(kCombineThreads, 65536 / (kCombineThreads * kCombineRegs))
    verify_combine_kernel(const VerifyParams p) {
  constexpr int kW = kCombineThreads / 32;
  constexpr int kCols = T::kHeadDimV / kCombineSplits;  // 64: 2 per lane
  constexpr int kBatch = 17;                            // parts per warp per round
  static_assert(kCols == 64, "a lane merges 2 columns");
  __shared__ float red[kW][kCols];
  __shared__ float scal_m[kW], scal_l[kW];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
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
  const int per_cta = p.sched[0];  // units per CTA
  // Rows past qo_indptr[B] belong to no request (T larger than the batch's drafts): skip them.
  const int used_tokens = static_cast<int>(load_index(p.qo_indptr, p.batch, p.index64 & kQoIndptr64));
  const int col0 = blockIdx.y * kCols;
  const int all_rows = p.num_tokens * p.num_heads;  // T * H < 2^31 (T <= 16 * 4096)

  for (int row = blockIdx.x; row < all_rows; row += gridDim.x) {
    const int t = row / p.num_heads;
    const int h = row % p.num_heads;
    // Loaded before the bound check on purpose: t < num_tokens <= the table's rows, and the
    // load then shares its round trip with per_cta's and used_tokens'.
    const int4 info = reinterpret_cast<const int4*>(p.tokinfo)[t];  // qo_begin, prefix, seg_units
    if (t >= used_tokens) break;  // uniform across the CTA; rows only grow
    const int local = (t - info.x) * p.num_heads + h;
    const int mt = local / T::kBlockM, r = local % T::kBlockM;
    const int seg_units = info.z;
    const int seg_start = info.y + mt * seg_units;
    const int c0 = seg_start / per_cta;
    const int c1 = min((seg_start + seg_units - 1) / per_cta, p.num_ctas - 1);
    if (c0 >= c1) continue;  // written by the main kernel; uniform across the CTA
    const int nparts = c1 - c0 + 1;
    auto slot_of = [&](int k) { return k == 0 ? 2 * c0 + 1 : 2 * (c0 + k); };

    // Warp w merges parts w, w + kW, ... (all of a round's loads issued before any is used;
    // lane u loads the LSE of the round's part u and broadcasts its weight), then the kW warp
    // results meet in shared memory.
    float m = -CUDART_INF_F, l = 0.f;  // m: warp-uniform running max; l: this lane's parts
    float2 a = make_float2(0.f, 0.f);
    for (int k0 = warp; k0 < nparts; k0 += kW * kBatch) {
      float2 x[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int k = k0 + u * kW;
        x[u] = make_float2(0.f, 0.f);
        if (k < nparts)
          x[u] = *reinterpret_cast<const float2*>(
              p.part_o + (int64_t(slot_of(k)) * T::kBlockM + r) * T::kHeadDimV + col0 + lane * 2);
      }
      const int kl = k0 + lane * kW;
      const float v = lane < kBatch && kl < nparts ? p.part_lse[slot_of(kl) * T::kBlockM + r] : -CUDART_INF_F;
      float m_new = fmaxf(m, v);
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) m_new = fmaxf(m_new, __shfl_xor_sync(0xffffffffu, m_new, o));
      if (m_new == -CUDART_INF_F) continue;  // every part so far empty
      const float so = exp2f(m - m_new), sl = exp2f(v - m_new);  // sl = 0 for absent parts
      a.x *= so;
      a.y *= so;
      l = l * so + sl;
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const float sn = __shfl_sync(0xffffffffu, sl, u);
        a.x += sn * x[u].x;
        a.y += sn * x[u].y;
      }
      m = m_new;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) l += __shfl_xor_sync(0xffffffffu, l, o);
    *reinterpret_cast<float2*>(&red[warp][lane * 2]) = a;
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
      __nv_bfloat16* dst = static_cast<__nv_bfloat16*>(p.o) + int64_t(t) * p.o_stride_t + h * p.o_stride_h + col0;
      *reinterpret_cast<uint32_t*>(dst + tid * 2) = pack_bf16x2(x * inv, y * inv);
      if (tid == 0 && blockIdx.y == 0 && p.lse != nullptr)
        p.lse[int64_t(t) * p.lse_stride_t + h] =
            sum > 0.f ? (mref + __log2f(sum)) * 0.69314718055994530942f : -CUDART_INF_F;
    }
    __syncthreads();
  }
  if (tracer()) trace_point<kTrace>(p, kTraceCombineRow + blockIdx.x, 3);
}

}  // namespace detail
}  // namespace kdtree_mla
