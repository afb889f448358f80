"""Where the fp8 path's time goes: graph time of the main kernel's diagnostic variants
(KDTREE_DIAG=1 build) on the same per-layer pools, bf16 and fp8 e4m3, in one process.

Variants (traits.h kVariants, diagnostic build): 11 the H200's production variant, 12 loads only,
13 math only, 14 fp8 via bf16 (blocks widened to bf16, bf16 MMAs: the fp8 path before the f16
MMAs), 15 f16 path with the widening skipped, 16 bf16 path with the widening skipped, 17 math
only via bf16, 18 f16 path with block i + 1 widened in block i's S phase (no barrier of its
own). Modes 12, 13, 15, 16, 17 compute wrong output (timing only). Two passes, the
second in reverse order; prints each pass and the median.

    python3 research/kernel-lab/bench/fp8_split.py --shape 1,8,4,91000 --shape 8,8,4,91000
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, os.path.join(ROOT, "kernels", "bench"))

import bench_verify as bv  # noqa: E402
import torch  # noqa: E402
from kdtree_mla import _C, _diag  # noqa: E402

NAMES = {
    11: "default",
    12: "loads only",
    13: "math only",
    14: "fp8 via bf16",
    15: "no widening",
    16: "via bf16, no widening",
    17: "math only via bf16",
    18: "widened ahead",
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", action="append", default=[])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--kv", default="bf16,fp8_e4m3")
    ap.add_argument("--json", default=None)
    ap.add_argument("--variants", default="11,12,13,14,15,16,17,18", help="fp8 variants timed")
    ap.add_argument("--bf16-variants", default="11,12,13")
    a = ap.parse_args()
    assert _C.DIAG, "needs the KDTREE_DIAG=1 build"
    bw = bv.copy_bandwidth()
    print(f"copy bandwidth {bw / 1e12:.3f} TB/s", flush=True)
    rows = []
    for text in a.shape or ["1,8,4,91000"]:
        b, h, d, prefix = (int(x) for x in text.split(","))
        for kv in a.kv.split(","):
            case = bv.Case(b, h, d, prefix, seed=1, kv_dtype=bv.KV_DTYPES[kv])
            vs = [int(v) for v in (a.bf16_variants if kv == "bf16" else a.variants).split(",")]
            got = {v: [] for v in vs}
            for p in range(2):
                for v in vs if p == 0 else vs[::-1]:
                    _diag.set_force_variant(case.ws, v)
                    got[v].append(bv.graph_us(case.ours, case.n_layers, a.reps))
            floor = case.kv_bytes / bw * 1e6
            for v in vs:
                row = {
                    "B": b,
                    "H": h,
                    "D": d,
                    "prefix": prefix,
                    "kv": kv,
                    "variant": v,
                    "name": NAMES[v],
                    "graph_us": got[v],
                    "median_us": statistics.median(got[v]),
                    "floor_us": floor,
                    "layers": case.n_layers,
                }
                rows.append(row)
                print(
                    f"| {b},{h},{d},{prefix} | {kv} | {v} {NAMES[v]} | "
                    f"{' / '.join(f'{x:.1f}' for x in got[v])} | floor {floor:.1f} |",
                    flush=True,
                )
            del case
            torch.cuda.empty_cache()
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"copy_bw": bw, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
