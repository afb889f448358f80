// Per-request geometry and the split-KV schedule every CTA of the main kernel recomputes from
// the index pointers (or takes from its schedule plan); see verify_common.cuh for the work
// decomposition.
#pragma once

#include "ptx.cuh"

namespace kdtree_mla {
namespace detail {

__device__ __forceinline__ int64_t load_index(const void* p, int64_t i, bool is64) {
  return is64 ? static_cast<const int64_t*>(p)[i] : static_cast<const int32_t*>(p)[i];
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

// Request b's geometry. kFront: the mask pointer is loaded from a valid address with or without
// a mask (qo_indptr stands in), so that its load goes out with the other four; behind
// `p.mask != nullptr` it was issued only once they had landed, a second round trip on the
// front of every call. Only the front takes that form: in the walk's next() the
// other form keeps the block loop's code as it was (the hoisted one there cost 2% at H = 64).
template <bool kFront = false>
__device__ __forceinline__ Request load_request(const VerifyParams& p, int b) {
  Request r;
  const bool has_mask = p.mask != nullptr;
  int64_t m0 = 0;
  if constexpr (kFront)
    m0 = load_index(has_mask ? p.mask_indptr : p.qo_indptr, b,
                    has_mask ? (p.index64 & kMaskIndptr64) : (p.index64 & kQoIndptr64));
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
  r.nblk = r.draft > 0 ? (r.kv_len + T::kBlockN - 1) / T::kBlockN : 0;
  if constexpr (kFront)
    r.mask_begin = has_mask ? m0 : 0;
  else
    r.mask_begin = has_mask ? load_index(p.mask_indptr, b, p.index64 & kMaskIndptr64) : 0;
  return r;
}

// Block-wide sums of (x, y) over the CTA (all threads get them). warp_sums: 2 * kThreads / 32
// ints of smem.
template <int kThreads>
__device__ __forceinline__ int2 block_sum2(int x, int y, int* warp_sums) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    x += __shfl_xor_sync(0xffffffffu, x, o);
    y += __shfl_xor_sync(0xffffffffu, y, o);
  }
  __syncthreads();
  if (lane == 0) {
    warp_sums[2 * warp] = x;
    warp_sums[2 * warp + 1] = y;
  }
  __syncthreads();
  int2 total = make_int2(0, 0);
  for (int i = 0; i < kThreads / 32; ++i) {
    total.x += warp_sums[2 * i];
    total.y += warp_sums[2 * i + 1];
  }
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

// Fills scan[0..B] with the exclusive prefix of units per request (scan[B] = U). *mine gets
// request tid's geometry (valid when tid < B), so callers need no second read of it.
// q from the totals: when there are few segments, units that fit the grid; else 1 block.
__device__ __forceinline__ int blocks_per_unit(const VerifyParams& p, int total_blocks, int total_segs) {
  if (total_segs * 4 > p.num_ctas) return 1;
  const int denom = p.num_ctas - total_segs;
  return max(max(p.min_blocks_per_cta, 1), (total_blocks + denom - 1) / denom);
}
__device__ __forceinline__ int units_per_cta(const VerifyParams& p, int total_units, int q) {
  return max((total_units + p.num_ctas - 1) / p.num_ctas, q == 1 ? max(p.min_blocks_per_cta, 1) : 1);
}

// Fills scan[0..B] with the exclusive prefix of units per request (scan[B] = U). *mine gets
// request tid's geometry (valid when tid < B), so callers need no second read of it.
template <int kThreads>
__device__ Schedule make_schedule(const VerifyParams& p, int* scan, int* warp_sums, Request* mine) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  int w = 0, segs = 0;
  for (int b = tid; b < p.batch; b += kThreads) {
    const Request r = load_request(p, b);
    if (b == tid) *mine = r;
    w += r.mtiles * r.nblk;
    segs += r.nblk > 0 ? r.mtiles : 0;
  }
  const int2 totals = block_sum2<kThreads>(w, segs, warp_sums);
  Schedule s;
  s.blocks_per_unit = blocks_per_unit(p, totals.x, totals.y);
  const int q = s.blocks_per_unit;
  int carry = 0;
  for (int base = 0; base < p.batch; base += kThreads) {
    const int b = base + tid;
    int x = b < p.batch ? units_of(base == 0 ? *mine : load_request(p, b), q) : 0;
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
  s.units_per_cta = units_per_cta(p, s.total_units, q);
  return s;
}

// The same schedule for B <= 32, computed by one warp alone (lane b holds request b) with
// shuffles: no CTA-wide barrier, so each warp of a CTA goes on to its copies as soon as the
// index pointers arrive. *mine = the lane's request (zeros past B), *excl = its first unit.
template <bool kTrace = false>
__device__ __forceinline__ Schedule warp_schedule(const VerifyParams& p, Request* mine, int* excl) {
  const int lane = threadIdx.x & 31;
  Request r = {};
  if (lane < p.batch) r = load_request<true>(p, lane);
  if constexpr (kTrace) {
    // Trace point 29 (traced variant, load warp 0, lane 0): the index pointers landed. The
    // volatile store of a loaded value waits for it before the timer is read.
    if (threadIdx.x == T::kMathThreads) {
      volatile unsigned long long* slot = p.trace + blockIdx.x * kTraceSlots + 31;
      *slot = static_cast<unsigned long long>(r.kv_len + r.qo_begin + r.mask_begin);
      trace_point<true>(p, blockIdx.x, 29);
    }
  }
  const int w = __reduce_add_sync(0xffffffffu, r.mtiles * r.nblk);
  const int segs = __reduce_add_sync(0xffffffffu, r.nblk > 0 ? r.mtiles : 0);
  Schedule s;
  s.blocks_per_unit = blocks_per_unit(p, w, segs);
  const int units = lane < p.batch ? units_of(r, s.blocks_per_unit) : 0;
  int x = units;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x += y;
  }
  s.total_units = __shfl_sync(0xffffffffu, x, 31);
  s.units_per_cta = units_per_cta(p, s.total_units, s.blocks_per_unit);
  *mine = r;
  *excl = x - units;
  return s;
}

// The combine kernel's table row of request r (first unit `first_unit`), one per draft token:
// {qo_begin, first unit, units per segment, 0}.
__device__ __forceinline__ void store_tokinfo(const VerifyParams& p, const Request& r, int first_unit, int q) {
  const int4 info = make_int4(r.qo_begin, first_unit, (r.nblk + q - 1) / q, 0);
  for (int i = 0; i < r.draft; ++i) reinterpret_cast<int4*>(p.tokinfo)[r.qo_begin + i] = info;
}

// Request geometry held by lane `src` of the warp.
__device__ __forceinline__ Request shfl_request(const Request& r, int src) {
  Request o;
  o.qo_begin = __shfl_sync(0xffffffffu, r.qo_begin, src);
  o.kv_begin = __shfl_sync(0xffffffffu, static_cast<long long>(r.kv_begin), src);
  o.mask_begin = __shfl_sync(0xffffffffu, static_cast<long long>(r.mask_begin), src);
  o.draft = __shfl_sync(0xffffffffu, r.draft, src);
  o.prefix = __shfl_sync(0xffffffffu, r.prefix, src);
  o.kv_len = __shfl_sync(0xffffffffu, r.kv_len, src);
  o.rows = __shfl_sync(0xffffffffu, r.rows, src);
  o.mtiles = __shfl_sync(0xffffffffu, r.mtiles, src);
  o.nblk = __shfl_sync(0xffffffffu, r.nblk, src);
  return o;
}

// Schedule plans (fused calls with B = 1). Every layer of a model step passes the same index
// pointers, and a CTA's schedule and the start of its walk are a function of those and of a few
// launch values. Working them out takes the load warps ~1 us of code between the index
// pointers landing and their first index copies (a trace's reading), on every call. So each
// CTA keeps in the workspace (`sync`, kPlanWords words a CTA after the merge-ticket word) what
// it worked out together with everything it depends on, and a call whose request and launch
// values are the same takes it instead. The key is compared whole, so a plan can only be taken
// where it is what the call would compute: it never changes an output. Zeros (a new workspace)
// never match (the magic word).
struct Plan {
  Schedule sch;
  int mt, unit_lo, seg_start, seg_units;  // the walk's start (PieceWalk)
};
constexpr unsigned long long kPlanMagic = 0x6b64706cull;  // "kdpl"
__device__ __forceinline__ unsigned long long* plan_slot(const VerifyParams& p, int cta) {
  return p.sync + 2 + 2 * p.num_ctas + cta * T::kPlanWords;
}
// Two 32-bit values in one plan word, `lo` in the low half.
__device__ __forceinline__ unsigned long long pack2(int lo, int hi) {
  return (static_cast<unsigned long long>(static_cast<uint32_t>(hi)) << 32) | static_cast<uint32_t>(lo);
}
// What a B = 1 call's schedule depends on besides num_ctas (fixed for the workspace): words 0-4.
__device__ __forceinline__ void plan_key(const VerifyParams& p, const Request& r, unsigned long long k[5]) {
  k[0] = (kPlanMagic << 32) | (static_cast<unsigned long long>(p.mask != nullptr) << 31) |
         static_cast<uint32_t>(p.num_heads);
  k[1] = pack2(p.min_blocks_per_cta, r.draft);
  k[2] = pack2(r.qo_begin, r.prefix);
  k[3] = static_cast<unsigned long long>(r.kv_begin);
  k[4] = static_cast<unsigned long long>(r.mask_begin);
}
// This CTA's plan, if its key is this call's (every lane of a warp loads the same words).
__device__ __forceinline__ bool plan_take(const VerifyParams& p, int cta, const Request& r, Plan* out) {
  const ulonglong2* src = reinterpret_cast<const ulonglong2*>(plan_slot(p, cta));
  ulonglong2 v[T::kPlanWords / 2];
#pragma unroll
  for (int i = 0; i < T::kPlanWords / 2; ++i) v[i] = src[i];
  unsigned long long k[5];
  plan_key(p, r, k);
  const bool hit = v[0].x == k[0] && v[0].y == k[1] && v[1].x == k[2] && v[1].y == k[3] && v[2].x == k[4];
  out->sch.blocks_per_unit = static_cast<int>(v[2].y);
  out->sch.units_per_cta = static_cast<int>(v[2].y >> 32);
  out->sch.total_units = static_cast<int>(v[3].x);
  out->mt = static_cast<int>(v[3].y);
  out->unit_lo = static_cast<int>(v[3].y >> 32);
  out->seg_start = static_cast<int>(v[4].x);
  out->seg_units = static_cast<int>(v[4].x >> 32);
  return hit;
}
// Keeps what this call worked out for the next call (one thread of the CTA).
__device__ __forceinline__ void plan_keep(const VerifyParams& p, int cta, const Request& r, const Plan& pl) {
  unsigned long long k[5];
  plan_key(p, r, k);
  ulonglong2* dst = reinterpret_cast<ulonglong2*>(plan_slot(p, cta));
  dst[0] = make_ulonglong2(k[0], k[1]);
  dst[1] = make_ulonglong2(k[2], k[3]);
  dst[2] = make_ulonglong2(k[4], pack2(pl.sch.blocks_per_unit, pl.sch.units_per_cta));
  dst[3] = make_ulonglong2(pack2(pl.sch.total_units, 0), pack2(pl.mt, pl.unit_lo));
  dst[4] = make_ulonglong2(pack2(pl.seg_start, pl.seg_units), 0ull);
}
}  // namespace detail
}  // namespace kdtree_mla
