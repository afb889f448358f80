"""The torch reference against a naive per-element loop (CPU only)."""

import math

import pytest

torch = pytest.importorskip("torch", reason="needs torch (pip install torch)")

from kdtree_mla_testing.inputs import make_inputs  # noqa: E402
from kdtree_mla_testing.ref import verify_attention_ref  # noqa: E402


def naive(inp):
    """Scalar loops over every (token, head, column): the definition, nothing vectorised."""
    q = inp.q.double()
    kb = inp.k_buffer.double()
    vb = inp.v_buffer.double()
    ke = inp.k_extend.double()
    ve = inp.v_extend.double()
    qo = inp.qo_indptr.tolist()
    kv = inp.kv_indptr.tolist()
    idx = inp.kv_indices.tolist()
    mask = None if inp.custom_mask is None else inp.custom_mask.tolist()
    mind = None if inp.mask_indptr is None else inp.mask_indptr.tolist()
    t_total, h_total, _ = q.shape
    out = torch.zeros(t_total, h_total, 512, dtype=torch.float64)
    lse = torch.full((t_total, h_total), -math.inf, dtype=torch.float64)
    for b in range(len(qo) - 1):
        d = qo[b + 1] - qo[b]
        p = kv[b + 1] - kv[b]
        for i in range(d):
            t = qo[b] + i
            for h in range(h_total):
                scores, values = [], []
                for col in range(p + d):
                    if col < p:
                        kr, vr = kb[idx[kv[b] + col], 0], vb[idx[kv[b] + col], 0]
                    else:
                        j = col - p
                        if mask is None:
                            visible = j <= i
                        else:
                            visible = bool(mask[mind[b] + i * (p + d) + p + j])
                        if not visible:
                            continue
                        kr, vr = ke[qo[b] + j, 0], ve[qo[b] + j, 0]
                    scores.append(float((q[t, h] * kr).sum()) * inp.sm_scale)
                    values.append(vr)
                m = max(scores)
                w = [math.exp(s - m) for s in scores]
                z = sum(w)
                acc = torch.zeros(512, dtype=torch.float64)
                for wi, vr in zip(w, values):
                    acc += wi * vr
                out[t, h] = acc / z
                lse[t, h] = m + math.log(z)
    return out, lse


CASES = [
    # prefix_lens, draft_lens, heads, tree, index dtype
    ([5], [3], 2, True, torch.int32),
    ([0], [4], 1, True, torch.int64),
    ([7, 0, 3], [2, 1, 4], 3, True, torch.int32),
    ([4, 6], [3, 3], 2, False, torch.int64),
    ([2, 9], [4, 2], 2, None, torch.int32),
    ([1, 0, 0, 5], [1, 3, 0, 2], 2, True, torch.int32),
]


@pytest.mark.parametrize("prefix,draft,heads,tree,idx", CASES)
def test_reference_matches_naive_loop(prefix, draft, heads, tree, idx):
    inp = make_inputs(
        prefix, draft, heads, seed=sum(prefix) * 7 + heads, tree=tree, index_dtype=idx
    )
    o, lse = verify_attention_ref(
        inp.q,
        inp.k_extend,
        inp.v_extend,
        inp.k_buffer,
        inp.v_buffer,
        inp.qo_indptr,
        inp.kv_indptr,
        inp.kv_indices,
        inp.custom_mask,
        inp.mask_indptr,
        inp.sm_scale,
    )
    o_n, lse_n = naive(inp)
    assert torch.allclose(o, o_n, rtol=1e-10, atol=1e-10)
    assert torch.allclose(lse, lse_n, rtol=1e-10, atol=1e-10)
    assert not torch.isnan(o).any()


def test_reference_fp32_close_to_fp64():
    inp = make_inputs([40, 3], [4, 4], 4, seed=3)
    args = (
        inp.q,
        inp.k_extend,
        inp.v_extend,
        inp.k_buffer,
        inp.v_buffer,
        inp.qo_indptr,
        inp.kv_indptr,
        inp.kv_indices,
        inp.custom_mask,
        inp.mask_indptr,
        inp.sm_scale,
    )
    o64, _ = verify_attention_ref(*args)
    o32, _ = verify_attention_ref(*args, dtype=torch.float32)
    err = (o32.double() - o64).norm() / o64.norm()
    assert err < 1e-5


def test_unused_pool_slots_are_poisoned_and_never_read():
    inp = make_inputs([10, 20], [2, 3], 2, seed=11)
    used = set(inp.kv_indices.tolist())
    unused = [r for r in range(inp.k_buffer.shape[0]) if r not in used]
    assert unused, "the pool must have spare rows"
    assert torch.isnan(inp.k_buffer[unused].float()).all()
    o, _ = verify_attention_ref(
        inp.q,
        inp.k_extend,
        inp.v_extend,
        inp.k_buffer,
        inp.v_buffer,
        inp.qo_indptr,
        inp.kv_indptr,
        inp.kv_indices,
        inp.custom_mask,
        inp.mask_indptr,
        inp.sm_scale,
    )
    assert torch.isfinite(o).all()


@pytest.mark.parametrize("fp8", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_fp8_pool_reference_is_the_dequantized_pool_with_descales(fp8):
    """An fp8 pool (or its uint8 storage with kv_dtype) is its values times the descales on the
    prefix columns only: the same as a float64 pool holding those products."""
    inp = make_inputs([50, 9], [4, 3], 8, seed=3, kv_dtype=fp8, k_scale=0.25)
    assert inp.k_buffer.dtype == fp8 and inp.k_descale == 0.25
    o, lse = inp.reference()
    deq = inp.k_buffer.float().double() * 0.25
    args = (inp.qo_indptr, inp.kv_indptr, inp.kv_indices, inp.custom_mask, inp.mask_indptr)
    o2, lse2 = verify_attention_ref(
        inp.q, inp.k_extend, inp.v_extend, deq, deq[..., :512], *args, inp.sm_scale
    )
    assert torch.allclose(o, o2, rtol=0, atol=1e-12) and torch.allclose(lse, lse2, atol=1e-12)
    raw = inp.k_buffer.view(torch.uint8)
    o3, _ = verify_attention_ref(
        inp.q,
        inp.k_extend,
        inp.v_extend,
        raw,
        raw[..., :512],
        *args,
        inp.sm_scale,
        k_descale=0.25,
        v_descale=0.25,
        kv_dtype=fp8,
    )
    assert torch.equal(o, o3)
    # A separate v_descale scales the values only: the LSE stays, the output moves.
    o4, lse4 = verify_attention_ref(
        inp.q,
        inp.k_extend,
        inp.v_extend,
        inp.k_buffer,
        inp.v_buffer,
        *args,
        inp.sm_scale,
        k_descale=0.25,
        v_descale=0.5,
    )
    assert torch.allclose(lse4, lse, atol=1e-12) and not torch.allclose(o4, o)
    with pytest.raises(ValueError, match="kv_dtype"):
        verify_attention_ref(
            inp.q, inp.k_extend, inp.v_extend, raw, raw[..., :512], *args, inp.sm_scale
        )


@pytest.mark.parametrize(
    "kw", [{}, {"tree": None}, {"kv_dtype": torch.float8_e4m3fn, "k_scale": 0.37}]
)
def test_the_pytorch_bf16_output_is_attention_at_bf16(kw):
    """verify_attention_torch, the GPU tests' yardstick: a bf16 output of the same attention,
    off the fp64 reference by bf16's error (more than the output's own rounding, far less
    than a wrong mask or scale), for every request of a mixed batch."""
    from kdtree_mla_testing.accuracy import rel_err

    inp = make_inputs([700, 0, 64], [4, 3, 8], 8, seed=11, **kw)
    o64, _ = inp.reference()
    o_pt = inp.torch_output()
    assert o_pt.dtype == torch.bfloat16 and o_pt.shape == o64.shape
    rounding = rel_err(o64.to(torch.bfloat16), o64)
    assert rounding < rel_err(o_pt, o64) < 2e-2
    for q0, q1 in zip(inp.qo_indptr.tolist(), inp.qo_indptr.tolist()[1:]):
        assert rel_err(o_pt[q0:q1], o64[q0:q1]) < 2e-2


def test_the_gpu_tests_bound_passes_the_rounded_answer_and_fails_twice_pytorchs_error():
    from kdtree_mla_testing.accuracy import EPS, TORCH_FACTOR, assert_within_torch_error, rel_err

    inp = make_inputs([2000, 33], [4, 4], 8, seed=12)
    o64, _ = inp.reference()
    o_pt = inp.torch_output()
    assert_within_torch_error(o64.to(torch.bfloat16), o64, o_pt)  # the best a bf16 output does
    assert_within_torch_error(o_pt, o64, o_pt)  # PyTorch itself
    noise = torch.randn(o64.shape, generator=torch.Generator().manual_seed(3), dtype=o64.dtype)
    too_far = o64 + noise * (2 * TORCH_FACTOR * rel_err(o_pt, o64) * o64.norm() / noise.norm())
    with pytest.raises(AssertionError, match=f"above {TORCH_FACTOR} x PyTorch bf16's"):
        assert_within_torch_error(too_far, o64, o_pt)
    assert EPS < 1e-3
