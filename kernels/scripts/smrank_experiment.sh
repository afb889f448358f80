#!/usr/bin/env bash
# EXPERIMENT (branch exp-pace): the slowest SMs take the last units (KDTREE_SM_RANK). One
# build; calibrate per-SM lateness of the first KV block from the traced variant at 91k; rank
# the SMs fastest first; then output digests with and without the ranking (must match), the GPU
# tests with it, the bench without / with (two passes, the second in reverse order), and the
# trace with it. Everything in $OUT/smrank.tgz.
set -u -o pipefail
FINAL=${OUT:-$PWD/_device_out}
WORK=/tmp/kdtree_smrank
rm -rf "$WORK" && mkdir -p "$WORK" "$FINAL"
export OUT=$WORK PYTHONUNBUFFERED=1
pack() { tar czf "$FINAL/smrank.tgz" -C "$WORK" . 2>/dev/null; }
cd "$(dirname "$0")/.."
t0=$(date +%s)
if ! ls kdtree_mla/_C*.so >/dev/null 2>&1 || [ -n "${REBUILD:-}" ]; then
  MAX_JOBS=16 SKIP_BENCH=1 GPU_TEST_ARGS="-x" bash scripts/device_run.sh 2>&1 | tail -4
fi
ls kdtree_mla/_C*.so >/dev/null 2>&1 || { echo "no extension built"; exit 1; }
if [ -n "${RANK_FILE:-}" ]; then RANK=$(cat "$RANK_FILE"); echo "rank table from $RANK_FILE"; else
for c in 1 2 3; do
  timeout 150 python3 bench/trace_verify.py --cases ${CAL_CASE:-3} --ctas --reps 30 --json "$WORK/cal$c.json" > "$WORK/cal$c.txt" 2>&1
  echo "calibration $c rc=$? at $(( $(date +%s) - t0 )) s"
done
# SMs ranked by mean lateness at CAL_POINT, fastest first; SMs the calibration never saw busy
# (idle CTAs) get the median lateness. Prints the table; compares the two calibrations.
RANK=$(python3 - "$WORK/cal1.json" "$WORK/cal2.json" ${CAL_POINT:-published} "$WORK/cal3.json" <<'PY'
import json, statistics, sys
import torch
n = torch.cuda.get_device_properties(0).multi_processor_count
def late(path):
    sms = dict(json.load(open(path))[0]["ctas"][sys.argv[3]]["all_sms"])
    med = statistics.median(sms.values())
    return {sm: sms.get(sm, med) for sm in range(n)}, len(sms)
for path in sys.argv[1:3]:
    seen = [sm for sm, _ in json.load(open(path))[0]["ctas"][sys.argv[3]]["all_sms"]]
    assert max(seen) < n, f"an SM id {max(seen)} >= {n}: the table would not cover it"
a, na = late(sys.argv[1])
b, nb = late(sys.argv[2])
c, _ = late(sys.argv[4])
a = {sm: (a[sm] + b[sm] + c[sm]) / 3 for sm in range(n)}  # the table: mean of three
# whole groups of 4 SMs (two TPCs) by their mean lateness: idling only the slowest SM of a
# group left its neighbours slowest (run 3); GROUP=1 ranks single SMs
G = int(__import__("os").environ.get("GROUP", "4"))
grp = {g: statistics.fmean(a[sm] for sm in range(n) if sm // G == g) for g in range(n // G + 1) if g * G < n}
order = sorted(range(n), key=lambda sm: (grp[sm // G], a[sm]))  # fastest first
rb = sorted(range(n), key=lambda sm: b[sm])
top_a, top_b = set(order[-12:]), set(rb[-12:])
ra = {sm: i for i, sm in enumerate(order)}
rbb = {sm: i for i, sm in enumerate(rb)}
mean = (n - 1) / 2
cov = sum((ra[s] - mean) * (rbb[s] - mean) for s in range(n))
var = sum((ra[s] - mean) ** 2 for s in range(n))
print(f"calibrations saw {na} and {nb} SMs busy; table's slowest 12: {sorted(order[-12:])}; "
      f"cal1 slowest 12: {sorted(top_a)} / cal2 {sorted(top_b)}; "
      f"shared {len(top_a & top_b)}; rank correlation {cov / var:.3f}", file=sys.stderr)
table = [0] * n
for r, sm in enumerate(order):
    table[sm] = r
print(",".join(map(str, table)))
PY
)
fi
echo "rank table: $RANK" | cut -c1-300
echo "$RANK" > "$WORK/rank.txt"
pack
[ -n "$RANK" ] || { echo "no rank table"; pack; exit 1; }
timeout 120 python3 bench/output_digest.py > "$WORK/digest_off.txt" 2>&1
KDTREE_SM_RANK=$RANK timeout 120 python3 bench/output_digest.py > "$WORK/digest_on.txt" 2>&1
if cmp -s <(grep -v '^#' "$WORK/digest_off.txt") <(grep -v '^#' "$WORK/digest_on.txt"); then echo "digests identical"; else echo "DIGESTS DIFFER"; diff "$WORK/digest_off.txt" "$WORK/digest_on.txt" | head; fi
KDTREE_SM_RANK=$RANK timeout 200 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_verify_gpu.py 2>&1 | tail -2
CASES=${BENCH_CASES:-0,2,3,4,5}
for pass in 1 2 3 4; do
  order="off on"; [ $((pass % 2)) -eq 0 ] && order="on off"
  for v in $order; do
    env_rank=""; [ "$v" = on ] && env_rank=$RANK
    KDTREE_SM_RANK=$env_rank timeout 200 python3 bench/bench_verify.py --json "$WORK/rank_${v}_p$pass.json" \
      --no-triton --no-sweep --reps 30 --cases "$CASES" ${AB_ARGS:-} > "$WORK/rank_${v}_p$pass.log" 2>&1
    echo "rank $v pass $pass rc=$? at $(( $(date +%s) - t0 )) s"
  done
  pack
done
python3 bench/ab_summary.py "off=$(seq -f "$WORK/rank_off_p%g.json" 1 4 | paste -sd, -)" "on=$(seq -f "$WORK/rank_on_p%g.json" 1 4 | paste -sd, -)" | tee "$WORK/rank_summary.txt"
pack
for v in off on; do
  env_rank=""; [ "$v" = on ] && env_rank=$RANK
  KDTREE_SM_RANK=$env_rank timeout 150 python3 bench/trace_verify.py --cases 2,3,4 --ctas > "$WORK/trace_$v.txt" 2>&1
  echo "trace $v rc=$? at $(( $(date +%s) - t0 )) s"
  grep -A5 "^main-kernel points" "$WORK/trace_$v.txt" | cut -c1-220
  grep "last_pv\|published" "$WORK/trace_$v.txt" | grep -v "^|" | cut -c1-200
done
pack
