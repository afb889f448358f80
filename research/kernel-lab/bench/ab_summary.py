"""Side-by-side summary of bench_verify.py JSON files: per case, the graph us of every pass
under each label, and the change of each label's median against the first label's.

  python3 research/kernel-lab/bench/ab_summary.py old=a1.json,a2.json new=b1.json,b2.json

Files that do not exist are skipped (a pass cut short). The code-cold and L2-cold columns are
summarised too where the files have them (`--cold-code`, `--cold-l2`, `--cold-l2-discard`).
Used by scripts/device_diag.sh and scripts/device_ab.sh.
"""

from __future__ import annotations

import json
import os
import statistics
import sys

COLUMNS = (
    ("ours_graph_us", "warm"),
    ("ours_graph_cold_code_us", "cold"),
    ("ours_graph_cold_l2_us", "L2 cold"),
    ("ours_graph_cold_l2_discard_us", "L2 cold, dropped"),
)


def main(argv: list[str]) -> int:
    labels: list[str] = []
    rows: dict[tuple[str, str], dict[str, list[float]]] = {}
    for arg in argv:
        label, sep, files = arg.partition("=")
        if not sep or not label or not files:
            print(f"ab_summary.py: expected LABEL=FILE[,FILE...], got {arg!r}", file=sys.stderr)
            return 2
        labels.append(label)
        for path in files.split(","):
            if not os.path.exists(path):
                continue
            with open(path) as f:
                res = json.load(f)
            for c in res["cases"]:
                key = f"B{c['B']} H{c['H']} D{c.get('D', '?')} {c['prefix']} {c['pages']}"
                for col, name in COLUMNS:
                    if isinstance(c.get(col), (int, float)):
                        rows.setdefault((key, name), {}).setdefault(label, []).append(c[col])
    if not labels:
        print(__doc__)
        return 2
    ref = labels[0]
    print(f"graph us per call by pass; change = median(label) - median({ref})")
    for (key, name), by in rows.items():
        parts = []
        for label in labels:
            xs = by.get(label, [])
            part = f"{label} {' / '.join(f'{x:.2f}' for x in xs)}"
            if label != ref and xs and by.get(ref):
                part += f" ({statistics.median(xs) - statistics.median(by[ref]):+.2f})"
            parts.append(part)
        print(f"{key:30s} {name}  " + "  ".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
