#!/usr/bin/env bash
# The slow-region lead of the 2026-12-01 15:45-16:25 UTC runs (results commit b3d18ae): bench/sm_probe.py in three processes, and the verify kernel's
# own latest SMs (trace_verify.py --ctas, 23k and 5.7k) twice, on the same machine. $OUT/smprobe.tgz.
set -u -o pipefail
FINAL=${OUT:-$PWD/_device_out}; WORK=/tmp/kdtree_smprobe; rm -rf "$WORK"; mkdir -p "$WORK" "$FINAL"
export OUT=$WORK PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."
for i in 1 2 3; do
  timeout 120 python3 bench/sm_probe.py --json "$WORK/probe$i.json" 2>&1 | tee "$WORK/probe$i.txt" | cut -c1-400
done
ls kdtree_mla/_C*.so >/dev/null 2>&1 || MAX_JOBS=16 SKIP_BENCH=1 GPU_TEST_ARGS="-x -k nothing" bash scripts/device_run.sh 2>&1 | tail -2
for i in 1 2; do
  timeout 150 python3 bench/trace_verify.py --cases 2,3 --ctas --reps 20 --json "$WORK/trace$i.json" > "$WORK/trace$i.txt" 2>&1
  echo "trace $i rc=$?"; grep "published:" "$WORK/trace$i.txt" | cut -c1-330
done
tar czf "$FINAL/smprobe.tgz" -C "$WORK" .
