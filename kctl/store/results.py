"""Gate measurements and gate results: the numbers a verdict was made from.

Part of :class:`kctl.store.Store`; kept in its own module for size.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from kctl.store.records import Clock, Deployment, StoredMeasurement, to_json


class ResultsMixin:
    """Measurement and gate-result methods of :class:`kctl.store.Store`."""

    _conn: sqlite3.Connection
    clock: Clock

    if TYPE_CHECKING:

        def transaction(self) -> AbstractContextManager[None]: ...

        def _now(self) -> tuple[str, float]: ...

        def get_deployment(self, deployment_id: str) -> Deployment: ...

    def save_measurement(
        self,
        *,
        deployment_id: str | None,
        profile_hash: str,
        fingerprint: str,
        data: Mapping[str, Any],
    ) -> int:
        """Store one gate measurement (``Measurement.to_dict()``) of the profile with this
        hash under this workload/host fingerprint; returns its id."""
        payload = to_json(dict(data))
        with self.transaction():
            if deployment_id is not None:
                deployment_id = self.get_deployment(deployment_id).id
            at, ts = self._now()
            cur = self._conn.execute(
                """INSERT INTO measurements (deployment_id, profile_hash, fingerprint,
                created_at, created_ts, data_json) VALUES (?, ?, ?, ?, ?, ?)""",
                (deployment_id, profile_hash, fingerprint, at, ts, payload),
            )
            return int(cur.lastrowid or 0)

    def latest_measurement(
        self,
        profile_hash: str,
        fingerprint: str,
        max_age_s: float,
        now: float | None = None,
    ) -> tuple[dict[str, Any], float] | None:
        """The newest measurement of (profile hash, fingerprint) at most ``max_age_s``
        old at ``now`` (default: the store's clock), as ``(data, created_ts)`` with
        ``created_ts`` in epoch seconds; None when there is none that fresh. One dated
        after ``now`` (the clock went back) does not count: measuring again is safe."""
        now = float(self.clock()) if now is None else now
        row = self._conn.execute(
            """SELECT data_json, created_ts FROM measurements
            WHERE profile_hash = ? AND fingerprint = ? AND created_ts BETWEEN ? AND ?
            ORDER BY created_ts DESC, id DESC LIMIT 1""",
            (profile_hash, fingerprint, now - max_age_s, now),
        ).fetchone()
        if row is None:
            return None
        return json.loads(row["data_json"]), float(row["created_ts"])

    def measurements(
        self, profile_hash: str, *, until_ts: float | None = None, limit: int = 100
    ) -> list[StoredMeasurement]:
        """The measurements of the profile with this hash, newest first, at most ``limit``;
        with ``until_ts`` only those made at or before it (the one a past gate used)."""
        bound = float("inf") if until_ts is None else until_ts
        rows = self._conn.execute(
            """SELECT id, deployment_id, fingerprint, created_ts, data_json FROM measurements
            WHERE profile_hash = ? AND created_ts <= ? ORDER BY created_ts DESC, id DESC
            LIMIT ?""",
            (profile_hash, bound, limit),
        ).fetchall()
        return [
            StoredMeasurement(
                id=int(r["id"]),
                deployment_id=r["deployment_id"],
                fingerprint=r["fingerprint"],
                created_ts=float(r["created_ts"]),
                data=json.loads(r["data_json"]),
            )
            for r in rows
        ]

    def gate_result_at(self, deployment_id: str) -> tuple[dict[str, Any], float] | None:
        """The latest gate result of this deployment with the epoch seconds it was stored."""
        did = self.get_deployment(deployment_id).id
        row = self._conn.execute(
            "SELECT data_json, created_ts FROM gate_results WHERE deployment_id = ? "
            "ORDER BY created_ts DESC, id DESC LIMIT 1",
            (did,),
        ).fetchone()
        return None if row is None else (json.loads(row[0]), float(row[1]))

    def save_gate_result(self, deployment_id: str, data: Mapping[str, Any]) -> int:
        """Store the gate's result (summary, verdict, reason) for a deployment."""
        payload = to_json(dict(data))
        with self.transaction():
            did = self.get_deployment(deployment_id).id
            at, ts = self._now()
            cur = self._conn.execute(
                """INSERT INTO gate_results (deployment_id, created_at, created_ts, data_json)
                VALUES (?, ?, ?, ?)""",
                (did, at, ts, payload),
            )
            return int(cur.lastrowid or 0)

    def gate_result(self, deployment_id: str) -> dict[str, Any] | None:
        """The latest gate result stored for this deployment."""
        did = self.get_deployment(deployment_id).id
        row = self._conn.execute(
            "SELECT data_json FROM gate_results WHERE deployment_id = ? "
            "ORDER BY created_ts DESC, id DESC LIMIT 1",
            (did,),
        ).fetchone()
        return None if row is None else json.loads(row[0])

    def last_gate_result(self) -> tuple[Deployment, dict[str, Any]] | None:
        """The most recent gate result of any deployment, with its deployment."""
        row = self._conn.execute(
            "SELECT deployment_id, data_json FROM gate_results "
            "ORDER BY created_ts DESC, id DESC LIMIT 1"
        ).fetchone()
        if row is None:
            return None
        return self.get_deployment(row[0]), json.loads(row[1])
