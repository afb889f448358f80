// PTX wrappers of the verify kernels: shared-memory addresses, cp.async, ldmatrix, mma.sync,
// bf16 / fp8 packing, bulk copies and their L2 policies, mbarriers, memory-model loads, stores
// and fences, and the diagnostic trace points. Nothing here knows the schedule or the merge.
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

// Memory-model operations (the fused merge's handshakes, merge_sync.cuh, are built on them).
__device__ __forceinline__ unsigned long long ld_relaxed_u64(const unsigned long long* ptr) {
  unsigned long long v;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];\n" : "=l"(v) : "l"(ptr) : "memory");
  return v;
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
