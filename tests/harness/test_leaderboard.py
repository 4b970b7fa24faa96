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
    table = task_table(pd.read_parquet(tmp_path / "results.parquet"), {})
    assert [r[3].text for r in table.rows] == ["256", "512", "1024"]
