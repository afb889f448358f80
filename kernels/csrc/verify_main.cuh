// MLA target-verify attention, main kernel: 8 math warps + kLoaders load warps per CTA
// (the launcher's variants use 2).
//
// The load warps do all global-to-shared copies, running up to kStages elements ahead of the
// math warps through a ring of shared-memory stages guarded by mbarriers:
//   full[s]  completes when stage s holds its element (bulk-copy transaction count),
//   empty[s] completes when all 8 math warps are done reading stage s.
// The element stream of a piece (one M-tile over a range of KV blocks) is its Q tile (32 rows
// x 576, copied into a stage like a KV block) followed by its KV blocks. All roles walk the
// same pieces from the same schedule, so they agree on every element's stage and phase. Each
// row is one 1152-byte cp.async.bulk; load warp lw copies rows [lw * 32 / kLoaders, ...) of
// every element, one row a lane; the pool indices of prefix tokens reach a shared ring by
// cp.async kIdxAhead blocks earlier (each lane fetches its own row's). KV rows are copied with
// an evict-first L2 policy, so that the call's stream does not push out what is read again
// (B=1 91k -2.8 us back to back, batches of 64 and 256 requests 5-6% with L2 flushed;
// research/kernel-history.md). The fused merge reads the partials with an evict-last policy
// (verify_merge.cuh), so they stay in L2 between calls instead of being written back to DRAM
// when other kernels evict them (-0.9 to -1.7 us a B = 1 call with L2 flushed).
// Why separate load warps: when every warp issued its share of 16-byte cp.async copies, the
// math warps stalled behind their own copy instructions and loads and math did not overlap.
// Why two: a bulk copy takes uniform operands, so a warp's 32 per-lane copies issue one at a
// time (~1 us a stage), which left the math warps waiting for data at B=8 (a trace and Nsight
// Compute; research/kernel-history.md has the measurements).
//
// Math warps: warp w takes row half mi = w & 1 and k-group kg = w >> 1 of S = Q K^T over the
// block's 32 tokens (its Q fragments, 16 x 144, stay in registers for the piece); the four
// k-group partials meet in shared memory; the softmax (8 threads a row, 4 columns each) keeps a
// lazy running max: a row's max is raised, and O rescaled, only when a logit exceeds it by
// more than kRescaleLog2, decided for the whole CTA by one barrier reduction, so the common
// block has no shuffles and no rescale, and the row sum is reduced once at the end. Warp w
// then accumulates output columns [64 w, 64 w + 64) of P V (V = the first 512 columns of the
// same stage). The kPipe variant computes S of block i+1 before the softmax of block i
// (double-buffered partials). The math warps sync on named barrier 1; the epilogue stages each
// warp's slice through the (then idle) S-partial buffer, not the stages (they may already hold
// the next piece). 10 warps fit 168 registers a thread (a scheduler holds at most 3); a 17th
// warp beside 16 math warps would leave 96 (the scheduler holding 5 warps has 16K registers),
// which is why there are 8 math warps.
// A fused B = 1 call takes its CTA's schedule plan (verify_common.cuh) when the plan's key is
// the call's, and keeps one otherwise (written by thread 0 as the CTA ends).
// With p.fused (a cooperative grid of at most one CTA an SM) the math warps then merge the
// segments their CTA cut together with the segments' other CTAs (end of the kernel); else
// the combine kernel does, after this grid. A call whose only cut segment has many parts
// hands its merge's slices out by ticket (ticketed, below), so the last CTAs need not merge.
#pragma once

#include "verify_merge.cuh"

namespace kdtree_mla {
namespace detail {

__device__ __forceinline__ void math_sync() { asm volatile("bar.sync 1, %0;\n" ::"n"(T::kMathThreads) : "memory"); }
__device__ __forceinline__ bool math_sync_or(bool x) {
  uint32_t r;
  asm volatile(
      "{\n .reg .pred p, q;\n setp.ne.u32 p, %1, 0;\n bar.red.or.pred q, 1, %2, p;\n selp.u32 %0, 1, 0, q;\n}\n"
      : "=r"(r)
      : "r"(static_cast<uint32_t>(x)), "n"(T::kMathThreads)
      : "memory");
  return r != 0;
}

// Walks the pieces of one CTA's unit range (the same walk in both roles).
struct PieceWalk {
  Request req;
  int b, mt, seg_units, unit_lo, seg_start, range_hi, q;
  // Geometry of the current piece.
  int nb, row0, tok_lo, tok_hi, unit_hi;

  __device__ __forceinline__ void describe() {
    unit_hi = min(seg_units, range_hi - seg_start);
    const int blk_lo = unit_lo * q;
    const int blk_hi = min(unit_hi * q, req.nblk);
    nb = blk_hi - blk_lo;
    row0 = mt * T::kBlockM;
    tok_lo = blk_lo * T::kBlockN;
    tok_hi = min(blk_hi * T::kBlockN, req.kv_len);
  }
  // Moves to the next piece; false when the range is done.
  __device__ __forceinline__ bool next(const VerifyParams& p) {
    if (seg_start + seg_units >= range_hi) return false;
    seg_start += seg_units;
    unit_lo = 0;
    if (++mt >= req.mtiles) {
      mt = 0;
      do {
        ++b;
        req = load_request(p, b);
      } while (req.nblk == 0);
      seg_units = (req.nblk + q - 1) / q;
    }
    describe();
    return true;
  }
};

// Merge tickets: when a piece is the call's only segment, cut into n >= kTicketMinParts parts
// (B = 1 with at most 32 rows, from ~5.7k on 132 SMs), its merge is done in n - kTicketSkip
// slices, taken by the first CTAs whose last block lands (merge_sync.cuh merge_ticket):
// the last ones, most often on the slow SMs (research/kernel-history.md), publish
// and leave. A slice is computed the same way whoever takes it, so the output does not depend
// on the order. Below kTicketMinParts parts the larger slices cost more than the last CTAs'
// merge.
__device__ __forceinline__ bool ticketed(const PieceWalk& w, const Schedule& sch, int n) {
  return w.seg_start == 0 && w.seg_units == sch.total_units && !(w.unit_lo == 0 && w.unit_hi == w.seg_units) &&
         n >= T::kTicketMinParts;
}

// Rows of a piece's Q tile that are copied: the request's rows from row0, at most a tile.
// The tile's other rows keep whatever the stage held (possibly not finite): their logits are
// set to -inf before any use, so their P and O are 0 and no other row reads them. Filling them
// with copies of one row instead made every CTA read that row up to 25 times at kernel start
// (B=1 D=1: 24 of 32 rows), and those reads of the same lines by every CTA took the first Q tile
// ~8 us to land.
__device__ __forceinline__ int q_tile_rows(const Request& req, int row0) {
  return min(req.rows - row0, T::kBlockM);
}

// Row r of request req's Q tile rows ((token, head) row r of its draft tokens).
__device__ __forceinline__ const __nv_bfloat16* q_row_src(const VerifyParams& p, const Request& req, int r) {
  return static_cast<const __nv_bfloat16*>(p.q) + (req.qo_begin + (r >> p.head_shift)) * p.q_stride_t +
         (r & (p.num_heads - 1)) * p.q_stride_h;
}

// The main kernel's dynamic shared memory: the stage ring (KV blocks and Q tiles), the S
// partials (two buffers when pipelined), the P tile, the row statistics and the index ring.
template <int kStages, bool kPipe>
struct MainSmem {
  static constexpr int kReds = kPipe ? 2 : 1;
  uint8_t* base;
  float* red_s;
  float* red2_s;
  __nv_bfloat16* p_s;
  float* alpha_s;
  float* inv_s;
  uint8_t* idx_s;
  __device__ __forceinline__ explicit MainSmem(uint8_t* smem)
      : base(smem),
        red_s(reinterpret_cast<float*>(smem + kStages * T::kStageBytes)),
        red2_s(red_s + (kPipe ? T::kRedBytes / 4 : 0)),
        p_s(reinterpret_cast<__nv_bfloat16*>(smem + kStages * T::kStageBytes + kReds * T::kRedBytes)),
        alpha_s(reinterpret_cast<float*>(smem + kStages * T::kStageBytes + kReds * T::kRedBytes + T::kPBytes)),
        inv_s(alpha_s + T::kBlockM),
        idx_s(smem + kStages * T::kStageBytes + kReds * T::kRedBytes + T::kPBytes + T::kRowStatBytes) {}
  __device__ __forceinline__ uint32_t stage_addr(int e) const {
    return smem_u32(base) + (e % kStages) * T::kStageBytes;
  }
};

// Fused merge: a cut segment this CTA stored a partial of (at most two a CTA).
struct Cut {
  int c0, n;       // the segment's first CTA and its number of CTAs (parts)
  int qo_begin;    // its request's first draft token
  int row0, rows;  // its M-tile's first row and valid rows (<= 32)
  int k, ns;       // the slice of the merge this CTA takes (k >= ns: none) of ns
};

// The main kernel's static shared memory.
template <int kThreads, int kStages>
struct MainShared {
  uint64_t full_bar[kStages];   // a stage holds its element (bulk-copy transaction count)
  uint64_t empty_bar[kStages];  // all math warps are done reading a stage
  uint64_t merge_bar;           // fused merge (staged): its parts' copies
  unsigned long long merge_ready;  // the flag value of this call's stored partials
  int warp_sums[2 * kThreads / 32];
  int start_info[2];
  Request start_req;
  uint8_t mask_s[4 * 16];
  PieceWalk math_walk;  // the math warps' walk (kept out of their registers)
  int math_more;
  Cut cuts[2];
  int num_cuts;
  // Schedule plans (schedule.cuh): what thread 0 keeps for the next call as the CTA ends.
  Plan plan_s;
  Request plan_req_s;
  int plan_pending;
  uint32_t merge_seen[kMaxFusedParts / 32];  // parts seen stored (merge_staged)
};

// ------------------------------------------------------------------------------------------
// The CTA's start: its units of the schedule and the first piece of its walk
// ------------------------------------------------------------------------------------------

// Works out (or takes from its plan) the schedule and this CTA's first piece. `ready` (thread 0
// of a fused call): in, the count of CTAs ended that it read before; out, the flag value of this
// call's partials (also in sh.merge_ready, for the merge). False when the CTA has no work (it
// has then counted itself ended and kept its plan).
template <int kThreads, int kStages, bool kTrace>
__device__ __forceinline__ bool cta_start(const VerifyParams& p, MainShared<kThreads, kStages>& sh, float* red_s,
                                          unsigned long long& ready, Schedule& sch, PieceWalk& w) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int cta = blockIdx.x;
  // Outcome: the units [range_lo, range_hi) of this CTA and the request sb holding range_lo
  // (geometry sreq, first unit sunit).
  Request sreq;
  int sb, sunit;
  // Schedule plans (schedule.cuh): a fused B = 1 call takes the one this CTA kept, when its key
  // is this call's; else it works the schedule out and keeps it.
  const bool plannable = p.batch == 1 && p.fused;
  bool planned = false;
  Plan plan;
  if (p.batch <= 32) {
    // Each warp alone, no CTA-wide barrier.
    Request mine;
    int excl = 0;
    if (plannable) {
      mine = load_request<true>(p, 0);  // (every lane: the same words)
      planned = plan_take(p, cta, mine, &plan);
    }
    if (planned)
      sch = plan.sch;
    else
      sch = warp_schedule<kTrace>(p, &mine, &excl);
    if (tid == 0) trace_point<kTrace>(p, cta, 12);
    const int q = sch.blocks_per_unit, lo = cta * sch.units_per_cta;
    if (planned) {
      if (lo >= sch.total_units) {  // no work for this CTA
        if (tid == 0) merge_cta_ended(p.sync);
        return false;
      }
      sb = 0;
      sreq = mine;
      sunit = 0;
    } else {
      const int incl = excl + (lane < p.batch ? units_of(mine, q) : 0);
      if (!p.fused && cta == 0 && warp == 0) {  // the combine kernel's tables
        if (lane < p.batch) {
          p.sched[3 + lane] = incl;
          store_tokinfo(p, mine, excl, q);
        }
        if (lane == 0) {
          p.sched[0] = sch.units_per_cta;
          p.sched[1] = q;
          p.sched[2] = 0;
        }
      }
      if (lo >= sch.total_units) {  // no work for this CTA
        if (plannable) {  // (every warp reads the plan before any thread rewrites it)
          __syncthreads();
          if (tid == 0) plan_keep(p, cta, mine, Plan{sch, 0, 0, 0, 0});
        }
        if (p.fused && tid == 0) merge_cta_ended(p.sync);
        return false;
      }
      sb = __ffs(__ballot_sync(0xffffffffu, excl <= lo && lo < incl)) - 1;
      sreq = shfl_request(mine, sb);
      sunit = __shfl_sync(0xffffffffu, excl, sb);
    }
  } else {
    int* scan = reinterpret_cast<int*>(red_s);
    Request mine;  // request tid's geometry (tid < B)
    sch = make_schedule<kThreads>(p, scan, sh.warp_sums, &mine);
    if (tid == 0) trace_point<kTrace>(p, cta, 12);
    const int q = sch.blocks_per_unit, lo = cta * sch.units_per_cta;
    if (!p.fused && cta == 0) {  // the combine kernel's tables
      for (int i = tid; i <= p.batch; i += kThreads) p.sched[2 + i] = scan[i];
      if (tid == 0) {
        p.sched[0] = sch.units_per_cta;
        p.sched[1] = q;
      }
      for (int b = tid; b < p.batch; b += kThreads) store_tokinfo(p, b == tid ? mine : load_request(p, b), scan[b], q);
    }
    if (lo >= sch.total_units) {  // no work for this CTA
      if (p.fused && tid == 0) merge_cta_ended(p.sync);
      return false;
    }
    // The request holding unit lo (scan[b] <= lo < scan[b + 1]): its own thread publishes the
    // geometry it already has; past the first kThreads requests, thread 0 searches.
    const int owned = min(p.batch, kThreads);
    if (tid < owned && scan[tid] <= lo && lo < scan[tid + 1]) {
      sh.start_req = mine;
      sh.start_info[0] = tid;
      sh.start_info[1] = scan[tid];
    } else if (tid == 0 && scan[owned] <= lo) {
      int l = owned, h = p.batch - 1;
      while (l < h) {
        const int mid = (l + h + 1) >> 1;
        if (scan[mid] <= lo) l = mid; else h = mid - 1;
      }
      sh.start_req = load_request(p, l);
      sh.start_info[0] = l;
      sh.start_info[1] = scan[l];
    }
    __syncthreads();  // last CTA-wide barrier: the roles split below
    sreq = sh.start_req;
    sb = sh.start_info[0];
    sunit = sh.start_info[1];
  }
  if (p.fused && tid == 0) {  // the flag value of this call's partials
    ready = call_number(ready, p) + 1;
    sh.merge_ready = ready;
  }
  const int range_lo = cta * sch.units_per_cta;
  const int q = sch.blocks_per_unit;
  if (tid == 0) trace_point<kTrace>(p, cta, 2);
  w.b = sb;
  w.q = q;
  w.range_hi = min(range_lo + sch.units_per_cta, sch.total_units);
  w.req = sreq;
  if (planned) {
    w.seg_units = plan.seg_units;
    w.mt = plan.mt;
    w.unit_lo = plan.unit_lo;
    w.seg_start = plan.seg_start;
  } else {
    w.seg_units = (w.req.nblk + q - 1) / q;
    const int off = range_lo - sunit;
    w.mt = off / w.seg_units;
    w.unit_lo = off - w.mt * w.seg_units;
    w.seg_start = sunit + w.mt * w.seg_units;
    if (plannable && tid == 0) {  // kept as the CTA ends, when no warp of it reads the plan any more
      sh.plan_s = Plan{sch, w.mt, w.unit_lo, w.seg_start, w.seg_units};
      sh.plan_req_s = sreq;
      sh.plan_pending = 1;
    }
  }
  w.describe();
  return true;
}

// ------------------------------------------------------------------------------------------
// Load warps
// ------------------------------------------------------------------------------------------

// The load warps' walk: every element of every piece copied into the stage ring (the first
// piece's Q tile excepted: the math warps copy it). Load warp lw copies rows [lw * kLoadRows,
// (lw + 1) * kLoadRows) of every element; its lane `lane` takes row `row`. Load warp 0 posts the
// element's whole byte count.
template <int kStages, int kMode, int kLoaders, int kKv, int kThreads>
__device__ __forceinline__ void load_warps(const VerifyParams& p, PieceWalk& w, MainShared<kThreads, kStages>& sh,
                                           const uint8_t* idx_s, uint32_t kv_base) {
  constexpr bool kFp8 = kKv != kKvBf16;
  constexpr bool kCopy = !(kMode & 4), kTrace = (kMode & kModeTrace) != 0;
  constexpr uint32_t kRowBytes = T::kHeadDim * 2;                           // one KV or Q row
  constexpr uint32_t kPoolRowBytes = kFp8 ? T::kHeadDim : T::kHeadDim * 2;  // one pool row
  constexpr int kLoadRows = T::kBlockN / kLoaders;  // rows a load warp copies per element
  static_assert(T::kBlockN % kLoaders == 0 && kLoaders >= 1, "load warps split a block's rows");
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, cta = blockIdx.x;
  const bool active = lane < kLoadRows;  // idle lanes mirror an active lane's row (no copy)
  const int lw = warp - T::kMathWarps, row = lw * kLoadRows + (active ? lane : 0);
  const bool idx64 = p.index64 & kKvIndices64;
  const uint32_t idx_base = smem_u32(idx_s);
  const uint8_t* kbuf = static_cast<const uint8_t*>(p.k_buf);  // row stride: k_buf_stride elements
  const __nv_bfloat16* kext = static_cast<const __nv_bfloat16*>(p.k_ext);
  int elem = 0;  // running element count: stage elem % kStages, phase (elem / kStages) & 1
  // Copies one element (its first `rows` rows; `src` is this lane's row) into the next stage;
  // `stream`: KV rows, which the call reads from DRAM once (other M-tiles' CTAs may read them
  // again soon after), copied with the evict-first L2 policy; the Q tile, which every CTA of
  // the request reads, keeps the normal one. (Evict-first KV was faster than the normal
  // policy for requests of several M-tiles too.)
  // `bytes`: this lane's row (kRowBytes, or kPoolRowBytes for a pool row); `total`: the element's.
  auto put = [&](const void* src, int rows, bool stream, uint32_t bytes, uint32_t total) {
    const int stage = elem % kStages;
    mbar_wait(smem_u32(&sh.empty_bar[stage]), ((elem / kStages) & 1) ^ 1);
    const uint32_t full = smem_u32(&sh.full_bar[stage]);
    const uint32_t dst = kv_base + stage * T::kStageBytes;
    if constexpr (!kCopy) {
      if (lw == 0 && lane == 0) mbar_arrive(full);
    } else {
      if (lw == 0 && lane == 0) mbar_expect_tx(full, total);
      __syncwarp();
      if (active && row < rows) {
        if (stream)
          bulk_copy_g2s_hint(dst + row * T::kKvRowBytes, src, bytes, full, l2_evict_first());
        else
          bulk_copy_g2s(dst + row * T::kKvRowBytes, src, bytes, full);
      }
    }
    ++elem;
  };
  do {
    const Request& req = w.req;
    auto issue_idx = [&](int blk) {
      if (blk < w.nb && active) {
        const int k = w.tok_lo + blk * T::kBlockN + row;
        if (k < w.tok_hi && k < req.prefix) {
          const uint32_t dst = idx_base + ((blk % T::kIdxRingBlocks) * T::kBlockN + row) * 8;
          if (idx64)
            cp_async_small<8>(dst, static_cast<const int64_t*>(p.kv_indices) + req.kv_begin + k);
          else
            cp_async_small<4>(dst, static_cast<const int32_t*>(p.kv_indices) + req.kv_begin + k);
        }
      }
      cp_async_commit();
    };
    if (kTrace && lw == 0 && lane == 0 && elem == 0) trace_point<kTrace>(p, cta, 30);
#pragma unroll
    for (int a = 0; a < T::kIdxAhead; ++a) issue_idx(a);
    if (kTrace && lw == 0 && lane == 0 && elem == 0) trace_point<kTrace>(p, cta, 10);
    if (elem == 0) {
      ++elem;  // the math warps copy the first piece's Q tile (element 0)
    } else {  // the Q tile: the piece's own rows only (q_tile_rows)
      const int r = w.row0 + row;
      const int qrows = q_tile_rows(req, w.row0);
      put(q_row_src(p, req, r), qrows, false, kRowBytes, qrows * kRowBytes);
    }
    // Source of this lane's row in block blk (padding rows past the piece copy the request's
    // first draft key: any valid row does, their logits are masked).
    auto row_src = [&](int blk) -> const void* {
      const int k = w.tok_lo + blk * T::kBlockN + row;
      if (k >= w.tok_hi) return kext + req.qo_begin * p.k_ext_stride;
      if (k < req.prefix) {
        const uint8_t* slot = idx_s + ((blk % T::kIdxRingBlocks) * T::kBlockN + row) * 8;
        const int64_t idx = idx64 ? *reinterpret_cast<const int64_t*>(slot)
                                  : static_cast<int64_t>(*reinterpret_cast<const int32_t*>(slot));
        return kbuf + idx * p.k_buf_stride * (kFp8 ? 1 : 2);
      }
      return kext + (req.qo_begin + (k - req.prefix)) * p.k_ext_stride;
    };
    for (int blk = 0; blk < w.nb; ++blk) {
      cp_async_wait<T::kIdxAhead - 1>();  // this lane's index of block blk landed
      if (kTrace && lw == 0 && lane == 0 && elem == 1) trace_point<kTrace>(p, cta, 4);
      uint32_t bytes = kRowBytes, total = T::kBlockN * kRowBytes;
      if constexpr (kFp8) {  // the block's first npool rows are pool rows (fp8)
        const int k0 = w.tok_lo + blk * T::kBlockN;
        const int npool = min(max(min(req.prefix, w.tok_hi) - k0, 0), T::kBlockN);
        total -= npool * (kRowBytes - kPoolRowBytes);
        if (row < npool) bytes = kPoolRowBytes;
      }
      put(row_src(blk), T::kBlockN, true, bytes, total);
      issue_idx(blk + T::kIdxAhead);  // (a lane reads and refills only its own row's slot)
    }
    cp_async_wait<0>();
  } while (w.next(p));
  if (lw == 0 && lane == 0) trace_point<kTrace>(p, cta, 5);
}

// ------------------------------------------------------------------------------------------
// Math warps: one KV block of a piece (S, softmax, P V), then the piece's epilogue
// ------------------------------------------------------------------------------------------

// Where a math thread sits: its warp's row half (mi) and k-group (kg) of S, its fragment lanes
// (g, t4; ldmatrix: mat, r8), and its softmax row and first column (8 threads a row).
struct MathLane {
  int tid, warp, lane, mi, kg, g, t4, mat, r8, sm_row, sm_col;
};
__device__ __forceinline__ MathLane math_lane() {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  return MathLane{tid,      warp,     lane,         warp & 1,          warp >> 1,
                  lane >> 2, lane & 3, lane >> 3, lane & 7, tid / T::kSmTpr, (tid % T::kSmTpr) * T::kSmCols};
}

// fp8 pools: the descales (a device scalar is read after griddepcontrol.wait) and the log2-unit
// scale of a pool column's logit.
struct PoolScales {
  float k_desc, v_desc, scale_pool;
};

// fp8 pools: widens the first npool rows of a stage (fp8 in each row's first 576 bytes) to bf16
// in place. Warp w takes rows [4w, 4w + 4). A row's 16-byte fp8 piece i becomes its bf16 bytes
// [32 i, 32 i + 32), which overlap only its fp8 pieces 2i and 2i + 1: so pieces 35..4 are
// widened first (one a lane, all read before any is written), then pieces 3..0 of the four rows
// together. Two registers of fp8 a lane (a version that read all 9 pieces a lane first spilled on
// sm_120). The fence orders these generic-proxy writes before the next bulk copy into the stage.
template <int kStages, int kKv>
__device__ __forceinline__ void fp8_widen(const MathLane& L, uint32_t stage, int npool) {
  constexpr int kPieces = T::kHeadDim / 16;  // 36 a row
  static_assert(T::kBlockN == 4 * T::kMathWarps && kPieces == 32 + 4, "4 rows a warp, 36 pieces a row");
  const int warp = L.warp, lane = L.lane;
  const int nrows = min(npool - warp * 4, 4);
  if (nrows <= 0) return;  // (uniform in the warp)
  const uint32_t rows = stage + warp * 4 * T::kKvRowBytes;
  auto widen = [&](uint32_t row, int piece, bool live) {
    uint32_t x0 = 0, x1 = 0, x2 = 0, x3 = 0;
    if (live)
      asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                   : "=r"(x0), "=r"(x1), "=r"(x2), "=r"(x3)
                   : "r"(row + piece * 16)
                   : "memory");
    __syncwarp();
    if (live) {
      const uint4 lo = fp8x8_to_bf16x8<kKv>(make_uint2(x0, x1));
      const uint4 hi = fp8x8_to_bf16x8<kKv>(make_uint2(x2, x3));
      asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(row + piece * 32), "r"(lo.x), "r"(lo.y),
                   "r"(lo.z), "r"(lo.w)
                   : "memory");
      asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(row + piece * 32 + 16), "r"(hi.x),
                   "r"(hi.y), "r"(hi.z), "r"(hi.w)
                   : "memory");
    }
    __syncwarp();
  };
  if constexpr (kStages >= 3) {
    // The H200's variant: a warp's four rows in one round, all 36 x 4 pieces read before any is
    // written (pieces 35..4 of each row a lane, pieces 3..0 of the four rows by lanes 0..15: a
    // row's widened pieces 4..35 cover only its fp8 pieces 8..35, its pieces 0..3 only fp8
    // pieces 0..7, all read in the round), so one load latency instead of five in a row.
    if (nrows == 4) {
      uint32_t x[5][4];
#pragma unroll
      for (int r = 0; r < 5; ++r) {
        const uint32_t a = r < 4 ? rows + r * T::kKvRowBytes + (kPieces - 1 - lane) * 16
                                 : rows + (lane >> 2) * T::kKvRowBytes + (3 - (lane & 3)) * 16;
        x[r][0] = x[r][1] = x[r][2] = x[r][3] = 0u;
        if (r < 4 || lane < 16)
          asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                       : "=r"(x[r][0]), "=r"(x[r][1]), "=r"(x[r][2]), "=r"(x[r][3])
                       : "r"(a)
                       : "memory");
      }
      __syncwarp();
#pragma unroll
      for (int r = 0; r < 5; ++r) {
        const uint32_t a = r < 4 ? rows + r * T::kKvRowBytes + (kPieces - 1 - lane) * 32
                                 : rows + (lane >> 2) * T::kKvRowBytes + (3 - (lane & 3)) * 32;
        if (r < 4 || lane < 16) {
          const uint4 lo = fp8x8_to_bf16x8<kKv>(make_uint2(x[r][0], x[r][1]));
          const uint4 hi = fp8x8_to_bf16x8<kKv>(make_uint2(x[r][2], x[r][3]));
          asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(a), "r"(lo.x), "r"(lo.y), "r"(lo.z),
                       "r"(lo.w)
                       : "memory");
          asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(a + 16), "r"(hi.x), "r"(hi.y),
                       "r"(hi.z), "r"(hi.w)
                       : "memory");
        }
      }
      __syncwarp();
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
      return;
    }
  }
  for (int r = 0; r < nrows; ++r) widen(rows + r * T::kKvRowBytes, kPieces - 1 - lane, true);
  widen(rows + (lane >> 2) * T::kKvRowBytes, 3 - (lane & 3), lane < 4 * nrows);
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// S = Q K^T of one block, this warp's share: rows mi*16.. x the block's 32 tokens over the 144
// dims of k-group kg (Q fragments qf, K from the stage), written to the k-group's S partial.
__device__ __forceinline__ void compute_s(const MathLane& L, const uint32_t (&qf)[T::kKSteps][4], uint32_t stage,
                                          float* red_buf) {
  float sa[2][2][4];  // [token half][n8 tile]
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int ni = 0; ni < 2; ++ni)
#pragma unroll
      for (int c = 0; c < 4; ++c) sa[h][ni][c] = 0.f;
  const uint32_t kaddr = stage + ((L.mat >> 1) * 8 + L.r8) * T::kKvRowBytes + (L.kg * T::kKSteps * 16 + (L.mat & 1) * 8) * 2;
#pragma unroll
  for (int ks = 0; ks < T::kKSteps; ++ks) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      uint32_t kb[4];
      ldmatrix_x4(kb, kaddr + h * 16 * T::kKvRowBytes + ks * 32);
      mma_bf16(sa[h][0], qf[ks], kb[0], kb[1]);
      mma_bf16(sa[h][1], qf[ks], kb[2], kb[3]);
    }
  }
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int ni = 0; ni < 2; ++ni)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = L.mi * 16 + L.g + half * 8;
        const int c = h * 16 + ni * 8 + L.t4 * 2;
        *reinterpret_cast<float2*>(&red_buf[(L.kg * T::kBlockM + r) * T::kRedRowFloats + c]) =
            make_float2(sa[h][ni][half * 2], sa[h][ni][half * 2 + 1]);
      }
}

// The columns of the piece a block belongs to: its first and end token, and how many of its
// blocks hold prefix columns only (nothing to mask).
struct PieceCols {
  int tok_lo, tok_hi, plain_blocks;
};

// This thread's softmax row of the piece: the lazy running max, its part of the row sum, the
// scaled logits of the current block (the slow path reuses them), and where its mask bits are.
struct SoftmaxRow {
  float m_run, l_part;
  float v[T::kSmCols];
  int q_tok, mask_row;
  bool row_ok;
};

// Softmax of one block: sums the k-group partials of this thread's 4 logits, scales and masks
// them, writes P (bf16) against the running max, and in the rare block where a logit exceeds the
// max by more than kRescaleLog2 (decided for the whole CTA by one barrier reduction) raises the
// max, rewrites P and rescales O. Ends on a math-warp barrier: P complete.
template <int kKv>
__device__ __forceinline__ void softmax_block(const VerifyParams& p, const MathLane& L, const Request& req,
                                              const PieceCols& pc, int blk, const float* red_buf,
                                              __nv_bfloat16* p_s, float* alpha_s, const uint8_t* mask_s,
                                              const PoolScales& ps, SoftmaxRow& sr, float (&acc)[2][8][4]) {
  constexpr bool kFp8 = kKv != kKvBf16;
  const int sm_row = L.sm_row, sm_col = L.sm_col;
  float4 x = *reinterpret_cast<const float4*>(&red_buf[sm_row * T::kRedRowFloats + sm_col]);
#pragma unroll
  for (int k = 1; k < T::kKGroups; ++k) {
    const float4 y = *reinterpret_cast<const float4*>(&red_buf[(k * T::kBlockM + sm_row) * T::kRedRowFloats + sm_col]);
    x.x += y.x;
    x.y += y.y;
    x.z += y.z;
    x.w += y.w;
  }
  // fp8 pools: a block of pool columns only takes the descales uniformly, others per column.
  const bool pool_blk = kFp8 && blk < pc.plain_blocks;
  const float sc = pool_blk ? ps.scale_pool : p.scale_log2;
  float vs[T::kSmCols];  // P's factor a column: v_descale on pool columns (fp8 pools)
  float* v = sr.v;
  v[0] = x.x * sc;
  v[1] = x.y * sc;
  v[2] = x.z * sc;
  v[3] = x.w * sc;
#pragma unroll
  for (int j = 0; j < T::kSmCols; ++j) vs[j] = pool_blk ? ps.v_desc : 1.f;
  // Masking, in one branch uniform over the CTA: only the blocks past the plain prefix
  // blocks (the piece's end, draft columns) have columns to mask. (Per column, the test
  // compiled to four convergence regions a block, ~3.5% of all stall samples in an
  // Nsight Compute profile of H=64.)
  if (blk >= pc.plain_blocks) {
    const int kbase = pc.tok_lo + blk * T::kBlockN + sm_col;
#pragma unroll
    for (int j = 0; j < T::kSmCols; ++j) {
      const int k = kbase + j;
      bool ok = k < pc.tok_hi;
      if (ok && k >= req.prefix) {
        const int dj = k - req.prefix;
        if (p.mask == nullptr)
          ok = dj <= sr.q_tok;
        else if (dj < 16)
          ok = mask_s[sr.mask_row + dj] != 0;
        else
          ok = p.mask[req.mask_begin + int64_t(sr.q_tok) * req.kv_len + req.prefix + dj] != 0;
      }
      if (!ok) {
        v[j] = -CUDART_INF_F;
      } else if (kFp8 && k < req.prefix) {
        v[j] *= ps.k_desc;
        vs[j] = ps.v_desc;
      }
    }
  }
  if (!sr.row_ok) {
#pragma unroll
    for (int j = 0; j < T::kSmCols; ++j) v[j] = -CUDART_INF_F;
  }
  // P of this thread's columns against the row max m (none yet: 0) into the P tile; their sum.
  auto write_p = [&](float m) {
    const float m_use = m == -CUDART_INF_F ? 0.f : m;
    float pr[T::kSmCols], psum = 0.f;
#pragma unroll
    for (int j = 0; j < T::kSmCols; ++j) {
      pr[j] = exp2f(v[j] - m_use);
      psum += pr[j];
    }
    if constexpr (kFp8) {
#pragma unroll
      for (int j = 0; j < T::kSmCols; ++j) pr[j] *= vs[j];  // (after the sum: l is unscaled)
    }
    *reinterpret_cast<uint2*>(&p_s[sm_row * T::kPRowElems + sm_col]) =
        make_uint2(pack_bf16x2(pr[0], pr[1]), pack_bf16x2(pr[2], pr[3]));
    return psum;
  };
  const float lim = sr.m_run + T::kRescaleLog2;
  bool need = false;
#pragma unroll
  for (int j = 0; j < T::kSmCols; ++j) need |= v[j] > lim;
  const float psum = write_p(sr.m_run);
  if (!math_sync_or(need)) {
    sr.l_part += psum;
    return;
  }
  // Rare: raise the row max to the true running max, rewrite P, rescale O.
  float bmax = fmaxf(fmaxf(v[0], v[1]), fmaxf(v[2], v[3]));
#pragma unroll
  for (int o = 1; o < T::kSmTpr; o <<= 1) bmax = fmaxf(bmax, __shfl_xor_sync(0xffffffffu, bmax, o));
  const float m_new = fmaxf(sr.m_run, bmax);
  const float alpha = exp2f(sr.m_run - (m_new == -CUDART_INF_F ? 0.f : m_new));
  sr.l_part = sr.l_part * alpha + write_p(m_new);
  sr.m_run = m_new;
  if (L.tid % T::kSmTpr == 0) alpha_s[sm_row] = alpha;
  math_sync();
#pragma unroll
  for (int a = 0; a < 2; ++a) {
    const float a0 = alpha_s[a * 16 + L.g], a1 = alpha_s[a * 16 + L.g + 8];
#pragma unroll
    for (int ni = 0; ni < 8; ++ni) {
      acc[a][ni][0] *= a0; acc[a][ni][1] *= a0;
      acc[a][ni][2] *= a1; acc[a][ni][3] *= a1;
    }
  }
}

// O += P V of one block, this warp's output columns [64 w, 64 w + 64) of all 32 rows (V = the
// first 512 columns of the stage's rows).
__device__ __forceinline__ void pv_block(const MathLane& L, const __nv_bfloat16* p_s, uint32_t stage,
                                         float (&acc)[2][8][4]) {
#pragma unroll
  for (int kk = 0; kk < 2; ++kk) {
    uint32_t pa[2][4];
#pragma unroll
    for (int a = 0; a < 2; ++a)
      ldmatrix_x4(pa[a], smem_u32(&p_s[(a * 16 + (L.mat & 1) * 8 + L.r8) * T::kPRowElems + kk * 16 + (L.mat >> 1) * 8]));
    const uint32_t vrow = stage + (kk * 16 + (L.mat & 1) * 8 + L.r8) * T::kKvRowBytes;
#pragma unroll
    for (int nj = 0; nj < 4; ++nj) {
      uint32_t vb[4];
      ldmatrix_x4_trans(vb, vrow + (L.warp * T::kColsPerWarp + nj * 16 + (L.mat >> 1) * 8) * 2);
#pragma unroll
      for (int a = 0; a < 2; ++a) {
        mma_bf16(acc[a][nj * 2], pa[a], vb[0], vb[1]);
        mma_bf16(acc[a][nj * 2 + 1], pa[a], vb[2], vb[3]);
      }
    }
  }
}

// The piece's epilogue: normalises O and stores it straight from the accumulators, to o when
// the piece is its whole segment (`full`), else to partial slot `slot` (with its LSE). Each warp
// stages its 32 x 64 slice (bf16) through its own corner of red_s, 8 rows at a time, and writes
// whole 16-byte pieces: a quarter of the store instructions of the fragments' 4-byte pieces,
// every 32-byte sector filled. Partials are bf16 too (half the bytes of fp32 for these stores
// and the combine's loads; their LSE stays fp32). o rows that are not 16-byte aligned (a
// strided view) take the direct path.
template <bool kTrace>
__device__ __forceinline__ void store_piece(const VerifyParams& p, const MathLane& L, const Request& req, int row0,
                                            bool full, int slot, const SoftmaxRow& sr, const float (&acc)[2][8][4],
                                            float* inv_s, float* red_s) {
  const int g = L.g, t4 = L.t4, lane = L.lane, warp = L.warp;
  float l_run = sr.l_part;
#pragma unroll
  for (int o = 1; o < T::kSmTpr; o <<= 1) l_run += __shfl_xor_sync(0xffffffffu, l_run, o);
  if (L.tid % T::kSmTpr == 0) {
    const float lse2 = l_run > 0.f ? sr.m_run + __log2f(l_run) : -CUDART_INF_F;
    inv_s[L.sm_row] = l_run > 0.f ? 1.f / l_run : 0.f;
    if (full) {
      const int q_row = row0 + L.sm_row;
      if (sr.row_ok && p.lse != nullptr) {
        const int64_t tok = req.qo_begin + (q_row >> p.head_shift);
        p.lse[tok * p.lse_stride_t + (q_row & (p.num_heads - 1))] = lse2 * 0.69314718055994530942f;
      }
    } else {
      p.part_lse[slot * T::kBlockM + L.sm_row] = lse2;
    }
  }
  math_sync();  // inv_s ready; every warp is past its last PV, so red_s is free
  if (L.tid == 0) trace_point<kTrace>(p, blockIdx.x, 13);
  const int col0 = warp * T::kColsPerWarp;
  if (full && !p.o_vec16) {
#pragma unroll
    for (int a = 0; a < 2; ++a)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = a * 16 + g + half * 8;
        const float inv = inv_s[r];
        const int qr = row0 + r;
        if (qr < req.rows) {
          __nv_bfloat16* dst = static_cast<__nv_bfloat16*>(p.o) + (req.qo_begin + (qr >> p.head_shift)) * p.o_stride_t +
                               (qr & (p.num_heads - 1)) * p.o_stride_h + col0 + t4 * 2;
#pragma unroll
          for (int ni = 0; ni < 8; ++ni)
            *reinterpret_cast<uint32_t*>(dst + ni * 8) =
                pack_bf16x2(acc[a][ni][half * 2] * inv, acc[a][ni][half * 2 + 1] * inv);
        }
      }
    return;
  }
  // Both outputs are bf16 rows of 512: o's (token, head) row, or the partial slot's row.
  constexpr int kRowWords = T::kColsPerWarp / 2 + 4;  // staging row: 64 bf16 + 16 B pad
  static_assert(T::kMathWarps * 8 * kRowWords * 4 <= T::kRedBytes, "staging fits red_s");
  __nv_bfloat16* part = static_cast<__nv_bfloat16*>(p.part_o) + int64_t(slot) * T::kBlockM * T::kHeadDimV;
#pragma unroll
  for (int a = 0; a < 2; ++a)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int rbase = a * 16 + half * 8;  // this round: rows rbase + g
      const float inv = inv_s[rbase + g];
      uint32_t* st = reinterpret_cast<uint32_t*>(red_s) + warp * 8 * kRowWords;
#pragma unroll
      for (int ni = 0; ni < 8; ++ni)
        st[g * kRowWords + ni * 4 + t4] = pack_bf16x2(acc[a][ni][half * 2] * inv, acc[a][ni][half * 2 + 1] * inv);
      __syncwarp();
#pragma unroll
      for (int it = 0; it < 2; ++it) {  // 8 rows x 8 pieces of 16 B
        const int row = it * 4 + (lane >> 3), piece = lane & 7;
        const int r = rbase + row, qr = row0 + r;
        __nv_bfloat16* dst = nullptr;
        if (!full)
          dst = part + r * T::kHeadDimV;
        else if (qr < req.rows)
          dst = static_cast<__nv_bfloat16*>(p.o) + (req.qo_begin + (qr >> p.head_shift)) * p.o_stride_t +
                (qr & (p.num_heads - 1)) * p.o_stride_h;
        if (dst != nullptr)
          *reinterpret_cast<uint4*>(dst + col0 + piece * 8) = *reinterpret_cast<const uint4*>(st + row * kRowWords + piece * 4);
      }
      __syncwarp();  // the staging corner is rewritten by the next round
    }
}

// The math warps' walk: for each piece its Q fragments, then every KV block (S, softmax, P V),
// then its epilogue; the cut segments are remembered for the fused merge. The first piece's Q
// tile (element 0, stage 0, still free) is copied by the math warps, 4 rows a warp, while the
// load warps fetch the first indices and go straight on to the KV blocks (row r of the piece;
// its own rows only, q_tile_rows).
template <int kStages, bool kPipe, int kMode, int kKv, int kThreads>
__device__ __forceinline__ void math_warps(const VerifyParams& p, const PieceWalk& w, const Schedule& sch,
                                           unsigned long long ready, MainShared<kThreads, kStages>& sh,
                                           const MainSmem<kStages, kPipe>& sm) {
  constexpr bool kFp8 = kKv != kKvBf16;
  constexpr bool kMath = !(kMode & 2), kCopy = !(kMode & 4), kTrace = (kMode & kModeTrace) != 0;
  // Merge tickets (ticketed above): the plain loop with the math, 3 stages or more (the H200's
  // variants; on sm_120's 2-stage one the ticket's register tipped it into a spill).
  constexpr bool kTicket = kMath && !kPipe && kStages >= 3;
  constexpr uint32_t kRowBytes = T::kHeadDim * 2;
  const MathLane L = math_lane();
  const int tid = L.tid, cta = blockIdx.x;
  static_assert(T::kBlockM == 4 * T::kMathWarps, "a math warp copies 4 Q rows");
  if constexpr (kCopy) {
    const int q_rows = q_tile_rows(w.req, w.row0);
    if (tid == 0) mbar_expect_tx(smem_u32(&sh.full_bar[0]), q_rows * kRowBytes);
    const int row = L.warp * 4 + L.lane;
    if (L.lane < 4 && row < q_rows) {
      const int r = w.row0 + row;
      bulk_copy_g2s(smem_u32(sm.base) + row * T::kKvRowBytes, q_row_src(p, w.req, r), kRowBytes,
                    smem_u32(&sh.full_bar[0]));
    }
  } else if (tid == 0) {
    mbar_arrive(smem_u32(&sh.full_bar[0]));
  }
  if (tid == 0) trace_point<kTrace>(p, cta, 3);
  if (tid == 0) {
    sh.math_walk = w;
    sh.num_cuts = 0;
  }
  math_sync();
  if (tid == 0) trace_point<kTrace>(p, cta, 11);
  int traced_blocks = 0;
  int elem = 0;  // running element count: stage elem % kStages, phase (elem / kStages) & 1
  auto wait_full = [&](int e) { mbar_wait(smem_u32(&sh.full_bar[e % kStages]), (e / kStages) & 1); };
  auto release = [&](int e) {  // this warp is done reading element e's stage
    __syncwarp();
    if (L.lane == 0) mbar_arrive(smem_u32(&sh.empty_bar[e % kStages]));
  };
  PoolScales ps{1.f, 1.f, 0.f};
  if constexpr (kFp8) {
    ps.k_desc = p.k_descale_ptr != nullptr ? *p.k_descale_ptr : p.k_descale;
    ps.v_desc = p.v_descale_ptr != nullptr ? *p.v_descale_ptr : p.v_descale;
  }
  ps.scale_pool = p.scale_log2 * ps.k_desc;

  do {
    const PieceWalk& mw = sh.math_walk;
    const Request& req = mw.req;
    const int nb = mw.nb, row0 = mw.row0;
    const int pool_end = min(req.prefix, mw.tok_hi);  // the piece's pool columns end here
    const PieceCols pc{mw.tok_lo, mw.tok_hi, (pool_end - mw.tok_lo) / T::kBlockN};
    const int tok0 = row0 >> p.head_shift;
    if (p.mask != nullptr && mw.tok_hi > req.prefix && tid < 64) {
      const int i = tok0 + (tid >> 4), j = tid & 15;
      if (i < req.draft && j < req.draft)
        sh.mask_s[tid] = p.mask[req.mask_begin + int64_t(i) * req.kv_len + req.prefix + j];
    }

    // Q fragments (rows mi*16.., dims of k-group kg) from the piece's first element.
    uint32_t qf[T::kKSteps][4];
    wait_full(elem);
    if (kTrace && tid == 0 && elem == 0) trace_point<kTrace>(p, cta, 6);
    if (kMath) {
#pragma unroll
      for (int ks = 0; ks < T::kKSteps; ++ks)
        ldmatrix_x4(qf[ks], sm.stage_addr(elem) + (L.mi * 16 + (L.mat & 1) * 8 + L.r8) * T::kKvRowBytes +
                                (L.kg * T::kKSteps * 16 + ks * 16 + (L.mat >> 1) * 8) * 2);
    } else {
#pragma unroll
      for (int ks = 0; ks < T::kKSteps; ++ks) qf[ks][0] = qf[ks][1] = qf[ks][2] = qf[ks][3] = 0u;
    }
    release(elem);
    const int base = elem + 1;  // element of KV block 0
    elem = base + nb;

    float acc[2][8][4];
#pragma unroll
    for (int a = 0; a < 2; ++a)
#pragma unroll
      for (int ni = 0; ni < 8; ++ni)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[a][ni][c] = 0.f;

    SoftmaxRow sr;
    sr.m_run = -CUDART_INF_F;
    sr.l_part = 0.f;
    const int q_row = row0 + L.sm_row;
    sr.row_ok = q_row < req.rows;
    sr.q_tok = sr.row_ok ? (q_row >> p.head_shift) : 0;
    sr.mask_row = (sr.q_tok - tok0) * 16;  // this row's draft-column bytes in mask_s
    auto softmax = [&](int blk, const float* red_buf) {
      softmax_block<kKv>(p, L, req, pc, blk, red_buf, sm.p_s, sm.alpha_s, sh.mask_s, ps, sr, acc);
    };
    auto pv = [&](int blk) {
      pv_block(L, sm.p_s, sm.stage_addr(base + blk), acc);
      release(base + blk);
    };

    // This piece's merge ticket (ticketed above), if it takes one: thread 0 takes it as the
    // last block lands, so its round trip runs under that block's math and the tickets' order
    // is about the order the CTAs finish.
    int ticket = 0, ticket_n = 0;
    if (kTicket && p.fused) {
      const int n = min((mw.seg_start + mw.seg_units - 1) / sch.units_per_cta, p.num_ctas - 1) -
                    mw.seg_start / sch.units_per_cta + 1;
      if (ticketed(mw, sch, n)) ticket_n = n;
    }
    if constexpr (!kMath) {
      for (int i = 0; i < nb; ++i) {
        wait_full(base + i);
        release(base + i);
      }
    } else if constexpr (!kPipe) {
      for (int i = 0; i < nb; ++i) {
        wait_full(base + i);
        if (kTicket && tid == 0 && i == nb - 1 && ticket_n > 0) ticket = merge_ticket(p.sync, p.num_ctas, ticket_n);
        if (kTrace && tid == 0 && base == 1 && i == 0) trace_point<kTrace>(p, cta, 7);
        if constexpr (kFp8) {
          fp8_widen<kStages, kKv>(L, sm.stage_addr(base + i), min(max(pool_end - (pc.tok_lo + i * T::kBlockN), 0), T::kBlockN));
          math_sync();  // the block is bf16 for every warp
        }
        compute_s(L, qf, sm.stage_addr(base + i), sm.red_s);
        math_sync();        // S partials complete (and every warp is past PV of block i-1)
        softmax(i, sm.red_s);  // its barrier: P complete
        pv(i);
      }
    } else {
      wait_full(base);
      if (kTrace && tid == 0 && base == 1) trace_point<kTrace>(p, cta, 7);
      compute_s(L, qf, sm.stage_addr(base), sm.red_s);
      for (int i = 0; i < nb; ++i) {
        if (i + 1 < nb) wait_full(base + i + 1);
        math_sync();  // S partials of block i complete; PV of block i-1 done (P reusable)
        if (i + 1 < nb) compute_s(L, qf, sm.stage_addr(base + i + 1), (i + 1) & 1 ? sm.red2_s : sm.red_s);
        softmax(i, i & 1 ? sm.red2_s : sm.red_s);
        pv(i);
      }
    }

    if (kTrace && tid == 0) {
      trace_point<kTrace>(p, cta, 8);
      traced_blocks += nb;
      p.trace[cta * kTraceSlots + 14] = traced_blocks;
    }
    const bool full = mw.unit_lo == 0 && mw.unit_hi == mw.seg_units;
    const int slot = mw.unit_lo > 0 ? cta : p.num_ctas + cta;
    store_piece<kTrace>(p, L, req, row0, full, slot, sr, acc, sm.inv_s, sm.red_s);
    if (tid == 0) trace_point<kTrace>(p, cta, 15);
    math_sync();  // inv_s, mask_s, P reused by the next piece; walk read by all
    if (tid == 0) trace_point<kTrace>(p, cta, 9);
    if (p.fused && !full && tid == 0) {
      // Every math warp's partial stores precede the barrier above; the release makes them
      // visible to the grid before the flag says so. Remember the segment for the merge.
      const int c0 = mw.seg_start / sch.units_per_cta;
      const int c1 = min((mw.seg_start + mw.seg_units - 1) / sch.units_per_cta, p.num_ctas - 1);
      // (The flag value from thread 0's register or from shared memory: whichever left the
      // variant without a spill, 3 stages and 2 alike, for every KV type.)
      publish_part(&p.sync[1 + slot], kStages >= 3 ? ready : sh.merge_ready);
      const int n = c1 - c0 + 1;
      int k = cta - c0, ns = n;
      if (kTicket && ticket_n > 0) {  // the call's only cut segment (ticket_n == n)
        k = ticket;
        ns = n - T::kTicketSkip;
      }
      sh.cuts[sh.num_cuts] = Cut{c0, n, req.qo_begin, row0, min(req.rows - row0, T::kBlockM), k, ns};
      ++sh.num_cuts;
      trace_point<kTrace>(p, cta, 16);
    }
    if (tid == 0) sh.math_more = sh.math_walk.next(p);
    math_sync();
  } while (sh.math_more);
}

// ------------------------------------------------------------------------------------------
// The fused merge (p.fused): the CTAs of a cut segment merge its parts together
// ------------------------------------------------------------------------------------------

// All CTAs are co-resident (cooperative launch), so waiting for the segment's other CTAs cannot
// deadlock; every CTA published its partials before waiting for any segment. CTA k of the
// segment's n merges the k-th n-th of its outputs, staged through the idle stage ring
// (merge_staged), copying each part as soon as its flag says it is stored. Then thread 0 keeps
// the CTA's schedule plan and counts the CTA ended.
template <int kStages, bool kTrace, int kThreads>
__device__ __forceinline__ void fused_merge(const VerifyParams& p, MainShared<kThreads, kStages>& sh, uint8_t* smem,
                                            float* red_s) {
  // A staged merge's n ranges: a slice is at most 8/7 of an n-th of a partial when ticketed
  // (n - kTicketSkip slices of n >= kTicketMinParts parts), plus 16 B a part for the rounding
  // to whole granules, plus the pitch's padding (traits.h merge_slice: 16 B a part where a
  // slice has at most 32 granules, else under 1/8 of the range), then LSE runs of span + 6 at
  // most. A bound; the compile test checks every slice's exact bytes (tests/smem_probe.cpp).
  constexpr int kPartBytes = T::kBlockM * T::kHeadDimV * 2;
  constexpr int kRanges = kPartBytes * T::kTicketMinParts / (T::kTicketMinParts - T::kTicketSkip) + 1;
  static_assert(T::kTicketMinParts > T::kTicketSkip, "ticketed merges have slices");
  static_assert(kRanges + kMaxFusedParts * 16 + (kMaxFusedParts * 16 > kRanges / 8 ? kMaxFusedParts * 16 : kRanges / 8) +
                        (T::kBlockM + 8 * kMaxFusedParts) * 4 <=
                    2 * T::kStageBytes,
                "a staged merge's parts (ranges, their padding, LSE runs) fit two stages");
  static_assert((3 * kMaxFusedParts + 2 * 32) * 4 <= T::kRedBytes, "staged merge weights fit red_s");
  const int tid = threadIdx.x, cta = blockIdx.x;
  uint32_t merge_phase = 0;
  for (int i = 0; i < sh.num_cuts; ++i) {
    const Cut c = sh.cuts[i];
    if (kTrace && tid == 0 && i == 0) trace_point<kTrace>(p, cta, 19);
    if (c.k < c.ns)
      merge_staged<kTrace>(p, c.c0, c.n, c.k, c.ns, c.rows, c.row0, c.qo_begin, sh.merge_ready, sh.merge_seen, smem,
                           red_s, smem_u32(&sh.merge_bar), merge_phase, [] { math_sync(); });
    if (kTrace && tid == 0 && i == 0) trace_point<kTrace>(p, cta, 20);
  }
  if (tid == 0) {
    if (sh.num_cuts > 0) trace_point<kTrace>(p, cta, 18);
    // Every warp of this CTA read the plan before its first copy, so before these math
    // warps' last block: rewriting it here cannot tear what a warp of this call reads.
    if (sh.plan_pending) plan_keep(p, cta, sh.plan_req_s, sh.plan_s);
    merge_cta_ended(p.sync);
  }
}

// ------------------------------------------------------------------------------------------
// The kernel
// ------------------------------------------------------------------------------------------

// kMode 2 and 4: benchmark diagnostics with wrong output; 8: timestamps (traits.h kVariants).
// Trace points (row = CTA): 0 entry, 1 inputs visible, 12 schedule computed, 2 roles split;
// load warp: 29 index pointers landed (load warp 0, when it works the schedule out), 30 its
// walk ready, 10 first index copies issued, 4 first indices landed, 5 last copy issued; math
// warps: 3 first Q tile's copies issued, 11 walk shared, 6 first Q tile landed, 7 first KV block
// landed, 8 last block's PV done, 13 last normaliser ready, 15 warp 0's stores issued,
// 9 last epilogue stored (all math warps);
// fused merge (tid 0): 16 partial published, 19 first cut segment's merge begun, 22 all its
// parts seen stored (their copies issued, LSEs landed), 23 their ranges landed, 25 granule loop
// entered, 26 thread 0's parts summed, 27 and reduced, 24 thread 0's granules written, 20 its
// merge done, 18 every segment's merge done; slot 14: KV blocks this CTA did.
// kLoaders load warps share each element's 32 row copies (a lane issues its bulk copies one
// at a time, ~30 ns each, so one warp needs ~1 us per element).
// kKv (params.h KvDtype): the KV pool's element type. fp8 (e4m3, e5m2): a pool row is 576
// bytes, copied into the first half of its 1152-byte stage row; the math warps widen the block's
// pool rows to bf16 in place (fp8_widen, exact: every e4m3 and e5m2 value is a bf16 value) before
// its S, so the math is the bf16 variant's; the descales are applied in fp32 to the logits and
// to P of the pool columns (draft columns, bf16 from k_ext, take none).
template <int kStages, bool kPipe, int kMode, int kLoaders, int kKv>
__global__ void __launch_bounds__(kMainThreads<kLoaders>, 1) verify_main_kernel(const VerifyParams p) {
  constexpr int kThreads = kMainThreads<kLoaders>;
  constexpr bool kFp8 = kKv != kKvBf16;
  constexpr bool kTrace = (kMode & kModeTrace) != 0;
  static_assert(!(kFp8 && kPipe), "fp8 pools: the plain loop only");
  static_assert(!kPipe || kStages >= 3, "the pipelined loop keeps two blocks resident");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000
  // Variants of more than two stages need more shared memory than sm_120's 99 KB: compiled
  // empty beyond sm_90 (the launcher never picks them there; other architectures are refused
  // at build and launch, verify_launch.h).
  if constexpr (kStages > 2) {
    __trap();
    return;
  } else
#endif
  {
    extern __shared__ __align__(128) uint8_t smem[];
    __shared__ MainShared<kThreads, kStages> sh;
    const MainSmem<kStages, kPipe> sm(smem);
    const int tid = threadIdx.x, warp = tid >> 5;
    const int cta = blockIdx.x;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
    if (tid == 0) trace_begin<kTrace>(p, cta);
    if (tid == 0) {
      for (int s = 0; s < kStages; ++s) {
        mbar_init(smem_u32(&sh.full_bar[s]), 1);
        mbar_init(smem_u32(&sh.empty_bar[s]), T::kMathWarps);
      }
      mbar_init(smem_u32(&sh.merge_bar), 1);
      sh.plan_pending = 0;
      for (int i = 0; i < kMaxFusedParts / 32; ++i) sh.merge_seen[i] = 0;
      asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");  // visible to the copy engine
    }
    __syncthreads();  // the barriers are initialised for every thread (done while the last grid drains)
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    // Launched as a programmatic dependent: nothing above reads inputs; wait for the previous
    // kernel's writes before anything below does.
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
    if (tid == 0) trace_point<kTrace>(p, cta, 1);
    // Fused merge (merge_sync.cuh): CTAs ended in earlier calls, read by thread 0 ahead of the
    // schedule's loads and turned into this call's flag value once those have landed. Every
    // CTA's thread 0 calls merge_cta_ended exactly once, as the CTA leaves.
    unsigned long long ready = 0;
    if (p.fused && tid == 0) ready = ld_relaxed_u64(&p.sync[0]);
    Schedule sch;
    PieceWalk w;
    if (!cta_start<kThreads, kStages, kTrace>(p, sh, sm.red_s, ready, sch, w)) return;
    if (warp >= T::kMathWarps) {
      load_warps<kStages, kMode, kLoaders, kKv>(p, w, sh, sm.idx_s, smem_u32(smem));
      return;
    }
    math_warps<kStages, kPipe, kMode, kKv>(p, w, sch, ready, sh, sm);
    if (p.fused) fused_merge<kStages, kTrace>(p, sh, smem, sm.red_s);
  }
}

}  // namespace detail
}  // namespace kdtree_mla
