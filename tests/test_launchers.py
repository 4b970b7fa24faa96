"""Sweeps through Hydra's joblib and submitit launchers, and a sweep killed half-way (issue #7).

Every job writes its own record (named by the hash of its config) atomically, so parallel
workers can neither lose nor duplicate a row; the collected table is checked for both.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pandas as pd
from conftest import BIN, REPO, run_cli

FAST = [
    "task.backward=false",
    "task.min_run_time=0.01",
    "task.min_samples=4",
    "task.max_timing_s=1",
]
VARIANTS = "variant=softmax,linear,window,decay"


def _records(results):
    return {p.stem: json.loads(p.read_text()) for p in (results / "runs").glob("*.json")}


def _check_complete(results, n_jobs):
    records = _records(results)
    assert len(records) == n_jobs and all(r["status"] == "ok" for r in records.values())
    table = pd.read_parquet(results / "results.parquet")
    jobs = table[~table["derived"]]
    assert set(jobs.run_id) == set(records)  # nothing lost
    assert not jobs.duplicated(["run_id", "metric", "x_value"]).any()  # nothing doubled
    return records


def test_joblib_launcher_runs_jobs_with_a_time_budget_in_parallel_workers(tmp_path):
    """Four jobs in two joblib workers, each with a time budget, so in a process of its own.

    - Every job a record, none lost or doubled in the table.
    - A job with a budget, started from a joblib worker, was told the worker's default start
      method, "loky", which a fresh interpreter cannot set: it died at start-up (``cannot find
      context for 'loky'``) and every job of the sweep was recorded failed (issue #44).
    - The progress moves as each job ends: a joblib batch is every parallel job of a sweep (the
      quick sweep's was 220 jobs), and counted only when it returned, the line stood still for
      minutes.
    """
    results = tmp_path / "results"
    proc = run_cli(
        "attnbench",
        "-m",
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=2",
        "hydra.verbose=hydra_plugins.hydra_joblib_launcher",  # its messages, off the console else
        "timeout_s=600",
        VARIANTS,
        "task.seq_len=32",
        *FAST,
        f"results_dir={results}",
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-2000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert "Joblib.Parallel(n_jobs=2" in out
    for done in (1, 2, 3, 4):
        assert f"sweep: {done}/4 jobs done, 0 failed, " in out, out[-3000:]
    _check_complete(results, 4)


def test_joblib_workers_thread_count_decides_what_finished_earlier(tmp_path):
    """``threads=0`` is torch's default where the job runs: a joblib worker starts with
    OMP_NUM_THREADS at cpu_count // n_jobs, often fewer than the sweep's own process. Seeds run
    earlier in the sweep's process at its count were skipped as finished by a joblib sweep whose
    workers measure at theirs; the sweep now passes the workers' count to its jobs, so they run
    again at it (and are skipped only where the two counts are the same)."""
    from joblib._parallel_backends import LokyBackend

    results = tmp_path / "results"
    common = ["task.seq_len=32", *FAST, "variant=softmax", f"results_dir={results}"]
    first = run_cli("attnbench", "-m", "seed=0,1", *common)
    assert first.returncode == 0, first.stderr[-2000:]
    here = {r["threads"] for r in _records(results).values()}
    assert len(here) == 1
    (here,) = here
    workers = int(LokyBackend()._prepare_worker_env(2)["OMP_NUM_THREADS"])
    proc = run_cli(
        "attnbench",
        "-m",
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=2",
        "seed=0,1,2,3",
        *common,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = list(_records(results).values())
    assert all(r["status"] == "ok" and r["threads"] == r["env"]["threads"] for r in records)
    ran = sorted((r["seed"], r["threads"]) for r in records)
    expected = {(s, here) for s in (0, 1)} | {(s, workers) for s in range(4)}
    assert ran == sorted(expected)
    skipped = 2 if workers == here else 0
    assert (proc.stdout + proc.stderr).count(f"{skipped} of 4 jobs finished earlier") == bool(
        skipped
    )


def test_submitit_local_launcher_runs_the_cluster_path(tmp_path):
    results = tmp_path / "results"
    proc = run_cli(
        "attnbench",
        "-m",
        "hydra/launcher=submitit_local",
        "hydra.launcher.timeout_min=5",
        "hydra.verbose=hydra_plugins.hydra_submitit_launcher",  # its messages, off the console else
        "variant=softmax,linear",
        "task.seq_len=32",
        *FAST,
        f"results_dir={results}",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Submitit 'local' sweep output dir" in proc.stdout + proc.stderr
    _check_complete(results, 2)
    logs = list((results / "hydra" / "multiruns").rglob("*_log.out"))
    assert logs  # submitit's own job logs: the jobs ran as submitit jobs


def test_interrupted_sweep_rerun_skips_finished_jobs(tmp_path):
    results = tmp_path / "results"
    args = [
        "-m",
        VARIANTS,
        "task.seq_len=32",
        "task.backward=false",
        "task.min_run_time=0.5",  # each job a second or more: the kill lands part-way
        "task.max_timing_s=1",  # and a few at most (a timing samples up to 10 s by default)
        f"results_dir={results}",
    ]
    sweep = subprocess.Popen(
        [str(BIN / "attnbench"), *args],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while len(list((results / "runs").glob("*.json"))) < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(sweep.pid, signal.SIGKILL)  # the whole sweep dies, as on a lost node
    sweep.wait()
    before = {p.name: p.read_bytes() for p in (results / "runs").glob("*.json")}
    assert 1 <= len(before) < 4, "the sweep should die part-way"

    proc = run_cli("attnbench", *args)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (proc.stdout + proc.stderr).count("finished earlier") == len(before)
    records = _check_complete(results, 4)
    for name, content in before.items():  # finished jobs were skipped, not re-run
        assert (results / "runs" / name).read_bytes() == content
    assert len(records) == 4
