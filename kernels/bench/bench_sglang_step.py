"""Per-step target-verify attention cost through SGLang's real Triton backend, patched or not.

One "step" is what a verify forward pass spends in attention: ``init_forward_metadata`` (or, in
CUDA-graph mode, the release's replay hook, ``init_forward_metadata_replay_cuda_graph`` or from
0.5.13 ``init_forward_metadata_out_graph``, plus the graph replay) and then
``TritonAttnBackend.forward_extend`` for every layer (draft-KV save + attention), each layer
with its own KV buffer so the L2 cache does not flatter short contexts. Timed with CUDA events
around the whole step (so host launch gaps in eager mode count), median of ``--reps``.

Modes:

* ``sglang_eager``  the release's Triton ``extend_attention_fwd`` (the router removed);
* ``kdtree_eager``  the kernel's backend: on a release with the plugin framework (``--wheel``
  0.5.11 and later) the ``kdtree`` backend its ``load_plugins()`` registers; before that the
  patched Triton backend (startup hook installed before SGLang's import);
* ``kdtree_graph``  the patched backend captured in one CUDA graph of all layers;
* ``sglang_graph``  SGLang's Triton path in a CUDA graph (today's known-good serving mode).

The floor is the KV bytes every step must read (layers x (prefix x pool row + draft x 1152 B)
per request; a pool row is 1152 B in bf16, 576 B in fp8) over the device-to-device copy
bandwidth measured in the same run (read + write counted).

``--kv-dtype fp8_e4m3`` (or ``fp8_e5m2``) gives every layer an fp8 pool holding K divided by
``--kv-scale``, as SGLang stores it, and layers carrying that scale; both paths then read fp8.
That needs a release whose own Triton MLA path reads an fp8 cache (0.5.13 and later).

    python kernels/bench/bench_sglang_step.py --json $OUT/sglang_step.json
    python kernels/bench/bench_sglang_step.py --wheel .whl/sglang-0.5.23-*.whl  # the plugin path
    python kernels/bench/bench_sglang_step.py --wheel .whl/sglang-0.5.23-*.whl --kv-dtype fp8_e4m3

A runtime-context release (0.5.14 on) also needs ``msgspec`` (its KV-index plan imports it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "kernels"))

from kdtree_mla_testing import standalone  # noqa: E402
from kdtree_mla_testing.benchinfo import copy_bandwidth, describe, gpu_facts, run_info  # noqa: E402
from kdtree_mla_testing.inputs import KV_DTYPES  # noqa: E402

SM_SCALE = 192**-0.5


def time_step(step: Any, reps: int, warmup: int) -> float:
    """Median milliseconds of ``step()`` between two CUDA events."""
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    samples = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        step()
        b.record()
        torch.cuda.synchronize()
        samples.append(a.elapsed_time(b))
    return statistics.median(samples)


def bench_context(make: Any, prefix: int, args: argparse.Namespace, bw: float) -> dict[str, Any]:
    from kdtree_mla.sglang import patch
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    b, d, h, layers = args.batch, args.draft, args.heads, args.layers
    pool_size = b * (prefix + d) + 1024
    fp8 = KV_DTYPES[args.kv_dtype]
    pool = standalone.MLAPool(layers, pool_size, dtype=fp8)
    for buf in pool.buffers:
        if fp8 is None:
            buf.normal_()
        else:  # SGLang stores K / k_scale in an fp8 pool
            buf.copy_((torch.randn(buf.shape, device="cuda") / args.kv_scale).to(buf.dtype))
    runner = standalone.make_model_runner(
        pool=pool,
        num_heads=h,
        num_draft_tokens=d,
        max_requests=max(b, 4),
        context_len=prefix + 64,
        cuda_graph_max_bs=b,
    )
    if make.__module__ == "kdtree_mla.sglang.plugin":  # the runner of --attention-backend kdtree
        runner.server_args.attention_backend = "kdtree"
        runner.prefill_attention_backend_str = runner.decode_attention_backend_str = "kdtree"
    backend = make(runner)
    router = vars(backend).get(patch.ROUTER)
    if router is None:
        raise SystemExit("the backend declined the kernel; see the kdtree-verify line above")
    kernel_fwd = backend.extend_attention_fwd
    sglang_fwd = router.original

    gen = torch.Generator().manual_seed(prefix)
    perm = torch.randperm(pool_size, generator=gen)[: b * (prefix + d)].cuda()
    slots = [perm[i * (prefix + d) : (i + 1) * (prefix + d)] for i in range(b)]
    parents = [[-1] + [int(torch.randint(0, i, (1,), generator=gen)) for i in range(1, d)]] * b
    fb = standalone.verify_batch(
        runner=runner, prefix_lens=[prefix] * b, num_draft_tokens=d, parents=parents,
        req_rows=list(range(b)), slots=slots,
    )  # fmt: skip
    q = torch.randn((b * d, h * 576), device="cuda").to(torch.bfloat16)
    k = torch.randn((b * d, 1, 576), device="cuda").to(torch.bfloat16)
    v = k[..., :512].clone()
    kv_scale = None if fp8 is None else args.kv_scale
    layer_objs = [standalone.make_layer(i, h, SM_SCALE, kv_scale=kv_scale) for i in range(layers)]

    def eager_step() -> Any:
        backend.init_forward_metadata(fb)
        out = None
        for layer in layer_objs:
            out = backend.forward_extend(q, k, v, layer, fb)
        return out

    result: dict[str, Any] = {
        "context": prefix, "batch": b, "heads": h, "draft": d, "kv_dtype": args.kv_dtype,
    }  # fmt: skip
    backend.extend_attention_fwd = sglang_fwd
    o_sglang = eager_step().clone()
    result["sglang_eager_ms"] = time_step(eager_step, args.reps_sglang, 1)
    backend.extend_attention_fwd = kernel_fwd
    o_kernel = eager_step().clone()
    calls_before = router.kernel_calls
    result["kdtree_eager_ms"] = time_step(eager_step, args.reps, args.warmup)
    assert router.kernel_calls > calls_before, "the patched path did not reach the kernel"
    diff = (o_kernel.double() - o_sglang.double()).norm() / o_sglang.double().norm()
    result["rel_diff_vs_sglang"] = float(diff)

    # CUDA graphs: capture all layers once per mode over SGLang's static buffers.
    backend.init_cuda_graph_state(b, b * d)
    static_rpi = fb.req_pool_indices.clone()
    static_seq = fb.seq_lens.clone()

    out_in_graph = getattr(backend, "kdtree_graph_hooks", "capture_replay") == "out_in_graph"
    fb_static = SimpleNamespace(
        **{**vars(fb), "req_pool_indices": static_rpi, "seq_lens": static_seq}
    )

    def capture(fwd: Any) -> torch.cuda.CUDAGraph:
        backend.extend_attention_fwd = fwd
        if out_in_graph:  # 0.5.13 on: out_graph before capture, in_graph inside it
            backend.init_forward_metadata_out_graph(fb_static, True)
        else:
            backend.init_forward_metadata_capture_cuda_graph(
                b, b * d, static_rpi, static_seq, None, ForwardMode.TARGET_VERIFY, fb.spec_info
            )
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for layer in layer_objs:
                backend.forward_extend(q, k, v, layer, fb)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            if out_in_graph:
                backend.init_forward_metadata_in_graph(fb_static)
            for layer in layer_objs:
                backend.forward_extend(q, k, v, layer, fb)
        return graph

    for mode, fwd, reps in (
        ("kdtree_graph", kernel_fwd, args.reps),
        ("sglang_graph", sglang_fwd, args.reps_sglang),
    ):
        graph = capture(fwd)

        def graph_step(graph: torch.cuda.CUDAGraph = graph) -> None:
            if out_in_graph:
                backend.init_forward_metadata_out_graph(fb_static, False)
            else:
                backend.init_forward_metadata_replay_cuda_graph(
                    b, static_rpi, static_seq, fb.seq_lens_sum, None, ForwardMode.TARGET_VERIFY,
                    fb.spec_info, fb.seq_lens_cpu,
                )  # fmt: skip
            graph.replay()

        result[f"{mode}_ms"] = time_step(graph_step, reps, args.warmup if reps == args.reps else 1)
        del graph
    backend.extend_attention_fwd = kernel_fwd

    kv_bytes = layers * b * (prefix * (1152 if fp8 is None else 576) + d * 1152)
    result["floor_ms"] = kv_bytes / bw * 1e3
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contexts", type=int, nargs="+", default=[5700, 23000, 91000])
    parser.add_argument("--layers", type=int, default=61, help="Kimi K2 has 61")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", type=int, default=8, help="per GPU at TP8")
    parser.add_argument("--draft", type=int, default=4)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument(
        "--reps-sglang", type=int, default=7, help="SGLang's path takes ~0.7 s a step at 91k"
    )
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--wheel", type=Path, default=REPO / ".whl/sglang-0.5.10-py3-none-any.whl")
    parser.add_argument(
        "--kv-dtype",
        choices=list(KV_DTYPES),
        default="bf16",
        help="the KV cache's type, as --kv-cache-dtype names it (fp8 needs SGLang 0.5.13 or later)",
    )
    parser.add_argument(
        "--kv-scale",
        type=float,
        default=1.0,
        help="the layers' k_scale / v_scale with an fp8 cache (the pool holds K / scale)",
    )
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if not (args.kv_scale > 0 and args.kv_scale < float("inf")):
        parser.error(f"--kv-scale: expected a positive finite number, got {args.kv_scale}")
    if args.kv_dtype == "bf16" and args.kv_scale != 1.0:
        parser.error(
            "--kv-scale: applies to an fp8 cache only; add --kv-dtype fp8_e4m3 or fp8_e5m2"
        )
    if not args.wheel.is_file():
        parser.error(
            f"--wheel: {args.wheel} is not a file; fetch one with "
            "`pip download --no-deps sglang==0.5.23 -d .whl` and pass its path"
        )

    tree = standalone.build_tree(args.wheel, Path(tempfile.mkdtemp(prefix="sglang-")))
    sys.path.insert(0, str(tree))
    if (tree / "sglang" / "srt" / "plugins").is_dir():
        # The plugin path, as a server on 0.5.11+ takes it: the kernel package's entry point
        # (a dist-info on the path), the wheel's own load_plugins(), then the registry entry.
        dist = tree / "kdtree_mla-0.1.0.dist-info"
        dist.mkdir()
        (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: kdtree-mla\nVersion: 0.1.0\n")
        (dist / "entry_points.txt").write_text(
            "[sglang.srt.plugins]\nkdtree = kdtree_mla.sglang.plugin:register\n"
        )
        from sglang.srt.layers.attention import attention_registry
        from sglang.srt.plugins import load_plugins

        load_plugins()
        make = attention_registry.ATTENTION_BACKENDS["kdtree"]
        path = "plugin (--attention-backend kdtree)"
    else:
        os.environ["KDTREE_VERIFY"] = "1"
        from kdtree_mla._startup import install

        install()
        from sglang.srt.layers.attention import triton_backend as tb

        make = tb.TritonAttnBackend
        path = "startup hook (KDTREE_VERIFY=1)"
    version = args.wheel.name.split("-")[1]
    if args.kv_dtype != "bf16":
        from kdtree_mla.sglang.backend import reads_fp8_mla
        from sglang.srt.layers.attention.triton_backend import TritonAttnBackend

        if not reads_fp8_mla(TritonAttnBackend):
            raise SystemExit(
                f"--kv-dtype {args.kv_dtype}: SGLang {version}'s Triton MLA path does not read "
                "an fp8 KV cache, so neither path can be timed on it; pass --wheel with 0.5.13 "
                "or later"
            )

    info = run_info(torch.cuda.current_device())
    print(describe(info), flush=True)
    bw = copy_bandwidth()
    rows = []
    for prefix in args.contexts:
        rows.append(bench_context(make, prefix, args, bw))
        torch.cuda.empty_cache()  # the previous context's 61 KV buffers are garbage now
    device = torch.cuda.get_device_name()
    report = SimpleNamespace(
        run=info, device=device, sglang=version, path=path, copy_bandwidth_tbs=bw / 1e12,
        kv_dtype=args.kv_dtype, kv_scale=None if args.kv_dtype == "bf16" else args.kv_scale,
        rows=rows, gpu_after=gpu_facts(torch.cuda.current_device()),
    )  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(vars(report), indent=2))
    print(f"\nSGLang {version}, {path}")
    print(f"{device}, copy bandwidth {bw / 1e12:.2f} TB/s, {args.layers} layers, "
          f"B={args.batch} H={args.heads} D={args.draft}, KV {args.kv_dtype}, median of {args.reps} ({args.reps_sglang} for SGLang)")  # fmt: skip
    print("| context | SGLang Triton eager | kdtree eager | kdtree graph | SGLang Triton graph "
          "| KV floor | eager speed-up | graph speed-up | rel diff |")  # fmt: skip
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['context']} | {r['sglang_eager_ms']:.3f} ms | {r['kdtree_eager_ms']:.3f} ms "
            f"| {r['kdtree_graph_ms']:.3f} ms | {r['sglang_graph_ms']:.3f} ms "
            f"| {r['floor_ms']:.3f} ms | {r['sglang_eager_ms'] / r['kdtree_eager_ms']:.2f}x "
            f"| {r['sglang_graph_ms'] / r['kdtree_graph_ms']:.2f}x | {r['rel_diff_vs_sglang']:.1e} |"
        )
    if args.kv_dtype != "bf16":
        print(
            "rel diff with an fp8 cache: SGLang's Triton kernel rounds q and P to the pool's fp8 "
            "type, ~3e-2 (e4m3) / ~6e-2 (e5m2) from the fp64 result where the kernel stays "
            "within ~2e-3 (docs/kernel.md, fp8 accuracy); the column is mostly SGLang's rounding"
        )


if __name__ == "__main__":
    main()
