// Compile-time configuration of the verify kernel; shared by device and host code.
#pragma once

#include <cstddef>

namespace kdtree_mla {

struct VerifyTraits {
  static constexpr int kHeadDim = 576;   // 512 latent + 64 rope
  static constexpr int kHeadDimV = 512;
  static constexpr int kBlockM = 32;     // query rows (draft token x head) per CTA tile
  static constexpr int kWarps = 8;
  static constexpr int kThreads = kWarps * 32;
  // QK^T: warp w covers k-group (w % 4) of the 576 dims and n-group (w / 4) of the tokens.
  static constexpr int kKGroups = 4;
  static constexpr int kNGroups = 2;
  static constexpr int kKSteps = kHeadDim / 16 / kKGroups;  // 9 mma k16 steps per k-group
  // PV: warp w owns output columns [w * 64, w * 64 + 64).
  static constexpr int kColsPerWarp = kHeadDimV / kWarps;
  // One smem KV row: 1152 B + 16 B pad so 8 consecutive rows hit distinct bank groups (ldmatrix).
  static constexpr int kKvRowElems = kHeadDim + 8;
  static constexpr int kKvRowBytes = kKvRowElems * 2;
  static constexpr int kRowStatBytes = 2 * kBlockM * 4;  // alpha and 1/l per row
  static constexpr int kIdxRingBlocks = 8;
  static constexpr int kMaxBatch = 4096;  // scheduler scan lives in the (>= 20 KB) red buffer

  static_assert(kHeadDim % (16 * kKGroups) == 0, "k-groups must split 576 evenly");
  static_assert(kWarps == kKGroups * kNGroups, "warp grid");
  static_assert(kBlockM == 32, "fragment code assumes two m16 tiles");
};

// What depends on the KV tile: kN tokens per pipeline stage (32 everywhere; 64 is an sm_90
// variant that halves the per-token barrier and softmax overhead).
template <int kN>
struct KvTile {
  static constexpr int kBlockN = kN;
  static constexpr int kStageBytes = kN * VerifyTraits::kKvRowBytes;
  // Loader: kLoadTpt threads per token row, each copying kLoadChunks 16 B chunks.
  static constexpr int kLoadTpt = VerifyTraits::kThreads / kN;
  static constexpr int kLoadChunks = VerifyTraits::kHeadDim * 2 / 16 / kLoadTpt;
  // QK^T: each n-group covers kN / 2 tokens = kNT8 n8 tiles.
  static constexpr int kNT8 = kN / 2 / 8;
  // Cross-k-group S reduction buffer, fp32, row padded by 8 floats against bank conflicts.
  static constexpr int kRedRowFloats = kN + 8;
  static constexpr int kRedBytes = VerifyTraits::kKGroups * VerifyTraits::kBlockM * kRedRowFloats * 4;
  // P tile (bf16), row padded by 16 B for conflict-free ldmatrix.
  static constexpr int kPRowElems = kN + 8;
  static constexpr int kPBytes = VerifyTraits::kBlockM * kPRowElems * 2;
  // Softmax: 8 threads per row, kSmCols columns each.
  static constexpr int kSmCols = kN / 8;
  // Ring of prefix-token pool indices (8 B slots), filled by cp.async kStages blocks ahead of
  // the KV copies that need them, so no index load latency sits in the KV issue path.
  static constexpr int kIdxBytes = VerifyTraits::kIdxRingBlocks * kN * 8;

  static_assert(kN == 32 || kN == 64, "tile sizes the fragment code supports");
  static_assert(kLoadTpt * kLoadChunks * 16 == VerifyTraits::kHeadDim * 2, "loader covers a row");
  static_assert(kRedBytes / 4 > VerifyTraits::kMaxBatch, "scan fits the red buffer");
};

// Dynamic shared memory for a given pipeline depth and tile; `pipe` doubles the S partials.
constexpr size_t verify_smem_bytes(int stages, int n = 32, bool pipe = false) {
  return n == 64 ? size_t(stages) * KvTile<64>::kStageBytes + (pipe ? 2 : 1) * KvTile<64>::kRedBytes +
                       KvTile<64>::kPBytes + VerifyTraits::kRowStatBytes + KvTile<64>::kIdxBytes
                 : size_t(stages) * KvTile<32>::kStageBytes + (pipe ? 2 : 1) * KvTile<32>::kRedBytes +
                       KvTile<32>::kPBytes + VerifyTraits::kRowStatBytes + KvTile<32>::kIdxBytes;
}

// sm_120 (RTX PRO 6000 Blackwell) opt-in limit per block.
constexpr size_t kSm120SmemLimit = 101376;

// Compiled kernel variants: warps per CTA x pipeline depth (x KV tile). The launcher uses the
// default of the largest class that fits the device's smem opt-in limit (VerifyParams.force_variant
// overrides, for benchmarks). sm_120 gets kVariantSmall. The 16-warp kernels
// (verify_kernel_w16.cuh) use the same shared-memory layout as the 8-warp ones.
struct KernelVariant {
  int stages;
  int n;
  bool pipe;  // S of block i+1 overlapped with the softmax of block i (needs >= 3 stages)
  int warps;  // 8: verify_main_kernel, 16: verify_main16_kernel, 9: verify_main_ws_kernel (8 math + 1 load warp)
  int mode;   // 9 warps: bit 0 L2 prefetch, bit 1 loads only, bit 2 math only (diagnostics, wrong output)
};
// (Measured on the H200 and dropped: a 2-stage 64-token tile, 4-8% slower; 4 and 5 stages
// without the S/softmax overlap, within 2% of 2 stages.)
constexpr KernelVariant kVariants[] = {
    {0, 0, false, 0, 0},  {2, 32, false, 8, 0}, {4, 32, true, 8, 0}, {2, 32, false, 16, 0},
    {4, 32, true, 16, 0}, {4, 32, true, 9, 0},  {2, 32, false, 9, 0}, {4, 32, true, 9, 1},
    {5, 32, false, 9, 1}, {3, 32, false, 9, 1}, {4, 32, true, 9, 2}, {4, 32, true, 9, 4},
    {2, 32, false, 9, 1}};
constexpr int kNumVariants = 13;
constexpr int kVariantSmall = 6;
constexpr int kVariantLarge = 5;
constexpr int variant_threads(int v) { return kVariants[v].warps * 32; }
constexpr size_t variant_smem_bytes(int v) {
  return verify_smem_bytes(kVariants[v].stages, kVariants[v].n, kVariants[v].pipe);
}
constexpr int variant_for_optin(size_t optin) {
  return optin >= variant_smem_bytes(kVariantLarge)   ? kVariantLarge
         : optin >= variant_smem_bytes(kVariantSmall) ? kVariantSmall
                                                      : 0;
}
static_assert(variant_smem_bytes(kVariantSmall) <= kSm120SmemLimit, "sm_120 config exceeds smem");
static_assert(variant_for_optin(kSm120SmemLimit) == kVariantSmall, "sm_120 must get the small config");

// Combine kernel: grid (rows, kCombineSplits) x kCombineThreads, one 128-col slice per CTA.
constexpr int kCombineThreads = 256;
constexpr int kCombineSplits = 4;
constexpr int kCombineMaxParts = 1024;  // max CTAs of the main kernel (num_ctas + 1 parts)

}  // namespace kdtree_mla
