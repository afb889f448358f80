"""Round trips through the store: deployments, pointers, measurements, gate results."""

from __future__ import annotations

import json
import re
from dataclasses import asdict
from pathlib import Path

import pytest

from kctl.errors import StoreError, UsageError
from kctl.profile.model import Profile
from kctl.runtime.base import Instance
from kctl.store import Store
from tests.store.conftest import FakeClock, profile


def test_new_deployment_from_a_profile_round_trips(store: Store) -> None:
    prof = Profile(name="kdtree-eager", source="profiles/kdtree-eager.yaml", content_hash="abc")
    dep = store.new_deployment("deploy", prof, runtime="local", parent_id=None)
    assert re.fullmatch(r"d-20261129-102407-[0-9a-f]{4}", dep.id)
    assert (dep.kind, dep.status, dep.runtime) == ("deploy", "planned", "local")
    assert (dep.profile_name, dep.profile_path, dep.profile_hash) == (
        "kdtree-eager",
        "profiles/kdtree-eager.yaml",
        "abc",
    )
    # the resolved profile comes back as JSON would give it (tuples become lists)
    assert dep.profile == json.loads(json.dumps(asdict(prof)))
    assert dep.started_at == "2026-11-29T10:24:07Z"
    assert dep.ended_at is None and dep.instance is None and dep.timings == {}
    assert store.get_deployment(dep.id) == dep


def test_new_deployment_from_a_stored_profile_record(store: Store) -> None:
    first = store.new_deployment("deploy", profile())
    again = store.new_deployment("rollback", first.profile, parent_id=first.id)
    assert again.profile == first.profile
    assert (again.kind, again.parent_id, again.profile_hash) == ("rollback", first.id, "h-kdtree")


def test_new_deployment_rejects_bad_input(store: Store) -> None:
    with pytest.raises(ValueError, match="needs source, content_hash"):
        store.new_deployment("deploy", {"name": "x"})
    with pytest.raises(ValueError, match="unknown deployment kind"):
        store.new_deployment("upgrade", profile())  # type: ignore[arg-type]
    assert store.list_deployments() == []


def test_explicit_id_and_duplicate(store: Store) -> None:
    store.new_deployment("deploy", profile(), deployment_id="d-20261129-102407-beef")
    with pytest.raises(Exception, match="UNIQUE"):
        store.new_deployment("deploy", profile(), deployment_id="d-20261129-102407-beef")
    assert len(store.list_deployments()) == 1


def test_update_deployment(store: Store, clock: FakeClock) -> None:
    dep = store.new_deployment("deploy", profile())
    inst = Instance(runtime="local", deployment_id=dep.id, ref="pid:42:1000", port=30000)
    clock.advance(5)
    dep = store.update_deployment(dep.id, status="starting", instance=inst, timings={"load_s": 3})
    assert dep.status == "starting" and dep.ended_at is None
    assert dep.instance_obj() == inst
    clock.advance(60)
    dep = store.update_deployment(
        dep.id,
        status="promoted",
        verdict="PASS",
        reason="ratio 1.12 >= 1.00 at every context",
        exit_code=0,
        timings={"gate_s": 40.5},
    )
    assert dep.timings == {"load_s": 3, "gate_s": 40.5}  # merged
    assert (dep.verdict, dep.exit_code) == ("PASS", 0)
    assert dep.ended_at == "2026-11-29T10:25:12Z" and dep.duration_s == 65.0
    # a later terminal status does not move the end
    clock.advance(100)
    dep = store.update_deployment(dep.id, status="reverted")
    assert dep.ended_at == "2026-11-29T10:25:12Z"
    dep = store.update_deployment(dep.id, instance=None)
    assert dep.instance is None and dep.instance_obj() is None


def test_update_deployment_rejects_unknown_fields(store: Store) -> None:
    dep = store.new_deployment("deploy", profile())
    with pytest.raises(ValueError, match="unknown field.*profile_hash"):
        store.update_deployment(dep.id, profile_hash="x")
    with pytest.raises(ValueError, match="unknown deployment status 'done'"):
        store.update_deployment(dep.id, status="done")
    assert store.get_deployment(dep.id) == dep


def test_missing_deployment_is_a_usage_error(store: Store) -> None:
    with pytest.raises(UsageError) as err:
        store.get_deployment("d-20200101-000000-dead")
    assert str(err.value) == "no deployment d-20200101-000000-dead; see `kctl history`"
    assert err.value.exit_code == 2
    with pytest.raises(UsageError):
        store.update_deployment("d-nope", status="failed")


def test_get_by_unique_prefix(store: Store, clock: FakeClock) -> None:
    a = store.new_deployment("deploy", profile(), deployment_id="d-20261129-102407-aaaa")
    store.new_deployment("deploy", profile(), deployment_id="d-20261129-102407-abbb")
    assert store.get_deployment("d-20261129-102407-aa") == a
    with pytest.raises(UsageError, match="ambiguous"):
        store.get_deployment("d-20261129-102407-a")
    # LIKE wildcards in the user's text are literal
    with pytest.raises(UsageError, match="no deployment"):
        store.get_deployment("d-2026112%")


def test_list_deployments_newest_first(store: Store, clock: FakeClock) -> None:
    ids = []
    for kind in ("baseline", "deploy", "bench", "deploy", "rollback"):
        ids.append(store.new_deployment(kind, profile()).id)  # type: ignore[arg-type]
        clock.advance(1)
    assert [d.id for d in store.list_deployments()] == ids[::-1]
    assert [d.id for d in store.list_deployments(limit=2)] == ids[:2:-1]
    assert [d.id for d in store.list_deployments(limit=2, offset=2)] == [ids[2], ids[1]]
    assert [d.id for d in store.list_deployments(kinds=["deploy"])] == [ids[3], ids[1]]


def test_serving_and_known_good_pointers(store: Store, clock: FakeClock) -> None:
    assert store.serving() is None and store.last_known_good() is None
    base = store.new_deployment("baseline", profile("triton-graphs", "h-base"))
    cand = store.new_deployment("deploy", profile())
    store.set_serving(base.id)
    store.set_known_good("h-base", base.id)
    clock.advance(1)
    store.set_known_good("h-kdtree", cand.id)
    assert store.serving() == base
    assert store.known_good("h-base") == base
    assert store.known_good("h-kdtree") == cand
    assert store.known_good("h-other") is None
    assert store.last_known_good() == cand
    clock.advance(1)
    store.set_known_good("h-base", base.id)  # re-verified: the most recent again
    assert store.last_known_good() == base
    store.set_serving(cand.id)
    assert store.serving() == cand
    store.set_serving(None)
    assert store.serving() is None


def test_pointers_refuse_unknown_deployments(store: Store) -> None:
    with pytest.raises(UsageError):
        store.set_serving("d-20200101-000000-dead")
    with pytest.raises(UsageError):
        store.set_known_good("h", "d-20200101-000000-dead")
    assert store.serving() is None and store.last_known_good() is None


def test_latest_measurement_picks_the_newest_fresh_one(store: Store, clock: FakeClock) -> None:
    dep = store.new_deployment("baseline", profile("triton-graphs", "h-base"))
    store.save_measurement(
        deployment_id=dep.id, profile_hash="h-base", fingerprint="fp1", data={"n": 1}
    )
    t1 = clock.now
    clock.advance(100)
    store.save_measurement(
        deployment_id=None, profile_hash="h-base", fingerprint="fp1", data={"n": 2}
    )
    t2 = clock.now
    store.save_measurement(
        deployment_id=None, profile_hash="h-base", fingerprint="fp2", data={"n": 3}
    )
    store.save_measurement(
        deployment_id=None, profile_hash="h-kdtree", fingerprint="fp1", data={"n": 4}
    )

    assert store.latest_measurement("h-base", "fp1", max_age_s=1000) == ({"n": 2}, t2)
    assert store.latest_measurement("h-base", "fp2", max_age_s=1000) == ({"n": 3}, t2)
    assert store.latest_measurement("h-base", "fp3", max_age_s=1000) is None
    assert store.latest_measurement("h-none", "fp1", max_age_s=1000) is None
    # at exactly max age it still counts; a moment later it does not
    assert store.latest_measurement("h-base", "fp1", max_age_s=50, now=t2 + 50) == ({"n": 2}, t2)
    assert store.latest_measurement("h-base", "fp1", max_age_s=50, now=t2 + 50.5) is None
    # as of a moment before the newer one existed, the older one is the latest
    assert store.latest_measurement("h-base", "fp1", max_age_s=10, now=t1 + 5) == ({"n": 1}, t1)
    assert store.latest_measurement("h-base", "fp1", max_age_s=1e9, now=t1 - 1) is None
    assert store.latest_measurement("h-base", "fp1", max_age_s=float("inf")) == ({"n": 2}, t2)


def test_measurement_of_unknown_deployment_is_refused(store: Store) -> None:
    with pytest.raises(UsageError):
        store.save_measurement(deployment_id="d-nope", profile_hash="h", fingerprint="f", data={})
    assert store.latest_measurement("h", "f", max_age_s=1e9) is None


def test_gate_results(store: Store, clock: FakeClock) -> None:
    assert store.last_gate_result() is None
    a = store.new_deployment("deploy", profile())
    b = store.new_deployment("deploy", profile())
    assert store.gate_result(a.id) is None
    store.save_gate_result(a.id, {"verdict": "FAIL", "rows": [[5700, 0.9]]})
    clock.advance(1)
    store.save_gate_result(b.id, {"verdict": "PASS"})
    assert store.last_gate_result() == (b, {"verdict": "PASS"})
    assert store.gate_result(a.id) == {"verdict": "FAIL", "rows": [[5700, 0.9]]}


def test_unserialisable_data_writes_nothing(store: Store) -> None:
    dep = store.new_deployment("deploy", profile())
    with pytest.raises(TypeError):
        store.save_gate_result(dep.id, {"when": object()})
    with pytest.raises(TypeError):
        store.update_deployment(dep.id, status="gating", timings={"x": object()})
    assert store.last_gate_result() is None
    assert store.get_deployment(dep.id).status == "planned"


def test_everything_survives_a_reopen(state_dir: Path, clock: FakeClock) -> None:
    with Store.open(state_dir, clock=clock) as s:
        dep = s.new_deployment("deploy", profile())
        s.update_deployment(dep.id, status="promoted", timings={"gate_s": 1.5})
        s.set_serving(dep.id)
        s.set_known_good(dep.profile_hash, dep.id)
        s.save_gate_result(dep.id, {"verdict": "PASS"})
        s.save_measurement(deployment_id=dep.id, profile_hash="h", fingerprint="f", data={"x": 1})
        before = s.get_deployment(dep.id)
    with Store.open(state_dir, clock=clock, read_only=True) as r:
        assert r.get_deployment(dep.id) == before
        assert r.serving() == before
        assert r.known_good(dep.profile_hash) == before
        assert r.last_gate_result() == (before, {"verdict": "PASS"})
        assert r.latest_measurement("h", "f", max_age_s=0) == ({"x": 1}, clock.now)


def test_a_colliding_deployment_id_is_drawn_again(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kctl.store import store as store_module

    ids = iter(["d-same", "d-same", "d-same", "d-other"])
    monkeypatch.setattr(store_module, "new_deployment_id", lambda ts: next(ids))
    first = store.new_deployment("deploy", profile())
    second = store.new_deployment("deploy", profile())
    assert (first.id, second.id) == ("d-same", "d-other")
    monkeypatch.setattr(store_module, "new_deployment_id", lambda ts: "d-same")
    with pytest.raises(StoreError, match="could not allocate a unique deployment id in 8 tries"):
        store.new_deployment("deploy", profile())
    assert [d.id for d in store.list_deployments()] == ["d-other", "d-same"]
