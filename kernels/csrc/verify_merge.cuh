// Merging the partials of a segment cut by CTA boundaries (slots: verify_common.cuh): the main
// kernel's fused merge (merge_staged) and the combine kernel's (merge_parts, merge_warps,
// merge_store).
#pragma once

#include "verify_common.cuh"

namespace kdtree_mla {
namespace detail {

// Partial slot of part k of a cut segment whose first CTA is c0 (grid of nc CTAs): the slot of
// c0's piece that starts the segment, then the slots of the pieces of CTAs c0 + k that
// continue it (consecutive).
__device__ __forceinline__ int part_slot(int nc, int c0, int k) { return k == 0 ? nc + c0 : c0 + k; }

// A merge in progress: max m (log2, warp-uniform), sum of weights l, this lane's weighted sums
// of its two columns, all relative to m.
struct MergeAcc {
  float m, l;
  float2 a;
};

// One warp's share of a merge: parts wr, wr + wpr, ... of the nparts partials of row r (of the
// M-tile), columns [col0, col0 + 64), two a lane. All of a round's loads (kBatch parts a lane,
// the round's LSEs one or two a lane) are issued before any is used, so a round is one L2 round
// trip; loads bypass L1 (other CTAs of the same grid may have written the slots). Returns l
// summed over the lanes.
template <int kBatch>
__device__ __forceinline__ MergeAcc merge_parts(const VerifyParams& p, int r, int col0, int c0, int nparts, int wr,
                                                int wpr) {
  static_assert(kBatch <= 64, "a lane holds at most two parts' LSEs");
  const int lane = threadIdx.x & 31;
  MergeAcc acc{-CUDART_INF_F, 0.f, make_float2(0.f, 0.f)};
  // bf16 pairs of this lane's 2 columns; + slot * 32 * 512 / 2 (< 2^31)
  const uint32_t* obase = reinterpret_cast<const uint32_t*>(static_cast<const __nv_bfloat16*>(p.part_o) +
                                                            r * T::kHeadDimV + col0 + lane * 2);
  for (int k0 = wr; k0 < nparts; k0 += wpr * kBatch) {
    uint32_t x[kBatch];  // this lane's bf16 pair of each part
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {  // past the last part: re-read it (weight 0 below)
      const int k = min(k0 + u * wpr, nparts - 1);
      x[u] = __ldcg(obase + part_slot(p.num_ctas, c0, k) * (T::kBlockM * T::kHeadDimV / 2));
    }
    // Lane j holds the LSEs of the round's parts j and j + 32.
    const int kl0 = k0 + lane * wpr, kl1 = k0 + (lane + 32) * wpr;
    const float v0 = lane < kBatch && kl0 < nparts
                         ? __ldcg(p.part_lse + part_slot(p.num_ctas, c0, kl0) * T::kBlockM + r)
                         : -CUDART_INF_F;
    const float v1 = lane + 32 < kBatch && kl1 < nparts
                         ? __ldcg(p.part_lse + part_slot(p.num_ctas, c0, kl1) * T::kBlockM + r)
                         : -CUDART_INF_F;
    float m_new = fmaxf(acc.m, fmaxf(v0, v1));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m_new = fmaxf(m_new, __shfl_xor_sync(0xffffffffu, m_new, o));
    if (m_new == -CUDART_INF_F) continue;  // every part so far empty
    // Weights; 0 for absent parts (the re-read ones above among them).
    const float so = exp2f(acc.m - m_new), sl0 = exp2f(v0 - m_new), sl1 = exp2f(v1 - m_new);
    acc.a.x *= so;
    acc.a.y *= so;
    acc.l = acc.l * so + sl0 + sl1;
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const float sn = __shfl_sync(0xffffffffu, u < 32 ? sl0 : sl1, u & 31);
      const float2 xu = unpack_bf16x2(x[u]);
      acc.a.x += sn * xu.x;
      acc.a.y += sn * xu.y;
    }
    acc.m = m_new;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) acc.l += __shfl_xor_sync(0xffffffffu, acc.l, o);
  return acc;
}

// Shared memory where the wpr warps of a row meet (one entry per warp of the CTA).
template <int kWarps>
struct MergeSmem {
  float2 a[kWarps][32];
  float m[kWarps], l[kWarps];
};

// The wpr warps of a row (warps w0 .. w0 + wpr - 1, this one is w0 + wr) merge their results:
// the first gets the row's, the others keep theirs. `sync` is a barrier over all warps that
// take part in the merge round (they all call this the same number of times).
template <int kWarps, class Sync>
__device__ __forceinline__ MergeAcc merge_warps(MergeAcc acc, MergeSmem<kWarps>& s, int warp, int wr, int wpr,
                                                Sync sync) {
  const int lane = threadIdx.x & 31;
  if (wpr == 1) return acc;
  s.a[warp][lane] = acc.a;
  if (lane == 0) {
    s.m[warp] = acc.m;
    s.l[warp] = acc.l;
  }
  sync();
  if (wr == 0) {
    float mx = -CUDART_INF_F;
    for (int i = 0; i < wpr; ++i) mx = fmaxf(mx, s.m[warp + i]);
    const float mref = mx == -CUDART_INF_F ? 0.f : mx;
    acc.a = make_float2(0.f, 0.f);
    acc.l = 0.f;
    for (int i = 0; i < wpr; ++i) {
      const float w = exp2f(s.m[warp + i] - mref);
      acc.a.x += w * s.a[warp + i][lane].x;
      acc.a.y += w * s.a[warp + i][lane].y;
      acc.l += w * s.l[warp + i];
    }
    acc.m = mref;
  }
  sync();  // s is rewritten by the next round
  return acc;
}

// Writes a merged row slice: o[t, h, col0 .. col0 + 64) and, for the first slice, lse[t, h].
__device__ __forceinline__ void merge_store(const VerifyParams& p, const MergeAcc& acc, int64_t t, int h, int col0) {
  const int lane = threadIdx.x & 31;
  const float inv = acc.l > 0.f ? 1.f / acc.l : 0.f;
  __nv_bfloat16* dst = static_cast<__nv_bfloat16*>(p.o) + t * p.o_stride_t + h * p.o_stride_h + col0;
  *reinterpret_cast<uint32_t*>(dst + lane * 2) = pack_bf16x2(acc.a.x * inv, acc.a.y * inv);
  if (lane == 0 && col0 == 0 && p.lse != nullptr)
    p.lse[t * p.lse_stride_t + h] = acc.l > 0.f ? (acc.m + __log2f(acc.l)) * 0.69314718055994530942f : -CUDART_INF_F;
}

// The fused merge, staged (verify_main.cuh): the segment's n parts are merged in ns slices
// (ns <= n, at most 4/3 of an n-th each); this CTA merges slice k, elements [e_lo, e_hi) of the
// segment's rows x 512 outputs (row-major like a partial slot; a multiple of 8 elements each
// side). Thread (warp j % 8, lane j / 8) owns part j: it waits until the
// part's flag reads `ready` (verify_common.cuh; warps poll the flags 32 at a time and post them
// in `seen`, zeros on entry and left zero), then issues one bulk copy of that range of the
// part into shared memory `stage` (part j at j * pitch, completing on mbarrier `bar`) and
// cp.async copies of the 16-byte-aligned run of its LSEs that covers the range's rows (after the
// ranges), so early parts travel while late ones are still being computed. Then warp w computes
// the weights of rows r_lo + w, r_lo + w + 8, ... of the range into `wbuf` [n][span] and the
// rows' 1/l and LSE; then every thread merges 8-element granules, PG threads a granule each
// summing every PG-th part, and the granule's first thread writes o. `phase` is bar's parity
// for this use (flipped here). All 256 math threads call this the same number of times; `sync`
// is their barrier.
template <bool kTrace, class Sync>
__device__ __forceinline__ void merge_staged(const VerifyParams& p, int c0, int n, int k, int ns, int rows, int row0,
                                             int qo_begin, unsigned long long ready, uint32_t* seen, uint8_t* stage,
                                             float* wbuf, uint32_t bar, uint32_t& phase, Sync sync) {
  constexpr int kMath = T::kMathThreads, kMathWarps = T::kMathWarps;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const MergeSlice sl = merge_slice(rows, k, ns);  // (traits.h: the granules, rows and staging layout)
  const int ng = sl.ng;
  if (ng == 0) return;  // (uniform: k and n are the same for the whole CTA)
  const int e_lo = sl.g_lo * 8, len = ng * 8, r_lo = sl.r_lo, span = sl.span, pg = sl.pg;
  const uint32_t bytes = static_cast<uint32_t>(len) * 2, pitch = static_cast<uint32_t>(sl.pitch);
  // LSE run of a part: rows [a0, a0 + lse_n) of its slot.
  const int a0 = sl.a0, lse_n = sl.lse_n;
  float* lse_s = reinterpret_cast<float*>(stage + n * pitch);
  const __nv_bfloat16* part = static_cast<const __nv_bfloat16*>(p.part_o);
  const unsigned long long* flags = p.sync + 1;
  // The stage was last read through the generic proxy (ldmatrix, or the last segment's
  // merge): order those reads before the copy engine's writes.
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  if (tid == 0) mbar_expect_tx(bar, bytes * n);
  // Warp w polls the flags of parts [32 w, 32 w + 32) (+ 256 ...; one lane each, one load a
  // round) and posts what it has seen in `seen` (a bit a part, release); the owners wait on
  // those bits in shared memory. So the grid's flags see one load per 32 parts a CTA rather
  // than one per part, and a round is one acquire's round trip (an acquire waits for its load
  // before the next one issues: one warp polling all words took one round trip a word).
  static_assert(kMaxFusedParts == 2 * kMath, "a lane owns at most two parts");
  const int words = (n + 31) / 32;
  bool all_seen = warp >= words;
  bool pending[2];
  int own[2];
#pragma unroll
  for (int u = 0; u < 2; ++u) {
    own[u] = u * kMath + warp + kMathWarps * lane;
    pending[u] = own[u] < n;
  }
  while (!all_seen || __any_sync(0xffffffffu, pending[0] || pending[1])) {
    if (!all_seen) {  // (uniform in the warp)
      all_seen = true;
      for (int wd = warp; wd < words; wd += kMathWarps) {
        const int j = wd * 32 + lane;
        const bool got = j >= n || (ld_shared_acquire(&seen[wd]) >> lane & 1u) ||
                         ld_acquire_u64(flags + part_slot(p.num_ctas, c0, j)) == ready;
        const uint32_t bits = __ballot_sync(0xffffffffu, got);
        if (lane == 0) st_shared_release(&seen[wd], bits);
        all_seen = all_seen && bits == 0xffffffffu;
      }
    }
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      if (pending[u] && (ld_shared_acquire(&seen[own[u] >> 5]) >> (own[u] & 31) & 1u)) {
        const int j = own[u], slot = part_slot(p.num_ctas, c0, j);
        fence_proxy_async_global();  // the acquire before the copy engine's reads
        bulk_copy_g2s_hint(smem_u32(stage) + j * pitch, part + int64_t(slot) * T::kBlockM * T::kHeadDimV + e_lo,
                           bytes, bar, l2_evict_last());  // kept in L2 for the next call (l2_evict_last)
        for (int i = 0; i < lse_n; i += 4)
          cp_async_cg16(smem_u32(lse_s + j * lse_n + i), p.part_lse + slot * T::kBlockM + a0 + i);
        pending[u] = false;
      }
    }
  }
  cp_async_commit();
  cp_async_wait<0>();
  sync();  // every part's LSEs in shared memory
  if (tid == 0) trace_point<kTrace>(p, blockIdx.x, 22);  // every part seen stored
  // Weights: row rr of the range, part j at wbuf[j * span + rr]; 1/l and LSE after them.
  float* inv_l = wbuf + n * span;
  float* lse_row = inv_l + span;
  constexpr int kLsePerLane = kMaxFusedParts / 32;
  for (int rr = warp; rr < span; rr += kMathWarps) {
    float v[kLsePerLane];
#pragma unroll
    for (int i = 0; i < kLsePerLane; ++i) {
      const int j = lane + 32 * i;
      v[i] = j < n ? lse_s[j * lse_n + r_lo - a0 + rr] : -CUDART_INF_F;
    }
    float m = -CUDART_INF_F;
#pragma unroll
    for (int i = 0; i < kLsePerLane; ++i) m = fmaxf(m, v[i]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    const float mref = m == -CUDART_INF_F ? 0.f : m;
    float l = 0.f;
#pragma unroll
    for (int i = 0; i < kLsePerLane; ++i) {
      const int j = lane + 32 * i;
      const float w = exp2f(v[i] - mref);  // 0 past n
      if (j < n) wbuf[j * span + rr] = w;
      l += w;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) l += __shfl_xor_sync(0xffffffffu, l, o);
    if (lane == 0) {
      inv_l[rr] = l > 0.f ? 1.f / l : 0.f;
      lse_row[rr] = l > 0.f ? (mref + __log2f(l)) * 0.69314718055994530942f : -CUDART_INF_F;
    }
  }
  sync();  // weights ready
  mbar_wait(bar, phase);
  phase ^= 1u;
  if (tid == 0) trace_point<kTrace>(p, blockIdx.x, 23);  // every part's range landed
  // Merge: pg threads a granule, thread sub of a granule summing parts sub, sub + pg, ...
  const int sub = tid & (pg - 1);
  if (tid == 0) trace_point<kTrace>(p, blockIdx.x, 25);  // granule loop entered
  for (int base = 0; base < ng; base += kMath / pg) {  // same trip count in every lane (shuffles)
    const int g = base + tid / pg;
    const bool live = g < ng;
    const int e = (live ? g : 0) * 8;  // in the range
    const int rr = (e_lo + e) / T::kHeadDimV - r_lo;
    float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    auto add = [&](float w, const uint4& v) {
      const uint32_t vw[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float2 f = unpack_bf16x2(vw[q]);
        acc[2 * q] += w * f.x;
        acc[2 * q + 1] += w * f.y;
      }
    };
    if (live) {
      // Four parts a step, their shared-memory loads issued together (one latency, not four).
      int j = sub;
      for (; j + 3 * pg < n; j += 4 * pg) {
        float w[4];
        uint4 v[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          w[u] = wbuf[(j + u * pg) * span + rr];
          v[u] = *reinterpret_cast<const uint4*>(stage + (j + u * pg) * pitch + e * 2);
        }
#pragma unroll
        for (int u = 0; u < 4; ++u) add(w[u], v[u]);
      }
      for (; j < n; j += pg) add(wbuf[j * span + rr], *reinterpret_cast<const uint4*>(stage + j * pitch + e * 2));
    }
    if (tid == 0 && base == 0) trace_point<kTrace>(p, blockIdx.x, 26);  // thread 0's parts summed
#pragma unroll
    for (int o = 1; o < 32; o <<= 1)
      if (o < pg)
#pragma unroll
        for (int q = 0; q < 8; ++q) acc[q] += __shfl_xor_sync(0xffffffffu, acc[q], o);
    if (tid == 0 && base == 0) trace_point<kTrace>(p, blockIdx.x, 27);  // and reduced over its group
    if (live && sub == 0) {
      const float inv = inv_l[rr];
      const int qr = row0 + (e_lo + e) / T::kHeadDimV, col = (e_lo + e) % T::kHeadDimV;
      __nv_bfloat16* dst = static_cast<__nv_bfloat16*>(p.o) + int64_t(qo_begin + (qr >> p.head_shift)) * p.o_stride_t +
                           int64_t(qr & (p.num_heads - 1)) * p.o_stride_h + col;
      uint32_t packed[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) packed[q] = pack_bf16x2(acc[2 * q] * inv, acc[2 * q + 1] * inv);
      if (p.o_vec16) {
        *reinterpret_cast<uint4*>(dst) = make_uint4(packed[0], packed[1], packed[2], packed[3]);
      } else {
#pragma unroll
        for (int q = 0; q < 4; ++q) reinterpret_cast<uint32_t*>(dst)[q] = packed[q];
      }
      if (col == 0 && p.lse != nullptr)  // the range holds this row's first element
        p.lse[int64_t(qo_begin + (qr >> p.head_shift)) * p.lse_stride_t + (qr & (p.num_heads - 1))] = lse_row[rr];
    }
  }
  if (tid == 0) trace_point<kTrace>(p, blockIdx.x, 24);  // thread 0's granules written
  if (tid < kMaxFusedParts / 32) seen[tid] = 0;  // for the next segment (read before the sync above)
  sync();  // stage, wbuf and seen are reused by the next segment
}

}  // namespace detail
}  // namespace kdtree_mla
