"""API-level checks that need no GPU: import, documented signature, workspace validation."""

import inspect
import pathlib
import re

import pytest

pytest.importorskip("torch", reason="kdtree_mla.api imports torch (pip install torch)")

from kdtree_mla import api  # noqa: E402

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
    assert api._parse_arch_list(arch_list) == expect


def test_device_supported_never_raises_without_a_gpu():
    ok, reason = api.device_supported()
    assert not ok and reason


def test_launch_options_reach_the_extension_workspace_once_it_exists():
    # VerifyWorkspace needs a CUDA device to allocate; the option plumbing does not.
    ws = object.__new__(api.VerifyWorkspace)
    ws._options = {"min_blocks_per_cta": 1, "launch_parts": 3, "force_variant": 0}
    ws._handle = None
    ws.min_blocks_per_cta = 4  # before the extension's object exists: kept for its creation
    assert ws.min_blocks_per_cta == 4 and ws._options["min_blocks_per_cta"] == 4

    class Handle:
        pass

    ws._handle = Handle()
    ws.force_variant = "2"
    ws.launch_parts = 1
    assert (ws._handle.force_variant, ws._handle.launch_parts) == (2, 1)
    assert (ws.force_variant, ws.launch_parts) == (2, 1)


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


def test_extend_attention_fwd_passes_one_params_value_in_the_binding_order(monkeypatch):
    ext = _FakeExt()
    monkeypatch.setattr(api, "_EXT", ext)
    ws = _fake_workspace()
    t = [object() for _ in range(9)]  # q .. kv_indices
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
    monkeypatch.setattr(api, "_EXT", ext)
    ws = _fake_workspace()
    t = [object() for _ in range(9)]
    scale = object()  # a device tensor descale is passed through untouched
    api.extend_attention_fwd(
        *t, None, True, None, 4, 0.1, workspace=ws, k_descale=0.5, v_descale=scale
    )
    assert ext.calls[-1] == (*t, None, None, 0.1, None, "handle", 0.5, scale, 0)
    for dtype, code in ((torch.float8_e4m3fn, 1), (torch.float8_e5m2, 2)):
        api.extend_attention_fwd(*t, None, True, None, 4, 0.1, workspace=ws, kv_dtype=dtype)
        assert ext.calls[-1] == (*t, None, None, 0.1, None, "handle", None, None, code)
    api.verify_attention(api.VerifyParams(*t, None, None, 0.1, None, ws))
    assert len(ext.calls[-1]) == 14


def test_an_unknown_kv_dtype_is_refused_before_the_launch(monkeypatch):
    import torch

    ext = _FakeExt()
    monkeypatch.setattr(api, "_EXT", ext)
    args = [object() for _ in range(9)] + [None, True, None, 4, None]
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
    monkeypatch.setattr(api, "_EXT", ext)
    args = [object() for _ in range(9)] + [None, True, None, 4, None]
    with pytest.raises(ValueError, match=match):
        api.extend_attention_fwd(*args, **kwargs, workspace=_fake_workspace())
    assert ext.calls == []


def test_compiled_archs_come_from_the_extension(monkeypatch):
    monkeypatch.setattr(api, "_EXT", _FakeExt())
    assert api.compiled_archs() == ["sm_90", "sm_120"]


def test_compiled_archs_are_empty_without_the_extension(monkeypatch):
    def missing():
        raise ImportError("not built")

    monkeypatch.setattr(api, "_EXT", None)
    monkeypatch.setattr(api, "_load_ext", missing)
    assert api.compiled_archs() == []
