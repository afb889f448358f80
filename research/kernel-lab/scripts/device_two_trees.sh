# Sourced by the device scripts that compare the tree (kernels/) with an earlier kernel
# (.base/kernels): the wheels, the environment, `lap` (prints the time and packs $OUT into
# the one file that comes back), and both trees built side by side, each within $BUILD_TIMEOUT s.
set -u -o pipefail
ROOT=$PWD; t0=$(date +%s); FINAL=$OUT; OUT=/tmp/o; mkdir -p $OUT
lap() { echo "== $1 at $(( $(date +%s) - t0 )) s"; tar czf $FINAL/all.tgz -C $OUT . 2>/dev/null; }
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/msgspec*.whl && export PYTHONPATH=/tmp/site
export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0
cp -r .whl .base/ && cp -r kernels/.whl .base/kernels/
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; python3 -c "import torch; print(torch.__version__)"; } > $OUT/env.log 2>&1
(cd kernels && MAX_JOBS=8 timeout $BUILD_TIMEOUT python3 setup.py build_ext --inplace > $OUT/build_new.log 2>&1; echo "new rc=$?" >> $OUT/build_new.log) &
(cd .base/kernels && MAX_JOBS=8 timeout $BUILD_TIMEOUT python3 setup.py build_ext --inplace > $OUT/build_base.log 2>&1; echo "base rc=$?" >> $OUT/build_base.log) &
wait; lap build; tail -q -n 1 $OUT/build_new.log $OUT/build_base.log
