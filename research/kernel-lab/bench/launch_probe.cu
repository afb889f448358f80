// Host cost of one launch shaped like the verify kernel's fused call (132 CTAs of 320 threads,
// 137,472 B of dynamic shared memory, a VerifyParams argument), by launch API and attributes.
// Diagnostic for the host-path target (docs/kernel-benchmarks.md); run on the device:
//   nvcc -O2 -arch=sm_90 -o /tmp/launch_probe research/kernel-lab/bench/launch_probe.cu && /tmp/launch_probe
// Prints, per mode, the median wall time of the launch call alone (the stream synchronised
// before each sample, as research/kernel-lab/bench/host_path.py does) and of one call in bursts of 61.
//   rt    cudaLaunchKernelEx (what verify_launch.cu uses)
//   drv   cuLaunchKernelEx on the CUfunction from cudaGetFuncBySymbol (the driver entry point)
//   coop_legacy  cudaLaunchCooperativeKernel
// each plain, with PDL (programmatic stream serialization), cooperative, and both.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "../csrc/params.h"
#include "probe_util.h"

__global__ void probe_kernel(kdtree_mla::VerifyParams p) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  if (p.num_ctas < 0) p.sched[0] = 1;  // never true: keeps the argument live
}

namespace {

using LaunchEx = CUresult (*)(const CUlaunchConfig*, CUfunction, void**, void**);

struct Mode {
  const char* name;
  int api;  // 0 runtime, 1 driver, 2 legacy cooperative
  bool pdl, coop;
};

constexpr int kSmem = 137472;


struct Launcher {
  cudaStream_t stream;
  CUfunction fn;
  LaunchEx launch_ex;
  kdtree_mla::VerifyParams p{};
  int grid;

  bool go(const Mode& m) {
    if (m.api == 2) {
      void* args[] = {&p};
      return cudaLaunchCooperativeKernel(reinterpret_cast<void*>(probe_kernel), dim3(grid), dim3(320), args, kSmem,
                                         stream) == cudaSuccess;
    }
    if (m.api == 0) {
      cudaLaunchConfig_t cfg = {};
      cfg.gridDim = dim3(grid);
      cfg.blockDim = dim3(320);
      cfg.dynamicSmemBytes = kSmem;
      cfg.stream = stream;
      cudaLaunchAttribute attr[2];
      int n = 0;
      if (m.pdl) {
        attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[n++].val.programmaticStreamSerializationAllowed = 1;
      }
      if (m.coop) {
        attr[n].id = cudaLaunchAttributeCooperative;
        attr[n++].val.cooperative = 1;
      }
      cfg.attrs = attr;
      cfg.numAttrs = n;
      return cudaLaunchKernelEx(&cfg, probe_kernel, p) == cudaSuccess;
    }
    CUlaunchConfig cfg = {};
    cfg.gridDimX = grid;
    cfg.gridDimY = cfg.gridDimZ = 1;
    cfg.blockDimX = 320;
    cfg.blockDimY = cfg.blockDimZ = 1;
    cfg.sharedMemBytes = kSmem;
    cfg.hStream = reinterpret_cast<CUstream>(stream);
    CUlaunchAttribute attr[2];
    unsigned n = 0;
    if (m.pdl) {
      attr[n].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
      attr[n++].value.programmaticStreamSerializationAllowed = 1;
    }
    if (m.coop) {
      attr[n].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
      attr[n++].value.cooperative = 1;
    }
    cfg.attrs = attr;
    cfg.numAttrs = n;
    void* args[] = {&p};
    return launch_ex(&cfg, fn, args, nullptr) == CUDA_SUCCESS;
  }
};

}  // namespace

int main() {
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CHECK(cudaFuncSetAttribute(probe_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  int* scratch = nullptr;
  CHECK(cudaMalloc(&scratch, 64));
  Launcher L;
  L.grid = sms;
  L.p.sched = scratch;
  L.p.num_ctas = sms;
  cudaFunction_t f;
  CHECK(cudaGetFuncBySymbol(&f, reinterpret_cast<const void*>(probe_kernel)));
  L.fn = reinterpret_cast<CUfunction>(f);
  void* sym = nullptr;
  cudaDriverEntryPointQueryResult q;
  CHECK(cudaGetDriverEntryPointByVersion("cuLaunchKernelEx", &sym, 12000, cudaEnableDefault, &q));
  if (q != cudaDriverEntryPointSuccess || sym == nullptr) {
    std::printf("cuLaunchKernelEx entry point not found\n");
    return 1;
  }
  L.launch_ex = reinterpret_cast<LaunchEx>(sym);
  const Mode modes[] = {
      {"rt", 0, false, false},       {"rt_pdl", 0, true, false},  {"rt_coop", 0, false, true},
      {"rt_coop_pdl", 0, true, true}, {"drv", 1, false, false},   {"drv_pdl", 1, true, false},
      {"drv_coop", 1, false, true},  {"drv_coop_pdl", 1, true, true}, {"coop_legacy", 2, false, true},
  };
  constexpr int kModes = sizeof(modes) / sizeof(modes[0]);
  cudaStream_t own;
  CHECK(cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking));
  std::printf("launch_probe: %d SMs, grid %d x 320 threads, %d B dynamic smem, params %zu B\n", sms, sms, kSmem,
              sizeof(kdtree_mla::VerifyParams));
  std::printf("%-14s %-8s %12s %14s\n", "mode", "stream", "single us", "burst61 us");
  for (cudaStream_t s : {static_cast<cudaStream_t>(nullptr), own}) {
    L.stream = s;
    std::vector<double> single[kModes], burst[kModes];
    for (int m = 0; m < kModes; ++m)
      if (!L.go(modes[m])) {
        std::printf("%s: launch failed: %s\n", modes[m].name, cudaGetErrorString(cudaGetLastError()));
        return 1;
      }
    CHECK(cudaStreamSynchronize(s));
    for (int round = 0; round < 10; ++round) {
      for (int m = 0; m < kModes; ++m) {  // modes interleaved: the machine's drift hits all alike
        for (int i = 0; i < 100; ++i) {
          CHECK(cudaStreamSynchronize(s));
          auto t0 = std::chrono::steady_clock::now();
          L.go(modes[m]);
          auto t1 = std::chrono::steady_clock::now();
          single[m].push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
        }
        for (int i = 0; i < 5; ++i) {
          CHECK(cudaStreamSynchronize(s));
          auto t0 = std::chrono::steady_clock::now();
          for (int k = 0; k < 61; ++k) L.go(modes[m]);
          auto t1 = std::chrono::steady_clock::now();
          burst[m].push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / 61);
        }
      }
    }
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaGetLastError());
    for (int m = 0; m < kModes; ++m)
      std::printf("%-14s %-8s %12.2f %14.2f\n", modes[m].name, s ? "own" : "default", median(single[m]),
                  median(burst[m]));
  }
  return 0;
}
