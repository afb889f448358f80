"""Runs one verify case a few times (for ncu): python3 profile_case.py B H D PREFIX [min_blocks].

KDTREE_FORCE_VARIANT=v runs _C.VARIANTS[v] instead of the device default.
"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from kdtree_mla import _diag, api  # noqa: E402
from kdtree_mla_testing.inputs import make_inputs  # noqa: E402

b, h, d, prefix = (int(x) for x in sys.argv[1:5])
layers = [
    make_inputs([prefix] * b, [d] * b, h, device="cuda", seed=i, spare_slots=16) for i in range(8)
]
ws = api.VerifyWorkspace(max_batch=b, max_tokens=b * d, num_heads=h, device="cuda")
_diag.set_force_variant(ws, int(os.environ.get("KDTREE_FORCE_VARIANT", "0")))
if len(sys.argv) > 5:
    ws.min_blocks_per_cta = int(sys.argv[5])
o = torch.empty(b * d, h, 512, dtype=torch.bfloat16, device="cuda")
for it in range(8):
    x = layers[it % len(layers)]
    api.extend_attention_fwd(
        x.q,
        x.k_extend,
        x.v_extend,
        o,
        x.k_buffer,
        x.v_buffer,
        x.qo_indptr,
        x.kv_indptr,
        x.kv_indices,
        x.custom_mask,
        True,
        x.mask_indptr,
        d,
        x.sm_scale,
        workspace=ws,
    )
torch.cuda.synchronize()
print("ok")
