// Helpers shared by the standalone CUDA probes in bench/ (launch_probe.cu, cluster_probe.cu).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

// A CUDA runtime call that must succeed: print the call and the error, and exit.
#define CHECK(x)                                                  \
  do {                                                            \
    cudaError_t e_ = (x);                                         \
    if (e_ != cudaSuccess) {                                      \
      std::printf("%s failed: %s\n", #x, cudaGetErrorString(e_)); \
      std::exit(1);                                               \
    }                                                             \
  } while (0)

// The upper median of `v` (0 for no samples).
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}
