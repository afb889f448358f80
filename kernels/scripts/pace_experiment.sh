#!/usr/bin/env bash
# EXPERIMENT (branch exp-pace): pacing the first piece's second KV block. One build; each
# KDTREE_PACE_NS value (> 0 sleep ns before issuing it, -1 wait for the first block to land,
# 0 off) benchmarked in its own process, two passes, the second in reverse order; then the GPU
# tests with -1 and the trace at 0 and -1. Everything in $OUT/pace.tgz.
set -u -o pipefail
FINAL=${OUT:-$PWD/_device_out}
WORK=/tmp/kdtree_pace
rm -rf "$WORK" && mkdir -p "$WORK" "$FINAL"
export OUT=$WORK PYTHONUNBUFFERED=1
pack() { tar czf "$FINAL/pace.tgz" -C "$WORK" . 2>/dev/null; }
cd "$(dirname "$0")/.."
t0=$(date +%s)
MAX_JOBS=16 SKIP_BENCH=1 bash scripts/device_run.sh 2>&1 | tail -6
pack
ls kdtree_mla/_C*.so >/dev/null 2>&1 || { echo "no extension built"; exit 1; }
VALUES=${PACE_VALUES:-"0 400 1000 -1"}
CASES=${BENCH_CASES:-0,2,3,4,5,7}
for pass in 1 2; do
  order=$VALUES
  [ "$pass" -eq 2 ] && order=$(echo $VALUES | tr ' ' '\n' | tac | tr '\n' ' ')
  for v in $order; do
    KDTREE_PACE_NS=$v timeout 200 python3 bench/bench_verify.py --json "$WORK/pace_${v}_p$pass.json" \
      --no-triton --no-sweep --reps 30 --cases "$CASES" > "$WORK/pace_${v}_p$pass.log" 2>&1
    echo "pace $v pass $pass rc=$? at $(( $(date +%s) - t0 )) s"
  done
  pack
done
args=()
for v in $VALUES; do args+=("p$v=$WORK/pace_${v}_p1.json,$WORK/pace_${v}_p2.json"); done
python3 bench/ab_summary.py "${args[@]}" | tee "$WORK/pace_summary.txt"
pack
KDTREE_PACE_NS=-1 timeout 200 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_verify_gpu.py 2>&1 | tail -2
for v in 0 -1; do
  KDTREE_PACE_NS=$v timeout 150 python3 bench/trace_verify.py --cases 0,2,3,4 > "$WORK/trace_$v.txt" 2>&1
  echo "trace $v rc=$? at $(( $(date +%s) - t0 )) s"
  grep -A8 "^main-kernel points" "$WORK/trace_$v.txt" | cut -c1-200
done
pack
