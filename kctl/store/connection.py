"""Opening the SQLite file: create, check, migrate, or refuse. Nothing here writes to a
file that a check refused.

The store uses SQLite's rollback journal (not WAL) on purpose: a read-only open creates
no side files (WAL readers need a ``-shm`` file), and the store stays a single file that
a user can move aside or copy whole.
"""

from __future__ import annotations

import errno
import os
import secrets
import sqlite3
from pathlib import Path

from kctl.errors import StoreError
from kctl.statedir import check_dir, check_file, ensure_dir
from kctl.store import integrity, schema

DB_NAME = "kctl.db"
#: how long a writer waits for another kctl's write to finish before giving up
BUSY_TIMEOUT_S = 10.0


def connect(path: Path | str, mode: str) -> sqlite3.Connection:
    """A connection in autocommit mode (transactions are explicit, see Store.transaction).
    ``mode`` is SQLite's URI mode: "ro", "rw", "rwc" or "memory"."""
    if mode == "memory":
        conn = sqlite3.connect(":memory:", isolation_level=None)
    else:
        uri = f"{Path(path).resolve().as_uri()}?mode={mode}"
        conn = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=BUSY_TIMEOUT_S)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


def _unwritable(path: Path, exc: OSError | None = None) -> StoreError:
    why = f" ({exc.strerror or exc})" if exc is not None else ""
    return StoreError(
        f"{path}: the state directory is not writable{why}",
        hint="pass a writable --state-dir, or fix the directory's permissions",
    )


def _create(conn: sqlite3.Connection) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        schema.create_schema(conn)
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _sync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on a directory; the link itself is atomic
    finally:
        os.close(fd)


def _create_file(path: Path) -> None:
    """Create a new store at ``path``, whole: it is built under a temporary name and linked
    into place, so ``kctl.db`` never exists half-made. Any empty or schema-less
    ``kctl.db`` is therefore not kctl's own, and it is refused rather than reused."""
    tmp = path.with_name(f".{path.name}.new-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        conn = connect(tmp, "rwc")
        try:
            os.chmod(tmp, 0o600)  # before anything is in it; journals take its mode
            _create(conn)
        finally:
            conn.close()
        try:
            os.link(tmp, path)
        except FileExistsError:
            return  # another kctl created it at the same moment: use that one
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS):
                raise
            os.replace(tmp, path)  # a filesystem without hard links
    finally:
        tmp.unlink(missing_ok=True)
    _sync_dir(path.parent)


def _upgrade(conn: sqlite3.Connection, path: Path, version: int) -> None:
    # A copy of the old file first: a migration is the one write that rewrites the
    # schema, and the old kctl can still read the copy.
    backup_path = path.with_name(f"{path.name}.schema-{version}.bak")
    if not backup_path.exists():
        backup = sqlite3.connect(str(backup_path))
        try:
            conn.backup(backup)
        finally:
            backup.close()
    conn.execute("BEGIN IMMEDIATE")
    try:
        schema.migrate(conn, version, schema.SCHEMA_VERSION, schema.MIGRATIONS)
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def open_writable(state_dir: Path) -> sqlite3.Connection:
    """Open ``<state_dir>/kctl.db`` for reading and writing, creating the directory and
    the store when the file is missing and migrating an older schema. An existing file
    must be a kctl store: an empty one is refused like any other damaged file."""
    path = state_dir / DB_NAME
    try:
        ensure_dir(state_dir)  # 0700; a symlink or another user's directory refused
    except OSError as exc:
        raise _unwritable(state_dir, exc) from exc
    check_file(path)  # SQLite opens by name: a symlinked kctl.db is refused first
    if not os.access(state_dir, os.W_OK | os.X_OK):
        raise _unwritable(state_dir)
    if not path.exists():
        try:
            _create_file(path)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(
                f"{path}: cannot create the state store ({exc})",
                hint="check free disk space and the state directory's permissions",
            ) from exc
    if not os.access(path, os.R_OK | os.W_OK):
        raise StoreError(
            f"{path}: the state store is not readable and writable by this user",
            hint="run kctl as the user that owns it, or fix its permissions",
        )
    integrity.check_header(path)
    try:
        conn = connect(path, "rw")
    except sqlite3.Error as exc:
        raise StoreError(f"{path}: cannot open the state store ({exc})") from exc
    try:
        version = integrity.check_contents(conn, path)
        if version < schema.SCHEMA_VERSION:
            _upgrade(conn, path, version)
    except sqlite3.OperationalError as exc:
        conn.close()
        raise StoreError(f"{path}: cannot prepare the state store ({exc})") from exc
    except BaseException:
        conn.close()
        raise
    return conn


def _empty_in_memory() -> sqlite3.Connection:
    conn = connect(":memory:", "memory")
    _create(conn)
    return conn


def open_read_only(state_dir: Path) -> sqlite3.Connection:
    """Open the store for reading without creating or changing any file. A missing store
    reads as an empty one; an older schema is migrated in a memory copy."""
    path = state_dir / DB_NAME
    check_dir(state_dir)
    check_file(path, tighten=False)  # reading changes nothing
    if not path.exists():
        conn = _empty_in_memory()
    else:
        if not os.access(path, os.R_OK):
            raise StoreError(
                f"{path}: the state store is not readable by this user",
                hint="run kctl as the user that owns it, or fix its permissions",
            )
        integrity.check_header(path)
        # A hot journal can only be rolled back by a writer; that recovery is SQLite's
        # own and restores the last committed state.
        mode = "rw" if integrity.has_hot_journal(path) else "ro"
        try:
            conn = connect(path, mode)
        except sqlite3.Error as exc:
            raise StoreError(f"{path}: cannot open the state store ({exc})") from exc
        try:
            version = integrity.check_contents(conn, path)
        except BaseException:
            conn.close()
            raise
        if version < schema.SCHEMA_VERSION:
            memory = connect(":memory:", "memory")
            conn.backup(memory)
            conn.close()
            conn = memory
            _upgrade_in_memory(conn, version)
    conn.execute("PRAGMA query_only = ON")
    return conn


def _upgrade_in_memory(conn: sqlite3.Connection, version: int) -> None:
    conn.execute("BEGIN")
    try:
        schema.migrate(conn, version, schema.SCHEMA_VERSION, schema.MIGRATIONS)
    except BaseException:
        conn.execute("ROLLBACK")
        conn.close()
        raise
    conn.execute("COMMIT")
