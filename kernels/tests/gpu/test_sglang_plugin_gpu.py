"""GPU tests of the plugin path (``--attention-backend kdtree``) on a plugin release's real code.

SGLang's ``TritonAttnBackend``, its Triton kernels and its plugin framework
(``sglang/srt/plugins/``) come unchanged from the wheel named by ``$KDTREE_SGLANG_PLUGIN_WHEEL``
(default: the newest plugin release in ``.whl/``, 0.5.23 when downloaded; 0.5.11 has the
capture/replay graph hooks, 0.5.13 on the out_graph/in_graph ones, 0.5.14 on read SGLang's
runtime context and KV-index translator); what they import is stubbed as
:mod:`kdtree_mla_testing.standalone` and :mod:`kdtree_mla_testing.standalone_runtime` document. The kernel package's entry point is discovered
the way SGLang discovers it: a ``kdtree_mla`` dist-info with its ``entry_points.txt`` on the
path, then the wheel's own ``load_plugins()``; the backend comes from the registry entry it
made. Each case checks the kernel against SGLang's Triton path and the fp64 reference, eager
and in a CUDA graph replayed with new lengths, request rows, slots and masks.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="needs torch (pip install torch)")

from kdtree_mla_testing.accuracy import assert_within_torch_error  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.filterwarnings("ignore:tl.where with a non-boolean condition:UserWarning"),
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

REPO = Path(__file__).resolve().parents[3]
KERNELS = REPO / "kernels"
ENTRY_POINTS = "[sglang.srt.plugins]\nkdtree = kdtree_mla.sglang.plugin:register\n"


def _wheel() -> Path | None:
    """``$KDTREE_SGLANG_PLUGIN_WHEEL``, else the newest plugin release's wheel in ``.whl/``."""
    env = os.environ.get("KDTREE_SGLANG_PLUGIN_WHEEL")
    if env:
        return Path(env)
    from kdtree_mla.sglang.versions import version_key

    plugin_releases = [
        (key, path)
        for path in (REPO / ".whl").glob("sglang-*.whl")
        if (key := version_key(path.name.split("-")[1])) is not None and key >= (0, 5, 11)
    ]
    return max(plugin_releases)[1] if plugin_releases else None


def _helpers() -> Any:
    """The case builders and reference of the startup-hook GPU tests (one harness for both)."""
    spec = importlib.util.spec_from_file_location(
        "kdtree_sglang_gpu_helpers", Path(__file__).with_name("test_sglang_gpu.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def plugin_sglang(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The wheel's SGLang with the kernel's plugin loaded; yields (registry, helpers, version)."""
    wheel = _wheel()
    if wheel is None or not wheel.is_file():
        pytest.fail("no plugin-release wheel: pip download --no-deps sglang==0.5.23 -d .whl")
    from kdtree_mla.sglang import announce
    from kdtree_mla_testing import standalone

    tree = standalone.build_tree(wheel, tmp_path_factory.mktemp("sglang_plugin"))
    dist = tree / "kdtree_mla-0.1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: kdtree-mla\nVersion: 0.1.0\n")
    (dist / "entry_points.txt").write_text(ENTRY_POINTS)
    # Another release's SGLang may be loaded in this process (the startup-hook tests): swap it
    # out for this module, put it back after.
    saved = {n: m for n, m in sys.modules.items() if n.split(".")[0] in ("sglang", "sgl_kernel")}
    for name in saved:
        del sys.modules[name]
    sys.path.insert(0, str(tree))
    announce.reset_for_tests()
    try:
        from sglang.srt.plugins import load_plugins

        load_plugins()
        from sglang.srt.layers.attention import attention_registry

        helpers = _helpers()
        yield attention_registry, helpers, wheel.name.split("-")[1]
    finally:
        sys.path.remove(str(tree))
        for name in [n for n in sys.modules if n.split(".")[0] in ("sglang", "sgl_kernel")]:
            del sys.modules[name]
        sys.modules.update(saved)
        announce.reset_for_tests()


def make_backend(plugin_sglang: Any, *, heads: int, draft: int, pool_size: int,
                 context_len: int, graph_bs: int | None = None) -> Any:  # fmt: skip
    from kdtree_mla.sglang import patch
    from kdtree_mla_testing import standalone

    registry, _helpers_mod, _version = plugin_sglang
    pool = standalone.MLAPool(1, pool_size)
    runner = standalone.make_model_runner(
        pool=pool, num_heads=heads, num_draft_tokens=draft, max_requests=16,
        context_len=context_len, cuda_graph_max_bs=graph_bs,
    )  # fmt: skip
    _as_selected(runner)
    backend = registry.ATTENTION_BACKENDS["kdtree"](runner)
    router = vars(backend).get(patch.ROUTER)
    assert router is not None, "the kdtree backend declined; see the kdtree-verify line"
    return backend, runner, pool, router


def _as_selected(runner: Any) -> None:
    """The runner as SGLang builds it for ``--attention-backend kdtree``."""
    runner.server_args.attention_backend = "kdtree"
    runner.prefill_attention_backend_str = runner.decode_attention_backend_str = "kdtree"


def test_load_plugins_registers_the_backend_and_its_choice(plugin_sglang: Any) -> None:
    from kdtree_mla.sglang.plugin import choices_hook
    from sglang.srt.layers.attention.triton_backend import TritonAttnBackend

    registry, _h, version = plugin_sglang
    assert "kdtree" in registry.ATTENTION_BACKENDS
    choices, _add = choices_hook()  # server_args up to 0.5.19, arg_groups.choices from 0.5.20
    assert "kdtree" in choices.ATTENTION_BACKEND_CHOICES
    backend, *_ = make_backend(plugin_sglang, heads=8, draft=4, pool_size=256, context_len=128)
    assert isinstance(backend, TritonAttnBackend) and type(backend) is not TritonAttnBackend
    from kdtree_mla.sglang import announce

    active = [ln for ln in announce.printed() if "active" in ln]
    assert active and active[-1].endswith(f"sglang={version} path=plugin"), announce.printed()


CASES = [([5700], 4, 8), ([1, 17, 1000, 4096], 4, 8), ([300, 2000, 7, 5000], 8, 16),
         ([3000, 100], 16, 64), ([23000, 511, 2], 4, 8)]  # fmt: skip


@pytest.mark.parametrize(("prefix_lens", "draft", "heads"), CASES)
def test_kdtree_backend_matches_sglang_and_fp64(plugin_sglang: Any, prefix_lens: list[int],
                                               draft: int, heads: int) -> None:  # fmt: skip
    h = plugin_sglang[1]
    pool_size = sum(prefix_lens) + len(prefix_lens) * draft + 4096
    backend, runner, pool, router = make_backend(
        plugin_sglang, heads=heads, draft=draft, pool_size=pool_size,
        context_len=max(prefix_lens) + 64,
    )  # fmt: skip
    fb, q, k, v, ref_in = h.random_case(runner, pool, prefix_lens, draft, heads, h.fresh_seed())
    layer = h._layer(heads)
    backend.init_forward_metadata(fb)
    o_kernel = backend.forward_extend(q, k, v, layer, fb).view(-1, heads, 512)
    assert (router.kernel_calls, router.sglang_calls) == (1, 0)
    router.begin_step(False)
    o_sglang = backend.forward_extend(q, k, v, layer, fb).view(-1, heads, 512)
    torch.cuda.synchronize()
    o_ref = h.reference(pool, q, k, v, heads, ref_in)
    err_k, err_s = h.rel_err(o_kernel, o_ref), h.rel_err(o_sglang, o_ref)
    assert err_s < h.TOL, f"SGLang's own path is off ({err_s:.2e}): the harness is wrong"
    o_torch = h.torch_reference(pool, q, k, v, heads, ref_in)
    assert_within_torch_error(o_kernel, o_ref, o_torch, f"kdtree (SGLang {err_s:.2e}): ")
    assert err_k <= 2 * err_s + 2e-3, f"kdtree {err_k:.2e} vs SGLang {err_s:.2e}"


def _graph_metadata(backend: Any, fb: Any, bs: int, capture: bool) -> None:
    """The release's CUDA-graph metadata hook for a verify batch (before capture / replay)."""
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    if backend.kdtree_graph_hooks == "out_in_graph":
        backend.init_forward_metadata_out_graph(fb, capture)
        return
    if capture:
        backend.init_forward_metadata_capture_cuda_graph(
            bs, bs * fb.spec_info.draft_token_num, fb.req_pool_indices, fb.seq_lens, None,
            ForwardMode.TARGET_VERIFY, fb.spec_info,
        )  # fmt: skip
    else:
        backend.init_forward_metadata_replay_cuda_graph(
            bs, fb.req_pool_indices, fb.seq_lens, fb.seq_lens_sum, None,
            ForwardMode.TARGET_VERIFY, fb.spec_info, fb.seq_lens_cpu,
        )  # fmt: skip


@pytest.mark.parametrize("parents", ["tree", "chain"])
def test_cuda_graph_capture_then_replay_with_new_lengths_indices_and_masks(
    plugin_sglang: Any, parents: str
) -> None:
    h = plugin_sglang[1]
    heads, draft, bs, max_bs, ctx = 8, 4, 4, 8, 8192
    backend, runner, pool, router = make_backend(
        plugin_sglang, heads=heads, draft=draft, pool_size=bs * (ctx + draft) + 1024,
        context_len=ctx, graph_bs=max_bs,
    )  # fmt: skip
    backend.init_cuda_graph_state(max_bs, max_bs * draft)
    layer = h._layer(heads)

    def case(prefix_lens: list[int]) -> Any:
        out = h.random_case(runner, pool, prefix_lens, draft, heads, h.fresh_seed())
        if parents == "chain":  # rebuild the batch with a chain (each token's parent the last)
            from kdtree_mla_testing import standalone

            fb = out[0]
            slots = _slots_of(runner, fb, prefix_lens, draft)
            chain = [[-1, *range(draft - 1)] for _ in prefix_lens]
            fb2 = standalone.verify_batch(
                runner=runner, prefix_lens=prefix_lens, num_draft_tokens=draft, parents=chain,
                req_rows=fb.req_pool_indices.tolist(), slots=slots,
            )  # fmt: skip
            out[4]["custom_mask"] = fb2.spec_info.custom_mask
            out = (fb2, *out[1:])
        return out

    fb0, q0, k0, v0, _ = case([100, 2000, 5, 700])
    static = SimpleNamespace(
        req_pool_indices=fb0.req_pool_indices.clone(), seq_lens=fb0.seq_lens.clone(),
        q=q0.clone(), k=k0.clone(), v=v0.clone(), out_cache_loc=fb0.out_cache_loc.clone(),
    )  # fmt: skip
    fb_static = SimpleNamespace(**{**vars(fb0), **{n: getattr(static, n) for n in
                                   ("req_pool_indices", "seq_lens", "out_cache_loc")}})  # fmt: skip
    _graph_metadata(backend, fb_static, bs, capture=True)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        backend.forward_extend(static.q, static.k, static.v, layer, fb_static)  # warm-up
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        if backend.kdtree_graph_hooks == "out_in_graph":
            backend.init_forward_metadata_in_graph(fb_static)
        out = backend.forward_extend(static.q, static.k, static.v, layer, fb_static)
    assert router.kernel_calls == 2  # warm-up + capture, both through the kernel

    for prefix_lens in ([8000, 1, 333, 4444], [17, 6000, 2500, 64]):
        fb, q, k, v, ref_in = case(prefix_lens)
        for name in ("req_pool_indices", "seq_lens", "out_cache_loc"):
            getattr(static, name).copy_(getattr(fb, name))
        static.q.copy_(q)
        static.k.copy_(k)
        static.v.copy_(v)
        fb_replay = SimpleNamespace(**{**vars(fb), **{n: getattr(static, n) for n in
                                       ("req_pool_indices", "seq_lens", "out_cache_loc")}})  # fmt: skip
        _graph_metadata(backend, fb_replay, bs, capture=False)
        out.fill_(float("nan"))
        graph.replay()
        o_graph = out.view(-1, heads, 512).clone()
        backend.init_forward_metadata(fb)  # the same step, eager
        o_eager = backend.forward_extend(q, k, v, layer, fb).view(-1, heads, 512)
        torch.cuda.synchronize()
        o_ref = h.reference(pool, q, k, v, heads, ref_in)
        assert not torch.isnan(o_graph).any(), "replay left NaN"
        o_torch = h.torch_reference(pool, q, k, v, heads, ref_in)
        assert_within_torch_error(o_graph, o_ref, o_torch)
        assert h.rel_err(o_graph, o_eager.double()) < 1e-3, "replay differs from eager"


def _slots_of(runner: Any, fb: Any, prefix_lens: list[int], draft: int) -> list[Any]:
    rows = runner.req_to_token_pool.req_to_token
    return [
        rows[int(r), : p + draft].to(torch.int64)
        for r, p in zip(fb.req_pool_indices.tolist(), prefix_lens)
    ]


def test_a_verify_call_with_score_mod_raises(plugin_sglang: Any) -> None:
    from kdtree_mla.sglang.releases import UnsupportedCall

    backend, runner, pool, router = make_backend(
        plugin_sglang, heads=8, draft=4, pool_size=4096, context_len=2048
    )
    router.begin_step(True)
    h = plugin_sglang[1]
    fb, q, k, v, _ = h.random_case(runner, pool, [100], 4, 8, h.fresh_seed())
    args = (q.view(-1, 8, 576), k, v, torch.empty(4, 8, 512, device="cuda"),
            pool.get_key_buffer(0), pool.get_value_buffer(0), None, None, None,
            fb.spec_info.custom_mask, True, None, 4, 1.0, 1.0, 0.1)  # fmt: skip
    with pytest.raises(UnsupportedCall, match="score_mod"):
        backend.extend_attention_fwd(*args, score_mod=lambda s: s)


@pytest.mark.parametrize("fp8", ["float8_e4m3fn", "float8_e5m2"])
def test_fp8_kv_cache_where_the_release_reads_one(plugin_sglang: Any, fp8: str) -> None:
    """fp8 pool + per-layer scale: the kernel on releases whose Triton MLA reads fp8 (0.5.13
    on), a decline line on the others (0.5.11 stores MLA KV unscaled)."""
    from kdtree_mla.sglang import announce, patch
    from kdtree_mla.sglang import backend as kdtree_backend
    from kdtree_mla_testing import standalone
    from sglang.srt.layers.attention.triton_backend import TritonAttnBackend

    registry, h, version = plugin_sglang
    dtype, scale = getattr(torch, fp8), 0.37
    heads, draft, prefix_lens = 8, 4, [5700, 300, 23000]
    size = sum(prefix_lens) + len(prefix_lens) * draft + 4096
    pool = standalone.MLAPool(1, size, dtype=dtype)
    runner = standalone.make_model_runner(
        pool=pool, num_heads=heads, num_draft_tokens=draft, max_requests=16,
        context_len=max(prefix_lens) + 64,
    )  # fmt: skip
    _as_selected(runner)
    announce.reset_for_tests()
    backend = registry.ATTENTION_BACKENDS["kdtree"](runner)
    router = vars(backend).get(patch.ROUTER)
    if not kdtree_backend.reads_fp8_mla(TritonAttnBackend):
        assert router is None
        assert any("does not read a quantised KV cache" in ln for ln in announce.printed())
        return
    assert router is not None and router.fp8_kv
    bf16_pool = standalone.MLAPool(1, size)  # random_case fills it; the fp8 pool is its image
    fb, q, k, v, ref_in = h.random_case(
        runner, bf16_pool, prefix_lens, draft, heads, h.fresh_seed()
    )
    pool.buffers[0].copy_((bf16_pool.buffers[0].float() / scale).to(dtype))
    layer = standalone.make_layer(0, heads, h.SM_SCALE, kv_scale=scale)
    backend.init_forward_metadata(fb)
    o_kernel = backend.forward_extend(q, k, v, layer, fb).view(-1, heads, 512)
    assert (router.kernel_calls, router.sglang_calls) == (1, 0)
    router.begin_step(False)
    o_sglang = backend.forward_extend(q, k, v, layer, fb).view(-1, heads, 512)
    torch.cuda.synchronize()
    from kdtree_mla_testing.ref import verify_attention_ref, verify_attention_torch

    buf = pool.get_key_buffer(0)
    args = (
        q.view(-1, heads, 576), k, v, buf, buf[..., :512], ref_in["qo_indptr"],
        ref_in["kv_indptr"], ref_in["kv_indices"], ref_in["custom_mask"], ref_in["mask_indptr"],
        h.SM_SCALE,
    )  # fmt: skip
    o_ref, _ = verify_attention_ref(*args, k_descale=scale, v_descale=scale)
    o_torch = verify_attention_torch(*args, k_descale=scale, v_descale=scale)
    assert not torch.isnan(o_kernel).any()
    err_k, err_s = h.rel_err(o_kernel, o_ref), h.rel_err(o_sglang, o_ref)
    print(f"fp8 {fp8} scale {scale}: kdtree {err_k:.2e}, SGLang Triton {err_s:.2e} vs fp64")
    # SGLang's Triton kernel rounds q and P to the pool's fp8 type before its dots
    # (q.to(k.dtype), p.to(v.dtype)): a few percent off the exact result, more for e5m2. The
    # kernel widens the fp8 rows to bf16 (exact) and keeps q and P in bf16.
    assert err_s < 0.15, f"SGLang's own fp8 path is off ({err_s:.2e}): the harness is wrong"
    assert_within_torch_error(o_kernel, o_ref, o_torch, f"kdtree (SGLang {err_s:.2e}): ")
    assert err_k <= err_s + 2e-3, f"kdtree {err_k:.2e} vs SGLang {err_s:.2e}"
