"""A sweep on a real Slurm cluster through Hydra's submitit launcher (issue #28).

`.ci/slurm-up` starts a single-node cluster on this machine (Debian's slurm-wlm and munge,
slurmctld and slurmd on localhost); `.ci/run` calls it before the tests, and this module calls it
too, so that the test runs wherever it can be installed (root and apt-get) and skips, saying why,
only where it cannot. The sweep is four jobs: two that finish, one whose variant raises (a plugin
installed for the test, on PYTHONPATH, which Slurm passes on to the jobs) and one over its time
budget. Each must be a record, a re-run must skip the finished ones, and the board must build.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest
from conftest import REPO, run_cli, wait_for_ci_services

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def slurm() -> None:
    wait_for_ci_services()
    proc = subprocess.run(
        [str(REPO / ".ci" / "slurm-up")], capture_output=True, text=True, timeout=600
    )
    if proc.returncode != 0:
        pytest.skip(f"no Slurm cluster here: {proc.stderr.strip().splitlines()[-1]}")


PLANTED = textwrap.dedent(
    """
    from attnbench import AttentionVariant, NoParams, register_variant


    @register_variant("planted_failure")
    class PlantedFailure(AttentionVariant):
        \"\"\"Raises in forward: a job that fails on the cluster, after validation passed.\"\"\"

        family = "test"
        cost = "n²"
        supports_causal = True
        Params = NoParams

        def forward(self, q, k, v, causal=False):
            raise RuntimeError("planted failure")
    """
)

PRESET = textwrap.dedent(
    """
    # @package _global_
    defaults:
      - override /hydra/sweeper: grids
      - override /hydra/launcher: submitit_slurm
    hydra:
      launcher:
        timeout_min: 10
        cpus_per_task: 1
        mem_gb: 2
      sweeper:
        grids:
          - variant: softmax,linear,planted_failure
            task: throughput
            task.seq_len: 32
            task.min_run_time: 0.01
            task.backward: false
            threads: 1
          - variant: softmax
            task: throughput
            task.seq_len: 1024
            task.min_run_time: 60
            timeout_s: 2
            threads: 1
    """
)


def _site(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    dist = site / "planted_failure-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: planted-failure\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[attnbench.variants]\nplanted_failure = planted\n")
    (site / "planted.py").write_text(PLANTED)
    conf = tmp_path / "conf" / "sweep"
    conf.mkdir(parents=True)
    (conf / "slurm_test.yaml").write_text(PRESET)
    return site


def _records(results: Path) -> dict[str, dict]:
    return {p.name: json.loads(p.read_text()) for p in (results / "runs").glob("*.json")}


def test_a_sweep_on_slurm_ends_in_records_resumes_and_builds_the_board(slurm, tmp_path):
    site = _site(tmp_path)
    results = tmp_path / "results"
    command = [
        "attnbench",
        "-m",
        f"hydra.searchpath=[file://{tmp_path / 'conf'}]",
        "sweep=slurm_test",
        f"results_dir={results}",
    ]
    env = {"PYTHONPATH": str(site)}
    first = run_cli(*command, env=env, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    records = _records(results)
    by_status = sorted((r["variant"], r["status"]) for r in records.values())
    assert by_status == [
        ("linear", "ok"),
        ("planted_failure", "failed"),
        ("softmax", "ok"),
        ("softmax", "timeout"),
    ], by_status
    (failed,) = [r for r in records.values() if r["status"] == "failed"]
    assert failed["error"] == "RuntimeError: planted failure"
    assert "Slurm" not in failed["error"]  # the job's own failure, recorded by the job
    table = run_cli("attnbench-collect", str(results))
    assert "collected 4 records" in table.stdout, table.stdout + table.stderr

    finished = {
        n: (results / "runs" / n).stat().st_mtime_ns
        for n, r in records.items()
        if r["status"] == "ok"
    }
    again = run_cli(*command, env=env, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    # the finished jobs are not even submitted to Slurm
    assert "2 of 4 jobs finished earlier (a record each): not launched" in again.stdout
    for name, mtime in finished.items():  # the finished jobs were not run again
        assert (results / "runs" / name).stat().st_mtime_ns == mtime
    retried = [p.name for p in (results / "runs").glob("*.*Z*.json")]
    assert len(retried) == 2  # the failed and the timed-out job ran again; the first kept

    board = run_cli("attnbench-leaderboard", str(results))
    assert board.returncode == 0, board.stderr
    assert Path(board.stdout.strip()).is_file()
