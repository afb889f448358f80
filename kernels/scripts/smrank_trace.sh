#!/usr/bin/env bash
# EXPERIMENT: does lateness follow the SM or the logical CTA? The trace at 23k and 5.7k with
# the identity and with rank.txt's mapping, latest SMs and latest logical CTAs of each.
set -u -o pipefail
FINAL=${OUT:-$PWD/_device_out}; WORK=/tmp/kdtree_smtrace; rm -rf "$WORK"; mkdir -p "$WORK" "$FINAL"
export OUT=$WORK PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."
ls kdtree_mla/_C*.so >/dev/null 2>&1 || MAX_JOBS=16 SKIP_BENCH=1 GPU_TEST_ARGS="-x -k nothing" bash scripts/device_run.sh 2>&1 | tail -3
RANK=$(cat "${RANK_FILE:?}")
for v in off on off2 on2; do
  env_rank=""; case $v in on*) env_rank=$RANK;; esac
  KDTREE_SM_RANK=$env_rank timeout 150 python3 bench/trace_verify.py --cases 2,3 --ctas --reps 20 > "$WORK/trace_$v.txt" 2>&1
  echo "== $v rc=$?"; grep "published:" "$WORK/trace_$v.txt" | cut -c1-900
done
tar czf "$FINAL/smtrace.tgz" -C "$WORK" .
