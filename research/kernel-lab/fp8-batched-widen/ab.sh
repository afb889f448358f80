#!/usr/bin/env bash
# A/B of the working tree's kernels against the same tree with $PATCH reversed (default: this
# folder's kernel.patch, the previous fp8 widening), on the device, from the repository root.
# Both default builds, built side by side; the fp8 benchmark alternates old/new/new/old.
set -u -o pipefail
OUT=${OUT:-$PWD/_device_out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0
rm -rf /tmp/o && mkdir -p /tmp/o && cp -r kernels /tmp/o/ && (cd /tmp/o && patch -s -R -p1 < "$OLDPWD/${PATCH:-research/kernel-lab/fp8-batched-widen/kernel.patch}") || exit 1
(cd /tmp/o/kernels && MAX_JOBS=8 timeout 400 python3 setup.py build_ext --inplace > /tmp/old_build.log 2>&1; echo "old build rc=$?") &
SKIP_BENCH=1 SKIP_STEP=1 TESTS="kernels/tests/gpu/test_verify_fp8_gpu.py kernels/tests/gpu/test_verify_gpu.py" bash kernels/scripts/device_validate.sh
wait
A="--no-triton --reps 20 --kv-dtype fp8_e4m3 --shape 1,8,4,91000 --shape 8,8,4,91000 --shape 1,64,4,91000 --shape 1,8,4,23000"
for pass in old new new old; do
  d=kernels; [ $pass = old ] && d=/tmp/o/kernels
  timeout 120 python3 $d/bench/bench_verify.py $A > /tmp/ab_$pass.log 2>&1
  echo "== $pass"; grep '^| [0-9]' /tmp/ab_$pass.log | cut -d'|' -f2-7
done 2>&1 | tee "$OUT/ab.log"
