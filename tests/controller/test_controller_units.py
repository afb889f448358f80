"""Pure pieces of the controller and the CLI's error mapping."""

from __future__ import annotations

import dataclasses
import http.server
import json
import signal
import threading
from pathlib import Path

import pytest

from kctl.cli import main
from kctl.cli.text import history_text
from kctl.controller.common import _rebuild, read_server_info
from kctl.controller.signals import InterruptGuard
from kctl.controller.status import Record
from kctl.errors import Interrupted, RevertAborted
from kctl.profile import load_profile
from kctl.profile.model import Profile
from kctl.render import JSON_SCHEMA, envelope

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", ["triton-graphs", "kdtree-eager", "kdtree-graphs"])
def test_stored_profile_rebuilds_equal(name: str) -> None:
    profile = load_profile(REPO / "profiles" / f"{name}.yaml")
    stored = json.loads(json.dumps(dataclasses.asdict(profile)))
    assert _rebuild(Profile, stored) == profile


def test_first_signal_interrupts_second_aborts_the_revert() -> None:
    # The guard restores whatever was installed before it (the default handler in a
    # foreground process, SIG_IGN in one started in the background by a shell).
    before = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
    guard = InterruptGuard()
    with guard:
        with pytest.raises(Interrupted) as first:
            signal.raise_signal(signal.SIGINT)
        assert first.value.signal_name == "SIGINT"
        guard.reverting = True
        with pytest.raises(RevertAborted):
            signal.raise_signal(signal.SIGTERM)
    assert guard.received == ["SIGINT", "SIGTERM"]
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


def test_envelope_is_versioned() -> None:
    data = json.loads(envelope("status", ok=True, exit_code=0, result={"a": 1}))
    assert data["schema"] == JSON_SCHEMA
    assert (data["command"], data["ok"], data["exit_code"], data["result"]) == (
        "status",
        True,
        0,
        {"a": 1},
    )


def test_history_text_empty_and_rows() -> None:
    assert history_text([]) == "no deployments yet"
    row = Record(
        id="d-1", profile="p", profile_hash="h", kind="deploy", status="promoted", verdict=None,
        reason=None, started_at="t", ended_at=None, parent_id=None, serving=False,
        sglang_version=None, overrides=[],
    )  # fmt: skip
    assert history_text([row]).splitlines()[2].split() == [
        "d-1",
        "deploy",
        "p",
        "promoted",
        "-",
        "-",
        "t",
    ]


def test_validate_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = str(REPO / "profiles" / "kdtree-eager.yaml")
    assert main(["--state-dir", str(tmp_path), "validate", good]) == 0
    bad = tmp_path / "bad.yaml"
    bad.write_text("server:\n  port: 99999\n")
    assert main(["--state-dir", str(tmp_path), "validate", str(bad)]) == 2
    out = capsys.readouterr().out
    assert f"{bad}: server.port" in out


def test_usage_error_exit_code(tmp_path: Path) -> None:
    assert main(["--state-dir", str(tmp_path), "deploy"]) == 2
    assert main(["--state-dir", str(tmp_path), "no-such-command"]) == 2


def test_missing_profile_file_is_invalid_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["--state-dir", str(tmp_path), "--simulate", "deploy", str(tmp_path / "nope.yaml")])
    assert code == 2
    assert "nope.yaml" in capsys.readouterr().err


def test_status_on_empty_state_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    assert main(["--state-dir", str(state), "--json", "status"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["result"]["serving"] is None
    assert not state.exists()


def test_rollback_without_known_good_is_a_precondition(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--state-dir", str(tmp_path), "--simulate", "rollback"]) == 5
    assert "nothing to roll back to" in capsys.readouterr().err
    # a state dir that holds no state (a mistyped --state-dir) is not created
    assert not (tmp_path / "simulate").exists()


def test_global_options_are_accepted_anywhere() -> None:
    from kctl.cli import hoist_globals

    assert hoist_globals(["deploy", "p.yaml", "--simulate", "--state-dir", "s", "--json"]) == [
        "--simulate",
        "--state-dir",
        "s",
        "--json",
        "deploy",
        "p.yaml",
    ]
    assert hoist_globals(["logs", "--state-dir=x", "-n", "5"]) == [
        "--state-dir=x",
        "logs",
        "-n",
        "5",
    ]
    assert hoist_globals(["validate", "--", "--json"]) == ["validate", "--", "--json"]


def test_envelope_names_the_command_not_the_state_dir() -> None:
    from kctl.cli import command_name, hoist_globals

    def name(*argv: str) -> str:
        return command_name(hoist_globals(list(argv)))

    assert name("--state-dir", "/var/kctl", "plan", "p.yaml") == "plan"
    assert name("plan", "p.yaml", "--state-dir", "/var/kctl", "--json") == "plan"
    assert name("--state-dir=/var/kctl", "logs", "-n", "5") == "logs"
    assert name("--json", "lock", "show") == "lock show"
    assert name("lock", "--force") == "lock"
    assert name("--json") == ""


@pytest.mark.parametrize(
    ("argv", "command", "message", "hint"),
    [
        (["plan"], "plan", "Missing argument 'profile'.", "run `kctl plan --help`"),
        (["logs", "-n", "x"], "logs", "Invalid value for '--tail'", "run `kctl logs --help`"),
        (["no-such"], "no-such", "No such command 'no-such'.", "run `kctl --help`"),
        (["lock"], "lock", "`kctl lock` needs a command", "run `kctl lock --help`"),
        ([], "", "`kctl` needs a command", "run `kctl --help`"),
    ],
)
def test_usage_errors_with_json_print_only_an_envelope(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    command: str,
    message: str,
    hint: str,
) -> None:
    assert main(["--state-dir", str(tmp_path), "--json", *argv]) == 2
    captured = capsys.readouterr()
    data = json.loads(captured.out)  # stdout holds the envelope and nothing else
    assert (data["command"], data["ok"], data["exit_code"]) == (command, False, 2)
    assert data["error"]["type"] == "UsageError"
    assert data["error"]["message"].startswith(message)
    assert data["error"]["hint"] == hint
    assert "Usage: kctl" in captured.err


@pytest.mark.parametrize(
    ("argv", "text"),
    [
        (["logs", "--help"], "(default: the one that serves now)"),
        (["logs", "--help"], "Only the last N lines."),
        (["history", "--help"], "At most N deployments."),
        (["gc", "--help"], "(default: 3)"),
    ],
)
def test_help_texts_reach_the_screen(
    capsys: pytest.CaptureFixture[str], argv: list[str], text: str
) -> None:
    # square brackets in a help text are rich markup and vanish from the rendered help
    assert main(argv) == 0
    assert text in " ".join(capsys.readouterr().out.split())


def test_envelope_is_strict_json_even_with_nan() -> None:
    # an objective that could not be computed carries NaN; the envelope writes null
    text = envelope("deploy", ok=False, exit_code=3, result={"objective": {"value": float("nan")},
                    "rows": [{"ratio": float("inf")}, {"ratio": 1.5}]})  # fmt: skip

    def refuse(token: str) -> None:
        raise AssertionError(f"non-standard JSON token {token}")

    data = json.loads(text, parse_constant=refuse)
    assert data["result"] == {
        "objective": {"value": None},
        "rows": [{"ratio": None}, {"ratio": 1.5}],
    }


def test_top_level_help_lists_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    for code in ("0 ok or promoted", "2 invalid input", "3 candidate rejected", "4 DEGRADED",
                 "5 a precondition failed", "130 interrupted", "1 internal error"):  # fmt: skip
        assert code in text


def test_a_revert_tolerates_the_signals_it_was_told_to() -> None:
    deferred: list[str] = []
    guard = InterruptGuard(on_deferred=deferred.append)
    with guard:
        guard.begin_revert(tolerate=1)  # a revert a gate rejection started
        signal.raise_signal(signal.SIGTERM)  # noted, the revert goes on
        assert deferred == ["SIGTERM"]
        with pytest.raises(RevertAborted) as second:
            signal.raise_signal(signal.SIGINT)
    assert second.value.signal_name == "SIGINT"
    assert second.value.exit_code == 4


def test_a_signal_whose_exception_a_finalizer_swallowed_is_not_lost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A signal landing while Python runs a finalizer: the handler's Interrupted is printed
    as "Exception ignored" and dropped. The guard raises it again at the next step boundary,
    and a revert that begins afterwards (a failure's) counts as one a signal started."""
    import gc
    import sys

    swallowed: list[BaseException | None] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: swallowed.append(u.exc_value))

    class Pool:  # a connection pool closing its sockets when collected
        def __del__(self) -> None:
            signal.raise_signal(signal.SIGTERM)

    guard = InterruptGuard()
    with guard:
        Pool()  # collected at once: the signal lands in its finalizer
        gc.collect()
        assert [type(e) for e in swallowed] == [Interrupted]
        assert guard.received == ["SIGTERM"] and guard.pending == "SIGTERM"
        with pytest.raises(Interrupted) as again:
            guard.check()  # what the executor does before each step
        assert again.value.signal_name == "SIGTERM"
        guard.begin_revert(tolerate=1)  # say the gate failed before any step boundary
        assert guard.tolerate == 0 and guard.pending is None
        guard.check()  # nothing pending once the revert has begun
        with pytest.raises(RevertAborted):
            signal.raise_signal(signal.SIGTERM)


def test_every_exception_kctl_defines_is_a_kctl_error() -> None:
    import importlib
    import inspect
    import pkgutil

    import kctl
    from kctl.errors import KctlError

    outside = []
    for info in pkgutil.walk_packages(kctl.__path__, "kctl."):
        if info.name.startswith(("kctl.sim", "kctl.__main__", "kctl.sglang.probe")):
            # the simulator stands in for SGLang; the probe is a standard-library script
            # run inside serving images, where kctl is not installed
            continue
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if (
                inspect.isclass(obj)
                and issubclass(obj, BaseException)
                and obj.__module__ == info.name
                and not issubclass(obj, KctlError)
            ):
                outside.append(f"{info.name}.{name}")
    assert outside == []


def test_abort_is_recognised_by_type(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import typer

    import kctl.controller.status as status_module

    def abort(ctx: object) -> None:
        raise typer.Abort()

    monkeypatch.setattr(status_module, "status", abort)
    assert main(["--state-dir", str(tmp_path), "status"]) == 130
    assert "kctl: aborted" in capsys.readouterr().err


def test_a_rejected_deploy_prints_its_result_and_log_tail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import kctl.controller.deploy as deploy_module
    from kctl.errors import CandidateRejected

    result = deploy_module.DeployResult(
        deployment_id="d-1",
        profile="cand",
        profile_hash="0" * 64,
        outcome="rejected",
        reason="health failed",
        serving="d-0",
    )

    def reject(ctx: object, path: str, *, force: bool = False) -> None:
        raise CandidateRejected("candidate cand rejected", result=result, log_tail="boom")

    monkeypatch.setattr(deploy_module, "deploy", reject)
    assert main(["--state-dir", str(tmp_path), "deploy", "x.yaml"]) == 3
    out, err = capsys.readouterr()
    assert "REJECTED: cand (d-1)" in out
    assert "last log lines:\nboom" in err and "kctl: error: candidate cand rejected" in err
    assert main(["--state-dir", str(tmp_path), "--json", "deploy", "x.yaml"]) == 3
    envelope = json.loads(capsys.readouterr().out)
    assert envelope["result"] == result.model_dump(mode="json")
    assert (
        envelope["result"]["serving"] == "d-0" and envelope["error"]["type"] == "CandidateRejected"
    )


class _InfoHandler(http.server.BaseHTTPRequestHandler):
    body = b""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        status = 200 if self.path == "/server_info" and self.body else 404
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize(
    ("body", "warning"),
    [
        ({"version": "0.5.10", "tp_size": 8, "internal_states": [{}]}, None),
        ({"version": "0.5.11", "tp_size": 8}, "the server reports SGLang 0.5.11, but"),
        (None, "could not read the server's /server_info"),
    ],
)
def test_server_info_is_read_and_its_release_compared(
    body: dict[str, object] | None, warning: str | None
) -> None:
    handler = type("H", (_InfoHandler,), {"body": json.dumps(body).encode() if body else b""})
    server = http.server.HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        profile = load_profile(REPO / "profiles" / "triton-graphs.yaml")
        server_spec = dataclasses.replace(profile.server, port=server.server_address[1])
        info, said = read_server_info(dataclasses.replace(profile, server=server_spec))
    finally:
        server.shutdown()
        server.server_close()
    if body is None:
        assert info is None
    else:
        assert info == {k: v for k, v in body.items() if k != "internal_states"}
    assert (said is None) if warning is None else (said is not None and warning in said)


@pytest.mark.parametrize(
    "profile, says_fp8",
    [("profiles/kdtree-graphs-fp8.yaml", True), ("profiles/kdtree-graphs.yaml", False)],
)
def test_the_simulated_gate_note_says_when_fp8_runs_at_the_bf16_calibration(
    profile: str, says_fp8: bool
) -> None:
    from kctl.backend import make_backend

    root = Path(__file__).resolve().parents[2]
    note = make_backend(simulate=True).note(load_profile(root / profile))
    assert note is not None and note.startswith("SIMULATED (kctl.sim")
    assert ("simulated at the bf16 calibration's rates" in note) is says_fp8
    assert make_backend(simulate=False).note(load_profile(root / profile)) is None


def test_status_notes_the_last_gate_with_its_own_profile() -> None:
    """`kctl status` puts the note of the gated deployment's stored profile above the table
    (the fp8 line for an fp8 cache), and the plain note when the record is unreadable."""
    from types import SimpleNamespace

    from kctl.backend import make_backend
    from kctl.controller.status import _profile_or_none
    from kctl.store.records import profile_record

    root = Path(__file__).resolve().parents[2]
    stored = profile_record(load_profile(root / "profiles" / "kdtree-graphs-fp8.yaml"))
    profile = _profile_or_none(SimpleNamespace(profile=stored))
    assert profile is not None and profile.server.kv_cache_dtype == "fp8_e4m3"
    note = make_backend(simulate=True).note(profile)
    assert note is not None and "fp8 KV cache (fp8_e4m3)" in note
    for unreadable in ({"name": "x"}, None, "not a profile"):
        assert _profile_or_none(SimpleNamespace(profile=unreadable)) is None
