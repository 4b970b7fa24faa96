from __future__ import annotations

import json

import pandas as pd
import pytest

from attnbench.harness.collect import COLUMNS, collect, main
from attnbench.harness.records import Record, write_record

DESIGN_COLUMNS = [
    "run_id",
    "status",
    "error",
    "task",
    "variant",
    "variant_params",
    "task_params",
    "seed",
    "device",
    "device_name",
    "dtype",
    "metric",
    "value",
    "x_name",
    "x_value",
    "higher_is_better",
    "attnbench_version",
    "torch_version",
    "git_commit",
    "created_at",
    "duration_s",
]


def _write(tmp_path, run_id, status="ok", metrics=None, error=None):
    write_record(
        tmp_path,
        Record(
            run_id=run_id,
            status=status,
            error=error,
            task="throughput",
            variant="softmax",
            task_params={"seq_len": 8},
            variant_params={"temperature": 1.0},
            seed=0,
            device="cpu",
            dtype="float32",
            metrics=metrics or [],
            env={"torch_version": "x", "device_name": "cpu0"},
        ),
    )


def test_design_columns_present():
    assert set(DESIGN_COLUMNS) <= set(COLUMNS)


def test_tidy_rows_and_failed_runs_kept(tmp_path):
    pts = [
        {
            "metric": "fwd_ms",
            "value": 2.0,
            "x_name": "seq_len",
            "x_value": 8.0,
            "higher_is_better": False,
        },
        {
            "metric": "gflops",
            "value": 10.0,
            "x_name": "seq_len",
            "x_value": 8.0,
            "higher_is_better": True,
        },
    ]
    _write(tmp_path, "a", metrics=pts)
    _write(tmp_path, "b", status="failed", error="RuntimeError: boom")
    summary = collect(tmp_path)
    frame = pd.read_parquet(tmp_path / "results.parquet")
    assert summary.n_records == 2 and len(frame) == 3
    assert list(frame.columns) == COLUMNS
    ok = frame[frame.run_id == "a"].set_index("metric")
    assert ok.loc["fwd_ms", "value"] == 2.0 and not ok.loc["fwd_ms", "higher_is_better"]
    assert json.loads(ok.loc["gflops", "variant_params"]) == {"temperature": 1.0}
    failed = frame[frame.run_id == "b"].iloc[0]
    assert failed.status == "failed" and failed.error == "RuntimeError: boom"
    assert pd.isna(failed.metric)


def test_corrupt_and_foreign_files_skipped_with_warning(tmp_path):
    _write(tmp_path, "a")
    (tmp_path / "runs" / "corrupt.json").write_text("{not json")
    (tmp_path / "runs" / "foreign.json").write_text('{"hello": 1}')
    with pytest.warns(UserWarning):
        summary = collect(tmp_path)
    assert summary.n_records == 1 and len(summary.skipped) == 2
    assert "skipped 2" in summary.describe()


def test_cli_without_runs_says_what_to_do(tmp_path, capsys):
    assert main([str(tmp_path)]) == 1
    assert "run a sweep first" in capsys.readouterr().err


def _point(value):
    return [{"metric": "fwd_ms", "value": value, "x_name": "seq_len", "x_value": 8.0}]


def _sorted(frame):
    return frame.sort_values(["run_id", "metric"]).reset_index(drop=True)


def test_incremental_collection_equals_a_full_one(tmp_path):
    for i in range(5):
        _write(tmp_path, f"r{i}", metrics=_point(float(i)))
    first = collect(tmp_path)
    assert first.n_records == 5 and first.n_reused == 0
    again = collect(tmp_path)
    assert again.n_reused == 5 and "5 unchanged" in again.describe()

    _write(tmp_path, "r1", status="failed", error="boom")  # changed
    _write(tmp_path, "r9", metrics=_point(9.0))  # new
    (tmp_path / "runs" / "r2.json").unlink()  # removed
    incremental = collect(tmp_path)
    assert incremental.n_records == 5 and incremental.n_reused == 3
    table = _sorted(pd.read_parquet(tmp_path / "results.parquet"))
    assert sorted(table.run_id.unique()) == ["r0", "r1", "r3", "r4", "r9"]
    assert table[table.run_id == "r1"].status.tolist() == ["failed"]
    collect(tmp_path, incremental=False)
    full = _sorted(pd.read_parquet(tmp_path / "results.parquet"))
    pd.testing.assert_frame_equal(table, full)


def test_unusable_index_means_a_full_collection(tmp_path):
    _write(tmp_path, "a", metrics=_point(1.0))
    collect(tmp_path)
    (tmp_path / ".collected.json").write_text("[not an index")
    summary = collect(tmp_path)
    assert summary.n_records == 1 and summary.n_reused == 0
