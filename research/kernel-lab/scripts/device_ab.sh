#!/usr/bin/env bash
# Side-by-side device batch for several kernel trees: builds each (in parallel), runs each
# tree's GPU tests and output digests, then benchmarks them in PASSES passes, each pass
# starting with the next tree (the first benchmark of a pass reads slower: research/kernel-history.md,
# the 2026-11-29 18:05-18:20 UTC runs, commit 4aa750e), and summarises with bench/ab_summary.py. Everything lands in $OUT/ab.tgz.
# Usage (repo root on the device machine; the trees as `git archive <commit> kernels | tar -x -C
# .old`, carried):
#   TREES="old=.old/kernels new=kernels" PASSES=2 AB_ARGS="--cold-l2 128" \
#     BENCH_CASES=0,2,3,4,5,7 bash research/kernel-lab/scripts/device_ab.sh
# A second batch of the same trees in the same command: AB_NAME=envelope (its own archive,
# $OUT/envelope.tgz) SKIP_BUILD=1 (the trees are built and tested) AB_ARGS="--envelope ...".
# A label may run its tree under an environment, label=path%VAR=value[%VAR=value...], for a
# runtime switch of a diagnostic build: every label of one path shares that path's one build,
# so its labels differ by the switch alone, with the same machine code.
set -u -o pipefail
FINAL=${OUT:-$PWD/_device_out}
NAME=${AB_NAME:-ab}
WORK=/tmp/kdtree_$NAME
rm -rf "$WORK" && mkdir -p "$WORK" "$FINAL"
export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
pack() { tar czf "$FINAL/$NAME.tgz" -C "$WORK" . 2>/dev/null; }
t0=$(date +%s)
read -r -a trees <<< "${TREES:?TREES=\"label=path ...\"}"
labels=(); paths=(); envs=()
for t in "${trees[@]}"; do
  spec=${t#*=}; labels+=("${t%%=*}"); paths+=("$(cd "${spec%%\%*}" && pwd)")
  e=""; [ "$spec" != "${spec%%\%*}" ] && e=${spec#*%}; envs+=("${e//%/ }")
done
# first_of PATH: the index of the first label on PATH (the label that builds it)
first_of() { local i; for i in "${!paths[@]}"; do [ "${paths[$i]}" = "$1" ] && { echo "$i"; return; }; done; }
# with_env I CMD...: runs CMD under label I's environment
with_env() { local i=$1; shift; env ${envs[$i]} "$@"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$WORK/env.log" 2>&1
if [ -z "${SKIP_BUILD:-}" ]; then
  builders=()  # one build a path: the first label on it builds it
  for i in "${!labels[@]}"; do [ "$i" = "$(first_of "${paths[$i]}")" ] && builders+=("$i"); done
  jobs=$(( 16 / ${#builders[@]} )); [ "$jobs" -ge 1 ] || jobs=1
  for i in "${builders[@]}"; do
    (cd "${paths[$i]}" && MAX_JOBS=$jobs timeout 420 python3 setup.py build_ext --inplace \
       > "$WORK/build_${labels[$i]}.log" 2>&1; echo "build ${labels[$i]} rc=$?" >> "$WORK/build_${labels[$i]}.log") &
  done
  wait
  for i in "${!labels[@]}"; do
    l=${labels[$i]}; [ -f "$WORK/build_$l.log" ] && tail -1 "$WORK/build_$l.log"
    (cd "${paths[$i]}" && with_env "$i" timeout 200 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_verify_gpu.py \
       > "$WORK/gpu_tests_$l.log" 2>&1; echo "gpu tests $l rc=$?: $(tail -1 "$WORK/gpu_tests_$l.log")")
    (cd "${paths[$i]}" && with_env "$i" timeout 120 python3 bench/output_digest.py > "$WORK/digest_$l.txt" 2>&1)
  done
  echo "built and tested at $(( $(date +%s) - t0 )) s"
  for i in "${!labels[@]}"; do
    cmp -s "$WORK/digest_${labels[0]}.txt" "$WORK/digest_${labels[$i]}.txt" &&
      echo "digest ${labels[$i]}: same as ${labels[0]}" || echo "digest ${labels[$i]}: DIFFERS from ${labels[0]}"
  done
fi
pack
n=${#labels[@]}
for p in $(seq 1 "${PASSES:-2}"); do
  for k in $(seq 0 $((n - 1))); do
    i=$(( (k + p - 1) % n )); l=${labels[$i]}
    (cd "${paths[$i]}" && with_env "$i" timeout 200 python3 bench/bench_verify.py --json "$WORK/${l}_bench$p.json" --no-triton \
       --no-sweep --reps ${AB_REPS:-30} --cases "${BENCH_CASES:-0,2,3,4,5,7}" ${AB_ARGS:-} > "$WORK/${l}_bench$p.log" 2>&1)
  done
  echo "pass $p at $(( $(date +%s) - t0 )) s"
  pack
done
args=()
for l in "${labels[@]}"; do args+=("$l=$(seq -f "$WORK/${l}_bench%g.json" 1 "${PASSES:-2}" | paste -sd, -)"); done
python3 research/kernel-lab/bench/ab_summary.py "${args[@]}" | tee "$WORK/ab_summary.txt"
pack
echo "done at $(( $(date +%s) - t0 )) s"
