#!/usr/bin/env bash
# The device batch for a kernel change, on a CUDA machine, from the repository root:
# build the extension in place, run the GPU tests (kernel and SGLang integration), the kernel
# benchmark (SGLang's Triton path side by side) and the 61-layer SGLang step bench.
#   bash kernels/scripts/device_validate.sh
# Needs torch and triton installed, SGLang's wheels in .whl/ (0.5.10: startup-hook tests, step
# bench; the newest plugin release there, e.g. 0.5.23: plugin tests, which on 0.5.14+ also need
# msgspec) and kernels/.whl/ (0.5.5: the benchmark's Triton path):
#   pip download --no-deps sglang==0.5.10 sglang==0.5.23 -d .whl; pip download --no-deps sglang==0.5.5 -d kernels/.whl
# Logs and JSON go to $OUT (default ./_device_out). Knobs: TORCH_CUDA_ARCH_LIST (9.0),
# KDTREE_DIAG (0), TESTS (kernels/tests: the GPU tests run), BENCH_ARGS ("--reps 30 --cold-l2
# 128"), BENCH_KV ("bf16": the benchmark once per listed --kv-dtype, e.g. "bf16 fp8_e4m3",
# JSON bench.json for bf16, bench-<dtype>.json otherwise), STEP_REPS (10), STEP_ARGS (more step
# bench arguments, e.g. "--wheel .whl/sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl --reps-sglang 3"), SKIP_BENCH=1,
# SKIP_STEP=1, PYTEST_ARGS (more pytest arguments, e.g. -s), and BUILD_TIMEOUT / TEST_TIMEOUT / BENCH_TIMEOUT / STEP_TIMEOUT in seconds.
set -u -o pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$REPO/_device_out}
mkdir -p "$OUT"
cd "$REPO"
export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0} MAX_JOBS=${MAX_JOBS:-16}
t0=$(date +%s)
lap() { echo "$1 at $(( $(date +%s) - t0 )) s"; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; nvcc --version | tail -1
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } 2>&1 | tee "$OUT/env.log"

(cd kernels && timeout "${BUILD_TIMEOUT:-420}" python3 setup.py build_ext --inplace) > "$OUT/build.log" 2>&1
rc=$?; lap "build rc=$rc"; tail -3 "$OUT/build.log"
[ $rc -eq 0 ] || { tail -40 "$OUT/build.log"; exit 1; }

timeout "${TEST_TIMEOUT:-300}" python3 -X faulthandler -m pytest -q -p no:cacheprovider -m gpu -rs ${PYTEST_ARGS:-} ${TESTS:-kernels/tests} \
  > "$OUT/gpu_tests.log" 2>&1
lap "gpu tests rc=$?"; tail -3 "$OUT/gpu_tests.log"

if [ "${SKIP_BENCH:-0}" != 1 ]; then
  for kv in ${BENCH_KV:-bf16}; do
    tag=bench; [ "$kv" = bf16 ] || tag=bench-$kv
    timeout "${BENCH_TIMEOUT:-300}" python3 kernels/bench/bench_verify.py --json "$OUT/$tag.json" \
      --kv-dtype "$kv" ${BENCH_ARGS:---reps 30 --cold-l2 128} > "$OUT/$tag.log" 2>&1
    lap "bench $kv rc=$?"; grep -v '^{' "$OUT/$tag.log" | tail -20
  done
fi

if [ "${SKIP_STEP:-0}" != 1 ]; then
  timeout "${STEP_TIMEOUT:-240}" python3 kernels/bench/bench_sglang_step.py --reps "${STEP_REPS:-10}" \
    --json "$OUT/sglang_step.json" ${STEP_ARGS:-} > "$OUT/sglang_step.log" 2>&1
  lap "sglang step bench rc=$?"; tail -8 "$OUT/sglang_step.log"
fi
