// Device helpers shared by the verify kernels: PTX wrappers, per-request geometry, and the
// split-KV schedule every CTA recomputes from the index pointers.
//
// Work decomposition. A request b has M_b = D_b * H query rows (draft token major, head minor,
// the order of q's rows) and L_b = P_b + D_b KV tokens (its prefix through kv_indices, then its
// draft tokens from k_extend). Its rows are cut into ceil(M_b / 32) M-tiles; each (b, M-tile)
// is a "segment" of ceil(L_b / 32) KV blocks, cut into units of q blocks (make_schedule); all
// units laid end to end are split evenly over the fixed grid of num_ctas CTAs.
// A segment entirely inside one CTA's range is written straight to o; a segment cut by CTA
// boundaries leaves one partial (normalised O, LSE) per CTA: CTA c's piece that continues a
// segment begun before it in slot c, its piece that starts one in slot num_ctas + c (so parts
// 1.. of a segment lie back to back), and the main kernel's fused merge or the combine kernel
// merges them. Every CTA recomputes the schedule from the index pointers, so the launch
// geometry never depends on device data (CUDA-graph safe).
//
// The pieces: ptx.cuh (PTX wrappers), schedule.cuh (geometry, schedule, plans), merge_sync.cuh
// (the fused merge's handshakes between CTAs).
#pragma once

#include "merge_sync.cuh"
#include "ptx.cuh"
#include "schedule.cuh"
