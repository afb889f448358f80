"""API-level checks that need no GPU: import, documented signature, workspace validation."""

import inspect
import pathlib
import re

import pytest

pytest.importorskip("torch", reason="kdtree_mla.api imports torch (pip install torch)")

import torch  # noqa: E402
from kdtree_mla import _diag, api, extension  # noqa: E402
from kdtree_mla.sglang import eligibility  # noqa: E402

CSRC = pathlib.Path(api.__file__).parents[1] / "csrc"


def test_extend_attention_fwd_signature_matches_sglang_0_5_5_order():
    params = list(inspect.signature(api.extend_attention_fwd).parameters)
    assert params[:16] == [
        "q_extend",
        "k_extend",
        "v_extend",
        "o_extend",
        "k_buffer",
        "v_buffer",
        "qo_indptr",
        "kv_indptr",
        "kv_indices",
        "custom_mask",
        "is_causal",
        "mask_indptr",
        "max_len_extend",
        "sm_scale",
        "logit_cap",
        "skip_prefix_custom_mask",
    ]
    sig = inspect.signature(api.extend_attention_fwd)
    assert sig.parameters["workspace"].kind is inspect.Parameter.KEYWORD_ONLY
    assert sig.parameters["lse_extend"].default is None


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"max_batch": 0, "max_tokens": 4, "num_heads": 8}, "max_batch"),
        ({"max_batch": 5000, "max_tokens": 4, "num_heads": 8}, "max_batch"),
        ({"max_batch": 4, "max_tokens": 0, "num_heads": 8}, "max_tokens"),
        ({"max_batch": 4, "max_tokens": 65, "num_heads": 8}, "max_tokens"),
        ({"max_batch": 4, "max_tokens": 16, "num_heads": 12}, "num_heads"),
        ({"max_batch": 4, "max_tokens": 16, "num_heads": 8, "device": "cpu"}, "CUDA device"),
    ],
)
def test_workspace_rejects_bad_limits_before_allocating(kwargs, match):
    with pytest.raises(ValueError, match=match):
        api.VerifyWorkspace(**kwargs)


def test_block_m_matches_traits_header():
    traits = (CSRC / "traits.h").read_text()
    assert int(re.search(r"kBlockM = (\d+);", traits).group(1)) == api.BLOCK_M
    assert int(re.search(r"kPlanWords = (\d+);", traits).group(1)) == api.PLAN_WORDS


@pytest.mark.parametrize(
    "arch_list,expect",
    [
        ("9.0;12.0", ["sm_90", "sm_120"]),
        ("9.0+PTX", ["sm_90"]),
        ("12.0a 9.0", ["sm_120", "sm_90"]),
        ("8.6,9.0", ["sm_86", "sm_90"]),
    ],
)
def test_arch_list_parsing(arch_list, expect):
    assert extension.parse_arch_list(arch_list) == expect


def test_device_supported_never_raises_without_a_gpu():
    ok, reason = api.device_supported()
    assert not ok and reason


def _bare_workspace(split_combine: bool = False) -> api.VerifyWorkspace:
    # VerifyWorkspace needs a CUDA device to allocate; the option plumbing does not.
    ws = object.__new__(api.VerifyWorkspace)
    ws._options = {
        "min_blocks_per_cta": 1,
        "launch_parts": 3,
        "force_variant": 0,
        "split_combine": int(split_combine),
    }
    ws._trace = None
    ws._handle = None
    return ws


def test_launch_options_reach_the_extension_workspace_once_it_exists():
    ws = _bare_workspace()
    ws.min_blocks_per_cta = 4  # before the extension's object exists: kept for its creation
    assert ws.min_blocks_per_cta == 4 and ws._options["min_blocks_per_cta"] == 4

    class Handle:
        pass

    ws._handle = Handle()
    _diag.set_force_variant(ws, "2")
    _diag.set_launch_parts(ws, _diag.MAIN_ONLY)
    _diag.set_split_combine(ws, True)
    buf = torch.zeros(2, 2, dtype=torch.int64)
    _diag.set_trace(ws, buf)
    handle = ws._handle
    assert (handle.force_variant, handle.launch_parts, handle.split_combine) == (2, 1, 1)
    assert handle.trace is buf and _diag.trace(ws) is buf
    assert (_diag.force_variant(ws), _diag.launch_parts(ws), ws.split_combine) == (2, 1, True)


def test_the_public_workspace_has_no_diagnostic_switches():
    """launch_parts, force_variant and the trace buffer are kdtree_mla._diag's; split_combine
    is the constructor's keyword and a read-only property."""
    public = {n for n in dir(api.VerifyWorkspace) if not n.startswith("_")}
    assert not public & {"launch_parts", "force_variant", "trace"}
    params = inspect.signature(api.VerifyWorkspace.__init__).parameters
    assert params["split_combine"].default is False
    assert params["split_combine"].kind is inspect.Parameter.KEYWORD_ONLY
    ws = _bare_workspace(split_combine=True)
    assert ws.split_combine is True
    with pytest.raises(AttributeError):
        ws.split_combine = False


def test_max_draft_and_head_constants_match_the_sglang_eligibility_rules():
    """The integration decides eligibility without importing torch or the API; its copies of
    the kernel's limits must be the API's."""
    assert eligibility.MAX_DRAFT == api.MAX_DRAFT
    assert eligibility.HEAD_DIM_QK == api.HEAD_DIM_QK
    assert eligibility.HEAD_DIM_V == api.HEAD_DIM_V
    assert tuple(eligibility.SUPPORTED_HEADS) == tuple(api.SUPPORTED_HEADS)


def test_verify_params_are_the_binding_arguments_in_order():
    """VerifyParams unpacks positionally into the extension's verify_fwd: its fields must be
    the binding's kArgNames, in order (the names its error messages use)."""
    binding = (CSRC / "binding.cpp").read_text()
    names = re.search(r"kArgNames\[kNumArgs\] = \{(.*?)\};", binding, re.S).group(1)
    assert api.VerifyParams._fields == tuple(re.findall(r'"(\w+)"', names))


class _FakeExt:
    """Records verify_fwd's arguments; stands in for the compiled extension."""

    ARCH_LIST = "9.0;12.0"

    def __init__(self):
        self.calls = []

    def verify_fwd(self, *args):
        self.calls.append(args)


def _fake_workspace():
    ws = object.__new__(api.VerifyWorkspace)
    ws._handle = "handle"
    return ws


class _Tensor:
    """Stands in for a tensor argument: the API reads only a KV pool's dtype itself."""

    def __init__(self, dtype=torch.bfloat16):
        self.dtype = dtype


def _tensors(pool_dtype=torch.bfloat16):
    """q .. kv_indices (9 arguments), k_buffer of ``pool_dtype``."""
    t = [_Tensor() for _ in range(9)]
    t[4] = _Tensor(pool_dtype)
    return t


def test_extend_attention_fwd_passes_one_params_value_in_the_binding_order(monkeypatch):
    ext = _FakeExt()
    monkeypatch.setattr(extension, "_EXT", ext)
    ws = _fake_workspace()
    t = _tensors()
    mask, mask_indptr, lse = object(), object(), object()
    api.extend_attention_fwd(*t, mask, True, mask_indptr, 4, None, workspace=ws, lse_extend=lse)
    assert ext.calls == [(*t, mask, mask_indptr, 576**-0.5, lse, "handle")]
    params = api.VerifyParams(*t, mask, mask_indptr, 0.1, None, ws)
    api.verify_attention(params)
    assert ext.calls[-1] == (*t, mask, mask_indptr, 0.1, None, "handle")


def test_fp8_pool_arguments_reach_the_binding_with_the_dtype_code(monkeypatch):
    """Descales and kv_dtype go after the workspace (the 17-argument form); a call without
    them keeps the 14-argument form; the dtype travels as the csrc/params.h KvDtype code."""
    import torch

    ext = _FakeExt()
    monkeypatch.setattr(extension, "_EXT", ext)
    ws = _fake_workspace()
    t = _tensors(torch.float8_e4m3fn)
    scale = object()  # a device tensor descale is passed through untouched
    api.extend_attention_fwd(
        *t, None, True, None, 4, 0.1, workspace=ws, k_descale=0.5, v_descale=scale
    )
    assert ext.calls[-1] == (*t, None, None, 0.1, None, "handle", 0.5, scale, 0)
    u8 = _tensors(torch.uint8)
    for dtype, code in ((torch.float8_e4m3fn, 1), (torch.float8_e5m2, 2)):
        api.extend_attention_fwd(
            *u8,
            None,
            True,
            None,
            4,
            0.1,
            workspace=ws,
            kv_dtype=dtype,
            k_descale=2.0,
            v_descale=3.0,
        )
        assert ext.calls[-1] == (*u8, None, None, 0.1, None, "handle", 2.0, 3.0, code)
    bf16 = _tensors()
    api.verify_attention(api.VerifyParams(*bf16, None, None, 0.1, None, ws))
    assert len(ext.calls[-1]) == 14


@pytest.mark.parametrize(
    "pool,kwargs,missing",
    [
        (torch.float8_e4m3fn, {}, "k_descale and v_descale"),
        (torch.float8_e5m2, {"k_descale": 0.5}, "v_descale"),
        (torch.float8_e4m3fn, {"v_descale": 0.5}, "k_descale"),
        (torch.uint8, {"kv_dtype": torch.float8_e4m3fn}, "k_descale and v_descale"),
        (torch.uint8, {"kv_dtype": torch.float8_e5m2, "k_descale": 1.0}, "v_descale"),
    ],
)
def test_an_fp8_pool_without_its_descales_is_refused_before_the_launch(
    monkeypatch, pool, kwargs, missing
):
    """An fp8 pool holds K / k_scale: a silent 1.0 would scale every prefix logit wrongly."""
    ext = _FakeExt()
    monkeypatch.setattr(extension, "_EXT", ext)
    args = [*_tensors(pool), None, True, None, 4, None]
    with pytest.raises(ValueError, match=f"^{missing}: an fp8 KV pool .* pass the layer's") as err:
        api.extend_attention_fwd(*args, workspace=_fake_workspace(), **kwargs)
    assert "or 1.0 for a pool stored without scaling" in str(err.value)
    with pytest.raises(ValueError, match=missing):
        api.verify_attention(
            api.VerifyParams(*args[:9], None, None, 0.1, None, _fake_workspace(), **kwargs)
        )
    assert ext.calls == []


def test_an_unknown_kv_dtype_is_refused_before_the_launch(monkeypatch):
    import torch

    ext = _FakeExt()
    monkeypatch.setattr(extension, "_EXT", ext)
    args = [*_tensors(torch.uint8), None, True, None, 4, None]
    with pytest.raises(ValueError, match="kv_dtype"):
        api.extend_attention_fwd(*args, workspace=_fake_workspace(), kv_dtype=torch.float16)
    assert ext.calls == []


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"logit_cap": 30.0}, "logit_cap"),
        ({"skip_prefix_custom_mask": False}, "skip_prefix_custom_mask"),
    ],
)
def test_extend_attention_fwd_refuses_what_the_kernel_does_not_do(monkeypatch, kwargs, match):
    ext = _FakeExt()
    monkeypatch.setattr(extension, "_EXT", ext)
    args = [*_tensors(), None, True, None, 4, None]
    with pytest.raises(ValueError, match=match):
        api.extend_attention_fwd(*args, **kwargs, workspace=_fake_workspace())
    assert ext.calls == []


def test_compiled_archs_come_from_the_extension(monkeypatch):
    monkeypatch.setattr(extension, "_EXT", _FakeExt())
    assert api.compiled_archs() == ["sm_90", "sm_120"]


def test_compiled_archs_are_empty_without_the_extension(monkeypatch):
    def missing():
        raise ImportError("not built")

    monkeypatch.setattr(extension, "_EXT", None)
    monkeypatch.setattr(extension, "load_ext", missing)
    assert api.compiled_archs() == []
