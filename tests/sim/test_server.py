"""The simulator as a real process speaking SGLang's HTTP protocol: start-up order, info
endpoints, /generate (plain and SSE), determinism, prefix cache, calibrated speeds, signals."""

from __future__ import annotations

import json
import signal
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.sim.conftest import READY, decode_rate, port_open

KIMI_ARGS = (
    "--model-path", "/models/Kimi-K2.6", "--tp-size", "8", "--attention-backend", "triton",
    "--mem-fraction-static", "0.85", "--trust-remote-code", "--kv-cache-dtype", "auto",
    "--served-model-name", "kimi-k2.6", "--cuda-graph-max-bs", "16",
    "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/models/eagle3",
    "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
    "--speculative-num-draft-tokens", "4",
)  # fmt: skip


def _chunks(events: list[tuple[float, str]]) -> list[dict[str, Any]]:
    assert events[-1][1] == "[DONE]"
    return [json.loads(p) for _, p in events[:-1]]


def test_port_closed_while_loading_then_503_then_200(start_sim: Any) -> None:
    # speedup 1 so the warm-up generation (~0.35 s) leaves /health visibly at 503
    sim = start_sim(env={"KCTL_SIM_SPEEDUP": "1", "KCTL_SIM_LOAD_S": "0.6"})
    sim.wait_for_log("Load weight begin")
    assert not port_open(sim.port)
    seen: list[int] = []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (not seen or seen[-1] != 200):
        try:
            status, _ = sim.request("GET", "/health", timeout=2)
            seen.append(status)
        except OSError:
            assert not seen, "port closed again after it opened"
        time.sleep(0.01)
    assert seen[0] == 503 and seen[-1] == 200, seen
    assert set(seen) == {503, 200}
    log = sim.wait_for_log(READY)
    order = [
        "Load weight end",
        "KV Cache is allocated",
        "Capture cuda graph end",
        "Uvicorn running",
    ]
    positions = [log.index(x) for x in order]
    assert positions == sorted(positions)
    # the warm-up is SGLang's own request, sent before the readiness line
    assert log.index('"POST /generate HTTP/1.1" 200') < log.index(READY)


def test_eager_startup_skips_graph_capture(start_sim: Any) -> None:
    sim = start_sim("--disable-cuda-graph")
    log = sim.wait_for_log(READY)
    assert "Capture cuda graph" not in log
    assert "kdtree-verify" not in log  # no KDTREE_VERIFY, no line


def test_info_endpoints_reflect_args_and_env(start_sim: Any) -> None:
    sim = start_sim(*KIMI_ARGS, "--log-level", "info", env={"KDTREE_VERIFY": "1"})
    log = sim.wait_for_log(READY)
    active = "kdtree-verify: active kernel=kdtree_mla-0.1.0 arch=sm_120 sglang=0.5.10"
    assert active in log and log.index(active) < log.index("Uvicorn running")
    for path in ("/server_info", "/get_server_info"):
        info = sim.get_json(path)
        assert info["model_path"] == "/models/Kimi-K2.6"
        assert info["tp_size"] == 8
        assert info["attention_backend"] == "triton"
        assert info["mem_fraction_static"] == 0.85
        assert info["trust_remote_code"] is True
        assert info["cuda_graph_max_bs"] == 16
        assert info["disable_cuda_graph"] is False and info["cuda_graphs"] is True
        assert info["speculative_algorithm"] == "EAGLE3"
        assert info["speculative_num_draft_tokens"] == 4
        assert info["verify_path"] == "kdtree" and info["kdtree_verify"] is True
        assert info["env"]["KDTREE_VERIFY"] == "1"
        assert info["version"] == "0.5.10"
        assert info["log_level"] == "info"
        assert info["internal_states"][0]["avg_spec_accept_length"] == 3.0
        assert info["status"] == "up"
    for path in ("/model_info", "/get_model_info"):
        model = sim.get_json(path)
        assert model["model_path"] == "/models/Kimi-K2.6"
        assert model["is_generation"] is True
        assert model["served_model_name"] == "kimi-k2.6"


def test_stream_format_and_cumulative_counters(start_sim: Any) -> None:
    sim = start_sim("--disable-cuda-graph")
    sim.wait_ready()
    prompt = list(range(1000, 1300))
    body = {"input_ids": prompt, "sampling_params": {"max_new_tokens": 12, "temperature": 0}}
    events, raw = sim.stream({**body, "rid": "req-1"})
    # SSE framing exactly: "data: {json}\n\n" ... "data: [DONE]\n\n"
    assert raw.endswith(b"data: [DONE]\n\n")
    assert all(block.startswith(b"data: ") for block in raw.split(b"\n\n") if block)
    chunks = _chunks(events)
    counts = [c["meta_info"]["completion_tokens"] for c in chunks]
    assert counts == list(range(1, 13))
    assert all(c["meta_info"]["finish_reason"] is None for c in chunks[:-1])
    last = chunks[-1]["meta_info"]
    assert last["finish_reason"]["type"] == "length"
    assert last["prompt_tokens"] == 300 and last["id"] == "req-1"
    assert last["e2e_latency"] > 0
    assert "e2e_latency" not in chunks[0]["meta_info"]
    # cumulative output (SGLang 0.5.10 without --incremental-streaming-output)
    assert len(chunks[-1]["output_ids"]) == 12
    assert chunks[-1]["output_ids"][:5] == chunks[4]["output_ids"]
    status, plain = sim.generate(body)
    assert status == 200
    assert plain["output_ids"] == chunks[-1]["output_ids"]
    assert plain["text"] == chunks[-1]["text"]
    assert plain["meta_info"]["completion_tokens"] == 12


def test_incremental_streaming_output(start_sim: Any) -> None:
    sim = start_sim("--incremental-streaming-output")
    sim.wait_ready()
    body = {"input_ids": [5] * 50, "sampling_params": {"max_new_tokens": 6, "temperature": 0}}
    chunks = _chunks(sim.stream(body)[0])
    assert [len(c["output_ids"]) for c in chunks] == [1] * 6
    _, plain = sim.generate(body)
    assert plain["output_ids"] == [i for c in chunks for i in c["output_ids"]]


def test_speculative_chunks_carry_several_tokens(start_sim: Any) -> None:
    sim = start_sim(*KIMI_ARGS)
    sim.wait_ready()
    body = {"input_ids": list(range(64)), "sampling_params": {"max_new_tokens": 20}}
    chunks = _chunks(sim.stream({**body, "sampling_params": {"max_new_tokens": 20}})[0])
    counts = [c["meta_info"]["completion_tokens"] for c in chunks]
    assert counts == [1, 3, 6, 10, 12, 15, 19, 20]
    last = chunks[-1]["meta_info"]
    assert last["spec_verify_ct"] == 7
    assert last["spec_accept_length"] == pytest.approx(20 / 7)
    assert last["spec_draft_token_num"] == 21


def test_text_prompt_batch_and_errors(start_sim: Any) -> None:
    sim = start_sim()
    sim.wait_ready()
    status, out = sim.generate({"text": "Hello", "sampling_params": {"max_new_tokens": 3}})
    assert status == 200 and out["meta_info"]["prompt_tokens"] == 5
    status, raw = sim.request("PUT", "/generate", {"text": "Hello"})
    assert status == 200 and json.loads(raw)["meta_info"]["completion_tokens"] == 128
    status, batch = sim.generate({"input_ids": [[1, 2], [3, 4, 5]], "sampling_params": {}})
    assert status == 200 and [b["meta_info"]["prompt_tokens"] for b in batch] == [2, 3]
    assert batch[0]["meta_info"]["completion_tokens"] == 128  # SGLang's default
    bad: dict[str, Any]
    for bad in (
        {"sampling_params": {}},
        {"text": "a", "input_ids": [1]},
        {"input_ids": [1, -2]},
        {"input_ids": [1], "sampling_params": {"max_new_tokens": -1}},
        {"input_ids": list(range(10)) * 30000},
    ):
        status, err = sim.generate(bad)
        assert status == 400 and err["error"]["message"], bad
    status, raw = sim.request("GET", "/nope")
    assert status == 404
    status, raw = sim.request("POST", "/generate", None)
    assert status == 400


def test_greedy_outputs_identical_across_paths_and_graph_modes(start_sim: Any) -> None:
    triton_graphs = start_sim(*KIMI_ARGS)
    kdtree_eager = start_sim(*KIMI_ARGS, "--disable-cuda-graph", env={"KDTREE_VERIFY": "1"})
    triton_graphs.wait_ready()
    kdtree_eager.wait_ready()
    assert kdtree_eager.get_json("/server_info")["verify_path"] == "kdtree"
    prompts = [list(range(i, i + 200)) for i in (0, 7, 99)]
    for p in prompts:
        body = {"input_ids": p, "sampling_params": {"max_new_tokens": 16, "temperature": 0}}
        _, a = triton_graphs.generate(body)
        _, b = kdtree_eager.generate(body)
        _, again = triton_graphs.generate(body)
        assert a["output_ids"] == b["output_ids"] == again["output_ids"]
        short = {"input_ids": p, "sampling_params": {"max_new_tokens": 4, "temperature": 0}}
        assert kdtree_eager.generate(short)[1]["output_ids"] == a["output_ids"][:4]
    outs = {tuple(triton_graphs.generate({"input_ids": p})[1]["output_ids"]) for p in prompts}
    assert len(outs) == 3  # different prompts, different outputs


def test_prefix_cache_and_flush(start_sim: Any) -> None:
    sim = start_sim()
    sim.wait_ready()
    body = {"input_ids": list(range(1000)), "sampling_params": {"max_new_tokens": 1}}
    assert sim.generate(body)[1]["meta_info"]["cached_tokens"] == 0
    assert sim.generate(body)[1]["meta_info"]["cached_tokens"] == 960  # whole 64-token blocks
    status, text = sim.request("POST", "/flush_cache")
    assert status == 200 and b"Cache flushed" in text
    assert sim.generate(body)[1]["meta_info"]["cached_tokens"] == 0
    nocache = start_sim("--disable-radix-cache")
    nocache.wait_ready()
    nocache.generate(body)
    assert nocache.generate(body)[1]["meta_info"]["cached_tokens"] == 0


def _rate(sim: Any, context: int, tokens: int) -> float:
    body = {
        "input_ids": [(i * 7 + context) % 150000 for i in range(context)],
        "sampling_params": {"max_new_tokens": tokens, "temperature": 0, "ignore_eos": True},
    }
    events, _ = sim.stream(body)
    return decode_rate(events)


def test_kdtree_vs_triton_eager_speeds_follow_the_measurement(start_sim: Any) -> None:
    env = {"KCTL_SIM_SPEEDUP": "5"}
    spec = KIMI_ARGS + ("--disable-cuda-graph",)
    triton = start_sim(*spec, env=env)
    kdtree = start_sim(*spec, env={**env, "KDTREE_VERIFY": "1"})
    triton.wait_ready()
    kdtree.wait_ready()

    def pair(context: int, t_tokens: int, k_tokens: int) -> tuple[float, float]:
        # both at once, so a busy machine slows both clients alike
        with ThreadPoolExecutor(2) as pool:
            t = pool.submit(_rate, triton, context, t_tokens)
            k = pool.submit(_rate, kdtree, context, k_tokens)
            return t.result() / 5, k.result() / 5

    # 5x: 23k triton 6.7 tok/s -> 33.5/s, kdtree 68/s; 5.7k 190/s vs 176/s; ~1.3-1.8 s each
    t23, k23 = pair(23000, 60, 120)
    assert t23 == pytest.approx(6.7, rel=0.1), (t23, k23)
    assert k23 / t23 == pytest.approx(13.6 / 6.7, rel=0.08), (t23, k23)
    t57, k57 = pair(5700, 240, 240)
    assert k57 < t57, (t57, k57)
    assert k57 / t57 == pytest.approx(35.2 / 38.0, rel=0.05), (t57, k57)


def test_slowdown(start_sim: Any) -> None:
    env = {"KCTL_SIM_SPEEDUP": "20", "KCTL_SIM_SLOWDOWN": "2"}
    sim = start_sim("--disable-cuda-graph", env=env)
    sim.wait_ready()
    rate = _rate(sim, 23000, 40)
    assert rate / 20 == pytest.approx(6.7 / 2, rel=0.1)


def test_requests_are_served_concurrently(start_sim: Any) -> None:
    sim = start_sim("--disable-cuda-graph", env={"KCTL_SIM_SPEEDUP": "10"})
    sim.wait_ready()
    single_t0 = time.monotonic()
    _rate(sim, 23000, 40)
    single = time.monotonic() - single_t0
    with ThreadPoolExecutor(4) as pool:
        t0 = time.monotonic()
        rates = list(pool.map(lambda _: _rate(sim, 23000, 40), range(4)))
        together = time.monotonic() - t0
    assert together < 2 * single, (together, single)  # four at once take about as long as one
    for r in rates:
        assert r / 10 == pytest.approx(6.7, rel=0.15)


def test_noise_is_deterministic_per_seed(start_sim: Any) -> None:
    env = {"KCTL_SIM_SPEEDUP": "20", "KCTL_SIM_NOISE": "0.2", "KCTL_SIM_SEED": "3"}
    a, b = start_sim("--disable-cuda-graph", env=env), start_sim("--disable-cuda-graph", env=env)
    a.wait_ready()
    b.wait_ready()

    def speeds(sim: Any) -> list[tuple[float, float]]:
        out = []
        for _ in range(3):
            measured = _rate(sim, 23000, 30) / 20
            planned = sim.get_json("/server_info")["internal_states"][0]["last_gen_throughput"]
            out.append((measured, planned))
        return out

    sa, sb = speeds(a), speeds(b)
    assert [p for _, p in sa] == [p for _, p in sb]  # same seed, same per-request speeds
    assert len({p for _, p in sa}) == 3 and all(p != 6.7 for _, p in sa)
    for measured, planned in sa + sb:
        assert measured == pytest.approx(planned, rel=0.12)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_exits_zero_within_a_second(start_sim: Any, sig: int) -> None:
    sim = start_sim(env={"KCTL_SIM_SPEEDUP": "1", "KCTL_SIM_LOAD_S": "0.1"})
    sim.wait_ready()
    # a long request in flight must not hold the exit up
    conn = socket.create_connection(("127.0.0.1", sim.port))
    try:
        body = json.dumps({"input_ids": [1] * 90000, "sampling_params": {"max_new_tokens": 500}})
        conn.sendall(
            f"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n{body}".encode()
        )
        time.sleep(0.2)
        t0 = time.monotonic()
        sim.signal(sig)
        assert sim.wait_exit(timeout=5) == 0
        assert time.monotonic() - t0 < 1.0
    finally:
        conn.close()


def test_sigterm_while_loading(start_sim: Any) -> None:
    sim = start_sim(env={"KCTL_SIM_SPEEDUP": "1", "KCTL_SIM_LOAD_S": "30"})
    sim.wait_for_log("Load weight begin")
    t0 = time.monotonic()
    sim.signal(signal.SIGTERM)
    assert sim.wait_exit(timeout=5) == 0
    assert time.monotonic() - t0 < 1.0
    assert not port_open(sim.port)


def test_bad_arguments_and_env_exit_2(start_sim: Any) -> None:
    bad_port = start_sim("--tp-size", "many")
    assert bad_port.wait_exit() == 2
    assert "--tp-size" in bad_port.log()
    bad_fault = start_sim(env={"KCTL_SIM_FAULT": "meteor"})
    assert bad_fault.wait_exit() == 2
    assert "unknown fault(s) meteor" in bad_fault.log()


def test_port_in_use_exits_1(start_sim: Any) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        sim = start_sim(port=holder.getsockname()[1])
        assert sim.wait_exit() == 1
        assert "error while attempting to bind" in sim.log()


def test_rude_clients_never_print_a_traceback(start_sim: Any) -> None:
    sim = start_sim()
    sim.wait_ready()
    # bad Content-Length, a client that hangs up mid-stream, one that resets mid-request
    with socket.create_connection(("127.0.0.1", sim.port)) as s:
        s.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n")
        assert s.recv(100).startswith(b"HTTP/1.1 400")
    with socket.create_connection(("127.0.0.1", sim.port)) as s:
        body = json.dumps({"input_ids": [1] * 100, "stream": True})
        s.sendall(
            f"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n{body}".encode()
        )
        s.recv(10)
    with socket.create_connection(("127.0.0.1", sim.port)) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        s.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n{")
    time.sleep(0.5)
    assert sim.request("GET", "/health")[0] == 200
    assert "Traceback" not in sim.log()


def test_newest_release_spelling_and_metric_names(start_sim: Any) -> None:
    # 0.5.23 spells the graph size --cuda-graph-max-bs-decode and reports acceptance as
    # spec_num_correct_drafts/spec_num_proposed_drafts; low_acceptance keeps the tokens
    args = [a if a != "--cuda-graph-max-bs" else "--cuda-graph-max-bs-decode" for a in KIMI_ARGS]
    env = {"KCTL_SIM_SGLANG_VERSION": "0.5.23"}
    sims = [
        start_sim(*args, env=env),
        start_sim(*args, env={**env, "KCTL_SIM_FAULT": "low_acceptance"}),
    ]
    params = {"max_new_tokens": 20, "temperature": 0}
    body = {"input_ids": list(range(64)), "sampling_params": params}
    metas = []
    for sim in sims:
        sim.wait_ready()
        _, out = sim.generate(body)
        metas.append((out["output_ids"], out["meta_info"]))
    (ids, meta), (low_ids, low) = metas
    assert ids == low_ids
    assert {k for k in meta if k.startswith("spec_")} == {
        "spec_verify_ct", "spec_accept_length", "spec_accept_rate",
        "spec_num_correct_drafts", "spec_num_proposed_drafts",
    }  # fmt: skip
    assert (meta["spec_verify_ct"], low["spec_verify_ct"]) == (7, 8)
    assert low["spec_accept_length"] == pytest.approx(20 / 8)
    assert low["spec_accept_length"] <= 0.9 * meta["spec_accept_length"]
    assert sims[0].get_json("/server_info")["version"] == "0.5.23"
