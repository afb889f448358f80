"""``kctl report``: write the HTML report of a deployment (the newest deploy by default),
and the report ``kctl deploy`` writes next to the state when it ends."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from kctl.errors import UsageError

if TYPE_CHECKING:
    from kctl.controller.context import Context
    from kctl.store import Store


class ReportResult(BaseModel):
    """What ``kctl report`` wrote (docs/report.md)."""

    deployment_id: str
    profile: str
    status: str = Field(description="the deployment's status: promoted, rejected ...")
    verdict: str | None = Field(
        description="PASS, FAIL, INCONCLUSIVE, UNHEALTHY ..., null before a verdict"
    )
    path: str = Field(description="the HTML file written")
    missing: list[str] = Field(
        description="what the page says is missing and why (no gate result, no baseline "
        "measurement)"
    )


def report(
    ctx: Context, deployment_id: str | None, out: Path | None = None, *, history: bool = False
) -> ReportResult:
    """Write the report of ``deployment_id`` (the newest deploy when None) to ``out``
    (default ``<state>/reports/<id>.html``). Reads the store only."""
    from kctl.report import write_report

    if not (ctx.state_dir / "kctl.db").exists():
        raise UsageError(
            f"{ctx.state_dir}: nothing deployed yet, so there is nothing to report",
            hint="run `kctl deploy PROFILE` first (or pass the --state-dir it used)",
        )
    store = ctx.open_store(read_only=True)
    try:
        data, path = write_report(ctx, store, deployment_id, out, history=history)
    finally:
        store.close()
    dep = data.deployment
    return ReportResult(
        deployment_id=dep.id,
        profile=dep.profile_name,
        status=dep.status,
        verdict=dep.verdict,
        path=str(path),
        missing=list(data.missing),
    )


def deploy_report(ctx: Context, store: Store, deployment_id: str) -> str | None:
    """The report of a deploy that just ended, written to ``<state>/reports/<id>.html``;
    its path, or None (with a warning) when it could not be written: a report never
    changes a deploy's outcome."""
    from kctl.report import write_report

    try:
        _, path = write_report(ctx, store, deployment_id)
    except Exception as exc:  # noqa: BLE001 - the deploy's outcome stands without its report
        ctx.reporter.warn(f"the report of {deployment_id} was not written: {exc}")
        return None
    return str(path)
