#!/usr/bin/env bash
# Nsight Compute of one verify case on the device (after device_run.sh built the extension):
#   bash research/kernel-lab/scripts/ncu_case.sh B H D PREFIX [name]
# Writes $OUT/ncu_<name>.txt (details of the main kernel, full section set) and
# $OUT/ncu_<name>_sass.csv (per-SASS-instruction stall samples).
set -u -o pipefail
OUT=${OUT:-$PWD/_device_out}
cd "$(dirname "$0")/.."
name=${5:-$1_$2_$3_$4}
timeout 240 ncu --clock-control none --kernel-name regex:verify_main --launch-skip 3 --launch-count 1 \
  --set full --import-source no -o "/tmp/ncu_$name" -f python3 scripts/profile_case.py "$1" "$2" "$3" "$4" \
  > "$OUT/ncu_${name}_run.log" 2>&1
echo "ncu $name rc=$?"
ncu --import "/tmp/ncu_$name.ncu-rep" --print-details all > "$OUT/ncu_$name.txt" 2>&1
ncu --import "/tmp/ncu_$name.ncu-rep" --page source --print-source sass --csv > "$OUT/ncu_${name}_sass.csv" 2>&1
ls -la "$OUT"
