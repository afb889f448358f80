"""The deploy transaction end to end, with real processes and real HTTP."""

from __future__ import annotations

import json
import signal
import sqlite3
import time

import pytest

from tests.integration.conftest import (
    Kctl,
    base_profile,
    candidate_profile,
    serving_health,
    signal_at_revert_start,
)

pytestmark = pytest.mark.slow


def test_first_deploy_measures_baseline_then_promotes(kctl: Kctl) -> None:
    cand = kctl.write("cand.yaml", candidate_profile(kctl.port))
    r = kctl.run("deploy", cand)
    assert r.code == 0, r.err
    assert "PROMOTED" in r.out
    assert "23000" in r.out and "ratio" in r.out  # the gate table is printed
    assert "SGLang figures (baseline / candidate):" in r.out
    assert "TTFT ms" in r.out and "accept len" in r.out
    assert serving_health(kctl) == ("cand", "healthy")
    hist = kctl.run("--json", "history").json()["result"]
    kinds = [(h["kind"], h["profile"], h["status"]) for h in hist]
    assert ("deploy", "cand", "promoted") in kinds
    # the version each server reported after health is recorded and shown
    assert {h["sglang_version"] for h in hist if h["profile"] == "cand"} == {"0.5.10"}
    serving = kctl.run("--json", "status").json()["result"]["serving"]
    assert serving["server"]["version"] == "0.5.10" and serving["server"]["tp_size"] == 1
    assert "internal_states" not in serving["server"]
    assert "sglang" in kctl.run("history").out.splitlines()[0]
    assert ("baseline", "base", "serving") in kinds or any(k[1] == "base" for k in kinds)
    # the status shows the last gate table and the known-good baseline
    st = kctl.run("status")
    assert st.code == 0
    assert "known-good" in st.out and "base" in st.out
    assert "23000" in st.out


def test_deploy_json_envelope(kctl: Kctl) -> None:
    cand = kctl.write("cand.yaml", candidate_profile(kctl.port))
    r = kctl.run("--json", "deploy", cand)
    assert r.code == 0, r.err
    env = r.json()
    assert env["schema"] == "kctl.result/v1"
    assert env["ok"] is True and env["exit_code"] == 0
    assert env["result"]["outcome"] == "promoted"
    rows = env["result"]["gate"]["verdict"]["rows"]
    assert {row["context"] for row in rows} == {5700, 23000}


def test_regression_reverts_to_verified_baseline(kctl: Kctl) -> None:
    cand = kctl.write("cand.yaml", candidate_profile(kctl.port, KCTL_SIM_SLOWDOWN="4"))
    r = kctl.run("deploy", cand)
    assert r.code == 3, r.out + r.err
    assert "REJECTED" in r.out and "FAIL" in r.out
    assert "restored and verified" in r.err
    assert serving_health(kctl) == ("base", "healthy")


@pytest.mark.parametrize(
    ("fault", "expected"),
    [
        ("crash_at_start", "the server process exited during port (exited with code 1)"),
        (
            "crash_while_loading",
            "fatal log line during port: RuntimeError: simulated crash while loading weights",
        ),
        ("fatal_log", "out of memory"),
    ],
)
def test_unhealthy_candidate_reverts(kctl: Kctl, fault: str, expected: str) -> None:
    cand = kctl.write("cand.yaml", candidate_profile(kctl.port, KCTL_SIM_FAULT=fault))
    t0 = time.monotonic()
    r = kctl.run("deploy", cand)
    assert r.code == 3, r.out + r.err
    assert "health failed" in r.err
    assert expected in r.err
    assert "last log lines:" in r.err  # the server's own last words are shown
    # fail fast: well inside the health deadline (1000 simulated s, 20 s of wall time)
    assert time.monotonic() - t0 < 40
    assert serving_health(kctl) == ("base", "healthy")


def test_never_ready_hits_the_deadline_and_reverts(kctl: Kctl) -> None:
    prof = candidate_profile(kctl.port, KCTL_SIM_FAULT="never_ready")
    prof["health"]["deadline_s"] = 200  # simulated: 4 s of wall time at 50x
    cand = kctl.write("cand.yaml", prof)
    r = kctl.run("deploy", cand)
    assert r.code == 3, r.out + r.err
    assert "not healthy after 200 s: stuck in phase 'health'" in r.err
    assert serving_health(kctl) == ("base", "healthy")


def test_kernel_declined_fails_health(kctl: Kctl) -> None:
    cand = kctl.write("cand.yaml", candidate_profile(kctl.port, KCTL_SIM_FAULT="kernel_declined"))
    r = kctl.run("deploy", cand)
    assert r.code == 3, r.out + r.err
    assert "kdtree-verify: declined" in r.err
    assert serving_health(kctl) == ("base", "healthy")


def test_wrong_outputs_fail_the_correctness_gate(kctl: Kctl) -> None:
    cand = kctl.write("cand.yaml", candidate_profile(kctl.port, KCTL_SIM_FAULT="wrong_output"))
    r = kctl.run("deploy", cand)
    assert r.code == 3, r.out + r.err
    assert "correctness" in (r.out + r.err).lower()
    assert serving_health(kctl) == ("base", "healthy")


def test_lower_acceptance_with_identical_tokens_is_rejected(kctl: Kctl) -> None:
    # the verify path accepts 10% fewer draft tokens: same greedy tokens, same speed
    prof = candidate_profile(kctl.port, KCTL_SIM_FAULT="low_acceptance")
    r = kctl.run("--json", "deploy", kctl.write("cand.yaml", prof))
    assert r.code == 3, r.out + r.err
    verdict = r.json()["result"]["gate"]["verdict"]
    assert verdict["verdict"] == "FAIL"
    assert verdict["reason"].startswith("acceptance length outside the policy: 5700: ")
    assert "(allowed: within 2% of the baseline)" in verdict["reason"]
    assert verdict["correctness"]["mismatches"] == []  # the tokens are identical
    for row in verdict["metrics"]:
        base, cand = row["baseline"], row["candidate"]
        assert cand["accept_length"] == pytest.approx(0.9 * base["accept_length"], rel=0.05)
        for name in ("ttft_s", "itl_p50_s", "itl_p99_s"):
            assert base[name] > 0 and cand[name] > 0
    assert {c["metric"] for c in verdict["checks"]} == {"accept_length"}
    assert "restored and verified" in r.out + r.err
    assert serving_health(kctl) == ("base", "healthy")


def test_inconclusive_reverts_by_default(kctl: Kctl) -> None:
    # the baseline's twin with 30% per-request speed noise (deterministic per seed and
    # request count: the probes go first and count too), judged against a threshold at
    # its true ratio of 1.0 with one extra repeat allowed
    prof = candidate_profile(kctl.port, KCTL_SIM_NOISE="0.3", KCTL_SIM_SEED="5")
    prof["server"]["env"].pop("KDTREE_VERIFY")
    prof["server"]["verify_kernel"] = "none"
    prof["gate"]["contexts"] = [23000]
    prof["gate"]["policy"].update({"min_ratio": 1.0, "max_extra_repeats": 1})
    cand = kctl.write("cand.yaml", prof)
    r = kctl.run("--json", "deploy", cand)
    assert r.code == 3, r.out + r.err
    verdict = r.json()["result"]["gate"]["verdict"]
    assert verdict["verdict"] == "INCONCLUSIVE", verdict["reason"]
    assert "straddles 1.00" in verdict["reason"]
    assert serving_health(kctl) == ("base", "healthy")
    # policy on_inconclusive=promote keeps the same candidate instead
    prof["gate"]["policy"]["on_inconclusive"] = "promote"
    cand = kctl.write("cand2.yaml", prof)
    r = kctl.run("--json", "deploy", cand)
    assert r.code == 0, r.out + r.err
    assert any("INCONCLUSIVE" in w for w in r.json()["result"]["warnings"])


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_mid_gate_reverts(kctl: Kctl, sig: signal.Signals) -> None:
    prof = candidate_profile(kctl.port)
    prof["gate"]["output_tokens"] = 400  # a gate long enough to interrupt
    # 10x for the gate; 20 simulated s (2 s) of load, which is not what the test waits for
    prof["simulator"].update(speedup=10, load_s=20)
    cand = kctl.write("cand.yaml", prof)
    proc = kctl.spawn("deploy", cand)
    try:
        kctl.wait_for_status("gating", timeout=90)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 3, out + err
    assert f"interrupted by {sig.name}" in err
    assert serving_health(kctl) == ("base", "healthy")


def test_killed_mid_deploy_is_reported_and_rollback_recovers(kctl: Kctl) -> None:
    prof = candidate_profile(kctl.port)
    prof["gate"]["output_tokens"] = 400
    prof["simulator"].update(speedup=10, load_s=20)  # a long gate, a 2 s load
    cand = kctl.write("cand.yaml", prof)
    proc = kctl.spawn("deploy", cand)
    try:
        kctl.wait_for_status("gating", timeout=90)
        proc.kill()
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    st = kctl.run("status")
    assert "was interrupted" in st.out and "kctl rollback" in st.out
    lock = kctl.run("--json", "lock", "show").json()["result"]
    assert lock is not None and lock["stale"] is True
    r = kctl.run("rollback")
    assert r.code == 0, r.out + r.err
    assert serving_health(kctl) == ("base", "healthy")
    st = kctl.run("status")
    assert "was interrupted" not in st.out


def test_lock_contention_is_refused(kctl: Kctl) -> None:
    from kctl.lock import DeployLock

    cand = kctl.write("cand.yaml", candidate_profile(kctl.port))
    (kctl.state / "simulate").mkdir(parents=True)
    with DeployLock(kctl.state / "simulate").acquire("deploy", None):
        r = kctl.run("deploy", cand)
    assert r.code == 5, r.out + r.err
    assert "lock" in r.err.lower() and "held" in r.err.lower()


def test_rollback_default_and_to(kctl: Kctl) -> None:
    cand = kctl.write("cand.yaml", candidate_profile(kctl.port))
    assert kctl.run("deploy", str(kctl.tmp / "base.yaml")).code == 0
    r = kctl.run("--json", "deploy", cand)
    assert r.code == 0, r.err
    cand_id = r.json()["result"]["deployment_id"]
    assert serving_health(kctl) == ("cand", "healthy")
    r = kctl.run("rollback")
    assert r.code == 0, r.err
    assert serving_health(kctl) == ("base", "healthy")
    r = kctl.run("rollback", "--to", cand_id)
    assert r.code == 0, r.err
    assert serving_health(kctl) == ("cand", "healthy")
    r = kctl.run("rollback", "--to", "d-nope")
    assert r.code == 2
    assert "d-nope" in r.err


def test_redeploying_the_serving_profile_is_a_no_op(kctl: Kctl) -> None:
    base = str(kctl.tmp / "base.yaml")
    assert kctl.run("deploy", base).code == 0
    r = kctl.run("deploy", base)
    assert r.code == 0
    assert "ALREADY-SERVING" in r.out


def test_corrupt_store_is_refused_and_left_alone(kctl: Kctl) -> None:
    db = kctl.state / "simulate" / "kctl.db"
    db.parent.mkdir(parents=True)
    db.write_bytes(b"this is not a database" * 100)
    before = db.read_bytes()
    cand = kctl.write("cand.yaml", candidate_profile(kctl.port))
    for args in (("status",), ("deploy", cand), ("history",)):
        r = kctl.run(*args)
        assert r.code == 5, (args, r.out, r.err)
        assert str(db) in r.err
    assert db.read_bytes() == before


def test_invalid_profile_exits_2_before_touching_anything(kctl: Kctl) -> None:
    prof = candidate_profile(kctl.port)
    prof["gate"]["contexts"] = [5700, "23k tokens"]
    cand = kctl.write("cand.yaml", prof)
    r = kctl.run("deploy", cand)
    assert r.code == 2
    assert "gate.contexts[1]" in r.err
    assert not (kctl.state / "simulate" / "kctl.db").exists()


def test_second_interrupt_aborts_the_revert_and_leaves_degraded(kctl: Kctl) -> None:
    prof = candidate_profile(kctl.port)
    prof["gate"]["output_tokens"] = 400
    # 10x: a long gate to interrupt; 20 simulated s of load (2 s): the candidate's start is
    # not what the test waits for (the second signal lands in the baseline's restart, 2 s
    # at its own profile's 50x)
    prof["simulator"].update(speedup=10, load_s=20)
    cand = kctl.write("cand.yaml", prof)
    proc = kctl.spawn("deploy", cand)
    try:
        kctl.wait_for_status("gating", timeout=90)
        proc.send_signal(signal.SIGINT)
    except BaseException:
        proc.kill()
        proc.communicate()
        raise
    seen, err = signal_at_revert_start(proc, signal.SIGINT)
    assert proc.returncode == 4, seen + err
    assert "revert aborted by a second SIGINT" in err
    st = kctl.run("status")
    assert st.code == 4
    assert "DEGRADED" in st.out and "kctl rollback" in st.out
    r = kctl.run("rollback")
    assert r.code == 0, r.out + r.err
    assert serving_health(kctl) == ("base", "healthy")
    assert kctl.run("status").code == 0


def test_stop_needs_confirmation_and_rollback_restores(kctl: Kctl) -> None:
    assert kctl.run("deploy", str(kctl.tmp / "base.yaml")).code == 0
    r = kctl.run("stop")
    assert r.code == 2 and "--yes" in r.err
    assert serving_health(kctl) == ("base", "healthy")
    r = kctl.run("stop", "--yes")
    assert r.code == 0, r.err
    assert serving_health(kctl) == (None, "nothing serving")
    assert kctl.run("rollback").code == 0
    assert serving_health(kctl) == ("base", "healthy")


def test_bench_logs_plan_and_history_after_a_deploy(kctl: Kctl) -> None:
    cand = kctl.write("cand.yaml", candidate_profile(kctl.port))
    r = kctl.run("--json", "deploy", cand)
    assert r.code == 0, r.err
    cand_id = r.json()["result"]["deployment_id"]
    # bench: the gate workload against what serves, compared with the stored baseline
    r = kctl.run("--json", "bench")
    assert r.code == 0, r.err
    bench = r.json()["result"]
    assert bench["deployment_id"] == cand_id and bench["compared_with"] == "base"
    assert bench["verdict"]["verdict"] == "PASS"
    assert "23000" in kctl.run("bench").out
    # bench --bench-serving: SGLang's bench_serving result lines, strict JSON, one a context
    out = kctl.tmp / "bench.jsonl"
    r = kctl.run("--json", "bench", "--bench-serving", str(out))
    assert r.code == 0, r.err
    assert r.json()["result"]["bench_serving"] == {"path": str(out), "lines": 2}

    def strict(token: str) -> None:
        raise AssertionError(f"not JSON: {token}")

    rows = [json.loads(line, parse_constant=strict) for line in out.read_text().splitlines()]
    assert [row["random_input_len"] for row in rows] == [5700, 23000]
    for row in rows:
        assert row["backend"] == "sglang" and row["dataset_name"] == "random"
        assert row["completed"] == 2 and row["max_concurrency"] == 1
        assert row["total_output_tokens"] == 2 * row["random_output_len"]
        assert row["output_throughput"] > 0 and row["median_ttft_ms"] > 0
        assert row["p99_itl_ms"] >= row["median_itl_ms"] > 0
        assert row["accept_length"] > 1 and row["server_info"]["version"] == "0.5.10"
        assert row["tag"] == f"kctl {cand_id} cand"
    r = kctl.run("bench", "--bench-serving", str(kctl.tmp / "no" / "dir" / "b.jsonl"))
    assert r.code == 2 and "its directory does not exist" in r.err
    # logs: the serving process's own output, with the kernel activation line
    r = kctl.run("logs", "--tail", "200")
    assert r.code == 0 and "kdtree-verify: active" in r.out
    # plan: data, changes nothing
    before = kctl.run("--json", "history").json()["result"]
    r = kctl.run("--json", "plan", cand)
    assert r.code == 0
    plan = r.json()["result"]
    assert plan["stored_baseline_measurement"] is not None  # reused by the next deploy
    assert "--disable-cuda-graph" in plan["launch"]["argv"]
    assert plan["launch"]["env"]["KDTREE_VERIFY"] == "1"
    assert kctl.run("--json", "history").json()["result"] == before
    r = kctl.run("history")
    assert cand_id in r.out and "promoted" in r.out


def test_newest_release_end_to_end_with_the_plugin_backend(kctl: Kctl) -> None:
    # both sides on SGLang 0.5.23: kctl renders its graph flags, the simulator parses
    # them with 0.5.23's parser and reports its metric names; the kernel serves through
    # its plugin attention backend (no KDTREE_VERIFY)
    base = base_profile(kctl.port)
    base["image"] = {"sglang": "0.5.23"}
    base["server"]["cuda_graphs"] = True
    base["server"]["cuda_graph_max_bs"] = 8
    kctl.write("base.yaml", base)
    cand = candidate_profile(kctl.port)
    cand["image"] = {"sglang": "0.5.23"}
    cand["server"]["env"] = {}
    cand["server"]["attention_backend"] = "kdtree"
    cand["gate"]["policy"]["min_ratio"] = 0.5  # this test is about the release, not speed
    path = kctl.write("cand.yaml", cand)
    plan = kctl.run("--json", "plan", path, "--simulate").json()
    argv = plan["result"]["launch"]["argv"]
    assert "--attention-backend" in argv and argv[argv.index("--attention-backend") + 1] == "kdtree"
    assert "--cuda-graph-backend-decode" in argv and "--disable-cuda-graph" not in argv
    assert plan["result"]["launch"]["env"]["KCTL_SIM_SGLANG_VERSION"] == "0.5.23"
    r = kctl.run("--json", "deploy", path)
    assert r.code == 0, r.out + r.err
    verdict = r.json()["result"]["gate"]["verdict"]
    assert all(row["candidate"]["accept_length"] for row in verdict["metrics"])
    assert serving_health(kctl) == ("cand", "healthy")


def _break_stored_argv(kctl: Kctl, profile: str) -> None:
    """Give the stored profile of ``profile``'s records an extra arg its release refuses (as
    a record written by an older kctl, or for another image, can hold)."""
    db = sqlite3.connect(kctl.state / "simulate" / "kctl.db")
    with db:
        for dep_id, text in db.execute(
            "SELECT id, profile_json FROM deployments WHERE profile_name = ?", (profile,)
        ).fetchall():
            stored = json.loads(text)
            stored["server"]["extra_args"] = ["--no-such-flag"]
            db.execute(
                "UPDATE deployments SET profile_json = ? WHERE id = ?", (json.dumps(stored), dep_id)
            )
    db.close()


def test_unstartable_known_good_is_refused_before_the_incumbent_is_touched(kctl: Kctl) -> None:
    assert kctl.run("deploy", str(kctl.tmp / "base.yaml")).code == 0
    before = kctl.status()["result"]["serving"]["id"]
    _break_stored_argv(kctl, "base")
    r = kctl.run("deploy", kctl.write("cand.yaml", candidate_profile(kctl.port)))
    assert r.code == 5, r.out + r.err
    assert f"{before} (base) would not start, and a failed deploy reverts to it" in r.err
    assert "server.extra_args[0]" in r.err and "--no-such-flag" in r.err
    assert "nothing was changed" in r.err
    assert serving_health(kctl) == ("base", "healthy")
    assert kctl.status()["result"]["serving"]["id"] == before
    # rollback relies on the same record: refused before anything starts
    assert kctl.run("stop", "--yes").code == 0
    r = kctl.run("rollback")
    assert r.code == 5, r.out + r.err
    assert "would not start, and the rollback would start it" in r.err
    assert kctl.status()["result"]["serving"] is None
