// The fused merge's handshakes between the CTAs of one cooperative launch: the call's number,
// published partials, merge tickets and the count of CTAs ended (workspace `sync`).
#pragma once

#include "ptx.cuh"

namespace kdtree_mla {
namespace detail {

// The fused merge's handshakes (workspace `sync`, 64-bit: [0] CTAs ended, then one flag per
// partial slot). Every CTA of a fused call adds 1 to [0] as it ends, so after c calls it holds
// c * num_ctas; a CTA of call c reads it after griddepcontrol.wait (call c - 1 complete), when
// at most num_ctas - 1 CTAs of call c have ended, so [0] / num_ctas = c in every CTA: the call's
// epoch, with no grid-wide step. A partial is published by setting its slot's flag to c + 1
// (release); readers wait for exactly that value, so nothing is cleared between calls (64 bits:
// no wrap).
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
}  // namespace detail
}  // namespace kdtree_mla
