"""Opening the store: creation, read-only opening, and refusing corrupt, foreign or
newer files without changing a byte of them."""

from __future__ import annotations

import os
import sqlite3
import subprocess
from pathlib import Path

import pytest

from kctl.errors import StoreCorrupt, StoreError
from kctl.store import SCHEMA_VERSION, Store, schema
from tests.store.conftest import PYTHON, FakeClock, child_env, profile


def make_store(state_dir: Path, deployments: int = 1) -> Path:
    with Store.open(state_dir, clock=FakeClock()) as s:
        for _ in range(deployments):
            dep = s.new_deployment("deploy", profile())
            s.save_gate_result(dep.id, {"padding": "x" * 2000})
    return state_dir / "kctl.db"


def snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def raw_pragma(path: Path, pragma: str) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute(f"PRAGMA {pragma}").fetchone()[0])
    finally:
        conn.close()


def test_open_creates_a_versioned_store(state_dir: Path) -> None:
    with Store.open(state_dir / "nested") as s:
        assert s.list_deployments() == []
    path = state_dir / "nested" / "kctl.db"
    assert raw_pragma(path, "user_version") == SCHEMA_VERSION
    assert raw_pragma(path, "application_id") == schema.APPLICATION_ID
    # rollback journal, not WAL: a single file, no side files between writes
    assert sorted(p.name for p in path.parent.iterdir()) == ["kctl.db"]


def test_read_only_on_a_missing_dir_creates_nothing(tmp_path: Path) -> None:
    state_dir = tmp_path / "never" / "created"
    with Store.open(state_dir, read_only=True) as s:
        assert s.serving() is None
        assert s.list_deployments() == []
        assert s.open_transactions() == []
        assert s.last_gate_result() is None
        assert s.last_known_good() is None
        with pytest.raises(StoreError, match="opened read-only"):
            s.set_serving(None)
        with pytest.raises(StoreError, match="opened read-only"):
            s.begin_step("d-x", "stop", {})
    assert not (tmp_path / "never").exists()


def test_read_only_on_an_existing_store(state_dir: Path) -> None:
    path = make_store(state_dir)
    before = snapshot(state_dir)
    with Store.open(state_dir, read_only=True) as s:
        assert len(s.list_deployments()) == 1
        with pytest.raises(StoreError):
            s.new_deployment("deploy", profile())
    assert snapshot(state_dir) == before
    assert path.exists()


def test_newer_schema_is_refused_untouched(state_dir: Path) -> None:
    path = make_store(state_dir)
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    before = snapshot(state_dir)
    for read_only in (False, True):
        with pytest.raises(StoreError) as err:
            Store.open(state_dir, read_only=read_only)
        assert not isinstance(err.value, StoreCorrupt)
        assert err.value.message == (
            f"{path}: written by a newer kctl (schema {SCHEMA_VERSION + 1} > {SCHEMA_VERSION}); "
            "upgrade kctl"
        )
        assert err.value.exit_code == 5
    assert snapshot(state_dir) == before


def assert_refused_as_corrupt(state_dir: Path, why: str) -> None:
    path = state_dir / "kctl.db"
    before = snapshot(state_dir)
    for read_only in (False, True):
        with pytest.raises(StoreCorrupt) as err:
            Store.open(state_dir, read_only=read_only)
        assert err.value.message == f"{path}: the state store is corrupt ({why})"
        assert f"mv {path} {path}.corrupt" in (err.value.hint or "")
        assert "never modifies or overwrites it" in (err.value.hint or "")
        assert err.value.exit_code == 5
    # byte-identical, and no journal or other file appeared next to it
    assert snapshot(state_dir) == before


def test_empty_file_is_refused_not_a_new_store(state_dir: Path) -> None:
    # SQLite takes a 0-byte file for a new database; the known-good records and the
    # history would be gone without a word
    state_dir.mkdir()
    (state_dir / "kctl.db").touch()
    assert_refused_as_corrupt(state_dir, "0 bytes: the file is empty")


def test_schema_less_sqlite_file_is_refused(state_dir: Path) -> None:
    state_dir.mkdir()
    conn = sqlite3.connect(state_dir / "kctl.db")
    conn.execute("VACUUM")  # a valid SQLite file of one page, without any table
    conn.close()
    assert (state_dir / "kctl.db").stat().st_size > 0
    assert_refused_as_corrupt(state_dir, "an empty SQLite database, without kctl's schema")


def test_a_new_store_is_created_whole(state_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # killed while creating the schema: no kctl.db is left behind, so the next run
    # creates the store again instead of refusing a half-made one
    def boom(conn: sqlite3.Connection) -> None:
        conn.execute("CREATE TABLE half (x)")
        raise KeyboardInterrupt

    monkeypatch.setattr(schema, "create_schema", boom)
    with pytest.raises(KeyboardInterrupt):
        Store.open(state_dir)
    assert list(state_dir.iterdir()) == []
    monkeypatch.undo()
    with Store.open(state_dir) as s:
        assert s.list_deployments() == []
    assert raw_pragma(state_dir / "kctl.db", "user_version") == SCHEMA_VERSION


def test_garbage_file_is_refused(state_dir: Path) -> None:
    state_dir.mkdir()
    (state_dir / "kctl.db").write_bytes(os.urandom(4096))
    assert_refused_as_corrupt(state_dir, "not a SQLite database")


def test_short_garbage_file_is_refused(state_dir: Path) -> None:
    state_dir.mkdir()
    (state_dir / "kctl.db").write_bytes(b"deployments: []\n")
    assert_refused_as_corrupt(state_dir, "not a SQLite database")


def test_truncated_store_is_refused(state_dir: Path) -> None:
    path = make_store(state_dir, deployments=8)
    data = path.read_bytes()
    page = raw_pragma(path, "page_size")
    pages = len(data) // page
    assert pages >= 6
    path.write_bytes(data[: (pages // 2) * page])
    assert_refused_as_corrupt(
        state_dir, f"truncated: {(pages // 2) * page} bytes, the header says {pages * page}"
    )


def test_store_cut_mid_page_is_refused(state_dir: Path) -> None:
    path = make_store(state_dir, deployments=4)
    page = raw_pragma(path, "page_size")
    data = path.read_bytes()
    path.write_bytes(data[:-100])
    assert_refused_as_corrupt(
        state_dir, f"size {len(data) - 100} is not a whole number of {page}-byte pages"
    )


def test_damaged_page_is_refused_by_the_integrity_check(state_dir: Path) -> None:
    path = make_store(state_dir, deployments=8)
    data = bytearray(path.read_bytes())
    page = raw_pragma(path, "page_size")
    # page 3 onward hold table b-trees; scribble over the middle of the file
    start = 3 * page
    data[start : start + page] = b"\xa5" * page
    path.write_bytes(bytes(data))
    with pytest.raises(StoreCorrupt) as err:
        Store.open(state_dir)
    assert err.value.message.startswith(f"{path}: the state store is corrupt (")
    before = snapshot(state_dir)
    with pytest.raises(StoreCorrupt):
        Store.open(state_dir, read_only=True)
    assert snapshot(state_dir) == before


def test_foreign_sqlite_file_is_refused(state_dir: Path) -> None:
    state_dir.mkdir()
    conn = sqlite3.connect(state_dir / "kctl.db")
    conn.execute("CREATE TABLE notes (body TEXT)")
    conn.execute("INSERT INTO notes VALUES ('mine')")
    conn.commit()
    conn.close()
    assert_refused_as_corrupt(state_dir, "a SQLite database, but not a kctl state store")


def test_unwritable_state_dir(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(StoreError) as err:
        Store.open(blocker / "state")
    assert err.value.message.startswith(f"{blocker / 'state'}: the state directory is not writable")
    assert "--state-dir" in (err.value.hint or "")
    assert blocker.read_text() == "not a directory"


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_read_only_permissions(tmp_path: Path) -> None:  # pragma: no cover - CI runs as root
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    state_dir.chmod(0o500)
    try:
        with pytest.raises(StoreError, match="not writable"):
            Store.open(state_dir)
    finally:
        state_dir.chmod(0o700)


def test_migrations_run_in_order_after_a_backup(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = make_store(state_dir)
    original = path.read_bytes()

    def add_note_column(conn: sqlite3.Connection) -> None:
        conn.execute("ALTER TABLE deployments ADD COLUMN note TEXT NOT NULL DEFAULT ''")

    now = schema.SCHEMA_VERSION
    monkeypatch.setattr(schema, "SCHEMA_VERSION", now + 1)
    monkeypatch.setattr(schema, "MIGRATIONS", {**schema.MIGRATIONS, now: add_note_column})
    # read-only: migrated in memory, the file is untouched
    with Store.open(state_dir, read_only=True) as s:
        assert len(s.list_deployments()) == 1
    assert path.read_bytes() == original
    with Store.open(state_dir) as s:
        assert len(s.list_deployments()) == 1
    assert raw_pragma(path, "user_version") == now + 1
    backup = state_dir / f"kctl.db.schema-{now}.bak"
    assert raw_pragma(backup, "user_version") == now


def test_a_missing_migration_changes_nothing(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = make_store(state_dir)

    def step(conn: sqlite3.Connection) -> None:
        conn.execute("CREATE TABLE extra (x)")

    now = schema.SCHEMA_VERSION
    monkeypatch.setattr(schema, "SCHEMA_VERSION", now + 2)
    monkeypatch.setattr(schema, "MIGRATIONS", {**schema.MIGRATIONS, now: step})
    with pytest.raises(StoreError, match=f"no migration from store schema {now + 1} to {now + 2}"):
        Store.open(state_dir)
    monkeypatch.undo()
    # the first step was rolled back with the failed second one
    assert raw_pragma(path, "user_version") == now
    with Store.open(state_dir) as s:
        assert len(s.list_deployments()) == 1
    conn = sqlite3.connect(path)
    try:
        assert (
            conn.execute("SELECT name FROM sqlite_master WHERE name = 'extra'").fetchone() is None
        )
    finally:
        conn.close()


@pytest.mark.parametrize("command", [["status"], ["history"], ["rollback"]])
def test_the_cli_refuses_an_empty_store(state_dir: Path, command: list[str]) -> None:
    state_dir.mkdir()
    path = state_dir / "kctl.db"
    path.touch()
    run = subprocess.run(
        [PYTHON, "-m", "kctl", "--state-dir", str(state_dir), *command],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=60,
    )
    assert run.returncode == 5, run.stdout + run.stderr
    assert f"{path}: the state store is corrupt (0 bytes: the file is empty)" in run.stderr
    assert f"mv {path} {path}.corrupt" in run.stderr
    assert path.stat().st_size == 0


def test_a_version_1_store_gains_the_server_column(state_dir: Path) -> None:
    """A store written before ``/server_info`` was recorded opens, is migrated after a
    backup, keeps its records, and records a server afterwards."""
    state_dir.mkdir()
    path = state_dir / "kctl.db"
    conn = sqlite3.connect(path)
    with conn:
        for statement in schema.SCHEMA_V1.split(";"):
            if statement.strip():
                conn.execute(statement)
        conn.execute(f"PRAGMA application_id = {schema.APPLICATION_ID}")
        conn.execute("PRAGMA user_version = 1")
        conn.execute(
            "INSERT INTO deployments (id, kind, profile_name, profile_path, profile_hash, "
            "profile_json, status, started_at, started_ts) VALUES "
            "('d-1', 'deploy', 'p', 'p.yaml', 'h', '{}', 'promoted', 't', 1.0)"
        )
    conn.close()
    with Store.open(state_dir) as s:
        (dep,) = s.list_deployments()
        assert dep.id == "d-1" and dep.server is None and dep.sglang_version is None
        dep = s.update_deployment("d-1", server={"version": "0.5.23", "tp_size": 8})
        assert dep.sglang_version == "0.5.23" and dep.server == {"version": "0.5.23", "tp_size": 8}
    assert raw_pragma(path, "user_version") == schema.SCHEMA_VERSION == 2
    assert raw_pragma(state_dir / "kctl.db.schema-1.bak", "user_version") == 1
