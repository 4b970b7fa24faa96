"""What a sweep prints (issue #41 item 5): its progress, and per job only what failed.

In-process: the progress line's counts and times, a log line per tenth where stderr is no
terminal, a tqdm bar where it is one, and the console filter's rules. Then a real sweep through
the command (stderr a pipe, as in CI): no launcher message per job, a progress line naming 4/4
and the failed count, a failed job's line with its record, an ok job's line only in its log.
"""

from __future__ import annotations

import io
import logging
import pickle
import re
import sys
import tempfile
import textwrap
import time

import pytest
from conftest import run_cli

from attnbench.harness.sweep import progress as sweep_progress
from attnbench.harness.sweep.progress import JobEnds, QuietConsole, SweepProgress, job_status


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_log_line_per_tenth_and_at_the_end(caplog):
    caplog.set_level(logging.INFO, logger=sweep_progress.__name__)
    progress = SweepProgress(20, stream=io.StringIO())
    for i in range(5):
        progress.job_finished(failed=i == 3)
    progress.batch_finished(5, 1)  # the batch's true count replaces the live one: no new tenth
    progress.batch_finished(15, 2)
    progress.close()
    lines = [r.getMessage() for r in caplog.records]
    assert [x.split(" jobs")[0] for x in lines] == [
        "sweep: 2/20",
        "sweep: 4/20",
        "sweep: 20/20",
    ]
    assert "0 failed" in lines[0] and "1 failed" in lines[1] and "3 failed" in lines[-1]
    assert "elapsed, about " in lines[0] and lines[0].endswith(" left")
    assert "left" not in lines[-1]  # done
    assert sweep_progress._open == []


def test_a_stopped_sweep_says_where_it_stopped(caplog):
    caplog.set_level(logging.INFO, logger=sweep_progress.__name__)
    progress = SweepProgress(100, stream=io.StringIO())
    progress.job_finished(failed=False)
    progress.close()
    assert [r.getMessage().split(" jobs")[0] for r in caplog.records] == ["sweep: 1/100"]


def test_a_terminal_gets_a_bar_and_no_log_lines(caplog):
    caplog.set_level(logging.INFO, logger=sweep_progress.__name__)
    terminal = _Terminal()
    progress = SweepProgress(4, stream=terminal)
    progress.job_finished(failed=True)
    progress.batch_finished(4, 1)
    progress.close()
    assert not caplog.records
    last = terminal.getvalue().split("\r")[-1]
    assert "sweep: 100%" in last and "4/4" in last and "failed=1" in last


def _wait_for(condition, seconds: float = 10.0) -> None:
    end = time.monotonic() + seconds
    while not condition() and time.monotonic() < end:
        time.sleep(0.01)


def test_jobs_in_workers_move_the_progress_and_a_late_one_is_dropped():
    """A worker's copy of `JobEnds` (pickled: address, key, batch) tells the sweep's progress
    as each job ends; a message of a batch that has returned is dropped, so the batch's true
    count is not counted twice; once the sweep closed it, telling does nothing."""
    progress = SweepProgress(10, stream=io.StringIO())
    ends = JobEnds.open(progress)
    assert ends is not None
    try:
        worker = pickle.loads(pickle.dumps(ends))  # what a job of batch 0 holds
        assert worker.listener is None and worker.progress is None
        worker.tell(False)
        worker.tell(True)
        _wait_for(lambda: progress.done == 2)
        assert (progress.done, progress.failed) == (2, 1)
        ends.next_batch()
        progress.batch_finished(2, 1)
        worker.tell(False)  # late: its batch returned
        pickle.loads(pickle.dumps(ends)).tell(True)  # a job of batch 1
        _wait_for(lambda: progress.done == 3)
        time.sleep(0.2)
        assert (progress.done, progress.failed) == (3, 2)
    finally:
        ends.close()
        progress.close()
    worker.tell(False)  # nothing listens: no error


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="abstract sockets are Linux's")
def test_the_job_ends_socket_leaves_no_file_a_kill_could_strand(tmp_path, monkeypatch):
    """On Linux the socket is abstract: a sweep killed outright (kill -9, which runs no
    clean-up) left a folder with a socket in the temporary folder each time."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    progress = SweepProgress(1, stream=io.StringIO())
    ends = JobEnds.open(progress)
    try:
        assert ends.address.startswith("\0") and list(tmp_path.iterdir()) == []
        pickle.loads(pickle.dumps(ends)).tell(False)
        _wait_for(lambda: progress.done == 1)
        assert progress.done == 1
    finally:
        ends.close()
        progress.close()


def test_job_status():
    class Record:
        status = "oom"

    assert job_status("ok") == "ok" and job_status(Record()) == "oom"
    assert job_status("not run: the sweep was stopped") is None and job_status(None) is None


def _record(name: str, msg: str, args: tuple = (), level: int = logging.INFO):
    return logging.LogRecord(name, level, __file__, 1, msg, args, None)


JOB_LINE = "%s × %s: %s in %.1fs → %s%s"


def test_the_console_filter_in_a_sweep_keeps_failures_warnings_and_verbose_loggers():
    keep = QuietConsole().filter
    launcher = "hydra._internal.core_plugins.basic_launcher"
    ok = _record("attnbench.harness.jobs.job", JOB_LINE, ("t", "v", "ok", 1.0, "p", ""))
    failed = _record("attnbench.harness.jobs.job", JOB_LINE, ("t", "v", "failed", 1.0, "p", "x"))
    launching = _record(launcher, "Launching 1 jobs locally")
    assert keep(ok) and keep(launching)  # outside a sweep nothing is left out
    progress = SweepProgress(1, stream=io.StringIO())
    try:
        assert not keep(ok) and not keep(launching)
        assert not keep(_record("hydra_plugins.hydra_joblib_launcher._core", "\t#0 : x"))
        assert not keep(_record("attnbench.harness.jobs.job", "skip %s × %s: finished earlier"))
        assert keep(failed)
        assert keep(_record(launcher, "odd", level=logging.WARNING))
        assert keep(_record("attnbench.harness.sweep.callbacks", "collected 4 records"))
        logging.getLogger(launcher).setLevel(logging.DEBUG)  # hydra.verbose=<that logger>
        assert keep(launching)
    finally:
        logging.getLogger(launcher).setLevel(logging.NOTSET)
        progress.close()
    assert keep(ok)


PLANTED = textwrap.dedent(
    """
    from attnbench import AttentionVariant, NoParams, register_variant


    @register_variant("planted_failure")
    class PlantedFailure(AttentionVariant):
        \"\"\"Raises in forward: a job that fails after validation passed.\"\"\"

        family = "test"
        cost = "n²"
        supports_causal = True
        Params = NoParams

        def forward(self, q, k, v, causal=False):
            raise RuntimeError("planted failure")
    """
)


@pytest.mark.slow
def test_a_sweep_prints_its_progress_and_only_the_failed_jobs(tmp_path):
    site = tmp_path / "site"
    dist = site / "planted_failure-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: planted-failure\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[attnbench.variants]\nplanted_failure = planted\n")
    (site / "planted.py").write_text(PLANTED)
    results = tmp_path / "results"
    proc = run_cli(
        "attnbench",
        "-m",
        "variant=softmax,planted_failure",
        "task=throughput",
        "task.seq_len=32",
        "task.backward=false",
        "task.min_run_time=0.01",
        "seed=0,1",
        f"results_dir={results}",
        env={"PYTHONPATH": str(site)},
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]  # failed jobs with a record: the sweep succeeded
    assert "Launching" not in out and "#0 :" not in out and "#3 :" not in out
    assert "grids sweeper: 4 jobs from the command line" in out  # not "from 0 grids"
    assert "sweep: 4/4 jobs done, 2 failed, " in out
    failed = [x for x in out.splitlines() if "throughput × planted_failure: failed in" in x]
    assert len(failed) == 2 and all(f"{results}/runs/" in x for x in failed), out
    assert "RuntimeError: planted failure" in failed[0]
    assert "throughput × softmax: ok" not in out
    logs = "".join(p.read_text() for p in (results / "hydra" / "multiruns").rglob("*.log"))
    assert logs.count("throughput × softmax: ok in") == 2  # the job's log file keeps it


# a kernel build that takes 10 s, once per machine (a file as its cache), in every process that
# starts: compiled.build wrapped at interpreter start (sitecustomize)
SLOW_BUILD = """
import os, time
import attnbench.variants.kernels.compiled as compiled

_build = compiled.build


def build(*args, **kwargs):
    marker = os.environ["PLANTED_BUILT"]
    if not os.path.exists(marker):
        time.sleep(10)
        open(marker, "w").close()
    return _build(*args, **kwargs)


compiled.build = build
"""


@pytest.mark.slow
def test_kernel_builds_happen_before_the_sweep_s_clock(tmp_path):
    """A variant's first call (where its kernel is built) is made before the first job: the
    progress line's clock and estimate measure jobs, not a build (they read 10 s of build as
    the first job's time, and the estimate multiplied it)."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SLOW_BUILD)
    proc = run_cli(
        "attnbench",
        "-m",
        "variant=relu2",  # its kernel: the pointwise one
        "task=throughput",
        "task.seq_len=32,48,64",
        "task.backward=false",
        "task.min_run_time=0.01",
        "task.max_timing_s=1",  # a busy machine cannot stretch a job's sampling towards 10 s
        "threads=1",
        "hydra/launcher=basic",  # the jobs in the sweep's process, as the warm-up
        f"results_dir={tmp_path / 'results'}",
        env={"PYTHONPATH": str(site), "PLANTED_BUILT": str(tmp_path / "built")},
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "first calls (kernel builds) took 10 s, before the clock" in out, out[-3000:]
    elapsed = [int(s) for s in re.findall(r"sweep: 1/3 jobs done, 0 failed, (\d+)s elapsed", out)]
    assert elapsed and elapsed[0] < 10, out[-3000:]


def test_first_calls_build_their_kernels_at_once(monkeypatch):
    """Each shipped variant's first call runs on its own thread, inside a timed region (no
    tuning): four calls that each wait 1 s on a build (a compiler process: no CPU of this
    one) end in about 1 s, where one after another took 4; a plugin's variant is not called."""
    from attnbench.harness.sweep import warm
    from attnbench.toolkit.timing import in_timed_region

    called: list[tuple[str, bool]] = []

    def first_call(name: str) -> None:
        time.sleep(1.0)
        called.append((name, in_timed_region()))

    monkeypatch.setattr(warm, "_first_call", first_call)
    monkeypatch.setattr(warm, "_shipped", lambda name: not name.startswith("plugin"))
    warmer = warm.KernelWarmer()
    for name in ["softmax", "relu2", "topk", "window", "plugin_x"]:
        warmer.add(name)
    seconds = warmer.finish()
    assert sorted(called) == [(n, True) for n in ("relu2", "softmax", "topk", "window")]
    assert 1.0 <= seconds < 2.5  # serial: >= 4 s; the margin is for a busy machine's threads


def test_the_time_left_weighs_the_jobs_left_by_their_expected_seconds(monkeypatch):
    """Ten jobs expected at 1 s, then twenty at 5 s, on a machine twice as slow: after the ten,
    20 s elapsed, so 2 × 100 s are left; the mean per job done (2 s) would say 40 s. Without
    expected times, or with a list of another length, the mean per job done."""
    clock = [0.0]
    monkeypatch.setattr(sweep_progress.time, "monotonic", lambda: clock[0])
    progress = SweepProgress(30, stream=io.StringIO(), expected=[1.0] * 10 + [5.0] * 20)
    clock[0] = 20.0
    for _ in range(10):
        progress.job_finished(False)
    assert progress.seconds_left(20.0) == pytest.approx(200.0)
    assert "about 3m20s left" in progress.line()
    plain = SweepProgress(30, stream=io.StringIO(), expected=[1.0] * 29)
    for _ in range(10):
        plain.job_finished(False)
    assert plain.seconds_left(20.0) == pytest.approx(40.0)
    progress.resize(31, [1.0] * 10 + [5.0] * 21)  # a tuned seed planned: its time counts
    assert progress.seconds_left(20.0) == pytest.approx(210.0)
    progress.close()
    plain.close()


def test_first_calls_show_no_warning_and_a_stopped_sweep_waits_for_none(monkeypatch):
    """While the jobs are composed the first calls run beside: a warning on their threads is
    not shown (a variant's warnings belong to its jobs) where the sweep's own is, and a sweep
    refused or stopped meanwhile leaves without waiting for a build (`abandon`), its timed
    region closed."""
    import warnings

    from attnbench.harness.sweep import warm
    from attnbench.toolkit.timing import in_timed_region

    def slow_build(name: str) -> None:
        warnings.warn(f"from {name}'s first call", RuntimeWarning, stacklevel=1)
        time.sleep(3.0)

    monkeypatch.setattr(warm, "_first_call", slow_build)
    monkeypatch.setattr(warm, "_shipped", lambda name: True)
    shown: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = lambda message, *args, **kwargs: shown.append(str(message))
        warmer = warm.KernelWarmer()
        assert in_timed_region()
        warmer.add("softmax")
        time.sleep(0.2)  # its warning raised by now
        warnings.warn("the sweep's own", UserWarning, stacklevel=1)
        start = time.monotonic()
        warmer.abandon()
        assert time.monotonic() - start < 1.0  # the build (3 s) is not waited for
        assert not in_timed_region()
    assert shown == ["the sweep's own"]
