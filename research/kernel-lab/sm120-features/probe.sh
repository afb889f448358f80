#!/usr/bin/env bash
# Which PTX features assemble for which target, with the ptxas on the PATH (CPU only, no GPU):
# one minimal kernel per feature, `ptxas -arch=<target>` per target; prints a Markdown table.
#   bash research/kernel-lab/sm120-features/probe.sh [targets...]   # default: the five below
set -u
TARGETS=${*:-sm_90 sm_90a sm_120 sm_120a sm_120f}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# name|PTX body (inside `.entry k(.param .u64 p)`, registers declared by the probe)|note
FEATURES=$(cat <<'PTX'
mma.sync m16n8k16 bf16 (the kernel's MMA)|mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%f0,%f1,%f2,%f3}, {%r0,%r1,%r2,%r3}, {%r4,%r5}, {%f4,%f5,%f6,%f7};
mma.sync m16n8k32 e4m3 (fp8 MMA)|mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%f0,%f1,%f2,%f3}, {%r0,%r1,%r2,%r3}, {%r4,%r5}, {%f4,%f5,%f6,%f7};
mma.sync kind::mxf8f6f4 block-scaled|mma.sync.aligned.kind::mxf8f6f4.block_scale.scale_vec::1X.m16n8k32.row.col.f32.e4m3.e4m3.f32.ue8m0 {%f0,%f1,%f2,%f3}, {%r0,%r1,%r2,%r3}, {%r4,%r5}, {%f4,%f5,%f6,%f7}, {%r6}, {%h0,%h1}, {%r7}, {%h0,%h1};
cvt.rn.f16x2.e4m3x2 (fp8 to f16)|cvt.rn.f16x2.e4m3x2 %r1, %h0;
cvt.rn.bf16x2.e4m3x2 (fp8 to bf16)|cvt.rn.bf16x2.e4m3x2 %r1, %h0;
cp.async.bulk global to shared, mbarrier (the kernel's loads)|cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r0], [%rd0], 576, [%r1];
cp.async.bulk with an L2 cache hint (evict-first)|cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%r0], [%rd0], 576, [%r1], %rd1;
cp.async.bulk.tensor (TMA, unicast)|cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r0], [%rd0, {%r2, %r3}], [%r1];
cp.async.bulk multicast to a cluster|cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%r0], [%rd0], 576, [%r1], %h0;
mbarrier expect_tx / try_wait.parity|mbarrier.arrive.expect_tx.shared::cta.b64 %rd1, [%r0], 576; mbarrier.try_wait.parity.shared::cta.b64 %p0, [%r0], %r1;
griddepcontrol (programmatic dependent launch)|griddepcontrol.launch_dependents; griddepcontrol.wait;
clusters: barrier.cluster, mapa (distributed shared memory)|barrier.cluster.arrive; barrier.cluster.wait; mapa.shared::cluster.u32 %r1, %r0, %r2;
elect.sync|elect.sync %r1|%p0, 0xffffffff;
stmatrix|stmatrix.sync.aligned.m8n8.x4.shared.b16 [%r0], {%r1, %r2, %r3, %r4};
setmaxnreg|setmaxnreg.inc.sync.aligned.u32 232;
wgmma (warpgroup MMA)|wgmma.fence.sync.aligned;
tcgen05 (tensor memory)|tcgen05.fence::before_thread_sync;
PTX
)

printf '| feature |'; for t in $TARGETS; do printf ' %s |' "$t"; done; echo
printf '|---|'; for t in $TARGETS; do printf -- '---|'; done; echo
while IFS='|' read -r name body; do
  [ -n "$name" ] || continue
  printf '| %s |' "$name"
  for t in $TARGETS; do
    cat > "$dir/k.ptx" <<KERNEL
.version 9.0
.target $t
.address_size 64
.visible .entry k(.param .u64 p)
{
  .reg .pred %p<2>;
  .reg .b16 %h<2>;
  .reg .b32 %r<8>;
  .reg .f32 %f<8>;
  .reg .b64 %rd<2>;
  ld.param.u64 %rd0, [p];
  mov.b32 %r0, 0; mov.b32 %r1, 0; mov.b32 %r2, 0; mov.b32 %r3, 0;
  mov.b32 %r4, 0; mov.b32 %r5, 0; mov.b32 %r6, 0; mov.b32 %r7, 0;
  mov.b16 %h0, 0; mov.b16 %h1, 0; mov.b64 %rd1, 0;
  mov.f32 %f4, 0f00000000; mov.f32 %f5, 0f00000000; mov.f32 %f6, 0f00000000; mov.f32 %f7, 0f00000000;
  $body
  ret;
}
KERNEL
    if ptxas -arch="$t" "$dir/k.ptx" -o "$dir/k.cubin" > "$dir/log" 2>&1; then
      printf ' yes |'
    else
      printf ' no |'
      echo "$name on $t: $(grep -m1 -i error "$dir/log")" >> "$dir/why"
    fi
  done
  echo
done <<< "$FEATURES"
echo
echo "ptxas: $(ptxas --version | tail -1)"
echo
echo "Why each 'no' (the first error line):"
sed 's/^/- /' "$dir/why" 2>/dev/null
