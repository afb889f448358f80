#!/usr/bin/env bash
# One device batch: build the extension, run CPU + GPU tests, run the benchmark.
# Usage (repo root, on the device machine): bash kernels/scripts/device_run.sh [gpu-test args]
# Logs and JSON go to $OUT (or ./_device_out).
set -u -o pipefail
OUT=${OUT:-$PWD/_device_out}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0} MAX_JOBS=${MAX_JOBS:-16}
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; nvcc --version | tail -1;
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } 2>&1 | tee "$OUT/env.log"
t0=$(date +%s)
timeout 420 python3 setup.py build_ext --inplace > "$OUT/build.log" 2>&1
rc=$?; echo "build rc=$rc in $(( $(date +%s) - t0 )) s"; tail -3 "$OUT/build.log"
[ $rc -eq 0 ] || { tail -40 "$OUT/build.log"; exit 1; }
timeout 300 python3 -X faulthandler -m pytest -q -s -p no:cacheprovider tests/gpu/test_verify_gpu.py -rs ${GPU_TEST_ARGS:-} 2>&1 | tee "$OUT/gpu_tests.log" | grep -v "^  File" | tail -25
echo "gpu tests rc=${PIPESTATUS[0]} at $(( $(date +%s) - t0 )) s"
if [ -n "${NCU_CASES:-}" ]; then  # e.g. NCU_CASES="1,8,4,5700 1,8,4,91000"
  for c in $NCU_CASES; do
    timeout 120 ncu --clock-control none --kernel-name regex:verify_ --launch-skip 6 --launch-count 2 \
      --section SpeedOfLight --section WarpStateStats --section Occupancy --section LaunchStats \
      --section SchedulerStats --section MemoryWorkloadAnalysis \
      --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
      python3 scripts/profile_case.py ${c//,/ } > "$OUT/ncu_${c//,/_}.txt" 2>&1
    echo "ncu $c rc=$? at $(( $(date +%s) - t0 )) s"
  done
fi
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  timeout ${BENCH_TIMEOUT:-400} python3 bench/bench_verify.py --json "$OUT/bench.json" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log" | tail -30
  echo "bench rc=${PIPESTATUS[0]} at $(( $(date +%s) - t0 )) s"
fi
