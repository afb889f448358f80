"""Where the time of one verify call goes (diagnostic; run on the device after the build).

Runs a traced kernel variant (``_C.VARIANTS`` mode 8: by default the twin of the device's
default variant, plus %globaltimer and clock64 stamps at fixed points, csrc/verify_main.cuh
and verify_combine.cuh) in one CUDA
graph of L layers, each layer with its own workspace and trace buffer, exactly as
bench_verify.py's graph mode otherwise. Per case it prints the medians over replays and
layers of:

  gap     previous layer's call finished -> this main kernel's inputs visible
  last_pub  inputs visible -> the grid's last partial published (fused merge)
  pub>end   that -> last main CTA done: the fused merge's tail
  blocks  first KV block landed -> last PV done (CTA 0), and per block
  epi     last PV done -> last epilogue stored (CTA 0)
  main    inputs visible -> last main CTA done (its fused merge included)
  m>c     last main CTA done -> combine's inputs visible (two-kernel path, --split)
  comb    combine inputs visible -> last combine CTA done (two-kernel path)
  period  one layer's call, inputs visible to the next layer's inputs visible

and, for CTA 0 and for the CTA that finished last, every main-kernel trace point's offset from
inputs visible (POINTS).

    python3 research/kernel-lab/bench/trace_verify.py [--cases 0,2,4] [--reps 20] [--json out.json]

Intervals inside CTA 0 use clock64 (converted with the SM clock measured from both stamps);
intervals across CTAs use %globaltimer.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from bench_verify import Case, pick_cases  # noqa: E402
from kdtree_mla import _diag, api  # noqa: E402

KEYS = (
    "gap",
    "last_pub",
    "pub>end",
    "blocks",
    "per_block",
    "epi",
    "main",
    "m>c",
    "comb",
    "period",
)
# Main-kernel trace points in time order (csrc/verify_main.cuh), reported for CTA 0 and for
# the CTA that finished last, as offsets from point 1 (inputs visible) in us.
POINTS = (
    ("ptrs_landed", 29),  # load warp 0: the index pointers landed (its schedule's loads)
    ("sched", 12),
    ("split", 2),
    ("lw_walk", 30),  # load warp 0: its walk set up, about to issue its first index copies
    ("idx_issued", 10),
    ("q_issued", 3),
    ("idx_landed", 4),
    ("walk", 11),
    ("q_landed", 6),
    ("kv1_landed", 7),
    ("last_pv", 8),
    ("norm", 13),
    ("w0_stores", 15),
    ("stored", 9),
    ("published", 16),  # fused merge: partial stored and counted (last cut piece)
    ("merge_start", 19),  # fused merge: the first cut segment's merge begun
    ("parts_seen", 22),  # fused merge: every part seen stored (copies issued, LSEs landed)
    ("parts_landed", 23),  # fused merge: every part's range landed
    ("gran_loop", 25),  # fused merge: granule loop entered (weights ready, pg chosen)
    ("t0_summed", 26),  # fused merge: thread 0's parts summed (its first granule)
    ("t0_reduced", 27),  # fused merge: ... and reduced over its thread group (shuffles)
    ("t0_written", 24),  # fused merge: thread 0's granules merged and written
    ("seg1_merged", 20),  # fused merge: the first cut segment merged (its share)
    ("merged", 18),  # fused merge: every cut segment of this CTA merged
    ("load_done", 5),
)


def traced_variant(ext) -> int:
    """The traced twin (same stages, overlap and load warps) of the device's default variant."""
    stages, _, pipe, _, loaders = ext.VARIANTS[ext.variant_for_device(torch.cuda.current_device())]
    for v, (s, _, pp, mode, lw) in enumerate(ext.VARIANTS):
        if mode & 8 and (s, pp, lw) == (stages, pipe, loaders):
            return v
    raise SystemExit("no traced twin of the device's default variant; pass --variant")


def analyse(traces, num_ctas, crow, clock_ghz):
    """Intervals (us) of each layer from the host copies of its trace buffers."""
    out = []
    prev_end = None
    starts = []
    nan = float("nan")
    for tr in traces:
        half = tr.shape[1] // 2
        g, c = tr[:, :half], tr[:, half:]
        main = g[:num_ctas]
        active = [i for i in range(num_ctas) if main[i, 2] != 0]
        start = min(int(main[i, 1]) for i in range(num_ctas))

        def done(i, main=main):  # a CTA's last point: its merge share, else its last store
            return max(int(main[i, 9]), int(main[i, 18]))

        last = max(active, key=done)
        main_end = done(last)
        comb = [r for r in range(crow, tr.shape[0]) if g[r, 0] != 0]
        comb_vis = min(int(g[r, 1]) for r in comb) if comb else None
        comb_end = max(int(g[r, 3]) for r in comb) if comb else main_end

        def cyc(a, b, row=0, c=c):
            ca, cb = c[row, a], c[row, b]
            return float(cb - ca) / clock_ghz / 1e3 if ca and cb else float("nan")

        nblk = int(tr[0, 14])
        pubs = [int(main[i, 16]) for i in active if main[i, 16] != 0]
        row = {
            "gap": (start - prev_end) / 1e3 if prev_end else nan,
            # fused merge: inputs visible -> the grid's last partial published, and from there
            # to the last CTA done (the merge's tail; globaltimer)
            "last_pub": (max(pubs) - start) / 1e3 if pubs else nan,
            "pub>end": (main_end - max(pubs)) / 1e3 if pubs else nan,
            "blocks": cyc(7, 8),
            "per_block": cyc(7, 8) / max(nblk - 1, 1),
            "epi": cyc(8, 9),
            "main": (main_end - start) / 1e3,
            "m>c": (comb_vis - main_end) / 1e3 if comb else nan,
            "comb": (comb_end - comb_vis) / 1e3 if comb else nan,
            "comb_cta_median": (
                statistics.median((int(g[r, 3]) - int(g[r, 1])) / 1e3 for r in comb)
                if comb
                else nan
            ),
            "last_cta_start": (int(main[last, 1]) - start) / 1e3,
            "active_ctas": len(active),
            "blocks_cta0": nblk,
            "blocks_last": int(tr[last, 14]),
        }
        for name, k in POINTS:
            row[f"cta0.{name}"] = cyc(1, k)
            row[f"last.{name}"] = cyc(1, k, last)
        starts.append(start)
        prev_end = comb_end
        out.append(row)
    for i in range(len(out) - 1):
        out[i]["period"] = (starts[i + 1] - starts[i]) / 1e3
    out[-1]["period"] = float("nan")
    return out


# Per-CTA spread (--ctas): these points' globaltimer offsets from the grid's first "inputs
# visible", for every active CTA, with the SM it ran on (trace slot smid_slot).
CTA_POINTS = (("q_landed", 6), ("kv1_landed", 7), ("last_pv", 8), ("published", 16))


def cta_spread(per_rep, num_ctas, smid_slot):
    """Across CTAs: quantiles of each point (median over samples), and whether a CTA's
    lateness follows its SM (per-SM mean lateness in odd vs even samples, Pearson r)."""
    quant = {n: [] for n, _ in CTA_POINTS}
    late = {n: {} for n, _ in CTA_POINTS}  # point -> sm -> [(sample, lateness)]
    late_cta = {n: {} for n, _ in CTA_POINTS}  # point -> CTA row (logical index) -> [lateness]
    sample = 0
    for traces in per_rep:
        for tr in traces[1:]:  # layer 0: no predecessor
            half = tr.shape[1] // 2
            g = tr[:num_ctas, :half]
            active = [i for i in range(num_ctas) if g[i, 2] != 0]
            start = min(int(g[i, 1]) for i in range(num_ctas))
            for name, k in CTA_POINTS:
                vals = [
                    ((int(g[i, k]) - start) / 1e3, int(g[i, smid_slot]), i)
                    for i in active
                    if g[i, k]
                ]
                if not vals:
                    continue
                xs = sorted(v for v, _, _ in vals)
                q = lambda f, xs=xs: xs[min(len(xs) - 1, int(f * len(xs)))]  # noqa: E731
                quant[name].append((xs[0], q(0.1), q(0.5), q(0.9), xs[-1]))
                med = q(0.5)
                for v, sm, cta in vals:
                    late[name].setdefault(sm, []).append((sample, v - med))
                    late_cta[name].setdefault(cta, []).append(v - med)
            sample += 1
    out = {}
    for name, _ in CTA_POINTS:
        if not quant[name]:
            continue
        cols = list(zip(*quant[name]))
        qs = [statistics.median(c) for c in cols]
        a, b, top = [], [], []
        for sm, xs in late[name].items():
            ev = [v for s, v in xs if s % 2 == 0]
            od = [v for s, v in xs if s % 2 == 1]
            if ev and od:
                a.append(statistics.fmean(ev))
                b.append(statistics.fmean(od))
                top.append((statistics.fmean(v for _, v in xs), sm))
        r = float("nan")
        if len(a) > 2 and statistics.pstdev(a) > 0 and statistics.pstdev(b) > 0:
            r = statistics.correlation(a, b)  # Pearson
        top.sort(reverse=True)
        out[name] = {
            "min_p10_p50_p90_max": [round(x, 2) for x in qs],
            "sm_persistence_r": round(r, 3),
            "latest_sms": [(sm, round(v, 2)) for v, sm in top[:8]],
            "earliest_sms": [(sm, round(v, 2)) for v, sm in top[-4:]],
            "all_sms": [(sm, round(v, 3)) for v, sm in top],
            "latest_ctas": sorted(
                ((c, round(statistics.fmean(xs), 2)) for c, xs in late_cta[name].items()),
                key=lambda x: -x[1],
            )[:12],
        }
    return out


def clock_rate_ghz(traces, num_ctas) -> float:
    """SM cycles per ns from CTA spans (entry -> last store) stamped with both clocks."""
    cyc = ns = 0
    for tr in traces:
        half = tr.shape[1] // 2
        for i in range(num_ctas):
            if tr[i, 9] and tr[i, 0]:
                ns += int(tr[i, 9] - tr[i, 0])
                cyc += int(tr[i, half + 9] - tr[i, half + 0])
    return cyc / ns if ns else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--cases", default="0,2,3,4,5", help="indices into bench_verify's case list (DEFAULT_CASES)"
    )
    ap.add_argument("--envelope", action="store_true", help="index bench_verify.ENVELOPE_CASES")
    ap.add_argument(
        "--shape", action="append", default=[], help="trace this shape (B,H,D,PREFIX; repeatable)"
    )
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--json", default=None)
    ap.add_argument("--variant", type=int, default=None, help="a traced _C.VARIANTS index")
    ap.add_argument(
        "--split", action="store_true", help="merge in the combine kernel (split_combine)"
    )
    ap.add_argument("--ctas", action="store_true", help="per-CTA spread and its SMs (cta_spread)")
    ap.add_argument(
        "--evict-code",
        action="store_true",
        help="bench/code_evict.py's kernel before every call: our code cold, as in a model step",
    )

    args = ap.parse_args()
    ext = api.load()
    variant = traced_variant(ext) if args.variant is None else args.variant
    rows, slots, crow = ext.TRACE_ROWS, ext.TRACE_SLOTS, ext.TRACE_COMBINE_ROW
    if args.evict_code:
        from code_evict import CodeEvictor

        evict = CodeEvictor(trigger=True)
    else:

        def evict():
            pass

    results = []
    cases = pick_cases(args)
    picked = range(len(cases)) if args.shape else [int(x) for x in args.cases.split(",")]
    for ci in picked:
        b, h, d, prefix, *flags = cases[ci]
        case = Case(b, h, d, prefix, seed=ci + 1, sorted_pages="sorted" in flags)
        n = min(case.n_layers, args.layers)
        wss, bufs = [], []
        for _ in range(n):
            ws = api.VerifyWorkspace(
                max_batch=b, max_tokens=b * d, num_heads=h, device="cuda", split_combine=args.split
            )
            _diag.set_force_variant(ws, variant)
            _diag.set_trace(ws, torch.zeros(rows, slots, dtype=torch.int64, device="cuda"))
            wss.append(ws)
            bufs.append(_diag.trace(ws))

        for i in range(n):
            evict()
            case.ours(i, wss[i])
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for i in range(n):
                evict()
                case.ours(i, wss[i])
        per_rep = []
        for r in range(args.reps + 2):
            g.replay()
            torch.cuda.synchronize()
            if r >= 2:
                per_rep.append([t.cpu().numpy() for t in bufs])
        ghz = statistics.median(clock_rate_ghz(t, wss[0].num_ctas) for t in per_rep)
        samples = [
            row
            for traces in per_rep
            for row in analyse(traces, wss[0].num_ctas, crow, ghz)[1:]  # layer 0: no predecessor
        ]
        med = {}
        for k in samples[0]:
            vals = [s[k] for s in samples if s.get(k) == s.get(k)]
            med[k] = statistics.median(vals) if vals else float("nan")
        med.update(
            case=f"B{b} H{h} D{d} {prefix}", layers=n, sm_clock_ghz=ghz,
            active_ctas=samples[0]["active_ctas"], blocks_cta0=samples[0]["blocks_cta0"],
        )  # fmt: skip
        if args.ctas:
            med["ctas"] = cta_spread(per_rep, wss[0].num_ctas, ext.TRACE_SMID_SLOT)
        results.append(med)
        print(json.dumps(med), flush=True)
        del g, case, wss, bufs, per_rep
        torch.cuda.empty_cache()
    print("\nmedians in us (per_block: us per 32-token block of CTA 0)")
    print("| case | CTAs | blk/CTA | " + " | ".join(KEYS) + " |")
    for m in results:
        cells = " | ".join(f"{m[k]:.2f}" for k in KEYS)
        print(f"| {m['case']} | {m['active_ctas']} | {m['blocks_cta0']} | {cells} |")
    print("\nmain-kernel points, us after inputs visible: CTA 0 / the CTA that finished last")
    print("| case | " + " | ".join(n for n, _ in POINTS) + " |")
    for m in results:
        cells = " | ".join(f"{m['cta0.' + n]:.2f}/{m['last.' + n]:.2f}" for n, _ in POINTS)
        print(f"| {m['case']} | {cells} |")
    print("| case | last CTA start | blocks CTA0/last | combine CTA median |")
    for m in results:
        print(
            f"| {m['case']} | {m['last_cta_start']:.2f} | {m['blocks_cta0']}/{m['blocks_last']} | "
            f"{m['comb_cta_median']:.2f} |"
        )
    for m in results:
        for name, s in m.get("ctas", {}).items():
            print(
                f"{m['case']} {name}: CTAs min/p10/p50/p90/max {s['min_p10_p50_p90_max']}, "
                f"SM persistence r={s['sm_persistence_r']}, latest SMs {s['latest_sms']}, "
                f"earliest {s['earliest_sms']}, latest CTAs {s.get('latest_ctas')}"
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
