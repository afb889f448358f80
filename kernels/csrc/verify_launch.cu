// Launcher: picks the pipeline depth for the device, sets the smem opt-in once per device and
// kernel, launches the main and combine kernels. Host state is cached; nothing synchronises.
#include <atomic>
#include <utility>

#include "verify_combine.cuh"
#include "verify_diag.h"
#include "verify_main.cuh"
#include "verify_launch.h"

namespace kdtree_mla {
namespace {

constexpr int kMaxDevices = 64;

struct DeviceCache {
  std::atomic<int> variant{0};  // 0 = not yet probed
  std::atomic<int> sms{0};      // multiprocessors (0 = not yet read)
  // Cooperative launches (fused merge) with PDL: 0 not yet tried, 1 accepted, 2 refused.
  std::atomic<int> coop_pdl{0};
  // Per kernel variant and KV dtype: its smem opt-in attribute has been set on this device.
  std::atomic<bool> attr_set[kNumVariants][kNumKvDtypes] = {};
};
DeviceCache g_cache[kMaxDevices];

// Launches `kernel` on `stream`; with `pdl`, as a programmatic dependent of the kernel before it
// in the stream (scheduled while that one drains; both our kernels execute griddepcontrol.wait
// before reading anything another kernel writes); with `coop`, as a cooperative grid (every
// CTA co-resident: the fused merge waits on other CTAs).
cudaError_t launch(void (*kernel)(VerifyParams), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                   const VerifyParams& p, bool pdl, bool coop = false) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[2];
  int n = 0;
  if (pdl) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (coop) {
    attr[n].id = cudaLaunchAttributeCooperative;
    attr[n++].val.cooperative = 1;
  }
  cfg.attrs = attr;
  cfg.numAttrs = n;
  // The launch's own status; a failed launch's error is also cleared from the thread's last
  // error, so the caller's next CUDA call does not report it again (we raise it ourselves).
  const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, p);
  if (e != cudaSuccess) cudaGetLastError();
  return e;
}

// Sets a main kernel's shared-memory opt-in on the current device, once (which also loads its
// module under lazy loading).
template <int kStages, bool kPipe, int kMode, int kLoaders, int kKv>
cudaError_t main_attr(std::atomic<bool>& attr_set) {
  if (attr_set.load(std::memory_order_acquire)) return cudaSuccess;
  const cudaError_t e = cudaFuncSetAttribute(detail::verify_main_kernel<kStages, kPipe, kMode, kLoaders, kKv>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(verify_smem_bytes(kStages, kPipe)));
  if (e == cudaSuccess) attr_set.store(true, std::memory_order_release);
  return e;
}

// Whether `stream` is being captured into a graph (a failed launch there would end the capture).
bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(stream, &st) == cudaSuccess && st != cudaStreamCaptureStatusNone;
}

template <int kStages, bool kPipe, int kMode, int kLoaders, int kKv>
cudaError_t launch_main(const VerifyParams& p, std::atomic<bool>& attr_set, std::atomic<int>& coop_pdl,
                        cudaStream_t stream, bool pdl) {
  const bool coop = p.fused != 0;
  constexpr size_t smem = verify_smem_bytes(kStages, kPipe);
  auto kernel = detail::verify_main_kernel<kStages, kPipe, kMode, kLoaders, kKv>;
  if (const cudaError_t e = main_attr<kStages, kPipe, kMode, kLoaders, kKv>(attr_set); e != cudaSuccess) return e;
  const dim3 grid(p.num_ctas), block(kMainThreads<kLoaders>);
  const int state = coop ? coop_pdl.load(std::memory_order_acquire) : 1;
  if (!pdl || state != 0) return launch(kernel, grid, block, smem, stream, p, pdl && state == 1, coop);
  // Not yet known whether the driver takes a cooperative launch with PDL on this device. Under
  // capture a refused launch would invalidate the graph, so this one goes without PDL (the same
  // grid and result; PDL only lets it be scheduled earlier) and the question waits for an eager
  // call. Eagerly: try the pair, and if the driver refuses it, launch without PDL from now on.
  if (capturing(stream)) return launch(kernel, grid, block, smem, stream, p, false, true);
  cudaError_t e = launch(kernel, grid, block, smem, stream, p, true, true);
  if (e == cudaSuccess) {
    coop_pdl.store(1, std::memory_order_release);
    return e;
  }
  e = launch(kernel, grid, block, smem, stream, p, false, true);
  if (e == cudaSuccess) coop_pdl.store(2, std::memory_order_release);
  return e;
}

// Launches the main kernel of variant `v` (1 .. kNumVariants - 1) for the call's KV dtype: the
// kVariants entry's instantiation, so the list in traits.h is the only one (fp8: only the
// variants variant_has_fp8 names are compiled for it; others return cudaErrorInvalidValue).
template <size_t... kV>
cudaError_t launch_variant(int v, const VerifyParams& p, DeviceCache& cache, cudaStream_t stream, bool pdl,
                           std::index_sequence<kV...>) {
  cudaError_t e = cudaErrorInvalidValue;
  auto one = [&](auto idx) {
    constexpr int kIdx = decltype(idx)::value;
    if constexpr (kIdx > 0) {  // entry 0: "none fits", no kernel
      constexpr KernelVariant kv = kVariants[kIdx];
      if (v == kIdx) {
        if (p.kv_dtype == kKvBf16)
          e = launch_main<kv.stages, kv.pipe, kv.mode, kv.loaders, kKvBf16>(p, cache.attr_set[kIdx][kKvBf16],
                                                                             cache.coop_pdl, stream, pdl);
        if constexpr (variant_has_fp8(kIdx)) {
          if (p.kv_dtype == kKvE4m3)
            e = launch_main<kv.stages, kv.pipe, kv.mode, kv.loaders, kKvE4m3>(p, cache.attr_set[kIdx][kKvE4m3],
                                                                               cache.coop_pdl, stream, pdl);
          else if (p.kv_dtype == kKvE5m2)
            e = launch_main<kv.stages, kv.pipe, kv.mode, kv.loaders, kKvE5m2>(p, cache.attr_set[kIdx][kKvE5m2],
                                                                               cache.coop_pdl, stream, pdl);
        }
      }
    }
  };
  (one(std::integral_constant<int, static_cast<int>(kV)>{}), ...);
  return e;
}

// Sets the shared-memory opt-in of variant `v`'s main kernels (every KV dtype compiled for it)
// on the current device.
template <size_t... kV>
cudaError_t prepare_variant(int v, DeviceCache& cache, std::index_sequence<kV...>) {
  cudaError_t e = cudaSuccess;
  auto one = [&](auto idx) {
    constexpr int kIdx = decltype(idx)::value;
    if constexpr (kIdx > 0) {
      constexpr KernelVariant kv = kVariants[kIdx];
      if (v == kIdx && e == cudaSuccess) {
        e = main_attr<kv.stages, kv.pipe, kv.mode, kv.loaders, kKvBf16>(cache.attr_set[kIdx][kKvBf16]);
        if constexpr (variant_has_fp8(kIdx)) {
          if (e == cudaSuccess)
            e = main_attr<kv.stages, kv.pipe, kv.mode, kv.loaders, kKvE4m3>(cache.attr_set[kIdx][kKvE4m3]);
          if (e == cudaSuccess)
            e = main_attr<kv.stages, kv.pipe, kv.mode, kv.loaders, kKvE5m2>(cache.attr_set[kIdx][kKvE5m2]);
        }
      }
    }
  };
  (one(std::integral_constant<int, static_cast<int>(kV)>{}), ...);
  return e;
}

// The kernel targets the sm_90 and sm_120 families only: another architecture (sm_100, say)
// with enough shared memory would otherwise be given a variant never built or tested for it.
bool target_arch(int device) {
  int major = 0;
  return cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
         (major == 9 || major == 12);
}

// Multiprocessors of `device` (read once; 0 when unreadable).
int device_sms(int device) {
  if (device < 0 || device >= kMaxDevices) return 0;
  std::atomic<int>& cached = g_cache[device].sms;
  int sms = cached.load(std::memory_order_acquire);
  if (sms == 0 && cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) == cudaSuccess)
    cached.store(sms, std::memory_order_release);
  return sms;
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
  if (!target_arch(device)) return 0;
  int optin = 0;
  if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess)
    return 0;
  v = variant_for_optin(static_cast<size_t>(optin));
  if (v == 0) return 0;
  cache.variant.store(v, std::memory_order_release);
  return v;
}

int verify_unsupported_reason(int device) {
  if (verify_variant_for_device(device) != 0) return 0;
  return device >= 0 && device < kMaxDevices && !target_arch(device) ? 1 : 2;
}

cudaError_t verify_prepare(int device) {
  const int v = verify_variant_for_device(device);
  if (v == 0) return cudaErrorInvalidConfiguration;
  int current = 0;
  cudaError_t e = cudaGetDevice(&current);
  if (e != cudaSuccess) return e;
  if (current != device && (e = cudaSetDevice(device)) != cudaSuccess) return e;
  e = prepare_variant(v, g_cache[device], std::make_index_sequence<kNumVariants>{});
  cudaFuncAttributes attrs;  // loads the combine kernel's module too
  if (e == cudaSuccess) e = cudaFuncGetAttributes(&attrs, detail::verify_combine_kernel<false>);
  if (current != device) cudaSetDevice(current);
  return e;
}

bool verify_merge_fused(int device, int num_ctas, bool split_combine) {
  return fused_merge(num_ctas, device_sms(device), split_combine, true);
}

int verify_fused_pdl(int device) {
  return device < 0 || device >= kMaxDevices ? 0 : g_cache[device].coop_pdl.load(std::memory_order_acquire);
}

namespace {

cudaError_t run(const VerifyParams& p, int device, cudaStream_t stream, int parts, int force_variant) {
  int v = verify_variant_for_device(device);
  if (v == 0) return cudaErrorInvalidConfiguration;
  if (force_variant != 0) {
    if (force_variant < 1 || force_variant >= kNumVariants) return cudaErrorInvalidValue;
    int optin = 0;
    cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
    if (variant_smem_bytes(force_variant) > static_cast<size_t>(optin)) return cudaErrorInvalidConfiguration;
    v = force_variant;
  }
  if ((kVariants[v].mode & kModeTrace) && p.trace == nullptr) return cudaErrorInvalidValue;
  if (p.batch < 1 || p.batch > VerifyTraits::kMaxBatch || p.num_ctas < 1 ||
      p.num_ctas >= kCombineMaxParts || p.num_tokens < 1)
    return cudaErrorInvalidValue;
  DeviceCache& cache = g_cache[device];
  const bool pdl = !(parts & kLaunchNoPdl);
  // Fused merge: every main CTA must be co-resident, one a multiprocessor (the launch is
  // cooperative, so the driver guarantees it or fails the launch).
  const int sms = device_sms(device);
  if (sms == 0) return cudaErrorInvalidDevice;
  VerifyParams pf = p;
  pf.fused = fused_merge(p.num_ctas, sms, p.split_combine != 0, p.sync != nullptr) ? 1 : 0;
  if (pf.fused && (parts & kLaunchCombine) && !(parts & kLaunchMain)) return cudaErrorInvalidValue;
  cudaError_t e = cudaSuccess;
  if (parts & kLaunchMain) e = launch_variant(v, pf, cache, stream, pdl, std::make_index_sequence<kNumVariants>{});
  if (e != cudaSuccess) return e;
  if (!(parts & kLaunchCombine) || pf.fused) return cudaSuccess;
  const long long rows = static_cast<long long>(p.num_tokens) * p.num_heads;
  VerifyParams pc = pf;
  pc.combine_wpr = combine_warps_per_row(p.num_ctas, rows);
  const int rows_per_cta = kCombineThreads / 32 / pc.combine_wpr;
  const long long groups = (rows + rows_per_cta - 1) / rows_per_cta;
  const unsigned gx = static_cast<unsigned>(groups < 65535 ? groups : 65535);
  // The combine grid may be scheduled while the main grid drains (PDL); it blocks on
  // griddepcontrol.wait until the main grid's writes are visible.
  auto combine = detail::verify_combine_kernel<false>;
  if constexpr (kDiagBuild) {  // the traced combine kernel exists in the diagnostic build only
    if (kVariants[v].mode & kModeTrace) combine = detail::verify_combine_kernel<kDiagBuild>;
  }
  return launch(combine, dim3(gx, kCombineSplits), dim3(kCombineThreads), 0, stream, pc, pdl);
}

}  // namespace

cudaError_t verify_run(const VerifyParams& p, int device, cudaStream_t stream) {
  return run(p, device, stream, kLaunchAll, 0);
}

cudaError_t verify_run_diag(const VerifyParams& p, int device, cudaStream_t stream, const DiagLaunch& diag) {
  return run(p, device, stream, diag.parts, diag.force_variant);
}

}  // namespace kdtree_mla
