// Compile-time configuration of the verify kernels; shared by device and host code.
#pragma once

#include <cstddef>

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

// Compiled main-kernel variants. The launcher uses the larger default when it fits the
// device's smem opt-in limit, else the smaller one (sm_120); VerifyParams.force_variant
// overrides (benchmarks, tests). Modes 2 and 4 are benchmark diagnostics with wrong output:
// loads only (the math warps skip the math) and math only (the load warp copies nothing).
// Mode 8 (correct output) also writes timestamps to VerifyParams::trace (bench/trace_verify.py).
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
constexpr KernelVariant kVariants[] = {{0, false, 0, 1},  {2, false, 0, 1}, {4, true, 0, 1},   {3, false, 0, 1},
                                       {5, false, 0, 1},  {4, true, 2, 1},  {4, true, 4, 1},   {4, true, 8, 1},
                                       {4, true, 0, 2},   {2, false, 0, 2}, {3, false, 8, 2},  {3, false, 0, 2},
                                       {3, false, 2, 2},  {3, false, 4, 2}};
constexpr int kNumVariants = 14;
static_assert(sizeof(kVariants) / sizeof(kVariants[0]) == kNumVariants, "kNumVariants counts kVariants");
constexpr int kModeTrace = 8;
// Trace layout (unsigned 64-bit): row r holds kTraceSlots values, the first half %globaltimer
// (ns), the second half clock64 of the same points. Rows 0.. are main-kernel CTAs, rows
// kTraceCombineRow + x the combine CTAs (x, 0) for x < kTraceCombineCtas.
constexpr int kTraceSlots = 64;
constexpr int kTraceSmidSlot = 28;  // the SM a row's CTA ran on (globaltimer half, not a time)
constexpr int kTraceCombineRow = 1024;
constexpr int kTraceCombineCtas = 256;
constexpr int kTraceRows = kTraceCombineRow + kTraceCombineCtas;
constexpr int kVariantSmall = 9;
constexpr int kVariantLarge = 11;
constexpr size_t variant_smem_bytes(int v) { return verify_smem_bytes(kVariants[v].stages, kVariants[v].pipe); }
constexpr int variant_for_optin(size_t optin) {
  return optin >= variant_smem_bytes(kVariantLarge)   ? kVariantLarge
         : optin >= variant_smem_bytes(kVariantSmall) ? kVariantSmall
                                                      : 0;
}
static_assert(variant_smem_bytes(kVariantSmall) <= kSm120SmemLimit, "sm_120 config exceeds smem");
static_assert(variant_for_optin(kSm120SmemLimit) == kVariantSmall, "sm_120 must get the small config");

// Combine kernel: grid (row groups, kCombineSplits) x kCombineThreads, 64 columns per CTA,
// at most kCombineRegs registers a thread (16K a CTA).
constexpr int kCombineThreads = 128;
constexpr int kCombineSplits = 8;
constexpr int kCombineRegs = 128;
constexpr int kCombineBatch = 34;  // parts a combine warp loads in one round (<= 64)
constexpr int kCombineMaxParts = 1024;  // max CTAs of the main kernel (num_ctas + 1 parts)
constexpr int kMaxFusedParts = 512;     // max CTAs of a fused-merge grid (verify_launch.h)

}  // namespace kdtree_mla
