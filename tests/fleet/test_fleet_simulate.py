"""Fleet rollouts under ``--simulate``: the real `kctl` CLI (subprocesses) rolls profiles
over a 2-replica fleet on the simulated orchestrator (:mod:`kctl.fleet.simfleet`: each
replica a local simulator process on its own port on 127.0.0.1), while a client sends
requests to the replicas' ports the whole time (:mod:`kctl.fleet.probe`).

The scenarios of ``tests/docker/test_fleet_swarm.py``, on the simulated orchestrator: one
fleet serves the module; the first test's fixture establishes the baseline, every test
starts from it and leaves it there, except the last (promoted). The profiles are the docker
tests' (runtime docker, run as the simulator under --simulate) with a health deadline that
holds at their 200x time compression.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kctl.fleet.probe import Prober
from kctl.gate.workload import PROBE_PROMPT_TOKENS
from tests.fleet.harness import Run, Watched, check_served
from tests.fleet.ports import free_range, get_json

REPO = Path(__file__).resolve().parents[2]
PROFILES = REPO / "tests" / "docker" / "profiles"
REPLICAS = 2


class Fleet:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.state = tmp / "state"
        self.first = free_range(REPLICAS + 1)
        self.profiles = tmp / "profiles"
        self.profiles.mkdir()
        for src in PROFILES.glob("*.yaml"):
            # 30 s of health deadline is 0.15 s at 200x: give the 0.5 s load room
            text = src.read_text().replace("deadline_s: 30", "deadline_s: 600")
            (self.profiles / src.name).write_text(text)
        self.name = f"ks-{os.getpid() % 100000}"
        self.file = tmp / "fleet.yaml"
        self.file.write_text(
            f"kind: fleet\nname: {self.name}\nreplicas: {REPLICAS}\ngpus_per_replica: 0\n"
            f"ports: {{first: {self.first}}}\n"
            "rollout: {canary: 1, parallelism: 1, monitor_s: 4, smoke_requests: 2}\n"
        )
        self.env = dict(os.environ)
        self.env.pop("KCTL_SIM_FLEET_FAULT", None)
        self.env["PYTHONPATH"] = os.pathsep.join([str(REPO), self.env.get("PYTHONPATH", "")])
        self.env["XDG_STATE_HOME"] = str(tmp / "xdg")
        self.known_good = ""  # the baseline's deployment id, once the fixture deployed it

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "kctl", "--state-dir", str(self.state), "--simulate", *args]

    def run(self, *args: str, timeout: float = 120, **env: str) -> Run:
        p = subprocess.run(self.argv(*args), capture_output=True, text=True, timeout=timeout,
                           cwd=REPO, env={**self.env, **env})  # fmt: skip
        return Run(p.returncode, p.stdout, p.stderr)

    def watch_deploy(self, name: str) -> Watched:
        return Watched(self.argv("deploy", str(self.profiles / f"{name}.yaml"), "--fleet",
                                 str(self.file)), self.env, REPO)  # fmt: skip

    def deploy(self, name: str, **env: str) -> Run:
        return self.run(
            "deploy", str(self.profiles / f"{name}.yaml"), "--fleet", str(self.file), **env
        )

    def status(self) -> tuple[int, dict[str, Any]]:
        r = self.run("--json", "status", "--fleet", str(self.file))
        return r.code, dict(json.loads(r.out)["result"])

    def endpoints(self) -> list[tuple[str, int]]:
        return [("127.0.0.1", self.first + i) for i in range(REPLICAS)]

    def assert_all_on(self, profile: str) -> None:
        """Every replica runs ``profile`` (the orchestrator's spec, healthy) and the server
        on each replica's port says it is one of that profile's (its flags)."""
        code, st = self.status()
        assert code == 0, st
        assert st["driver"] == "simulated"
        assert [r["profile"] for r in st["replicas"]] == [profile] * REPLICAS, st["replicas"]
        assert all(r["healthy"] for r in st["replicas"]), st["replicas"]
        assert st["canary"] is None and not st["problems"], st
        assert st["serving"]["profile_name"] == profile
        eager = profile != "baseline"  # the candidates run eager, the baseline with graphs
        for host, port in self.endpoints():
            info = get_json(f"http://{host}:{port}/server_info")
            assert info["port"] == port and info["disable_cuda_graph"] is eager, info

    def cleanup(self) -> None:
        from kctl.runtime.local import LocalRuntime

        rt = LocalRuntime(self.state / "simulate" / "fleets" / self.name / "orchestrator")
        for inst in rt.running():
            rt.stop(inst, 5)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    f = Fleet(tmp_path_factory.mktemp("simfleet"))
    try:
        first = f.deploy("baseline")
        assert first.code == 0, first.explain()
        assert "ESTABLISHED" in first.out
        f.assert_all_on("baseline")
        f.known_good = f.status()[1]["serving"]["id"]
        yield f
    finally:
        f.cleanup()


def test_canary_rejected_by_the_gate_leaves_every_replica_on_the_baseline(fleet: Fleet) -> None:
    fleet.assert_all_on("baseline")
    with Prober(fleet.endpoints()) as probe:
        r = fleet.deploy("regression")
    assert r.code == 3, r.explain()
    assert re.search(r"gate (FAIL|INCONCLUSIVE)", r.err) and "every replica back on" in r.err
    fleet.assert_all_on("baseline")
    check_served(probe.result, min_sent=11, what="a canary rejected by the gate")
    assert probe.result.failed == 0  # the incumbents never moved


def test_a_canary_answering_wrongly_is_rejected_on_its_probes_alone(fleet: Fleet) -> None:
    fleet.assert_all_on("baseline")
    logs = fleet.state / "simulate" / "fleets" / fleet.name / "orchestrator"
    before = set(logs.rglob("*.log"))
    r = fleet.deploy("candidate", KCTL_SIM_FLEET_FAULT="candidate:canary=wrong_output")
    assert r.code == 3, r.explain()
    assert "rejected on its probes, before any throughput request" in r.err, r.err
    assert "correctness: 2 of 2 probe(s) differ" in r.err and "every replica back on" in r.err
    fleet.assert_all_on("baseline")
    # the canary's own log, once it was up: the two probes, not one of the gate's contexts
    (canary,) = set(logs.rglob("*.log")) - before
    sent = canary.read_text().partition("The server is fired up and ready to roll!")[2]
    prefills = re.findall(
        r"Prefill batch\. #new-seq: 1, #new-token: (\d+), #cached-token: (\d+)", sent
    )
    assert [int(n) + int(c) for n, c in prefills] == [PROBE_PROMPT_TOKENS] * 2, sent
    assert sent.count('"POST /generate HTTP/1.1"') == 2, sent


def test_candidate_never_healthy_is_rolled_back(fleet: Fleet) -> None:
    fleet.assert_all_on("baseline")
    with Prober(fleet.endpoints()) as probe:
        r = fleet.deploy("crash")
    assert r.code == 3, r.explain()
    assert "the canary failed: task: non-zero exit (1)" in r.err, r.err
    fleet.assert_all_on("baseline")
    check_served(probe.result, min_sent=11, what="a never-healthy candidate")
    assert probe.result.failed == 0


def test_a_replica_fault_mid_wave_rolls_every_replica_back(fleet: Fleet) -> None:
    fleet.assert_all_on("baseline")
    with Prober(fleet.endpoints()) as probe:
        # the canary and slot 1 are fine; slot 2 of the candidate crashes while loading
        r = fleet.deploy("candidate", KCTL_SIM_FLEET_FAULT="candidate:2=crash_while_loading")
    assert r.code == 3, r.explain()
    assert r.err.count("smoke gate passed") == 1, r.err  # slot 1 moved, then the fault
    assert "the simulated orchestrator rolled the update back" in r.err, r.err
    fleet.assert_all_on("baseline")
    code, st = fleet.status()
    assert st["service"]["update_state"] == "rollback_completed", st["service"]
    check_served(probe.result, min_sent=11, what="an abort after a replica's fault mid-wave")


def test_a_bad_fault_knob_is_refused_before_anything_changes(fleet: Fleet) -> None:
    r = fleet.deploy("candidate", KCTL_SIM_FLEET_FAULT="candidate:2=melt")
    assert r.code == 2, r.explain()
    assert "unknown fault 'melt'" in r.err
    fleet.assert_all_on("baseline")


def test_kctl_sigkilled_mid_wave_then_status_and_rollback_recover(fleet: Fleet) -> None:
    fleet.assert_all_on("baseline")
    with Prober(fleet.endpoints()) as probe:
        run = fleet.watch_deploy("candidate")
        run.wait_for(r"rolling 2 replicas to candidate")
        os.kill(run.proc.pid, signal.SIGKILL)
        run.finish()
        code, st = fleet.status()
        assert code == 4, st
        assert st["interrupted"] and st["problems"], st
        assert "kctl rollback --fleet" in st["hint"]
        r = fleet.run("rollback", "--fleet", str(fleet.file))
    assert r.code == 0, r.explain()
    assert "closed interrupted rollout" in r.err
    fleet.assert_all_on("baseline")
    check_served(
        probe.result, min_sent=11, what="a rollout whose kctl was killed, then rolled back"
    )
    hist = json.loads(fleet.run("--json", "history", "--fleet", str(fleet.file)).out)["result"]
    assert [h["status"] for h in hist[:2]] == ["promoted", "interrupted"], hist[:2]


def test_plan_shows_the_rollout_a_deploy_would_run_and_changes_nothing(fleet: Fleet) -> None:
    before = fleet.run("--json", "history", "--fleet", str(fleet.file)).out
    r = fleet.run(
        "--json", "plan", str(fleet.profiles / "candidate.yaml"), "--fleet", str(fleet.file)
    )
    assert r.code == 0, r.explain()
    plan = json.loads(r.out)["result"]
    assert (plan["serving_profile"], plan["already_serving"]) == ("baseline", False)
    assert plan["steps"][0].startswith("start the canary candidate")
    assert "roll every replica back to baseline (Swarm's rollback of the service)" in plan["revert"]
    spec = plan["service_spec"]
    assert spec["Mode"]["Replicated"]["Replicas"] == REPLICAS
    assert plan["image"] is None and plan["orchestrator"] == "the simulated orchestrator"
    assert fleet.run("--json", "history", "--fleet", str(fleet.file)).out == before
    assert not [w for w in plan["warnings"] if w.startswith("server.kv_cache_dtype")]
    # a candidate with another KV cache than the incumbent: the canary gate judges both
    fp8 = fleet.profiles / "baseline-fp8.yaml"
    fp8.write_text("extends: baseline.yaml\nserver:\n  kv_cache_dtype: fp8_e4m3\n")
    r = fleet.run("--json", "plan", str(fp8), "--fleet", str(fleet.file))
    assert r.code == 0, r.explain()
    warned = json.loads(r.out)["result"]["warnings"]
    assert any("keeps its KV cache in fp8_e4m3 and the incumbent baseline in bf16" in w
               for w in warned), warned  # fmt: skip
    # with no state: the first deploy would create the service on the baseline
    fresh = fleet.state.parent / "plan-state"
    r = fleet.run("--state-dir", str(fresh), "plan", str(fleet.profiles / "candidate.yaml"),
                  "--fleet", str(fleet.file))  # fmt: skip
    assert r.code == 0, r.explain()
    assert "serving: nothing" in r.out
    assert "1. create the fleet's service: 2 replicas of the baseline baseline" in r.out
    assert not fresh.exists()


def test_promoted_rollout_moves_every_replica_and_serves_throughout(fleet: Fleet) -> None:
    fleet.assert_all_on("baseline")
    with Prober(fleet.endpoints()) as probe:
        r = fleet.deploy("candidate")
    assert r.code == 0, r.explain()
    assert "PROMOTED" in r.out and r.err.count("smoke gate passed") == REPLICAS
    assert "SIMULATED (kctl.sim, time compressed" in r.out  # the canary gate's table says so
    fleet.assert_all_on("candidate")
    check_served(probe.result, min_sent=11, what="a promoted rollout")


def test_stop_takes_every_replica_down_and_rollback_brings_the_known_good_back(
    fleet: Fleet,
) -> None:
    """Runs after the promotion: the candidate serves, and the known-good stays the baseline."""
    code, before = fleet.status()
    assert code == 0 and before["serving"] is not None, before
    serving = before["serving"]["profile_name"]
    assert serving == "candidate" and fleet.known_good != before["serving"]["id"], before
    refused = fleet.run("stop", "--fleet", str(fleet.file))  # no --yes: nothing touched
    assert refused.code == 2 and "pass --yes to confirm" in refused.err, refused.explain()
    fleet.assert_all_on(serving)
    r = fleet.run("--json", "stop", "--fleet", str(fleet.file), "--yes")
    assert r.code == 0, r.explain()
    result = json.loads(r.out)["result"]
    assert result["removed"] == [fleet.name] and result["driver"] == "simulated", result
    assert sorted(s["port"] for s in result["stopped"]) == [p for _, p in fleet.endpoints()]
    assert result["known_good"] == fleet.known_good
    code, st = fleet.status()
    assert code == 0 and st["service"] is None and st["replicas"] == [], st
    assert st["serving"] is None and not st["problems"], st
    for host, port in fleet.endpoints():  # the replicas' processes are gone
        with pytest.raises(OSError):
            get_json(f"http://{host}:{port}/health")
    again = fleet.run("stop", "--fleet", str(fleet.file), "--yes")
    assert again.code == 0 and "nothing ran; nothing to stop" in again.out, again.explain()
    back = fleet.run("rollback", "--fleet", str(fleet.file))
    assert back.code == 0, back.explain()
    fleet.assert_all_on("baseline")  # the known-good, not the promoted candidate


def test_the_fault_knob_parses_per_profile_and_slot() -> None:
    from kctl.errors import UsageError
    from kctl.fleet.simstate import parse_faults

    assert parse_faults("candidate:2=crash_while_loading, cand.b:canary=hang+wrong_output") == {
        ("candidate", "main", 2): ("crash_while_loading",),
        ("cand.b", "canary", 1): ("hang", "wrong_output"),
    }
    assert parse_faults("") == {}
    for bad in ("candidate=hang", "candidate:0=hang", "candidate:1=melt", "candidate:x=hang"):
        with pytest.raises(UsageError, match="KCTL_SIM_FLEET_FAULT"):
            parse_faults(bad)
