"""Every stored record readable before a command acts: text that is UTF-8, JSON columns
that parse. A damaged record (a disk error, a hand edit) is refused with its table, its
key and the fix, by every command alike, before anything is read from or written to it."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from kctl.errors import StoreCorrupt

#: the tables checked, each with the column that names a record to the user
TABLES: dict[str, str] = {
    "deployments": "id",
    "measurements": "id",
    "gate_results": "id",
    "pointers": "name",
    "known_good": "profile_hash",
    "transactions": "txn",
    "journal": "txn",
}


def check_records(conn: sqlite3.Connection, path: Path) -> None:
    """Raise StoreCorrupt naming the first damaged record; reads only."""
    tables = {
        str(r[0]) for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
    }
    saved = conn.text_factory
    conn.text_factory = bytes
    try:
        for table, key in TABLES.items():
            if table in tables:
                _check_table(conn, path, table, key)
    finally:
        conn.text_factory = saved


def _check_table(conn: sqlite3.Connection, path: Path, table: str, key: str) -> None:
    cur = conn.execute(f"SELECT * FROM {table}")  # noqa: S608 - names from TABLES
    columns = [d[0] for d in cur.description]
    for row in cur:
        values = dict(zip(columns, row, strict=True))
        name = _text(values.get(key))
        for column, value in values.items():
            if not isinstance(value, bytes):
                continue
            try:
                text = value.decode("utf-8")
                if column.endswith("_json"):
                    json.loads(text)
            except (UnicodeDecodeError, ValueError) as exc:
                what = (
                    "is not valid UTF-8"
                    if isinstance(exc, UnicodeDecodeError)
                    else ("is not valid JSON")
                )
                raise StoreCorrupt(
                    f"{path}: the {table} record {key}={name} is damaged: its column "
                    f"{column} {what}; kctl refused the store and changed nothing",
                    hint=f"move {path.name} aside and restore it from a backup (a "
                    f"{path.name}.schema-N.bak next to it, if any), or remove that one record "
                    f"with `sqlite3 {path} \"DELETE FROM {table} WHERE {key} = '{name}'\"`",
                ) from exc


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)
