"""CPU tests of the startup hook against a tiny fake SGLang (no GPU, no SGLang install).

The fake tree has SGLang's module names, a ``sglang-<version>.dist-info`` so the version comes
from distribution metadata as in the image, and pure-Python stand-ins for ``TritonAttnBackend``
and ``ModelRunner`` with the methods and call layout of 0.5.10. The subprocess tests process
``kdtree_mla_startup.pth`` with :func:`site.addsitedir`, the same code path Python's ``site``
runs for ``site-packages`` at interpreter start.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

KERNELS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(KERNELS))  # for kdtree_mla

from kdtree_mla.sglang import announce, facts, patch, versions  # noqa: E402
from kdtree_mla.sglang.loglines import ACTIVE_LINE_RE, DECLINED_LINE_RE  # noqa: E402

PTH = KERNELS / "kdtree_mla_startup.pth"

FAKE_TRITON_BACKEND = '''
"""Stand-in for sglang/srt/layers/attention/triton_backend.py (0.5.10 call layout)."""
from types import SimpleNamespace

SGLANG_CALLS = []


class FakeTensor:
    def __init__(self, *shape, dtype="torch.bfloat16"):
        self.shape = shape
        self.dtype = dtype

    def __getitem__(self, item):
        n = len(range(*item.indices(self.shape[0])))
        return FakeTensor(n, *self.shape[1:], dtype=self.dtype)

    def __len__(self):
        return self.shape[0]


def extend_attention_fwd(*args, **kwargs):
    SGLANG_CALLS.append((args, kwargs))


class TritonAttnBackend:
    def __init__(self, model_runner, skip_prefill=False, kv_indptr_buf=None):
        self.extend_attention_fwd = extend_attention_fwd
        self.skip_prefill = skip_prefill
        self.num_draft_tokens = model_runner.server_args.speculative_num_draft_tokens
        self.use_mla = model_runner.model_config.attention_arch.name == "MLA"
        self.num_head = model_runner.model_config.num_attention_heads
        self.v_head_dim = 512 if self.use_mla else 128
        self.sliding_window_size = None
        self.enable_deterministic = False
        self.device = "cuda"
        self.qo_indptr = FakeTensor(17, dtype="torch.int64")
        self.kv_indptr = FakeTensor(17, dtype="torch.int32")
        self.forward_metadata = None

    def _meta(self, bs):
        return SimpleNamespace(
            qo_indptr=self.qo_indptr[: bs + 1],
            kv_indptr=self.kv_indptr[: bs + 1],
            kv_indices=FakeTensor(100, dtype="torch.int64"),
            custom_mask=FakeTensor(1000, dtype="torch.bool"),
            mask_indptr=FakeTensor(bs + 1, dtype="torch.int64"),
        )

    def init_forward_metadata(self, forward_batch):
        self.forward_metadata = self._meta(forward_batch.batch_size)

    def init_cuda_graph_state(self, max_bs, max_num_tokens, kv_indices_buf=None,
                              cuda_graph_num_kv_splits_buf=None):
        pass

    def init_forward_metadata_capture_cuda_graph(self, bs, num_tokens, req_pool_indices,
                                                 seq_lens, encoder_lens, forward_mode,
                                                 spec_info):
        self.forward_metadata = self._meta(bs)

    def init_forward_metadata_replay_cuda_graph(self, bs, req_pool_indices, seq_lens,
                                                seq_lens_sum, encoder_lens, forward_mode,
                                                spec_info, seq_lens_cpu):
        pass

    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True, sinks=None):
        o = FakeTensor(q.shape[0], q.shape[1], 512)
        meta = self.forward_metadata
        self.extend_attention_fwd(
            q, k, v, o, FakeTensor(1000, 1, 576), FakeTensor(1000, 1, 512),
            meta.qo_indptr, meta.kv_indptr, meta.kv_indices, meta.custom_mask, True,
            meta.mask_indptr, 4, 1.0, 1.0, 0.1,
            logit_cap=0.0, sliding_window_size=-1, sinks=None, window_kv_offsets=None,
            xai_temperature_len=-1,
        )
        return o
'''

FAKE_MODEL_RUNNER = '''
"""Stand-in for sglang/srt/model_executor/model_runner.py."""
from types import SimpleNamespace


class _Named:
    def __init__(self, name):
        self.name = name

    def is_none(self):
        return self.name == "NONE"


class ModelRunner:
    def __init__(self, backend="triton", spec="EAGLE", is_draft_worker=False):
        self.is_draft_worker = is_draft_worker
        self.spec_algorithm = _Named(spec)
        self.page_size = 1
        self.gpu_id = 0
        self.kv_cache_dtype = "torch.bfloat16"
        self.model_config = SimpleNamespace(
            attention_arch=_Named("MLA"), num_attention_heads=8, kv_lora_rank=512,
            qk_rope_head_dim=64,
        )
        self.server_args = SimpleNamespace(
            attention_backend=backend, speculative_attention_mode="prefill",
            speculative_num_draft_tokens=4, cuda_graph_max_bs=8, page_size=1,
        )
        self.req_to_token_pool = SimpleNamespace(size=16)
        self.prefill_attention_backend_str = backend
        self.decode_attention_backend_str = backend
        self.init_attention_backend()

    def init_attention_backend(self):
        if self.server_args.attention_backend == "triton":
            from sglang.srt.layers.attention.triton_backend import TritonAttnBackend

            self.attn_backend = TritonAttnBackend(self)
        else:
            self.attn_backend = SimpleNamespace(name=self.server_args.attention_backend)
'''

SCENARIO = """
import json, site, sys
opts = json.loads(sys.argv[2])
if opts.pop("block_kernel", False):
    sys.modules["kdtree_mla._C"] = None  # as on a machine where the extension is not built
site.addsitedir(sys.argv[1])  # processes kdtree_mla_startup.pth as site.py does at startup
import sglang
import sglang.srt.model_executor.model_runner as mr
runner = mr.ModelRunner(**opts)
from sglang.srt.layers.attention import triton_backend as tb
from types import SimpleNamespace
backend = getattr(runner, "attn_backend", None)
calls = None
class Prefill:
    def is_target_verify(self):
        return False
if isinstance(backend, tb.TritonAttnBackend):
    backend.init_forward_metadata(SimpleNamespace(batch_size=2, forward_mode=Prefill()))
    backend.forward_extend(tb.FakeTensor(8, 8, 576), tb.FakeTensor(8, 1, 576),
                           tb.FakeTensor(8, 1, 512), None, None)
    calls = len(tb.SGLANG_CALLS)
print(json.dumps({
    "patched": "__kdtree_verify_originals__" in vars(tb.TritonAttnBackend),
    "router": "_kdtree_verify_router" in vars(backend) if hasattr(backend, "__dict__") else False,
    "kdtree_modules": sorted(m for m in sys.modules if m.startswith("kdtree_mla")),
    "sglang_calls": calls,
}))
"""


def write_fake_sglang(
    root: Path, version: str, *, triton_backend: str = FAKE_TRITON_BACKEND
) -> Path:
    """Write a fake SGLang tree (package + dist-info) under ``root``; return ``root``."""
    for pkg in (
        "sglang",
        "sglang/srt",
        "sglang/srt/layers",
        "sglang/srt/layers/attention",
        "sglang/srt/model_executor",
    ):
        (root / pkg).mkdir(parents=True, exist_ok=True)
        (root / pkg / "__init__.py").write_text("")
    (root / "sglang/srt/layers/attention/triton_backend.py").write_text(triton_backend)
    (root / "sglang/srt/model_executor/model_runner.py").write_text(FAKE_MODEL_RUNNER)
    dist = root / f"sglang-{version}.dist-info"
    dist.mkdir(exist_ok=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n")
    return root


def run_scenario(
    tmp_path: Path, version: str, env_value: str | None, **runner_kwargs: Any
) -> tuple[dict[str, Any], list[str]]:
    """Run one server-like process; return its JSON result and its kdtree-verify lines."""
    fake = write_fake_sglang(tmp_path / "fake", version, **runner_kwargs.pop("tree", {}))
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    (site_dir / PTH.name).write_text(PTH.read_text())
    env = {k: v for k, v in os.environ.items() if k not in ("KDTREE_VERIFY", "PYTHONPATH")}
    env["PYTHONPATH"] = os.pathsep.join([str(fake), str(KERNELS)])
    if env_value is not None:
        env["KDTREE_VERIFY"] = env_value
    proc = subprocess.run(
        [sys.executable, "-c", SCENARIO, str(site_dir), json.dumps(runner_kwargs)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr  # a fatal pattern for kctl's health check
    lines = [ln for ln in proc.stderr.splitlines() if "kdtree-verify:" in ln]
    return json.loads(proc.stdout.strip().splitlines()[-1]), lines


@pytest.mark.parametrize("env_value", [None, "0", "", "true"])
def test_inert_without_the_variable(tmp_path: Path, env_value: str | None) -> None:
    result, lines = run_scenario(tmp_path, "0.5.10", env_value)
    assert lines == []
    assert result["kdtree_modules"] == []  # not even our package was imported
    assert result["patched"] is False and result["router"] is False
    assert result["sglang_calls"] == 1


def test_unsupported_version_declines_and_leaves_sglang_untouched(tmp_path: Path) -> None:
    result, lines = run_scenario(tmp_path, "0.5.8", "1")
    assert len(lines) == 1, lines
    m = DECLINED_LINE_RE.search(lines[0])
    assert m and m.group("sglang") == "0.5.8"
    assert "sglang 0.5.8 is not supported" in m.group("reason")
    assert result["patched"] is False and result["router"] is False
    assert result["sglang_calls"] == 1  # the server still serves, on SGLang's kernel


def test_missing_kernel_declines_cleanly(tmp_path: Path) -> None:
    # No compiled extension: SGLang is patched, but the backend declines, keeps SGLang's
    # kernel and says why in one line.
    result, lines = run_scenario(tmp_path, "0.5.10", "1", block_kernel=True)
    assert len(lines) == 1, lines
    m = DECLINED_LINE_RE.search(lines[0])
    assert m and m.group("sglang") == "0.5.10"
    assert "extension not usable: ImportError" in m.group("reason")
    assert result["router"] is False
    assert result["sglang_calls"] == 1


def test_other_attention_backend_declines(tmp_path: Path) -> None:
    result, lines = run_scenario(tmp_path, "0.5.10", "1", backend="fa3")
    assert len(lines) == 1, lines
    assert "target verify runs on the fa3 attention backend" in lines[0]


def test_unpatchable_sglang_declines_and_is_left_untouched(tmp_path: Path) -> None:
    broken = FAKE_TRITON_BACKEND.replace("def init_cuda_graph_state", "def _renamed_state")
    result, lines = run_scenario(tmp_path, "0.5.10", "1", tree={"triton_backend": broken})
    assert len(lines) == 1, lines
    assert "cannot patch" in lines[0] and "init_cuda_graph_state" in lines[0]
    assert result["patched"] is False
    assert result["sglang_calls"] == 1


def test_pth_without_an_importable_package_declines_without_a_traceback(tmp_path: Path) -> None:
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    (site_dir / PTH.name).write_text(PTH.read_text())
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["KDTREE_VERIFY"] = "1"
    code = f"import site; site.addsitedir({str(site_dir)!r}); print('served')"
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0 and proc.stdout.strip() == "served"
    assert "Traceback" not in proc.stderr
    m = DECLINED_LINE_RE.search(proc.stderr.strip())
    assert m and "startup hook import failed: ModuleNotFoundError" in m.group("reason")


def test_hook_installed_after_sglang_was_imported_still_patches(tmp_path: Path) -> None:
    fake = write_fake_sglang(tmp_path / "fake", "0.5.10")
    env = {k: v for k, v in os.environ.items() if k not in ("KDTREE_VERIFY", "PYTHONPATH")}
    env["PYTHONPATH"] = os.pathsep.join([str(fake), str(KERNELS)])
    code = (
        "import sglang.srt.layers.attention.triton_backend as tb\n"
        "from kdtree_mla import _startup\n"
        "assert _startup.install({'KDTREE_VERIFY': '1'})\n"
        "print('__kdtree_verify_originals__' in vars(tb.TritonAttnBackend))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "True"


def test_a_find_spec_probe_does_not_use_up_the_hook(tmp_path: Path) -> None:
    fake = write_fake_sglang(tmp_path / "fake", "0.5.10")
    env = {k: v for k, v in os.environ.items() if k not in ("KDTREE_VERIFY", "PYTHONPATH")}
    env["PYTHONPATH"] = os.pathsep.join([str(fake), str(KERNELS)])
    code = (
        "import importlib.util\n"
        "from kdtree_mla import _startup\n"
        "assert _startup.install({'KDTREE_VERIFY': '1'})\n"
        "assert importlib.util.find_spec('sglang.srt.layers.attention.triton_backend')\n"
        "import sglang.srt.layers.attention.triton_backend as tb\n"
        "print('__kdtree_verify_originals__' in vars(tb.TritonAttnBackend))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "True"


def test_startup_install_is_inert_and_idempotent_in_process() -> None:
    from kdtree_mla import _startup

    assert _startup.enabled({"KDTREE_VERIFY": "1"}) is True
    assert _startup.enabled({"KDTREE_VERIFY": "yes"}) is False
    assert _startup.install({}) is False


# --- the active path, in process, with a fake kernel API -------------------------------------


class FakeWorkspace:
    def __init__(self, *, max_batch: int, max_tokens: int, num_heads: int, device: Any) -> None:
        self.limits = SimpleNamespace(max_batch=max_batch, max_tokens=max_tokens)


class FakeApi(ModuleType):
    MAX_BATCH_LIMIT = 4096
    VerifyWorkspace = FakeWorkspace

    def __init__(self) -> None:
        super().__init__("kdtree_mla.api")
        self.calls: list[tuple[Any, ...]] = []

    def extend_attention_fwd(self, *args: Any, **kwargs: Any) -> None:
        self.calls.append(args)


class Mode:
    def __init__(self, verify: bool) -> None:
        self.verify = verify

    def is_target_verify(self) -> bool:
        return self.verify


@pytest.fixture
def active_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """A patched fake triton_backend module, a fake kernel API and a GPU that says sm_90."""
    import kdtree_mla

    root = write_fake_sglang(tmp_path, "0.5.10")
    spec = importlib.util.spec_from_file_location(
        "fake_triton_backend", root / "sglang/srt/layers/attention/triton_backend.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    api = FakeApi()
    monkeypatch.setitem(sys.modules, "kdtree_mla.api", api)
    monkeypatch.setattr(kdtree_mla, "api", api, raising=False)
    monkeypatch.setattr(facts, "probe_kernel", lambda gpu=None: (None, (90, 120)))
    monkeypatch.setattr(facts, "device_arch", lambda runner: 90)
    monkeypatch.setattr(facts, "cuda_device", lambda device: device)
    announce.reset_for_tests()
    layout = versions.layout_for("0.5.10")
    assert layout is not None
    patch.patch_triton_backend(module, layout, "0.5.10")
    runner_mod = ModuleType("fake_model_runner")
    exec(FAKE_MODEL_RUNNER.replace("self.init_attention_backend()", ""), runner_mod.__dict__)
    yield module, api, runner_mod
    patch.unpatch_triton_backend(module)
    assert not patch.is_patched(module.TritonAttnBackend)
    announce.reset_for_tests()


def test_active_backend_routes_only_verify_steps(active_env, capsys) -> None:  # type: ignore[no-untyped-def]
    module, api, runner_mod = active_env
    backend = module.TritonAttnBackend(runner_mod.ModelRunner())
    err = capsys.readouterr().err
    m = ACTIVE_LINE_RE.search(err.strip())
    assert m and m.group("arch") == "90" and m.group("sglang") == "0.5.10"
    router = vars(backend)[patch.ROUTER]
    assert router.max_batch == 16 and router.workspace.limits.max_tokens == 64
    q, k, v = (
        module.FakeTensor(8, 8, 576),
        module.FakeTensor(8, 1, 576),
        module.FakeTensor(8, 1, 512),
    )

    backend.init_forward_metadata(SimpleNamespace(batch_size=2, forward_mode=Mode(True)))
    backend.forward_extend(q, k, v, None, None)
    assert len(api.calls) == 1 and module.SGLANG_CALLS == []
    assert api.calls[0][13] == 0.1  # layer.scaling reached the kernel as sm_scale

    backend.init_forward_metadata(SimpleNamespace(batch_size=2, forward_mode=Mode(False)))
    backend.forward_extend(q, k, v, None, None)  # prefill / draft extend
    assert len(api.calls) == 1 and len(module.SGLANG_CALLS) == 1

    backend.init_cuda_graph_state(32, 128)  # grows before capture
    assert router.max_batch == 32
    backend.init_forward_metadata_capture_cuda_graph(4, 16, None, None, None, Mode(True), None)
    backend.forward_extend(module.FakeTensor(16, 8, 576), k, v, None, None)
    assert len(api.calls) == 2
    backend.init_forward_metadata_replay_cuda_graph(
        4, [0, 1, 2, 3], None, 0, None, Mode(True), None, None
    )
    assert router.step_active is True


def test_draft_backends_are_left_alone(active_env, capsys) -> None:  # type: ignore[no-untyped-def]
    module, api, runner_mod = active_env
    draft = module.TritonAttnBackend(runner_mod.ModelRunner(is_draft_worker=True))
    assert patch.ROUTER not in vars(draft)
    assert draft.extend_attention_fwd is module.extend_attention_fwd
    assert capsys.readouterr().err == ""


def test_quantised_kv_declines_with_its_reason(active_env, capsys) -> None:  # type: ignore[no-untyped-def]
    module, api, runner_mod = active_env
    runner = runner_mod.ModelRunner()
    runner.kv_cache_dtype = "torch.float8_e4m3fn"
    backend = module.TritonAttnBackend(runner)
    assert patch.ROUTER not in vars(backend)
    m = DECLINED_LINE_RE.search(capsys.readouterr().err.strip())
    assert m and "quantised KV cache" in m.group("reason")
