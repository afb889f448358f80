// Compile-time configuration of the verify kernel; shared by device and host code.
#pragma once

#include <cstddef>

namespace kdtree_mla {

struct VerifyTraits {
  static constexpr int kHeadDim = 576;   // 512 latent + 64 rope
  static constexpr int kHeadDimV = 512;
  static constexpr int kBlockM = 32;     // query rows (draft token x head) per CTA tile
  static constexpr int kBlockN = 32;     // KV tokens per pipeline stage
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
  static constexpr int kStageBytes = kBlockN * kKvRowBytes;
  // Cross-k-group S reduction buffer, fp32, row padded by 8 floats against bank conflicts.
  static constexpr int kRedRowFloats = kBlockN + 8;
  static constexpr int kRedBytes = kKGroups * kBlockM * kRedRowFloats * 4;
  // P tile (bf16), row padded to 80 B for conflict-free ldmatrix.
  static constexpr int kPRowElems = kBlockN + 8;
  static constexpr int kPBytes = kBlockM * kPRowElems * 2;
  static constexpr int kRowStatBytes = 2 * kBlockM * 4;  // alpha and 1/l per row
  // Ring of prefix-token pool indices (8 B slots), filled by cp.async kStages blocks ahead of
  // the KV copies that need them, so no index load latency sits in the KV issue path.
  static constexpr int kIdxRingBlocks = 8;
  static constexpr int kIdxBytes = kIdxRingBlocks * kBlockN * 8;

  static constexpr int kMaxBatch = kRedBytes / 4 - 1;  // scheduler scan lives in the red buffer

  static_assert(kHeadDim % (16 * kKGroups) == 0, "k-groups must split 576 evenly");
  static_assert(kWarps == kKGroups * kNGroups, "warp grid");
  static_assert(kBlockN == kNGroups * 16, "each n-group covers two n8 tiles");
  static_assert(kBlockM == 32, "fragment code assumes two m16 tiles");
};

// Dynamic shared memory for a given pipeline depth.
constexpr size_t verify_smem_bytes(int stages) {
  return size_t(stages) * VerifyTraits::kStageBytes + VerifyTraits::kRedBytes +
         VerifyTraits::kPBytes + VerifyTraits::kRowStatBytes + VerifyTraits::kIdxBytes;
}

// sm_120 (RTX PRO 6000 Blackwell) opt-in limit per block; the launcher picks the deepest
// pipeline that fits the device's limit, so sm_120 gets kStagesSmall.
constexpr size_t kSm120SmemLimit = 101376;
constexpr int kStagesLarge = 5;
constexpr int kStagesMid = 4;  // benchmark variant (VerifyParams.force_stages)
constexpr int kStagesSmall = 2;
static_assert(verify_smem_bytes(kStagesSmall) <= kSm120SmemLimit, "sm_120 config exceeds smem");

// The launcher's choice for a device whose opt-in smem limit per block is `optin` (0: none fits).
constexpr int stages_for_optin(size_t optin) {
  return optin >= verify_smem_bytes(kStagesLarge)   ? kStagesLarge
         : optin >= verify_smem_bytes(kStagesSmall) ? kStagesSmall
                                                    : 0;
}
static_assert(stages_for_optin(kSm120SmemLimit) == kStagesSmall, "sm_120 must get the small config");

// Combine kernel: grid (rows, kCombineSplits) x kCombineThreads, one 64-col slice per CTA.
constexpr int kCombineThreads = 256;
constexpr int kCombineSplits = 8;
constexpr int kCombineMaxParts = 1024;  // max CTAs of the main kernel (num_ctas + 1 parts)

}  // namespace kdtree_mla
