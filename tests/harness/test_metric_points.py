"""Seed-averaged points: the exact pairing of a metric with its IQR, and steadiness flags."""

from __future__ import annotations

import math

import pandas as pd

from attnbench.harness.results.collect import COLUMNS
from attnbench.harness.results.metric_points import point_stats, spread_of, steadiness_flags


def _row(metric, value, run_id="r", x=256.0, seed=0):
    row = dict.fromkeys(COLUMNS)
    row.update(
        run_id=run_id,
        status="ok",
        task="throughput",
        variant="softmax",
        variant_params="{}",
        task_params='{"seq_len": 256}',
        seed=seed,
        device="cpu",
        dtype="float32",
        metric=metric,
        value=value,
        x_name="seq_len",
        x_value=x,
    )
    return row


def test_an_iqr_is_the_spread_only_of_the_metric_its_name_continues():
    frame = pd.DataFrame(
        [_row("fwd_ms", 10.0), _row("fwd_ms_iqr", 2.0), _row("fwd_ms_rel_iqr", 0.2)],
        columns=COLUMNS,
    )
    stats = point_stats(frame).set_index("metric")
    assert stats.loc["fwd_ms", "spread"] == 2.0  # fwd_ms_iqr, not fwd_ms_rel_iqr
    # fwd_ms_rel_iqr is a metric of its own, nobody's spread (there is no metric fwd_ms_rel)
    assert stats.loc["fwd_ms_rel_iqr", "mean"] == 0.2
    assert math.isnan(stats.loc["fwd_ms_rel_iqr", "spread"])
    assert spread_of(["fwd_ms", "fwd_ms_iqr", "fwd_ms_rel_iqr"]) == {"fwd_ms_iqr": "fwd_ms"}
    # were there a metric fwd_ms_rel, its IQR would be fwd_ms_rel_iqr: the rule is the name
    assert spread_of(["fwd_ms_rel", "fwd_ms_rel_iqr"]) == {"fwd_ms_rel_iqr": "fwd_ms_rel"}


def test_each_row_gets_its_own_runs_flag_at_its_own_curve_position():
    frame = pd.DataFrame(
        [
            _row("fwd_ms", 10.0, "a"),
            _row("fwd_steady", 1.0, "a"),
            _row("fwd_ms", 50.0, "b"),
            _row("fwd_steady", 0.0, "b"),
            _row("fwd_ms", 12.0, "b", x=512.0),  # b at another length: no flag there
            _row("fwd_ms", 11.0, "c"),  # an older record: no flag at all
            _row("peak_mem_mib", 3.0, "b"),  # a metric no flag covers
        ],
        columns=COLUMNS,
    )
    flags = steadiness_flags(frame, [("throughput", "fwd_ms", "fwd_steady")])
    assert flags.iloc[0] == 1.0 and flags.iloc[2] == 0.0
    assert flags.iloc[[1, 3, 4, 5, 6]].isna().all()
    assert steadiness_flags(frame, []).isna().all()  # nothing declared: nothing judged
