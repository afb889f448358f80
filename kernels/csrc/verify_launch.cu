// Launcher: picks the pipeline depth for the device, sets the smem opt-in once per device and
// kernel, launches the main and combine kernels. Host state is cached; nothing synchronises.
#include <atomic>

#include "verify_combine.cuh"
#include "verify_main.cuh"
#include "verify_launch.h"

namespace kdtree_mla {
namespace {

constexpr int kMaxDevices = 64;

struct DeviceCache {
  std::atomic<int> variant{0};  // 0 = not yet probed
  // Per kernel variant: its smem opt-in attribute has been set on this device.
  std::atomic<bool> attr_set[kNumVariants] = {};
};
DeviceCache g_cache[kMaxDevices];

// Launches `kernel` on `stream`; with `pdl`, as a programmatic dependent of the kernel before it
// in the stream (scheduled while that one drains; both our kernels execute griddepcontrol.wait
// before reading anything another kernel writes).
cudaError_t launch(void (*kernel)(VerifyParams), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                   const VerifyParams& p, bool pdl) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, p);
  return e != cudaSuccess ? e : cudaGetLastError();
}

template <int kStages, bool kPipe, int kMode, int kLoaders = 1>
cudaError_t launch_main(const VerifyParams& p, std::atomic<bool>& attr_set, cudaStream_t stream, bool pdl) {
  constexpr size_t smem = verify_smem_bytes(kStages, kPipe);
  auto kernel = detail::verify_main_kernel<kStages, kPipe, kMode, kLoaders>;
  if (!attr_set.load(std::memory_order_acquire)) {
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(smem));
    if (e != cudaSuccess) return e;
    attr_set.store(true, std::memory_order_release);
  }
  return launch(kernel, dim3(p.num_ctas), dim3(kMainThreads<kLoaders>), smem, stream, p, pdl);
}

// Warps of the combine kernel on one output row: enough that one round of kCombineBatch parts a
// warp covers a typical cut segment, which has about num_ctas * 32 / rows parts (the grid's
// CTAs share the rows' KV work evenly), plus one for a boundary. From shapes only.
int combine_warps_per_row(int num_ctas, long long rows) {
  const long long parts = (static_cast<long long>(num_ctas) * VerifyTraits::kBlockM + rows - 1) / rows + 1;
  int wpr = 1;
  while (wpr < kCombineThreads / 32 && wpr * kCombineBatch < parts) wpr *= 2;
  return wpr;
}

}  // namespace

int verify_variant_for_device(int device) {
  if (device < 0 || device >= kMaxDevices) return 0;
  DeviceCache& cache = g_cache[device];
  int v = cache.variant.load(std::memory_order_acquire);
  if (v != 0) return v;
  int optin = 0;
  if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess)
    return 0;
  v = variant_for_optin(static_cast<size_t>(optin));
  if (v == 0) return 0;
  cache.variant.store(v, std::memory_order_release);
  return v;
}

cudaError_t verify_launch(const VerifyParams& p, int device, cudaStream_t stream, int parts) {
  int v = verify_variant_for_device(device);
  if (v == 0) return cudaErrorInvalidConfiguration;
  if (p.force_variant != 0) {
    if (p.force_variant < 1 || p.force_variant >= kNumVariants) return cudaErrorInvalidValue;
    int optin = 0;
    cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
    if (variant_smem_bytes(p.force_variant) > static_cast<size_t>(optin)) return cudaErrorInvalidConfiguration;
    v = p.force_variant;
  }
  if ((kVariants[v].mode & kModeTrace) && p.trace == nullptr) return cudaErrorInvalidValue;
  if (p.batch < 1 || p.batch > VerifyTraits::kMaxBatch || p.num_ctas < 1 ||
      p.num_ctas >= kCombineMaxParts || p.num_tokens < 1)
    return cudaErrorInvalidValue;
  DeviceCache& cache = g_cache[device];
  const bool pdl = !(parts & kLaunchNoPdl);
  cudaError_t e = cudaSuccess;
  if (parts & kLaunchMain) {
    switch (v) {
      case 1: e = launch_main<2, false, 0>(p, cache.attr_set[1], stream, pdl); break;
      case 2: e = launch_main<4, true, 0>(p, cache.attr_set[2], stream, pdl); break;
      case 3: e = launch_main<3, false, 0>(p, cache.attr_set[3], stream, pdl); break;
      case 4: e = launch_main<5, false, 0>(p, cache.attr_set[4], stream, pdl); break;
      case 5: e = launch_main<4, true, 2>(p, cache.attr_set[5], stream, pdl); break;
      case 6: e = launch_main<4, true, 4>(p, cache.attr_set[6], stream, pdl); break;
      case 7: e = launch_main<4, true, kModeTrace>(p, cache.attr_set[7], stream, pdl); break;
      case 8: e = launch_main<4, true, 0, 2>(p, cache.attr_set[8], stream, pdl); break;
      case 9: e = launch_main<2, false, 0, 2>(p, cache.attr_set[9], stream, pdl); break;
      case 10: e = launch_main<3, false, kModeTrace, 2>(p, cache.attr_set[10], stream, pdl); break;
      case 11: e = launch_main<3, false, 0, 2>(p, cache.attr_set[11], stream, pdl); break;
      default: return cudaErrorInvalidValue;
    }
  }
  if (e != cudaSuccess) return e;
  if (!(parts & kLaunchCombine)) return cudaSuccess;
  const long long rows = static_cast<long long>(p.num_tokens) * p.num_heads;
  VerifyParams pc = p;
  pc.combine_wpr = combine_warps_per_row(p.num_ctas, rows);
  const int rows_per_cta = kCombineThreads / 32 / pc.combine_wpr;
  const long long groups = (rows + rows_per_cta - 1) / rows_per_cta;
  const unsigned gx = static_cast<unsigned>(groups < 65535 ? groups : 65535);
  // The combine grid may be scheduled while the main grid drains (PDL); it blocks on
  // griddepcontrol.wait until the main grid's writes are visible.
  auto combine = kVariants[v].mode & kModeTrace ? detail::verify_combine_kernel<true>
                                                : detail::verify_combine_kernel<false>;
  return launch(combine, dim3(gx, kCombineSplits), dim3(kCombineThreads), 0, stream, pc, pdl);
}

}  // namespace kdtree_mla
