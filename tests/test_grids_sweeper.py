"""The `grids` sweeper (hydra_plugins/attnbench_sweeper): a union of grids, run for real."""

from __future__ import annotations

import json

import pytest
from conftest import REPO, run_cli

pytestmark = pytest.mark.slow
SEARCHPATH = f"hydra.searchpath=[file://{REPO / 'tests' / 'conf'}]"


def _jobs(results_dir):
    records = [json.loads(p.read_text()) for p in (results_dir / "runs").glob("*.json")]
    return sorted((r["task"], r["variant"], r["task_params"]["seq_len"]) for r in records)


def test_union_of_grids_without_duplicates(tmp_path):
    proc = run_cli("attnbench", "-m", "sweep=grids_test", SEARCHPATH, f"results_dir={tmp_path}")
    assert proc.returncode == 0, proc.stderr
    log = proc.stdout + proc.stderr
    assert "grids sweeper: 6 jobs from 3 grids" in log  # the third grid repeats a job of the first
    assert _jobs(tmp_path) == [
        ("concentration", "linear", 16),
        ("concentration", "softmax", 16),
        ("throughput", "linear", 32),
        ("throughput", "linear", 64),
        ("throughput", "softmax", 32),
        ("throughput", "softmax", 64),
    ]


def test_command_line_narrows_every_grid(tmp_path):
    proc = run_cli(
        "attnbench",
        "-m",
        "sweep=grids_test",
        SEARCHPATH,
        "variant=linear",
        f"results_dir={tmp_path}",
    )
    assert proc.returncode == 0, proc.stderr
    assert _jobs(tmp_path) == [
        ("concentration", "linear", 16),
        ("throughput", "linear", 32),
        ("throughput", "linear", 64),
    ]
