"""What a person sees while kctl waits: on a terminal, rich progress bars on stderr (one per
long wait: the model load with its deadline and the server's own log phase, the gate's
requests per context, the revert); piped, plain ``kctl: ...`` lines, throttled, that a log
or a test can read. stdout (the result, or the ``--json`` envelope) is never touched."""

from __future__ import annotations

import atexit
import sys
import time
from dataclasses import dataclass
from typing import Any

#: the shortest interval between two plain lines of the same wait (the last one is always shown)
PLAIN_EVERY_S = 2.0


@dataclass
class _Task:
    id: Any
    finished: bool = False


class CliReporter:
    """Progress on stderr: rich bars on a terminal, throttled plain lines otherwise."""

    def __init__(self, quiet: bool, verbose: bool = False, *, tty: bool | None = None) -> None:
        self.quiet = quiet
        self.verbose = verbose
        self.tty = sys.stderr.isatty() if tty is None else tty
        self._last: dict[str, float] = {}
        self._bars: Any = None  # rich.progress.Progress while a wait is drawn
        self._tasks: dict[str, _Task] = {}
        self._exit_hook = False

    # -- lines --------------------------------------------------------------------------

    def _line(self, text: str) -> None:
        if self._bars is not None:
            self._bars.console.print(text, markup=False, highlight=False, soft_wrap=True)
        else:
            print(text, file=sys.stderr, flush=True)

    def event(self, message: str) -> None:
        self._settle(stop_all=False)
        self._line(f"kctl: {message}")

    def warn(self, message: str) -> None:
        # a warning changes course (a failed wait, a revert): the bars drawn so far end here
        self._settle(stop_all=True)
        self._line(f"kctl: warning: {message}")

    def progress(self, message: str, detail: str = "") -> None:
        """A one-line activity (the image build's step, a probe of the image); ``detail`` is
        an expected miss, shown live on a terminal, else only with --verbose."""
        if detail and (self.tty or self.verbose):
            message = f"{message}: {detail}"
        if self.tty:
            self._draw("activity", message[:160], completed=0.0, total=None, count="", status="")
            return
        self._plain("activity", f"kctl: {message}", final=self.verbose)

    # -- long waits ---------------------------------------------------------------------

    def task(
        self,
        key: str,
        description: str,
        *,
        completed: float,
        total: float | None = None,
        unit: str = "",
        status: str = "",
        detail: str = "",
        done: bool = False,
    ) -> None:
        """One long wait's progress: ``key`` names it (one bar each), ``completed`` of
        ``total`` ``unit`` (None: no known end), ``status`` what it does now, ``detail`` an
        expected miss (shown on a terminal or with --verbose). ``done`` ends it."""
        count = f"{completed:.0f}/{total:.0f} {unit}".strip() if total is not None else ""
        if detail and (self.tty or self.verbose):
            status = f"{status}: {detail}" if status else detail
        if self.tty:
            self._draw(key, description, completed, total, count, status, done)
            return
        text = f"kctl: {description}: {status}" if status else f"kctl: {description}"
        self._plain(key, f"{text} ({count})" if count else text, final=done or self.verbose)

    def close(self) -> None:
        """Stop drawing (the bars' last state stays on the terminal)."""
        self._settle(stop_all=True)

    # -- drawing ------------------------------------------------------------------------

    def _plain(self, key: str, text: str, *, final: bool) -> None:
        now = time.monotonic()
        if final or now - self._last.get(key, float("-inf")) >= PLAIN_EVERY_S:
            self._last[key] = now
            print(text, file=sys.stderr, flush=True)

    def _start(self) -> Any:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )

        bars = Progress(
            SpinnerColumn(finished_text="[green]✓"),
            TextColumn("[bold]{task.description}"),
            BarColumn(bar_width=28),
            TextColumn("{task.fields[count]}"),
            TimeElapsedColumn(),
            TextColumn("{task.fields[status]}", markup=False),
            console=Console(stderr=True),
            redirect_stdout=False,
            redirect_stderr=False,
        )
        bars.start()
        if not self._exit_hook:
            # a command that ends by an error never reaches _emit: stop drawing at exit
            atexit.register(self.close)
            self._exit_hook = True
        return bars

    def _draw(
        self,
        key: str,
        description: str,
        completed: float,
        total: float | None,
        count: str,
        status: str,
        done: bool = False,
    ) -> None:
        if self._bars is None:
            self._bars = self._start()
            self._tasks = {}
        fields = {"count": count, "status": status}
        task = self._tasks.get(key)
        if task is None:
            tid = self._bars.add_task(description, total=total, completed=completed, **fields)
            task = self._tasks[key] = _Task(tid)
        else:
            self._bars.update(
                task.id, description=description, total=total, completed=completed, **fields
            )
            self._bars.start_task(task.id)
        ended = done or (total is not None and completed >= total)
        task.finished = ended
        if ended:
            self._bars.update(task.id, completed=total if total is not None else completed)
            if total is None:
                self._bars.stop_task(task.id)

    def _settle(self, *, stop_all: bool) -> None:
        """Between waits: drop the activity line; stop drawing when no wait is under way
        (or ``stop_all``), leaving the finished bars on the terminal."""
        if self._bars is None:
            return
        activity = self._tasks.pop("activity", None)
        if activity is not None:
            self._bars.remove_task(activity.id)
        if stop_all or all(t.finished for t in self._tasks.values()):
            bars, self._bars = self._bars, None
            bars.stop()
            self._tasks = {}
