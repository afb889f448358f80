"""GPU tests of the verify kernel against the fp64 reference (run on the H200).

Every case draws fresh random inputs, poisons the output, the workspace's partials and unused
KV-pool rows with NaN, and requires every output written and a relative Frobenius error of at
most 1.5 times plain PyTorch's at bf16 on the same inputs, plus 1e-4
(kdtree_mla_testing.accuracy).
"""

from __future__ import annotations

import itertools
import random

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

_SEED = [1000]


def fresh_seed() -> int:
    _SEED[0] += 1
    return _SEED[0]


def api():
    # Imported lazily: on a CUDA machine a missing extension must fail, not skip.
    from kdtree_mla import api as _api

    return _api


def force_variant(ws, index: int) -> None:
    from kdtree_mla import _diag

    _diag.set_force_variant(ws, index)


def run_kernel(inp, ws, *, lse: bool = True, causal_none: bool = False, out=None):
    """One call into `out` (default: a new NaN-filled [T, H, 512] tensor); returns (o, lse)."""
    t, h = inp.num_tokens, inp.num_heads
    if out is None:
        out = torch.full((t, h, 512), float("nan"), dtype=torch.bfloat16, device=inp.q.device)
    o = out
    lse_t = (
        torch.full((t, h), float("nan"), dtype=torch.float32, device=inp.q.device) if lse else None
    )
    poison_partials(ws)
    api().extend_attention_fwd(
        inp.q,
        inp.k_extend,
        inp.v_extend,
        o,
        inp.k_buffer,
        inp.v_buffer,
        inp.qo_indptr,
        inp.kv_indptr,
        inp.kv_indices,
        inp.custom_mask,
        True,
        inp.mask_indptr,
        max(inp.draft_lens),
        inp.sm_scale,
        workspace=ws,
        lse_extend=lse_t,
    )
    return o, lse_t


def reference(inp):
    return inp.reference()


def check(inp, ws, *, lse: bool = True):
    o, lse_t = run_kernel(inp, ws, lse=lse)
    torch.cuda.synchronize()
    o_ref, lse_ref = reference(inp)
    assert not torch.isnan(o).any(), f"{int(torch.isnan(o).sum())} output values unwritten/NaN"
    err = assert_within_torch_error(o, o_ref, inp.torch_output())
    if lse:
        assert torch.isfinite(lse_t).all(), "lse has unwritten/non-finite values"
        lerr = float((lse_t.double() - lse_ref).abs().max())
        assert lerr < 2e-2, f"lse max abs error {lerr:.3e}"
    return err


def workspace(inp, *, num_ctas=None, min_blocks=None, max_batch=None, split_combine=False):
    ws = api().VerifyWorkspace(
        max_batch=max_batch or len(inp.prefix_lens),
        max_tokens=max(inp.num_tokens, 1),
        num_heads=inp.num_heads,
        device="cuda",
        num_ctas=num_ctas,
        split_combine=split_combine,
    )
    if min_blocks is not None:
        ws.min_blocks_per_cta = min_blocks
    return ws


# --- shapes from the issue -------------------------------------------------------------------


@pytest.mark.parametrize("prefix", [0, 1, 31, 32, 33, 1000, 5700, 23000, 91000, 262144])
def test_b1_h8_d4_prefix_lengths(prefix):
    inp = make_inputs([prefix], [4], 8, device="cuda", seed=fresh_seed())
    check(inp, workspace(inp))


@pytest.mark.parametrize("heads", [8, 16, 32, 64, 128])
def test_all_head_counts(heads):
    inp = make_inputs([3000, 17], [4, 4], heads, device="cuda", seed=fresh_seed())
    check(inp, workspace(inp))


@pytest.mark.parametrize("draft", [1, 2, 3, 5, 8, 16])
def test_draft_lengths(draft):
    inp = make_inputs([2000, 0, 77], [draft] * 3, 8, device="cuda", seed=fresh_seed())
    check(inp, workspace(inp))


@pytest.mark.parametrize("heads,draft", [(128, 16), (64, 4), (16, 16)])
def test_many_rows_per_request(heads, draft):
    inp = make_inputs([4100, 33, 900], [draft] * 3, heads, device="cuda", seed=fresh_seed())
    check(inp, workspace(inp))


def test_batch_256_mixed_lengths():
    rng = random.Random(fresh_seed())
    prefix = [rng.choice([0, 1, 7, 100, 513, 2048, 4000]) for _ in range(256)]
    inp = make_inputs(prefix, [4] * 256, 8, device="cuda", seed=fresh_seed())
    check(inp, workspace(inp))


def test_mixed_short_and_long_requests():
    prefix = [0, 5, 91000, 17, 0, 2048, 33, 262144]
    inp = make_inputs(prefix, [4] * 8, 8, device="cuda", seed=fresh_seed())
    check(inp, workspace(inp))


def test_uneven_draft_lengths_in_one_batch():
    inp = make_inputs([100, 5000, 0, 64], [1, 16, 3, 7], 16, device="cuda", seed=fresh_seed())
    check(inp, workspace(inp))


@pytest.mark.parametrize(
    "prefix,draft,heads,num_ctas",
    [
        ([5700], [1], 8, None),  # 8 of a tile's 32 rows
        ([5700], [3], 8, None),  # 24
        ([23000], [1], 16, None),  # 16
        ([5700], [5], 8, 7),  # a full tile and one of 8 rows; CTAs spanning both (two pieces)
        ([3000, 40, 9000], [1, 2, 3], 8, 5),  # later pieces' Q tiles, copied by the load warps
    ],
)
def test_q_tile_rows_past_the_request_are_never_read(prefix, draft, heads, num_ctas):
    """A piece's Q tile copies the request's rows only; the tile's other rows keep what the
    stage held. A call over an all-NaN KV pool first leaves NaN in the stages of the SMs (shared
    memory is not cleared between kernels), then calls whose tiles are partly filled must still
    match fp64 with every output and LSE written."""
    poison = make_inputs([9000], [4], 8, device="cuda", seed=fresh_seed())
    poison.k_buffer.fill_(float("nan"))
    run_kernel(poison, workspace(poison, num_ctas=num_ctas))
    inp = make_inputs(prefix, draft, heads, device="cuda", seed=fresh_seed())
    check(inp, workspace(inp, num_ctas=num_ctas))


# --- masks and index types ---------------------------------------------------------------------


@pytest.mark.parametrize("tree", [True, False, None])
def test_mask_kinds(tree):
    inp = make_inputs([700, 64], [8, 8], 8, device="cuda", seed=fresh_seed(), tree=tree)
    check(inp, workspace(inp))


@pytest.mark.parametrize(
    "index_dtype,mask_indptr_dtype,mask_dtype",
    [(torch.int64, torch.int64, torch.uint8), (torch.int32, torch.int32, torch.bool)],
)
def test_index_and_mask_dtypes(index_dtype, mask_indptr_dtype, mask_dtype):
    inp = make_inputs(
        [1234, 10],
        [4, 4],
        8,
        device="cuda",
        seed=fresh_seed(),
        index_dtype=index_dtype,
        mask_indptr_dtype=mask_indptr_dtype,
        mask_dtype=mask_dtype,
    )
    check(inp, workspace(inp))


def test_without_lse_output():
    inp = make_inputs([3000], [4], 8, device="cuda", seed=fresh_seed())
    check(inp, workspace(inp), lse=False)


# --- scheduler corner cases: few CTAs, many segments per CTA, many-way splits --------------------


@pytest.mark.parametrize(
    "num_ctas,min_blocks", [(1, 1), (3, 1), (7, 2), (132, 1), (500, 1), (1023, 1)]
)
def test_scheduler_grids(num_ctas, min_blocks):
    prefix = [0, 5, 9000, 17, 0, 2048, 33, 300]
    inp = make_inputs(prefix, [4, 1, 16, 4, 2, 4, 8, 4], 16, device="cuda", seed=fresh_seed())
    check(inp, workspace(inp, num_ctas=num_ctas, min_blocks=min_blocks))


def variant_index(name: str) -> int:
    """A named kernel variant as a _C.VARIANTS index: "default" (0, the launcher's choice),
    "small" (sm_120's 2-stage variant) or "large" (the H200's 3-stage one)."""
    from kdtree_mla import _C

    return {"default": 0, "small": _C.VARIANT_SMALL, "large": _C.VARIANT_LARGE}[name]


def refused_if_too_big(inp, ws) -> bool:
    """A forced variant the device's shared memory cannot fit is refused with an error, not
    run: asserts that and returns True; False when the workspace's variant fits (0 always)."""
    from kdtree_mla import _C, _diag

    optin = getattr(torch.cuda.get_device_properties(0), "shared_memory_per_block_optin", 232448)
    forced = _diag.force_variant(ws)
    if forced == 0 or _C.VARIANTS[forced][1] <= optin:
        return False
    with pytest.raises(RuntimeError, match="launch failed"):
        run_kernel(inp, ws)
    return True


def compiled_variants() -> list:
    """One parameter per entry of the extension's _C.VARIANTS (index 0, "none fits", aside):
    the two production variants in the default build, every pipeline shape and diagnostic in a
    KDTREE_DIAG=1 build. Read when the tests are collected; without the extension, one
    parameter whose test fails on a CUDA device (the extension must be built there)."""
    try:
        from kdtree_mla import _C
    except ImportError:
        return [pytest.param(None, id="no-extension")]
    params = []
    for index in range(1, len(_C.VARIANTS)):
        mode = _C.VARIANTS[index][3]
        marks = ()
        if mode != 0:  # loads only, math only, traced: they time the kernel, not its output
            marks = pytest.mark.skip(reason=f"variant {index}: a timing diagnostic (mode {mode})")
        params.append(pytest.param(index, id=f"v{index}", marks=marks))
    return params


@pytest.mark.parametrize("heads", [8, 16, 64])
@pytest.mark.parametrize("variant", compiled_variants())
def test_every_kernel_variant(variant, heads):
    """Every compiled variant that computes the output (_C.VARIANTS as built: the two
    production ones in the default build, the alternative pipeline shapes too in a
    KDTREE_DIAG=1 build; loads-only, math-only and traced variants are timing diagnostics and
    skip)."""
    if variant is None:
        api().load()  # raises ImportError with the reason
    inp = make_inputs(
        [0, 5, 9000, 17, 300, 40000], [4, 1, 16, 4, 8, 4], heads, device="cuda", seed=fresh_seed()
    )
    ws = workspace(inp, num_ctas=37, min_blocks=1)
    force_variant(ws, variant)
    if refused_if_too_big(inp, ws):
        return
    check(inp, ws)
    ws2 = workspace(inp)
    force_variant(ws2, variant)
    check(inp, ws2)


@pytest.mark.parametrize("variant", ["default", "small"])
@pytest.mark.parametrize("prefix", [1000, 5700, 23000, 91000])
def test_merge_tickets(prefix, variant):
    """A call's only cut segment, in 64 parts or more (5.7k and longer on 132 SMs; 1000 stays
    below), is merged in slices taken by its first CTAs whose last block lands (traits.h
    kTicketMinParts; the H200's default variant; sm_120's, "small", keeps one slice a part).
    Correct, the same bits on every call whatever that order, and the ticket word back to 0
    after each call."""
    inp = make_inputs([prefix], [4], 8, device="cuda", seed=fresh_seed())
    ws = workspace(inp)
    force_variant(ws, variant_index(variant))
    if refused_if_too_big(inp, ws):
        return
    check(inp, ws)
    assert_merge_state(ws, calls=1)
    first, _ = run_kernel(inp, ws)
    for calls in range(3, 8):
        again, _ = run_kernel(inp, ws)
        torch.cuda.synchronize()
        assert torch.equal(again, first), "the merge's result depends on the publish order"
        assert_merge_state(ws, calls=calls)


@pytest.mark.parametrize("heads", [8, 64])
@pytest.mark.parametrize("variant", ["default", "small", "large"])
def test_rising_logits_rescale_the_output(variant, heads):
    """Logits spread wide enough (q x 6: std ~15 in log2 units) that rows' running maxima are
    raised, and their outputs rescaled, in blocks after a piece's first (every ~7-block piece of
    the 23k request has such raises, ~20 rows each, by a CPU count of the same inputs), not only
    at the start, which is all random inputs at scale 1 reach."""
    inp = make_inputs(
        [23000, 700, 5000], [4, 3, 4], heads, device="cuda", seed=fresh_seed(), q_scale=6.0
    )
    ws = workspace(inp)
    force_variant(ws, variant_index(variant))
    if not refused_if_too_big(inp, ws):
        check(inp, ws)


def test_output_view_rows_not_16_byte_aligned():
    """An o_extend view whose rows are only 4-byte aligned (the kernel's 16-byte stores cannot
    be used): written through the direct path, with the same result."""
    inp = make_inputs([300, 5000, 0], [4, 3, 2], 16, device="cuda", seed=fresh_seed())
    t, h = inp.num_tokens, inp.num_heads
    buf = torch.full((t, h, 514), float("nan"), dtype=torch.bfloat16, device="cuda")
    o = buf[:, :, 2:]  # data 4 bytes past a 16-byte boundary, strides 514 * h and 514
    run_kernel(inp, workspace(inp), lse=False, out=o)
    torch.cuda.synchronize()
    o_ref, _ = reference(inp)
    assert not torch.isnan(o).any()
    assert torch.isnan(buf[:, :, :2]).all(), "wrote outside the view"
    assert_within_torch_error(o, o_ref, inp.torch_output())


def test_workspace_larger_than_call():
    inp = make_inputs([500, 600], [4, 4], 8, device="cuda", seed=fresh_seed())
    check(inp, workspace(inp, max_batch=64))


# --- the fused merge and the two-kernel path ------------------------------------------------


def sm_count() -> int:
    return torch.cuda.get_device_properties(0).multi_processor_count


def assert_merge_state(ws, calls: int) -> None:
    """After `calls` fused calls on a fresh workspace: every CTA of every call counted as ended
    (num_ctas a call), every partial slot's flag from one of those calls (0..calls), and the
    last call's flags among them."""
    sync = ws.sync.cpu()
    assert int(sync[0]) == calls * ws.num_ctas, f"{int(sync[0])} CTA ends after {calls} calls"
    flags = sync[1 : 1 + 2 * ws.num_ctas]
    assert int(flags.min()) >= 0 and int(flags.max()) <= calls
    assert int(sync[1 + 2 * ws.num_ctas]) == 0, "the merge-ticket word is 0 between calls"


@pytest.mark.parametrize(
    "prefix,draft,heads,num_ctas",
    [
        ([5700], [4], 8, None),  # ~90 parts a segment: warps share a task
        ([91000], [4], 8, None),  # ~130 parts
        ([23000], [4], 64, None),  # 8 segments of ~16 parts
        ([0, 5, 9000, 17, 300, 40000], [4, 1, 16, 4, 8, 4], 16, None),
        ([91000] * 8, [4] * 8, 8, None),
        ([5700] * 32, [4] * 32, 8, None),  # ~4 parts: 8 tasks a warp a round
        ([20000], [3], 8, 50),  # <= 50 parts, 24 rows
        ([20000], [5], 16, 30),  # <= 30 parts, 80 rows (3 M-tiles)
    ],
)
def test_fused_merge_and_combine_kernel_agree(prefix, draft, heads, num_ctas):
    """The default grid (one CTA per SM) merges cut segments inside the main kernel; the same
    call on a split_combine workspace uses the combine kernel. Both match the reference, agree with each
    other, and the fused calls leave the merge's handshake ready for the next call."""
    inp = make_inputs(prefix, draft, heads, device="cuda", seed=fresh_seed())
    ws = workspace(inp, num_ctas=num_ctas)
    assert ws.fused, "a grid of one CTA per SM merges in the main kernel"
    check(inp, ws)
    o_fused, lse_fused = run_kernel(inp, ws)
    torch.cuda.synchronize()
    assert_merge_state(ws, calls=2)
    split = workspace(inp, num_ctas=num_ctas, split_combine=True)
    assert split.split_combine and not split.fused
    check(inp, split)
    o_split, lse_split = run_kernel(inp, split)
    torch.cuda.synchronize()
    assert rel_err(o_fused, o_split.double()) < 2e-3
    assert float((lse_fused - lse_split).abs().max()) < 1e-3
    assert_merge_state(split, calls=0)  # the combine kernel leaves the handshake alone


def test_fused_merge_only_where_the_grid_fits_one_cta_per_sm():
    inp = make_inputs([9000, 40], [4, 4], 8, device="cuda", seed=fresh_seed())
    assert workspace(inp, num_ctas=sm_count()).fused
    assert workspace(inp, num_ctas=3).fused
    wide = workspace(inp, num_ctas=sm_count() + 1)
    assert not wide.fused
    check(inp, wide)


def test_fused_merge_back_to_back_calls():
    """Many calls on one workspace and stream, lengths changing between them: every call's
    merge waits only for its own partials (flags of earlier calls hold earlier epochs)."""
    ws = None
    for i, prefix in enumerate([[91000], [5700], [1], [23000], [262144], [0], [40000]]):
        inp = make_inputs(prefix, [4], 8, device="cuda", seed=fresh_seed())
        ws = ws or workspace(inp)
        outs = [run_kernel(inp, ws)[0] for _ in range(3)]
        torch.cuda.synchronize()
        o_ref, _ = reference(inp)
        o_torch = inp.torch_output()
        for o in outs:
            assert_within_torch_error(o, o_ref, o_torch, f"call set {i}: ")
        assert_merge_state(ws, calls=3 * (i + 1))


PLAN_MAGIC = 0x6B64706C


def plan_kept(ws, cta: int = 0) -> bool:
    """CTA `cta` holds a schedule plan (csrc/verify_common.cuh: the key's magic word)."""
    word = int(ws.sync[2 + 2 * ws.num_ctas + cta * api().PLAN_WORDS].item())
    return (word >> 32) & 0xFFFFFFFF == PLAN_MAGIC


@pytest.mark.parametrize("variant", ["default", "small"])
def test_schedule_plans_follow_every_key_field(variant):
    """A fused B = 1 call takes the schedule its CTAs kept from the call before only where the
    request and the launch values are the same: new pages with the same lengths take it (the
    pool indices are read fresh every call); another prefix or draft length, no custom mask or
    another min_blocks_per_cta work it out again. Every call matches the reference, and the
    same call twice is bit-identical."""
    steps = [  # prefix, draft, tree, min_blocks_per_cta
        (5700, 4, True, 1),  # a new workspace: no plan yet
        (5700, 4, True, 1),  # new pages and values, same lengths: the plan
        (5701, 4, True, 1),  # one prefix token more
        (5701, 3, True, 1),  # one draft token less
        (5701, 3, None, 1),  # no custom mask
        (5701, 3, None, 4),  # at least 4 blocks a CTA
        (91000, 4, True, 1),
        (5700, 4, True, 1),  # back to the first
    ]
    ws = None
    for prefix, draft, tree, min_blocks in steps:
        inp = make_inputs([prefix], [draft], 8, device="cuda", seed=fresh_seed(), tree=tree)
        if ws is None:
            ws = api().VerifyWorkspace(max_batch=1, max_tokens=4, num_heads=8, device="cuda")
            force_variant(ws, variant_index(variant))
            assert ws.fused and not plan_kept(ws)
        ws.min_blocks_per_cta = min_blocks
        check(inp, ws)
        assert plan_kept(ws), "a fused B = 1 call keeps its plan"
        o1, l1 = run_kernel(inp, ws)
        o2, l2 = run_kernel(inp, ws)
        torch.cuda.synchronize()
        assert torch.equal(o1, o2) and torch.equal(l1, l2), (prefix, draft, tree, min_blocks)
    assert_merge_state(ws, calls=3 * len(steps))


@pytest.mark.parametrize("heads,draft", [(16, 4), (64, 4), (128, 1)])
def test_schedule_plans_with_several_m_tiles(heads, draft):
    """B = 1 with more rows than one M-tile: a CTA's range can start inside a later M-tile's
    segment, and the plan keeps where (the walk's start)."""
    ws = None
    for prefix in (23000, 23000, 4000, 4000):
        inp = make_inputs([prefix], [draft], heads, device="cuda", seed=fresh_seed())
        ws = ws or workspace(inp)
        check(inp, ws)


def test_no_plan_for_batches_or_the_combine_kernel():
    """Plans are kept by fused B = 1 calls only."""
    inp = make_inputs([5700, 300], [4, 4], 8, device="cuda", seed=fresh_seed())
    ws = workspace(inp)
    check(inp, ws)
    assert not plan_kept(ws)
    one = make_inputs([5700], [4], 8, device="cuda", seed=fresh_seed())
    ws = workspace(one, split_combine=True)
    check(one, ws)
    assert not plan_kept(ws)


@pytest.mark.parametrize("calls_before", [2**32 // 132 + 7, 2**40 + 3, 2**55 + 1])
@pytest.mark.parametrize("num_ctas", [None, 37])
def test_fused_merge_after_many_calls(calls_before, num_ctas):
    """A workspace that has served `calls_before` fused calls (its count of ended CTAs past
    2^32, where a 64-bit division used to take over, up to 2^55 calls): each call's number is
    still exact (verify_common.cuh call_number), so its merge waits for its own flags, the
    output is right and the count and flags advance by one call."""
    inp = make_inputs([5700, 23000], [4, 3], 8, device="cuda", seed=fresh_seed())
    ws = workspace(inp, num_ctas=num_ctas)
    assert ws.fused
    n = ws.num_ctas
    ws.sync[0] = calls_before * n  # (int64: calls_before * n < 2^63 for these values)
    for k in range(1, 3):
        check(inp, ws)
        sync = ws.sync.cpu()
        assert int(sync[0]) == (calls_before + k) * n
        flags = sync[1 : 1 + 2 * n]
        assert int(flags.max()) == calls_before + k, "the call's partials carry its number + 1"
        assert int(sync[1 + 2 * n]) == 0


# --- CUDA graphs -----------------------------------------------------------------------------


def test_graph_capture_replay_with_new_indices_lengths_and_masks():
    """Capture once, then change kv_indices, prefix lengths, draft split and masks in place
    (same T, same buffers) and replay: must match eager and the fp64 reference."""
    from kdtree_mla_testing.ref import (
        build_custom_mask,
        random_tree_parents,
        tree_mask_from_parents,
    )

    H, T = 8, 16
    pool = 200_000
    first = make_inputs(
        [1000, 50000, 3, 0],
        [4, 4, 4, 4],
        H,
        device="cuda",
        seed=fresh_seed(),
        spare_slots=pool - 51003,
    )
    ws = workspace(first)
    max_kv = pool
    kv_indices = torch.zeros(max_kv, dtype=torch.int32, device="cuda")
    kv_indices[: first.kv_indices.numel()] = first.kv_indices
    mask_cap = T * (max_kv + 16)
    custom_mask = torch.zeros(min(mask_cap, 4_000_000), dtype=torch.uint8, device="cuda")
    custom_mask[: first.custom_mask.numel()] = first.custom_mask
    qo, kv, mind = first.qo_indptr.clone(), first.kv_indptr.clone(), first.mask_indptr.clone()
    o = torch.empty(T, H, 512, dtype=torch.bfloat16, device="cuda")
    lse = torch.empty(T, H, dtype=torch.float32, device="cuda")

    def call():
        api().extend_attention_fwd(
            first.q,
            first.k_extend,
            first.v_extend,
            o,
            first.k_buffer,
            first.v_buffer,
            qo,
            kv,
            kv_indices,
            custom_mask,
            True,
            mind,
            16,
            first.sm_scale,
            workspace=ws,
            lse_extend=lse,
        )

    assert ws.fused
    call()  # warm-up outside capture (sets the smem attribute once)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        call()

    gen = torch.Generator().manual_seed(fresh_seed())
    for it, (prefix, draft) in enumerate(
        (
            [[1000, 50000, 3, 0], [4, 4, 4, 4]],
            [[120000, 0, 7, 2500], [2, 9, 1, 4]],
            [[0, 0, 0, 0], [4, 4, 4, 4]],
            [[33, 199000 - 33, 1, 0], [16, 0, 0, 0]],
        )
    ):
        assert sum(draft) == T and sum(prefix) <= pool
        perm = torch.randperm(pool, generator=gen)[: sum(prefix)].to(torch.int32)
        trees = [tree_mask_from_parents(random_tree_parents(d, gen)) for d in draft]
        mask, mask_ptr = build_custom_mask(trees, prefix)
        assert mask.numel() <= custom_mask.numel()
        qo.copy_(torch.tensor([0, *itertools.accumulate(draft)], dtype=qo.dtype))
        kv.copy_(torch.tensor([0, *itertools.accumulate(prefix)], dtype=kv.dtype))
        mind.copy_(mask_ptr)
        kv_indices.zero_()
        kv_indices[: perm.numel()] = perm.cuda()
        custom_mask.zero_()
        custom_mask[: mask.numel()] = mask.cuda()
        # Poison everything the replay must write, poison unused pool rows afresh.
        o.fill_(float("nan"))
        lse.fill_(float("nan"))
        k_buf = first.k_buffer
        unused = torch.ones(pool, dtype=torch.bool)
        unused[perm.long()] = False
        k_buf[unused.nonzero().flatten().cuda()] = float("nan")
        used_rows = perm.long().cuda()
        k_buf[used_rows] = torch.randn(used_rows.numel(), 1, 576, device="cuda").to(torch.bfloat16)
        poison_partials(ws)
        g.replay()
        torch.cuda.synchronize()
        o_graph, lse_graph = o.clone(), lse.clone()
        o.fill_(float("nan"))
        poison_partials(ws)
        call()
        torch.cuda.synchronize()
        assert torch.equal(o_graph, o), "graph replay differs from eager"
        assert torch.equal(lse_graph, lse)
        args = (first.q, first.k_extend, first.v_extend, k_buf, first.v_buffer, qo, kv)
        args += (kv_indices, custom_mask, mind, first.sm_scale)
        o_ref, lse_ref = verify_attention_ref(*args)
        assert not torch.isnan(o_graph).any()
        o_torch = verify_attention_torch(*args)
        assert_within_torch_error(o_graph, o_ref, o_torch, f"replay {prefix}/{draft}: ")
        assert_merge_state(ws, calls=1 + 2 * (it + 1))  # warm-up, then a replay and a call each


# --- argument checking -----------------------------------------------------------------------


def test_bad_arguments_raise_with_a_message():
    inp = make_inputs([100], [4], 8, device="cuda", seed=fresh_seed())
    ws = workspace(inp)
    o = torch.empty(4, 8, 512, dtype=torch.bfloat16, device="cuda")
    base = dict(
        q_extend=inp.q,
        k_extend=inp.k_extend,
        v_extend=inp.v_extend,
        o_extend=o,
        k_buffer=inp.k_buffer,
        v_buffer=inp.v_buffer,
        qo_indptr=inp.qo_indptr,
        kv_indptr=inp.kv_indptr,
        kv_indices=inp.kv_indices,
        custom_mask=inp.custom_mask,
        is_causal=True,
        mask_indptr=inp.mask_indptr,
        max_len_extend=4,
        sm_scale=0.1,
    )
    f = api().extend_attention_fwd
    bf16 = dict(dtype=torch.bfloat16, device="cuda")
    k5 = torch.zeros(5, 1, 576, **bf16)
    bad = [
        (dict(q_extend=inp.q.float()), TypeError, "q: must be bfloat16"),
        (dict(q_extend=inp.q[:, :, :512]), ValueError, "q: expected shape"),
        (dict(o_extend=o[:3]), ValueError, "o_extend: expected shape"),
        (dict(k_buffer=inp.k_buffer.cpu()), ValueError, "k_buffer: must be a CUDA tensor"),
        (dict(v_buffer=inp.k_buffer[..., :512].clone()), ValueError, "v_buffer: must be the view"),
        (dict(kv_indices=inp.kv_indices.float()), TypeError, "kv_indices: must be int32 or int64"),
        (dict(qo_indptr=inp.qo_indptr[:1]), ValueError, "qo_indptr"),
        (dict(kv_indptr=inp.kv_indptr[:1]), ValueError, "kv_indptr: expected 2 elements"),
        (
            dict(custom_mask=inp.custom_mask.to(torch.int32)),
            TypeError,
            "custom_mask: must be uint8",
        ),
        (dict(mask_indptr=None), ValueError, "mask_indptr: required"),
        (dict(logit_cap=30.0), ValueError, "logit_cap"),
        # Against the workspace's declared shape (num_heads=8, max_tokens=4).
        (
            dict(
                q_extend=torch.zeros(4, 16, 576, **bf16), o_extend=torch.empty(4, 16, 512, **bf16)
            ),
            ValueError,
            "declared for num_heads=8",
        ),
        (
            dict(
                q_extend=torch.zeros(5, 8, 576, **bf16),
                k_extend=k5,
                v_extend=k5[..., :512],
                o_extend=torch.empty(5, 8, 512, **bf16),
            ),
            ValueError,
            "exceeds the workspace's max_tokens=4",
        ),
        # Not tensors at all (the entry point's own checks).
        (dict(kv_indices=inp.kv_indices.tolist()), TypeError, "kv_indices: must be a torch.Tensor"),
        (
            dict(custom_mask=inp.custom_mask.cpu().numpy()),
            TypeError,
            "custom_mask: must be a torch.Tensor or None",
        ),
        (dict(sm_scale="0.1"), TypeError, "sm_scale: must be a float"),
        (dict(sm_scale=float("nan")), ValueError, "sm_scale: must be a positive finite float"),
        (dict(sm_scale=-0.1), ValueError, "sm_scale: must be a positive finite float"),
    ]
    for change, exc, msg in bad:
        print(f"bad-argument case: {msg}", flush=True)  # locates a crash in the log
        with pytest.raises(exc, match=msg):
            f(**{**base, **change}, workspace=ws)
    # The extension's entry point itself: argument count and the workspace object.
    ext = api().load()
    args = [inp.q, inp.k_extend, inp.v_extend, o, inp.k_buffer, inp.v_buffer, inp.qo_indptr]
    args += [inp.kv_indptr, inp.kv_indices, inp.custom_mask, inp.mask_indptr, 0.1, None]
    with pytest.raises(TypeError, match="takes 14 or 17 positional arguments \\(13 given\\)"):
        ext.verify_fwd(*args)
    with pytest.raises(TypeError, match="workspace: must be the extension's Workspace"):
        ext.verify_fwd(*args, ws)
    # The process survives and the kernel still works afterwards.
    check(inp, ws)
