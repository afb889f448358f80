// Parameters of one MLA target-verify attention call (see kdtree_mla/api.py for shapes).
// Plain C++: included by the nvcc-compiled launcher and by the torch binding.
#pragma once

#include <cstdint>

namespace kdtree_mla {

// Bit flags in VerifyParams::index64: which index tensors hold int64 (else int32).
enum IndexWidth : int {
  kQoIndptr64 = 1,
  kKvIndptr64 = 2,
  kKvIndices64 = 4,
  kMaskIndptr64 = 8,
};

// VerifyParams::kv_dtype: the KV pool's element type.
enum KvDtype : int {
  kKvBf16 = 0,
  kKvE4m3 = 1,
  kKvE5m2 = 2,
};

struct VerifyParams {
  // q [T, H, 576]: element (t, h, d) at q[t * q_stride_t + h * q_stride_h + d].
  const void* q;
  int64_t q_stride_t, q_stride_h;
  // Draft keys k_extend [T, 1, 576]; token t's row starts at k_ext + t * k_ext_stride.
  // Values are its first 512 columns (absorbed MLA).
  const void* k_ext;
  int64_t k_ext_stride;
  // KV pool k_buffer [S, 1, 576]; row r starts at k_buf + r * k_buf_stride elements; V = first
  // 512 cols. kv_dtype: its element type (KvDtype); an fp8 pool's rows are 576 bytes.
  const void* k_buf;
  int64_t k_buf_stride;
  int kv_dtype;
  // fp8 pool: its values times k_descale are the keys, times v_descale the values (SGLang stores
  // K / layer.k_scale); draft rows (k_ext, bf16) are not scaled. A non-null pointer (a 1-element
  // fp32 device tensor) is read in the kernel instead of the float (CUDA-graph safe).
  float k_descale, v_descale;
  const float* k_descale_ptr;
  const float* v_descale_ptr;
  // Output o [T, H, 512] bf16 and optional lse [T, H] fp32 (natural log), may be null.
  void* o;
  int64_t o_stride_t, o_stride_h;
  int o_vec16;  // o's rows are 16-byte aligned (data and both strides): 16-byte stores
  float* lse;
  int64_t lse_stride_t;

  const void* qo_indptr;    // [B+1]
  const void* kv_indptr;    // [B+1]
  const void* kv_indices;   // [kv_indptr[B]]
  const void* mask_indptr;  // [B+1], null when mask is null
  const uint8_t* mask;      // custom mask bytes, null -> draft tokens are causal (j <= i)
  int index64;              // IndexWidth flags

  int batch;       // B
  int num_heads;   // H (a power of two)
  int head_shift;  // log2(H): row r of a request is draft token r >> head_shift, head r & (H - 1)
  int num_tokens;  // T
  float scale_log2;  // sm_scale * log2(e)

  // Workspace (kdtree_mla.api.VerifyWorkspace).
  void* part_o;     // [2 * num_ctas, BLOCK_M, 512] bf16 (normalised partial O)
  float* part_lse;  // [2 * num_ctas, BLOCK_M], log2 units
  int* sched;       // [batch + 3]: units per CTA, blocks per unit, per-request unit prefix sums
  int* tokinfo;     // [num_tokens, 4]: per draft token {qo_begin, unit prefix, units/segment, 0}
  unsigned long long* sync;  // [2 + (2 + kPlanWords) * num_ctas], zeros when allocated (fused merge
                             // only): CTAs ended, one flag per partial slot, merge tickets, then
                             // each CTA's schedule plan (verify_common.cuh)
  int num_ctas;     // grid of the main kernel
  unsigned long long ctas_recip;  // floor((2^64 - 1) / num_ctas): the fused merge's call number
  int fused;        // 1: the main kernel merges cut segments itself (all CTAs co-resident,
                    // cooperative launch) and no combine kernel runs; 0: the combine kernel does
  int min_blocks_per_cta;  // lower bound on KV blocks per CTA (limits partial traffic)
  int split_combine;        // 1: merge cut segments in the combine kernel even where the main kernel
                           // could (VerifyWorkspace split_combine: a grid under an MPS SM limit)
  int combine_wpr;         // warps of the combine kernel a row (set by the launcher)
  // Diagnostic trace variants only (traits.h kTraceSlots, verify_diag.h): per-CTA timestamps,
  // else unused.
  unsigned long long* trace;
};

}  // namespace kdtree_mla
