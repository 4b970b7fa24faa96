"""docs/quick_costs.py, the numbers of docs/sweeps.md "What quick costs and shows", on planted
records whose answers are known."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "docs" / "quick_costs.py"
spec = importlib.util.spec_from_file_location("quick_costs", SCRIPT)
quick_costs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(quick_costs)

RECALL_INFO = {  # as a record holds it: the metrics list as Python's text of it
    "headline": "accuracy",
    "column_by": "",
    "column_headlines": {},
    "metrics": "[{'name': 'accuracy', 'higher_is_better': True, 'description': \"Zoology's\"}]",
}
ICL_INFO = {
    "headline": "mse_mean",
    "column_by": "mode",
    "column_headlines": {"prompt": "mse_mean", "one_layer": "loss_ratio_vs_gd"},
    "metrics": [
        {"name": "mse_mean", "higher_is_better": False},
        {"name": "loss_ratio_vs_gd", "higher_is_better": False},
    ],
}


def _record(task, info, params, variant, seed, metric, value, duration, status="ok"):
    return {
        "task": task,
        "task_info": info,
        "task_params": params,
        "variant": variant,
        "seed": seed,
        "status": status,
        "duration_s": duration,
        "metrics": [
            {"metric": metric, "value": value, "x_name": None, "x_value": None},
            {"metric": metric, "value": 99.0, "x_name": "n", "x_value": 4.0},  # a curve point
        ],
    }


def _write(folder: Path, records: list[dict]) -> Path:
    (folder / "runs").mkdir(parents=True)
    for i, record in enumerate(records):
        (folder / "runs" / f"{i}.json").write_text(json.dumps(record))
    return folder


# recall: a far ahead of b and c, which are within their seed spread of each other
RECALL = {"a": [0.99, 0.98, 0.99], "b": [0.50, 0.30, 0.45], "c": [0.40, 0.45, 0.20]}
# one_layer (lower is better): y best on seeds 0 and 1, x best on seed 2
ONE_LAYER = {"x": [2.0, 2.0, 1.0], "y": [1.5, 1.5, 1.9]}


def _planted() -> list[dict]:
    records = [
        _record("recall", RECALL_INFO, {}, v, s, "accuracy", value, 2.0)
        for v, values in RECALL.items()
        for s, value in enumerate(values)
    ]
    records += [
        _record("icl_regression", ICL_INFO, {"mode": "one_layer"}, v, s, "loss_ratio_vs_gd", x, 1.0)
        for v, values in ONE_LAYER.items()
        for s, x in enumerate(values)
    ]
    records.append(_record("recall", RECALL_INFO, {}, "d", 0, "accuracy", 1.0, 0.5, "failed"))
    return records


def test_cost_per_board_column_costliest_first():
    rows = quick_costs.costs(_planted())
    assert rows == [
        ("recall", 10, pytest.approx(18.5), pytest.approx(18.5 / 24.5)),
        ("icl_regression (one_layer)", 6, pytest.approx(6.0), pytest.approx(6.0 / 24.5)),
    ]


def test_what_a_column_shows_counts_resolved_neighbours_and_seed_moves():
    by = {row["column"]: row for row in quick_costs.shows(_planted())}
    recall = by["recall"]
    assert (recall["variants"], recall["seeds"]) == (3, 3)  # the failed record does not count
    # a-b apart by far more than 2 pooled sd; b-c (means 0.417, 0.35; sd ~0.1, ~0.13) not
    assert (recall["resolved"], recall["pairs"]) == (1, 2)
    # the first two seeds rank c (0.425) above b (0.40): two variants move, by one place; so do
    # seed 0 alone (a, b, c) against seed 1 alone (a, c, b)
    assert recall["moved_first_two"] == "2 (at most 1)"
    assert recall["moved_seed_vs_seed"] == "2 (at most 1)"
    one_layer = by["icl_regression (one_layer)"]
    # all seeds: means x 1.667, y 1.633 -> y, x; first two seeds: y, x; seed 0 alone y, x
    assert one_layer["moved_first_two"] == "0"
    assert one_layer["moved_seed_vs_seed"] == "0"


def test_a_moved_ranking_names_how_far():
    assert quick_costs.moved(["a", "b", "c"], ["b", "a", "c"]) == ["a", "b"]
    assert quick_costs.max_shift(["a", "b", "c"], ["c", "b", "a"]) == 2
    assert quick_costs.moved(["a", "b"], ["b", "x", "a"]) == ["a", "b"]  # common ones only


def test_against_another_run_lists_the_variants_ranked_differently(tmp_path):
    mine = _planted()
    other = [dict(r) for r in mine]
    for r in other:  # in the other run, c beats b on recall on every seed
        if r["task"] == "recall" and r["variant"] == "c":
            r["metrics"] = [{"metric": "accuracy", "value": 0.9, "x_name": None, "x_value": None}]
    assert dict(quick_costs.against(mine, other)) == {
        "recall": ["b", "c"],
        "icl_regression (one_layer)": [],
    }


def test_the_script_prints_both_tables(tmp_path, capsys):
    folder = _write(tmp_path / "a", _planted())
    quick_costs.main([str(folder), "--against", str(folder)])
    out = capsys.readouterr().out
    assert "| recall | 10 | 18 | 76% | 1.85 |" in out
    assert "| recall | 3 × 3 | " in out and "| 1 of 2 |" in out
    assert "| icl_regression (one_layer) | none |" in out
