"""kctl's state store: one SQLite file, ``<state_dir>/kctl.db``.

What it holds: deployments (every deploy, rollback, bench and baseline run, with the
resolved profile, status, verdict and the runtime instance), gate measurements and
results, the *serving* pointer, the known-good deployment per baseline profile hash,
and the deploy journal (intent before every host-changing step).

Rules (STYLE rule 9): every write is atomic; the schema is versioned
(``PRAGMA user_version``); a corrupt, empty, foreign or newer-version file is refused with
the remedy and never modified. Only a missing file starts a new store, and a new store is
created whole (built under a temporary name, then linked into place).

Modules: :mod:`.store` (the :class:`Store` API), :mod:`.journal` (its journal methods),
:mod:`.records` (the dataclasses it returns), :mod:`.connection` (open, create, migrate),
:mod:`.integrity` (the checks that refuse a file), :mod:`.schema` (SQL and migrations).
"""

from kctl.store.records import (
    TERMINAL_STATUSES,
    Deployment,
    DeploymentKind,
    DeploymentStatus,
    JournalStep,
    OpenTransaction,
)
from kctl.store.schema import SCHEMA_VERSION
from kctl.store.store import Store

__all__ = [
    "SCHEMA_VERSION",
    "TERMINAL_STATUSES",
    "Deployment",
    "DeploymentKind",
    "DeploymentStatus",
    "JournalStep",
    "OpenTransaction",
    "Store",
]
