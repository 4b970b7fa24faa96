"""attnbench-compare on hand-made tables with known answers."""

from __future__ import annotations

import pandas as pd
import pytest

from attnbench.harness.collect import COLUMNS
from attnbench.harness.compare import compare, main


def _row(variant, metric, value, higher, seed=0, x=None, status="ok"):
    row = dict.fromkeys(COLUMNS)
    row.update(
        run_id=f"{variant}-{metric}-{seed}-{x}",
        status=status,
        task="throughput" if metric.startswith("fwd") else "recall",
        variant=variant,
        variant_params="{}",
        task_params="{}",
        seed=seed,
        device="cpu",
        dtype="float32",
        metric=metric,
        value=value,
        x_name="seq_len" if x is not None else None,
        x_value=x,
        higher_is_better=higher,
    )
    return row


def _table(rows):
    return pd.DataFrame(rows, columns=COLUMNS)


OLD = _table(
    [
        _row("a", "fwd_ms", 10.0, False, x=256),
        _row("a", "fwd_ms_iqr", 0.1, None, x=256),
        _row("b", "fwd_ms", 10.0, False, x=256),
        _row("b", "fwd_ms_iqr", 5.0, None, x=256),  # noisy: a 20% change is inside its spread
        *[_row("a", "accuracy", v, True, seed=s) for s, v in enumerate([0.90, 0.92, 0.91])],
        _row("c", "fwd_ms", 10.0, False, x=256),
    ]
)
NEW = _table(
    [
        _row("a", "fwd_ms", 12.0, False, x=256),  # 20% slower, spread 0.1: a regression
        _row("a", "fwd_ms_iqr", 0.1, None, x=256),
        _row("b", "fwd_ms", 12.0, False, x=256),
        _row("b", "fwd_ms_iqr", 5.0, None, x=256),
        *[_row("a", "accuracy", v, True, seed=s) for s, v in enumerate([0.80, 0.81, 0.79])],
        _row("c", "fwd_ms", 5.0, False, x=256),  # twice as fast: better, not flagged
    ]
)


def test_regressions_respect_direction_threshold_and_spread():
    result = compare(OLD, NEW, threshold=0.05).set_index(["variant", "metric"])
    assert bool(result.loc[("a", "fwd_ms"), "regressed"])
    assert result.loc[("a", "fwd_ms"), "worse_by"] == pytest.approx(0.2)
    assert not bool(result.loc[("b", "fwd_ms"), "regressed"])  # within IQR 5 + 5
    assert bool(result.loc[("a", "accuracy"), "regressed"])  # higher is better, it fell
    assert result.loc[("a", "accuracy"), "worse_by"] == pytest.approx((0.91 - 0.80) / 0.91)
    assert not bool(result.loc[("c", "fwd_ms"), "regressed"])
    assert result.loc[("c", "fwd_ms"), "worse_by"] == pytest.approx(-0.5)
    assert ("a", "fwd_ms_iqr") not in result.index  # no direction: not judged


def test_threshold_above_the_change_flags_nothing():
    assert not compare(OLD, NEW, threshold=0.5)["regressed"].any()


def test_cli_exit_codes(tmp_path, capsys):
    OLD.to_parquet(tmp_path / "old.parquet")
    NEW.to_csv(tmp_path / "new.csv", index=False)
    args = [str(tmp_path / "old.parquet"), str(tmp_path / "new.csv")]
    assert main(args) == 0
    assert main([*args, "--fail"]) == 1
    out = capsys.readouterr().out
    assert "WORSE throughput × a {}: fwd_ms at seq_len=256 10 → 12 (+20.0%" in out
    assert (
        "4 metric points compared: 2 worse by more than 5% and outside the spread, 1 better." in out
    )
    assert main([*args[:1], *args[:1], "--fail"]) == 0  # a table against itself
    assert main([str(tmp_path / "missing"), args[1]]) == 2
    assert "does not exist; give a results folder" in capsys.readouterr().err
