// Launcher: picks the pipeline depth for the device, sets the smem opt-in once per device and
// kernel, launches the main and combine kernels. Host state is cached; nothing synchronises.
#include <atomic>

#include "verify_kernel.cuh"
#include "verify_launch.h"

namespace kdtree_mla {
namespace {

constexpr int kMaxDevices = 64;

struct DeviceCache {
  std::atomic<int> stages{0};  // 0 = not yet probed
  // Per kernel instantiation: its smem opt-in attribute has been set on this device.
  std::atomic<bool> attr_small{false}, attr_mid{false}, attr_large{false};
};
DeviceCache g_cache[kMaxDevices];

template <int kStages>
cudaError_t launch_main(const VerifyParams& p, std::atomic<bool>& attr_set, cudaStream_t stream) {
  constexpr size_t smem = verify_smem_bytes(kStages);
  auto kernel = detail::verify_main_kernel<kStages>;
  if (!attr_set.load(std::memory_order_acquire)) {
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(smem));
    if (e != cudaSuccess) return e;
    attr_set.store(true, std::memory_order_release);
  }
  kernel<<<p.num_ctas, VerifyTraits::kThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

int verify_stages_for_device(int device) {
  if (device < 0 || device >= kMaxDevices) return 0;
  DeviceCache& cache = g_cache[device];
  int stages = cache.stages.load(std::memory_order_acquire);
  if (stages != 0) return stages;
  int optin = 0;
  if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess)
    return 0;
  stages = stages_for_optin(static_cast<size_t>(optin));
  if (stages == 0) return 0;
  cache.stages.store(stages, std::memory_order_release);
  return stages;
}

cudaError_t verify_launch(const VerifyParams& p, int device, cudaStream_t stream, int parts) {
  int stages = verify_stages_for_device(device);
  if (p.force_stages != 0) {
    if (p.force_stages != kStagesSmall && p.force_stages != kStagesMid && p.force_stages != kStagesLarge)
      return cudaErrorInvalidValue;
    if (p.force_stages > stages) return cudaErrorInvalidConfiguration;  // would not fit
    stages = p.force_stages;
  }
  if (stages == 0) return cudaErrorInvalidConfiguration;
  if (p.batch < 1 || p.batch > VerifyTraits::kMaxBatch || p.num_ctas < 1 ||
      p.num_ctas >= kCombineMaxParts || p.num_tokens < 1)
    return cudaErrorInvalidValue;
  DeviceCache& cache = g_cache[device];
  cudaError_t e = cudaSuccess;
  if (parts & kLaunchMain) {
    if (stages == kStagesLarge)
      e = launch_main<kStagesLarge>(p, cache.attr_large, stream);
    else if (stages == kStagesMid)
      e = launch_main<kStagesMid>(p, cache.attr_mid, stream);
    else
      e = launch_main<kStagesSmall>(p, cache.attr_small, stream);
  }
  if (e != cudaSuccess) return e;
  if (!(parts & kLaunchCombine)) return cudaSuccess;
  const long long rows = static_cast<long long>(p.num_tokens) * p.num_heads;
  const unsigned gx = static_cast<unsigned>(rows < 65535 ? rows : 65535);
  // Programmatic dependent launch: the combine grid may be scheduled while the main grid
  // drains; it blocks on griddepcontrol.wait until the main grid's writes are visible.
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(gx, kCombineSplits);
  cfg.blockDim = dim3(kCombineThreads);
  cfg.dynamicSmemBytes = 0;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  e = cudaLaunchKernelEx(&cfg, detail::verify_combine_kernel, p);
  if (e != cudaSuccess) return e;
  return cudaGetLastError();
}

}  // namespace kdtree_mla
