"""A job whose one operation outlasts its time budget still ends in a record (issue #28).

The budget (``timeout_s``) is first checked between Python operations (SIGALRM); a single long
kernel outlasts that check, so a job with a budget runs in its own process, which is killed at
the hard deadline (`harness.jobs.job.hard_deadline`). Through the real command, with a variant
plugin installed the way a user installs one (an entry point), whose forward runs one C loop
for minutes (``sum`` over a range: no signal handler runs until it returns), or whose process
dies (the out-of-memory killer's SIGKILL, an abort).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest
from conftest import FAST, run_cli

from attnbench.harness.jobs.job import hard_deadline
from attnbench.harness.sweep.hard_stop import GRACE_S

pytestmark = pytest.mark.slow

BLOCKING = textwrap.dedent(
    """
    import os, signal
    from dataclasses import dataclass
    import torch
    from attnbench import AttentionVariant, register_variant


    @dataclass
    class Params:
        mode: str = "block"  # block | quick | native | sigkill | abort


    @register_variant("planted_blocking")
    class PlantedBlocking(AttentionVariant):
        \"\"\"Runs one long C loop (Python's signal handlers wait for it), or dies.\"\"\"

        family = "test"
        cost = "n²"
        supports_causal = True
        Params = Params

        def forward(self, q, k, v, causal=False):
            if self.params.mode == "block":
                sum(range(10**11))  # minutes in one C loop, no grandchild holding our pipes
            elif self.params.mode == "quick":
                return v
            elif self.params.mode == "native":  # a minute in one torch call (Python's lock free)
                open(os.environ["PLANTED_STARTED"], "w").close()
                torch.linalg.matrix_power(torch.randn(2000, 2000), 2**62 - 1)
            elif self.params.mode == "sigkill":
                os.kill(os.getpid(), signal.SIGKILL)
            else:
                os.abort()
            return v
    """
)


@pytest.fixture
def site(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    dist = site / "planted_blocking-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: planted-blocking\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[attnbench.variants]\nplanted_blocking = planted_blocking\n"
    )
    (site / "planted_blocking.py").write_text(BLOCKING)
    return site


def _job(site: Path, results: Path, *overrides: str) -> tuple[dict, float]:
    start = time.perf_counter()
    proc = run_cli(
        "attnbench",
        "variant=planted_blocking",
        *FAST,
        "threads=1",
        f"results_dir={results}",
        *overrides,
        env={"PYTHONPATH": str(site)},
        timeout=300,
    )
    elapsed = time.perf_counter() - start
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    (path,) = (results / "runs").glob("*.json")
    return json.loads(path.read_text()), elapsed


def test_one_operation_past_the_budget_is_killed_and_recorded_as_timeout(site, tmp_path):
    record, elapsed = _job(site, tmp_path / "r", "timeout_s=1")
    assert record["status"] == "timeout", record["error"]
    assert "inside one operation that could not be interrupted" in record["error"]
    assert hard_deadline(1) <= record["duration_s"] < hard_deadline(1) + 5
    assert elapsed < 60  # the operation (minutes) did not run to its end


@pytest.mark.parametrize(
    "mode, status, error",
    [
        ("sigkill", "oom", "ended by SIGKILL (likely the out-of-memory killer)"),
        ("abort", "failed", "ended by SIGABRT"),
    ],
)
def test_a_job_whose_process_dies_is_a_record_and_the_sweep_goes_on(
    site, tmp_path, mode, status, error
):
    record, _ = _job(site, tmp_path / "r", "timeout_s=60", f"variant.mode={mode}")
    assert record["status"] == status and error in record["error"], record["error"]


def test_the_hard_deadline_leaves_the_job_time_to_stop_itself():
    assert hard_deadline(1) == 6 and hard_deadline(600) == 660


# --- a stop inside one long native call (`harness.sweep.hard_stop`) ------------------------------


@pytest.mark.parametrize("stop", ["SIGTERM", "two Ctrl-C"])
def test_a_stop_reaches_a_job_inside_one_long_native_call(site, tmp_path, stop):
    """Without a budget the job runs in the sweep's own process; its one torch call (a minute)
    kept SIGTERM and a second Ctrl-C waiting for it, silently. Now the command ends within a few
    seconds with its status, and the job that finished first is in the collected table."""
    results, started = tmp_path / "r", tmp_path / "started"
    command = [
        shutil.which("attnbench", path=str(Path(sys.executable).parent)),
        "-m",
        "variant=planted_blocking",
        "variant.mode=quick,native",  # in this order, one at a time in this process
        "task.seq_len=32",
        "task.backward=false",
        "task.min_run_time=0.01",
        "task.max_timing_s=1",
        "threads=1",
        f"results_dir={results}",
    ]
    env = {**os.environ, "PYTHONPATH": str(site), "PLANTED_STARTED": str(started)}
    proc = subprocess.Popen(command, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while not started.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert started.exists(), proc.stderr.read()[-2000:] if proc.poll() is not None else ""
        time.sleep(1)  # inside the call now
        sent = time.monotonic()
        if stop == "SIGTERM":
            proc.send_signal(signal.SIGTERM)
        else:
            proc.send_signal(signal.SIGINT)
            time.sleep(0.5)
            proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)  # the bug: the call's minute, then the stop
        waited = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == (143 if stop == "SIGTERM" else 130), err[-2000:]
    assert waited < GRACE_S + 20, waited  # the grace, then one collection of one record
    assert "inside one long native call" in err and "Traceback" not in err
    table = pd.read_parquet(results / "results.parquet")
    assert set(table["run_id"]) == {
        json.loads(p.read_text())["run_id"] for p in (results / "runs").glob("*.json")
    }
    assert len(set(table["run_id"])) == 1  # the quick job's; the stopped one left no record


AFTER_A_COMMAND = """
import os, signal, sys, time
from attnbench.harness.cli.app import main
sys.argv = ["attnbench", "no_such_key=1"]
try:
    main()
except SystemExit:
    pass
signal.signal(signal.SIGINT, lambda *a: print("mine", flush=True))
os.kill(os.getpid(), signal.SIGINT)
time.sleep(3 * GRACE_S)
print("alive", flush=True)
"""


def test_the_watcher_leaves_a_process_alone_once_its_command_is_over():
    """A process that ran the command in-process (a test, a notebook) and then takes a Ctrl-C
    with its own handler: the watcher ended it two seconds later (exit 130), as if stuck."""
    code = f"GRACE_S = {GRACE_S}\n" + AFTER_A_COMMAND
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["mine", "alive"]
