#!/usr/bin/env bash
# Experiment batch: build once (optionally run the GPU tests), then benchmark the kernel under
# each value of one bench option in two passes, the second in reverse order (v0 v1 v2, then
# v2 v1 v0: the spread between a value's passes is the noise), then trace the default with the per-CTA spread
# (bench/trace_verify.py --ctas). Everything lands in $OUT/ab.tgz, refreshed after each step.
# Usage (repo root on the device machine):
#   OPTION=--force-variant VALUES="11 9" CASES=2,3,4,5 TRACE_CASES=2,3,4 [TESTS=1] [NO_TRACE=1] \
#     bash kernels/scripts/device_ab_option.sh
# (OPTION: a flag both bench_verify.py and trace_verify.py take with a value. Session 6 used it
# for a `--pool-pct` option of a balancing experiment since removed: docs/kernel-benchmarks.md.)
set -u -o pipefail
FINAL=${OUT:-$PWD/_device_out}
WORK=/tmp/kdtree_ab
rm -rf "$WORK" && mkdir -p "$WORK" "$FINAL"
export OUT=$WORK PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0
pack() { tar czf "$FINAL/ab.tgz" -C "$WORK" . 2>/dev/null; }
cd "$(dirname "$0")/.."
OPTION=${OPTION:?set OPTION, e.g. --force-variant}
VALUES=${VALUES:?set VALUES, e.g. "11 9"}
t0=$(date +%s)
timeout 420 env MAX_JOBS=16 python3 setup.py build_ext --inplace > "$WORK/build.log" 2>&1
rc=$?; echo "build rc=$rc in $(( $(date +%s) - t0 )) s"
[ $rc -eq 0 ] || { tail -40 "$WORK/build.log"; pack; exit 1; }
if [ -n "${TESTS:-}" ]; then
  timeout 300 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_verify_gpu.py > "$WORK/gpu_tests.log" 2>&1
  echo "gpu tests rc=$? at $(( $(date +%s) - t0 )) s: $(tail -1 "$WORK/gpu_tests.log")"
  grep -E "^(FAILED|ERROR)" "$WORK/gpu_tests.log" | head -10
  pack
fi
rev() { local out=""; for x in "$@"; do out="$x $out"; done; echo $out; }
for pass in 1 2; do
  order=$VALUES; [ $pass = 2 ] && order=$(rev $VALUES)  # A B C, then C B A: no value always first
  for v in $order; do
    timeout 200 python3 bench/bench_verify.py --json "$WORK/bench_v${v}_p$pass.json" --no-triton --no-sweep \
      --reps 30 --cases "${CASES:-2,3,4,5}" $OPTION "$v" > "$WORK/bench_v${v}_p$pass.log" 2>&1
    echo "bench $OPTION $v pass $pass rc=$? at $(( $(date +%s) - t0 )) s"
    pack
  done
done
python3 - "$WORK" $VALUES <<'PY'
import json, sys
work, values = sys.argv[1], sys.argv[2:]
rows = {}
for v in values:
    for p in (1, 2):
        try:
            res = json.load(open(f"{work}/bench_v{v}_p{p}.json"))
        except OSError:
            continue
        for c in res["cases"]:
            key = f"B{c['B']} H{c['H']} {c['prefix']} {c['pages']}"
            rows.setdefault(key, {}).setdefault(v, []).append(round(c["ours_graph_us"], 2))
print("graph us per call, passes 1 / 2, by value:", " ".join(values))
for key, by in rows.items():
    print(key, " | ".join(f"{v}: {' / '.join(map(str, by.get(v, [])))}" for v in values))
PY
if [ -z "${NO_TRACE:-}" ]; then  # the default tree's per-CTA spread (the option is not passed)
  timeout 150 python3 bench/trace_verify.py --json "$WORK/trace.json" --ctas --cases "${TRACE_CASES:-2,3,4}" \
    > "$WORK/trace.log" 2>&1
  echo "trace rc=$? at $(( $(date +%s) - t0 )) s"; grep -v '^{' "$WORK/trace.log" | tail -14
  pack
fi
echo "done at $(( $(date +%s) - t0 )) s"
