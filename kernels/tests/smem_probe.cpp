// Host-only probe (no GPU, no CUDA runtime): prints the launch configurations the launcher
// derives from traits.h, for the compile test.
#include <cstdio>

#include "traits.h"

int main() {
  using namespace kdtree_mla;
  for (int v = 1; v < kNumVariants; ++v)
    std::printf("variant%d %d %d %zu %d %d\n", v, kVariants[v].stages, int(kVariants[v].pipe), variant_smem_bytes(v),
                kVariants[v].mode, kVariants[v].threads());
  std::printf("variant_sm120 %d\n", variant_for_optin(kSm120SmemLimit));
  std::printf("variant_sm90 %d\n", variant_for_optin(232448));
  return 0;
}
