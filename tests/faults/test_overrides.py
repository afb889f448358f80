"""The first deploy on a busy port, and ``--set`` on the command line: the refusal names
the override, and ``--set server.port=PORT`` moves the baseline and the candidate to a
free port in one command, recorded with both deployments; a bad ``--set`` is refused
(exit 2) before anything changes."""

from __future__ import annotations

import socket
import sqlite3

import pytest

from tests.faults.harness import CAND_NAME, Case, free_port, http_get

pytestmark = pytest.mark.slow


def _overrides(case: Case) -> dict[str, list[str]]:
    """The newest record of each profile and its recorded overrides (``kctl history``)."""
    return {r["profile"]: r["overrides"] for r in reversed(case.history())}


def test_a_busy_port_is_left_with_set_for_baseline_and_candidate(case: Case) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", case.port))
        busy.listen()
        r = case.run("deploy", case.cand)
        assert r.code == 5, str(r)
        assert f"port {case.port} is taken" in r.err and "--set server.port=PORT" in r.err
        port = free_port()
        r = case.run("deploy", case.cand, "--set", f"server.port={port}")
        assert r.code == 0, str(r)
    got = http_get(port, "/model_info")
    assert got is not None and CAND_NAME.encode() in got[1]
    recorded = _overrides(case)
    assert recorded["cand"] == [f"server.port={port}"]
    assert recorded["base"] == [f"server.port={port}"]  # the baseline ran there too
    r = case.run("plan", case.cand, "--set", f"server.port={port}")
    assert f"overrides (profile and baseline): --set server.port={port}" in r.out, str(r)


def test_a_bad_set_is_refused_before_anything_changes(case: Case) -> None:
    case.establish()
    before = case.history()
    pids = case.servers()
    for item, line in (
        ("server.port=abc", "--set server.port=abc: server.port: must be a TCP port"),
        ("server.portt=1", "--set server.portt=1: server.portt: unknown field; did you mean"),
    ):
        r = case.run("deploy", case.cand, "--set", item)
        assert r.code == 2, str(r)
        assert line in r.err, str(r)
    assert case.servers() == pids
    case.check_store(before)
    assert case.history() == before
    with sqlite3.connect(case.db) as db:
        assert db.execute("select count(*) from deployments").fetchone()[0] == len(before)
