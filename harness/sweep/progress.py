"""What a sweep prints: its progress, and per job only what went wrong.

Hydra's launchers print a message for every job ("Launching 1 jobs locally", "#N :
overrides…"), and a job prints a result line, but nothing says how many jobs are done or how long
the rest will take; in a sweep of hundreds of jobs the console would be those lines. So:

* `SweepProgress` shows jobs done of all, jobs failed so far, the time elapsed and an estimate of
  the time left: a tqdm line on stderr where stderr is a terminal, and otherwise (a log file, CI,
  a pipe) one log line at every tenth of the jobs and at the end, so that a log stays short.
* `QuietConsole`, a filter on the console handlers of Hydra's logging configs (conf/config.yaml),
  keeps off the console in a sweep the launchers' INFO messages and a job's result line when the
  job did not fail (``ok``, ``unsupported``, skipped as finished earlier). A ``failed``, ``oom`` or
  ``timeout`` job keeps its line, with the record's path; warnings and errors always pass. The
  job's own log file (Hydra's file handler) keeps every line. ``hydra.verbose=NAME`` (a logger,
  e.g. ``attnbench.harness.jobs.job`` or ``hydra``) or ``hydra.verbose=true`` (every logger)
  brings the lines back: a logger at DEBUG is never filtered. A single run (no ``-m``) is not
  filtered either: its one result line is its output.
* `ReportingTask` wraps the task function the launchers run, so that every job moves the
  progress when it ends, not only when its launcher's batch returns: a job in the sweep's own
  process (Hydra's basic launcher, every ``run_alone`` job) at once, a job in a worker process of
  this host (joblib) through `JobEnds`, a local socket the sweep listens on. A joblib batch is
  every parallel job of the sweep (the quick sweep's: 70 jobs, two minutes): counted only when it
  returned, the line stood still for all of them. A job where the socket cannot be reached (a
  Slurm node) moves the progress when its batch returns, where the `grids` sweeper reads every
  job's result: that count is the true one, and replaces the live one.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

from attnbench.harness.jobs.records import FAILURES

log = logging.getLogger(__name__)

QUIET_STATUSES = ("ok", "unsupported")  # a job's result line kept off a sweep's console
JOB_LOGGER = "attnbench.harness.jobs.job"
LAUNCHER_LOGGERS = (  # per-job or per-batch launcher messages, kept off a sweep's console
    "hydra._internal.core_plugins.basic_launcher",
    "hydra.core.utils",
    "hydra_plugins.hydra_joblib_launcher",
    "hydra_plugins.hydra_submitit_launcher",
)


_open: list[SweepProgress] = []  # the progress of the sweep this process runs, while it runs


def _in_sweep() -> bool:
    """Whether this process runs a sweep (a `SweepProgress` is open: Hydra sets no config of its
    own in the sweeper's process) or one of a sweep's jobs (Hydra's mode is MULTIRUN)."""
    if _open:
        return True
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    try:
        return HydraConfig.get().mode == RunMode.MULTIRUN
    except Exception:  # no Hydra config: not inside the attnbench command
        return False


def _quiet_job_line(record: logging.LogRecord) -> bool:
    """A job's result line for a job that did not fail, or its "skip … finished earlier" line.

    Read from the record's arguments (status third, as `harness.jobs.job` logs it): a line of
    another shape passes, so that a change of wording shows a line rather than hides a failure.
    """
    args = record.args
    if isinstance(args, tuple) and len(args) > 2 and args[2] in QUIET_STATUSES:
        return True
    return isinstance(record.msg, str) and record.msg.startswith("skip ")


class QuietConsole(logging.Filter):
    """Console filter of Hydra's logging configs: in a sweep, the per-job noise is left out.

    Drops INFO (and lower) records of the launchers' loggers (`LAUNCHER_LOGGERS`) and the result
    lines of jobs that did not fail (`_quiet_job_line`), unless the record's logger is enabled
    for DEBUG (``hydra.verbose``); outside a sweep it drops nothing. It sits on the console
    handler only, so Hydra's log files keep every line.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.INFO:
            return True
        name = record.name
        launcher = any(name == n or name.startswith(n + ".") for n in LAUNCHER_LOGGERS)
        job_line = name == JOB_LOGGER and _quiet_job_line(record)
        if not (launcher or job_line):
            return True
        if logging.getLogger(name).isEnabledFor(logging.DEBUG):
            return True
        return not _in_sweep()


def _duration(seconds: float) -> str:
    """``42s``, ``3m05s``, ``1h02m``: a duration to read at a glance."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class SweepProgress:
    """A sweep's progress: jobs done of ``total``, failed so far, elapsed, time left.

    On a terminal (``stream.isatty()``) a tqdm bar on ``stream``; otherwise a log line (logger
    ``attnbench.harness.sweep.progress``, INFO) each time the jobs done pass another tenth
    of the total, and at `close` if the last line did not already say it all.

    The time left: with ``expected`` (each job's seconds where the sweep was sized, in launch
    order: the grids' ``expected_s``), the expected seconds of the jobs left times this run's
    pace, the time elapsed over the expected seconds of the jobs done (the jobs done taken as
    the first ones: a pool finishes its jobs about in order). A timing job run alone and a
    training job beside another differ several-fold in wall time per job, so without it the
    estimate, the mean time per job so far times the jobs left, follows whichever grids ran
    first (the quick sweep's: +49 % at three tenths, +70 % at four).

    Jobs are counted twice over, by design: `job_finished` as each job in this process ends (a
    live count), `batch_finished` when the launcher returns a batch with every job's result (the
    true count, which replaces the live one: jobs in worker processes are only seen there).
    """

    def __init__(
        self, total: int, stream: TextIO | None = None, expected: list[float] | None = None
    ) -> None:
        self.total = total
        self.expected = expected if expected is not None and len(expected) == total else None
        self.stream = stream if stream is not None else sys.stderr
        self.start = time.monotonic()
        self.committed_done = self.committed_failed = 0  # batches returned
        self.live_done = self.live_failed = 0  # jobs of the running batch, seen in this process
        self.logged_tenths = 0
        self.last_logged: tuple[int, int] | None = None
        self.bar: Any = None
        self.lock = threading.RLock()  # `JobEnds` reports from its own thread
        _open.append(self)
        if self._tty():
            from attnbench.toolkit.progress import progress

            self.bar = progress(
                None, total=total, desc="sweep", unit="job", file=self.stream, dynamic_ncols=True
            )
            self.bar.set_postfix(failed=0)

    def resize(self, total: int, expected: list[float] | None = None) -> None:
        """The sweep's job count changed (jobs planned once others ran, or found finished);
        ``expected`` as in the constructor, for the new count."""
        with self.lock:
            self.total = total
            self.expected = expected if expected is not None and len(expected) == total else None
            if self.bar is not None:
                self.bar.total = total
            self._show()

    def _tty(self) -> bool:
        try:
            return bool(self.stream.isatty())
        except (AttributeError, ValueError):  # a closed or unusual stream: no bar
            return False

    @property
    def done(self) -> int:
        return self.committed_done + self.live_done

    @property
    def failed(self) -> int:
        return self.committed_failed + self.live_failed

    def job_finished(self, failed: bool) -> None:
        """A job of the running batch ended (in this process, or told by `JobEnds`)."""
        with self.lock:
            self.live_done += 1
            self.live_failed += failed
            self._show()

    def batch_finished(self, done: int, failed: int) -> None:
        """The launcher returned a batch: ``done`` jobs ran, ``failed`` of them failed."""
        with self.lock:
            self.committed_done += done
            self.committed_failed += failed
            self.live_done = self.live_failed = 0
            self._show()

    def _show(self) -> None:
        if self.bar is not None:
            self.bar.n = min(self.done, self.total)
            self.bar.set_postfix(failed=self.failed, refresh=False)
            self.bar.refresh()
            return
        tenths = math.floor(10 * self.done / self.total) if self.total else 10
        if tenths > self.logged_tenths:
            self.logged_tenths = tenths
            self._log()

    def line(self) -> str:
        """``sweep: 28/273 jobs done, 1 failed, 2m13s elapsed, about 19m21s left``."""
        elapsed = time.monotonic() - self.start
        text = f"sweep: {self.done}/{self.total} jobs done, {self.failed} failed, "
        text += f"{_duration(elapsed)} elapsed"
        if 0 < self.done < self.total:
            text += f", about {_duration(self.seconds_left(elapsed))} left"
        return text

    def seconds_left(self, elapsed: float) -> float:
        """The estimate of the time left, ``elapsed`` seconds in (the class docstring)."""
        done = min(self.done, self.total)
        if self.expected is not None:
            spent, left = sum(self.expected[:done]), sum(self.expected[done:])
            if spent > 0:
                return elapsed / spent * left
        return elapsed / done * (self.total - done) if done else 0.0

    def _log(self) -> None:
        self.last_logged = (self.done, self.failed)
        log.info("%s", self.line())

    def close(self) -> None:
        """The sweep ended (or stopped): the bar's last state, or a last log line."""
        if self in _open:
            _open.remove(self)
        if self.bar is not None:
            self._show()
            self.bar.close()
            self.bar = None
        elif self.last_logged != (self.done, self.failed):
            self._log()


class JobEnds:
    """Where jobs in worker processes of this host say that they ended: a Unix socket the
    sweep's process listens on (`multiprocessing.connection`, with a random key; on Linux in the
    abstract namespace, so that a sweep killed outright leaves no file behind), one message
    per job, ``(batch, failed)``. A message of a batch other than the running one (late, or
    from a job of an aborted batch) is dropped, so a batch's live count never leaks into the
    next. Pickled to a worker, it is only the address, the key and the batch number. Where the
    socket cannot be made (no ``AF_UNIX``) or reached (another host), `tell` does nothing and
    the job is counted when its batch returns."""

    def __init__(self, progress: SweepProgress) -> None:
        from multiprocessing.connection import Listener

        self.progress: SweepProgress | None = progress
        self.batch = 0
        self.authkey = os.urandom(16)
        self.folder: str | None = None
        if sys.platform.startswith("linux"):  # an abstract socket: no file, none left by a kill -9
            self.address = f"\0attnbench-sweep-{os.getpid()}-{os.urandom(8).hex()}"
        else:
            self.folder = tempfile.mkdtemp(prefix="attnbench-sweep-")
            self.address = os.path.join(self.folder, "jobs")
        self.listener: Any = Listener(self.address, family="AF_UNIX", authkey=self.authkey)
        threading.Thread(target=self._serve, name="attnbench-job-ends", daemon=True).start()

    @classmethod
    def open(cls, progress: SweepProgress) -> JobEnds | None:
        """A listening `JobEnds`, or None where this system cannot make one."""
        try:
            return cls(progress)
        except (OSError, ValueError, AttributeError):
            return None

    def __getstate__(self) -> dict[str, Any]:
        return {"address": self.address, "authkey": self.authkey, "batch": self.batch}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, progress=None, listener=None, folder=None)

    def _serve(self) -> None:
        while True:
            try:
                connection = self.listener.accept()
            except Exception:  # closed: the sweep ended (or a client failed its handshake)
                if self.listener is None or self.progress is None:
                    return
                continue
            with connection:
                try:
                    batch, failed = connection.recv()
                except Exception:
                    continue
            progress = self.progress
            if progress is not None:
                with progress.lock:  # the batch cannot move on between the test and the count
                    if batch == self.batch:
                        progress.job_finished(failed=bool(failed))

    def next_batch(self) -> None:
        """The running batch returned: messages of its jobs that come late are dropped."""
        progress = self.progress
        with progress.lock if progress is not None else contextlib.nullcontext():
            self.batch += 1

    def tell(self, failed: bool) -> None:
        """In a worker: this job ended (failed or not). Never raises."""
        from multiprocessing.connection import Client

        try:
            with Client(self.address, family="AF_UNIX", authkey=self.authkey) as connection:
                connection.send((self.batch, failed))
        except Exception:
            pass  # counted when the batch returns

    def close(self) -> None:
        listener, self.listener, self.progress = self.listener, None, None
        if listener is not None:
            listener.close()
        if self.folder:
            shutil.rmtree(self.folder, ignore_errors=True)


@dataclass
class ReportingTask:
    """The task function as the launchers run it: a job tells the sweep's `SweepProgress` that
    it ended, and whether it failed (an exception, or a record's status in `FAILURES`), at once
    in the sweep's own process and through `ends` (a `JobEnds`) in a worker. Picklable for worker
    processes (the progress stays behind)."""

    task_function: Callable[[Any], Any]
    progress: SweepProgress | None = None
    sweeper_pid: int = field(default_factory=os.getpid)
    ends: JobEnds | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "progress": None}

    def _ended(self, failed: bool) -> None:
        if self.progress is not None and os.getpid() == self.sweeper_pid:
            self.progress.job_finished(failed=failed)
        elif self.ends is not None and os.getpid() != self.sweeper_pid:
            self.ends.tell(failed)

    def __call__(self, cfg: Any) -> Any:
        try:
            value = self.task_function(cfg)
        except Exception:
            self._ended(failed=True)
            raise
        if job_status(value) is not None:
            self._ended(failed=job_status(value) in FAILURES)
        return value


def job_status(value: Any) -> str | None:
    """A job's status from what its task function returned: the status itself (the
    ``attnbench`` command's jobs) or a record's ``status``; None for anything else (a job the
    sweep did not start returns a sentence, `harness.sweep.stop.SKIPPED`)."""
    status = value if isinstance(value, str) else getattr(value, "status", None)
    if not isinstance(status, str):
        return None
    from attnbench.harness.jobs.records import STATUSES

    return status if status in STATUSES else None
