// LSE combine kernel of the verify attention (partial slots: see verify_common.cuh).
#pragma once

#include "verify_merge.cuh"

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
  static_assert(kCols == 64, "a lane merges 2 columns");
  __shared__ MergeSmem<kW> red;
  const int warp = threadIdx.x >> 5;
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
  const int wpr = p.combine_wpr;         // 1, 2 or 4 (uniform: branches on it are too)
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
    MergeAcc acc = merge_parts<kCombineBatch>(p, r, col0, c0, live ? c1 - c0 + 1 : 0, wr, wpr);
    acc = merge_warps(acc, red, warp, wr, wpr, [] { __syncthreads(); });
    if (wr == 0 && live) merge_store(p, acc, t, h, col0);
  }
  if (tracer()) trace_point<kTrace>(p, kTraceCombineRow + blockIdx.x, 3);
}

}  // namespace detail
}  // namespace kdtree_mla
