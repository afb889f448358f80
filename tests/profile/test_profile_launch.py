"""server_args/launch_spec details beyond the shipped profiles' argv."""

from __future__ import annotations

from collections.abc import Callable

from kctl.launch import connect_host, launch_spec, server_args
from kctl.profile import load_profile
from kctl.profile.model import ServerSpec, SpeculativeSpec

Write = Callable[[str, str], str]


def test_minimal_server_args() -> None:
    assert server_args(ServerSpec(model_path="/m")) == (
        "--model-path", "/m",
        "--host", "127.0.0.1",
        "--port", "30000",
        "--tp-size", "1",
        "--attention-backend", "triton",
        "--trust-remote-code",
        "--kv-cache-dtype", "auto",
    )  # fmt: skip


def test_every_option_in_order_and_extra_args_last() -> None:
    server = ServerSpec(
        model_path="/m",
        served_model_name="s",
        host="0.0.0.0",
        port=1234,
        tp=2,
        attention_backend="flashinfer",
        cuda_graphs=False,
        cuda_graph_max_bs=16,  # dropped: no graphs to size
        mem_fraction_static=0.875,
        trust_remote_code=False,
        kv_cache_dtype="fp8_e4m3",
        speculative=SpeculativeSpec(
            algorithm="NGRAM", num_steps=2, eagle_topk=4, num_draft_tokens=8
        ),
        extra_args=("--log-level", "debug"),
    )
    assert server_args(server) == (
        "--model-path", "/m",
        "--served-model-name", "s",
        "--host", "0.0.0.0",
        "--port", "1234",
        "--tp-size", "2",
        "--attention-backend", "flashinfer",
        "--disable-cuda-graph",
        "--mem-fraction-static", "0.875",
        "--kv-cache-dtype", "fp8_e4m3",
        "--speculative-algorithm", "NGRAM",
        "--speculative-num-steps", "2",
        "--speculative-eagle-topk", "4",
        "--speculative-num-draft-tokens", "8",
        "--log-level", "debug",
    )  # fmt: skip


def test_connect_host() -> None:
    assert [connect_host(h) for h in ("0.0.0.0", "::", "10.0.0.5", "127.0.0.1")] == [
        "127.0.0.1", "127.0.0.1", "10.0.0.5", "127.0.0.1",
    ]  # fmt: skip


def test_simulator_image_gets_the_simulator_env_without_simulate(write: Write) -> None:
    path = write(
        "t.yaml",
        "extends: ok.yaml\nimage: {install_simulator: true}\nsimulator: {speedup: 100, load_s: 5}\n"
        "server: {env: {KCTL_SIM_FAULT: hang}}\n",
    )
    spec = launch_spec(load_profile(path), "d", simulate=False, image="img:1")
    assert spec.argv[:3] == ("python3", "-m", "sglang.launch_server")
    assert spec.env == (
        ("KCTL_SIM_FAULT", "hang"),
        ("KCTL_SIM_LOAD_S", "5"),
        ("KCTL_SIM_SGLANG_VERSION", "0.5.10"),
        ("KCTL_SIM_SPEEDUP", "100"),
    )
    assert spec.image == "img:1"


def test_real_launch_passes_the_profile_env_only(write: Write) -> None:
    path = write("t.yaml", "extends: ok.yaml\nserver: {env: {KCTL_SIM_FAULT: hang}}\n")
    assert launch_spec(load_profile(path), "d", simulate=False).env == (("KCTL_SIM_FAULT", "hang"),)
