"""The store under damage: a corrupt, truncated, foreign or newer-schema file, a read-only
or full state directory, and two kctl processes racing for the lock.

A damaged store is refused (exit 5) by every command that reads it, with the path and the
remedy, before anything touches the host: the baseline serves on, the file keeps its exact
bytes, and once it is put back every record is there. The empty (0-byte) store is
marked ``known_defect("6")`` (issue 33, defect 6).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.faults.harness import BASE_NAME, CAND_NAME, Case

pytestmark = pytest.mark.slow


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _garbage(db: Path) -> None:
    db.write_bytes(os.urandom(8192))


def _truncated(db: Path) -> None:
    data = db.read_bytes()
    db.write_bytes(data[: len(data) // 2])


def _header_only(db: Path) -> None:
    db.write_bytes(db.read_bytes()[:100])


def _foreign(db: Path) -> None:
    db.unlink()
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE notes (text TEXT)")
    conn.commit()
    conn.close()


def _newer(db: Path) -> None:
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA user_version = 99")
    conn.close()


def _page_damaged(db: Path) -> None:
    data = bytearray(db.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    data[page + 8 : page * 2] = os.urandom(page - 8)  # page 2's contents, header kept
    db.write_bytes(bytes(data))


DAMAGE: dict[str, tuple[Callable[[Path], None], str]] = {
    "garbage": (_garbage, "the state store is corrupt (not a SQLite database)"),
    "truncated": (_truncated, "the state store is corrupt"),
    "header-only": (_header_only, "the state store is corrupt"),
    "damaged-page": (_page_damaged, "the state store is corrupt"),
    "foreign-sqlite": (_foreign, "a SQLite database, but not a kctl state store"),
    "newer-schema": (_newer, "written by a newer kctl (schema 99 > "),
}


@pytest.mark.parametrize(("damage", "message"), DAMAGE.values(), ids=DAMAGE.keys())
def test_damaged_store_is_refused(case: Case, damage: Callable[[Path], None], message: str) -> None:
    case.establish()
    before = case.history()
    saved = case.tmp / "kctl.db.saved"
    shutil.copy2(case.db, saved)
    damage(case.db)
    digest = _digest(case.db)
    for args in (("deploy", case.cand), ("status",), ("history",), ("rollback",), ("bench",)):
        r = case.run(*args)
        assert r.code == 5, f"{args}: {r}"
        assert str(case.db) in r.err and message in r.err, f"{args}: {r}"
        assert "Traceback" not in r.err
    assert _digest(case.db) == digest, "kctl changed a store it refused"
    assert not list(case.db.parent.glob("kctl.db.*")), "kctl wrote beside a refused store"
    assert case.serving() == BASE_NAME and case.healthy()
    # put back, nothing is lost and the host is as it was
    shutil.copy2(saved, case.db)
    case.assert_serves(BASE_NAME)
    case.check_store(before)


@pytest.fixture
def small_fs(case: Case) -> Iterator[Path]:
    """The state dir on its own 1 MB filesystem (the servers' logs on another one, so a
    full state dir does not also silence the servers). Needs root to mount."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("a full state directory needs root to mount a small filesystem")
    logs = case.state / "simulate" / "logs"
    case.state.mkdir()
    mounted: list[Path] = []
    try:
        for path, size in ((case.state, "1m"), (logs, "16m")):
            path.mkdir(parents=True, exist_ok=True)
            r = subprocess.run(
                ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)],
                capture_output=True,
                text=True,
            )
            if r.returncode != 0:
                pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
            mounted.append(path)
        yield case.state
    finally:
        case.cleanup()
        for path in reversed(mounted):
            subprocess.run(["umount", "-l", str(path)], check=False)


def _fill(directory: Path) -> None:
    with open(directory / "filler", "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 65536)
        except OSError:
            pass
    with open(directory / "filler2", "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 512)
        except OSError:
            pass


def test_full_state_dir(case: Case, small_fs: Path) -> None:
    case.establish()
    before = case.history()
    digest = _digest(case.db)
    _fill(small_fs)
    for args in (("deploy", case.cand), ("rollback",)):
        r = case.run(*args)
        assert r.code == 5, f"{args}: {r}"
        assert "No space left on device" in r.err, str(r)
    assert _digest(case.db) == digest
    case.assert_serves(BASE_NAME)
    (small_fs / "filler").unlink()
    (small_fs / "filler2").unlink()
    case.check_store(before)
    r = case.run("deploy", case.cand)
    assert r.code == 0, str(r)
    case.assert_serves(CAND_NAME)


@pytest.fixture
def read_only(case: Case) -> Iterator[Callable[[], None]]:
    """Makes the state dir read-only for this process's user: mode 0555 for a user, the
    immutable attribute for root (whom modes do not stop)."""
    target = case.state / "simulate"
    done: list[Path] = []

    def make() -> None:
        if os.geteuid() != 0:
            for p in (target, case.db):
                p.chmod(0o555 if p.is_dir() else 0o444)
                done.append(p)
            return
        if shutil.which("chattr") is None:
            pytest.skip("root ignores file modes and chattr is missing")
        for p in (target, case.db):
            r = subprocess.run(["chattr", "+i", str(p)], capture_output=True, text=True)
            if r.returncode != 0:
                pytest.skip(f"cannot make the state dir immutable: {r.stderr.strip()}")
            done.append(p)

    try:
        yield make
    finally:
        for p in done:
            if os.geteuid() == 0:
                subprocess.run(["chattr", "-i", str(p)], check=False)
            else:
                p.chmod(0o755 if p.is_dir() else 0o644)


def test_read_only_state_dir(case: Case, read_only: Callable[[], None]) -> None:
    case.establish()
    before = case.history()
    digest = _digest(case.db)
    read_only()
    for args in (("deploy", case.cand), ("rollback",)):
        r = case.run(*args)
        assert r.code == 5, f"{args}: {r}"
        assert "not writable" in r.err or "not readable and writable" in r.err, str(r)
    # the read-only commands still work
    case.assert_serves(BASE_NAME)
    assert case.history() == before
    assert _digest(case.db) == digest


def test_two_deploys_race_for_the_lock(case: Case) -> None:
    case.establish()
    before = case.history()
    first = case.spawn("deploy", case.cand)
    second = case.spawn("deploy", case.cand)
    runs = sorted([first.finish(), second.finish()], key=lambda r: r.code)
    assert [r.code for r in runs] == [0, 5], "\n".join(map(str, runs))
    loser = runs[1]
    assert "lock" in loser.err and "held" in loser.err, str(loser)
    assert "Traceback" not in loser.err
    case.assert_serves(CAND_NAME)
    after = case.check_store(before)
    assert len(after) == len(before) + 1, after  # the loser wrote no record


def test_rollback_races_a_deploy(case: Case) -> None:
    case.establish()
    before = case.history()
    deploy = case.spawn("deploy", case.cand)
    deploy.wait_line(r"kctl: deployment d-")
    r = case.run("rollback")
    assert r.code == 5 and "lock" in r.err and "held" in r.err, str(r)
    d = deploy.finish()
    assert d.code == 0, str(d)
    case.assert_serves(CAND_NAME)
    case.check_store(before)


# -- issue 33 (defects numbered as in its list; F: found by this suite) ---------------------


@pytest.mark.known_defect("6")
def test_empty_store_is_refused(case: Case) -> None:
    case.establish()
    case.db.write_bytes(b"")
    for args in (("deploy", case.cand), ("rollback",), ("status",)):
        r = case.run(*args)
        assert r.code == 5 and str(case.db) in r.err, f"{args}: {r}"
    assert case.db.stat().st_size == 0
    assert case.serving() == BASE_NAME


@pytest.mark.known_defect("8")
def test_rollback_does_not_create_a_mistyped_state_dir(case: Case) -> None:
    typo = case.tmp / "sttae"
    r = subprocess.run(
        [*case.argv("rollback")[:3], "--state-dir", str(typo), "--simulate", "rollback"],
        capture_output=True, text=True, cwd=case.tmp, env=case.env, timeout=60,
    )  # fmt: skip
    assert r.returncode != 0
    assert not typo.exists(), "rollback created the mistyped state dir"


@pytest.mark.parametrize(
    ("table", "column", "value", "what"),
    [
        ("measurements", "data_json", b"\xff\xfe not utf-8", "is not valid UTF-8"),
        ("measurements", "data_json", b"{not json", "is not valid JSON"),
        ("deployments", "profile_json", b"\xc3\x28", "is not valid UTF-8"),
    ],
    ids=["measurement-bad-utf8", "measurement-bad-json", "deployment-bad-utf8"],
)
def test_damaged_record_refused_by_every_command(
    case: Case, table: str, column: str, value: bytes, what: str
) -> None:
    case.establish()
    conn = sqlite3.connect(case.db)
    key = "id"
    (rowid,) = conn.execute(f"SELECT {key} FROM {table} LIMIT 1").fetchone()
    conn.execute(f"UPDATE {table} SET {column} = CAST(? AS TEXT) WHERE {key} = ?", (value, rowid))
    conn.commit()
    conn.close()
    digest = _digest(case.db)
    for args in (("status",), ("history",), ("deploy", case.cand), ("rollback",), ("bench",)):
        r = case.run(*args)
        assert r.code == 5, f"{args}: {r}"
        assert f"the {table} record {key}={rowid} is damaged" in r.err, f"{args}: {r}"
        assert what in r.err and "restore it from a backup" in r.err, f"{args}: {r}"
        assert "internal error" not in r.err, f"{args}: {r}"
        assert _digest(case.db) == digest, args
    assert case.serving() == BASE_NAME
