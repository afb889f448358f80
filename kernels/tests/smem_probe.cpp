// Host-only probe (no GPU, no CUDA runtime): prints the launch configuration the launcher
// derives from traits.h, for the compile test.
#include <cstdio>

#include "traits.h"

int main() {
  using namespace kdtree_mla;
  std::printf("smem_small %zu\n", verify_smem_bytes(kStagesSmall));
  std::printf("smem_large %zu\n", verify_smem_bytes(kStagesLarge));
  std::printf("stages_sm120 %d\n", stages_for_optin(kSm120SmemLimit));
  std::printf("stages_sm90 %d\n", stages_for_optin(232448));
  std::printf("threads %d\n", VerifyTraits::kThreads);
  return 0;
}
