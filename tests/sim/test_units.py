"""Pure parts of the simulator: launch args, env settings, verify-path choice, token
outputs and request timing plans."""

from __future__ import annotations

import pytest

from kctl.sim import args as sim_args
from kctl.sim import calibration, kernel, plan, settings, tokens

CAL = calibration.load()


# -- launch args ---------------------------------------------------------------------------
def _parse(argv: list[str], version: str = "0.5.10") -> sim_args.ServerArgs:
    return sim_args.parse(["--model-path", "/m", *argv], version)


def test_args_aliases_and_abbreviations() -> None:
    a = sim_args.parse(
        [
            "--model", "/models/kimi", "--tp", "8", "--attention-backend", "triton",
            "--disable-cuda-graph", "--mem-fraction-static", "0.85", "--trust-remote-code",
            "--speculative-algorithm", "NEXTN", "--speculative-draft-model", "/d",
            "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
            "--speculative-num-draft-tokens", "4", "--max-running", "7",
        ]
    )  # fmt: skip
    assert a.model_path == "/models/kimi"
    assert a.tp_size == 8
    assert not a.cuda_graphs
    assert a.mem_fraction_static == 0.85
    assert a.trust_remote_code
    assert a.speculative_algorithm == "EAGLE"  # SGLang aliases NEXTN to EAGLE
    assert a.speculative_draft_model_path == "/d"
    assert a.num_draft_tokens == 4
    assert a.max_running_requests == 7  # an abbreviation, as SGLang's parser reads it


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--enable-foo"], "unrecognized arguments: --enable-foo"),
        (["--attention-backend", "nope"], "invalid choice: 'nope'"),
        (["--attention-backend", "kdtree"], "invalid choice: 'kdtree'"),  # no plugins
    ],
)
def test_args_the_release_refuses(argv: list[str], message: str) -> None:
    with pytest.raises(sim_args.ArgsError, match=f"SGLang 0.5.10: .*{message}"):
        _parse(argv)


def test_args_as_the_newest_release_spells_them() -> None:
    argv = [
        "--tp-size", "4", "--attention-backend", "kdtree", "--cuda-graph-max-bs-decode", "16",
    ]  # fmt: skip
    a = _parse(argv, "0.5.23")
    assert (a.tp_size, a.attention_backend, a.cuda_graph_max_bs, a.cuda_graphs) == (
        4, "kdtree", 16, True,
    )  # fmt: skip
    eager = ["--cuda-graph-backend-decode", "disabled", "--cuda-graph-backend-prefill", "disabled"]
    assert not _parse(eager, "0.5.23").cuda_graphs
    with pytest.raises(sim_args.ArgsError, match="ambiguous option: --cuda-graph-max-bs"):
        _parse(["--cuda-graph-max-bs", "16"], "0.5.23")  # what 0.5.23 itself says
    with pytest.raises(sim_args.ArgsError, match="KCTL_SIM_SGLANG_VERSION: SGLang 0.4.0"):
        _parse([], "0.4.0")


def test_args_model_path_is_required() -> None:
    with pytest.raises(sim_args.ArgsError, match="required: --model-path"):
        sim_args.parse([])


def test_args_defaults() -> None:
    a = _parse([])
    assert (a.host, a.port, a.tp_size, a.cuda_graphs, a.speculative) == (
        "127.0.0.1", 30000, 1, True, False,
    )  # fmt: skip
    assert a.effective_attention_backend == "triton"
    assert a.num_draft_tokens == 1


def test_args_bad_value_raises() -> None:
    with pytest.raises(sim_args.ArgsError, match="--port"):
        _parse(["--port", "eighty"])


def test_draft_tokens_default_to_steps_plus_one() -> None:
    a = _parse(["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "5"])
    assert a.num_draft_tokens == 6


# -- settings ------------------------------------------------------------------------------
def test_settings_from_env() -> None:
    s = settings.from_env(
        {
            "KCTL_SIM_SPEEDUP": "50",
            "KCTL_SIM_LOAD_S": "10",
            "KCTL_SIM_FAULT": "hang, wrong_output",
            "KDTREE_VERIFY": "1",
            "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION": "false",
        }
    )
    assert s.speedup == 50 and s.load_s == 10
    assert s.faults == {"hang", "wrong_output"}
    assert s.kdtree_verify and not s.health_generation
    assert s.compress(100) == 2
    assert dict(s.env)["KDTREE_VERIFY"] == "1"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"KCTL_SIM_FAULT": "explode"}, "unknown fault"),
        ({"KCTL_SIM_SPEEDUP": "0"}, "KCTL_SIM_SPEEDUP"),
        ({"KCTL_SIM_SPEEDUP": "fast"}, "must be a number"),
        ({"KCTL_SIM_NOISE": "-1"}, "KCTL_SIM_NOISE"),
        ({"SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION": "maybe"}, "HEALTH_ENDPOINT"),
        ({"KCTL_SIM_SEED": "x"}, "KCTL_SIM_SEED"),
    ],
)
def test_settings_errors_name_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(settings.SettingsError, match=message):
        settings.from_env(env)


# -- verify path ---------------------------------------------------------------------------
def _choose(argv: list[str], env: dict[str, str]) -> kernel.VerifyChoice:
    return kernel.choose(_parse(argv), settings.from_env(env))


def test_no_speculative_decoding_declines() -> None:
    c = _choose([], {"KDTREE_VERIFY": "1"})
    assert c.path == "triton" and c.declined_reason is not None
    assert "speculative decoding is off" in c.declined_reason


def test_no_kernel_env_no_line() -> None:
    assert _choose([], {}) == kernel.VerifyChoice("triton", None)


SPEC = ["--speculative-algorithm", "EAGLE3", "--speculative-num-draft-tokens", "4"]


def test_only_exactly_1_turns_the_kernel_on() -> None:
    for value in ("true", "yes", "0", ""):
        assert _choose(SPEC, {"KDTREE_VERIFY": value}).line is None


def test_kernel_active_on_triton() -> None:
    c = _choose(["--attention-backend", "triton", *SPEC], {"KDTREE_VERIFY": "1"})
    assert c.path == "kdtree"
    assert c.line == (
        "kdtree-verify: active kernel=kdtree_mla-0.1.0 arch=sm_120 sglang=0.5.10 path=startup-hook"
    )


def test_kernel_active_on_fp8_where_the_release_reads_it() -> None:
    argv = ["--attention-backend", "kdtree", "--kv-cache-dtype", "fp8_e5m2", *SPEC]
    c = kernel.choose(
        _parse(argv, "0.5.23"), settings.from_env({"KCTL_SIM_SGLANG_VERSION": "0.5.23"})
    )
    assert c.path == "kdtree" and c.line is not None and "path=plugin" in c.line


@pytest.mark.parametrize(
    ("argv", "env", "reason"),
    [
        (["--attention-backend", "flashinfer"], {}, "on the flashinfer attention backend"),
        (["--kv-cache-dtype", "fp8_e4m3"], {}, "0.5.10's Triton MLA path does not read"),
        (["--kv-cache-dtype", "fp4_e2m1"], {}, "fp4_e2m1 is not bf16 or fp8"),
        (["--page-size", "16"], {}, "page size 16"),
        (["--speculative-num-draft-tokens", "32"], {}, "32 draft tokens"),
        ([], {"KCTL_SIM_FAULT": "kernel_declined"}, "simulated decline"),
    ],
)
def test_kernel_declines(argv: list[str], env: dict[str, str], reason: str) -> None:
    c = _choose([*SPEC, *argv], {"KDTREE_VERIFY": "1", **env})
    assert c.path == "triton"
    assert c.line is not None and c.line.startswith('kdtree-verify: declined reason="')
    assert reason in c.line and c.line.endswith("sglang=0.5.10")


# -- tokens --------------------------------------------------------------------------------
def test_greedy_ids_are_deterministic_and_prefix_stable() -> None:
    prompt = list(range(100, 600))
    a = tokens.output_ids(prompt, 32)
    assert a == tokens.output_ids(prompt, 32)
    assert tokens.output_ids(prompt, 8) == a[:8]
    assert all(0 <= i < tokens.VOCAB_SIZE for i in a)
    assert tokens.output_ids(prompt[:-1], 32) != a


def test_wrong_output_and_sampling_differ() -> None:
    prompt = [1, 2, 3]
    assert tokens.output_ids(prompt, 16, wrong=True) != tokens.output_ids(prompt, 16)
    assert tokens.output_ids(prompt, 16, nonce=1) != tokens.output_ids(prompt, 16, nonce=2)


def test_tokenize_is_utf8_bytes() -> None:
    assert tokens.tokenize("Hé") == [72, 195, 169]
    assert tokens.detokenize([5, 6]) == tokens.detokenize([5]) + tokens.detokenize([6])


# -- timing plans --------------------------------------------------------------------------
def _plan(**kw: object) -> plan.RequestPlan:
    base: dict[str, object] = dict(
        calibration=CAL,
        verify_path="triton",
        cuda_graphs=False,
        prompt_tokens=23000,
        cached_tokens=0,
        max_new_tokens=64,
        speculative=False,
        num_draft_tokens=1,
    )
    base.update(kw)
    return plan.plan_request(**base)  # type: ignore[arg-type]


def test_plain_decode_plan() -> None:
    p = _plan()
    assert p.ttft_s == CAL.ttft_s(23000)
    assert [s.tokens for s in p.steps] == [1] * 64
    rate = (64 - 1) / (p.steps[-1].at_s - p.steps[0].at_s)
    assert rate == pytest.approx(6.7)
    assert p.spec_verify_ct == 0


def test_speculative_plan_delivers_cycled_accept_lengths() -> None:
    p = _plan(speculative=True, num_draft_tokens=4, max_new_tokens=20, verify_path="kdtree")
    assert [s.tokens for s in p.steps] == [1, 2, 3, 4, 2, 3, 4, 1]
    assert sum(s.tokens for s in p.steps) == 20
    assert p.spec_verify_ct == 7
    rate = (20 - 1) / (p.steps[-1].at_s - p.steps[0].at_s)
    assert rate == pytest.approx(13.6)
    assert plan.avg_accept_length(4) == 3.0


def test_slowdown_noise_and_cache() -> None:
    assert _plan(slowdown=2.0).decode_tps == pytest.approx(6.7 / 2)
    assert _plan(cached_tokens=22000).ttft_s == pytest.approx(CAL.ttft_s(1000))
    assert plan.noise_factor(0.0, 1, 5) == 1.0
    f = plan.noise_factor(0.1, 7, 3)
    assert f == plan.noise_factor(0.1, 7, 3) != plan.noise_factor(0.1, 7, 4)
    factors = [plan.noise_factor(0.1, 0, i) for i in range(400)]
    mean = sum(factors) / len(factors)
    sd = (sum((x - mean) ** 2 for x in factors) / len(factors)) ** 0.5
    assert mean == pytest.approx(1.0, abs=0.02) and sd == pytest.approx(0.1, rel=0.2)


def test_zero_new_tokens() -> None:
    p = _plan(max_new_tokens=0)
    assert p.completion_tokens == 0 and [s.tokens for s in p.steps] == [0]


# -- isolation -----------------------------------------------------------------------------
def test_simulator_imports_only_the_stdlib_and_kctl_sim() -> None:
    """It is copied into test images with kctl.sglang (the release table) and kctl.errors
    only: no other kctl module, no third-party package may be imported by any of its
    modules."""
    import subprocess
    import sys

    from tests.sim.conftest import REPO

    code = (
        "import sys; before = set(sys.modules)\n"
        "import kctl.sim.lifecycle, kctl.sim.__main__\n"
        "print('\\n'.join(sorted(set(sys.modules) - before)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    ours = {m for m in out if m.split(".")[0] == "kctl"}
    carried = ("kctl.sim", "kctl.sglang", "kctl.errors")
    assert ours and all(m == "kctl" or m.startswith(carried) for m in ours), ours
    stdlib = sys.stdlib_module_names
    foreign = {m for m in out if m.split(".")[0] not in stdlib and m.split(".")[0] != "kctl"}
    assert not foreign, foreign


@pytest.mark.parametrize(
    ("version", "names"),
    [
        ("0.5.10", {"spec_accept_token_num", "spec_draft_token_num"}),
        ("0.5.11", {"spec_accepted_drafts", "spec_proposed_drafts"}),
        ("0.5.14", {"spec_accepted_drafts", "spec_proposed_drafts", "spec_num_correct_drafts", "spec_num_proposed_drafts"}),
        ("0.5.23", {"spec_num_correct_drafts", "spec_num_proposed_drafts"}),
    ],
)  # fmt: skip
def test_spec_fields_are_the_release_own(version: str, names: set[str]) -> None:
    from kctl.sglang.releases import release

    p = plan.plan_request(
        calibration=CAL, verify_path="triton", cuda_graphs=True, prompt_tokens=64,
        cached_tokens=0, max_new_tokens=20, speculative=True, num_draft_tokens=4,
    )  # fmt: skip
    fields = plan.spec_fields(release(version).spec_metrics, p)
    assert set(fields) == {"spec_verify_ct", "spec_accept_length", "spec_accept_rate"} | names
    assert fields["spec_accept_length"] == pytest.approx(20 / 7)
    low = plan.spec_fields(release(version).spec_metrics, p, acceptance_factor=0.9)
    assert low["spec_verify_ct"] == 8


def test_kernel_path_by_release() -> None:
    spec = ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3"]
    env = {"KCTL_SIM_SGLANG_VERSION": "0.5.23"}
    plugin = kernel.choose(
        _parse(["--attention-backend", "kdtree", *spec], "0.5.23"), settings.from_env(env)
    )
    assert plugin.path == "kdtree"
    assert plugin.line is not None and plugin.line.endswith("sglang=0.5.23 path=plugin")
    hook = kernel.choose(
        _parse(["--attention-backend", "triton", *spec], "0.5.23"),
        settings.from_env({**env, "KDTREE_VERIFY": "1"}),
    )
    assert hook.path == "triton"
    assert hook.declined_reason is not None and "--attention-backend kdtree" in hook.declined_reason
