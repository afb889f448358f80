"""Instruction-fetch probe (run on the device): what does code cost the first time an SM runs it?

The verify kernel's once-per-call code (its front, epilogue and merge) runs far slower than its
instruction count in the traces (research/kernel-history.md, sessions 5 and 8), and Nsight
Compute put most of the merge's stall samples on "no instruction". This probe asks the plain
question behind that: a kernel of N straight-line FFMAs (8 independent chains, 16 bytes of code
each, no branches) is timed with clock64 around the block, twice in the same launch (pass 0
runs code no warp of this launch has run; pass 1 the same code again), on every SM, in several
launches back to back, and with another kernel's code run on the SMs in between. Cycles per
instruction (CPI) near 1 in pass 1 is the issue rate; pass 0 against pass 1 is the fetch cost
of cold code, and launch 0 against later launches says whether an SM keeps a kernel's code
between launches.

Then our kernel, in bench_verify.py's graphs (one call a layer), with its code warm (calls
back to back, as bench_verify.py times them) and cold (bench/code_evict.py's kernel before
every call, as a model step's other kernels would leave it): cold = graph(evict + ours) -
graph(evict alone), per call, with an evictor that lets our call launch at once (PDL) and one
that does not. The evictor takes ~45 us a call, so for long calls (91k, B=8) the difference is
within its own spread.

  python3 bench/icache_probe.py [--json out.json] [--cases 0,2,3,4,5] [--no-ours | --ours-only]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

SIZES = [256, 1024, 4096, 8192]  # FFMAs: 4 KB .. 128 KB of straight-line code
WARPS = [1, 8]  # warps a CTA (one CTA an SM), all running the same code
LAUNCHES = 5


def source(n: int, salt: int) -> str:
    """A kernel of n FFMAs over 8 chains; `salt` varies the constants (another kernel's code)."""
    body = []
    for i in range(n):
        c = i % 8
        body.append(f"x{c} = fmaf(x{c}, a, {1.0 + 1e-7 * ((i * 7 + salt) % 97):.9f}f);")
    body = "\n".join(body)
    return f"""
extern "C" __global__ void __launch_bounds__(256) straight(const float* in, float* out,
                                                           long long* cyc, int passes) {{
  const float a = in[0];
  float x0 = in[1] + threadIdx.x, x1 = x0 + 1, x2 = x0 + 2, x3 = x0 + 3, x4 = x0 + 4,
        x5 = x0 + 5, x6 = x0 + 6, x7 = x0 + 7;
  if (__float_as_int(a) == 0x7fc00001) out[0] = x7;  // a branch on `a`: its load lands before pass 0
#pragma unroll 1
  for (int r = 0; r < passes; ++r) {{
    long long t0, t1;
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(t0) : "f"(a), "f"(x0), "f"(x7) : "memory");
{body}
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(t1)
                 : "f"(x0), "f"(x1), "f"(x2), "f"(x3), "f"(x4), "f"(x5), "f"(x6), "f"(x7) : "memory");
    if (threadIdx.x % 32 == 0) cyc[(blockIdx.x * 8 + threadIdx.x / 32) * 2 + r] = t1 - t0;
  }}
  out[blockIdx.x * blockDim.x + threadIdx.x] = x0 + x1 + x2 + x3 + x4 + x5 + x6 + x7;
}}
"""


def main() -> None:
    import cupy as cp

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default=None)
    ap.add_argument("--cases", default="0,2,3,4,5", help="bench_verify.DEFAULT_CASES indices")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--no-ours", action="store_true", help="the straight-line probe only")
    ap.add_argument("--ours-only", action="store_true", help="our kernel warm and cold only")
    args = ap.parse_args()
    dev = cp.cuda.Device()
    sms = dev.attributes["MultiProcessorCount"]
    clock_khz = cp.cuda.runtime.getDeviceProperties(dev.id)["clockRate"]
    opts = (f"--gpu-architecture=sm_{dev.compute_capability}",)
    inp = cp.asarray([0.999999, 0.5], dtype=cp.float32)
    out = cp.zeros(sms * 256, dtype=cp.float32)
    res = {"sms": sms, "clock_mhz": clock_khz / 1000, "rows": []}
    print(
        f"SMs {sms}, clock {clock_khz / 1000:.0f} MHz; CPI = median over SMs (warp 0) of cycles / FFMAs"
    )
    print(
        "| FFMAs | code KB | warps/CTA | between launches | launch | pass 0 CPI | pass 1 CPI | pass 0 us |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for n in [] if args.ours_only else SIZES:
        kern = cp.RawKernel(source(n, 0), "straight", options=opts)
        other = cp.RawKernel(source(n, 13), "straight", options=opts)
        for warps in WARPS:
            for between in ("nothing", "other code"):
                for launch in range(LAUNCHES):
                    cyc = cp.zeros(sms * 8 * 2, dtype=cp.int64)
                    if between == "other code" or launch == 0:
                        oc = cp.zeros(sms * 8 * 2, dtype=cp.int64)
                        other((sms,), (32 * warps,), (inp, out, oc, cp.int32(2)))
                    kern((sms,), (32 * warps,), (inp, out, cyc, cp.int32(2)))
                    cp.cuda.Device().synchronize()
                    c = cyc.get().reshape(sms, 8, 2)[:, 0, :]
                    p0 = statistics.median(int(v) for v in c[:, 0]) / n
                    p1 = statistics.median(int(v) for v in c[:, 1]) / n
                    us = statistics.median(int(v) for v in c[:, 0]) / (clock_khz / 1000)
                    row = dict(
                        ffmas=n,
                        code_kb=n * 16 / 1024,
                        warps=warps,
                        between=between,
                        launch=launch,
                        pass0_cpi=p0,
                        pass1_cpi=p1,
                        pass0_us=us,
                    )
                    res["rows"].append(row)
                    print(
                        f"| {n} | {n * 16 / 1024:.0f} | {warps} | {between} | {launch} | {p0:.2f} | {p1:.2f} | {us:.2f} |"
                    )
    if not args.no_ours:
        res["ours"] = ours_warm_cold([int(x) for x in args.cases.split(",")], args.reps)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


def ours_warm_cold(cases, reps):
    """Graph us a call of our kernel with its code warm and cold (module docstring)."""
    import torch

    sys.path.insert(0, HERE)
    from bench_verify import DEFAULT_CASES, Case, evicted_graph_us, graph_us
    from code_evict import CodeEvictor

    evictors = {"cold": CodeEvictor(trigger=True), "cold_no_pdl": CodeEvictor(trigger=False)}
    rows = []
    print(
        "\nevictor before every call: cold = it lets our call launch at once (PDL trigger), "
        "cold_no_pdl = our call launches after it ended"
    )
    print(
        "| B | H | D | prefix | ours, code warm (us) | code cold | cold - warm | cold, no PDL overlap | "
        "that - warm | evictor alone (us) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for ci in cases:
        b, h, d, prefix, *flags = DEFAULT_CASES[ci]
        case = Case(b, h, d, prefix, seed=ci + 1, sorted_pages="sorted" in flags)
        n = case.n_layers
        for i in range(n):
            case.ours(i)
            for ev in evictors.values():
                ev()
        torch.cuda.synchronize()

        t = {}
        for _ in (1, 2):  # two passes, alternating, against order effects
            t.setdefault("warm", []).append(graph_us(case.ours, n, reps))
            for name, ev in evictors.items():
                both, alone = evicted_graph_us(case.ours, lambda i, ev=ev: ev(), n, reps)
                t.setdefault(name + "_both", []).append(both)
                t.setdefault(name + "_evict", []).append(alone)
        mean = {k: statistics.mean(v) for k, v in t.items()}
        row = dict(B=b, H=h, D=d, prefix=prefix, layers=n, passes=t, warm_us=mean["warm"])
        for name in evictors:
            row[name + "_us"] = mean[name + "_both"] - mean[name + "_evict"]
        rows.append(row)
        w, c, c2 = row["warm_us"], row["cold_us"], row["cold_no_pdl_us"]
        print(
            f"| {b} | {h} | {d} | {prefix} | {w:.2f} ({t['warm'][0]:.2f} / {t['warm'][1]:.2f}) | "
            f"{c:.2f} | {c - w:+.2f} | {c2:.2f} | {c2 - w:+.2f} | {mean['cold_evict']:.2f} |",
            flush=True,
        )
        del case
        torch.cuda.empty_cache()
    return rows


if __name__ == "__main__":
    main()
