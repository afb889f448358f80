"""``kctl report``: one self-contained HTML page per deployment, read from the store.

:mod:`.data` gathers what the store recorded (the gate result, the baseline measurement
the gate used, the journal, the profiles), :mod:`.charts` turns it into Vega-Lite
specifications with altair, :mod:`.page` renders ``kctl/templates/report.html.j2`` with
the Vega JavaScript inlined, and :func:`write_report` writes the file privately (0600).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from kctl.report.data import (
    Context,
    DiffRow,
    HistoryPoint,
    Phase,
    ReportData,
    gather,
    profile_diff,
)

if TYPE_CHECKING:
    from kctl.store import Store

__all__ = [
    "DiffRow",
    "HistoryPoint",
    "Phase",
    "ReportData",
    "gather",
    "profile_diff",
    "report_path",
    "write_report",
]

#: where ``kctl deploy`` writes each deployment's report, under the state dir
REPORTS_DIR = "reports"


def report_path(state_dir: Path, deployment_id: str) -> Path:
    """``<state_dir>/reports/<id>.html``: the report ``kctl deploy`` writes."""
    return state_dir / REPORTS_DIR / f"{deployment_id}.html"


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically, readable by its owner only (0600): a report
    names the host's model paths, images and environment."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_report(
    ctx: Context,
    store: Store,
    deployment_id: str | None,
    out: Path | None = None,
    *,
    history: bool = False,
) -> tuple[ReportData, Path]:
    """Gather, render and write the report of a deployment (the newest deploy when
    ``deployment_id`` is None) to ``out`` (default :func:`report_path`)."""
    from kctl.report.page import render

    data = gather(ctx, store, deployment_id, history=history)
    path = out if out is not None else report_path(ctx.state_dir, data.deployment.id)
    write_private(path, render(data))
    return data, path
