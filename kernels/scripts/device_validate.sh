#!/usr/bin/env bash
# Final device batch for a kernel change: build, kernel GPU tests, benchmark (with SGLang's
# Triton kernel and every variant), SGLang integration GPU tests and the 61-layer step bench.
# Usage (repo root on the device machine; carry .whl and kernels/.whl for the SGLang wheels):
#   bash kernels/scripts/device_validate.sh
set -u -o pipefail
OUT=${OUT:-$PWD/_device_out}
export OUT PYTHONUNBUFFERED=1
BENCH_ARGS=${BENCH_ARGS:-"--reps 30 --variants"} BENCH_TIMEOUT=${BENCH_TIMEOUT:-300} \
  bash kernels/scripts/device_run.sh 2>&1 | grep -v '^{' | tail -40
t0=$(date +%s)
timeout ${SGLANG_TEST_TIMEOUT:-200} python3 -m pytest -q -p no:cacheprovider kernels/tests/gpu/test_sglang_gpu.py kernels/tests/test_sglang_*.py \
  > "$OUT/sglang_tests.log" 2>&1
echo "sglang tests rc=$? in $(( $(date +%s) - t0 )) s: $(tail -1 "$OUT/sglang_tests.log")"
timeout ${STEP_TIMEOUT:-240} python3 kernels/bench/bench_sglang_step.py --reps ${STEP_REPS:-20} --json "$OUT/sglang_step.json" \
  > "$OUT/sglang_step.log" 2>&1
echo "sglang step bench rc=$? at $(( $(date +%s) - t0 )) s"
tail -8 "$OUT/sglang_step.log"
