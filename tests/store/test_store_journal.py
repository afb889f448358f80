"""The deploy journal: intents committed before the step, open/closed semantics, and
what a kctl killed outright leaves for the next one."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import pytest

from kctl.store import Store
from tests.store.conftest import PYTHON, FakeClock, child_env


def test_begin_step_is_committed_before_it_returns(store: Store, state_dir: Path) -> None:
    seq = store.begin_step("d-1", "stop", {"instance": {"ref": "pid:1:2"}})
    assert seq == 1
    # another connection (another kctl) sees the intent at once
    with Store.open(state_dir, read_only=True) as other:
        (txn,) = other.open_transactions()
        assert txn.pending is not None
        assert (txn.pending.step, txn.pending.intent) == ("stop", {"instance": {"ref": "pid:1:2"}})


def test_open_close_and_end(store: Store, clock: FakeClock) -> None:
    assert store.open_transactions() == []
    s1 = store.begin_step("d-1", "stop baseline", {"why": "deploy"})
    clock.advance(2)
    store.finish_step("d-1", s1)
    txn = store.open_transactions()[0]
    # between steps: still open (kctl may have died here), but nothing half-done
    assert txn.pending is None and txn.last_step is not None
    assert (txn.last_step.step, txn.last_step.state) == ("stop baseline", "done")
    assert txn.last_step.closed_at == "2026-11-29T10:24:09Z"
    s2 = store.begin_step("d-1", "start candidate", {"argv": ["python3"]})
    assert s2 == 2
    assert store.open_transactions()[0].pending == store.journal("d-1")[1]
    store.finish_step("d-1", s2, "failed", note="exited with code 1")
    assert store.transaction_outcome("d-1") is None
    store.end_transaction("d-1", "reverted")
    assert store.open_transactions() == []
    assert store.transaction_outcome("d-1") == "reverted"
    steps = store.journal("d-1")
    assert [(s.seq, s.step, s.state, s.note) for s in steps] == [
        (1, "stop baseline", "done", None),
        (2, "start candidate", "failed", "exited with code 1"),
    ]


def test_sequences_are_per_transaction_and_ordered(store: Store, clock: FakeClock) -> None:
    assert store.begin_step("d-a", "x") == 1
    clock.advance(1)
    assert store.begin_step("d-b", "x") == 1
    assert store.begin_step("d-a", "y") == 2
    assert [t.txn for t in store.open_transactions()] == ["d-a", "d-b"]
    assert [len(t.steps) for t in store.open_transactions()] == [2, 1]


def test_first_close_and_first_end_win(store: Store) -> None:
    seq = store.begin_step("d-1", "stop")
    store.finish_step("d-1", seq, "failed", note="interrupted")
    store.finish_step("d-1", seq, "done")
    assert store.journal("d-1")[0].state == "failed"
    store.end_transaction("d-1", "degraded")
    store.end_transaction("d-1", "promoted")
    assert store.transaction_outcome("d-1") == "degraded"


def test_misuse_is_refused(store: Store) -> None:
    with pytest.raises(RuntimeError, match="no journal step d-1#1"):
        store.finish_step("d-1", 1)
    seq = store.begin_step("d-1", "stop")
    with pytest.raises(ValueError, match="'done' or 'failed'"):
        store.finish_step("d-1", seq, "intent")
    store.end_transaction("d-1", "aborted")
    with pytest.raises(RuntimeError, match=r"d-1 already ended \(aborted\)"):
        store.begin_step("d-1", "start")
    assert len(store.journal("d-1")) == 1


def test_ending_a_transaction_without_steps(store: Store) -> None:
    store.end_transaction("d-1", "failed before any change")
    assert store.open_transactions() == []
    assert store.transaction_outcome("d-1") == "failed before any change"


def test_step_context_manager(store: Store) -> None:
    with store.step("d-1", "stop", {"ref": "a"}) as seq:
        assert store.open_transactions()[0].pending is not None
    assert seq == 1
    with pytest.raises(OSError, match="no such container"), store.step("d-1", "start"):
        raise OSError("no such container")
    with pytest.raises(KeyboardInterrupt), store.step("d-1", "health"):
        raise KeyboardInterrupt
    assert [(s.step, s.state, s.note) for s in store.journal("d-1")] == [
        ("stop", "done", None),
        ("start", "failed", "OSError: no such container"),
        ("health", "failed", "KeyboardInterrupt: "),
    ]


KILLED_MID_STEP = textwrap.dedent(
    """
    import os, signal, sys
    from kctl.store import Store
    store = Store.open(sys.argv[1])
    with store.step("d-20261129-102407-abcd", "stop baseline", {"ref": "pid:7:8"}):
        pass
    store.begin_step("d-20261129-102407-abcd", "start candidate", {"port": 30000})
    os.kill(os.getpid(), signal.SIGKILL)  # killed outright, mid-step
    """
)


def test_a_killed_kctl_leaves_an_open_transaction(state_dir: Path) -> None:
    done = subprocess.run(
        [PYTHON, "-c", KILLED_MID_STEP, str(state_dir)], env=child_env(), timeout=60, check=False
    )
    assert done.returncode == -9
    with Store.open(state_dir, read_only=True) as s:
        (txn,) = s.open_transactions()
    assert txn.txn == "d-20261129-102407-abcd"
    assert [(st.step, st.state) for st in txn.steps] == [
        ("stop baseline", "done"),
        ("start candidate", "intent"),
    ]
    assert txn.pending is not None and txn.pending.intent == {"port": 30000}
    # the next kctl resolves it and ends it
    with Store.open(state_dir) as s:
        s.finish_step(txn.txn, txn.pending.seq, "failed", note="kctl was killed; reconciled")
        s.end_transaction(txn.txn, "recovered by d-20261129-110000-beef")
        assert s.open_transactions() == []
