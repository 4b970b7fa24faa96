"""A real multirun through the CLI into tmp_path, then collect, then the leaderboard."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from conftest import run_cli

pytestmark = pytest.mark.slow


def test_multirun_collect_leaderboard(tmp_path):
    sweep = [
        "-m",
        "variant=softmax,linear",
        "task=throughput",
        "task.seq_len=64,128",
        "task.min_run_time=0.01",
        "task.backward=false",
        f"results_dir={tmp_path}",
    ]
    proc = run_cli("attnbench", *sweep)
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(p.read_text()) for p in (tmp_path / "runs").glob("*.json")]
    assert len(records) == 4 and {r["status"] for r in records} == {"ok"}
    assert {(r["variant"], r["task_params"]["seq_len"]) for r in records} == {
        (v, n) for v in ("softmax", "linear") for n in (64, 128)
    }

    # the Hydra callback collected when the multirun ended
    frame = pd.read_parquet(tmp_path / "results.parquet")
    assert frame["run_id"].nunique() == 4
    fwd = frame[frame.metric == "fwd_ms"]
    assert len(fwd) == 4 and (fwd.value > 0).all()
    assert sorted(fwd.x_value.unique()) == [64.0, 128.0]
    assert set(fwd.x_name) == {"seq_len"} and not fwd.higher_is_better.any()
    assert fwd.git_commit.notna().all() and fwd.torch_version.notna().all()

    # a re-run skips every finished job and adds nothing
    mtimes = {p: p.stat().st_mtime_ns for p in (tmp_path / "runs").glob("*.json")}
    again = run_cli("attnbench", *sweep)
    assert again.returncode == 0, again.stderr
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "runs").glob("*.json")} == mtimes
    # not even launched: each launch would start an interpreter (on a cluster, a Slurm job)
    assert (
        "4 of 4 jobs finished earlier (a record each): not launched" in again.stdout + again.stderr
    )

    collect = run_cli("attnbench-collect", str(tmp_path))
    assert collect.returncode == 0 and "collected 4 records" in collect.stdout

    board = run_cli("attnbench-leaderboard", str(tmp_path))
    assert board.returncode == 0, board.stderr
    index = tmp_path / "leaderboard" / "index.html"
    assert board.stdout.strip() == str(index.resolve())
    html = index.read_text()
    assert "softmax" in html and "linear" in html
    assert 'data-chart="chart-throughput-fwd_ratio-seq_len"' in html  # with fwd_ms etc. in its menu
    assert (tmp_path / "leaderboard" / "plotly.min.js").stat().st_size > 1_000_000
    assert "cdn" not in html.lower()  # opens from file:// with no network


def test_unknown_variant_on_the_command_line_suggests(tmp_path):
    proc = run_cli("attnbench", "variant=sofmax", f"results_dir={tmp_path}")
    assert proc.returncode == 2
    assert "Unknown variant 'sofmax'. Did you mean: softmax?" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "runs").exists()


def test_leaderboard_without_results_says_what_to_run(tmp_path):
    proc = run_cli("attnbench-leaderboard", str(tmp_path))
    assert proc.returncode == 0
    assert "run `attnbench -m sweep=quick` first" in proc.stderr
    assert "No results yet" in (tmp_path / "leaderboard" / "index.html").read_text()


def test_glob_sweep_on_the_command_line(tmp_path):
    proc = run_cli(
        "attnbench",
        "-m",
        "variant=glob(s*)",
        "task.seq_len=32",
        "task.backward=false",
        "task.min_run_time=0.01",
        f"results_dir={tmp_path}",
    )
    assert proc.returncode == 0, proc.stderr
    variants = {json.loads(p.read_text())["variant"] for p in (tmp_path / "runs").glob("*.json")}
    assert variants == {"sigmoid", "sinkhorn", "softmax", "strided"}
