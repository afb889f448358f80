"""GPU tests of the fp8 KV read path (e4m3 and e5m2 pools) against the fp64 reference on the
dequantized pool (run on the H200).

Every case draws fresh random inputs with the pool stored as SGLang stores it (keys divided by
k_scale, in fp8; unused rows NaN), poisons the output and the workspace's partials with NaN, and
requires every output written and a relative Frobenius error against ``ref.verify_attention_ref``
on the fp8 values times the descales of at most 1.5 times plain PyTorch's at bf16 on the same
dequantized pool, plus 1e-4 (kdtree_mla_testing.accuracy). SGLang's own Triton path (its fp8
read: q and P cast to fp8) is run on the same inputs where its wheel is present, and ours must
be no worse than it.
"""

from __future__ import annotations

import itertools
import os
import warnings

import pytest

torch = pytest.importorskip("torch", reason="needs torch (pip install torch)")

from kdtree_mla_testing.accuracy import (  # noqa: E402
    assert_within_torch_error,
    poison_partials,
    rel_err,
)
from kdtree_mla_testing.inputs import make_inputs  # noqa: E402
from kdtree_mla_testing.ref import verify_attention_ref, verify_attention_torch  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (none visible)"),
]

FP8 = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
_SEED = [5000]


def fresh_seed() -> int:
    _SEED[0] += 1
    return _SEED[0]


def api():
    from kdtree_mla import api as _api

    return _api


def workspace(inp, *, num_ctas=None, variant=0):
    ws = api().VerifyWorkspace(
        max_batch=len(inp.prefix_lens),
        max_tokens=inp.num_tokens,
        num_heads=inp.num_heads,
        device="cuda",
        num_ctas=num_ctas,
    )
    from kdtree_mla import _diag

    _diag.set_force_variant(ws, variant)
    return ws


def run(inp, ws, *, k_descale=None, v_descale=None, k_buffer=None, kv_dtype=None):
    t, h = inp.num_tokens, inp.num_heads
    o = torch.full((t, h, 512), float("nan"), dtype=torch.bfloat16, device="cuda")
    lse = torch.full((t, h), float("nan"), dtype=torch.float32, device="cuda")
    kb = inp.k_buffer if k_buffer is None else k_buffer
    poison_partials(ws)
    api().extend_attention_fwd(
        inp.q,
        inp.k_extend,
        inp.v_extend,
        o,
        kb,
        kb[..., :512],
        inp.qo_indptr,
        inp.kv_indptr,
        inp.kv_indices,
        inp.custom_mask,
        True,
        inp.mask_indptr,
        max(inp.draft_lens),
        inp.sm_scale,
        workspace=ws,
        lse_extend=lse,
        k_descale=inp.k_descale if k_descale is None else k_descale,
        v_descale=inp.v_descale if v_descale is None else v_descale,
        kv_dtype=kv_dtype,
    )
    torch.cuda.synchronize()
    return o, lse


def check(inp, ws, **kw) -> float:
    o, lse = run(inp, ws, **kw)
    o_ref, lse_ref = inp.reference()
    assert not torch.isnan(o).any(), f"{int(torch.isnan(o).sum())} output values unwritten/NaN"
    err = assert_within_torch_error(o, o_ref, inp.torch_output())
    assert torch.isfinite(lse).all()
    lerr = float((lse.double() - lse_ref).abs().max())
    assert lerr < 2e-2, f"lse max abs error {lerr:.3e}"
    return err


def variant(name: str) -> int:
    from kdtree_mla import _C

    return {"default": 0, "small": _C.VARIANT_SMALL, "large": _C.VARIANT_LARGE}[name]


@pytest.mark.parametrize("kv", ["e4m3", "e5m2"])
@pytest.mark.parametrize(
    "prefix,draft,heads,tree",
    [
        ([0], [4], 8, True),
        ([1], [4], 8, True),
        ([33], [4], 8, False),
        ([5700], [4], 8, True),
        ([91000], [4], 8, True),
        ([23000], [8], 16, False),
        ([3000, 17], [4, 4], 64, True),
        ([2000, 0, 77], [16, 1, 5], 8, None),
        ([0, 5, 9000, 17, 300, 40000], [4, 1, 16, 4, 8, 4], 16, True),
    ],
)
@pytest.mark.parametrize("k_scale", [1.0, 0.37])
def test_fp8_pool_matches_the_dequantized_reference(kv, prefix, draft, heads, tree, k_scale):
    inp = make_inputs(
        prefix,
        draft,
        heads,
        device="cuda",
        seed=fresh_seed(),
        tree=tree,
        kv_dtype=FP8[kv],
        k_scale=k_scale,
    )
    check(inp, workspace(inp))


@pytest.mark.parametrize("kv", ["e4m3", "e5m2"])
@pytest.mark.parametrize("name", ["small", "large"])
@pytest.mark.parametrize("num_ctas", [None, 7])
def test_fp8_on_both_production_variants(kv, name, num_ctas):
    """sm_120's 2-stage variant and the H200's 3-stage one, fused merge and combine kernel."""
    inp = make_inputs(
        [5, 9000, 17, 300, 40000],
        [1, 16, 4, 8, 4],
        16,
        device="cuda",
        seed=fresh_seed(),
        kv_dtype=FP8[kv],
        k_scale=2.5,
    )
    check(inp, workspace(inp, num_ctas=num_ctas, variant=variant(name)))


@pytest.mark.parametrize("kv", ["e4m3", "e5m2"])
def test_fp8_subnormals_are_read_exactly(kv):
    """A pool of fp8 subnormals only (exponent field 0), draft keys as small: the widening
    keeps subnormals (a flush to zero would lose every prefix value)."""
    inp = make_inputs([5000, 700], [4, 4], 8, device="cuda", seed=fresh_seed(), kv_dtype=FP8[kv])
    gen = torch.Generator(device="cuda").manual_seed(fresh_seed())
    mant = 8 if kv == "e4m3" else 4
    used = inp.kv_indices.long()
    raw = torch.randint(1, mant, (used.numel(), 1, 576), generator=gen, device="cuda")
    raw |= torch.randint(0, 2, raw.shape, generator=gen, device="cuda") * 0x80
    inp.k_buffer.view(torch.uint8)[used] = raw.to(torch.uint8)
    inp.k_extend.mul_(2.0**-9)  # (exact in bf16; v_extend is its view)
    check(inp, workspace(inp))


@pytest.mark.parametrize("kv", ["e4m3", "e5m2"])
def test_uint8_storage_tensor_descales_and_separate_k_v_scales(kv):
    """SGLang's uint8 pool with kv_dtype=, descales as 1-element fp32 device tensors, and a
    v_descale that differs from k_descale: each scales its own side only."""
    inp = make_inputs([6000, 40], [4, 4], 8, device="cuda", seed=fresh_seed(), kv_dtype=FP8[kv])
    inp.k_descale, inp.v_descale = 0.75, 1.6
    kd = torch.tensor([0.75], dtype=torch.float32, device="cuda")
    vd = torch.tensor([1.6], dtype=torch.float32, device="cuda")
    ws = workspace(inp)
    e1 = check(inp, ws, k_buffer=inp.k_buffer.view(torch.uint8), kv_dtype=FP8[kv])
    e2 = check(inp, ws, k_descale=kd, v_descale=vd)
    assert e1 == pytest.approx(e2, rel=1e-6)


@pytest.mark.parametrize("kv", ["e4m3", "e5m2"])
def test_fp8_graph_capture_replay_with_new_lengths_indices_masks_and_descales(kv):
    """Capture once with device-tensor descales, then change kv_indices, lengths, masks, pool
    rows and the descales in place and replay: equal to eager, and to the fp64 reference."""
    from kdtree_mla_testing.ref import (
        build_custom_mask,
        random_tree_parents,
        tree_mask_from_parents,
    )

    H, T, pool = 8, 16, 200_000
    first = make_inputs(
        [1000, 50000, 3, 0],
        [4, 4, 4, 4],
        H,
        device="cuda",
        seed=fresh_seed(),
        spare_slots=pool - 51003,
        kv_dtype=FP8[kv],
    )
    ws = workspace(first)
    kv_indices = torch.zeros(pool, dtype=torch.int32, device="cuda")
    kv_indices[: first.kv_indices.numel()] = first.kv_indices
    custom_mask = torch.zeros(4_000_000, dtype=torch.uint8, device="cuda")
    custom_mask[: first.custom_mask.numel()] = first.custom_mask
    qo, kvp, mind = first.qo_indptr.clone(), first.kv_indptr.clone(), first.mask_indptr.clone()
    kd = torch.ones(1, dtype=torch.float32, device="cuda")
    vd = torch.ones(1, dtype=torch.float32, device="cuda")
    o = torch.empty(T, H, 512, dtype=torch.bfloat16, device="cuda")
    kb = first.k_buffer

    def call():
        api().extend_attention_fwd(
            first.q,
            first.k_extend,
            first.v_extend,
            o,
            kb,
            kb[..., :512],
            qo,
            kvp,
            kv_indices,
            custom_mask,
            True,
            mind,
            16,
            first.sm_scale,
            workspace=ws,
            k_descale=kd,
            v_descale=vd,
        )

    call()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        call()
    gen = torch.Generator().manual_seed(fresh_seed())
    cases = (
        ([1000, 50000, 3, 0], [4, 4, 4, 4], 1.0, 1.0),
        ([120000, 0, 7, 2500], [2, 9, 1, 4], 0.5, 0.5),
        ([0, 0, 0, 0], [4, 4, 4, 4], 3.0, 3.0),
        ([33, 199000 - 33, 1, 0], [16, 0, 0, 0], 0.8, 1.7),
    )
    for prefix, draft, ks, vs in cases:
        perm = torch.randperm(pool, generator=gen)[: sum(prefix)].to(torch.int32)
        trees = [tree_mask_from_parents(random_tree_parents(d, gen)) for d in draft]
        mask, mask_ptr = build_custom_mask(trees, prefix)
        qo.copy_(torch.tensor([0, *itertools.accumulate(draft)], dtype=qo.dtype))
        kvp.copy_(torch.tensor([0, *itertools.accumulate(prefix)], dtype=kvp.dtype))
        mind.copy_(mask_ptr)
        kv_indices.zero_()
        kv_indices[: perm.numel()] = perm.cuda()
        custom_mask.zero_()
        custom_mask[: mask.numel()] = mask.cuda()
        kd.fill_(ks)
        vd.fill_(vs)
        raw = kb.view(torch.uint8)
        raw.fill_(0x7F)  # NaN in both e4m3fn and e5m2
        used = perm.long().cuda()
        raw[used] = torch.randn(used.numel(), 1, 576, device="cuda").to(FP8[kv]).view(torch.uint8)
        o.fill_(float("nan"))
        poison_partials(ws)
        g.replay()
        torch.cuda.synchronize()
        o_graph = o.clone()
        o.fill_(float("nan"))
        poison_partials(ws)
        call()
        torch.cuda.synchronize()
        assert torch.equal(o_graph, o), "graph replay differs from eager"
        args = (first.q, first.k_extend, first.v_extend, kb, kb[..., :512], qo, kvp)
        args += (kv_indices, custom_mask, mind, first.sm_scale)
        o_ref, _ = verify_attention_ref(*args, k_descale=ks, v_descale=vs)
        assert not torch.isnan(o_graph).any()
        o_torch = verify_attention_torch(*args, k_descale=ks, v_descale=vs)
        assert_within_torch_error(o_graph, o_ref, o_torch, f"replay {prefix}/{draft}: ")


def _triton():
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    bench = os.path.join(here, "..", "..", "bench")
    sys.path.insert(0, bench)
    try:
        from triton_ref import load_extend_attention
    finally:
        sys.path.remove(bench)
    fn, note = load_extend_attention(os.path.join(here, "..", "..", ".whl"))
    if fn is None:
        pytest.skip(f"SGLang's Triton kernel unavailable: {note}")
    return fn


@pytest.mark.parametrize("kv", ["e4m3", "e5m2"])
@pytest.mark.parametrize(
    "prefix,draft,heads,tree",
    [([5700], [4], 8, True), ([23000], [4], 8, False), ([3000, 17, 900], [8, 4, 2], 16, True)],
)
def test_fp8_error_no_worse_than_sglang_triton_fp8(kv, prefix, draft, heads, tree):
    """SGLang's Triton extend kernel (the wheel in kernels/.whl; descale 1.0, which it applies
    as the identity) on the same fp8 pool: our relative error vs fp64 must not exceed its."""
    fn = _triton()
    inp = make_inputs(
        prefix, draft, heads, device="cuda", seed=fresh_seed(), tree=tree, kv_dtype=FP8[kv]
    )
    ours = check(inp, workspace(inp))
    o = torch.zeros(inp.num_tokens, heads, 512, dtype=torch.bfloat16, device="cuda")
    kb = inp.k_buffer
    with warnings.catch_warnings():  # Triton deprecation warnings of SGLang's own code
        warnings.simplefilter("ignore")
        fn(
            inp.q,
            inp.k_extend,
            inp.v_extend,
            o,
            kb,
            kb[..., :512],
            inp.qo_indptr,
            inp.kv_indptr,
            inp.kv_indices,
            inp.custom_mask,
            True,
            inp.mask_indptr,
            max(draft),
            inp.sm_scale,
        )
    torch.cuda.synchronize()
    theirs = rel_err(o, inp.reference()[0])
    print(f"fp8 {kv} {prefix}/{draft}/H{heads}: ours {ours:.3e}, SGLang Triton {theirs:.3e}")
    assert ours <= theirs, f"ours {ours:.3e} > SGLang Triton's {theirs:.3e}"


def test_fp8_bad_arguments_raise_with_a_message():
    inp = make_inputs([100], [4], 8, device="cuda", seed=fresh_seed(), kv_dtype=FP8["e4m3"])
    ws = workspace(inp)
    raw = inp.k_buffer.view(torch.uint8)
    with pytest.raises(ValueError, match="uint8 pool needs kv_dtype"):
        run(inp, ws, k_buffer=raw)
    with pytest.raises(ValueError, match="disagrees"):
        run(inp, ws, kv_dtype=torch.float8_e5m2)
    with pytest.raises(TypeError, match="k_descale"):
        run(inp, ws, k_descale=torch.ones(1, dtype=torch.float64, device="cuda"))
    with pytest.raises(ValueError, match="v_descale"):
        run(inp, ws, v_descale=torch.ones(2, dtype=torch.float32, device="cuda"))
    with pytest.raises(ValueError, match="k_descale"):
        run(inp, ws, k_descale=float("nan"))
    with pytest.raises(TypeError, match="v_buffer"):
        o = torch.empty(4, 8, 512, dtype=torch.bfloat16, device="cuda")
        api().extend_attention_fwd(
            inp.q,
            inp.k_extend,
            inp.v_extend,
            o,
            inp.k_buffer,
            inp.k_buffer[..., :512].view(torch.uint8),
            inp.qo_indptr,
            inp.kv_indptr,
            inp.kv_indices,
            inp.custom_mask,
            True,
            inp.mask_indptr,
            4,
            inp.sm_scale,
            workspace=ws,
            k_descale=1.0,
            v_descale=1.0,
        )
    # An fp8 pool without its descales: refused by name (a silent 1.0 would misscale K).
    o = torch.empty(4, 8, 512, dtype=torch.bfloat16, device="cuda")
    args = (inp.q, inp.k_extend, inp.v_extend, o, inp.k_buffer, inp.k_buffer[..., :512])
    args += (inp.qo_indptr, inp.kv_indptr, inp.kv_indices, inp.custom_mask, True)
    args += (inp.mask_indptr, 4, inp.sm_scale)
    with pytest.raises(ValueError, match="k_descale and v_descale: an fp8 KV pool"):
        api().extend_attention_fwd(*args, workspace=ws)
    with pytest.raises(ValueError, match="^v_descale: an fp8 KV pool"):
        api().extend_attention_fwd(*args, workspace=ws, k_descale=1.0)
    with pytest.raises(ValueError, match=r"v_descale: an fp8 KV pool \(torch.float8_e4m3fn\)"):
        raw = inp.k_buffer.view(torch.uint8)
        api().extend_attention_fwd(
            *args[:4], raw, raw[..., :512], *args[6:], workspace=ws, kv_dtype=FP8["e4m3"]
        )
    # The extension's own entry point refuses it too.
    ext = api().load()
    params = api().VerifyParams(*args[:10], inp.mask_indptr, inp.sm_scale, None, ws)
    with pytest.raises(ValueError, match="k_descale: an fp8 KV pool needs its descale"):
        ext.verify_fwd(*params[:13], ws._handle, None, None, 0)
    bf = make_inputs([100], [4], 8, device="cuda", seed=fresh_seed())
    with pytest.raises(ValueError, match="bfloat16 KV pool takes no descale"):
        run(bf, workspace(bf), k_descale=0.5)
    with pytest.raises(ValueError, match="fp8 type, but k_buffer is bfloat16"):
        run(bf, workspace(bf), kv_dtype=torch.float8_e4m3fn)
