// Device helpers shared by the verify kernels: PTX wrappers, per-request geometry, and the
// split-KV schedule every CTA recomputes from the index pointers.
//
// Work decomposition. A request b has M_b = D_b * H query rows (draft token major, head minor,
// the order of q's rows) and L_b = P_b + D_b KV tokens (its prefix through kv_indices, then its
// draft tokens from k_extend). Its rows are cut into ceil(M_b / 32) M-tiles; each (b, M-tile)
// is a "segment" of ceil(L_b / 32) KV blocks, cut into units of q blocks (make_schedule); all
// units laid end to end are split evenly over the fixed grid of num_ctas CTAs.
// A segment entirely inside one CTA's range is written straight to o; a segment cut by CTA
// boundaries leaves one partial (normalised O, LSE) per CTA: CTA c's piece that continues a
// segment begun before it in slot c, its piece that starts one in slot num_ctas + c (so parts
// 1.. of a segment lie back to back), and the main kernel's fused merge or the combine kernel
// merges them. Every CTA recomputes the schedule from the index pointers, so the launch
// geometry never depends on device data (CUDA-graph safe).
// Only mma.sync m16n8k16 bf16, ldmatrix, cp.async, cp.async.bulk, mbarrier, griddepcontrol,
// gpu-scope fences, ld.acquire and red: builds unchanged for sm_90 and sm_120.
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

template <int kBytes>
__device__ __forceinline__ void cp_async_small(uint32_t dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(dst), "l"(src), "n"(kBytes));
}
// 16 bytes, bypassing L1 (data other CTAs of the grid may have written).
__device__ __forceinline__ void cp_async_cg16(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
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
// Eight fp8 values (e4m3 or e5m2, params.h KvDtype; bytes in order) to eight bf16, exactly, in
// integer and bf16x2 operations (no conversion unit): a byte's sign, exponent and mantissa bits
// moved into bf16's places are a bf16 of the value times 2^-120 (e4m3) or 2^-112 (e5m2), its
// subnormals included; one bf16x2 multiply by the power of two restores it (exact: bf16 has
// the exponent range and the products' mantissas have at most 3 bits; bf16 arithmetic keeps
// subnormal inputs).
template <int kKv>
__device__ __forceinline__ uint4 fp8x8_to_bf16x8(uint2 in) {
  constexpr uint32_t kShift = kKv == kKvE5m2 ? 5 : 4;
  constexpr uint32_t kBits = 0x007F007Fu << kShift;  // exponent and mantissa of both halves
  constexpr uint32_t kScale = kKv == kKvE5m2 ? 0x77807780u : 0x7B807B80u;  // 2^112 / 2^120, bf16x2
  uint32_t out[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t word = i < 2 ? in.x : in.y;
    const uint32_t x = __byte_perm(word, 0u, (i & 1) ? 0x4342u : 0x4140u);  // two bytes, one a half
    const uint32_t bits = ((x << 8) & 0x80008000u) | ((x << kShift) & kBits);
    asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(out[i]) : "r"(bits), "r"(kScale), "r"(0x80008000u));
  }
  return make_uint4(out[0], out[1], out[2], out[3]);
}

// The inverse of pack_bf16x2: (lo, hi) of a packed bf16 pair, exactly.
__device__ __forceinline__ float2 unpack_bf16x2(uint32_t x) {
  return make_float2(__uint_as_float(x << 16), __uint_as_float(x & 0xffff0000u));
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
template <bool kOn>
__device__ __forceinline__ void trace_point(const VerifyParams& p, int row, int k);  // (below)

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

// The fused merge's handshakes (workspace `sync`, 64-bit: [0] CTAs ended, then one flag per
// partial slot). Every CTA of a fused call adds 1 to [0] as it ends, so after c calls it holds
// c * num_ctas; a CTA of call c reads it after griddepcontrol.wait (call c - 1 complete), when
// at most num_ctas - 1 CTAs of call c have ended, so [0] / num_ctas = c in every CTA: the call's
// epoch, with no grid-wide step. A partial is published by setting its slot's flag to c + 1
// (release); readers wait for exactly that value, so nothing is cleared between calls (64 bits:
// no wrap).
__device__ __forceinline__ unsigned long long ld_relaxed_u64(const unsigned long long* ptr) {
  unsigned long long v;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];\n" : "=l"(v) : "l"(ptr) : "memory");
  return v;
}
// The call's number from that count (v = calls x num_ctas + e, e < num_ctas): v / num_ctas by
// the host's reciprocal p.ctas_recip (its high product is the quotient or one less), one
// correction, no 64-bit division. (A division took a subroutine at the far end of the code on
// thread 0, before the math warps' first barrier, once the count passed 2^32: after ~33M calls
// of a 132-CTA grid, i.e. hours into serving.)
__device__ __forceinline__ unsigned long long call_number(unsigned long long v, const VerifyParams& p) {
  const unsigned long long n = static_cast<unsigned long long>(p.num_ctas);
  unsigned long long c = __umul64hi(v, p.ctas_recip);
  if (v - c * n >= n) ++c;
  return c;
}
// Merge tickets (verify_main.cuh ticketed): the word after the flags counts the CTAs of a call's
// one cut segment whose last block has landed, wrapping to 0 at its n-th (atom.inc), so
// it is 0 between calls and the tickets of a call are 0 .. n-1 in that order.
__device__ __forceinline__ int merge_ticket(unsigned long long* sync, int num_ctas, int n) {
  return static_cast<int>(atomicInc(reinterpret_cast<unsigned*>(sync + 1 + 2 * num_ctas), static_cast<unsigned>(n - 1)));
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
// A CTA of a fused call ends (its thread 0, once): the count above.
__device__ __forceinline__ void merge_cta_ended(unsigned long long* sync) {
  asm volatile("red.relaxed.gpu.global.add.u64 [%0], 1;\n" ::"l"(sync) : "memory");
}
// Publishes a stored partial (tid 0, after the barrier that follows every warp's stores): a
// gpu-scope release fence, then the part's flag set to `value`.
__device__ __forceinline__ void publish_part(unsigned long long* flag, unsigned long long value) {
  asm volatile("fence.acq_rel.gpu;\n" ::: "memory");
  asm volatile("st.relaxed.gpu.global.u64 [%0], %1;\n" ::"l"(flag), "l"(value) : "memory");
}
// CTA-scope release/acquire on shared memory: extend an acquire of one thread to the others.
__device__ __forceinline__ void st_shared_release(uint32_t* ptr, uint32_t v) {
  asm volatile("st.release.cta.shared::cta.u32 [%0], %1;\n" ::"r"(smem_u32(ptr)), "r"(v) : "memory");
}
__device__ __forceinline__ uint32_t ld_shared_acquire(const uint32_t* ptr) {
  uint32_t v;
  asm volatile("ld.acquire.cta.shared::cta.u32 %0, [%1];\n" : "=r"(v) : "r"(smem_u32(ptr)) : "memory");
  return v;
}
// Orders this thread's earlier acquire (generic proxy) before its later bulk copies from
// global memory (async proxy).
__device__ __forceinline__ void fence_proxy_async_global() {
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
}
// gpu-scope acquire load (a flag other CTAs of the grid set with publish_part).
__device__ __forceinline__ unsigned long long ld_acquire_u64(const unsigned long long* ptr) {
  unsigned long long v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];\n" : "=l"(v) : "l"(ptr) : "memory");
  return v;
}

// Bulk row copy (sm_90+, no tensor map): `bytes` from global to shared, completing on `bar`.
__device__ __forceinline__ void bulk_copy_g2s(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
}
// The same copy with an L2 eviction policy (`l2_evict_first`): for rows a call streams once.
__device__ __forceinline__ void bulk_copy_g2s_hint(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar,
                                                   uint64_t policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;\n" ::
          "r"(dst),
      "l"(src), "r"(bytes), "r"(bar), "l"(policy)
      : "memory");
}
// L2 policy that evicts these lines before any others (sm_80+): the KV rows a call streams
// once, so that what is read again (Q by every CTA, the pool indices by every layer, the
// partials and flags by the merge) is not pushed out by them.
__device__ __forceinline__ uint64_t l2_evict_first() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}
// L2 policy that evicts these lines after any others (sm_80+): the partials, which every call
// rewrites in place. Their merge reads them with it, and the lines it hits keep it, so they
// stay in L2 until the next call rewrites them there (measured: with it, dropping the partials
// from L2 after the call, research/kernel-lab/bench/l2_discard.py, saves nothing more). Without it, the reads of
// the kernels between two calls of a model step (a 128 MB read in the bench's L2-cold column)
// evicted them dirty and L2 wrote them back to DRAM: 2.9-4.2 MB a B = 1 call that nothing reads
// again, 0.9-1.7 us a call L2 cold. At most two slots a CTA (8.4 MB on 132 SMs) are
// held this way.
__device__ __forceinline__ uint64_t l2_evict_last() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
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

// Diagnostic timestamps (trace variants only, traits.h kTraceSlots): point k of trace row `row`.
template <bool kOn>
__device__ __forceinline__ void trace_point(const VerifyParams& p, int row, int k) {
  if constexpr (kOn) {
    unsigned long long g;
    asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(g));
    p.trace[row * kTraceSlots + k] = g;
    p.trace[row * kTraceSlots + kTraceSlots / 2 + k] = static_cast<unsigned long long>(clock64());
  }
}
// Clears a trace row's points after the first (a CTA with no work leaves them 0).
template <bool kOn>
__device__ __forceinline__ void trace_begin(const VerifyParams& p, int row) {
  if constexpr (kOn) {
    for (int k = 1; k < kTraceSlots; ++k)
      if (k != kTraceSlots / 2 && k != kTraceSmidSlot) p.trace[row * kTraceSlots + k] = 0ull;
    trace_point<true>(p, row, 0);
    unsigned smid;
    asm volatile("mov.u32 %0, %%smid;\n" : "=r"(smid));
    p.trace[row * kTraceSlots + kTraceSmidSlot] = smid;
  }
}

}  // namespace detail
}  // namespace kdtree_mla
