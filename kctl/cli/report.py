"""``kctl report``: registered on the app on import, like :mod:`.commands`."""

from __future__ import annotations

from pathlib import Path

import typer

from kctl.cli.app import _Command, _context, _emit, app, flag


@app.command(cls=_Command)
def report(
    deployment: str | None = typer.Argument(
        None, help="Deployment id or a unique prefix of it (default: the newest deploy)."
    ),
    out: Path | None = typer.Option(
        None, "--out", help="Write the page here (default: <state>/reports/<id>.html)."
    ),
    history: bool = flag("--history", help="Add the known-good baseline's rates over time."),
) -> None:
    """Write a deployment's gate report: one HTML file that opens with no network.

    Decode tok/s against context (each repeat, the median and the threshold, the
    crossover), the ratio with its interval, TTFT, ITL and acceptance length, the verdict,
    the correctness probes, the timeline of the deploy's steps and what the try cost, and
    the profiles' differences. `kctl deploy` writes one for every deploy it ends."""
    from kctl.cli.text import report_text
    from kctl.controller.report import report as run

    result = run(_context(), deployment, out, history=history)
    _emit("report", result, report_text(result))
