"""The ``kctl`` command line. Thin: parse options, call the controller, render the result.
One place (:func:`main`) turns errors into one stderr line and an exit code.

Exit codes: 0 ok/promoted · 2 invalid input · 3 candidate rejected, baseline restored ·
4 DEGRADED (revert or rollback failed) · 5 precondition failed, nothing changed ·
130 interrupted before any change · 1 internal error.

The package: :mod:`.app` (the Typer app, global options, the shared context and output),
:mod:`.commands` (one function per command, registered on import; `kctl report` in
:mod:`.report`) and :mod:`.entry`
(:func:`main`, argument hoisting, error reporting).
"""

from __future__ import annotations

from kctl.cli import commands as _commands  # noqa: F401 - registers the commands on the app
from kctl.cli import report as _report  # noqa: F401 - registers `kctl report`
from kctl.cli.app import app
from kctl.cli.entry import command_name, hoist_globals, main
from kctl.cli.progress import CliReporter

__all__ = ["CliReporter", "app", "command_name", "hoist_globals", "main"]
