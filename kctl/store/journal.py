"""The deploy journal (STYLE rule 7): before a step changes the host, its intent is
committed; afterwards the step is closed as done or failed; the transaction (id = the
deployment id) is ended with its outcome. A kctl killed outright leaves an open
transaction, and its last unclosed step says what may be half-done on the host.

Part of :class:`kctl.store.Store`; kept in its own module for size.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any

from kctl.store.records import JournalStep, OpenTransaction


def _step(row: sqlite3.Row) -> JournalStep:
    return JournalStep(
        txn=row["txn"],
        seq=row["seq"],
        step=row["step"],
        intent=json.loads(row["intent_json"]),
        state=row["state"],
        ts=row["ts"],
        ts_epoch=row["ts_epoch"],
        note=row["note"],
        closed_at=row["closed_at"],
        closed_ts=row["closed_ts"],
    )


class JournalMixin:
    """Journal methods of :class:`kctl.store.Store`."""

    _conn: sqlite3.Connection
    _depth: int

    if TYPE_CHECKING:

        def transaction(self) -> AbstractContextManager[None]: ...

        def _now(self) -> tuple[str, float]: ...

    def begin_step(self, txn: str, step: str, intent: Mapping[str, Any] | None = None) -> int:
        """Record the intent of a host-changing step and commit it; returns the step's
        sequence number within ``txn`` (1, 2, ...). Call it BEFORE acting, outside any
        :meth:`transaction` block (the intent must be on disk before the host changes)."""
        if self._depth:
            raise RuntimeError(
                "begin_step inside store.transaction(): the intent would not be committed "
                "before the step runs"
            )
        payload = json.dumps(dict(intent or {}), sort_keys=True)
        with self.transaction():
            at, ts = self._now()
            ended = self._conn.execute(
                "SELECT outcome FROM transactions WHERE txn = ? AND ended_ts IS NOT NULL", (txn,)
            ).fetchone()
            if ended is not None:
                raise RuntimeError(
                    f"journal transaction {txn} already ended ({ended[0]}); cannot add {step!r}"
                )
            self._conn.execute(
                "INSERT OR IGNORE INTO transactions (txn, begun_at, begun_ts) VALUES (?, ?, ?)",
                (txn, at, ts),
            )
            seq = int(
                self._conn.execute(
                    "SELECT coalesce(max(seq), 0) + 1 FROM journal WHERE txn = ?", (txn,)
                ).fetchone()[0]
            )
            self._conn.execute(
                """INSERT INTO journal (txn, seq, step, intent_json, state, ts, ts_epoch)
                VALUES (?, ?, ?, ?, 'intent', ?, ?)""",
                (txn, seq, step, payload, at, ts),
            )
        return seq

    def finish_step(self, txn: str, seq: int, state: str = "done", note: str | None = None) -> None:
        """Close a step as "done" or "failed". The first close wins: closing an already
        closed step again changes nothing (a signal handler may race the normal path)."""
        if state not in ("done", "failed"):
            raise ValueError(f"finish_step: state must be 'done' or 'failed', not {state!r}")
        with self.transaction():
            at, ts = self._now()
            cur = self._conn.execute(
                """UPDATE journal SET state = ?, note = ?, closed_at = ?, closed_ts = ?
                WHERE txn = ? AND seq = ? AND state = 'intent'""",
                (state, note, at, ts, txn, seq),
            )
            if cur.rowcount == 0:
                exists = self._conn.execute(
                    "SELECT 1 FROM journal WHERE txn = ? AND seq = ?", (txn, seq)
                ).fetchone()
                if exists is None:
                    raise RuntimeError(f"no journal step {txn}#{seq}")

    @contextmanager
    def step(self, txn: str, step: str, intent: Mapping[str, Any] | None = None) -> Iterator[int]:
        """``with store.step(txn, "stop", {...}):`` — begin_step before the block,
        finish_step "done" after it, "failed" (noting the exception) if it raises,
        including KeyboardInterrupt."""
        seq = self.begin_step(txn, step, intent)
        try:
            yield seq
        except BaseException as exc:
            self.finish_step(txn, seq, "failed", note=f"{type(exc).__name__}: {exc}")
            raise
        self.finish_step(txn, seq, "done")

    def end_transaction(self, txn: str, outcome: str) -> None:
        """Mark the transaction ended with its outcome ("promoted", "reverted",
        "degraded", "recovered by d-...", ...). The first end wins."""
        with self.transaction():
            at, ts = self._now()
            self._conn.execute(
                "INSERT OR IGNORE INTO transactions (txn, begun_at, begun_ts) VALUES (?, ?, ?)",
                (txn, at, ts),
            )
            self._conn.execute(
                """UPDATE transactions SET outcome = ?, ended_at = ?, ended_ts = ?
                WHERE txn = ? AND ended_ts IS NULL""",
                (outcome, at, ts, txn),
            )

    def journal(self, txn: str) -> list[JournalStep]:
        """Every step of a transaction, in order."""
        rows = self._conn.execute(
            "SELECT * FROM journal WHERE txn = ? ORDER BY seq", (txn,)
        ).fetchall()
        return [_step(r) for r in rows]

    def transaction_outcome(self, txn: str) -> str | None:
        """The outcome a transaction ended with; None while it is open or unknown."""
        row = self._conn.execute(
            "SELECT outcome FROM transactions WHERE txn = ? AND ended_ts IS NOT NULL", (txn,)
        ).fetchone()
        return None if row is None else str(row[0])

    def open_transactions(self) -> list[OpenTransaction]:
        """Transactions never ended, oldest first: the one running now (its kctl holds
        the deploy lock) or ones whose kctl died. ``OpenTransaction.pending`` is the step
        that was started and never closed, when there is one."""
        rows = self._conn.execute(
            "SELECT txn, begun_at, begun_ts FROM transactions WHERE ended_ts IS NULL "
            "ORDER BY begun_ts, rowid"
        ).fetchall()
        return [
            OpenTransaction(
                txn=r["txn"],
                begun_at=r["begun_at"],
                begun_ts=r["begun_ts"],
                steps=tuple(self.journal(r["txn"])),
            )
            for r in rows
        ]
