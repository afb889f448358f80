#!/usr/bin/env bash
# A shorter device_refactor_ab.sh for a small device budget (about 8 minutes of machine time):
# both trees built, the GPU tests of the new tree, then the rows that matter of both trees,
# bf16 and fp8 e4m3, one pass each (new first for bf16, base first for fp8).
# Before: `git archive 7030587 kernels | tar -x -C .base`, and .whl/ as in device_refactor_ab.sh.
BUILD_TIMEOUT=200; source "$(dirname "$0")/device_two_trees.sh"
timeout 170 python3 -m pytest -q -p no:cacheprovider -m gpu -rs kernels/tests > $OUT/gpu_tests.log 2>&1; lap "gpu tests rc=$?"; tail -4 $OUT/gpu_tests.log
S="--reps 20 --no-triton --shape 1,8,4,5700 --shape 1,8,4,91000 --shape 8,8,4,91000 --shape 32,8,4,91000 --shape 1,64,4,91000"
for run in "new bf16" "base bf16" "base fp8_e4m3" "new fp8_e4m3"; do set -- $run; tree=$1; kv=$2
  d=$ROOT; [ $tree = base ] && d=$ROOT/.base
  (cd $d && timeout 60 python3 kernels/bench/bench_verify.py --kv-dtype $kv $S --json $OUT/b_${tree}_${kv}.json > $OUT/b_${tree}_${kv}.log 2>&1); lap "bench $tree $kv rc=$?"
done
lap done
