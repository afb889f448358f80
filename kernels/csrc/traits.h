// Compile-time configuration of the verify kernels; shared by device and host code.
#pragma once

#include <cstddef>

#if defined(__CUDACC__)
#define KDTREE_HD __host__ __device__
#else
#define KDTREE_HD
#endif

namespace kdtree_mla {

struct VerifyTraits {
  static constexpr int kHeadDim = 576;   // 512 latent + 64 rope
  static constexpr int kHeadDimV = 512;
  static constexpr int kBlockM = 32;     // query rows (draft token x head) per CTA tile
  static constexpr int kBlockN = 32;     // KV tokens per block (one pipeline stage)
  // Main kernel: 8 math warps + 1, 2 or 4 load warps (verify_main.cuh, KernelVariant::loaders).
  static constexpr int kMathWarps = 8;
  static constexpr int kMathThreads = kMathWarps * 32;
  // S = Q K^T: math warp w covers row half (w & 1) and k-group (w >> 1) of the 576 dims.
  static constexpr int kKGroups = 4;
  static constexpr int kKSteps = kHeadDim / 16 / kKGroups;  // 9 mma k16 steps per k-group
  // O += P V: math warp w owns output columns [w * 64, w * 64 + 64).
  static constexpr int kColsPerWarp = kHeadDimV / kMathWarps;
  // Softmax: kSmTpr threads per row, kSmCols columns each.
  static constexpr int kSmTpr = kMathThreads / kBlockM;
  static constexpr int kSmCols = kBlockN / kSmTpr;
  // A logit may exceed its row's running max by this much (log2 units) before the max is
  // raised and O rescaled: P stays <= 256 (fine in bf16), O and l accumulate in fp32.
  static constexpr float kRescaleLog2 = 8.f;
  // One smem KV row: 1152 B + 16 B pad so 8 consecutive rows hit distinct bank groups (ldmatrix).
  static constexpr int kKvRowElems = kHeadDim + 8;
  static constexpr int kKvRowBytes = kKvRowElems * 2;
  static constexpr int kStageBytes = kBlockN * kKvRowBytes;
  // Cross-k-group S reduction buffer, fp32, rows padded by 8 floats against bank conflicts.
  static constexpr int kRedRowFloats = kBlockN + 8;
  static constexpr int kRedBytes = kKGroups * kBlockM * kRedRowFloats * 4;
  // P tile (bf16), rows padded by 16 B for conflict-free ldmatrix.
  static constexpr int kPRowElems = kBlockN + 8;
  static constexpr int kPBytes = kBlockM * kPRowElems * 2;
  static constexpr int kRowStatBytes = 2 * kBlockM * 4;  // alpha and 1/l per row
  // Ring of prefix-token pool indices (8 B slots) the load warp fills ahead of its copies.
  static constexpr int kIdxRingBlocks = 8;
  static constexpr int kIdxAhead = kIdxRingBlocks - 1;  // index prefetch distance (blocks)
  static constexpr int kIdxBytes = kIdxRingBlocks * kBlockN * 8;
  static constexpr int kMaxBatch = 4096;  // scheduler scan lives in the (>= 20 KB) red buffer
  // Merge tickets (verify_main.cuh ticketed): a call whose only cut segment has n >=
  // kTicketMinParts parts merges it in n - kTicketSkip slices, taken by its first CTAs whose last
  // block lands.
  static constexpr int kTicketMinParts = 64;
  static constexpr int kTicketSkip = 8;
  // Schedule plans (verify_common.cuh): 64-bit words a CTA keeps after the merge-ticket word of
  // the workspace's `sync`, which holds 2 + (2 + kPlanWords) * num_ctas words.
  static constexpr int kPlanWords = 10;

  static_assert(kHeadDim % (16 * kKGroups) == 0, "k-groups must split 576 evenly");
  static_assert(kMathWarps == 2 * kKGroups, "warp grid: 2 row halves x 4 k-groups");
  static_assert(kBlockM == 32 && kBlockN == 32, "fragment code assumes 32 x 32 tiles");
  static_assert(kSmCols == 4, "softmax code handles 4 columns a thread");
  static_assert(kRedBytes / 4 > kMaxBatch, "scan fits the red buffer");
};

// Dynamic shared memory for a pipeline depth; `pipe` doubles the S partials.
constexpr size_t verify_smem_bytes(int stages, bool pipe) {
  using T = VerifyTraits;
  return size_t(stages) * T::kStageBytes + (pipe ? 2 : 1) * T::kRedBytes + T::kPBytes +
         T::kRowStatBytes + T::kIdxBytes;
}

// sm_120 (RTX PRO 6000 Blackwell) opt-in limit per block.
constexpr size_t kSm120SmemLimit = 101376;

// Diagnostic kernel variants (loads only, math only, traced, and the alternative pipeline
// shapes) are compiled only with -DKDTREE_DIAG=1 (setup.py: KDTREE_DIAG=1 in the environment);
// the default build holds the two variants the launcher picks.
#ifndef KDTREE_DIAG
#define KDTREE_DIAG 0
#endif
constexpr bool kDiagBuild = KDTREE_DIAG != 0;

// Compiled main-kernel variants. The launcher uses the larger default when it fits the
// device's smem opt-in limit, else the smaller one (sm_120); VerifyParams.force_variant
// overrides (benchmarks, tests). Entry 0 is "none fits" (no kernel). In the diagnostic build,
// modes 2 and 4 are benchmark diagnostics with wrong output: loads only (the math warps skip the
// math) and math only (the load warp copies nothing); mode 8 (correct output) also writes
// timestamps to VerifyParams::trace (research/kernel-lab/bench/trace_verify.py).
struct KernelVariant {
  int stages;
  bool pipe;    // S of block i+1 overlapped with the softmax of block i (needs >= 3 stages)
  int mode;     // 0, or a diagnostic: 2 loads only, 4 math only, 8 traced
  int loaders;  // load warps (beside the 8 math warps)
  constexpr int threads() const { return VerifyTraits::kMathThreads + 32 * loaders; }
};
// The same as a compile-time constant, for the kernel and its launch.
template <int kLoaders>
constexpr int kMainThreads = KernelVariant{0, false, 0, kLoaders}.threads();
#if KDTREE_DIAG
constexpr KernelVariant kVariants[] = {{0, false, 0, 1},  {2, false, 0, 1}, {4, true, 0, 1},   {3, false, 0, 1},
                                       {5, false, 0, 1},  {4, true, 2, 1},  {4, true, 4, 1},   {4, true, 8, 1},
                                       {4, true, 0, 2},   {2, false, 0, 2}, {3, false, 8, 2},  {3, false, 0, 2},
                                       {3, false, 2, 2},  {3, false, 4, 2}};
constexpr int kNumVariants = 14;
constexpr int kVariantSmall = 9;
constexpr int kVariantLarge = 11;
#else
// Production: 2 stages (sm_120's 99 KB) and 3 stages (the H200), both with two load warps.
constexpr KernelVariant kVariants[] = {{0, false, 0, 1}, {2, false, 0, 2}, {3, false, 0, 2}};
constexpr int kNumVariants = 3;
constexpr int kVariantSmall = 1;
constexpr int kVariantLarge = 2;
#endif
static_assert(sizeof(kVariants) / sizeof(kVariants[0]) == kNumVariants, "kNumVariants counts kVariants");
static_assert(kVariants[kVariantSmall].mode == 0 && kVariants[kVariantLarge].mode == 0,
              "the launcher's variants compute the output");
constexpr int kModeTrace = 8;
// Trace layout (unsigned 64-bit): row r holds kTraceSlots values, the first half %globaltimer
// (ns), the second half clock64 of the same points. Rows 0.. are main-kernel CTAs, rows
// kTraceCombineRow + x the combine CTAs (x, 0) for x < kTraceCombineCtas.
constexpr int kTraceSlots = 64;
constexpr int kTraceSmidSlot = 28;  // the SM a row's CTA ran on (globaltimer half, not a time)
constexpr int kTraceCombineRow = 1024;
constexpr int kTraceCombineCtas = 256;
constexpr int kTraceRows = kTraceCombineRow + kTraceCombineCtas;
constexpr size_t variant_smem_bytes(int v) { return verify_smem_bytes(kVariants[v].stages, kVariants[v].pipe); }
constexpr int variant_for_optin(size_t optin) {
  return optin >= variant_smem_bytes(kVariantLarge)   ? kVariantLarge
         : optin >= variant_smem_bytes(kVariantSmall) ? kVariantSmall
                                                      : 0;
}
static_assert(variant_smem_bytes(kVariantSmall) <= kSm120SmemLimit, "sm_120 config exceeds smem");
// fp8 KV pools (VerifyParams::kv_dtype e4m3 or e5m2): the launcher's two variants are also
// compiled for each fp8 type (kernel template argument kKv). Their load warps copy a pool row's
// 576 bytes into the first half of its stage row, the math warps widen it to bf16 in place, so
// the shared-memory layout and size are the bf16 variant's.
constexpr int kNumKvDtypes = 3;  // bf16, e4m3, e5m2 (params.h KvDtype)
constexpr bool variant_has_fp8(int v) { return v == kVariantSmall || v == kVariantLarge; }
static_assert(variant_for_optin(kSm120SmemLimit) == kVariantSmall, "sm_120 must get the small config");

// Combine kernel: grid (row groups, kCombineSplits) x kCombineThreads, 64 columns per CTA,
// at most kCombineRegs registers a thread (16K a CTA).
constexpr int kCombineThreads = 128;
constexpr int kCombineSplits = 8;
constexpr int kCombineRegs = 128;
constexpr int kCombineBatch = 34;  // parts a combine warp loads in one round (<= 64)
constexpr int kCombineMaxParts = 1024;  // max CTAs of the main kernel (num_ctas + 1 parts)
constexpr int kMaxFusedParts = 512;     // max CTAs of a fused-merge grid (verify_launch.h)

// One CTA's slice of a staged fused merge (verify_merge.cuh merge_staged): slice k of ns of a
// cut segment's rows x 512 outputs, in 8-element granules. Shared with the host so the compile
// test can check every slice's shared-memory layout (tests/smem_probe.cpp).
struct MergeSlice {
  int g_lo, ng;     // first granule and granules of the slice (ng 0: nothing to merge)
  int r_lo, span;   // the rows the slice touches
  int a0, lse_n;    // a part's LSE run: rows [a0, a0 + lse_n) of its slot, 16-byte aligned both ends
  int pg;           // threads a granule: a power of two <= 32 that fills the 256 math threads, at least 1
  int pitch;        // bytes from one part's range to the next in the staging (a multiple of 16)
};
// Where part j's range sits in the staging: j * pitch. A quarter warp's 16-byte loads of one
// round (8 / pg granules side by side x pg consecutive parts) hit 8 distinct 16-byte bank
// groups when the pitch, in 16-byte units, is 8 / pg modulo 16 / pg (odd from pg = 8 on).
// Packed (pitch = the range's bytes), a slice of an even number of granules shared groups: 2-
// to 8-way conflicts on every load (8-way at 16 and 24 granules, the B = 1 slices of ~91k and
// ~5.7k on 132 SMs). Padding: at most 7 units (pg 2), 3 (pg 4), 1 (pg >= 8).
KDTREE_HD constexpr MergeSlice merge_slice(int rows, int k, int ns) {
  using T = VerifyTraits;
  const int units = rows * (T::kHeadDimV / 8);
  const int g_lo = k * units / ns, ng = (k + 1) * units / ns - g_lo;
  const int e_lo = g_lo * 8, r_lo = e_lo / T::kHeadDimV;
  const int span = (e_lo + ng * 8 - 1) / T::kHeadDimV - r_lo + 1;  // (meaningless when ng is 0)
  int pg = 1;
  while (pg < 32 && pg * 2 * ng <= T::kMathThreads) pg *= 2;
  const int pq = pg >= 8 ? 1 : 8 / pg;
  const int units16 = pg == 1 ? ng : ng + ((pq - ng) & (2 * pq - 1));
  const int a0 = r_lo & ~3;
  return MergeSlice{g_lo, ng, r_lo, span, a0, ((r_lo + span + 3) & ~3) - a0, pg, units16 * 16};
}
// Shared memory a staged merge of n parts uses for slice s: the ranges, then the LSE runs (in
// the stage ring); the weights, 1/l and LSEs (in the S-partial buffer).
KDTREE_HD constexpr int merge_stage_bytes(int n, const MergeSlice& s) { return n * s.pitch + n * s.lse_n * 4; }
KDTREE_HD constexpr int merge_weight_bytes(int n, const MergeSlice& s) { return (n + 2) * s.span * 4; }

}  // namespace kdtree_mla
