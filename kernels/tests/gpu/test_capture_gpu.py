"""The first call of a process captured into a CUDA graph, with no eager call before it (GPU).

Each case runs in a fresh Python process, so that nothing of the launcher's one-time set-up
(the kernels' shared-memory opt-in, the cooperative + PDL question) was done by an earlier
test: the workspace's construction must have prepared the kernels, the captured call must
launch without PDL, and the replay must give the right output, bf16 and fp8 alike.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch", reason="needs torch (pip install torch)")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (none visible)"),
]

KERNELS = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import torch
    from kdtree_mla import _C, api
    from kdtree_mla_testing.accuracy import error_bound, poison_partials, rel_err
    from kdtree_mla_testing.inputs import make_inputs

    prefix, draft, heads, kv, seed = json.loads(sys.argv[1])
    kv_dtype = getattr(torch, kv) if kv else None
    inp = make_inputs([prefix], [draft], heads, device="cuda", seed=seed, kv_dtype=kv_dtype, k_scale=0.5)
    ws = api.VerifyWorkspace(max_batch=4, max_tokens=64, num_heads=heads, device="cuda")
    dev = torch.cuda.current_device()
    o = torch.full((draft, heads, 512), float("nan"), dtype=torch.bfloat16, device="cuda")
    extra = {}
    if kv_dtype is not None:
        extra = dict(k_descale=inp.k_descale, v_descale=inp.v_descale, kv_dtype=kv_dtype)
    def call():
        api.extend_attention_fwd(
            inp.q, inp.k_extend, inp.v_extend, o, inp.k_buffer, inp.v_buffer, inp.qo_indptr,
            inp.kv_indptr, inp.kv_indices, inp.custom_mask, True, inp.mask_indptr, draft,
            inp.sm_scale, workspace=ws, **extra)
    poison_partials(ws)
    pdl_before = _C.fused_pdl(dev)
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        with torch.cuda.graph(graph, stream=stream):
            call()
    pdl_captured = _C.fused_pdl(dev)
    graph.replay()
    torch.cuda.synchronize()
    o_ref, _ = inp.reference()
    err = rel_err(o, o_ref)
    bound = error_bound(inp.torch_output(), o_ref)
    nan = bool(torch.isnan(o).any())
    o.fill_(float("nan"))
    call()  # eager: now the cooperative + PDL question is settled
    torch.cuda.synchronize()
    print(json.dumps(dict(err=err, bound=bound, nan=nan, fused=bool(ws.fused), pdl_before=pdl_before,
                          pdl_captured=pdl_captured, pdl_after=_C.fused_pdl(dev),
                          eager_err=rel_err(o, o_ref))))
    """
)


@pytest.mark.parametrize(
    "prefix, draft, heads, kv",
    [(5700, 4, 8, None), (23000, 8, 16, None), (5700, 4, 8, "float8_e4m3fn")],
)
def test_first_call_of_a_process_captured_without_warm_up(prefix, draft, heads, kv):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([KERNELS, os.environ.get("PYTHONPATH", "")]))
    res = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps([prefix, draft, heads, kv, 4242 + prefix])],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        cwd=KERNELS,
    )
    assert res.returncode == 0, res.stderr[-4000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert got["fused"], "the default grid should take the fused (cooperative) path"
    assert got["pdl_before"] == 0 and got["pdl_captured"] == 0, (
        got
    )  # captured without PDL, unsettled
    assert got["pdl_after"] in (1, 2), got  # the eager call settled it
    assert not got["nan"], got
    assert got["err"] <= got["bound"], got
    assert got["eager_err"] <= got["bound"], got
