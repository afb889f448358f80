"""The entry point: global options accepted anywhere, the JSON envelope's command name, and
the one place an error becomes one stderr line (or the envelope) and an exit code."""

from __future__ import annotations

import sys
import traceback

import typer

from kctl.cli.app import OPTS, app
from kctl.errors import KctlError

_GLOBAL_FLAGS = ("--json", "--verbose", "-v", "--simulate")


def hoist_globals(args: list[str]) -> list[str]:
    """Global options are accepted anywhere (`kctl deploy x.yaml --simulate`): move them in
    front of the command, where the parser expects them. Stops at `--`."""
    front: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            rest += args[i:]
            break
        if a in _GLOBAL_FLAGS or a.startswith("--state-dir="):
            front.append(a)
        elif a == "--state-dir" and i + 1 < len(args):
            front += [a, args[i + 1]]
            i += 1
        else:
            rest.append(a)
        i += 1
    return front + rest


_GROUPS = ("lock",)  # commands whose name in the JSON envelope includes the subcommand


def command_name(args: list[str]) -> str:
    """The command as the JSON envelope names it ("deploy", "lock show"): the first words
    after the global options (`--state-dir`'s value is not a word), "" when there is none."""
    words: list[str] = []
    i = 0
    while i < len(args) and len(words) < 2:
        a = args[i]
        if a == "--":
            break
        if a == "--state-dir":
            i += 1  # its value
        elif not a.startswith("-"):
            words.append(a)
            if words[0] not in _GROUPS:
                break
        elif words:  # an option of the command: no subcommand follows
            break
        i += 1
    return " ".join(words)


def _usage_envelope(command: str, path: str, message: str) -> str:
    from kctl.render import ErrorInfo, envelope

    error = ErrorInfo(type="UsageError", message=message, hint=f"run `{path} --help`")
    return envelope(command, ok=False, exit_code=2, result=None, error=error)


def _json_requested(args: list[str]) -> bool:
    globals_ = args[: args.index("--")] if "--" in args else args
    return "--json" in globals_


def main(argv: list[str] | None = None) -> int:
    """Entry point: runs the app and maps errors to one line and an exit code."""
    args = hoist_globals(sys.argv[1:] if argv is None else list(argv))
    command = command_name(args)
    words = command.split()
    if (
        _json_requested(args)
        and "--help" not in args
        and (not words or (words[0] in _GROUPS and len(words) == 1))
    ):
        # The parser would print the help on stdout, where --json promises only the envelope.
        path = " ".join(["kctl", *words])
        print(f"Usage: {path} COMMAND [ARGS]...\nTry '{path} --help' for help.", file=sys.stderr)
        print(_usage_envelope(command, path, f"`{path}` needs a command"))
        return 2
    try:
        # standalone_mode=False: click returns an Exit's code instead of raising it
        rv = app(args=args, standalone_mode=False, prog_name="kctl")
        return rv if isinstance(rv, int) else 0
    except typer.Exit as exc:
        return int(exc.exit_code or 0)
    except KctlError as exc:
        _report_error(command, exc)
        return exc.exit_code
    except KeyboardInterrupt:
        print("kctl: interrupted", file=sys.stderr)
        return 130
    except typer.Abort:
        print("kctl: aborted", file=sys.stderr)
        return 130
    except typer.TyperException as exc:  # a usage error from the option parser
        show = getattr(exc, "show", None)  # the parser's own usage text
        if callable(show):
            show()
        else:
            print(f"kctl: error: {exc.format_message()}", file=sys.stderr)
        if _json_requested(args):  # the parse may have failed before OPTS was set
            ctx = getattr(exc, "ctx", None)
            path = ctx.command_path if ctx is not None else "kctl"
            print(_usage_envelope(command, path, exc.format_message()))
        return 2
    except Exception as exc:  # a bug
        print(f"kctl: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        if OPTS.verbose:
            traceback.print_exc()
        else:
            print("  run with --verbose for the traceback, and please report it", file=sys.stderr)
        return 1


def _report_error(command: str, exc: KctlError) -> None:
    """One error, as the envelope under --json, else one stderr line (with the rejected
    deploy's result on stdout and the candidate's last log lines first)."""
    from kctl.errors import CandidateRejected
    from kctl.render import ErrorInfo, envelope

    result = exc.result if isinstance(exc, CandidateRejected) else None
    if OPTS.json:
        print(
            envelope(
                command,
                ok=False,
                exit_code=exc.exit_code,
                result=result,
                error=ErrorInfo(type=type(exc).__name__, message=exc.message, hint=exc.hint),
            )
        )
    else:
        if result is not None:
            from kctl.cli.text import deploy_text

            print(deploy_text(result, reason=False))  # the error line below says why
        if isinstance(exc, CandidateRejected) and exc.log_tail:
            print("last log lines:\n" + exc.log_tail, file=sys.stderr)
        print(f"kctl: error: {exc}", file=sys.stderr)
    if OPTS.verbose:
        traceback.print_exc()
