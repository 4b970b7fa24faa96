"""Every job ends in a record or a loud failure, and the exit status says which (issue #12).

Through the real command: a job that raised instead of writing its record (exit 1, one line
naming it, the other jobs and the table done); a sweep whose jobs recorded failures (a last
line counting them; exit 1 only when no job succeeded); a failed collection (exit 1, one
sentence); Ctrl-C with Hydra's basic launcher and with joblib workers (exit 130, no traceback,
the finished jobs collected). The sweeper's side of each is tested in-process in
test_grids_sweeper.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest
from conftest import BIN, FAST, REPO, run_cli
from hydra import compose, initialize_config_dir

from attnbench.harness.cli.app import CONF_DIR
from attnbench.harness.jobs.config import store_configs
from attnbench.harness.jobs.job import run_job
from attnbench.harness.sweep.outcome import SweepOutcome

pytestmark = pytest.mark.slow
# enough jobs that two joblib workers, each finishing its running job, cannot run them all
SIX_VARIANTS = "variant=softmax,linear,window,decay,relu2,sigmoid"


def test_outcome_exit_status_and_lines():
    outcome = SweepOutcome()
    assert outcome.exit_status() == 0 and outcome.report() == []
    outcome.job_failed(["variant=linear", "seed=1"], OSError("No space left on device\nmore"))
    outcome.collection_failed("collecting failed.")
    assert outcome.exit_status() == 1
    outcome.stopped(3)
    assert outcome.exit_status() == 130  # Ctrl-C wins: the user asked to stop
    assert outcome.report()[0] == (
        "job failed without a record: variant=linear seed=1 (OSError: No space left on device)"
    )
    assert outcome.report()[1:] == ["collecting failed.", outcome.report()[2]]
    assert "; 3 job(s) not run." in outcome.report()[2]
    outcome.stopped(None)
    assert "not run" not in outcome.report()[2]  # unknown once a launcher could not say
    outcome.reset()
    assert outcome == SweepOutcome()


def test_a_sweep_counts_its_failed_jobs_and_fails_when_none_succeeded():
    """The rule (harness.sweep.outcome): a sweep exits 1 when jobs failed and none ended ok or
    had finished earlier; ``unsupported`` is neither success nor failure."""
    outcome = SweepOutcome()
    outcome.sweep_planned(5, 5, "results")
    for status in ("timeout", "oom", "timeout", "unsupported", "not run: the sweep was stopped"):
        outcome.job_ended(status)
    assert outcome.exit_status() == 1  # nothing succeeded
    assert outcome.report() == [
        "3 of 4 jobs failed: 2 timeout, 1 oom (records in results/runs); no job succeeded."
    ]
    outcome.job_ended("ok")
    assert outcome.exit_status() == 0
    assert outcome.report() == ["3 of 5 jobs failed: 2 timeout, 1 oom (records in results/runs)"]

    only_unsupported = SweepOutcome()
    only_unsupported.sweep_planned(2, 2, "results")
    only_unsupported.job_ended("unsupported")
    only_unsupported.job_ended("unsupported")
    assert only_unsupported.exit_status() == 0 and only_unsupported.report() == []

    raised = SweepOutcome()  # a job without a record has its own line, and is counted too
    raised.sweep_planned(3, 3, "results")
    raised.job_ended("oom")
    raised.job_ended("ok")
    raised.job_failed(["variant=linear"], OSError("No space left on device"))
    assert raised.exit_status() == 1
    assert raised.report()[1] == (
        "2 of 3 jobs failed: 1 oom, 1 without a record (records in results/runs)"
    )

    rerun = SweepOutcome()  # the ok jobs finished earlier; the failed one failed again
    rerun.sweep_planned(3, 1, "results")
    rerun.job_ended("failed")
    assert rerun.exit_status() == 0
    assert rerun.report() == ["1 of 3 jobs failed: 1 failed (records in results/runs)"]


PLANTED_FAILURE = textwrap.dedent(
    """
    from attnbench import AttentionVariant, register_variant


    @register_variant("planted_failure")
    class PlantedFailure(AttentionVariant):
        \"\"\"Every job fails: its forward raises.\"\"\"

        family = "test"
        cost = "n²"
        supports_causal = True

        def forward(self, q, k, v, causal=False):
            raise RuntimeError("planted failure")
    """
)


def _failing_site(tmp_path: Path) -> dict[str, str]:
    """PYTHONPATH for a variant plugin, installed as a user installs one (an entry point),
    whose every job writes a ``failed`` record."""
    site = tmp_path / "site"
    dist = site / "planted_failure-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: planted-failure\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[attnbench.variants]\nplanted_failure = planted_failure\n"
    )
    (site / "planted_failure.py").write_text(PLANTED_FAILURE)
    return {"PYTHONPATH": str(site)}


def _last_line(stderr: str) -> str:
    ours = [x for x in stderr.splitlines() if x.startswith("attnbench: ")]
    assert ours, stderr
    return ours[-1]


def test_a_sweep_with_failed_jobs_ends_with_their_count_and_succeeds_if_one_succeeded(tmp_path):
    results = tmp_path / "results"
    proc = run_cli(
        "attnbench",
        "-m",
        "variant=planted_failure,softmax",
        *FAST,
        f"results_dir={results}",
        env=_failing_site(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert _last_line(proc.stderr) == (
        f"attnbench: 1 of 2 jobs failed: 1 failed (records in {results / 'runs'})"
    )
    statuses = sorted(json.loads(p.read_text())["status"] for p in (results / "runs").iterdir())
    assert statuses == ["failed", "ok"]


def test_a_sweep_in_which_every_job_failed_fails_the_command(tmp_path):
    """Every job wrote a ``failed`` record: the sweep exited 0, as if it had measured something
    (issue #44)."""
    results = tmp_path / "results"
    proc = run_cli(
        "attnbench",
        "-m",
        "variant=planted_failure",
        "seed=0,1",
        *FAST,
        f"results_dir={results}",
        env=_failing_site(tmp_path),
    )
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert _last_line(proc.stderr) == (
        f"attnbench: 2 of 2 jobs failed: 2 failed (records in {results / 'runs'}); "
        "no job succeeded."
    )
    assert len(list((results / "runs").glob("*.json"))) == 2


BLOCK_WRITES = """
import json
import os
run_id = os.environ.get("ATTNBENCH_TEST_BLOCKED_RUN")
if run_id:  # the record of this run cannot be written: the disk is full
    from attnbench.harness.jobs import records
    real = records.atomic_write_text
    def atomic_write_text(path, text):
        if path.name.startswith(run_id):
            raise OSError(28, "No space left on device")
        return real(path, text)
    records.atomic_write_text = atomic_write_text
"""


def _blocked_run_id(results, variant) -> str:
    """The run_id of ``variant``'s job (run in-process, its record then removed)."""
    store_configs()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose("config", overrides=[f"variant={variant}", *FAST, f"results_dir={results}"])
    record = run_job(cfg)
    (results / "runs" / f"{record.run_id}.json").unlink()
    return record.run_id


def test_a_job_without_a_record_fails_the_command_after_the_others_ran(tmp_path):
    results = tmp_path / "results"
    blocked = _blocked_run_id(results, "linear")
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(BLOCK_WRITES)
    proc = run_cli(
        "attnbench",
        "-m",
        "variant=softmax,linear,window",
        *FAST,
        f"results_dir={results}",
        env={"PYTHONPATH": str(tmp_path / "site"), "ATTNBENCH_TEST_BLOCKED_RUN": blocked},
    )
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("attnbench: ")]
    assert line.startswith("attnbench: job failed without a record: variant=linear task.seq_len=32")
    assert "(OSError: [Errno 28] No space left on device)" in line
    table = pd.read_parquet(results / "results.parquet")
    assert set(table[~table["derived"]].variant) == {"softmax", "window"}  # the others ran


def test_a_failed_collection_fails_the_command(tmp_path):
    results = tmp_path / "results"
    (results / "results.parquet").mkdir(parents=True)  # the table cannot be written
    proc = run_cli("attnbench", "variant=softmax", *FAST, f"results_dir={results}")
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"attnbench: collecting the records in {results} into the table failed (" in proc.stderr
    assert f"run attnbench-collect {results} to retry." in proc.stderr
    assert len(list((results / "runs").glob("*.json"))) == 1  # the record is kept


def _sweep_until_first_record(results, *launcher):
    args = [
        "-m",
        *launcher,
        SIX_VARIANTS,
        "task.seq_len=32",
        "task.backward=false",
        "task.min_run_time=1",  # each job runs for a second or more: a Ctrl-C lands in one
        "task.max_timing_s=2",  # and for a few at most (a timing samples up to 10 s by default)
        f"results_dir={results}",
    ]
    sweep = subprocess.Popen(
        [str(BIN / "attnbench"), *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "HYDRA_FULL_ERROR": "0"},
        start_new_session=True,  # its own process group, as a terminal's foreground job
    )
    deadline = time.monotonic() + 120
    while not list((results / "runs").glob("*.json")) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # the next job is running
    return sweep


def _check_stopped(sweep, results):
    try:
        _, stderr = sweep.communicate(timeout=120)
    finally:
        if sweep.poll() is None:
            os.killpg(sweep.pid, signal.SIGKILL)
    assert sweep.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert "attnbench: Ctrl-C: stopping after the running job" in stderr
    records = {p.stem for p in (results / "runs").glob("*.json")}
    assert 1 <= len(records) <= 4, "the sweep should stop part-way"
    table = pd.read_parquet(results / "results.parquet")  # the finished jobs are collected
    assert set(table[~table["derived"]].run_id) == records
    assert f"stopped by Ctrl-C; {6 - len(records)} job(s) not run." in stderr


def test_ctrl_c_stops_after_the_running_job_and_collects(tmp_path):
    """Hydra's basic launcher: SIGINT to the command's process, as the brief asks (a terminal
    sends it to the whole group; the memory probe ignores it, see attnbench.toolkit.memory)."""
    results = tmp_path / "results"
    sweep = _sweep_until_first_record(results)
    sweep.send_signal(signal.SIGINT)
    _check_stopped(sweep, results)


def test_ctrl_c_stops_joblib_workers_and_collects(tmp_path):
    """joblib: the terminal's SIGINT reaches the workers too (sent to the process group)."""
    results = tmp_path / "results"
    sweep = _sweep_until_first_record(results, "hydra/launcher=joblib", "hydra.launcher.n_jobs=2")
    os.killpg(sweep.pid, signal.SIGINT)
    _check_stopped(sweep, results)


def test_sigterm_stops_now_and_collects_the_finished_jobs(tmp_path):
    """SIGTERM (kill, a scheduler's stop) as a second Ctrl-C: the running job is abandoned, the
    finished ones are collected, exit 143."""
    results = tmp_path / "results"
    sweep = _sweep_until_first_record(results)
    sweep.send_signal(signal.SIGTERM)
    try:
        _, stderr = sweep.communicate(timeout=120)
    finally:
        if sweep.poll() is None:
            os.killpg(sweep.pid, signal.SIGKILL)
    assert sweep.returncode == 143, stderr
    assert "Traceback" not in stderr
    assert "attnbench: SIGTERM: stopping now; the finished jobs are collected." in stderr
    records = {p.stem for p in (results / "runs").glob("*.json")}
    assert 1 <= len(records) <= 4, "the sweep should stop part-way"
    table = pd.read_parquet(results / "results.parquet")
    assert set(table[~table["derived"]].run_id) == records
    assert f"stopped by SIGTERM; {6 - len(records)} job(s) not run." in stderr


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MiB filesystem (tmpfs) with 20 KiB left; skips where it cannot be mounted (not
    root)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip("a full disk needs a small tmpfs, which only root can mount here")
    (disk / "fill").write_bytes(b"\0" * (2048 - 20) * 1024)
    yield disk
    subprocess.run(["umount", str(disk)], check=False)


def test_a_full_disk_stops_the_sweep_with_a_list_and_a_rerun_finishes_it(small_disk):
    """Hydra writes each job's config and log before the job runs; on a full disk that raised
    out of the launcher: a traceback, the finished jobs not collected, no list of what failed."""
    results = small_disk / "results"
    sweep = [
        "-m",
        "variant=softmax,linear,decay,relu2",
        *FAST,
        "threads=1",
        f"results_dir={results}",
    ]
    full = run_cli("attnbench", *sweep)
    assert full.returncode == 1, full.stderr
    assert "Traceback" not in full.stderr and "Logging error" not in full.stderr
    ours = [x for x in full.stderr.splitlines() if x.startswith("attnbench: ")]
    assert any("No space left on device" in x for x in ours), full.stderr
    assert any(
        x.startswith("attnbench: the sweep stopped: Hydra could not set up a job")
        or x.startswith("attnbench: job failed without a record")
        for x in ours
    ), full.stderr
    (small_disk / "fill").unlink()  # space freed: the same command finishes the sweep
    again = run_cli("attnbench", *sweep)
    assert again.returncode == 0, again.stderr
    statuses = [json.loads(p.read_text())["status"] for p in (results / "runs").glob("*.json")]
    assert sorted(statuses) == ["ok"] * 4


@pytest.mark.parametrize("command", ["attnbench-variants", "attnbench-collect"])
def test_a_reader_that_leaves_ends_the_command_quietly(tmp_path, command):
    """``attnbench-collect | head -1`` printed a BrokenPipeError traceback (found by the
    adversarial round of issue #28): the reader closing the pipe ends the command with the
    status a shell gives a process SIGPIPE ends, 141, and nothing on stderr; the table is kept."""
    run_cli("attnbench", "variant=softmax", f"results_dir={tmp_path}", *FAST, "threads=1")
    args = [str(BIN / command)] + ([str(tmp_path)] if command == "attnbench-collect" else [])
    (tmp_path / "results.parquet").unlink()
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before the first line
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141 and "Traceback" not in err, err
    if command == "attnbench-collect":
        assert (tmp_path / "results.parquet").exists()


def test_an_error_raised_while_a_ctrl_c_was_handled_is_the_ctrl_c(tmp_path, monkeypatch, capsys):
    """A Ctrl-C landing inside OmegaConf's composition leaves an object half made, whose
    clean-up raises an AttributeError that Hydra would report as its own error with exit status
    1 and no word of the interruption. What a Ctrl-C caused is the Ctrl-C."""
    import sys

    from attnbench.harness.cli import app

    def composing():
        try:
            raise KeyboardInterrupt
        finally:  # a clean-up that fails on what the interruption left
            raise AttributeError("'NoneType' object has no attribute '_invalidate_flags_cache'")

    argv = ["attnbench", "variant=softmax", f"results_dir={tmp_path / 'r'}"]
    monkeypatch.setattr(sys, "argv", argv)
    monkeypatch.setattr(app, "_hydra_main", composing)
    with pytest.raises(SystemExit) as exit_:
        app.main()
    assert exit_.value.code == 130
    assert capsys.readouterr().err.strip().splitlines()[-1] == "attnbench: interrupted by Ctrl-C."


def test_joblib_workers_start_with_sigint_blocked_while_a_sweep_launches(tmp_path):
    """The other half of F5: a terminal's Ctrl-C reached joblib workers still importing, which
    printed their KeyboardInterrupt tracebacks. Started inside a sweep's launch, a worker (here
    a small interpreter started the way loky starts one) has SIGINT blocked from its first
    instruction; outside a launch, and after it, the spawn is joblib's own again."""
    import sys

    from joblib.externals.loky.backend import fork_exec as spawning

    from attnbench.harness.sweep.stop import GracefulStop

    def blocked_in_a_child(name: str) -> str:
        out = tmp_path / name
        code = "import signal, sys; open(sys.argv[1], 'w').write(str(signal.SIGINT in "
        code += "signal.pthread_sigmask(signal.SIG_BLOCK, [])))"
        pid = spawning.fork_exec([sys.executable, "-c", code, str(out)], [])
        os.waitpid(pid, 0)
        return out.read_text()

    joblib_s_own = spawning.fork_exec
    with GracefulStop(tmp_path / ".stop"):
        assert blocked_in_a_child("inside") == "True"
    assert spawning.fork_exec is joblib_s_own
    assert blocked_in_a_child("outside") == "False"
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])  # ours unblocked
