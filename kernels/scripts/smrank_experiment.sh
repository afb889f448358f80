#!/usr/bin/env bash
# EXPERIMENT (branch exp-pace): the slowest SMs take the last units (KDTREE_SM_RANK). One
# build; calibrate per-SM lateness of the first KV block from the traced variant at 91k; rank
# the SMs fastest first; then output digests with and without the ranking (must match), the GPU
# tests with it, the bench without / with (two passes, the second in reverse order), and the
# trace with it. Everything in $OUT/smrank.tgz.
set -u -o pipefail
FINAL=${OUT:-$PWD/_device_out}
WORK=/tmp/kdtree_smrank
rm -rf "$WORK" && mkdir -p "$WORK" "$FINAL"
export OUT=$WORK PYTHONUNBUFFERED=1
pack() { tar czf "$FINAL/smrank.tgz" -C "$WORK" . 2>/dev/null; }
cd "$(dirname "$0")/.."
t0=$(date +%s)
if ! ls kdtree_mla/_C*.so >/dev/null 2>&1 || [ -n "${REBUILD:-}" ]; then
  MAX_JOBS=16 SKIP_BENCH=1 GPU_TEST_ARGS="-x" bash scripts/device_run.sh 2>&1 | tail -4
fi
ls kdtree_mla/_C*.so >/dev/null 2>&1 || { echo "no extension built"; exit 1; }
timeout 150 python3 bench/trace_verify.py --cases ${CAL_CASE:-4} --ctas --reps 30 --json "$WORK/cal.json" > "$WORK/cal.txt" 2>&1
echo "calibration rc=$? at $(( $(date +%s) - t0 )) s"
RANK=$(python3 - "$WORK/cal.json" ${CAL_POINT:-kv1_landed} <<'PY'
import json, sys
res = json.load(open(sys.argv[1]))
res = res if isinstance(res, list) else res.get("results", res)
sms = res[0]["ctas"][sys.argv[2]]["all_sms"]  # (sm, mean lateness), latest first
order = [sm for sm, _ in sorted(sms, key=lambda x: x[1])]  # fastest first
import torch
n = torch.cuda.get_device_properties(0).multi_processor_count
assert len(order) == n, (len(order), n)
table = [-1] * (max(order) + 1)
for r, sm in enumerate(order):
    table[sm] = r
print(",".join(map(str, table)))
print("ranked %d SMs, slowest %s" % (len(order), order[-12:]), file=sys.stderr)
PY
)
echo "rank table: $RANK" | cut -c1-300
echo "$RANK" > "$WORK/rank.txt"
pack
timeout 120 python3 bench/output_digest.py > "$WORK/digest_off.txt" 2>&1
KDTREE_SM_RANK=$RANK timeout 120 python3 bench/output_digest.py > "$WORK/digest_on.txt" 2>&1
if cmp -s <(grep -v '^#' "$WORK/digest_off.txt") <(grep -v '^#' "$WORK/digest_on.txt"); then echo "digests identical"; else echo "DIGESTS DIFFER"; diff "$WORK/digest_off.txt" "$WORK/digest_on.txt" | head; fi
KDTREE_SM_RANK=$RANK timeout 200 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_verify_gpu.py 2>&1 | tail -2
CASES=${BENCH_CASES:-0,2,3,4,5,7,8}
for pass in 1 2; do
  order="off on"; [ "$pass" -eq 2 ] && order="on off"
  for v in $order; do
    env_rank=""; [ "$v" = on ] && env_rank=$RANK
    KDTREE_SM_RANK=$env_rank timeout 200 python3 bench/bench_verify.py --json "$WORK/rank_${v}_p$pass.json" \
      --no-triton --no-sweep --reps 30 --cases "$CASES" ${AB_ARGS:-} > "$WORK/rank_${v}_p$pass.log" 2>&1
    echo "rank $v pass $pass rc=$? at $(( $(date +%s) - t0 )) s"
  done
  pack
done
python3 bench/ab_summary.py "off=$WORK/rank_off_p1.json,$WORK/rank_off_p2.json" "on=$WORK/rank_on_p1.json,$WORK/rank_on_p2.json" | tee "$WORK/rank_summary.txt"
pack
for v in off on; do
  env_rank=""; [ "$v" = on ] && env_rank=$RANK
  KDTREE_SM_RANK=$env_rank timeout 150 python3 bench/trace_verify.py --cases 2,3,4 --ctas > "$WORK/trace_$v.txt" 2>&1
  echo "trace $v rc=$? at $(( $(date +%s) - t0 )) s"
  grep -A5 "^main-kernel points" "$WORK/trace_$v.txt" | cut -c1-220
  grep "last_pv\|published" "$WORK/trace_$v.txt" | grep -v "^|" | cut -c1-200
done
pack
