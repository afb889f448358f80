#!/usr/bin/env bash
# EXPERIMENT (branch exp-probe): session 13's next step. A rank table from bench/sm_probe.py's
# L2-read mode (4-SM groups, slowest last) against run 7's hand-made region table and the
# identity, same build, four passes. $OUT/probetab.tgz.
set -u -o pipefail
FINAL=${OUT:-$PWD/_device_out}; WORK=/tmp/kdtree_probetab; rm -rf "$WORK"; mkdir -p "$WORK" "$FINAL"
export OUT=$WORK PYTHONUNBUFFERED=1
pack() { tar czf "$FINAL/probetab.tgz" -C "$WORK" . 2>/dev/null; }
cd "$(dirname "$0")/.."
t0=$(date +%s)
(MAX_JOBS=16 SKIP_BENCH=1 GPU_TEST_ARGS="-x -k nothing" bash scripts/device_run.sh > "$WORK/build_run.log" 2>&1) &
timeout 120 python3 bench/sm_probe.py --json "$WORK/probe.json" > "$WORK/probe.txt" 2>&1
wait; tail -3 "$WORK/build_run.log"; cat "$WORK/probe.txt" | cut -c1-300
PROBE=$(python3 - "$WORK/probe.json" <<'PY'
import json, statistics, sys
late = {int(k): v for k, v in json.load(open(sys.argv[1]))["same"]["all_sms"].items()}
n = len(late)
grp = {g: statistics.fmean(late[s] for s in late if s // 4 == g) for g in {s // 4 for s in late}}
order = sorted(late, key=lambda s: (grp[s // 4], late[s]))
table = [0] * (max(late) + 1)
for r, sm in enumerate(order):
    table[sm] = r
print(",".join(map(str, table)))
print("probe table's last 12:", sorted(order[-12:]), file=sys.stderr)
PY
)
HAND=$(cat bench/results/h200-2026-12-01-s13run7-rank-region.txt)
echo "$PROBE" > "$WORK/probe_table.txt"
for pass in 1 2 3 4; do
  order="off probe hand"; [ $((pass % 2)) -eq 0 ] && order="hand probe off"
  for v in $order; do
    case $v in off) r="";; probe) r=$PROBE;; hand) r=$HAND;; esac
    KDTREE_SM_RANK=$r timeout 200 python3 bench/bench_verify.py --json "$WORK/${v}_p$pass.json" \
      --no-triton --no-sweep --reps 30 --cases 0,2,3,4 > "$WORK/${v}_p$pass.log" 2>&1
    echo "$v pass $pass rc=$? at $(( $(date +%s) - t0 )) s"
  done
  pack
done
f() { seq -f "$WORK/$1_p%g.json" 1 4 | paste -sd, -; }
python3 bench/ab_summary.py "off=$(f off)" "probe=$(f probe)" "hand=$(f hand)" | tee "$WORK/summary.txt"
pack
