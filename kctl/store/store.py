"""The :class:`Store`: kctl's durable memory in ``<state_dir>/kctl.db``.

Every public write is one SQLite transaction: it happens whole or not at all, also when
kctl is killed half-way. Callers that must change several things together (promote:
status + serving pointer + known-good + end of the journal transaction) wrap the calls
in :meth:`Store.transaction`.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_attempt

from kctl.errors import DeploymentNotFound, StoreError
from kctl.store import connection, schema
from kctl.store.journal import JournalMixin
from kctl.store.records import (
    TERMINAL_STATUSES,
    Clock,
    Deployment,
    DeploymentKind,
    DeploymentStatus,
    deployment_from_row,
    instance_record,
    iso_utc,
    new_deployment_id,
    profile_record,
    to_json,
)
from kctl.store.results import ResultsMixin

if TYPE_CHECKING:
    from kctl.profile.model import Profile

#: fields update_deployment accepts; ``timings`` is merged, the others replaced
UPDATABLE = frozenset(
    {
        "status",
        "verdict",
        "reason",
        "exit_code",
        "runtime",
        "instance",
        "server",
        "parent_id",
        "baseline_id",
        "timings",
    }
)


def _no_unique_id(state: RetryCallState) -> Deployment:
    raise StoreError(
        f"could not allocate a unique deployment id in {state.attempt_number} tries",
        hint="this is a kctl bug; please report it",
    )


class Store(JournalMixin, ResultsMixin):
    """Deployments, measurements, gate results, the serving and known-good pointers,
    and the deploy journal. Open with :meth:`Store.open`; close when done (or use it as
    a context manager)."""

    def __init__(
        self, conn: sqlite3.Connection, path: Path, *, clock: Clock, read_only: bool
    ) -> None:
        self._conn = conn
        self.path = path
        self.clock = clock
        self.read_only = read_only
        self._depth = 0

    @classmethod
    def open(
        cls,
        state_dir: str | os.PathLike[str],
        *,
        read_only: bool = False,
        clock: Clock = time.time,
    ) -> Store:
        """Open ``<state_dir>/kctl.db``.

        Writable (default): creates the directory and the store if missing, migrates an
        older schema (after copying the file to ``kctl.db.schema-N.bak``).
        ``read_only=True`` (``status``, ``history``): creates nothing; a missing store reads
        as empty; every write raises StoreError.

        Raises StoreCorrupt for a damaged or foreign file, StoreError for a newer schema
        or an unwritable directory; a refused file is never modified.
        """
        from kctl.store.records_check import check_records

        state_dir = Path(state_dir)
        if read_only:
            conn = connection.open_read_only(state_dir)
        else:
            conn = connection.open_writable(state_dir)
        try:
            check_records(conn, state_dir / connection.DB_NAME)
        except BaseException:
            conn.close()
            raise
        return cls(conn, state_dir / connection.DB_NAME, clock=clock, read_only=read_only)

    def close(self) -> None:
        """Close the connection; the store is unusable afterwards."""
        self._conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- transactions ---------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Make every store write inside the block one atomic change. Nested blocks are
        savepoints: an exception leaving an inner block undoes only that block."""
        if self.read_only:
            raise StoreError(
                f"{self.path}: opened read-only; this command cannot change state",
                hint="this is a kctl bug; please report it",
            )
        if self._depth:
            name = f"kctl_{self._depth}"
            self._conn.execute(f"SAVEPOINT {name}")
            self._depth += 1
            try:
                yield
            except BaseException:
                if self._conn.in_transaction:
                    self._conn.execute(f"ROLLBACK TO {name}")
                    self._conn.execute(f"RELEASE {name}")
                raise
            else:
                self._conn.execute(f"RELEASE {name}")
            finally:
                self._depth -= 1
            return
        self._sql("BEGIN IMMEDIATE")
        self._depth = 1
        try:
            yield
        except BaseException as exc:
            self._depth = 0
            # some errors (disk full, I/O) make SQLite roll back by itself
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.OperationalError):
                raise StoreError(
                    f"{self.path}: cannot write the state store ({exc})",
                    hint="check free disk space and that no other program holds the file",
                ) from exc
            raise
        try:
            self._sql("COMMIT")
        except BaseException:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            raise
        finally:
            self._depth = 0

    def _sql(self, statement: str) -> None:
        try:
            self._conn.execute(statement)
        except sqlite3.OperationalError as exc:
            raise StoreError(
                f"{self.path}: cannot write the state store ({exc})",
                hint="another kctl may hold it busy; try again",
            ) from exc

    @property
    def in_transaction(self) -> bool:
        """True inside :meth:`transaction` (its writes are not committed yet)."""
        return self._depth > 0

    def _now(self) -> tuple[str, float]:
        ts = float(self.clock())
        return iso_utc(ts), ts

    # -- deployments ----------------------------------------------------------------

    def new_deployment(
        self,
        kind: DeploymentKind,
        profile: Profile | Mapping[str, Any],
        *,
        runtime: str = "",
        parent_id: str | None = None,
        baseline_id: str | None = None,
        status: DeploymentStatus = "planned",
        deployment_id: str | None = None,
    ) -> Deployment:
        """Record a new deployment and return it. ``profile`` is the resolved
        :class:`Profile` or its stored dict form (``Deployment.profile`` of an earlier
        deployment, for a rollback). The id is ``d-YYYYmmdd-HHMMSS-xxxx`` unless given."""
        if kind not in schema.DEPLOYMENT_KINDS:
            raise ValueError(f"unknown deployment kind {kind!r}")
        if status not in schema.DEPLOYMENT_STATUSES:
            raise ValueError(f"unknown deployment status {status!r}")
        record = profile_record(profile)
        started_at, started_ts = self._now()
        values = (
            kind,
            str(record["name"]),
            str(record["source"]),
            str(record["content_hash"]),
            to_json(record),
            status,
            runtime,
            parent_id,
            baseline_id,
            started_at,
            started_ts,
        )
        if deployment_id is not None:
            return self._insert_deployment(deployment_id, values)
        # a fresh random suffix when two deployments of the same second collide
        retrying = Retrying(
            stop=stop_after_attempt(8),
            retry=retry_if_exception_type(sqlite3.IntegrityError),
            retry_error_callback=_no_unique_id,
        )
        deployment: Deployment = retrying(
            lambda: self._insert_deployment(new_deployment_id(started_ts), values)
        )
        return deployment

    def _insert_deployment(self, did: str, values: tuple[Any, ...]) -> Deployment:
        with self.transaction():
            self._conn.execute(
                """INSERT INTO deployments (id, kind, profile_name, profile_path,
                profile_hash, profile_json, status, runtime, parent_id, baseline_id,
                started_at, started_ts) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)""",
                (did, *values),
            )
        return self.get_deployment(did)

    def update_deployment(self, deployment_id: str, **fields: Any) -> Deployment:
        """Change the named fields of a deployment and return it. Accepts status, verdict,
        reason, exit_code, runtime, instance (Instance or dict), server (``/server_info`` as
        recorded), parent_id, baseline_id and timings (merged into the recorded timings). Setting a terminal status stamps
        ``ended_at`` once."""
        unknown = set(fields) - UPDATABLE
        if unknown:
            raise ValueError(f"update_deployment: unknown field(s) {', '.join(sorted(unknown))}")
        if "status" in fields and fields["status"] not in schema.DEPLOYMENT_STATUSES:
            raise ValueError(f"unknown deployment status {fields['status']!r}")
        with self.transaction():
            current = self.get_deployment(deployment_id)
            columns: dict[str, Any] = {}
            for name, value in fields.items():
                if name == "instance":
                    columns["instance_json"] = instance_record(value)
                elif name == "server":
                    columns["server_json"] = None if value is None else to_json(value)
                elif name == "timings":
                    columns["timings_json"] = to_json({**current.timings, **dict(value)})
                else:
                    columns[name] = value
            if fields.get("status") in TERMINAL_STATUSES and current.ended_ts is None:
                columns["ended_at"], columns["ended_ts"] = self._now()
            if columns:
                assignments = ", ".join(f"{c} = ?" for c in columns)
                self._conn.execute(
                    f"UPDATE deployments SET {assignments} WHERE id = ?",
                    (*columns.values(), current.id),
                )
            return self.get_deployment(current.id)

    def get_deployment(self, deployment_id: str) -> Deployment:
        """The deployment with this id, or with this unique id prefix. Raises DeploymentNotFound
        naming the id when there is none."""
        row = self._conn.execute(
            "SELECT * FROM deployments WHERE id = ?", (deployment_id,)
        ).fetchone()
        if row is None and deployment_id:
            escaped = deployment_id.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            rows = self._conn.execute(
                "SELECT * FROM deployments WHERE id LIKE ? ESCAPE '\\' LIMIT 2",
                (escaped + "%",),
            ).fetchall()
            if len(rows) > 1:
                raise DeploymentNotFound(deployment_id, ambiguous=True)
            row = rows[0] if rows else None
        if row is None:
            raise DeploymentNotFound(deployment_id)
        return deployment_from_row(row)

    def list_deployments(
        self, limit: int = 20, offset: int = 0, kinds: Iterable[DeploymentKind] | None = None
    ) -> list[Deployment]:
        """Deployments, newest first."""
        where, params = "", []
        if kinds is not None:
            wanted = list(kinds)
            where = f"WHERE kind IN ({', '.join('?' for _ in wanted)})"
            params = wanted
        rows = self._conn.execute(
            f"SELECT * FROM deployments {where} ORDER BY started_ts DESC, rowid DESC "
            "LIMIT ? OFFSET ?",
            (*params, limit, offset),
        ).fetchall()
        return [deployment_from_row(r) for r in rows]

    # -- pointers -------------------------------------------------------------------

    def set_serving(self, deployment_id: str | None) -> None:
        """Record which deployment serves now; None when nothing kctl started serves."""
        with self.transaction():
            did = None if deployment_id is None else self.get_deployment(deployment_id).id
            at, ts = self._now()
            self._conn.execute(
                """INSERT INTO pointers (name, deployment_id, updated_at, updated_ts)
                VALUES ('serving', ?, ?, ?) ON CONFLICT (name) DO UPDATE SET
                deployment_id = excluded.deployment_id, updated_at = excluded.updated_at,
                updated_ts = excluded.updated_ts""",
                (did, at, ts),
            )

    def serving(self) -> Deployment | None:
        """The deployment recorded as serving (not reconciled with the runtime)."""
        row = self._conn.execute(
            "SELECT deployment_id FROM pointers WHERE name = 'serving'"
        ).fetchone()
        if row is None or row[0] is None:
            return None
        return self.get_deployment(row[0])

    def set_known_good(self, profile_hash: str, deployment_id: str) -> None:
        """Record ``deployment_id`` as the verified known-good deployment of the baseline
        profile with this content hash."""
        with self.transaction():
            did = self.get_deployment(deployment_id).id
            at, ts = self._now()
            self._conn.execute(
                """INSERT INTO known_good (profile_hash, deployment_id, updated_at, updated_ts)
                VALUES (?, ?, ?, ?) ON CONFLICT (profile_hash) DO UPDATE SET
                deployment_id = excluded.deployment_id, updated_at = excluded.updated_at,
                updated_ts = excluded.updated_ts""",
                (profile_hash, did, at, ts),
            )

    def known_good(self, profile_hash: str) -> Deployment | None:
        """The known-good deployment for this baseline profile hash, if any."""
        row = self._conn.execute(
            "SELECT deployment_id FROM known_good WHERE profile_hash = ?", (profile_hash,)
        ).fetchone()
        return None if row is None else self.get_deployment(row[0])

    def last_known_good(self) -> Deployment | None:
        """The known-good deployment recorded most recently, over all baseline profiles."""
        row = self._conn.execute(
            "SELECT deployment_id FROM known_good ORDER BY updated_ts DESC, rowid DESC LIMIT 1"
        ).fetchone()
        return None if row is None else self.get_deployment(row[0])
