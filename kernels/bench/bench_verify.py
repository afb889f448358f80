"""Benchmark of the verify kernel per the issue's Performance section (run on the device).

One run measures, on the same GPU:
  * device-to-device copy bandwidth (bytes read + written over time, torch copy_ of 2 GiB),
  * bf16 mma.sync m16n8k16 throughput (a register-only CuPy/NVRTC microbenchmark),
  * per verify call: our kernel in a CUDA graph and eager, SGLang's Triton extend kernel
    (target-verify arguments) in a graph and eager when its wheel is in kernels/.whl,
  * the same calls merging in the combine kernel (the two-kernel path) in a graph,
  * the host path of one eager call (Python to launch, the device synchronised before each
    sample), and per call with a layer stack's calls issued back to back,
  * with --cold-l2 MB, each call after an L2-flushing read (as a model step's weight reads
    leave L2),
  * with --kv-dtype fp8_e4m3 / fp8_e5m2, all of it on fp8 KV pools (as SGLang stores them,
    descale 1.0; SGLang's Triton kernel reads the same pools), the copy-bandwidth floor and
    the BW % counting the fp8 bytes.
Each case cycles over distinct per-layer KV pools (>= 4x L2 in total) so the L2 cannot hold
the KV between calls of the same layer. Times are medians over many repetitions.

    python3 kernels/bench/bench_verify.py [--json out.json] [--cold-l2 128] [--envelope]
        [--kv-dtype bf16|fp8_e4m3|fp8_e5m2]
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from kdtree_mla import _diag, api  # noqa: E402
from kdtree_mla_testing.benchinfo import copy_bandwidth, describe, gpu_facts, run_info  # noqa: E402
from kdtree_mla_testing.inputs import KV_DTYPES, make_inputs  # noqa: E402
from triton_ref import load_extend_attention  # noqa: E402

DEFAULT_CASES = [
    # B, H, D, prefix[, "sorted": pool rows in order instead of a random permutation]
    (1, 8, 4, 0),
    (1, 8, 4, 1024),
    (1, 8, 4, 5700),
    (1, 8, 4, 23000),
    (1, 8, 4, 91000),
    (8, 8, 4, 91000),
    (1, 64, 4, 23000),
    (1, 64, 4, 91000),
    (32, 8, 4, 5700),
    (1, 8, 4, 5700, "sorted"),
    (1, 8, 4, 91000, "sorted"),
]

# --envelope: the rest of the supported shapes (issue 4's requirements), which the targets do
# not cover: other draft lengths, other head counts (16 and 32: Kimi K2's 64 heads at TP 4 and
# 2; 128: DeepSeek-V3's at TP 1), the longest prefix, the largest batches, and a batch mixing
# lengths (a prefix list, one per request).
ENVELOPE_CASES = [
    (1, 8, 1, 23000),
    (1, 8, 8, 23000),
    (1, 8, 16, 23000),
    (1, 16, 4, 23000),
    (1, 32, 4, 23000),
    (1, 128, 4, 23000),
    (4, 16, 8, 23000),
    (1, 8, 16, 91000),
    (1, 8, 4, 262144),
    (64, 8, 4, 4096),
    (256, 8, 4, 2048),
    (8, 8, 4, [91000, 23000, 5700, 5700, 1024, 1024, 17, 0]),
]


def events_ms(fn, reps: int, inner: int = 1) -> list[float]:
    """Per-repetition device time (ms) of `inner` calls of fn, timed with CUDA events."""
    out = []
    for _ in range(reps):
        s = torch.cuda.Event(enable_timing=True)
        e = torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(inner):
            fn()
        e.record()
        e.synchronize()
        out.append(s.elapsed_time(e) / inner)
    return out


MMA_SRC = r"""
extern "C" __global__ void mma_loop(float* out, int iters) {
  unsigned t = threadIdx.x + blockIdx.x * 977u;
  unsigned a[4], b0, b1;
  for (int i = 0; i < 4; ++i) a[i] = (0x3F80u | ((t * 7u + i) & 0x3Fu)) * 0x10001u;
  b0 = (0x3F00u | ((t * 5u) & 0x3Fu)) * 0x10001u;
  b1 = (0x3F00u | ((t * 3u) & 0x3Fu)) * 0x10001u;
  float acc[8][4];
  for (int j = 0; j < 8; ++j) for (int c = 0; c < 4; ++c) acc[j][c] = 0.f;
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int j = 0; j < 8; ++j)
      asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                   : "+f"(acc[j][0]), "+f"(acc[j][1]), "+f"(acc[j][2]), "+f"(acc[j][3])
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  float s = 0.f;
  for (int j = 0; j < 8; ++j) for (int c = 0; c < 4; ++c) s += acc[j][c];
  if (s == 1234.5f) out[0] = s;
}
"""


def mma_throughput() -> tuple[float | None, str]:
    try:
        import cupy as cp
    except ImportError as exc:
        return None, f"cupy missing: {exc}"
    major, minor = torch.cuda.get_device_capability()
    kern = cp.RawKernel(MMA_SRC, "mma_loop", options=(f"--gpu-architecture=sm_{major}{minor}",))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    out = cp.zeros(1, dtype=cp.float32)
    blocks, threads, iters = sms * 8, 256, 4096
    best = []
    with cp.cuda.Device(torch.cuda.current_device()):
        kern((blocks,), (threads,), (out, cp.int32(iters)))
        cp.cuda.runtime.deviceSynchronize()
        for _ in range(10):
            s, e = cp.cuda.Event(), cp.cuda.Event()
            s.record()
            kern((blocks,), (threads,), (out, cp.int32(iters)))
            e.record()
            e.synchronize()
            best.append(cp.cuda.get_elapsed_time(s, e))
    flops = blocks * (threads // 32) * iters * 8 * (16 * 8 * 16 * 2)
    return flops / (
        statistics.median(best) * 1e-3
    ), "cupy/nvrtc mma.sync m16n8k16 bf16, 8 chains/warp"


class Case:
    """One verify shape, over n_layers distinct per-layer KV pools (each the size of the batch's
    prefixes; together >= 6x the L2), distinct per-layer q / k_extend / o, and one set of
    metadata (qo_indptr, kv_indptr, kv_indices, custom_mask, mask_indptr) shared by all layers,
    as SGLang builds it once per forward step and passes it to all 61 layers."""

    def __init__(
        self,
        b,
        h,
        d,
        prefix,
        layers_bytes_target=6 * 60 << 20,
        seed=0,
        sorted_pages=False,
        num_ctas=None,
        kv_dtype=None,
    ):
        self.b, self.h, self.d, self.prefix = b, h, d, prefix
        self.prefixes = prefixes = list(prefix) if isinstance(prefix, list) else [prefix] * b
        assert len(prefixes) == b, "one prefix length a request"
        pool_row = 1152 if kv_dtype is None else 576
        per_layer = sum(prefixes) * pool_row + b * d * 1152
        self.n_layers = int(min(61, max(2, math.ceil(layers_bytes_target / per_layer))))
        self.kv_dtype = kv_dtype
        base = make_inputs(
            prefixes, [d] * b, h, device="cuda", seed=seed * 1000, spare_slots=16, kv_dtype=kv_dtype
        )
        if sorted_pages:  # contiguous pool rows: the best case for the TLB and DRAM pages
            base.kv_indices.copy_(torch.sort(base.kv_indices).values)
        self.meta = base
        self.layers = [base]
        used = base.kv_indices.long()
        for i in range(1, self.n_layers):
            x = make_inputs([0] * b, [d] * b, h, device="cuda", seed=seed * 1000 + i, spare_slots=0)
            kb = torch.full(base.k_buffer.shape, float("nan"), dtype=torch.bfloat16, device="cuda")
            kb[used] = torch.randn(used.numel(), 1, 576, device="cuda").to(torch.bfloat16)
            if kv_dtype is not None:  # unused pool rows stay NaN
                kb = kb.to(kv_dtype)
            x.k_buffer, x.v_buffer = kb, kb[..., :512]
            self.layers.append(x)
        t = b * d
        self.outs = [
            torch.empty(t, h, 512, dtype=torch.bfloat16, device="cuda") for _ in self.layers
        ]
        self.num_ctas = num_ctas
        self.ws = self.workspace()
        self.kv_bytes = base.kv_bytes()
        self.flops = d * h * (sum(prefixes) + b * d) * (576 + 512) * 2

    def workspace(self, split_combine=False):
        """A workspace for this case's calls (the case's own is ``self.ws``)."""
        return api.VerifyWorkspace(
            max_batch=self.b,
            max_tokens=self.b * self.d,
            num_heads=self.h,
            device="cuda",
            num_ctas=self.num_ctas,
            split_combine=split_combine,
        )

    def ours(self, i, ws=None):
        """Layer i's call, on the case's workspace unless `ws` is given."""
        x, m = self.layers[i], self.meta
        api.extend_attention_fwd(
            x.q,
            x.k_extend,
            x.v_extend,
            self.outs[i],
            x.k_buffer,
            x.v_buffer,
            m.qo_indptr,
            m.kv_indptr,
            m.kv_indices,
            m.custom_mask,
            True,
            m.mask_indptr,
            self.d,
            m.sm_scale,
            workspace=self.ws if ws is None else ws,
            **({} if self.kv_dtype is None else {"k_descale": 1.0, "v_descale": 1.0}),
        )

    def triton(self, fn, i):
        x, m = self.layers[i], self.meta
        fn(
            x.q,
            x.k_extend,
            x.v_extend,
            self.outs[i],
            x.k_buffer,
            x.v_buffer,
            m.qo_indptr,
            m.kv_indptr,
            m.kv_indices,
            m.custom_mask,
            True,
            m.mask_indptr,
            self.d,
            m.sm_scale,
        )


def graph_us(call, n_layers, reps):
    """Graph us/call: one graph holding one call per layer, median over `reps` replays (the
    calls must have run once already: capture does no first-call set-up)."""
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(n_layers):
            call(i)
    g.replay()
    torch.cuda.synchronize()
    t = statistics.median(events_ms(g.replay, reps)) * 1e3 / n_layers
    del g
    return t


def flushed_graph_us(call, flush, n_layers, reps):
    """Graph us a layer of `call(i)` after `flush()`: graph(flush + call) - graph(flush)."""
    both = graph_us(lambda i: (flush(), call(i)), n_layers, reps)
    return both - graph_us(lambda i: flush(), n_layers, reps)


class L2Flusher:
    """Reads `mb` MB (torch's sum, the normal L2 policy) when called: put before each call, as
    a model step's weight reads between two layers' attention calls do (tens of MB a layer),
    so that the call finds none of its inputs, metadata or workspace in L2. Harsher than a
    step for q and k_extend, which the kernels just before attention write."""

    def __init__(self, mb: int):
        self.buf = torch.ones(mb << 18, dtype=torch.float32, device="cuda")
        self.out = torch.empty((), dtype=torch.float32, device="cuda")

    def __call__(self):
        torch.sum(self.buf, 0, out=self.out)


def time_modes(call, n_layers, reps):
    """(graph us/call, eager us/call): one pass over all layers per repetition."""
    for i in range(n_layers):
        call(i)
    torch.cuda.synchronize()
    eager = events_ms(lambda: [call(i) for i in range(n_layers)], reps)
    return graph_us(call, n_layers, reps), statistics.median(eager) * 1e3 / n_layers


def launch_floor_us(n=64, reps=50) -> float:
    """Graph time per call of two dependent one-element kernels (our call's launch count):
    what any two-kernel call costs on this GPU before it does work."""
    x = torch.zeros(1, device="cuda")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(n):
            x.add_(1.0)
            x.mul_(1.0)
    g.replay()
    torch.cuda.synchronize()
    t = statistics.median(events_ms(g.replay, reps)) * 1e3 / n
    del g
    return t


def median_us(fn, reps=400, sync=True):
    """Median wall time of fn() in us, the device synchronised before each sample (sync)."""
    out = []
    for _ in range(reps):
        if sync:
            torch.cuda.synchronize()
        t0 = time.perf_counter_ns()
        fn()
        out.append((time.perf_counter_ns() - t0) / 1e3)
    torch.cuda.synchronize()
    return statistics.median(out)


def host_path_us(case, reps=300):
    """Median wall time of one eager call, the device synchronised before each sample."""
    layer = itertools.cycle(range(case.n_layers))
    return median_us(lambda: case.ours(next(layer)), reps=reps)


def host_burst_us(case, reps=50):
    """Median over reps of the wall time per call of one layer stack's calls issued back to back
    (no synchronisation between them), as an eager model step issues them."""

    def stack():
        for i in range(case.n_layers):
            case.ours(i)

    return median_us(stack, reps=reps) / case.n_layers


def parse_shape(text: str) -> tuple:
    """--shape B,H,D,PREFIX (PREFIX may be a ':'-separated list, one per request)."""
    b, h, d, prefix = text.split(",")
    lens = [int(x) for x in prefix.split(":")]
    return (int(b), int(h), int(d), lens if len(lens) > 1 else lens[0])


def pick_cases(args) -> list:
    """The case list a run times: --shape's, else ENVELOPE_CASES or DEFAULT_CASES."""
    if args.shape:
        return [parse_shape(x) for x in args.shape]
    return ENVELOPE_CASES if args.envelope else DEFAULT_CASES


def prefix_label(row) -> str:
    """A row's prefix for the table: the length, or a mixed batch's range."""
    p = row["prefix"]
    return f"mixed {min(p)}-{max(p)}" if isinstance(p, list) else str(p)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", default=None, help="write every figure to this file")
    ap.add_argument("--reps", type=int, default=50, help="repetitions per timing (median)")
    ap.add_argument(
        "--wheels",
        default=os.path.join(os.path.dirname(HERE), ".whl"),
        help="folder holding SGLang's wheel (its Triton kernel is timed side by side)",
    )
    ap.add_argument("--no-triton", action="store_true", help="skip SGLang's Triton kernel")
    ap.add_argument(
        "--envelope",
        action="store_true",
        help="time ENVELOPE_CASES (shapes beyond the targets' cases) instead of DEFAULT_CASES",
    )
    ap.add_argument(
        "--shape",
        action="append",
        default=[],
        help="time this shape instead (B,H,D,PREFIX; repeatable; PREFIX a:b:... per request)",
    )
    ap.add_argument(
        "--cases", default=None, help="comma-separated indices into the case list timed"
    )
    ap.add_argument(
        "--force-variant",
        type=int,
        default=0,
        help="run every case on this _C.VARIANTS index (e.g. _C.VARIANT_SMALL, sm_120's, on an H200); 0: the launcher's choice",
    )
    ap.add_argument(
        "--cold-l2",
        type=int,
        default=0,
        metavar="MB",
        help="also time each call after a read of MB megabytes (L2 flushed of everything, as a "
        "model step's weight reads leave it): graph(read + call) - graph(read)",
    )
    ap.add_argument(
        "--kv-dtype",
        choices=sorted(KV_DTYPES),
        default="bf16",
        help="KV pool element type (fp8: SGLang's fp8 pool layout, descale 1.0)",
    )
    ap.add_argument(
        "--num-ctas",
        type=int,
        default=0,
        help="grid size of the main kernel (VerifyWorkspace num_ctas); 0: the SM count",
    )
    args = ap.parse_args(argv)
    try:
        pick_cases(args)
    except ValueError:
        ap.error(f"--shape: expected B,H,D,PREFIX of integers (got {args.shape})")
    if args.cases is not None and not all(x.isdigit() for x in args.cases.split(",")):
        ap.error(f"--cases: expected comma-separated indices (got {args.cases!r})")
    return args


def time_case(args, ci, shape, bw, mma, flush, triton_fn) -> dict:
    """Every figure of one case (a JSON row)."""
    b, h, d, prefix, *flags = shape
    case = Case(
        b,
        h,
        d,
        prefix,
        seed=ci + 1,
        sorted_pages="sorted" in flags,
        num_ctas=args.num_ctas or None,
        kv_dtype=KV_DTYPES[args.kv_dtype],
    )
    _diag.set_force_variant(case.ws, args.force_variant)
    floor_us = case.kv_bytes / bw * 1e6
    row = {
        "B": b,
        "H": h,
        "D": d,
        "prefix": prefix,
        "pages": "sorted" if flags else "random",
        "kv_dtype": args.kv_dtype,
        "layers": case.n_layers,
        "kv_bytes": case.kv_bytes,
        "floor_us": floor_us,
        "flops": case.flops,
    }
    row["ours_graph_us"], row["ours_eager_us"] = time_modes(case.ours, case.n_layers, args.reps)
    if flush is not None:
        row["ours_graph_cold_l2_us"] = flushed_graph_us(case.ours, flush, case.n_layers, args.reps)
    if case.kv_bytes <= 200_000 * 576 * case.meta.k_buffer.element_size():
        from kdtree_mla_testing.ref import verify_attention_ref

        x, m = case.layers[-1], case.meta
        case.ours(case.n_layers - 1)
        ref, _ = verify_attention_ref(
            x.q,
            x.k_extend,
            x.v_extend,
            x.k_buffer,
            x.v_buffer,
            m.qo_indptr,
            m.kv_indptr,
            m.kv_indices,
            m.custom_mask,
            m.mask_indptr,
            m.sm_scale,
        )
        out = case.outs[-1].double()
        row["rel_err_last_layer"] = float((out - ref).norm() / ref.norm())
    else:
        ref = None
    # The same calls merging in the combine kernel (split_combine: the path of grids wider
    # than the SM count) instead of the fused merge, side by side.
    row["fused"] = case.ws.fused
    split = case.workspace(split_combine=True)
    _diag.set_force_variant(split, args.force_variant)
    row["split_graph_us"] = time_modes(lambda i: case.ours(i, split), case.n_layers, args.reps)[0]
    row["host_us"] = host_path_us(case)
    row["host_burst_us"] = host_burst_us(case)
    if triton_fn is not None:
        try:
            row["triton_graph_us"], row["triton_eager_us"] = time_modes(
                lambda i: case.triton(triton_fn, i), case.n_layers, max(10, args.reps // 2)
            )
            if ref is not None:  # its error on the same inputs (fp8: q and P cast to fp8 too)
                case.triton(triton_fn, case.n_layers - 1)
                out = case.outs[-1].double()
                row["triton_rel_err_last_layer"] = float((out - ref).norm() / ref.norm())
        except Exception as exc:  # noqa: BLE001 - reported, not hidden
            row["triton_error"] = repr(exc)[:300]
    row["bw_frac_graph"] = floor_us / row["ours_graph_us"]
    if mma:
        row["mma_frac_graph"] = case.flops / (row["ours_graph_us"] * 1e-6) / mma
    return row


def print_table(rows) -> None:
    print(
        "\n| B | H | D | prefix | floor us | ours graph us | ours eager us | ours graph, L2 cold us "
        "| two kernels (graph) us | BW % | mma % | Triton graph us | Triton eager us "
        "| Triton / ours (graph) | host us | host us, back to back | KV | rel err ours / Triton |"
    )
    print("|---" * 18 + "|")
    nan = float("nan")
    for r in rows:
        sorted_tag = " sorted" if r["pages"] == "sorted" else ""
        tri = r.get("triton_graph_us", nan)
        print(
            f"| {r['B']} | {r['H']} | {r['D']} | {prefix_label(r)}{sorted_tag} "
            f"| {r['floor_us']:.1f} | {r['ours_graph_us']:.1f} | {r['ours_eager_us']:.1f} "
            f"| {r.get('ours_graph_cold_l2_us', nan):.1f} | {r['split_graph_us']:.1f} "
            f"| {100 * r['bw_frac_graph']:.0f} | {100 * r.get('mma_frac_graph', nan):.1f} "
            f"| {tri:.0f} | {r.get('triton_eager_us', nan):.0f} "
            f"| {tri / r['ours_graph_us']:.0f}x | {r['host_us']:.1f} | {r['host_burst_us']:.1f} "
            f"| {r.get('kv_dtype', 'bf16')} | {r.get('rel_err_last_layer', nan):.1e} / "
            f"{r.get('triton_rel_err_last_layer', nan):.1e} |"
        )


def main(argv=None):
    args = parse_args(argv)
    from kdtree_mla import _C

    props = torch.cuda.get_device_properties(0)
    res = {
        "run": run_info(torch.cuda.current_device()),
        "device": props.name,
        "sms": props.multi_processor_count,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "compiled_archs": api.compiled_archs(),
        "variant": _C.VARIANTS[
            args.force_variant or _C.variant_for_device(torch.cuda.current_device())
        ],
        "forced_variant": args.force_variant,
        "kv_dtype": args.kv_dtype,
        "num_ctas": args.num_ctas or props.multi_processor_count,
        "cases": [],
    }
    print(describe(res["run"]), flush=True)
    bw = copy_bandwidth()
    mma, mma_note = mma_throughput()
    res.update(copy_bw_Bps=bw, mma_flops=mma, mma_note=mma_note)
    print(
        f"device {props.name} SMs {props.multi_processor_count} variant "
        f"(stages, smem, pipe, mode, load warps) {res['variant']}, KV {args.kv_dtype}"
    )
    print(
        f"copy bandwidth (read+write) {bw / 1e12:.3f} TB/s; mma.sync bf16 "
        f"{(mma or 0) / 1e12:.1f} TFLOP/s ({mma_note})",
        flush=True,
    )
    res["launch_floor_us"] = launch_floor_us()
    print(
        f"two dependent empty kernels per call, graph: {res['launch_floor_us']:.2f} us", flush=True
    )
    if args.no_triton:
        triton_fn, triton_note = None, "skipped (--no-triton)"
    else:
        triton_fn, triton_note = load_extend_attention(args.wheels)
    res["triton"] = triton_note
    print(f"triton: {triton_note}", flush=True)

    flush = L2Flusher(args.cold_l2) if args.cold_l2 else None
    res["cold_l2_mb"] = args.cold_l2
    picked = None if args.cases is None else {int(x) for x in args.cases.split(",")}
    res["case_list"] = "shape" if args.shape else "envelope" if args.envelope else "default"
    for ci, shape in enumerate(pick_cases(args)):
        if picked is not None and ci not in picked:
            continue
        row = time_case(args, ci, shape, bw, mma, flush, triton_fn)
        res["cases"].append(row)
        print(json.dumps(row), flush=True)
        torch.cuda.empty_cache()  # free this case's pools before the next

    print_table(res["cases"])
    # 1: fused (cooperative) launches use PDL; 2: the driver refused the pair (no PDL).
    res["fused_pdl"] = _C.fused_pdl(torch.cuda.current_device())
    print(f"fused launches with PDL: {res['fused_pdl']}")
    res["gpu_after"] = gpu_facts(torch.cuda.current_device())  # clocks at the end of the run
    print(
        f"clocks at the end: SM {res['gpu_after']['clocks.sm']} MHz, memory {res['gpu_after']['clocks.mem']} MHz"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
