// Host entry point of the verify kernels (no torch headers: builds with plain nvcc).
#pragma once

#include <cuda_runtime.h>

#include "params.h"

namespace kdtree_mla {

// Kernel variant (traits.h kVariants) the launcher uses on `device`; 0: none fits.
int verify_variant_for_device(int device);

// Launches the split-KV kernel and the combine kernel on `stream`. Returns the first CUDA
// error (never aborts). Launch geometry: main grid = params.num_ctas, combine grid from
// params.num_tokens * params.num_heads: never from device data.
// `parts` selects the kernels to launch (both by default; one alone only for benchmarks that
// time the two stages separately: the combine reads what the last main launch wrote);
// kLaunchNoPdl (benchmarks) launches both without programmatic dependent launch.
enum LaunchParts : int { kLaunchMain = 1, kLaunchCombine = 2, kLaunchAll = 3, kLaunchNoPdl = 4 };
cudaError_t verify_launch(const VerifyParams& params, int device, cudaStream_t stream,
                          int parts = kLaunchAll);

}  // namespace kdtree_mla
