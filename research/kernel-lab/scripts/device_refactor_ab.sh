#!/usr/bin/env bash
# Before: `git archive 7030587 kernels | tar -x -C .base` (ignored folder, named in carry), SGLang 0.5.23 and msgspec wheels in .whl/.
# Refactored kernel (kernels/) against main's earlier kernel (.base/kernels), one machine:
# both built, GPU tests of the new tree, the target rows bf16 + fp8 e4m3 of both (alternating
# order), the SGLang 0.5.23 step bf16 vs fp8 pool on the new tree.
BUILD_TIMEOUT=300; source "$(dirname "$0")/device_two_trees.sh"
timeout 210 python3 -m pytest -q -p no:cacheprovider -m gpu -rs -x kernels/tests > $OUT/gpu_tests.log 2>&1; lap "gpu tests rc=$?"; tail -4 $OUT/gpu_tests.log
S="--reps 20 --no-triton --shape 1,8,4,5700 --shape 1,8,4,23000 --shape 1,8,4,91000 --shape 1,8,8,91000 --shape 1,16,4,91000 --shape 8,8,4,91000 --shape 32,8,4,91000 --shape 1,64,4,91000"
for pass in 1 2; do for tree in new base; do [ $pass = 2 ] && tree=$([ $tree = new ] && echo base || echo new)
  d=$ROOT; [ $tree = base ] && d=$ROOT/.base
  for kv in bf16 fp8_e4m3; do (cd $d && timeout 100 python3 kernels/bench/bench_verify.py --kv-dtype $kv $S --json $OUT/b_${tree}_${kv}_$pass.json > $OUT/b_${tree}_${kv}_$pass.log 2>&1); lap "bench $tree $kv pass $pass rc=$?"; done
done; done
W=$(ls .whl/sglang-0.5.23*.whl)
for kv in bf16 fp8_e4m3; do timeout 80 python3 kernels/bench/bench_sglang_step.py --wheel "$W" --kv-dtype $kv --reps 10 --reps-sglang 1 --warmup 2 --contexts 91000 --json $OUT/step_$kv.json > $OUT/step_$kv.log 2>&1; lap "step $kv rc=$?"; tail -4 $OUT/step_$kv.log; done
lap done
