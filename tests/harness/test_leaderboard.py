from __future__ import annotations

import pandas as pd

from harness.collect import collect
from harness.leaderboard import build_site
from harness.leaderboard.tables import task_table
from harness.records import Record, write_record

HOSTILE = "<img src=x onerror=alert(1)>"


def _point(metric, value, x, hib):
    return {
        "metric": metric,
        "value": value,
        "x_name": "seq_len",
        "x_value": x,
        "higher_is_better": hib,
    }


def _write(tmp_path, run_id, variant, seq_len, fwd_ms, status="ok", error=None):
    metrics = (
        []
        if status != "ok"
        else [
            _point("fwd_ms", fwd_ms, seq_len, False),
            _point("gflops", 100 / fwd_ms, seq_len, True),
        ]
    )
    write_record(
        tmp_path,
        Record(
            run_id=run_id,
            status=status,
            error=error,
            task="throughput",
            variant=variant,
            task_params={"seq_len": seq_len},
            variant_params={},
            seed=0,
            device="cpu",
            dtype="float32",
            metrics=metrics,
            env={"device_name": "cpu0"},
            created_at="2026-01-01",
        ),
    )


def test_best_value_is_marked_per_setting(tmp_path):
    _write(tmp_path, "a", "softmax", 64, 2.0)
    _write(tmp_path, "b", "linear", 64, 1.0)
    _write(tmp_path, "c", "softmax", 128, 3.0)
    _write(tmp_path, "d", "linear", 128, 4.0)
    collect(tmp_path)
    frame = pd.read_parquet(tmp_path / "results.parquet")
    table = task_table(frame, {"fwd_ms": ("latency", False), "gflops": ("speed", True)})
    headers = [c.header for c in table.columns]
    assert headers == ["variant", "device", "dtype", "task.seq_len", "fwd_ms", "gflops"]
    best = {(r[0].text, r[3].text): (r[4].best, r[5].best) for r in table.rows}
    assert best == {
        ("linear", "64"): (True, True),
        ("softmax", "64"): (False, False),
        ("softmax", "128"): (True, True),
        ("linear", "128"): (False, False),
    }


def test_text_from_results_is_escaped(tmp_path):
    _write(tmp_path, "a", HOSTILE, 64, 2.0)
    _write(tmp_path, "b", "softmax", 64, 2.0, status="failed", error=f"boom {HOSTILE}</script>")
    collect(tmp_path)
    html = build_site(tmp_path).read_text()
    assert HOSTILE not in html and '</script>"' not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html  # table text, escaped
    assert "\\u003cimg src=x onerror=alert(1)\\u003e" in html  # chart JSON, escaped
    assert "Runs that did not finish" in html


def test_rows_sort_numerically_by_setting(tmp_path):
    for i, n in enumerate((1024, 256, 512)):
        _write(tmp_path, f"r{i}", "softmax", n, 1.0)
    collect(tmp_path)
    frame = pd.read_parquet(tmp_path / "results.parquet")
    runs = frame[~frame["run_id"].str.startswith("fit-")]  # the page shows fits apart
    table = task_table(runs, {})
    assert [r[3].text for r in table.rows] == ["256", "512", "1024"]
    html = build_site(tmp_path).read_text()
    assert "Scaling fits" in html and "scaling_exponent" in html


def test_every_variant_keeps_its_row_whatever_parameters_others_have(tmp_path):
    """A parameter only some variants have (or that one variant sweeps) never drops rows."""

    def write(run_id, variant, params, fwd):
        write_record(
            tmp_path,
            Record(
                run_id=run_id,
                status="ok",
                task="throughput",
                variant=variant,
                task_params={"seq_len": 64},
                variant_params=params,
                seed=0,
                device="cpu",
                dtype="float32",
                metrics=[_point("fwd_ms", fwd, 64, False)],
                env={},
            ),
        )

    write("a", "softmax", {"temperature": 1.0}, 1.0)
    write("b", "window", {"window": 16, "block": 0}, 2.0)
    write("c", "window", {"window": 32, "block": 0}, 3.0)
    write("d", "linear", {"feature_map": "elu1"}, 4.0)
    collect(tmp_path)
    table = task_table(pd.read_parquet(tmp_path / "results.parquet"), {"fwd_ms": ("", False)})
    headers = [c.header for c in table.columns]
    assert headers[:2] == ["variant", "variant.window"]  # swept within window; block is not
    rows = sorted((r[0].text, r[1].text) for r in table.rows)
    assert rows == [("linear", "–"), ("softmax", "–"), ("window", "16"), ("window", "32")]


def test_axes_are_logarithmic_only_for_positive_values_spanning_decades():
    from harness.leaderboard.charts import axis_type

    assert axis_type(pd.Series([256.0, 512.0, 4096.0])) == "log"
    assert axis_type(pd.Series([0.0, 1.0])) == "linear"  # layer 0 has no logarithm
    assert axis_type(pd.Series([0.4, 0.9])) == "linear"
    assert axis_type(pd.Series([-1.0, 100.0])) == "linear"


def test_rows_with_gaps_still_sort_numbers_numerically():
    from harness.leaderboard.tables import _numbers_first

    col = pd.Series(["1024", "256", "–", "512"])
    assert list(col.iloc[_numbers_first(col).argsort()]) == ["256", "512", "1024", "–"]
