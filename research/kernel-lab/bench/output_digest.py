"""SHA-256 of the kernel's outputs on fixed inputs (run on the device), to tell whether two
builds compute the same bits: run it with each tree's extension and compare the lines.

One line a case: the case, the digest of o and LSE, and the relative Frobenius error of o
against the fp64 reference. The cases are the benchmark's B = 1 lengths (whose merge slices
have 16 to 25 granules), B = 8 and B = 32, H = 64, and odd shapes (mixed lengths, one draft
token, zero prefixes). Each case runs the call three times and checks the three results are
identical (the fused merge computes a slice the same way whoever takes it).

  python3 research/kernel-lab/bench/output_digest.py [--json FILE]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from kdtree_mla import api  # noqa: E402
from kdtree_mla_testing.inputs import make_inputs  # noqa: E402

# (prefix lengths, draft lengths, heads)
CASES = [
    ([0], [4], 8),
    ([1024], [4], 8),
    ([5700], [4], 8),
    ([23000], [4], 8),
    ([91000], [4], 8),
    ([91000] * 8, [4] * 8, 8),
    ([23000], [4], 64),
    ([5700] * 32, [4] * 32, 8),
    ([300, 0, 17000, 5, 64], [3, 1, 16, 2, 4], 16),
    ([40000], [1], 128),
]


def digest(*tensors: torch.Tensor) -> str:
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.contiguous().view(torch.uint8).cpu().numpy().tobytes())
    return h.hexdigest()[:16]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    rows, bad = [], 0
    for i, (prefix, draft, heads) in enumerate(CASES):
        x = make_inputs(prefix, draft, heads, device="cuda", seed=1000 + i)
        t = x.num_tokens
        ws = api.VerifyWorkspace(
            max_batch=len(prefix), max_tokens=t, num_heads=heads, device="cuda"
        )
        runs = []
        for _ in range(3):
            o = torch.full((t, heads, 512), float("nan"), dtype=torch.bfloat16, device="cuda")
            lse = torch.full((t, heads), float("nan"), dtype=torch.float32, device="cuda")
            api.verify_attention(
                q=x.q, k_extend=x.k_extend, v_extend=x.v_extend, out=o, k_buffer=x.k_buffer,
                v_buffer=x.v_buffer, qo_indptr=x.qo_indptr, kv_indptr=x.kv_indptr,
                kv_indices=x.kv_indices, custom_mask=x.custom_mask, mask_indptr=x.mask_indptr,
                sm_scale=x.sm_scale, workspace=ws, lse=lse,
            )  # fmt: skip
            torch.cuda.synchronize()
            runs.append((o, lse))
        d = [digest(o, lse) for o, lse in runs]
        ref, _ = x.reference()
        o = runs[0][0].double()
        err = float((o - ref).norm() / ref.norm())
        stable = len(set(d)) == 1
        bad += (not stable) or not err < 1e-2
        case = f"B{len(prefix)} H{heads} prefix {prefix[0] if len(set(prefix)) == 1 else prefix}"
        rows.append({"case": case, "digest": d[0], "stable": stable, "rel_err": err})
        print(
            f"{case:40s} {d[0]}  {'stable' if stable else 'UNSTABLE ' + ' '.join(d)}  err {err:.2e}"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
