"""GPU tests of the SGLang integration on SGLang 0.5.10's real Triton attention backend (H200).

SGLang's ``TritonAttnBackend`` and Triton kernels come unchanged from its wheel
(``.whl/sglang-0.5.10-py3-none-any.whl`` at the repo root, or ``$KDTREE_SGLANG_WHEEL``); what
they import is stubbed as :mod:`kdtree_mla_testing.standalone` documents. The patch is applied the
way a server gets it: the startup hook is installed before SGLang's module is first imported.

Each case draws fresh random inputs (random trees, mixed prefix lengths, random slot
permutations, NaN in every unused KV-pool row) and judges both paths against the fp64
reference built from the test's own indices, not from SGLang's metadata.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="needs torch (pip install torch)")

from kdtree_mla_testing.accuracy import assert_within_torch_error  # noqa: E402
from kdtree_mla_testing.ref import verify_attention_ref, verify_attention_torch  # noqa: E402

# "cpu" (with TRITON_INTERPRET=1 and a stand-in kernel) is only for dry-running the harness.
DEV = os.environ.get("KDTREE_SGLANG_TEST_DEVICE", "cuda")
ON_GPU = DEV == "cuda"
pytestmark = [
    pytest.mark.gpu,
    # SGLang 0.5.10's extend kernel passes a uint8 mask to tl.where; Triton 3.6 deprecates that.
    pytest.mark.filterwarnings("ignore:tl.where with a non-boolean condition:UserWarning"),
    pytest.mark.skipif(ON_GPU and not torch.cuda.is_available(), reason="needs a CUDA device"),
]
needs_gpu = pytest.mark.skipif(not ON_GPU, reason="needs the real kernel on a GPU")

REPO = Path(__file__).resolve().parents[3]
KERNELS = REPO / "kernels"
WHEEL = Path(
    os.environ.get("KDTREE_SGLANG_WHEEL", REPO / ".whl" / "sglang-0.5.10-py3-none-any.whl")
)
TOL = 1e-2
SM_SCALE = 192**-0.5  # qk_head_dim 192 (128 nope + 64 rope), mscale 1 as in Kimi K2
_SEED = [5000]


def fresh_seed() -> int:
    _SEED[0] += 1
    return _SEED[0]


@pytest.fixture(scope="module")
def sglang_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not WHEEL.is_file():
        pytest.fail(
            f"SGLang wheel not found at {WHEEL}: pip download --no-deps sglang==0.5.10 -d .whl"
        )
    from kdtree_mla_testing import standalone

    return standalone.build_tree(WHEEL, tmp_path_factory.mktemp("sglang"))


@pytest.fixture(scope="module")
def tb(sglang_tree: Path) -> Any:
    """SGLang's triton_backend module, patched by the startup hook at its first import."""
    from kdtree_mla.sglang import announce
    from kdtree_mla.sglang.hook import install_hook

    announce.reset_for_tests()
    sys.path.insert(0, str(sglang_tree))
    install_hook()
    from kdtree_mla.sglang import patch
    from sglang.srt.layers.attention import triton_backend

    assert patch.is_patched(triton_backend.TritonAttnBackend)
    return triton_backend


def make_backend(tb: Any, *, heads: int, draft: int, pool_size: int, context_len: int,
                 max_requests: int = 16, graph_bs: int | None = None, layers: int = 1):  # fmt: skip
    from kdtree_mla.sglang import patch
    from kdtree_mla_testing import standalone

    pool = standalone.MLAPool(layers, pool_size, device=DEV)
    runner = standalone.make_model_runner(
        pool=pool,
        num_heads=heads,
        num_draft_tokens=draft,
        max_requests=max_requests,
        context_len=context_len,
        cuda_graph_max_bs=graph_bs,
        device=DEV,
    )
    backend = tb.TritonAttnBackend(runner)
    router = vars(backend).get(patch.ROUTER)
    assert router is not None, "the backend declined; see the kdtree-verify line on stderr"
    return backend, runner, pool, router


def random_case(runner: Any, pool: Any, prefix_lens: list[int], draft: int, heads: int,
                seed: int, max_requests: int = 16):  # fmt: skip
    """Fresh inputs for one verify step; returns (forward_batch, q, k, v, reference inputs)."""
    from kdtree_mla_testing import standalone

    rng = random.Random(seed)
    gen = torch.Generator(device=DEV).manual_seed(seed)
    b = len(prefix_lens)
    pool_size = pool.size
    need = sum(prefix_lens) + b * draft
    assert need <= pool_size
    perm = torch.randperm(pool_size, device=DEV, generator=gen)[:need]
    slots, start = [], 0
    for p in prefix_lens:
        slots.append(perm[start : start + p + draft])
        start += p + draft
    buf = pool.get_key_buffer(0)
    buf.fill_(float("nan"))
    prefix_rows = torch.cat([s[:p] for s, p in zip(slots, prefix_lens)])
    buf[prefix_rows] = torch.randn((prefix_rows.numel(), 1, 576), device=DEV, generator=gen).to(
        torch.bfloat16
    )
    parents = [[-1] + [rng.randrange(i) for i in range(1, draft)] for _ in range(b)]
    rows = rng.sample(range(max_requests), b)
    fb = standalone.verify_batch(
        runner=runner, prefix_lens=prefix_lens, num_draft_tokens=draft, parents=parents,
        req_rows=rows, slots=slots,
    )  # fmt: skip
    t = b * draft
    q = torch.randn((t, heads * 576), device=DEV, generator=gen).to(torch.bfloat16)
    k = torch.randn((t, 1, 576), device=DEV, generator=gen).to(torch.bfloat16)
    v = k[..., :512].clone()  # MLA: the value is the latent part of the key
    # Reference inputs from the test's own bookkeeping (independent of SGLang's metadata).
    kv_indptr = torch.tensor([0, *torch.tensor(prefix_lens).cumsum(0).tolist()], device=DEV)
    ref_in = dict(
        qo_indptr=torch.arange(0, (b + 1) * draft, draft, device=DEV),
        kv_indptr=kv_indptr,
        kv_indices=prefix_rows,
        custom_mask=fb.spec_info.custom_mask,
        mask_indptr=torch.tensor(
            [0, *torch.tensor([draft * (p + draft) for p in prefix_lens]).cumsum(0).tolist()],
            device=DEV,
        ),
    )
    return fb, q, k, v, ref_in


def _ref_args(pool: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int,
              ref_in: dict[str, Any]) -> tuple[Any, ...]:  # fmt: skip
    return (
        q.view(-1, heads, 576), k, v, pool.get_key_buffer(0), pool.get_value_buffer(0),
        ref_in["qo_indptr"], ref_in["kv_indptr"], ref_in["kv_indices"], ref_in["custom_mask"],
        ref_in["mask_indptr"], SM_SCALE,
    )  # fmt: skip


def reference(pool: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int,
              ref_in: dict[str, Any]) -> torch.Tensor:  # fmt: skip
    """The fp64 reference output of the case."""
    o, _ = verify_attention_ref(*_ref_args(pool, q, k, v, heads, ref_in))
    return o


def torch_reference(pool: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int,
                    ref_in: dict[str, Any]) -> torch.Tensor:  # fmt: skip
    """Plain PyTorch's output of the case at bf16: the yardstick of the kernel's error
    (kdtree_mla_testing.accuracy)."""
    return verify_attention_torch(*_ref_args(pool, q, k, v, heads, ref_in))


def rel_err(x: torch.Tensor, ref: torch.Tensor) -> float:
    return float((x.double() - ref).norm() / ref.norm().clamp_min(1e-30))


CASES = [
    # (prefix lengths, draft tokens, heads)
    ([5700], 4, 8),
    ([1, 17, 1000, 4096], 4, 8),
    ([300, 2000, 7, 5000, 64, 1, 1234, 999], 8, 16),
    ([3000, 100], 16, 64),
    ([23000, 511, 2], 4, 8),
]


@pytest.mark.parametrize(("prefix_lens", "draft", "heads"), CASES)
def test_patched_verify_matches_sglang_and_fp64(tb: Any, prefix_lens: list[int], draft: int,
                                               heads: int) -> None:  # fmt: skip
    pool_size = sum(prefix_lens) + len(prefix_lens) * draft + 4096
    backend, runner, pool, router = make_backend(
        tb, heads=heads, draft=draft, pool_size=pool_size, context_len=max(prefix_lens) + 64
    )
    fb, q, k, v, ref_in = random_case(runner, pool, prefix_lens, draft, heads, fresh_seed())
    layer = _layer(heads)
    backend.init_forward_metadata(fb)
    o_kernel = backend.forward_extend(q, k, v, layer, fb).view(-1, heads, 512)
    assert (router.kernel_calls, router.sglang_calls) == (1, 0)
    router.begin_step(False)  # the same step through SGLang's own Triton kernel
    o_sglang = backend.forward_extend(q, k, v, layer, fb).view(-1, heads, 512)
    assert (router.kernel_calls, router.sglang_calls) == (1, 1)
    _sync()
    o_ref = reference(pool, q, k, v, heads, ref_in)
    assert not torch.isnan(o_kernel).any(), "patched path left NaN (unwritten or read a bad slot)"
    err_k, err_s = rel_err(o_kernel, o_ref), rel_err(o_sglang, o_ref)
    assert err_s < TOL, f"SGLang's own path is off ({err_s:.2e}): the harness is wrong"
    o_torch = torch_reference(pool, q, k, v, heads, ref_in)
    assert_within_torch_error(o_kernel, o_ref, o_torch, f"patched (SGLang {err_s:.2e}): ")
    # bf16 output rounding alone is ~2e-3; the patched path may not be much worse than SGLang's.
    assert err_k <= 2 * err_s + 2e-3, f"patched {err_k:.2e} vs SGLang {err_s:.2e}"
    assert rel_err(o_kernel, o_sglang.double()) < TOL


def test_prefill_steps_stay_on_sglang(tb: Any) -> None:
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

    heads, draft = 8, 4
    backend, runner, pool, router = make_backend(
        tb, heads=heads, draft=draft, pool_size=4096, context_len=2048
    )
    prefix, ext = [100, 7], [30, 5]
    runner.req_to_token_pool.req_to_token[0, :130] = torch.arange(130, dtype=torch.int32)
    runner.req_to_token_pool.req_to_token[1, :12] = torch.arange(200, 212, dtype=torch.int32)
    pool.get_key_buffer(0)[:300] = torch.randn((300, 1, 576), device=DEV).to(torch.bfloat16)
    dev = DEV
    fb = ForwardBatch(
        forward_mode=ForwardMode.EXTEND,
        batch_size=2,
        req_pool_indices=torch.tensor([0, 1], device=dev),
        seq_lens=torch.tensor([130, 12], device=dev),
        extend_prefix_lens=torch.tensor(prefix, device=dev),
        extend_prefix_lens_cpu=prefix,
        extend_seq_lens=torch.tensor(ext, device=dev),
        extend_seq_lens_cpu=ext,
        out_cache_loc=torch.cat([torch.arange(100, 130), torch.arange(207, 212)]).to(dev),
        spec_info=None,
        token_to_kv_pool=pool,
    )
    q = torch.randn((35, heads * 576), device=dev).to(torch.bfloat16)
    k = torch.randn((35, 1, 576), device=dev).to(torch.bfloat16)
    backend.init_forward_metadata(fb)
    o = backend.forward_extend(q, k, k[..., :512].clone(), _layer(heads), fb)
    _sync()
    assert (router.kernel_calls, router.sglang_calls) == (0, 1)
    assert not torch.isnan(o).any()


@needs_gpu
def test_cuda_graph_capture_then_replay_with_new_lengths_indices_and_masks(tb: Any) -> None:
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    heads, draft, bs, max_bs, ctx = 8, 4, 4, 8, 8192
    pool_size = bs * (ctx + draft) + 1024
    backend, runner, pool, router = make_backend(
        tb, heads=heads, draft=draft, pool_size=pool_size, context_len=ctx, graph_bs=max_bs
    )
    backend.init_cuda_graph_state(max_bs, max_bs * draft)
    layer = _layer(heads)
    fb0, q0, k0, v0, _ = random_case(runner, pool, [100, 2000, 5, 700], draft, heads, fresh_seed())
    static = SimpleNamespace(
        req_pool_indices=fb0.req_pool_indices.clone(),
        seq_lens=fb0.seq_lens.clone(),
        q=q0.clone(),
        k=k0.clone(),
        v=v0.clone(),
        out_cache_loc=fb0.out_cache_loc.clone(),
    )
    fb_static = SimpleNamespace(**{**vars(fb0), "out_cache_loc": static.out_cache_loc})
    backend.init_forward_metadata_capture_cuda_graph(
        bs, bs * draft, static.req_pool_indices, static.seq_lens, None,
        ForwardMode.TARGET_VERIFY, fb0.spec_info,
    )  # fmt: skip
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        backend.forward_extend(static.q, static.k, static.v, layer, fb_static)  # warm-up
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = backend.forward_extend(static.q, static.k, static.v, layer, fb_static)
    assert router.kernel_calls == 2  # warm-up + capture, both through the kernel

    for prefix_lens in ([8000, 1, 333, 4444], [17, 6000, 2500, 64]):
        fb, q, k, v, ref_in = random_case(runner, pool, prefix_lens, draft, heads, fresh_seed())
        for name in ("req_pool_indices", "seq_lens", "out_cache_loc"):
            getattr(static, name).copy_(getattr(fb, name))
        static.q.copy_(q)
        static.k.copy_(k)
        static.v.copy_(v)
        backend.init_forward_metadata_replay_cuda_graph(
            bs, static.req_pool_indices, static.seq_lens, fb.seq_lens_sum, None,
            ForwardMode.TARGET_VERIFY, fb.spec_info, fb.seq_lens_cpu,
        )  # fmt: skip
        out.fill_(float("nan"))
        graph.replay()
        o_graph = out.view(-1, heads, 512).clone()
        backend.init_forward_metadata(fb)  # the same step, eager
        o_eager = backend.forward_extend(q, k, v, layer, fb).view(-1, heads, 512)
        _sync()
        o_ref = reference(pool, q, k, v, heads, ref_in)
        assert not torch.isnan(o_graph).any(), "replay left NaN"
        assert_within_torch_error(o_graph, o_ref, torch_reference(pool, q, k, v, heads, ref_in))
        assert rel_err(o_graph, o_eager.double()) < 1e-3, "replay differs from eager"


PROBE = """
import json, os, site, sys
site.addsitedir(sys.argv[1])
from sglang.srt.layers.attention import triton_backend as tb
from kdtree_mla_testing import standalone
dev = os.environ.get("KDTREE_SGLANG_TEST_DEVICE", "cuda")
pool = standalone.MLAPool(1, 64, device=dev)
runner = standalone.make_model_runner(pool=pool, num_heads=8, num_draft_tokens=4,
                                      max_requests=4, context_len=128, device=dev)
backend = tb.TritonAttnBackend(runner)
print(json.dumps({
    "patched": "__kdtree_verify_originals__" in vars(tb.TritonAttnBackend),
    "router": "_kdtree_verify_router" in vars(backend),
    "hook_modules": sorted(
        m for m in sys.modules if m in ("kdtree_mla._startup", "kdtree_mla.sglang.hook",
                                        "kdtree_mla.sglang.patch")
    ),
}))
"""


def _probe(tmp_path: Path, version: str | None, env_value: str | None) -> tuple[dict, list[str]]:
    from kdtree_mla_testing import standalone

    tree = standalone.build_tree(WHEEL, tmp_path / "tree", version=version)
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    (site_dir / "kdtree_mla_startup.pth").write_text(
        (KERNELS / "kdtree_mla_startup.pth").read_text()
    )
    env = {k: v for k, v in os.environ.items() if k != "KDTREE_VERIFY"}
    env["PYTHONPATH"] = os.pathsep.join([str(tree), str(KERNELS), env.get("PYTHONPATH", "")])
    if env_value is not None:
        env["KDTREE_VERIFY"] = env_value
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(site_dir)], env=env, capture_output=True, text=True,
        timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if "kdtree-verify:" in ln]
    return json.loads(proc.stdout.strip().splitlines()[-1]), lines


def test_real_sglang_without_the_variable_is_not_patched(tmp_path: Path) -> None:
    result, lines = _probe(tmp_path, None, None)
    assert result == {"patched": False, "router": False, "hook_modules": []}
    assert lines == []


@needs_gpu
def test_real_sglang_with_the_variable_is_patched_and_active(tmp_path: Path) -> None:
    result, lines = _probe(tmp_path, None, "1")
    assert result["patched"] is True and result["router"] is True
    assert len(lines) == 1 and "kdtree-verify: active kernel=kdtree_mla-" in lines[0], lines
    assert lines[0].endswith("sglang=0.5.10 path=startup-hook")


def test_real_sglang_of_an_unsupported_version_declines_cleanly(tmp_path: Path) -> None:
    result, lines = _probe(tmp_path, "0.5.8", "1")
    assert result["patched"] is False and result["router"] is False
    assert len(lines) == 1 and 'declined reason="sglang 0.5.8 is not supported' in lines[0], lines


def _sync() -> None:
    if ON_GPU:
        torch.cuda.synchronize()


def _layer(heads: int) -> Any:
    from kdtree_mla_testing import standalone

    return standalone.make_layer(0, heads, SM_SCALE)
