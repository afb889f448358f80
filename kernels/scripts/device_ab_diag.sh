#!/usr/bin/env bash
# Experiment batch: build once, then benchmark the kernel under each value of the `diag`
# experiment bits (csrc/params.h) in alternating passes (d0, d1, ..., d0, d1, ...: the spread
# between a value's passes is the noise), then trace each value with the per-CTA spread
# (bench/trace_verify.py --ctas). Everything lands in $OUT/ab.tgz, refreshed after each step.
# Usage (repo root on the device machine):
#   DIAGS="0 1 2" CASES=2,3,4,5 TRACE_CASES=2,3,4 [TESTS=1] bash kernels/scripts/device_ab_diag.sh
set -u -o pipefail
FINAL=${OUT:-$PWD/_device_out}
WORK=/tmp/kdtree_ab
rm -rf "$WORK" && mkdir -p "$WORK" "$FINAL"
export OUT=$WORK PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0
pack() { tar czf "$FINAL/ab.tgz" -C "$WORK" . 2>/dev/null; }
cd "$(dirname "$0")/.."
t0=$(date +%s)
timeout 420 env MAX_JOBS=16 python3 setup.py build_ext --inplace > "$WORK/build.log" 2>&1
rc=$?; echo "build rc=$rc in $(( $(date +%s) - t0 )) s"
[ $rc -eq 0 ] || { tail -40 "$WORK/build.log"; pack; exit 1; }
if [ -n "${TESTS:-}" ]; then
  timeout 300 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_verify_gpu.py > "$WORK/gpu_tests.log" 2>&1
  echo "gpu tests rc=$? at $(( $(date +%s) - t0 )) s: $(tail -1 "$WORK/gpu_tests.log")"
  pack
fi
for pass in 1 2; do
  for d in ${DIAGS:-0 1}; do
    timeout 200 python3 bench/bench_verify.py --json "$WORK/bench_d${d}_p$pass.json" --no-triton --no-sweep \
      --reps 30 --cases "${CASES:-2,3,4,5}" --diag "$d" > "$WORK/bench_d${d}_p$pass.log" 2>&1
    echo "bench diag=$d pass $pass rc=$? at $(( $(date +%s) - t0 )) s"
    pack
  done
done
python3 - "$WORK" ${DIAGS:-0 1} <<'PY'
import json, sys
work, diags = sys.argv[1], sys.argv[2:]
rows = {}
for d in diags:
    for p in (1, 2):
        try:
            res = json.load(open(f"{work}/bench_d{d}_p{p}.json"))
        except OSError:
            continue
        for c in res["cases"]:
            key = f"B{c['B']} H{c['H']} {c['prefix']} {c['pages']}"
            rows.setdefault(key, {}).setdefault(d, []).append(round(c["ours_graph_us"], 2))
print("graph us per call, passes 1 / 2, by diag:", " ".join(diags))
for key, by in rows.items():
    print(key, " | ".join(f"d{d}: {' / '.join(map(str, by.get(d, [])))}" for d in diags))
PY
for d in ${DIAGS:-0 1}; do
  timeout 150 python3 bench/trace_verify.py --json "$WORK/trace_d$d.json" --ctas --diag "$d" \
    --cases "${TRACE_CASES:-2,3,4}" > "$WORK/trace_d$d.log" 2>&1
  echo "trace diag=$d rc=$? at $(( $(date +%s) - t0 )) s"; grep -v '^{' "$WORK/trace_d$d.log" | tail -14
  pack
done
echo "done at $(( $(date +%s) - t0 )) s"
