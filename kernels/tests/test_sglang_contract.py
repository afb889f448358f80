"""CPU tests of the SGLang integration's pure parts: log lines, versions, decisions, routing.

No torch, no GPU, no SGLang: the router is driven with a fake kernel API and tensor stand-ins
that carry only ``shape`` and ``dtype``.
"""

from __future__ import annotations

import re
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # kernels/, for kdtree_mla

from kdtree_mla.sglang import loglines, versions  # noqa: E402
from kdtree_mla.sglang.eligibility import (  # noqa: E402
    ACTIVE,
    Decision,
    ServerFacts,
    call_refusal,
    decide,
)

# The regexes kctl's health check uses, copied from the shared contract on purpose: if the
# module's patterns drift from the contract, these tests fail.
KCTL_ACTIVE = re.compile(r"kdtree-verify: active\b")
KCTL_DECLINED = re.compile(r"kdtree-verify: declined\b")


# --- log lines -------------------------------------------------------------------------------


def test_active_line_matches_contract() -> None:
    line = loglines.format_active("0.1.0", 90, "0.5.10")
    assert line == (
        "kdtree-verify: active kernel=kdtree_mla-0.1.0 arch=sm_90 sglang=0.5.10 path=startup-hook"
    )
    assert KCTL_ACTIVE.search("2026-11-29 10:00:00 [TP0] " + line)
    assert not KCTL_DECLINED.search(line)
    m = loglines.ACTIVE_LINE_RE.search(line)
    assert m and m.group("kernel") == "0.1.0" and m.group("arch") == "90"
    assert m.group("sglang") == "0.5.10" and m.group("path") == "startup-hook"
    plugin = loglines.format_active("0.1.0", 90, "0.5.23", "plugin")
    m = loglines.ACTIVE_LINE_RE.search(plugin)
    assert m and m.group("sglang") == "0.5.23" and m.group("path") == "plugin"
    # A line without the path field (older kernels, kctl's simulator) still parses.
    m = loglines.ACTIVE_LINE_RE.search(line.removesuffix(" path=startup-hook"))
    assert m and m.group("path") is None
    with pytest.raises(ValueError):
        loglines.format_active("0.1.0", 90, "0.5.23", "monkeypatch")


def test_active_line_accepts_sm_prefix_and_rejects_garbage() -> None:
    assert "arch=sm_120 " in loglines.format_active("0.1.0", "sm_120", "0.5.10")
    with pytest.raises(ValueError):
        loglines.format_active("0.1.0", "hopper", "0.5.10")


def test_declined_line_matches_contract_and_is_one_clean_line() -> None:
    line = loglines.format_declined('bad "thing"\n  on two lines', "0.5.8")
    assert line == "kdtree-verify: declined reason=\"bad 'thing' on two lines\" sglang=0.5.8"
    assert KCTL_DECLINED.search(line)
    assert not KCTL_ACTIVE.search(line)
    m = loglines.DECLINED_LINE_RE.search(line)
    assert m and m.group("sglang") == "0.5.8"


def test_empty_fields_never_break_the_line_shape() -> None:
    line = loglines.format_declined("", "")
    assert loglines.DECLINED_LINE_RE.search(line)
    assert line.endswith("sglang=unknown")


def test_module_patterns_equal_the_shared_contract() -> None:
    assert KCTL_ACTIVE.pattern == loglines.ACTIVE_PATTERN
    assert KCTL_DECLINED.pattern == loglines.DECLINED_PATTERN


# --- versions --------------------------------------------------------------------------------


def test_pinned_version_and_its_neighbour_are_supported() -> None:
    layout = versions.layout_for("0.5.10")
    assert layout is not None and layout.extend_positional == ("k_scale", "v_scale", "sm_scale")
    old = versions.layout_for("0.5.9")
    assert old is not None and old.extend_positional == ("sm_scale",)
    post = versions.layout_for("0.5.10.post1")  # 0.5.10's code, re-released
    assert post is not None and post.extend_positional == layout.extend_positional


@pytest.mark.parametrize("version", [None, "0.5.8", "0.5.11", "0.5.23", ""])
def test_other_versions_are_declined(version: str | None) -> None:
    assert versions.layout_for(version) is None
    reason = versions.unsupported_reason(version)
    assert "0.5.10" in reason and "0.5.9" in reason
    plugin_era = version in ("0.5.11", "0.5.23")
    assert ("--attention-backend kdtree" in reason) == plugin_era


def test_installed_version_reads_distribution_metadata(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dist = tmp_path / "sglang-0.5.10.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.10\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert versions.installed_version() == "0.5.10"


# --- server decision -------------------------------------------------------------------------

KIMI = ServerFacts(
    sglang_version="0.5.10",
    kernel_version="0.1.0",
    kernel_error=None,
    arch=120,
    kernel_archs=(90, 120),
    use_mla=True,
    qk_head_dim=576,
    v_head_dim=512,
    kv_cache_dtype="torch.bfloat16",
    page_size=1,
    speculative=True,
    num_draft_tokens=4,
    num_heads=8,
    sliding_window=False,
    deterministic=False,
    verify_backend="triton",
)


def test_kimi_k2_at_tp8_is_active() -> None:
    assert decide(KIMI) == ACTIVE
    # On the plugin path SGLang's model runner names the selected backend "kdtree".
    assert decide(replace(KIMI, verify_backend="kdtree", sglang_version="0.5.23")) == ACTIVE
    assert decide(replace(KIMI, kernel_archs=None, arch=90)) == ACTIVE


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"kernel_error": "ImportError: no _C"}, "extension not usable: ImportError"),
        ({"arch": None}, "no CUDA device"),
        ({"arch": 100}, "built for sm_90,sm_120, this GPU is sm_100"),
        ({"verify_backend": "fa3"}, "fa3 attention backend"),
        ({"use_mla": False}, "not MLA"),
        ({"qk_head_dim": 192, "v_head_dim": 128}, "q 192 / v 128"),
        ({"kv_cache_dtype": "torch.float8_e4m3fn"}, "quantised KV cache"),
        ({"page_size": 64}, "page size 64"),
        ({"speculative": False}, "speculative decoding is off"),
        ({"num_draft_tokens": 32}, "32 draft tokens"),
        ({"num_heads": 12}, "12 query heads"),
        ({"sliding_window": True}, "sliding-window"),
        ({"deterministic": True}, "deterministic"),
    ],
)
def test_each_unsupported_server_is_declined_with_its_reason(
    change: dict[str, Any], words: str
) -> None:
    decision = decide(replace(KIMI, **change))
    assert decision.active is False
    assert words in decision.reason
    # The reason survives the trip into a decline line intact.
    assert words.replace('"', "'") in loglines.format_declined(decision.reason, "0.5.10")


@pytest.mark.parametrize("dtype", ["torch.float8_e4m3fn", "torch.float8_e5m2"])
def test_fp8_kv_cache_is_served_where_the_release_reads_one(dtype: str) -> None:
    fp8 = replace(KIMI, kv_cache_dtype=dtype, sglang_version="0.5.23")
    assert decide(replace(fp8, fp8_kv=True)) == ACTIVE
    declined = decide(fp8)
    assert not declined.active and "0.5.23's Triton MLA path does not read" in declined.reason
    assert not decide(replace(KIMI, kv_cache_dtype="torch.float16", fp8_kv=True)).active


def test_decision_is_a_value() -> None:
    assert Decision(False, "x") == Decision(False, "x")


# --- per-call refusal ------------------------------------------------------------------------

VERIFY_CALL: dict[str, Any] = dict(
    q_shape=(16, 8, 576),
    o_shape=(16, 8, 512),
    kv_buffer_shape=(100_000, 1, 576),
    kv_dtype="torch.bfloat16",
    has_custom_mask=True,
    is_causal=True,
    logit_cap=0.0,
    sliding_window_size=-1,
    has_sinks=False,
    has_window_offsets=False,
    xai_temperature_len=-1,
    k_scale=1.0,
    v_scale=1.0,
    max_tokens=64,
    max_batch=16,
    batch=4,
)


def test_verify_call_is_accepted() -> None:
    assert call_refusal(**VERIFY_CALL) is None


@pytest.mark.parametrize(
    "change",
    [
        {"q_shape": (16, 8, 192)},
        {"o_shape": (16, 8, 128)},
        {"kv_buffer_shape": (100, 8, 576)},
        {"kv_dtype": "torch.float8_e4m3fn"},
        {"has_custom_mask": False},
        {"logit_cap": 30.0},
        {"sliding_window_size": 4096},
        {"has_sinks": True},
        {"xai_temperature_len": 8},
        {"k_scale": 0.5},
        {"q_shape": (65, 8, 576)},
        {"batch": 17},
    ],
)
def test_calls_the_kernel_cannot_serve_stay_on_sglang(change: dict[str, Any]) -> None:
    assert call_refusal(**{**VERIFY_CALL, **change}) is not None


# --- the router, with a fake kernel API ------------------------------------------------------


class FakeTensor:
    """Carries what the router reads: shape and dtype."""

    def __init__(self, *shape: int, dtype: str = "torch.bfloat16") -> None:
        self.shape = shape
        self.dtype = dtype


class FakeWorkspace:
    def __init__(self, *, max_batch: int, max_tokens: int, num_heads: int, device: Any) -> None:
        self.limits = SimpleNamespace(
            max_batch=max_batch, max_tokens=max_tokens, num_heads=num_heads
        )
        self.device = device


class FakeApi:
    MAX_BATCH_LIMIT = 4096
    VerifyWorkspace = FakeWorkspace

    def __init__(self, with_plan: bool = False) -> None:
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
        self.plans: list[tuple[Any, ...]] = []
        if with_plan:
            self.plan = self._plan

    def extend_attention_fwd(self, *args: Any, **kwargs: Any) -> None:
        self.calls.append((args, kwargs))

    def _plan(self, *args: Any) -> None:
        self.plans.append(args)


def make_router(layout_version: str = "0.5.10", api: FakeApi | None = None):  # type: ignore[no-untyped-def]
    from kdtree_mla.sglang.patch import VerifyRouter

    sglang_calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def original(*args: Any, **kwargs: Any) -> None:
        sglang_calls.append((args, kwargs))

    layout = versions.layout_for(layout_version)
    assert layout is not None
    router = VerifyRouter(
        original=original,
        layout=layout,
        api=api or FakeApi(),
        num_heads=8,
        num_draft_tokens=4,
        device="fake",
        max_batch=16,
    )
    return router, sglang_calls


def sglang_args(b: int = 4, d: int = 4, qk: int = 576, v: int = 512, scales: bool = True):  # type: ignore[no-untyped-def]
    """The positional arguments TritonAttnBackend.forward_extend passes (0.5.10 or 0.5.9)."""
    t = b * d
    head = (
        FakeTensor(t, 8, qk),
        FakeTensor(t, 1, qk),
        FakeTensor(t, 1, v),
        FakeTensor(t, 8, v),
        FakeTensor(1000, 1, qk),
        FakeTensor(1000, 1, v),
        FakeTensor(b + 1, dtype="torch.int32"),
        FakeTensor(b + 1, dtype="torch.int32"),
        FakeTensor(50, dtype="torch.int64"),
        FakeTensor(200, dtype="torch.bool"),
        True,
        FakeTensor(b + 1, dtype="torch.int64"),
        d,
    )
    tail = (1.0, 1.0, 0.125) if scales else (0.125,)
    kwargs = dict(
        logit_cap=0.0,
        sliding_window_size=-1,
        sinks=None,
        window_kv_offsets=None,
        xai_temperature_len=-1,
    )
    return head + tail, kwargs


def test_router_leaves_non_verify_steps_on_sglang() -> None:
    router, sglang_calls = make_router()
    args, kwargs = sglang_args()
    router(*args, **kwargs)  # no step begun
    router.begin_step(False)
    router(*args, **kwargs)
    assert len(sglang_calls) == 2 and router.api.calls == []
    assert sglang_calls[0] == (args, kwargs)  # untouched


@pytest.mark.parametrize("version", ["0.5.10", "0.5.9"])
def test_router_sends_verify_calls_to_the_kernel_with_the_right_scale(version: str) -> None:
    router, sglang_calls = make_router(version)
    args, kwargs = sglang_args(scales=version == "0.5.10")
    router.begin_step(True)
    router(*args, **kwargs)
    assert sglang_calls == []
    ((call_args, call_kwargs),) = router.api.calls
    assert call_args[:13] == args[:13]
    assert call_args[13] == 0.125  # sm_scale, wherever the version put it
    assert call_kwargs == {"workspace": router.workspace}
    assert router.kernel_calls == 1


def test_router_falls_back_per_call() -> None:
    router, sglang_calls = make_router()
    router.begin_step(True)
    args, kwargs = sglang_args()
    router(*args, **{**kwargs, "logit_cap": 30.0})
    router(*sglang_args(qk=192, v=128)[0], **kwargs)
    router(*sglang_args(b=17)[0], **kwargs)  # more than the workspace holds
    assert len(sglang_calls) == 3 and router.api.calls == []
    assert len(router.refusals) == 3


def test_router_sizes_the_workspace_for_the_maximum_once_and_grows_before_capture() -> None:
    router, _ = make_router()
    first = router.workspace
    assert (first.limits.max_batch, first.limits.max_tokens) == (16, 64)
    router.ensure_capacity(8)
    assert router.workspace is first
    router.ensure_capacity(32)
    assert router.workspace.limits.max_batch == 32 and router.workspace.limits.max_tokens == 128


def test_router_plans_once_per_step_when_the_api_can() -> None:
    api = FakeApi(with_plan=True)
    router, _ = make_router(api=api)
    router.plan("qo", "kv")
    assert api.plans == [(router.workspace, "qo", "kv")]
    plain, _ = make_router()
    plain.plan("qo", "kv")  # no plan in the API: nothing to do, no error


# --- probing the kernel package --------------------------------------------------------------


@pytest.mark.parametrize(
    ("archs", "supported", "expected"),
    [
        ([], (True, ""), (None, None)),  # no build information: unknown, not "built for nothing"
        (["sm_90", "sm_120a"], (True, ""), (None, (90, 120))),
        (["sm_120"], (False, "extension built for sm_120, device is sm_90"), None),
    ],
)
def test_probe_kernel_reads_the_api_availability_probes(
    monkeypatch: pytest.MonkeyPatch, archs: list[str], supported: tuple[bool, str], expected: Any
) -> None:
    import kdtree_mla
    from kdtree_mla.sglang import facts

    fake = SimpleNamespace(
        load=lambda: None, compiled_archs=lambda: archs, device_supported=lambda dev: supported
    )
    monkeypatch.setitem(sys.modules, "kdtree_mla.api", fake)
    monkeypatch.setattr(kdtree_mla, "api", fake, raising=False)
    monkeypatch.setattr(facts, "device_arch_index", lambda gpu: 0)
    error, got_archs = facts.probe_kernel(0)
    if expected is None:
        assert error == supported[1]
    else:
        assert (error, got_archs) == expected


def test_probe_kernel_reports_a_missing_extension(monkeypatch: pytest.MonkeyPatch) -> None:
    import kdtree_mla
    from kdtree_mla.sglang import facts

    def load() -> None:
        raise ImportError("kdtree_mla._C is not available")

    fake = SimpleNamespace(load=load)
    monkeypatch.setitem(sys.modules, "kdtree_mla.api", fake)
    monkeypatch.setattr(kdtree_mla, "api", fake, raising=False)
    error, archs = facts.probe_kernel(None)
    assert error == "ImportError: kdtree_mla._C is not available" and archs is None


# --- calls the kernel refuses loudly (score_mod, aux_tensors, lse_extend, skip_prefix) -------


@pytest.mark.parametrize(
    "name, value",
    [
        ("score_mod", object()),
        ("aux_tensors", [1]),
        ("lse_extend", FakeTensor(16, 8)),
        ("skip_prefix", True),
    ],  # fmt: skip
)
def test_router_refuses_what_the_kernel_does_not_compute(name: str, value: Any) -> None:
    from kdtree_mla.sglang.releases import UnsupportedCall

    router, sglang_calls = make_router()
    args, kwargs = sglang_args()
    router.begin_step(True)
    with pytest.raises(UnsupportedCall, match=name):
        router(*args, **kwargs, **{name: value})
    assert router.api.calls == [] and sglang_calls == []  # neither kernel ran
    router.begin_step(False)  # outside a verify step the call is SGLang's own business
    router(*args, **kwargs, **{name: value})
    assert len(sglang_calls) == 1


def test_router_takes_the_newest_keywords_at_their_defaults() -> None:
    """0.5.23's forward_extend passes page_size, score_mod, aux_tensors, extend_seq_lens_cpu."""
    router, sglang_calls = make_router()
    args, kwargs = sglang_args()
    newest = dict(page_size=1, score_mod=None, aux_tensors=None, extend_seq_lens_cpu=[4, 4, 4, 4],
                  lse_extend=None, skip_prefix=False, skip_extend=False, identity_kv_indices=False)  # fmt: skip
    router.begin_step(True)
    router(*args, **kwargs, **newest)
    assert len(router.api.calls) == 1 and sglang_calls == []
    assert router.api.calls[0][0][13] == 0.125  # sm_scale after the KV scales


@pytest.mark.parametrize(
    "change", [{"page_size": 16}, {"skip_extend": True}, {"identity_kv_indices": True}]
)
def test_router_leaves_other_keyword_calls_on_sglang(change: dict[str, Any]) -> None:
    router, sglang_calls = make_router()
    args, kwargs = sglang_args()
    router.begin_step(True)
    router(*args, **kwargs, **change)
    assert router.api.calls == [] and len(sglang_calls) == 1
    assert len(router.refusals) == 1


def test_router_sends_fp8_pools_with_the_layer_descales() -> None:
    torch = pytest.importorskip("torch", reason="fp8 dtypes come from torch")
    from kdtree_mla.sglang.patch import VerifyRouter

    sglang_calls: list[Any] = []
    layout = versions.layout_for("0.5.10")
    assert layout is not None

    def make(fp8_kv: bool) -> VerifyRouter:
        return VerifyRouter(original=lambda *a, **k: sglang_calls.append(a), layout=layout,
                            api=FakeApi(), num_heads=8, num_draft_tokens=4, device="fake",
                            max_batch=16, fp8_kv=fp8_kv)  # fmt: skip

    args, kwargs = sglang_args()
    args = (*args[:4], FakeTensor(1000, 1, 576, dtype=torch.float8_e4m3fn), *args[5:13],
            0.37, 0.37, 0.125)  # fmt: skip
    router = make(fp8_kv=True)
    router.begin_step(True)
    router(*args, **kwargs)
    assert sglang_calls == [] and len(router.api.calls) == 1
    call_args, call_kwargs = router.api.calls[0]
    assert call_args[13] == 0.125 and call_kwargs["k_descale"] == call_kwargs["v_descale"] == 0.37
    refusing = make(fp8_kv=False)  # a release whose own MLA path does not read fp8
    refusing.begin_step(True)
    refusing(*args, **kwargs)
    assert refusing.api.calls == [] and len(sglang_calls) == 1 and refusing.refusals


def test_reads_fp8_mla_is_read_from_the_release_source() -> None:
    from kdtree_mla.sglang import backend

    class Old:
        def forward_extend(self, k, layer):  # type: ignore[no-untyped-def]
            if self.use_mla:  # Triton MLA currently doesn't support quantized kv cache
                return k
            k_descale = layer.k_scale
            return k_descale

    class New:
        def forward_extend(self, k, layer):  # type: ignore[no-untyped-def]
            k_scaled = k / layer.k_scale
            k_descale = layer.k_scale_float
            return k_scaled, k_descale

    assert backend.reads_fp8_mla(New) and not backend.reads_fp8_mla(Old)
    assert not backend.reads_fp8_mla(type("NoSource", (), {"forward_extend": len}))
