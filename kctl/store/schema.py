"""The store's SQL schema and its migrations.

The schema version lives in ``PRAGMA user_version`` and the file is marked as kctl's
with ``PRAGMA application_id``, so a foreign SQLite file is never mistaken for an empty
store. A new schema version adds one entry to :data:`MIGRATIONS`; :func:`migrate` applies
them in order inside the caller's transaction, so a failed migration changes nothing.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping
from typing import get_args

from kctl.errors import StoreError
from kctl.store.records import DeploymentKind, DeploymentStatus, StepState

#: bump together with a new entry in MIGRATIONS
SCHEMA_VERSION = 2

#: "kctl" in ASCII; lets us tell our files from any other SQLite database
APPLICATION_ID = 0x6B63746C

# the value lists come from the record types, so the SQL CHECKs and the types cannot drift
DEPLOYMENT_KINDS: tuple[str, ...] = get_args(DeploymentKind)
DEPLOYMENT_STATUSES: tuple[str, ...] = get_args(DeploymentStatus)
STEP_STATES: tuple[str, ...] = get_args(StepState)


def _sql_in(values: tuple[str, ...]) -> str:
    return ", ".join(f"'{v}'" for v in values)


# Timestamps are stored twice: an ISO-8601 UTC string for people reading the file with the
# sqlite3 shell, and epoch seconds for ordering and age arithmetic.
SCHEMA_V1 = f"""
CREATE TABLE deployments (
    id            TEXT PRIMARY KEY,
    kind          TEXT NOT NULL CHECK (kind IN ({_sql_in(DEPLOYMENT_KINDS)})),
    profile_name  TEXT NOT NULL,
    profile_path  TEXT NOT NULL,
    profile_hash  TEXT NOT NULL,
    profile_json  TEXT NOT NULL,
    status        TEXT NOT NULL CHECK (status IN ({_sql_in(DEPLOYMENT_STATUSES)})),
    verdict       TEXT,
    reason        TEXT,
    exit_code     INTEGER,
    runtime       TEXT NOT NULL DEFAULT '',
    instance_json TEXT,
    parent_id     TEXT,
    baseline_id   TEXT,
    started_at    TEXT NOT NULL,
    started_ts    REAL NOT NULL,
    ended_at      TEXT,
    ended_ts      REAL,
    timings_json  TEXT NOT NULL DEFAULT '{{}}'
);
CREATE INDEX deployments_by_start ON deployments (started_ts);
CREATE INDEX deployments_by_hash ON deployments (profile_hash);

CREATE TABLE measurements (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    deployment_id TEXT REFERENCES deployments (id),
    profile_hash  TEXT NOT NULL,
    fingerprint   TEXT NOT NULL,
    created_at    TEXT NOT NULL,
    created_ts    REAL NOT NULL,
    data_json     TEXT NOT NULL
);
CREATE INDEX measurements_lookup ON measurements (profile_hash, fingerprint, created_ts);

CREATE TABLE gate_results (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    deployment_id TEXT NOT NULL REFERENCES deployments (id),
    created_at    TEXT NOT NULL,
    created_ts    REAL NOT NULL,
    data_json     TEXT NOT NULL
);
CREATE INDEX gate_results_by_deployment ON gate_results (deployment_id);

-- one row per pointer name, today only 'serving'
CREATE TABLE pointers (
    name          TEXT PRIMARY KEY,
    deployment_id TEXT REFERENCES deployments (id),
    updated_at    TEXT NOT NULL,
    updated_ts    REAL NOT NULL
);

CREATE TABLE known_good (
    profile_hash  TEXT PRIMARY KEY,
    deployment_id TEXT NOT NULL REFERENCES deployments (id),
    updated_at    TEXT NOT NULL,
    updated_ts    REAL NOT NULL
);

-- No foreign key to deployments: writing an intent must never be refused.
CREATE TABLE transactions (
    txn           TEXT PRIMARY KEY,
    begun_at      TEXT NOT NULL,
    begun_ts      REAL NOT NULL,
    outcome       TEXT,
    ended_at      TEXT,
    ended_ts      REAL
);

CREATE TABLE journal (
    txn           TEXT NOT NULL REFERENCES transactions (txn),
    seq           INTEGER NOT NULL,
    step          TEXT NOT NULL,
    intent_json   TEXT NOT NULL,
    state         TEXT NOT NULL CHECK (state IN ({_sql_in(STEP_STATES)})),
    note          TEXT,
    ts            TEXT NOT NULL,
    ts_epoch      REAL NOT NULL,
    closed_at     TEXT,
    closed_ts     REAL,
    PRIMARY KEY (txn, seq)
);
"""

Migration = Callable[[sqlite3.Connection], None]


def _v2_server_info(conn: sqlite3.Connection) -> None:
    """Version 2: what the server reported of itself after health (``/server_info``: the
    SGLang version and its effective arguments), as JSON; NULL before it was read."""
    conn.execute("ALTER TABLE deployments ADD COLUMN server_json TEXT")


#: MIGRATIONS[n] turns a version-n store into a version-(n+1) store. Each one runs
#: inside the transaction that also sets the new user_version.
MIGRATIONS: Mapping[int, Migration] = {1: _v2_server_info}


def create_schema(conn: sqlite3.Connection) -> None:
    """Create the current schema in an empty database: version 1, then every migration
    (one definition of each version); the caller holds a transaction."""
    for statement in SCHEMA_V1.split(";"):
        if statement.strip():
            conn.execute(statement)
    for version in range(1, SCHEMA_VERSION):
        MIGRATIONS[version](conn)
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def migrate(
    conn: sqlite3.Connection,
    from_version: int,
    to_version: int = SCHEMA_VERSION,
    migrations: Mapping[int, Migration] = MIGRATIONS,
) -> None:
    """Apply migrations ``from_version`` → ``to_version`` in order; the caller holds a
    transaction, so a failure in any step leaves the file as it was."""
    for version in range(from_version, to_version):
        step = migrations.get(version)
        if step is None:
            raise StoreError(
                f"no migration from store schema {version} to {version + 1}",
                hint="this kctl cannot read the store; install the kctl that wrote it",
            )
        step(conn)
        conn.execute(f"PRAGMA user_version = {version + 1}")
