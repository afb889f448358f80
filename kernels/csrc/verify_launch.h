// Host entry point of the verify kernels (no torch headers: builds with plain nvcc).
#pragma once

#include <cuda_runtime.h>

#include "params.h"
#include "traits.h"

namespace kdtree_mla {

// Kernel variant (traits.h kVariants) the launcher uses on `device`; 0: none fits.
int verify_variant_for_device(int device);

// Launches the split-KV kernel and, unless the main kernel merges the cut segments itself, the
// combine kernel on `stream`. Returns the first CUDA error (never aborts). Launch geometry: main
// grid = params.num_ctas, combine grid from params.num_tokens * params.num_heads: never from
// device data.
// `parts` selects the kernels to launch (both by default; one alone only for benchmarks that
// time the two stages separately: the combine reads what the last main launch wrote);
// kLaunchNoPdl (benchmarks) launches without programmatic dependent launch; kLaunchSplit merges
// in the combine kernel even where the fused merge is possible (diagnostic, A/B).
enum LaunchParts : int {
  kLaunchMain = 1,
  kLaunchCombine = 2,
  kLaunchAll = 3,
  kLaunchNoPdl = 4,
  kLaunchSplit = 8,
};
cudaError_t verify_launch(const VerifyParams& params, int device, cudaStream_t stream,
                          int parts = kLaunchAll);

// Whether the main kernel merges cut segments itself (one cooperative launch, no combine
// kernel): the grid fits one CTA a multiprocessor, the workspace has the counters, and the
// caller did not ask for the combine kernel.
// (At most kMaxFusedParts CTAs: a merge holds every part's LSE of a row in one warp.)
inline bool fused_merge(int num_ctas, int sms, int parts, bool have_sync) {
  return !(parts & kLaunchSplit) && have_sync && num_ctas <= sms && num_ctas <= kMaxFusedParts;
}
// The same for a launch on `device` (reads its multiprocessor count; false when unreadable).
bool verify_merge_fused(int device, int num_ctas, int parts);
// Whether fused launches on `device` use PDL: 0 none made yet, 1 yes, 2 the driver refused the
// cooperative + PDL pair (they launch without PDL).
int verify_fused_pdl(int device);

}  // namespace kdtree_mla
