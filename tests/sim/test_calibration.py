"""The calibration table: measured rows match the in-service measurement, estimates are
marked, interpolation is log-log and clamped."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from kctl.sim import calibration
from kctl.sim.calibration import CalibrationError

#: shared/data/inservice-2x.json, copied so the test runs on any checkout
MEASURED = {
    ("triton", 5700): 38.0,
    ("triton", 23000): 6.7,
    ("triton", 91000): 1.8,
    ("kdtree", 5700): 35.2,
    ("kdtree", 23000): 13.6,
    ("kdtree", 91000): 3.6,
}
DATA_FILE = Path(__file__).resolve().parents[3] / "shared" / "data" / "inservice-2x.json"


@pytest.fixture(scope="module")
def cal() -> calibration.Calibration:
    return calibration.load()


def test_measured_rows_are_the_measurement_and_not_estimates(cal: calibration.Calibration) -> None:
    eager = {(r.verify_path, r.context_tokens): r for r in cal.rows if not r.cuda_graphs}
    assert {k: r.tokens_per_second for k, r in eager.items()} == MEASURED
    assert not any(r.estimate for r in eager.values())


def test_every_graph_row_is_a_documented_estimate(cal: calibration.Calibration) -> None:
    graphs = [r for r in cal.rows if r.cuda_graphs]
    assert len(graphs) == 6
    for r in graphs:
        assert r.estimate, r
        assert "estimate" in r.note, r
    # the data file's own triton+graphs estimate at 91k is kept as is
    assert cal.decode_tps("triton", True, 91000) == 2.0


@pytest.mark.skipif(not DATA_FILE.exists(), reason="shared/data not next to this checkout")
def test_matches_the_shared_data_file(cal: calibration.Calibration) -> None:
    data = json.loads(DATA_FILE.read_text())
    assert cal.model_load_seconds == data["model_load_seconds"]
    for row in data["rows"]:
        ctx = row["context_tokens"]
        assert cal.decode_tps("triton", False, ctx) == row["triton_eager"]
        assert cal.decode_tps("kdtree", False, ctx) == row["kdtree_eager"]
    est = data["triton_graphs_estimate"]["rows"][0]
    assert cal.decode_tps("triton", True, est["context_tokens"]) == est["tokens_per_second"]


def test_interpolation_is_log_log_and_clamped(cal: calibration.Calibration) -> None:
    mid = round(math.sqrt(5700 * 23000))
    expected = math.sqrt(38.0 * 6.7)  # geometric mean at the geometric-mean context
    assert cal.decode_tps("triton", False, mid) == pytest.approx(expected, rel=1e-3)
    assert cal.decode_tps("triton", False, 100) == 38.0
    assert cal.decode_tps("triton", False, 1_000_000) == 1.8
    # monotonic: longer context, slower decode
    speeds = [cal.decode_tps("kdtree", True, c) for c in range(1000, 120000, 5000)]
    assert speeds == sorted(speeds, reverse=True)


def test_crossover_lies_between_5_7k_and_23k_in_eager(cal: calibration.Calibration) -> None:
    assert cal.decode_tps("kdtree", False, 5700) < cal.decode_tps("triton", False, 5700)
    assert cal.decode_tps("kdtree", False, 23000) > cal.decode_tps("triton", False, 23000)
    # with graphs the estimate says the kernel wins everywhere (issue 5's goal)
    for ctx in (5700, 23000, 91000):
        assert cal.decode_tps("kdtree", True, ctx) > cal.decode_tps("triton", True, ctx)


def test_ttft_grows_with_uncached_tokens(cal: calibration.Calibration) -> None:
    assert cal.ttft_s(0) == cal.prefill.overhead_s
    assert cal.ttft_s(4000) == pytest.approx(
        cal.prefill.overhead_s + 4000 / cal.prefill.tokens_per_second
    )


def _doc() -> dict[str, Any]:
    return json.loads(calibration.DEFAULT_PATH.read_text())


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.pop("rows"), "rows: missing"),
        (lambda d: d["rows"][0].update(verify_path="flash"), "rows[0].verify_path: must be one of"),
        (lambda d: d["rows"][1].update(tokens_per_second="fast"), "rows[1].tokens_per_second"),
        (lambda d: d["rows"][2].update(estimate="no"), "rows[2].estimate"),
        (lambda d: d["rows"].append(dict(d["rows"][0])), "duplicate row"),
        (
            lambda d: d.update(rows=[r for r in d["rows"] if r["verify_path"] != "kdtree"]),
            "no row for kdtree",
        ),
        (lambda d: d["prefill"].update(tokens_per_second=0), "prefill"),
    ],
)
def test_bad_calibration_is_refused_with_the_field(mutate: Any, message: str) -> None:
    doc = _doc()
    mutate(doc)
    with pytest.raises(CalibrationError, match=message.replace("[", r"\[").replace("]", r"\]")):
        calibration.parse(doc, "cal.json")


def test_unreadable_file(tmp_path: Path) -> None:
    bad = tmp_path / "c.json"
    bad.write_text("{nope")
    with pytest.raises(CalibrationError, match="cannot read calibration"):
        calibration.load(bad)
