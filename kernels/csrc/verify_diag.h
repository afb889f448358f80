// Diagnostic launches of the verify kernels, for benchmarks and the lab tools only (the
// product calls verify_run, verify_launch.h): one stage alone, no PDL, a forced kernel variant.
#pragma once

#include "verify_launch.h"

namespace kdtree_mla {

enum DiagParts : int {
  kLaunchMain = 1,     // the main kernel alone (the combine kernel reads what it last wrote)
  kLaunchCombine = 2,  // the combine kernel alone
  kLaunchAll = 3,
  kLaunchNoPdl = 4,    // without programmatic dependent launch
};

struct DiagLaunch {
  int parts = kLaunchAll;  // DiagParts flags
  int force_variant = 0;   // a traits.h kVariants index (e.g. sm_120's on an H200); 0: the launcher's
};

// verify_run with the diagnostic choices; a traced variant (mode 8) needs params.trace.
cudaError_t verify_run_diag(const VerifyParams& params, int device, cudaStream_t stream, const DiagLaunch& diag);

}  // namespace kdtree_mla
