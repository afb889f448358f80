"""Host-path diagnostics of one eager verify call (run on the device): where the Python-to-
launch time goes. Prints medians in microseconds.

  api        kdtree_mla.api.extend_attention_fwd, device synchronised before each sample
  binding    the extension's verify_fwd called directly with the same arguments
  binding_no_launch        the same, launching nothing (argument conversion and checks only)
  binding_plain_main       the same, the main kernel alone as a plain launch (split_combine:
                           not cooperative; the output is incomplete, timing only)
  binding_plain_two        the same, main and combine kernels, two plain launches
  binding_again            binding once more, after those (the machine's drift)
  no_pdl     api, both kernels launched without programmatic dependent launch
  noop       a trivial extension call (pybind11 floor)
  burst      61 calls back to back (no sync), wall time per call; with and without PDL
"""

from __future__ import annotations

import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from kdtree_mla import _diag, api  # noqa: E402
from kdtree_mla_testing.inputs import make_inputs  # noqa: E402


def median_us(fn, reps=400, sync=True, spin_us=0.0):
    """Median wall time of fn(), the device synchronised before each sample (sync). With
    spin_us the thread busy-waits that long after the synchronize, before the sample."""
    out = []
    for _ in range(reps):
        if sync:
            torch.cuda.synchronize()
        if spin_us:
            t_end = time.perf_counter_ns() + spin_us * 1e3
            while time.perf_counter_ns() < t_end:
                pass
        t0 = time.perf_counter_ns()
        fn()
        out.append((time.perf_counter_ns() - t0) / 1e3)
    torch.cuda.synchronize()
    return statistics.median(out)


def main():
    x = make_inputs([5700], [4], 8, device="cuda", seed=1)
    o = torch.empty(4, 8, 512, dtype=torch.bfloat16, device="cuda")
    ws = api.VerifyWorkspace(max_batch=1, max_tokens=4, num_heads=8, device="cuda")
    args = (x.q, x.k_extend, x.v_extend, o, x.k_buffer, x.v_buffer, x.qo_indptr, x.kv_indptr,
            x.kv_indices, x.custom_mask, True, x.mask_indptr, 4, x.sm_scale)  # fmt: skip

    def call():
        api.extend_attention_fwd(*args, workspace=ws)

    call()
    ext = api.load()
    h = ws._handle
    bargs = (x.q, x.k_extend, x.v_extend, o, x.k_buffer, x.v_buffer, x.qo_indptr, x.kv_indptr,
             x.kv_indices, x.custom_mask, x.mask_indptr, float(x.sm_scale), None, h)  # fmt: skip
    res = {"api": median_us(call), "binding": median_us(lambda: ext.verify_fwd(*bargs))}
    res["noop"] = median_us(lambda: ext.variant_for_device(0))
    # The binding's parts: launch_parts 0 launches nothing; split_combine makes the launches
    # plain (not cooperative). Restored below.
    _diag.set_launch_parts(ws, 0)
    res["binding_no_launch"] = median_us(lambda: ext.verify_fwd(*bargs))
    _diag.set_split_combine(ws, True)
    _diag.set_launch_parts(ws, _diag.MAIN_ONLY)
    res["binding_plain_main"] = median_us(lambda: ext.verify_fwd(*bargs))
    _diag.set_launch_parts(ws, _diag.ALL_PARTS)
    res["binding_plain_two"] = median_us(lambda: ext.verify_fwd(*bargs))
    _diag.set_split_combine(ws, False)
    res["binding_again"] = median_us(lambda: ext.verify_fwd(*bargs))

    def burst():
        for _ in range(61):
            call()

    res["burst_per_call"] = median_us(burst, reps=50) / 61
    _diag.set_launch_parts(ws, _diag.ALL_PARTS | 4)
    res["no_pdl"] = median_us(call)
    res["burst_per_call_no_pdl"] = median_us(burst, reps=50) / 61
    _diag.set_launch_parts(ws, _diag.ALL_PARTS)
    for k, v in res.items():
        print(f"{k:24s} {v:8.2f} us")


if __name__ == "__main__":
    main()
