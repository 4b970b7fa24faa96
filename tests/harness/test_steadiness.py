"""`harness.leaderboard.steadiness`: the page's rows judged once by their tasks' declared flags."""

from __future__ import annotations

import pandas as pd
import pytest

from attnbench.harness.leaderboard.steadiness import (
    UNTRUSTED,
    count_still_learning,
    count_unsteady,
    judge_steadiness,
    untrusted,
)
from attnbench.harness.results.collect import COLUMNS
from attnbench.task_info import TaskInfo

INFOS = {
    "timed": TaskInfo(
        "timed",
        steadiness={"ms": "steady", "ratio": "steady"},
        accuracy={"ms": "accurate", "ratio": "accurate"},
    )
}


def _run(run_id, steady, accurate, status="ok"):
    """One run's rows: two values timed once, and the timing's flags (None: not recorded)."""
    values = [("ms", 2.0), ("ratio", 0.5), ("steady", steady), ("accurate", accurate)]
    rows = []
    for metric, value in values:
        if value is None:
            continue
        row = dict.fromkeys(COLUMNS)
        row.update(run_id=run_id, derived=False, status=status, task="timed", metric=metric)
        rows.append({**row, "value": value, "x_name": "n", "x_value": 64.0})
    return rows


def _frame(*runs):
    return pd.DataFrame([row for run in runs for row in run], columns=COLUMNS)


def _untrusted_values(frame):
    values = frame[frame["metric"].isin(["ms", "ratio"])]
    return dict(zip(values["run_id"] + "." + values["metric"], untrusted(values), strict=True))


def test_a_value_of_an_unsteady_timing_or_an_inaccurate_kernel_is_untrusted():
    frame = judge_steadiness(
        _frame(
            _run("steady", 1.0, 1.0),
            _run("unsteady", 0.0, 1.0),
            _run("wrong", 1.0, 0.0),
            _run("old", None, None),  # recorded before the flags: unknown, not unsteady
        ),
        INFOS,
    )
    assert _untrusted_values(frame) == {
        "steady.ms": False,
        "steady.ratio": False,
        "unsteady.ms": True,
        "unsteady.ratio": True,
        "wrong.ms": True,
        "wrong.ratio": True,
        "old.ms": False,
        "old.ratio": False,
    }
    # one timing (its flag, not the two values resting on it) is counted; accuracy is not
    assert count_unsteady(frame) == 1


def test_nothing_declared_is_nothing_untrusted():
    frame = judge_steadiness(_frame(_run("unsteady", 0.0, 0.0)), {})
    assert not untrusted(frame).any() and count_unsteady(frame) == 0


def test_only_ok_runs_timings_are_counted():
    frame = judge_steadiness(_frame(_run("a", 0.0, 1.0), _run("b", 0.0, 1.0, "failed")), INFOS)
    assert count_unsteady(frame) == 1


def test_an_empty_frame_is_judged_and_counts_nothing():
    frame = judge_steadiness(pd.DataFrame(), INFOS)
    assert UNTRUSTED in frame.columns and count_unsteady(frame) == 0


def test_rows_never_judged_are_refused():
    with pytest.raises(ValueError, match="never judged"):
        untrusted(_frame(_run("a", 1.0, 1.0)))


TRAINED = {"trained": TaskInfo("trained", convergence={"acc": "converged", "acc_at": "converged"})}


def _trained_run(run_id, converged):
    """One trained run: a value, a value along a curve, and the run's flag recorded once, with
    no curve position (None: not recorded)."""
    rows = []
    values = [
        ("acc", 0.9, None, None),
        ("acc_at", 0.8, "pairs", 8.0),
        ("acc_at", 0.7, "pairs", 16.0),
    ]
    if converged is not None:
        values.append(("converged", converged, None, None))
    for metric, value, x_name, x_value in values:
        row = dict.fromkeys(COLUMNS)
        row.update(run_id=run_id, derived=False, status="ok", task="trained", metric=metric)
        rows.append({**row, "value": value, "x_name": x_name, "x_value": x_value})
    return rows


def test_a_run_still_learning_at_its_cap_is_untrusted_at_every_curve_position_and_counted():
    frame = judge_steadiness(
        _frame(_trained_run("done", 1.0), _trained_run("learning", 0.0), _trained_run("old", None)),
        TRAINED,
    )
    values = frame[frame["metric"] != "converged"]
    judged = values.groupby("run_id").apply(lambda rows: set(untrusted(rows)), include_groups=False)
    assert judged.to_dict() == {"done": {False}, "learning": {True}, "old": {False}}
    assert count_still_learning(frame) == 1 and count_unsteady(frame) == 0
