#!/usr/bin/env bash
# Diagnostic device batch: build, GPU tests, a short benchmark, the per-call trace
# (bench/trace_verify.py), Nsight Compute with per-SASS stall samples of one case, and the
# extension's SASS. Everything lands in one archive, $OUT/diag.tgz (the device tool returns at
# most 8 files), refreshed after every step so a run stopped at its time limit keeps what it did.
# Usage (repo root on the device machine):
#   BENCH_CASES=0,2,4,5 NCU_CASE="8 8 4 91000" bash research/kernel-lab/scripts/device_diag.sh
# TRACE_SPLIT=1 also traces the two-kernel path (main + combine kernel) beside the fused one.
# AB_OPTION=--force-variant AB_VALUES="11 9": the same cases under each value of one
# bench_verify.py option, two passes, the second in reverse order (the first benchmark of a pass
# reads slower even for code it does not touch: research/kernel-history.md,
# the 2026-11-29 18:05-18:20 UTC runs, results in git history at commit 4aa750e).
set -u -o pipefail
FINAL=${OUT:-$PWD/_device_out}
WORK=/tmp/kdtree_diag
rm -rf "$WORK" && mkdir -p "$WORK" "$FINAL"
export OUT=$WORK PYTHONUNBUFFERED=1
pack() { tar czf "$FINAL/diag.tgz" -C "$WORK" . 2>/dev/null; }
# Side-by-side passes against OLD_TREE: pass I runs "old new" when odd, "new old" when even (the
# first run of a pass reads slower); tree_script TREE PATH is PATH in this tree or in OLD_TREE.
pass_order() { if [ $(($1 % 2)) -eq 0 ]; then echo "new old"; else echo "old new"; fi; }
tree_script() { if [ "$1" = old ]; then echo "$OLD_TREE/$2"; else echo "$2"; fi; }
cd "$(dirname "$0")/.."
t0=$(date +%s)
# OLD_TREE=path/to/an/older/kernels: built beside this one and benchmarked in the same run
# (same cases, same GPU) for a side-by-side comparison.
if [ -n "${OLD_TREE:-}" ]; then
  (cd "$OLD_TREE" && TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=8 timeout 400 python3 setup.py build_ext --inplace \
     > "$WORK/old_build.log" 2>&1; echo "old build rc=$?" >> "$WORK/old_build.log") &
fi
MAX_JOBS=8 SKIP_BENCH=1 bash scripts/device_run.sh 2>&1 | tail -30
wait
[ -n "${OLD_TREE:-}" ] && tail -1 "$WORK/old_build.log"
pack
ls kdtree_mla/_C*.so >/dev/null 2>&1 || { echo "no extension built"; exit 1; }
# BENCH_SWEEP=1: the min_blocks_per_cta sweep of the B=1 H=8 cases too (not the variant sweep).
sweep=--no-sweep; [ -n "${BENCH_SWEEP:-}" ] && sweep=--no-variant-sweep
if [ -z "${NO_SHORT_BENCH:-}" ]; then  # NO_SHORT_BENCH=1: only the A/B passes below
  timeout ${BENCH_TIMEOUT:-200} python3 bench/bench_verify.py --json "$WORK/bench.json" --no-triton $sweep \
    --reps 30 --cases "${BENCH_CASES:-0,2,3,4,5,7}" ${BENCH_ARGS:-} > "$WORK/bench.log" 2>&1
  echo "bench rc=$? at $(( $(date +%s) - t0 )) s"; grep '^|' "$WORK/bench.log" | head -20
  pack
fi
# HOST_PASSES=N: the host path (bench/host_path.py) N times, alternating this tree and OLD_TREE
# when given, after bench/launch_probe.cu (the launch APIs' own host cost).
if [ -n "${HOST_PASSES:-}" ]; then
  nvcc -O2 -arch=sm_90 -o "$WORK/launch_probe" bench/launch_probe.cu > "$WORK/launch_probe.log" 2>&1 &&
    timeout 120 "$WORK/launch_probe" >> "$WORK/launch_probe.log" 2>&1
  echo "launch probe rc=$? at $(( $(date +%s) - t0 )) s"; tail -20 "$WORK/launch_probe.log"
  for i in $(seq 1 "$HOST_PASSES"); do
    order=new; [ -n "${OLD_TREE:-}" ] && order=$(pass_order "$i")
    for tree in $order; do
      timeout 120 python3 "$(tree_script $tree bench/host_path.py)" > "$WORK/host_${tree}$i.txt" 2>&1
      echo "host path $tree pass $i rc=$?"; cat "$WORK/host_${tree}$i.txt"
    done
  done
  pack
fi
if [ -n "${OLD_TREE:-}" ] && [ "${AB_PASSES:-2}" -gt 0 ]; then
  # AB_PASSES passes (default 2): old, new; then new, old; ... (the first benchmark of a pass
  # reads slower); AB_ARGS go to both trees' bench (e.g. --cold-code). The spread between
  # passes is the noise.
  for i in $(seq 1 ${AB_PASSES:-2}); do
    order=$(pass_order "$i")
    for tree in $order; do
      timeout 200 python3 "$(tree_script $tree bench/bench_verify.py)" --json "$WORK/${tree}_bench$i.json" --no-triton --no-sweep \
        --reps ${AB_REPS:-30} --cases "${BENCH_CASES:-0,2,3,4,5,7}" ${AB_ARGS:-} > "$WORK/${tree}_bench$i.log" 2>&1
    done
    echo "A/B pass $i ($order) at $(( $(date +%s) - t0 )) s"
  done
  files() { seq -f "$WORK/$1_bench%g.json" 1 ${AB_PASSES:-2} | paste -sd, -; }
  python3 bench/ab_summary.py "old=$(files old)" "new=$(files new)" | tee "$WORK/ab_summary.txt"
  pack
fi
if [ -n "${AB_OPTION:-}" ]; then
  order=${AB_VALUES:?AB_OPTION needs AB_VALUES}
  for pass in 1 2; do
    for v in $order; do
      timeout 200 python3 bench/bench_verify.py --json "$WORK/ab_v${v}_p$pass.json" --no-triton --no-sweep \
        --reps 30 --cases "${BENCH_CASES:-0,2,3,4,5,7}" $AB_OPTION "$v" > "$WORK/ab_v${v}_p$pass.log" 2>&1
      echo "A/B $AB_OPTION $v pass $pass rc=$? at $(( $(date +%s) - t0 )) s"
    done
    order=$(echo $order | tr ' ' '\n' | tac | tr '\n' ' ')
  done
  args=(); for v in $AB_VALUES; do args+=("$v=$WORK/ab_v${v}_p1.json,$WORK/ab_v${v}_p2.json"); done
  python3 bench/ab_summary.py "${args[@]}" | tee "$WORK/ab_summary.txt"
  pack
fi
for tv in ${TRACE_VARIANTS:-default}; do  # traced _C.VARIANTS indices; "none" skips the trace
  [ "$tv" = none ] && continue
  va=""; [ "$tv" = default ] || va="--variant $tv"
  timeout ${TRACE_TIMEOUT:-150} python3 bench/trace_verify.py --json "$WORK/trace_$tv.json" $va ${TRACE_ARGS:-} \
    > "$WORK/trace_$tv.log" 2>&1
  echo "trace $tv rc=$? at $(( $(date +%s) - t0 )) s"; grep -v '^{' "$WORK/trace_$tv.log" | tail -12
  pack
  if [ -n "${TRACE_SPLIT:-}" ]; then  # the same trace of the two-kernel path (split_combine)
    timeout ${TRACE_TIMEOUT:-150} python3 bench/trace_verify.py --json "$WORK/trace_${tv}_split.json" --split $va \
      ${TRACE_ARGS:-} > "$WORK/trace_${tv}_split.log" 2>&1
    echo "trace $tv split rc=$?"; grep -v '^{' "$WORK/trace_${tv}_split.log" | tail -12
    pack
  fi
done
if [ -n "${NCU_CASE:-}" ]; then
  timeout ${NCU_TIMEOUT:-170} bash scripts/ncu_case.sh $NCU_CASE ncu > /dev/null 2>&1
  echo "ncu rc=$? at $(( $(date +%s) - t0 )) s"
  grep -E "Duration|DRAM Throughput|Issue Slots Busy|Eligible Warps|No Eligible" "$WORK/ncu_ncu.txt" | head -8
  pack
fi
so=$(ls kdtree_mla/_C*.so | head -1)
cuobjdump -sass "$so" 2>/dev/null | gzip > "$WORK/sass.txt.gz"
pack
echo "done at $(( $(date +%s) - t0 )) s"; ls -la "$FINAL"
