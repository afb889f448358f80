// Host-only probe (no GPU, no CUDA runtime): prints the launch configurations the launcher
// derives from traits.h, for the compile test.
#include <cstdio>

#include "traits.h"

namespace {

using namespace kdtree_mla;

// Quarter warps of the staged merge's granule loop (verify_merge.cuh) whose 16-byte loads of one
// round fall on the same 16-byte bank group at different addresses, for slice s at `pitch`.
int conflicted_quarter_warps(const MergeSlice& s, int pitch) {
  const int units16 = pitch / 16, per_pass = VerifyTraits::kMathThreads / s.pg;
  int bad = 0;
  for (int base = 0; base < s.ng; base += per_pass)
    for (int q0 = 0; q0 < VerifyTraits::kMathThreads; q0 += 8) {
      int used = 0;
      bool clash = false;
      for (int t = q0; t < q0 + 8; ++t) {
        const int g = base + t / s.pg, sub = t & (s.pg - 1);
        if (g >= s.ng) continue;  // not live: no load
        const int group = (sub * units16 + g) & 7;  // + a part offset common to the quarter warp
        clash = clash || (used >> group & 1);
        used |= 1 << group;
      }
      bad += clash;
    }
  return bad;
}

// Every slice a fused merge can take: n parts (2 .. kMaxFusedParts), 1 .. 32 rows, ns = n
// slices or, ticketed, n - kTicketSkip. Prints the worst staging and weight bytes, the largest
// padding, the quarter warps with a bank conflict at the kernel's pitch and at a packed one.
void check_merge_slices() {
  long slices = 0, conflicts = 0, packed_conflicts = 0;
  int worst_stage = 0, worst_weights = 0, max_pad = 0, misaligned = 0;
  for (int n = 2; n <= kMaxFusedParts; ++n)
    for (int rows = 1; rows <= VerifyTraits::kBlockM; ++rows)
      for (int tick = 0; tick < 2; ++tick) {
        if (tick && n < VerifyTraits::kTicketMinParts) continue;
        const int ns = tick ? n - VerifyTraits::kTicketSkip : n;
        for (int k = 0; k < ns; ++k) {
          const MergeSlice s = merge_slice(rows, k, ns);
          if (s.ng == 0) continue;
          ++slices;
          if (s.pitch % 16 != 0 || s.pitch < s.ng * 16 || s.a0 % 4 != 0 || s.lse_n % 4 != 0) ++misaligned;
          if (merge_stage_bytes(n, s) > worst_stage) worst_stage = merge_stage_bytes(n, s);
          if (merge_weight_bytes(n, s) > worst_weights) worst_weights = merge_weight_bytes(n, s);
          if (s.pitch / 16 - s.ng > max_pad) max_pad = s.pitch / 16 - s.ng;
          conflicts += conflicted_quarter_warps(s, s.pitch);
          packed_conflicts += conflicted_quarter_warps(s, s.ng * 16);
        }
      }
  std::printf("merge_slices %ld\n", slices);
  std::printf("merge_misaligned %d\n", misaligned);
  std::printf("merge_worst_stage_bytes %d\n", worst_stage);
  std::printf("merge_worst_weight_bytes %d\n", worst_weights);
  std::printf("merge_max_pad_units %d\n", max_pad);
  std::printf("merge_conflicts %ld\n", conflicts);
  std::printf("merge_packed_conflicts %ld\n", packed_conflicts);
  std::printf("stage_bytes %d\n", VerifyTraits::kStageBytes);
  std::printf("red_bytes %d\n", VerifyTraits::kRedBytes);
}

}  // namespace

int main() {
  for (int v = 1; v < kNumVariants; ++v)
    std::printf("variant%d %d %d %zu %d %d\n", v, kVariants[v].stages, int(kVariants[v].pipe), variant_smem_bytes(v),
                kVariants[v].mode, kVariants[v].threads());
  std::printf("variant_sm120 %d\n", variant_for_optin(kSm120SmemLimit));
  std::printf("variant_sm90 %d\n", variant_for_optin(232448));
  check_merge_slices();
  return 0;
}
