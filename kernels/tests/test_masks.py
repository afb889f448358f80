"""Mask and index helpers: SGLang's custom-mask layout and tree masks (CPU only)."""

import pytest

torch = pytest.importorskip("torch", reason="needs torch (pip install torch)")

from kdtree_mla_testing.inputs import make_inputs  # noqa: E402
from kdtree_mla_testing.ref import (  # noqa: E402
    build_custom_mask,
    draft_visibility,
    random_tree_parents,
    tree_mask_from_parents,
)


def test_chain_tree_is_causal():
    assert torch.equal(
        tree_mask_from_parents([-1, 0, 1, 2]), torch.ones(4, 4, dtype=torch.bool).tril()
    )


def test_tree_mask_ancestors_and_self():
    #      0
    #    /   \
    #   1     2
    #   |    / \
    #   3   4   5
    m = tree_mask_from_parents([-1, 0, 0, 1, 2, 2])
    expect = {0: {0}, 1: {0, 1}, 2: {0, 2}, 3: {0, 1, 3}, 4: {0, 2, 4}, 5: {0, 2, 5}}
    for i, cols in expect.items():
        assert set(torch.nonzero(m[i]).flatten().tolist()) == cols


def test_parent_must_precede_child():
    with pytest.raises(ValueError, match="must precede"):
        tree_mask_from_parents([-1, 2, 0])


def test_random_tree_is_topological():
    gen = torch.Generator().manual_seed(0)
    for d in range(1, 17):
        parents = random_tree_parents(d, gen)
        assert parents[0] == -1
        assert all(0 <= p < i for i, p in enumerate(parents) if i)


def test_custom_mask_layout_matches_sglang_indexing():
    gen = torch.Generator().manual_seed(1)
    drafts, prefixes = [3, 1, 5], [4, 0, 2]
    trees = [tree_mask_from_parents(random_tree_parents(d, gen)) for d in drafts]
    mask, indptr = build_custom_mask(trees, prefixes)
    assert indptr.dtype == torch.int64
    assert indptr.tolist() == [0, 3 * 7, 3 * 7 + 1 * 1, 3 * 7 + 1 + 5 * 7]
    assert mask.numel() == indptr[-1]
    for b, (d, p) in enumerate(zip(drafts, prefixes)):
        for i in range(d):
            for col in range(p + d):
                bit = int(mask[int(indptr[b]) + i * (p + d) + col])
                assert bit == (1 if col < p else int(trees[b][i, col - p]))
        assert torch.equal(draft_visibility(mask, indptr, b, d, p), trees[b])


def test_visibility_without_mask_is_causal():
    assert torch.equal(
        draft_visibility(None, None, 0, 3, 10), torch.ones(3, 3, dtype=torch.bool).tril()
    )


def test_make_inputs_indices_are_a_permutation_of_distinct_rows():
    inp = make_inputs([100, 0, 37], [4, 2, 1], 8, seed=5)
    idx = inp.kv_indices.tolist()
    assert len(idx) == 137 == len(set(idx))
    assert inp.qo_indptr.tolist() == [0, 4, 6, 7]
    assert inp.kv_indptr.tolist() == [0, 100, 100, 137]
    assert inp.v_buffer.data_ptr() == inp.k_buffer.data_ptr()
    assert inp.kv_bytes() == (137 + 7) * 1152
