"""The simulated orchestrator's state (:mod:`kctl.fleet.simfleet`): its services (spec,
previous spec, update status) and tasks, in ``<fleet state dir>/orchestrator/state.json``,
read and written under an exclusive ``flock`` so two kctl commands never act on it at once;
written atomically (a kctl killed mid-write leaves the old file whole), schema-versioned (a
newer or corrupt file is refused, never overwritten).

Also the per-replica fault knob, ``KCTL_SIM_FLEET_FAULT``, read only by the simulated
orchestrator (so only under ``--simulate``)::

    KCTL_SIM_FLEET_FAULT=<profile>:<slot>=<fault>[+<fault>...][,...]

gives the simulator's ``KCTL_SIM_FAULT`` to the replicas of ``<profile>`` in main-service
slot ``<slot>`` (1-based), or to its canary with ``<slot>`` = ``canary``; e.g.
``candidate:2=crash_while_loading`` makes the second replica of the candidate crash while
loading when the waves reach it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kctl.errors import StoreCorrupt, UsageError
from kctl.statedir import ensure_dir, open_fd, write_new

SCHEMA = 1
FAULT_ENV = "KCTL_SIM_FLEET_FAULT"
_ITEM = re.compile(
    r"^(?P<profile>[A-Za-z0-9][-A-Za-z0-9_.]*):(?P<slot>[0-9]+|canary)=(?P<faults>[a-z_+]+)$"
)

#: (profile, role, slot) -> the simulator faults of that replica
Faults = dict[tuple[str, str, int], tuple[str, ...]]


def parse_faults(text: str) -> Faults:
    """The knob's value as data; UsageError (exit 2) naming the bad item and the form."""
    from kctl.sim.settings import FAULTS

    out: Faults = {}
    for raw in (t.strip() for t in text.split(",")):
        if not raw:
            continue
        m = _ITEM.match(raw)
        faults = tuple(m["faults"].split("+")) if m else ()
        unknown = [f for f in faults if f not in FAULTS]
        if m is None or unknown or (m["slot"] != "canary" and int(m["slot"]) < 1):
            raise UsageError(
                f"{FAULT_ENV}: {raw!r} is not <profile>:<slot>=<fault>[+<fault>]"
                + (f" (unknown fault {unknown[0]!r})" if unknown else ""),
                hint=f"e.g. {FAULT_ENV}=candidate:2=crash_while_loading; slot is 1-based or "
                f"'canary'; faults: {', '.join(FAULTS)}",
            )
        role, slot = ("canary", 1) if m["slot"] == "canary" else ("main", int(m["slot"]))
        out[(m["profile"], role, slot)] = faults
    return out


def faults_from_env(environ: dict[str, str] | None = None) -> Faults:
    return parse_faults((os.environ if environ is None else environ).get(FAULT_ENV, ""))


def _empty() -> dict[str, Any]:
    return {"schema": SCHEMA, "services": {}, "tasks": []}


def _load(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return _empty()
    except (OSError, ValueError) as exc:
        raise StoreCorrupt(
            f"the simulated orchestrator's state {path} cannot be read: {exc}",
            hint="stop its processes (`kctl --simulate rollback --fleet FLEET` once fixed), "
            "or remove the fleet's simulate/ state dir",
        ) from exc
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise StoreCorrupt(
            f"the simulated orchestrator's state {path} has schema {data.get('schema') if isinstance(data, dict) else '?'}, "
            f"this kctl reads {SCHEMA}",
            hint="use the kctl that wrote it, or remove the fleet's simulate/ state dir",
        )
    return data


def save(path: Path, state: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    write_new(tmp, json.dumps(state, indent=1, sort_keys=True).encode())  # 0600, no symlink
    os.replace(tmp, path)


@contextlib.contextmanager
def locked(directory: Path) -> Iterator[dict[str, Any]]:
    """The state, held exclusively; saved on a normal exit of the block. The directory is
    0700 and its files 0600, as the rest of the state dir (:mod:`kctl.statedir`)."""
    ensure_dir(directory)
    with os.fdopen(open_fd(directory / "lock", os.O_WRONLY | os.O_APPEND | os.O_CREAT), "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        state = _load(directory / "state.json")
        yield state
        save(directory / "state.json", state)
