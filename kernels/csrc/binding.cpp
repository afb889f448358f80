// Thin torch binding: checks every tensor argument, fills VerifyParams, launches.
// No C++ exception leaves this file: a failed check or launch yields "<Kind>: <message>"
// (Kind = ValueError, TypeError or RuntimeError), which the call's entry point raises as that
// Python exception. (On the H200 image the first version, which threw c10::Error via
// TORCH_CHECK, crashed the process with SIGSEGV on its argument-error test; the suspected cause
// is the exception crossing into torch's pybind11 translator. Returning the message avoids
// exceptions.)
// The per-call entry point, verify_fwd, is a plain CPython METH_FASTCALL function rather than a
// pybind11 one: it runs on every layer of every eager step, and pybind11's dispatch of its 14
// arguments cost more than the checks themselves (research/kernel-history.md).
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/extension.h>

#include <cmath>
#include <optional>
#include <string>
#include <tuple>

#include "params.h"
#include "traits.h"
#include "verify_diag.h"
#include "verify_launch.h"

namespace kdtree_mla {
namespace {

using at::Tensor;
using Err = std::string;  // empty: ok

// Message assembly by plain std::string appends: no iostreams (c10::str uses ostringstream,
// whose inline code is the suspect of the crash described at the top of this file).
inline void put(std::string& s, const char* x) { s += x; }
inline void put(std::string& s, const std::string& x) { s += x; }
inline void put(std::string& s, int x) { s += std::to_string(x); }
inline void put(std::string& s, long x) { s += std::to_string(x); }
inline void put(std::string& s, long long x) { s += std::to_string(x); }
inline void put(std::string& s, unsigned long x) { s += std::to_string(x); }
inline void put(std::string& s, const at::Device& d) {
  s += d.is_cuda() ? "cuda:" + std::to_string(static_cast<int>(d.index())) : std::string(c10::DeviceTypeName(d.type(), true));
}
inline void put(std::string& s, at::ScalarType t) { s += c10::toString(t); }
template <typename... Args>
std::string cat(const Args&... args) {
  std::string s;
  (put(s, args), ...);
  return s;
}

#define KD_CHECK(cond, kind, ...) \
  do {                              \
    if (!(cond)) return cat(kind ": ", __VA_ARGS__); \
  } while (0)
#define KD_CHECK_VALUE(cond, ...) KD_CHECK(cond, "ValueError", __VA_ARGS__)
#define KD_CHECK_TYPE(cond, ...) KD_CHECK(cond, "TypeError", __VA_ARGS__)
#define KD_TRY(expr)                 \
  do {                               \
    Err e_ = (expr);                 \
    if (!e_.empty()) return e_;      \
  } while (0)

std::string shape_str(const Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

// The head counts the kernel supports (kdtree_mla.api.SUPPORTED_HEADS).
inline bool supported_heads(int64_t h) { return h == 8 || h == 16 || h == 32 || h == 64 || h == 128; }

Err check_cuda(const Tensor& t, const char* name, const at::Device& dev) {
  KD_CHECK_VALUE(t.is_cuda(), name, ": must be a CUDA tensor (got ", t.device(), ")");
  KD_CHECK_VALUE(t.device() == dev, name, ": must be on ", dev, " like q (got ", t.device(), ")");
  return {};
}

// `dtype`: the element type t must have (the KV pool's may be fp8 or its uint8 storage).
Err check_bf16_rows(const Tensor& t, const char* name, const at::Device& dev, int64_t d1,
                    int64_t last, int64_t rows, at::ScalarType dtype = at::kBFloat16) {
  KD_TRY(check_cuda(t, name, dev));
  KD_CHECK_TYPE(t.scalar_type() == dtype, name, ": must be ",
                dtype == at::kBFloat16 ? std::string("bfloat16") : std::string(c10::toString(dtype)), " (got ",
                t.scalar_type(), ")");
  KD_CHECK_VALUE(t.dim() == 3 && (d1 < 0 || t.size(1) == d1) && t.size(2) == last &&
                        (rows < 0 || t.size(0) == rows),
                    name, ": expected shape [", rows < 0 ? std::string("N") : std::to_string(rows),
                    ", ", d1 < 0 ? std::string("H") : std::to_string(d1), ", ", last, "] (got ",
                    shape_str(t), ")");
  KD_CHECK_VALUE(t.stride(2) == 1, name, ": last dimension must be contiguous (stride ",
                 t.stride(2), ")");
  return {};
}

// Sets *is64 when t holds int64.
Err check_index(const Tensor& t, const char* name, const at::Device& dev, int64_t numel, bool* is64) {
  KD_TRY(check_cuda(t, name, dev));
  KD_CHECK_TYPE(t.scalar_type() == at::kInt || t.scalar_type() == at::kLong, name,
                   ": must be int32 or int64 (got ", t.scalar_type(), ")");
  KD_CHECK_VALUE(t.dim() == 1 && t.is_contiguous(), name, ": must be a contiguous 1-D tensor (got ",
                    shape_str(t), ")");
  KD_CHECK_VALUE(numel < 0 || t.numel() == numel, name, ": expected ", numel,
                    " elements (B+1) (got ", t.numel(), ")");
  *is64 = t.scalar_type() == at::kLong;
  return {};
}

// Device scratch of one kdtree_mla.api.VerifyWorkspace, handed over once (the workspace
// allocates and shapes these tensors itself) so a call passes one object instead of eight
// arguments: the host path of every layer's call is part of the eager step time. The tensors
// are fixed for the handle's life, so they are checked once, when it is made (`error`); a call
// only compares devices and sizes.
struct WorkspaceHandle {
  Tensor part_o, part_lse, sched, tokinfo, sync;
  int64_t num_ctas = 0;
  uint64_t ctas_recip = 0;  // floor((2^64 - 1) / num_ctas), VerifyParams::ctas_recip (set once)
  int64_t min_blocks_per_cta = 1;
  bool split_combine = false;  // merge cut segments in the combine kernel (VerifyParams::split_combine)
  // Diagnostics (verify_diag.h), set only through kdtree_mla._diag: the parts launched, a
  // forced kernel variant (0: the launcher's), the trace buffer of a traced variant (int64
  // [kTraceRows, kTraceSlots]).
  int64_t launch_parts = kLaunchAll;
  int64_t force_variant = 0;
  Tensor trace;
  Err error;                          // why the tensors are unusable; empty when they are fine
  at::Device device{at::kCPU};
  int64_t max_tokens = 0, max_batch = 0, num_heads = 0;
};

Err check_workspace_tensors(const WorkspaceHandle& w) {
  KD_CHECK_VALUE(w.num_ctas >= 1 && w.num_ctas < kCombineMaxParts, "workspace: num_ctas must be in 1..",
                 kCombineMaxParts - 1, " (got ", w.num_ctas, ")");
  KD_CHECK_VALUE(supported_heads(w.num_heads), "workspace: num_heads must be one of 8, 16, 32, 64, 128 (got ",
                 w.num_heads, ")");
  KD_CHECK_VALUE(w.part_o.defined() && w.part_o.is_cuda(), "workspace.partial_o: must be a CUDA tensor");
  for (const auto& [t, name] : {std::pair<const Tensor&, const char*>{w.part_lse, "workspace.partial_lse"},
                                std::pair<const Tensor&, const char*>{w.sched, "workspace.sched"},
                                std::pair<const Tensor&, const char*>{w.tokinfo, "workspace.tokinfo"},
                                std::pair<const Tensor&, const char*>{w.sync, "workspace.sync"}}) {
    KD_CHECK_VALUE(t.defined() && t.device() == w.part_o.device(), name, ": must be on ", w.part_o.device(),
                   " like workspace.partial_o");
  }
  KD_CHECK_VALUE(w.part_o.scalar_type() == at::kBFloat16 && w.part_o.is_contiguous() &&
                     w.part_o.numel() >= 2 * w.num_ctas * VerifyTraits::kBlockM * VerifyTraits::kHeadDimV &&
                     reinterpret_cast<uintptr_t>(w.part_o.data_ptr()) % 16 == 0,
                 "workspace.partial_o: must be contiguous 16-byte aligned bfloat16 [2*num_ctas, 32, 512]");
  KD_CHECK_VALUE(w.part_lse.scalar_type() == at::kFloat && w.part_lse.is_contiguous() &&
                     w.part_lse.numel() >= 2 * w.num_ctas * VerifyTraits::kBlockM,
                 "workspace.partial_lse: must be contiguous float32 [2*num_ctas, 32]");
  KD_CHECK_VALUE(w.sched.scalar_type() == at::kInt && w.sched.is_contiguous() && w.sched.numel() >= 4,
                 "workspace.sched: must be contiguous int32 [max_batch + 3]");
  KD_CHECK_VALUE(w.tokinfo.scalar_type() == at::kInt && w.tokinfo.is_contiguous() && w.tokinfo.numel() >= 4 &&
                     reinterpret_cast<uintptr_t>(w.tokinfo.data_ptr()) % 16 == 0,
                 "workspace.tokinfo: must be contiguous 16-byte aligned int32 [max_tokens, 4]");
  KD_CHECK_VALUE(w.sync.scalar_type() == at::kLong && w.sync.is_contiguous() &&
                     w.sync.numel() >= 2 + (2 + VerifyTraits::kPlanWords) * w.num_ctas &&
                     reinterpret_cast<uintptr_t>(w.sync.data_ptr()) % 16 == 0,
                 "workspace.sync: must be contiguous 16-byte aligned int64 [2 + ", 2 + VerifyTraits::kPlanWords,
                 "*num_ctas] (zeros when allocated)");
  return {};
}

Err check_workspace(const WorkspaceHandle& w, const at::Device& dev, int64_t T, int64_t H) {
  if (!w.error.empty()) return w.error;
  KD_CHECK_VALUE(w.device == dev, "workspace: allocated on ", w.device, ", q is on ", dev);
  KD_CHECK_VALUE(T <= w.max_tokens, "q: T=", T, " exceeds the workspace's max_tokens=", w.max_tokens);
  KD_CHECK_VALUE(H == w.num_heads, "q: H=", H, " but the workspace is declared for num_heads=", w.num_heads);
  if (kVariants[w.force_variant > 0 && w.force_variant < kNumVariants ? w.force_variant : 0].mode & kModeTrace) {
    const Tensor& t = w.trace;
    KD_CHECK_VALUE(t.defined() && t.device() == dev && t.scalar_type() == at::kLong && t.is_contiguous() &&
                       t.numel() >= int64_t(kTraceRows) * kTraceSlots,
                   "workspace.trace: a traced variant needs a contiguous int64 [", kTraceRows, ", ", kTraceSlots,
                   "] tensor on ", dev);
  }
  return {};
}

// The KV pool's element type (params.h KvDtype) from k_buffer's dtype and the kv_dtype code the
// API passes (0: none given; 1 e4m3, 2 e5m2: required for a uint8 pool, else it must agree).
Err kv_dtype_of(const Tensor& k_buffer, int64_t code, int* kv) {
  const at::ScalarType st = k_buffer.scalar_type();
  KD_CHECK_VALUE(code >= 0 && code <= 2, "kv_dtype: must be None, torch.float8_e4m3fn or torch.float8_e5m2");
  if (st == at::kBFloat16) {
    KD_CHECK_VALUE(code == 0, "kv_dtype: given as an fp8 type, but k_buffer is bfloat16");
    *kv = kKvBf16;
  } else if (st == at::kFloat8_e4m3fn || st == at::kFloat8_e5m2) {
    *kv = st == at::kFloat8_e4m3fn ? kKvE4m3 : kKvE5m2;
    KD_CHECK_VALUE(code == 0 || code == *kv, "kv_dtype: disagrees with k_buffer's dtype ", st);
  } else if (st == at::kByte) {
    KD_CHECK_VALUE(code != 0, "k_buffer: a uint8 pool needs kv_dtype=torch.float8_e4m3fn or torch.float8_e5m2");
    *kv = static_cast<int>(code);
  } else {
    return cat("TypeError: k_buffer: must be bfloat16, float8_e4m3fn, float8_e5m2 or uint8 with kv_dtype (got ",
               st, ")");
  }
  return {};
}

// A descale: a Python float or a 1-element float32 tensor on the device (read by the kernel; no
// host sync), required for an fp8 pool (its values are K / k_scale: a silent 1.0 would scale
// every logit wrongly); None (or 1.0) for a bfloat16 pool. Sets *value or *ptr.
Err descale_of(PyObject* obj, const char* name, const at::Device& dev, bool fp8, float* value, const float** ptr);

// Why the kernel cannot run on `device`, as a RuntimeError; empty when it can.
Err check_device_supported(int device) {
  switch (verify_unsupported_reason(device)) {
    case 0:
      return {};
    case 1: {
      int major = 0, minor = 0;
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
      cudaGetLastError();
      return cat("RuntimeError: kdtree_mla: the device is sm_", major, minor,
                 "; this kernel targets sm_90 and the sm_120 family only (build with TORCH_CUDA_ARCH_LIST=\"9.0;12.0\")");
    }
    default:
      return "RuntimeError: kdtree_mla: no kernel variant fits the device's shared memory per block";
  }
}

// custom_mask, mask_indptr and lse may be null (None).
Err check_and_launch(const Tensor& q, const Tensor& k_extend, const Tensor& v_extend, const Tensor& o,
                     const Tensor& k_buffer, const Tensor& v_buffer, const Tensor& qo_indptr,
                     const Tensor& kv_indptr, const Tensor& kv_indices, const Tensor* custom_mask,
                     const Tensor* mask_indptr, double sm_scale, const Tensor* lse, const WorkspaceHandle& ws,
                     PyObject* k_descale, PyObject* v_descale, int64_t kv_code) {
  using Tr = VerifyTraits;
  KD_CHECK_VALUE(q.is_cuda(), "q: must be a CUDA tensor (got ", q.device(), ")");
  const at::Device dev = q.device();
  KD_TRY(check_bf16_rows(q, "q", dev, -1, Tr::kHeadDim, -1));
  const int64_t T = q.size(0), H = q.size(1);
  KD_CHECK_VALUE(std::isfinite(sm_scale) && sm_scale > 0.0,
                 "sm_scale: must be a positive finite float (got ", std::to_string(sm_scale), ")");
  KD_CHECK_VALUE(supported_heads(H), "q: H must be one of 8, 16, 32, 64, 128 (got ", H, ")");
  KD_CHECK_VALUE(T >= 1, "q: needs at least one token (got T=0)");
  KD_CHECK_VALUE(q.stride(0) % 8 == 0 && q.stride(1) % 8 == 0 &&
                        reinterpret_cast<uintptr_t>(q.data_ptr()) % 16 == 0,
                    "q: rows must be 16-byte aligned (strides multiple of 8; got ", q.stride(0), ", ",
                    q.stride(1), ")");
  KD_TRY(check_bf16_rows(k_extend, "k_extend", dev, 1, Tr::kHeadDim, T));
  KD_TRY(check_bf16_rows(v_extend, "v_extend", dev, 1, Tr::kHeadDimV, T));
  KD_TRY(check_bf16_rows(o, "o_extend", dev, H, Tr::kHeadDimV, T));
  KD_CHECK_VALUE(o.stride(0) % 2 == 0 && o.stride(1) % 2 == 0 &&
                        reinterpret_cast<uintptr_t>(o.data_ptr()) % 4 == 0,
                    "o_extend: rows must be 4-byte aligned (even strides)");
  int kv = kKvBf16;
  KD_TRY(kv_dtype_of(k_buffer, kv_code, &kv));
  const int64_t kv_elem = kv == kKvBf16 ? 2 : 1;  // bytes an element of the pool
  KD_TRY(check_bf16_rows(k_buffer, "k_buffer", dev, 1, Tr::kHeadDim, -1, k_buffer.scalar_type()));
  KD_TRY(check_bf16_rows(v_buffer, "v_buffer", dev, 1, Tr::kHeadDimV, k_buffer.size(0), k_buffer.scalar_type()));
  for (const auto& [t, name, elem] : {std::tuple<const Tensor&, const char*, int64_t>{k_extend, "k_extend", 2},
                                      std::tuple<const Tensor&, const char*, int64_t>{k_buffer, "k_buffer", kv_elem}}) {
    KD_CHECK_VALUE((t.stride(0) * elem) % 16 == 0 && reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0,
                      name, ": token rows must be 16-byte aligned (stride(0) a multiple of ", 16 / elem,
                      " elements; got stride ", t.stride(0), ")");
  }
  float kd = 1.f, vd = 1.f;
  const float *kd_ptr = nullptr, *vd_ptr = nullptr;
  KD_TRY(descale_of(k_descale, "k_descale", dev, kv != kKvBf16, &kd, &kd_ptr));
  KD_TRY(descale_of(v_descale, "v_descale", dev, kv != kKvBf16, &vd, &vd_ptr));
  KD_CHECK_VALUE(v_buffer.data_ptr() == k_buffer.data_ptr() && v_buffer.stride(0) == k_buffer.stride(0),
                    "v_buffer: must be the view k_buffer[..., :512] (MLA values are the latent "
                    "columns of the key cache)");

  const int64_t B = qo_indptr.numel() - 1;
  KD_CHECK_VALUE(B >= 1, "qo_indptr: needs B+1 >= 2 elements (got ", qo_indptr.numel(), ")");
  KD_TRY(check_workspace(ws, dev, T, H));
  KD_CHECK_VALUE(B <= Tr::kMaxBatch && B <= ws.max_batch, "qo_indptr: B=", B,
                    " exceeds the workspace's max_batch");
  int index64 = 0;
  bool w64 = false;
  KD_TRY(check_index(qo_indptr, "qo_indptr", dev, B + 1, &w64));
  if (w64) index64 |= kQoIndptr64;
  KD_TRY(check_index(kv_indptr, "kv_indptr", dev, B + 1, &w64));
  if (w64) index64 |= kKvIndptr64;
  KD_TRY(check_index(kv_indices, "kv_indices", dev, -1, &w64));
  if (w64) index64 |= kKvIndices64;

  const uint8_t* mask_ptr = nullptr;
  const void* mask_indptr_ptr = nullptr;
  if (custom_mask != nullptr) {
    const Tensor& m = *custom_mask;
    KD_TRY(check_cuda(m, "custom_mask", dev));
    KD_CHECK_TYPE(m.scalar_type() == at::kByte || m.scalar_type() == at::kBool,
                     "custom_mask: must be uint8 or bool (got ", m.scalar_type(), ")");
    KD_CHECK_VALUE(m.dim() == 1 && m.is_contiguous(), "custom_mask: must be a contiguous 1-D tensor (got ",
                      shape_str(m), ")");
    KD_CHECK_VALUE(mask_indptr != nullptr, "mask_indptr: required when custom_mask is given");
    KD_TRY(check_index(*mask_indptr, "mask_indptr", dev, B + 1, &w64));
    if (w64) index64 |= kMaskIndptr64;
    mask_ptr = static_cast<const uint8_t*>(m.data_ptr());
    mask_indptr_ptr = mask_indptr->data_ptr();
  }

  float* lse_ptr = nullptr;
  int64_t lse_stride = 0;
  if (lse != nullptr) {
    const Tensor& l = *lse;
    KD_TRY(check_cuda(l, "lse", dev));
    KD_CHECK_TYPE(l.scalar_type() == at::kFloat, "lse: must be float32 (got ", l.scalar_type(), ")");
    KD_CHECK_VALUE(l.dim() == 2 && l.size(0) == T && l.size(1) == H && l.stride(1) == 1,
                      "lse: expected [", T, ", ", H, "] with contiguous last dim (got ", shape_str(l), ")");
    lse_ptr = l.data_ptr<float>();
    lse_stride = l.stride(0);
  }

  VerifyParams p{};
  p.q = q.data_ptr();
  p.q_stride_t = q.stride(0);
  p.q_stride_h = q.stride(1);
  p.k_ext = k_extend.data_ptr();
  p.k_ext_stride = k_extend.stride(0);
  p.k_buf = k_buffer.data_ptr();
  p.k_buf_stride = k_buffer.stride(0);
  p.kv_dtype = kv;
  p.k_descale = kd;
  p.v_descale = vd;
  p.k_descale_ptr = kd_ptr;
  p.v_descale_ptr = vd_ptr;
  p.o = o.data_ptr();
  p.o_stride_t = o.stride(0);
  p.o_stride_h = o.stride(1);
  p.o_vec16 = reinterpret_cast<uintptr_t>(o.data_ptr()) % 16 == 0 && o.stride(0) % 8 == 0 && o.stride(1) % 8 == 0;
  p.lse = lse_ptr;
  p.lse_stride_t = lse_stride;
  p.qo_indptr = qo_indptr.data_ptr();
  p.kv_indptr = kv_indptr.data_ptr();
  p.kv_indices = kv_indices.data_ptr();
  p.mask_indptr = mask_indptr_ptr;
  p.mask = mask_ptr;
  p.index64 = index64;
  p.batch = static_cast<int>(B);
  p.num_heads = static_cast<int>(H);
  p.head_shift = __builtin_ctzll(static_cast<unsigned long long>(H));  // H: 8, 16, 32, 64 or 128
  p.num_tokens = static_cast<int>(T);
  p.scale_log2 = static_cast<float>(sm_scale * 1.4426950408889634);
  p.part_o = ws.part_o.data_ptr();
  p.part_lse = ws.part_lse.data_ptr<float>();
  p.sched = ws.sched.data_ptr<int>();
  p.tokinfo = ws.tokinfo.data_ptr<int>();
  p.sync = reinterpret_cast<unsigned long long*>(ws.sync.data_ptr<int64_t>());
  p.num_ctas = static_cast<int>(ws.num_ctas);
  p.ctas_recip = ws.ctas_recip;
  p.min_blocks_per_cta = static_cast<int>(ws.min_blocks_per_cta);
  p.split_combine = ws.split_combine ? 1 : 0;
  p.trace = ws.trace.defined() ? reinterpret_cast<unsigned long long*>(ws.trace.data_ptr()) : nullptr;

  const c10::cuda::CUDAGuard guard(dev);
  const int device = dev.index();
  KD_TRY(check_device_supported(device));
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device).stream();
  const bool diag = ws.launch_parts != kLaunchAll || ws.force_variant != 0;
  const cudaError_t err =
      diag ? verify_run_diag(p, device, stream,
                             DiagLaunch{static_cast<int>(ws.launch_parts), static_cast<int>(ws.force_variant)})
           : verify_run(p, device, stream);
  KD_CHECK(err == cudaSuccess, "RuntimeError", "kdtree_mla verify launch failed: ", cudaGetErrorString(err));
  return {};
}

// --- verify_fwd: the per-call entry point (CPython METH_FASTCALL) ---------------------------

// 14 arguments, or 17 with the fp8 pool's k_descale, v_descale and kv_dtype code.
constexpr Py_ssize_t kNumArgsBase = 14;
constexpr Py_ssize_t kNumArgs = 17;
constexpr const char* kArgNames[kNumArgs] = {
    "q",         "k_extend",   "v_extend",    "o_extend", "k_buffer", "v_buffer", "qo_indptr",
    "kv_indptr", "kv_indices", "custom_mask", "mask_indptr", "sm_scale", "lse", "workspace",
    "k_descale", "v_descale", "kv_dtype"};

// The tensor an argument holds (borrowed: the caller's reference keeps it alive for the call),
// or null when it is not a torch.Tensor.
const Tensor* as_tensor(PyObject* obj) {
  if (THPVariable_CheckExact(obj)) return &THPVariable_Unpack(obj);
  const int r = THPVariableClass ? PyObject_IsInstance(obj, THPVariableClass) : 0;
  if (r < 0) PyErr_Clear();
  return r > 0 ? &THPVariable_Unpack(obj) : nullptr;
}

Err descale_of(PyObject* obj, const char* name, const at::Device& dev, bool fp8, float* value, const float** ptr) {
  *value = 1.f;
  *ptr = nullptr;
  if (obj == nullptr || obj == Py_None) {
    KD_CHECK_VALUE(!fp8, name, ": an fp8 KV pool needs its descale (the layer's ", name[0] == 'k' ? "k_scale" : "v_scale",
                   ", a float or a 1-element float32 CUDA tensor; 1.0 when the pool holds unscaled values)");
    return {};
  }
  if (const Tensor* t = as_tensor(obj)) {
    KD_CHECK_VALUE(fp8, name, ": a bfloat16 KV pool takes no descale (pass None or 1.0)");
    KD_TRY(check_cuda(*t, name, dev));
    KD_CHECK_TYPE(t->scalar_type() == at::kFloat, name, ": a tensor descale must be float32 (got ",
                  t->scalar_type(), ")");
    KD_CHECK_VALUE(t->numel() == 1, name, ": a tensor descale must have one element (got ", shape_str(*t), ")");
    *ptr = static_cast<const float*>(t->data_ptr());
    return {};
  }
  const double d = PyFloat_AsDouble(obj);
  if (d == -1.0 && PyErr_Occurred()) {
    PyErr_Clear();
    return cat("TypeError: ", name, ": must be None, a float or a 1-element float32 CUDA tensor (got ",
               Py_TYPE(obj)->tp_name, ")");
  }
  KD_CHECK_VALUE(std::isfinite(d) && d > 0.0, name, ": must be a positive finite float (got ", std::to_string(d), ")");
  KD_CHECK_VALUE(fp8 || d == 1.0, name, ": a bfloat16 KV pool takes no descale (got ", std::to_string(d), ")");
  *value = static_cast<float>(d);
  return {};
}

PyObject* raise_type(Py_ssize_t i, PyObject* obj, const char* what) {
  PyErr_Format(PyExc_TypeError, "%s: must be %s (got %s)", kArgNames[i], what, Py_TYPE(obj)->tp_name);
  return nullptr;
}

// Raises "<Kind>: message" as that exception.
PyObject* raise_err(const Err& e) {
  PyObject* kind = PyExc_RuntimeError;
  const char* msg = e.c_str();
  for (auto [prefix, exc] : {std::pair<const char*, PyObject*>{"ValueError: ", PyExc_ValueError},
                             std::pair<const char*, PyObject*>{"TypeError: ", PyExc_TypeError},
                             std::pair<const char*, PyObject*>{"RuntimeError: ", PyExc_RuntimeError}}) {
    const size_t n = std::char_traits<char>::length(prefix);
    if (e.compare(0, n, prefix) == 0) {
      kind = exc;
      msg += n;
      break;
    }
  }
  PyErr_SetString(kind, msg);
  return nullptr;
}

// verify_fwd(q, k_extend, v_extend, o, k_buffer, v_buffer, qo_indptr, kv_indptr, kv_indices,
//            custom_mask | None, mask_indptr | None, sm_scale, lse | None, workspace
//            [, k_descale, v_descale, kv_dtype code]) -> None
PyObject* verify_fwd(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != kNumArgs && nargs != kNumArgsBase) {
    PyErr_Format(PyExc_TypeError, "verify_fwd takes %zd or %zd positional arguments (%zd given)", kNumArgsBase,
                 kNumArgs, nargs);
    return nullptr;
  }
  const Tensor* t[kNumArgs] = {};
  for (Py_ssize_t i = 0; i < kNumArgsBase; ++i) {
    if (i == 11 || i == 13) continue;  // sm_scale, workspace
    const bool optional = i == 9 || i == 10 || i == 12;
    if (optional && args[i] == Py_None) continue;
    t[i] = as_tensor(args[i]);
    if (t[i] == nullptr) return raise_type(i, args[i], optional ? "a torch.Tensor or None" : "a torch.Tensor");
  }
  const double sm_scale = PyFloat_AsDouble(args[11]);
  if (sm_scale == -1.0 && PyErr_Occurred()) {
    PyErr_Clear();
    return raise_type(11, args[11], "a float");
  }
  long long kv_code = 0;
  if (nargs == kNumArgs && args[16] != Py_None) {
    kv_code = PyLong_AsLongLong(args[16]);
    if (kv_code == -1 && PyErr_Occurred()) {
      PyErr_Clear();
      return raise_type(16, args[16], "an int code (0 none, 1 e4m3, 2 e5m2) or None");
    }
  }
  try {
    pybind11::detail::make_caster<WorkspaceHandle> ws;
    if (args[13] == Py_None || !ws.load(pybind11::handle(args[13]), false))
      return raise_type(13, args[13], "the extension's Workspace (VerifyWorkspace._handle)");
    const Err e = check_and_launch(*t[0], *t[1], *t[2], *t[3], *t[4], *t[5], *t[6], *t[7], *t[8], t[9], t[10],
                                   sm_scale, t[12], pybind11::detail::cast_op<const WorkspaceHandle&>(ws),
                                   nargs == kNumArgs ? args[14] : nullptr, nargs == kNumArgs ? args[15] : nullptr,
                                   kv_code);
    if (!e.empty()) return raise_err(e);
  } catch (const std::exception& ex) {  // not expected: nothing above throws by design
    PyErr_Format(PyExc_RuntimeError, "kdtree_mla verify_fwd: %s", ex.what());
    return nullptr;
  }
  Py_RETURN_NONE;
}

PyMethodDef g_methods[] = {
    {"verify_fwd", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&verify_fwd)), METH_FASTCALL,
     "verify_fwd(q, k_extend, v_extend, o, k_buffer, v_buffer, qo_indptr, kv_indptr, kv_indices, custom_mask, "
     "mask_indptr, sm_scale, lse, workspace[, k_descale, v_descale, kv_dtype]): MLA target-verify attention, a "
     "checked launch (positional arguments only; None for custom_mask, mask_indptr, lse, the descales; kv_dtype "
     "an int code: 0 from k_buffer's dtype, 1 e4m3, 2 e5m2). Raises ValueError/TypeError/RuntimeError."},
    {nullptr, nullptr, 0, nullptr}};

int variant_for_device(int64_t device) { return verify_variant_for_device(static_cast<int>(device)); }

}  // namespace
}  // namespace kdtree_mla

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "MLA target-verify attention kernels (see kdtree_mla.api)";
  using kdtree_mla::WorkspaceHandle;
  pybind11::class_<WorkspaceHandle>(m, "Workspace", "device scratch of a VerifyWorkspace (see kdtree_mla.api)")
      .def(pybind11::init([](at::Tensor part_o, at::Tensor part_lse, at::Tensor sched, at::Tensor tokinfo,
                             at::Tensor sync, int64_t num_ctas, int64_t num_heads) {
        WorkspaceHandle w;
        w.part_o = std::move(part_o);
        w.part_lse = std::move(part_lse);
        w.sched = std::move(sched);
        w.tokinfo = std::move(tokinfo);
        w.sync = std::move(sync);
        w.num_ctas = num_ctas;
        w.num_heads = num_heads;
        w.error = kdtree_mla::check_workspace_tensors(w);
        if (w.error.empty()) {
          w.device = w.part_o.device();
          w.max_tokens = w.tokinfo.numel() / 4;
          w.max_batch = w.sched.numel() - 3;
          w.ctas_recip = ~0ull / static_cast<unsigned long long>(w.num_ctas);  // num_ctas >= 1 (checked)
          // The kernels' modules and smem opt-in now, so that the first call may be captured
          // into a CUDA graph (an unsupported device is reported by the call itself).
          const c10::cuda::CUDAGuard guard(w.device);
          if (kdtree_mla::verify_prepare(static_cast<int>(w.device.index())) != cudaSuccess) cudaGetLastError();
        }
        return w;
      }))
      .def_readwrite("min_blocks_per_cta", &WorkspaceHandle::min_blocks_per_cta)
      .def_readwrite("launch_parts", &WorkspaceHandle::launch_parts)
      .def_readwrite("force_variant", &WorkspaceHandle::force_variant)
      .def_readwrite("split_combine", &WorkspaceHandle::split_combine)
      .def_property_readonly("fused",
                             [](const WorkspaceHandle& w) {
                               return w.error.empty() &&
                                      kdtree_mla::verify_merge_fused(static_cast<int>(w.device.index()),
                                                                     static_cast<int>(w.num_ctas),
                                                                     w.split_combine);
                             })
      .def_readwrite("trace", &WorkspaceHandle::trace);
  if (PyModule_AddFunctions(m.ptr(), kdtree_mla::g_methods) != 0) throw pybind11::error_already_set();
  m.def("fused_pdl", [](int64_t device) { return kdtree_mla::verify_fused_pdl(static_cast<int>(device)); },
        "fused (cooperative) launches on a device use PDL: 0 none yet, 1 yes, 2 refused by the driver");
  m.def("unsupported_reason",
        [](int64_t device) { return kdtree_mla::verify_unsupported_reason(static_cast<int>(device)); },
        "why variant_for_device is 0: 1 not an sm_90 / sm_120-family device, 2 no variant fits its shared memory");
  m.def("variant_for_device", &kdtree_mla::variant_for_device,
        "kernel variant (index into VARIANTS) the launcher uses on a device (0: unsupported)");
  m.attr("BLOCK_M") = kdtree_mla::VerifyTraits::kBlockM;
  // TORCH_CUDA_ARCH_LIST at build time (setup.py passes it as a definition: the build writes
  // no file into the source tree); kdtree_mla.api.compiled_archs() parses it.
#ifdef KDTREE_ARCH_LIST
  m.attr("ARCH_LIST") = KDTREE_ARCH_LIST;
#else
  m.attr("ARCH_LIST") = "";
#endif
  m.attr("DIAG") = kdtree_mla::kDiagBuild;  // built with KDTREE_DIAG=1: diagnostic variants too
  m.attr("VARIANT_SMALL") = kdtree_mla::kVariantSmall;  // the launcher's picks (VARIANTS indices)
  m.attr("VARIANT_LARGE") = kdtree_mla::kVariantLarge;
  m.attr("TRACE_ROWS") = kdtree_mla::kTraceRows;  // traced variants (diagnostic): trace buffer shape
  m.attr("TRACE_SLOTS") = kdtree_mla::kTraceSlots;
  m.attr("TRACE_COMBINE_ROW") = kdtree_mla::kTraceCombineRow;
  m.attr("TRACE_SMID_SLOT") = kdtree_mla::kTraceSmidSlot;  // the slot holding each row's SM
  pybind11::list variants;
  for (int v = 0; v < kdtree_mla::kNumVariants; ++v)
    variants.append(pybind11::make_tuple(kdtree_mla::kVariants[v].stages, kdtree_mla::variant_smem_bytes(v),
                                         kdtree_mla::kVariants[v].pipe, kdtree_mla::kVariants[v].mode,
                                         kdtree_mla::kVariants[v].loaders));
  // (pipeline stages, dynamic smem bytes, pipelined, mode: 0, or 2 loads only / 4 math only /
  // 8 traced, load warps)
  m.attr("VARIANTS") = variants;
}
