"""bench/ab_summary.py on hand-written bench JSON files (CPU only)."""

import importlib.util
import json
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("ab_summary", ROOT / "bench" / "ab_summary.py")
ab_summary = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ab_summary)


def case(d, graph, l2_cold=None):
    row = {"B": 1, "H": 8, "D": d, "prefix": 23000, "pages": "random", "ours_graph_us": graph}
    if l2_cold is not None:
        row["ours_graph_cold_l2_us"] = l2_cold
    return row


def write(path, cases):
    path.write_text(json.dumps({"cases": cases}))
    return str(path)


def test_rows_are_kept_apart_by_draft_length_and_column(tmp_path, capsys):
    old = [
        write(tmp_path / "o1.json", [case(1, 15.0, 20.0), case(8, 23.0, 28.0)]),
        write(tmp_path / "o2.json", [case(1, 16.0, 21.0), case(8, 22.0, 27.0)]),
    ]
    new = [write(tmp_path / "n1.json", [case(1, 14.0, 20.5), case(8, 23.5)])]
    missing = str(tmp_path / "cut-short.json")  # a pass that never wrote its file
    assert ab_summary.main([f"old={','.join(old)}", f"new={new[0]},{missing}"]) == 0
    lines = capsys.readouterr().out.splitlines()
    by_key = {" ".join(line.split()[:6]): line for line in lines[1:]}
    # D=1 and D=8 share B, H and prefix but are separate rows; the change is new - old medians.
    assert "old 15.00 / 16.00  new 14.00 (-1.50)" in by_key["B1 H8 D1 23000 random warm"]
    assert "new 23.50 (+1.00)" in by_key["B1 H8 D8 23000 random warm"]
    l2 = [line for line in lines if "D1 23000 random" in line and "L2 cold" in line]
    assert len(l2) == 1 and "old 20.00 / 21.00  new 20.50 (+0.00)" in l2[0]
    # A column a label lacks is shown with no change rather than a made-up one.
    d8_l2 = [line for line in lines if "D8 23000 random" in line and "L2 cold" in line]
    assert len(d8_l2) == 1 and d8_l2[0].rstrip().endswith("new")


def test_bad_argument_is_an_error(capsys):
    assert ab_summary.main(["old"]) == 2
    assert "expected LABEL=FILE" in capsys.readouterr().err
