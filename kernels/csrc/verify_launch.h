// Host entry point of the verify kernels (no torch headers: builds with plain nvcc). One call
// for the product: verify_run. Benchmarks and lab tools launch through verify_diag.h instead.
#pragma once

#include <cuda_runtime.h>

#include "params.h"
#include "traits.h"

namespace kdtree_mla {

// Kernel variant (traits.h kVariants) the launcher uses on `device`; 0: none (a device that is
// neither sm_90 nor sm_120 family, or whose shared memory fits no variant).
int verify_variant_for_device(int device);

// Why verify_variant_for_device(device) is 0, for a message: 1 the architecture is not one this
// kernel targets (sm_90, sm_120), 2 no variant fits the shared memory, 0 it is not 0.
int verify_unsupported_reason(int device);

// Loads the device's kernels and sets their shared-memory opt-in (what the first launch would
// otherwise do), so that the first call may be made while a stream is being captured into a
// CUDA graph. Returns the first CUDA error.
cudaError_t verify_prepare(int device);

// One verify call on `stream`: the split-KV kernel and, unless the main kernel merges the cut
// segments itself, the combine kernel. Returns the first CUDA error (never aborts). Launch
// geometry: main grid = params.num_ctas, combine grid from params.num_tokens *
// params.num_heads: never from device data. CUDA-graph safe, the first call included
// (a first call made during capture launches without PDL; see verify_launch.cu).
cudaError_t verify_run(const VerifyParams& params, int device, cudaStream_t stream);

// Whether the main kernel merges cut segments itself (one cooperative launch, no combine
// kernel): the grid fits one CTA a multiprocessor, the workspace has the counters, and the
// caller did not ask for the combine kernel (VerifyParams::split_combine).
// (At most kMaxFusedParts CTAs: a merge holds every part's LSE of a row in one warp.)
inline bool fused_merge(int num_ctas, int sms, bool split_combine, bool have_sync) {
  return !split_combine && have_sync && num_ctas <= sms && num_ctas <= kMaxFusedParts;
}
// The same for a launch on `device` (reads its multiprocessor count; false when unreadable).
bool verify_merge_fused(int device, int num_ctas, bool split_combine);
// Whether fused launches on `device` use PDL: 0 none made yet, 1 yes, 2 the driver refused the
// cooperative + PDL pair (they launch without PDL).
int verify_fused_pdl(int device);

}  // namespace kdtree_mla
