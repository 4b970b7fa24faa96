"""Ctrl-C during a sweep: the first stops after the running job, the second stops now.

A benchmark job can take minutes, and its record is the only thing that survives it; a Ctrl-C
that throws it away, prints a traceback and leaves the table uncollected loses the most work. So
the `grids` sweeper runs its launches inside `GracefulStop` and hands the launcher a
`GuardedTask` instead of the bare task function:

* first Ctrl-C: one line on stderr saying so; the running job finishes and writes its record,
  the jobs not yet started are not run (no record, no Hydra job directory where avoidable: a
  re-run of the same command runs them), and the sweep ends normally, so Hydra's callbacks
  collect the table. The command exits with 130.
* second Ctrl-C: ``KeyboardInterrupt`` now, in the running job; the sweeper catches it, the
  callbacks still collect what finished, exit 130. No traceback either way.

How the stop reaches the jobs depends on where they run:

* In the sweeper's own process (Hydra's basic launcher), `GuardedTask` raises `StopSweep` when
  the running job returns. It derives from ``BaseException``, so Hydra's ``run_job`` does not
  turn it into a failed job: it leaves the launcher's loop and the sweeper catches it.
* In other processes (joblib's loky workers, submitit jobs), which share the terminal's process
  group and receive the same SIGINT, jobs ignore SIGINT: the sweeper's process decides. A file,
  ``.stop`` in the sweep directory, tells jobs that have not started to return `SKIPPED` instead
  of running. A second Ctrl-C interrupts the launcher's wait in the sweeper's process; joblib
  then terminates its workers (their running jobs leave no record). A job that starts in such a
  process first leaves a second file, ``.started``: with joblib's workers, a first Ctrl-C before
  any job of the batch has started has no job to wait for, and stops now, as a second one would
  (waiting would mean waiting for every worker to start and skip its jobs: 5-13 s). Not with a
  cluster's queued jobs, which would outlive the sweep.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnbench.harness.sweep.hard_stop import noting, sweep_running, taken
from attnbench.toolkit.parent_watch import end_with_parent

STOP_FILE = ".stop"
STARTED_FILE = ".started"  # beside the stop file: a job of the running batch has started
SKIPPED = "not run: the sweep was stopped"  # what a guarded job returns when it does not start
FIRST_CTRL_C = (
    "attnbench: Ctrl-C: stopping after the running job (not starting new ones); "
    "press Ctrl-C again to stop now.\n"
)
CTRL_C_BEFORE_ANY_JOB = "attnbench: Ctrl-C: no job has started yet; stopping now.\n"

_stop_requested = False  # set by GracefulStop's handler in the sweeper's process


@noting
def terminate_now(signum: int, frame: Any) -> None:
    """SIGTERM (``kill``, a scheduler's stop, ``docker stop``) handled as a second Ctrl-C: stop
    now, and still collect the finished jobs and say what was not run (exit 143). Not as a first
    Ctrl-C: whoever sends SIGTERM usually sends SIGKILL a few seconds later, too soon to let the
    running job finish. A second SIGTERM kills at once."""
    from attnbench.harness.sweep.outcome import OUTCOME

    taken(signum)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    OUTCOME.stopped_by = "SIGTERM"
    os.write(2, b"attnbench: SIGTERM: stopping now; the finished jobs are collected.\n")
    raise KeyboardInterrupt


def raised_by_a_stop(exc: BaseException) -> bool:
    """Whether ``exc`` was raised while a stop (Ctrl-C, or SIGTERM, which `terminate_now` turns
    into ``KeyboardInterrupt``) was being handled: one that lands inside OmegaConf's composition
    (Hydra composes each job's config between jobs) leaves an object half made, and its clean-up
    can raise "'NoneType' object has no attribute '_invalidate_flags_cache'", which would be
    reported as Hydra's own error, exit status 1. It is the stop."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


class StopSweep(BaseException):  # noqa: N818 (a control-flow signal, like KeyboardInterrupt)
    """Raised by `GuardedTask` in the sweeper's process when the running job is done and a stop
    was requested: ends the launcher's loop without starting the next job."""


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def started_file(stop_file: Path) -> Path:
    """The file a job in another process leaves when it starts (module docstring)."""
    return stop_file.with_name(STARTED_FILE)


def stop_requested(stop_file: Path | None) -> bool:
    """Whether a Ctrl-C asked the sweep to stop (in this process, or in the sweeper's)."""
    return _stop_requested or (stop_file is not None and stop_file.exists())


def _loky_spawn() -> Any:
    """The module through which joblib's loky backend starts a worker (a fork and exec of a
    fresh interpreter); None without joblib, or with another layout of it."""
    try:
        from joblib.externals.loky.backend import fork_exec
    except ImportError:
        return None
    return fork_exec


def _workers_start_without_sigint() -> Callable | None:
    """While a sweep launches, joblib's workers start with SIGINT blocked; returns what to put
    back (None where there is nothing to wrap).

    Jobs in workers ignore SIGINT (the sweeper's process decides, module docstring), but only
    once the worker runs one: a terminal's Ctrl-C that reaches a worker still importing would
    print its ``KeyboardInterrupt`` traceback (20-57 lines). A blocked signal
    survives fork and exec, and Python does not unblock it, so such a worker never sees SIGINT;
    joblib ends its workers itself (SIGTERM) when the sweeper stops."""
    module = _loky_spawn()
    spawn = getattr(module, "fork_exec", None)
    if spawn is None or not hasattr(signal, "pthread_sigmask"):
        return None

    @functools.wraps(spawn)
    def without_sigint(*args: Any, **kwargs: Any) -> Any:
        before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})  # this thread only
        try:
            return spawn(*args, **kwargs)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, before)

    module.fork_exec = without_sigint
    return spawn


class GracefulStop:
    """Context manager for a sweep's launches: SIGINT handling as in the module docstring.

    Installs its handler only in the main thread (where Python delivers signals); elsewhere it
    changes nothing. Removes the stop file on entry (a stale one from an earlier sweep in the
    same directory) and on exit.
    """

    def __init__(self, stop_file: Path) -> None:
        self.stop_file = stop_file
        self.previous: Any = None
        self.installed = False
        self.local_workers = False  # the batch's jobs run in workers that end with the sweep
        self.before_any_job = False  # the stop came before any of them started
        self._spawn: Callable | None = None

    @property
    def requested(self) -> bool:
        return stop_requested(None)

    def __enter__(self) -> GracefulStop:
        global _stop_requested
        _stop_requested = False
        self.stop_file.unlink(missing_ok=True)
        self.new_batch()
        if _in_main_thread():
            self.previous = signal.signal(signal.SIGINT, self._handle)
            self.installed = True
        self._spawn = _workers_start_without_sigint()
        sweep_running(True)
        return self

    def new_batch(self, local_workers: bool = False) -> None:
        """A launch is about to start, its jobs in local workers (joblib's) or not; none has
        started. Only local workers end with the sweep: a cluster's queued jobs would run later."""
        self.local_workers = local_workers
        self.before_any_job = False
        started_file(self.stop_file).unlink(missing_ok=True)

    @noting
    def _handle(self, signum: int, frame: Any) -> None:
        global _stop_requested
        taken(signum)
        if _stop_requested:  # the second Ctrl-C: stop now
            signal.signal(signal.SIGINT, signal.default_int_handler)
            raise KeyboardInterrupt
        _stop_requested = True
        with contextlib.suppress(OSError):  # the jobs of this process still see the flag
            self.stop_file.touch()
        if self.local_workers and not started_file(self.stop_file).exists():
            self.before_any_job = True
            signal.signal(signal.SIGINT, signal.default_int_handler)
            os.write(2, CTRL_C_BEFORE_ANY_JOB.encode())
            raise KeyboardInterrupt
        os.write(2, FIRST_CTRL_C.encode())  # not print(): a handler may interrupt a write

    def __exit__(self, *exc: object) -> None:
        global _stop_requested
        sweep_running(False)
        if self._spawn is not None:
            _loky_spawn().fork_exec = self._spawn
        if self.installed:
            signal.signal(signal.SIGINT, self.previous)
        _stop_requested = False
        self.stop_file.unlink(missing_ok=True)
        self.new_batch()


@dataclass
class GuardedTask:
    """The task function as the launcher runs it: a stop is honoured between jobs.

    Picklable (launchers send it to worker processes), so it holds only the task function, the
    stop file's absolute path and the sweeper's process id. In the sweeper's process it also
    keeps what a launch aborted by `StopSweep` or ``KeyboardInterrupt`` cannot return: how many
    jobs started and finished, and the failures among them (`take_batch`).
    """

    task_function: Callable[[Any], Any]
    stop_file: Path
    sweeper_pid: int = field(default_factory=os.getpid)
    started: int = 0
    finished: int = 0
    failures: list[tuple[Sequence[str], BaseException]] = field(default_factory=list)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "started": 0, "finished": 0, "failures": []}  # per process

    def __call__(self, cfg: Any) -> Any:
        here = os.getpid() == self.sweeper_pid
        if not here and _in_main_thread():
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # the sweeper's process decides
        if not here:
            end_with_parent()  # kill -9 of the sweep sends its workers nothing
        if stop_requested(self.stop_file):
            if here:
                raise StopSweep
            return SKIPPED
        self.started += here
        if not here:
            with contextlib.suppress(OSError):  # the sweeper's first Ctrl-C waits for this job
                started_file(self.stop_file).touch()
        try:
            value = self.task_function(cfg)
        except Exception as exc:
            if here:
                self.finished += 1
                self.failures.append((_job_overrides(), exc))
                if stop_requested(self.stop_file):
                    raise StopSweep from exc
            raise
        if here:
            self.finished += 1
            if stop_requested(self.stop_file):
                raise StopSweep
        return value

    def take_batch(self) -> tuple[int, int, list[tuple[Sequence[str], BaseException]]]:
        """Jobs started and finished in this process since the last call, and the failures
        among them; then starts counting afresh."""
        taken = (self.started, self.finished, self.failures)
        self.started, self.finished, self.failures = 0, 0, []
        return taken


def _job_overrides() -> list[str]:
    """The running job's overrides, as Hydra logs them."""
    from hydra.core.hydra_config import HydraConfig

    with contextlib.suppress(ValueError):
        return list(HydraConfig.get().overrides.task)
    return []
