"""The verdict table, compared by equality, and the same table as data."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from kctl.gate.measurement import Measurement, ProbeOutput
from kctl.gate.report import gate_rows, gate_table, render_table
from kctl.gate.stats import Sample, summarize
from kctl.gate.verdict import Verdict, check_correctness, judge
from kctl.profile.model import ObjectiveSpec, PolicySpec


def meas(per_ctx: dict[int, list[float]], failed: int = 0) -> Measurement:
    samples = [
        Sample("measure", ctx, i, decode_tps=v)
        for ctx, values in per_ctx.items()
        for i, v in enumerate(values)
    ]
    samples += [Sample("measure", 4000, 10 + j, error="HTTP 500: x") for j in range(failed)]
    probes = (ProbeOutput(0, (1, 2)),)
    return Measurement("fp", tuple(samples), summarize(samples), probes, (("total", 12.5),))


def test_table_for_a_failing_candidate() -> None:
    base = meas({5700: [38.0] * 3, 23000: [6.7] * 3, 91000: [1.8] * 3})
    cand = meas({5700: [35.2] * 3, 23000: [13.6] * 3, 91000: [3.6] * 3})
    v = judge(base, cand, PolicySpec()).with_timings(("health", 4.0))
    assert render_table(v) == (
        "context   baseline tok/s   candidate tok/s   ratio    interval   threshold   result\n"
        "-------- ---------------- ----------------- ------- ----------- ----------- -------\n"
        "5700               38.00             35.20    0.93   0.93-0.93        1.00   FAIL\n"
        "23000               6.70             13.60    2.03   2.03-2.03        1.00   PASS\n"
        "91000               1.80              3.60    2.00   2.00-2.00        1.00   PASS\n"
        "\n"
        "crossover (ratio = 1.0): ~6,256 tokens\n"
        "objective: none (each context against its threshold)\n"
        "verdict: FAIL: below threshold: 5700: ratio 0.93 (interval 0.93-0.93) < 1.00\n"
        "timings: total 12.5s, health 4.0s\n"
    )


def test_table_with_objective_failures_and_correctness() -> None:
    base = meas({1000: [10.0, 10.5, 9.5], 4000: [5.0]})
    cand = meas({1000: [9.8, 10.6, 10.1], 4000: [7.0, 7.0]}, failed=1)
    policy = PolicySpec(
        objective=ObjectiveSpec(weights=((1000, 1.0), (4000, 1.0))), min_completed_fraction=0.5
    )
    v = judge(base, cand, policy, check_correctness(base, cand))
    assert render_table(v) == (
        "context   baseline tok/s   candidate tok/s   ratio    interval   threshold   result\n"
        "-------- ---------------- ----------------- ------- ----------- ----------- --------------\n"
        "1000               10.00             10.10    1.01   0.93-1.12           -   info\n"
        "4000                5.00              7.00    1.40   1.40-1.40           -   info (2/3 ok)\n"
        "\n"
        "crossover (ratio = 1.0): below the measured range\n"
        "objective: 1.21 (interval 1.17-1.26) vs 1.00, weights 1000:1, 4000:1: PASS\n"
        "correctness: 1 of 1 probes match the baseline (up to 0 may differ)\n"
        "verdict: PASS: weighted objective 1.21 >= 1.00 (lowest ratio 1.01 at 1000)\n"
        "timings: total 12.5s\n"
    )


def failing_verdict() -> Verdict:
    base = meas({5700: [38.0] * 3, 23000: [6.7] * 3})
    cand = meas({5700: [35.2] * 3, 23000: [13.6] * 3})
    return judge(base, cand, PolicySpec())


NONE = {"baseline": None, "candidate": None}


def test_rows_as_data() -> None:
    v = failing_verdict()
    rows = gate_rows(v)
    assert rows == [
        {
            "context": 5700,
            "concurrency": 1,
            "baseline": 38.0,
            "candidate": 35.2,
            "ratio": pytest.approx(35.2 / 38.0),
            "interval": [pytest.approx(35.2 / 38.0), pytest.approx(35.2 / 38.0)],
            "threshold": 1.0,
            "verdict": "FAIL",
            "completed": 3,
            "planned": 3,
            "ttft_s": NONE,
            "itl_p50_s": NONE,
            "itl_p99_s": NONE,
            "accept_length": NONE,
        },
        {
            "context": 23000,
            "concurrency": 1,
            "baseline": 6.7,
            "candidate": 13.6,
            "ratio": pytest.approx(13.6 / 6.7),
            "interval": [pytest.approx(13.6 / 6.7), pytest.approx(13.6 / 6.7)],
            "threshold": 1.0,
            "verdict": "PASS",
            "completed": 3,
            "planned": 3,
            "ttft_s": NONE,
            "itl_p50_s": NONE,
            "itl_p99_s": NONE,
            "accept_length": NONE,
        },
    ]
    # strict JSON, and it survives the stored form of the verdict
    assert json.loads(json.dumps(rows, allow_nan=False)) == rows
    assert gate_rows(Verdict.from_dict(json.loads(json.dumps(v.to_dict())))) == rows


def test_a_skipped_bucket_shows_dashes_and_none() -> None:
    base = meas({5700: [38.0] * 3, 23000: [6.7] * 3})
    cand = meas({5700: [20.0] * 3})
    v = judge(base, cand, PolicySpec(), skipped=frozenset({(23000, 1)}))
    assert [r["verdict"] for r in gate_rows(v)] == ["FAIL", "SKIPPED"]
    skipped = gate_rows(v)[1]
    assert (skipped["candidate"], skipped["ratio"], skipped["interval"]) == (None, None, None)
    text = render_table(v)
    assert "None" not in text
    assert text.splitlines()[3].split() == ["23000", "6.70", "-", "-", "-", "1.00", "SKIPPED"]


def test_text_is_plain_ascii_whatever_the_terminal_says(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.delenv("NO_COLOR", raising=False)
    text = render_table(failing_verdict())
    assert text.isascii() and "\x1b" not in text
    assert not any(line != line.rstrip() for line in text.splitlines())


def test_the_table_is_coloured_on_a_terminal_only() -> None:
    def printed(terminal: bool, no_color: bool = False) -> str:
        buf = io.StringIO()
        system = "standard" if terminal else "auto"  # auto: what kctl's console uses
        console = Console(
            file=buf, width=200, force_terminal=terminal, color_system=system, no_color=no_color
        )
        console.print(gate_table(failing_verdict()))
        return buf.getvalue()

    red = "\x1b[1;31mFAIL"
    assert red in printed(terminal=True)
    assert red not in printed(terminal=True, no_color=True)
    assert "\x1b" not in printed(terminal=False)
