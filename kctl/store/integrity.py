"""Checks that decide whether kctl may use an existing store file. They only read: a
file that fails them is refused and left exactly as it was (STYLE rule 9)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from kctl.errors import StoreCorrupt, StoreError
from kctl.store import schema

SQLITE_MAGIC = b"SQLite format 3\x00"
HEADER_SIZE = 100


def corrupt(path: Path, why: str) -> StoreCorrupt:
    """The one refusal message for a damaged store: the path, why, and the remedy."""
    why = " ".join(why.split())  # quick_check answers span lines; the message is one
    return StoreCorrupt(
        f"{path}: the state store is corrupt ({why})",
        hint=(
            f"kctl never modifies or overwrites it; move it aside (mv {path} {path}.corrupt) "
            "and run kctl again to start a new store. Stored baselines are then measured again."
        ),
    )


def journal_path(path: Path) -> Path:
    """SQLite's rollback journal next to the database."""
    return path.with_name(path.name + "-journal")


def has_hot_journal(path: Path) -> bool:
    """A non-empty rollback journal means a write was cut short; SQLite rolls it back on
    the next open, which may legitimately change the file and its size."""
    journal = journal_path(path)
    try:
        return journal.stat().st_size > 0
    except FileNotFoundError:
        return False


def check_header(path: Path) -> None:
    """Raise :class:`StoreCorrupt` unless ``path`` starts with a whole SQLite header and is
    as long as that header says. Reads only the first 100 bytes.

    An empty file is refused: SQLite would take it for a new database, and kctl would
    silently start over without the known-good records and the history. kctl creates a
    store whole (see :func:`kctl.store.connection.open_writable`), so a 0-byte
    ``kctl.db`` was truncated by something else."""
    size = path.stat().st_size
    if size == 0:
        raise corrupt(path, "0 bytes: the file is empty")
    with path.open("rb") as f:
        header = f.read(HEADER_SIZE)
    if len(header) < HEADER_SIZE or not header.startswith(SQLITE_MAGIC):
        raise corrupt(path, "not a SQLite database")
    page_size = int.from_bytes(header[16:18], "big")
    if page_size == 1:  # the file format's encoding of 65536
        page_size = 65536
    if page_size < 512 or page_size & (page_size - 1):
        raise corrupt(path, f"invalid page size {page_size} in the header")
    if has_hot_journal(path):
        return
    if size % page_size:
        raise corrupt(path, f"size {size} is not a whole number of {page_size}-byte pages")
    # The in-header page count is only trustworthy when its "version-valid-for" matches
    # the change counter (older writers did not maintain it).
    pages = int.from_bytes(header[28:32], "big")
    if pages and header[24:28] == header[92:96] and size < pages * page_size:
        raise corrupt(path, f"truncated: {size} bytes, the header says {pages * page_size}")


def _is_corruption(exc: sqlite3.DatabaseError) -> bool:
    name: str | None = getattr(exc, "sqlite_errorname", None)  # Python 3.11+
    if name is not None:
        return name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB"))
    return not isinstance(exc, sqlite3.OperationalError)


def check_contents(conn: sqlite3.Connection, path: Path) -> int:
    """Run ``PRAGMA quick_check`` and read the schema version. Returns the store's schema
    version; raises :class:`StoreCorrupt` for damage, a foreign SQLite file or one without
    kctl's schema, and :class:`StoreError` for a newer schema."""
    try:
        rows = conn.execute("PRAGMA quick_check").fetchall()
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
    except sqlite3.DatabaseError as exc:
        if _is_corruption(exc):
            raise corrupt(path, str(exc)) from exc
        raise StoreError(
            f"{path}: cannot read the state store ({exc})",
            hint="another kctl may be writing it; try again in a moment",
        ) from exc
    if [r[0] for r in rows] != ["ok"]:
        raise corrupt(path, "; ".join(str(r[0]) for r in rows[:3]))
    if app_id == 0 and version == 0 and tables == 0:
        raise corrupt(path, "an empty SQLite database, without kctl's schema")
    if app_id != schema.APPLICATION_ID:
        raise corrupt(path, "a SQLite database, but not a kctl state store")
    if version > schema.SCHEMA_VERSION:
        raise StoreError(
            f"{path}: written by a newer kctl "
            f"(schema {version} > {schema.SCHEMA_VERSION}); upgrade kctl",
            hint="kctl leaves the file untouched",
        )
    if version < 1:
        raise corrupt(path, f"schema version {version}")
    return int(version)
