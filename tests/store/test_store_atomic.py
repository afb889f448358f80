"""Atomic writes: a failure or a kill inside a write leaves the store as it was."""

from __future__ import annotations

import signal
import subprocess
import textwrap
from pathlib import Path

import pytest

from kctl.errors import StoreError
from kctl.store import Store
from tests.store.conftest import PYTHON, child_env, profile


def test_exception_inside_a_transaction_leaves_nothing(store: Store, state_dir: Path) -> None:
    dep = store.new_deployment("deploy", profile())
    with pytest.raises(RuntimeError, match="boom"), store.transaction():
        store.update_deployment(dep.id, status="promoted", verdict="PASS")
        store.set_serving(dep.id)
        store.set_known_good(dep.profile_hash, dep.id)
        store.save_gate_result(dep.id, {"verdict": "PASS"})
        raise RuntimeError("boom")
    assert store.get_deployment(dep.id).status == "planned"
    assert store.serving() is None and store.last_known_good() is None
    assert store.last_gate_result() is None
    with Store.open(state_dir, read_only=True) as other:
        assert other.get_deployment(dep.id).status == "planned"
        assert other.serving() is None


def test_keyboard_interrupt_inside_a_transaction_leaves_nothing(store: Store) -> None:
    dep = store.new_deployment("deploy", profile())
    with pytest.raises(KeyboardInterrupt), store.transaction():
        store.set_serving(dep.id)
        raise KeyboardInterrupt
    assert store.serving() is None
    assert not store.in_transaction
    store.set_serving(dep.id)  # the store still works
    assert store.serving() == dep


def test_transaction_commits_as_a_whole(store: Store, state_dir: Path) -> None:
    dep = store.new_deployment("deploy", profile())
    with store.transaction():
        store.update_deployment(dep.id, status="promoted")
        store.set_serving(dep.id)
        with Store.open(state_dir, read_only=True) as other:
            assert other.serving() is None  # not visible before the commit
    with Store.open(state_dir, read_only=True) as other:
        assert other.serving() == store.get_deployment(dep.id)


def test_nested_block_rolls_back_alone(store: Store) -> None:
    a = store.new_deployment("deploy", profile())
    b = store.new_deployment("deploy", profile())
    with store.transaction():
        store.set_serving(a.id)
        with pytest.raises(ValueError), store.transaction():
            store.set_serving(b.id)
            raise ValueError
        assert store.serving() == a
    assert store.serving() == a


def test_begin_step_refuses_to_run_inside_a_transaction(store: Store) -> None:
    with pytest.raises(RuntimeError, match="intent would not be committed"), store.transaction():
        store.begin_step("d-1", "stop", {})
    assert store.open_transactions() == []


def test_a_busy_store_is_a_store_error(store: Store, state_dir: Path) -> None:
    other = Store.open(state_dir)
    try:
        # a second writer waits for the first, then gives up with a typed error
        other._conn.execute("PRAGMA busy_timeout = 50")
        with store.transaction():
            store.new_deployment("deploy", profile())
            with pytest.raises(StoreError, match="cannot write the state store"):
                other.new_deployment("deploy", profile())
        assert len(other.list_deployments()) == 1
    finally:
        other.close()


KILLED_MID_WRITE = textwrap.dedent(
    """
    import sys, time
    from kctl.store import Store
    store = Store.open(sys.argv[1])
    dep = store.new_deployment("deploy", {"name": "p", "source": "p.yaml", "content_hash": "h"})
    with store.transaction():
        store.update_deployment(dep.id, status="promoted")
        store.set_serving(dep.id)
        for i in range(200):  # enough pages that some reach the file before the commit
            store.save_gate_result(dep.id, {"i": i, "pad": "x" * 4000})
        print(dep.id, flush=True)
        time.sleep(60)
    """
)


def test_a_process_killed_mid_write_leaves_the_last_commit(state_dir: Path) -> None:
    proc = subprocess.Popen(
        [PYTHON, "-c", KILLED_MID_WRITE, str(state_dir)],
        stdout=subprocess.PIPE,
        text=True,
        env=child_env(),
    )
    try:
        assert proc.stdout is not None
        dep_id = proc.stdout.readline().strip()
        assert dep_id.startswith("d-")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
    # read-only first: it must cope with the journal the killed writer left behind
    for read_only in (True, False):
        with Store.open(state_dir, read_only=read_only) as s:
            assert s.get_deployment(dep_id).status == "planned"
            assert s.serving() is None
            assert s.last_gate_result() is None
