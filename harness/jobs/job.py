"""One job: build it from a composed config, execute it, record what happened.

`run_job(cfg)` reads as those three steps. Building (checking the values, resolving device and
dtype, the job's identity) is `harness.jobs.preflight.prepare_job`; this module only runs jobs:
skip one that finished earlier, set the process up and run the task under its time budget
(`_execute`), and write the record (`_record`).

`run_job(cfg)` never raises for a failure of the job itself: a failing, non-finite, out-of-memory,
timed-out or unsupported job becomes a record with its status and error, so a sweep goes on. It
does raise `ConfigError` for bad configuration that no job could run with (unknown names, invalid
device).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import multiprocessing
import signal
import threading
import time
import traceback
import warnings
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import torch
from omegaconf import DictConfig

from attnbench.harness.discovery import PluginLoadWarning, load_plugins
from attnbench.harness.jobs.env import environment
from attnbench.harness.jobs.preflight import TORCH_DTYPES, PreparedJob, prepare_job
from attnbench.harness.jobs.records import Record, find_finished_record, write_record
from attnbench.metrics import MetricPoint, TaskResult
from attnbench.task import JobContext, NonFiniteError, Task
from attnbench.toolkit.memory import main_script_hidden, release_probe, reuse_freed_memory
from attnbench.variant import VARIANTS, UnsupportedError, library_version

log = logging.getLogger(__name__)


class JobTimeout(Exception):
    """A job ran past its time budget (``timeout_s``); recorded as status ``timeout``."""


@contextlib.contextmanager
def time_budget(seconds: float):
    """Raise `JobTimeout` in the block once ``seconds`` of wall time have passed (0 = no budget).

    Uses SIGALRM, so it works in the main thread on POSIX (where Hydra's local and joblib
    launchers run jobs) and is a no-op elsewhere. The check happens between Python operations:
    one long kernel finishes before the timeout is raised.
    """
    usable = (
        seconds > 0
        and hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
    )
    if not usable:
        yield
        return

    def expire(signum, frame):
        raise JobTimeout(f"job exceeded its time budget of {seconds:g} s (timeout_s)")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _classify(exc: BaseException) -> tuple[str, str]:
    """(status, error text) of a job that raised ``exc``.

    The text is the message's first line: torch's C++ errors append a stack dump of dozens of
    lines, which the record's ``details.traceback`` keeps and the log line and board should not.
    """
    text = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0]}"
    if isinstance(exc, UnsupportedError):
        return "unsupported", str(exc)
    if isinstance(exc, JobTimeout):
        return "timeout", str(exc)
    if isinstance(exc, NonFiniteError):
        return "failed", f"non-finite: {exc}"
    oom_types = (MemoryError, getattr(torch, "OutOfMemoryError", MemoryError))
    if (
        isinstance(exc, oom_types)
        or "out of memory" in str(exc).lower()
        or ("can't allocate memory" in str(exc))
    ):
        return "oom", text
    return "failed", text


def run_job(cfg: DictConfig) -> Record:
    """Run the job described by ``cfg`` (a composed attnbench config) and write its record.

    Returns:
        The record written (or the existing `ok` record when the job was already done and
        ``cfg.overwrite`` is false).

    Raises:
        ConfigError: for values no job could run with, before any work or record.
    """
    load_plugins()
    job = prepare_job(cfg)
    done = _reusable_record(cfg, job.identity, job.run_id)
    if done is not None:
        return done
    if job.build_error is not None or job.task is None:  # a plugin's constructor raised
        outcome = _JobOutcome("failed", job.build_error, _settings_before_job())
    elif float(cfg.timeout_s) > 0 and _importable(job):
        outcome = _execute_in_own_process(cfg, float(cfg.timeout_s))
    else:
        outcome = _execute(job.task, job.identity, cfg)
    return _record(cfg.results_dir, job, outcome)


def hard_deadline(budget_s: float) -> float:
    """Seconds after which a job with a time budget is ended from outside: the budget, plus a
    grace (10 %, at least 5 s) for the job to stop itself at its next Python operation and
    send its own record's contents (with its traceback)."""
    return budget_s + max(5.0, 0.1 * budget_s)


def _importable(job: PreparedJob) -> bool:
    """Whether a fresh process can build the job by name: its task and variant are entry points
    (a class registered at run time, in a notebook or a test, is only in the process that
    registered it, and keeps the in-process budget only)."""
    from importlib import metadata

    from attnbench.harness.discovery import ENTRY_POINT_GROUPS
    from attnbench.task import TASKS

    def entry_point(registry: Any, name: str) -> bool:
        groups = [g for g, r in ENTRY_POINT_GROUPS.items() if r is registry]
        return any(ep.name == name for g in groups for ep in metadata.entry_points(group=g))

    return entry_point(VARIANTS, job.identity["variant"]) and entry_point(
        TASKS, job.identity["task"]
    )


def _execute_in_own_process(cfg: DictConfig, budget_s: float) -> _JobOutcome:
    """`_execute` in a spawned process that is killed at `hard_deadline`.

    The in-process budget (SIGALRM) is checked between Python operations, so one long kernel
    (a dense attention over 10^6 tokens on a CPU, a hung collective on a GPU) outlasts it; on
    a cluster the scheduler's limit then kills the job with no record, and every re-run
    launches it again. Here the job runs in a child, which still stops itself at its budget
    when it can (status timeout, with its traceback); past the hard deadline the child is
    killed and the record says so. A child that dies on its own (the kernel's out-of-memory
    killer, a crash in native code) becomes a record too, instead of taking the sweep with it.
    The price is one process start per job (the imports, a few seconds), paid only by jobs
    with a budget.
    """
    from omegaconf import OmegaConf

    context = multiprocessing.get_context("spawn")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(
        target=_child_job,
        args=(OmegaConf.to_container(cfg, resolve=True), send),
        name="attnbench-job",
    )
    start = time.perf_counter()
    # spawn would run a script's top level again in the child, and set up a start method the
    # child cannot have (joblib's "loky")
    with main_script_hidden(), _stdlib_start_method():
        child.start()
    send.close()
    try:
        if receive.poll(hard_deadline(budget_s)):
            try:
                return receive.recv()
            except EOFError:  # the child died without a result: let it finish dying
                child.join(10)
        alive = child.is_alive()
        child.kill()
        child.join()
        outcome = _JobOutcome(
            "timeout" if alive else "failed",
            (
                f"job exceeded its time budget of {budget_s:g} s (timeout_s) inside one "
                f"operation that could not be interrupted; its process was killed at "
                f"{hard_deadline(budget_s):g} s"
            )
            if alive
            else _death(child.exitcode),
            _settings_before_job(),
        )
        if not alive and child.exitcode == -signal.SIGKILL:
            outcome.status = "oom"
        outcome.duration_s = time.perf_counter() - start
        return outcome
    finally:  # Ctrl-C or SIGTERM while waiting: the child must not outlive the sweep
        if child.is_alive():
            child.kill()
        child.join()
        receive.close()


@contextlib.contextmanager
def _stdlib_start_method():
    """Make the standard library's ``spawn`` the process-wide start method while a child starts.

    A spawned child is told the parent's *default* start method, whichever context started it
    (``multiprocessing.spawn.get_preparation_data``), and sets it before anything else. In a
    joblib worker that is ``"loky"``, which exists only where joblib's loky is imported: the
    child died with ``ValueError: cannot find context for 'loky'`` before running a line of the
    job. The previous method is restored after the start, so the launcher's worker is left as
    it was. Called in the thread that runs jobs, before any other process is started from it.
    """
    previous = multiprocessing.get_start_method(allow_none=True)
    multiprocessing.set_start_method("spawn", force=True)
    try:
        yield
    finally:
        multiprocessing.set_start_method(previous, force=True)


def _death(exitcode: int | None) -> str:
    """The error of a job whose process ended without a result."""
    if exitcode is not None and exitcode < 0:
        name = signal.Signals(-exitcode).name
        likely = " (likely the out-of-memory killer)" if -exitcode == signal.SIGKILL else ""
        return f"the job's process was ended by {name}{likely} before it wrote a result"
    return f"the job's process exited with status {exitcode} before it wrote a result"


def _child_job(config: dict[str, Any], send: Any) -> None:
    """The child of `_execute_in_own_process`: build the job by name, run it, send the
    outcome. Ctrl-C is the parent's to handle (`harness.sweep.stop`), as in a launcher's
    worker: the parent kills this process when it stops."""
    from omegaconf import OmegaConf

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent()
    cfg = OmegaConf.create(config)
    with warnings.catch_warnings():  # a plugin that failed to load: the parent said so already
        warnings.simplefilter("ignore", PluginLoadWarning)
        load_plugins()
    job = prepare_job(cfg)
    send.send(_execute(job.task, job.identity, cfg))
    send.close()


def _die_with_parent() -> None:
    """Ask Linux to kill this process when its parent dies (a launcher's worker terminated by a
    second Ctrl-C), so that no job outlives its sweep; elsewhere nothing is done."""
    import ctypes
    import sys

    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def finished_earlier(cfg: DictConfig, job: PreparedJob) -> bool:
    """Whether a sweep may leave the checked ``job`` out: it has an `ok` or `unsupported`
    record and ``overwrite`` is off (the `grids` sweeper's ``job_done``; `run` decides the same
    way for a job it is given)."""
    if cfg.overwrite:
        return False
    statuses = ("ok", "unsupported")
    return find_finished_record(str(cfg.results_dir), job.run_id, statuses) is not None


def _reusable_record(cfg: DictConfig, ident: dict[str, Any], run_id: str) -> Record | None:
    """The job's existing `ok` (or `unsupported`) record, unless ``overwrite`` asks to run it
    again.

    A re-run sweep thereby only runs the jobs it has no result for: failed, oom and timed-out
    jobs are retried; an `unsupported` one is not, since the same code and settings refuse it
    again (re-running it would only pile up identical attempts).
    """
    if cfg.overwrite:
        return None
    done = find_finished_record(cfg.results_dir, run_id, statuses=("ok", "unsupported"))
    if done is not None:
        log.info("skip %s × %s: finished earlier (run %s)", ident["task"], ident["variant"], run_id)
    return done


@dataclass
class _JobOutcome:
    """What executing a job gave: the record's status, error, points and details.

    ``settings`` are the process settings the job ran with (threads, flush_denormal,
    cpu_allocator); the record's env holds them beside the versions and machine.
    """

    status: str
    error: str | None
    settings: dict[str, Any]
    points: list[dict[str, Any]] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    duration_s: float = 0.0


def _job_context(cfg: DictConfig, ident: dict[str, Any]) -> tuple[JobContext, dict[str, Any]]:
    """Set this process up for the job; return the task's `JobContext` and the settings made.

    Threads, the global seed, and on CPU flush-denormal and glibc's allocator (see
    `attnbench.toolkit.memory.reuse_freed_memory`): process-wide state a job's timings depend on, so
    it is set for every job and recorded. Called inside `_execute`'s failure handling: a setting
    this process refuses (the values were checked, but torch may still refuse) becomes a `failed`
    record, like any other failure of the job.
    """
    device = torch.device(ident["device"])
    threads = ident["threads"]  # resolved by prepare_job: part of the job's identity
    torch.set_num_threads(threads)
    settings = {
        "threads": threads,
        "flush_denormal": torch.set_flush_denormal(True) if device.type == "cpu" else False,
        "cpu_allocator": reuse_freed_memory() if device.type == "cpu" else None,
    }
    torch.manual_seed(ident["seed"])
    ctx = JobContext(
        variant_name=ident["variant"],
        variant_params=ident["variant_params"],
        device=device,
        dtype=TORCH_DTYPES[ident["dtype"]],
        seed=ident["seed"],
        threads=threads,
    )
    return ctx, settings


def _metric_points(result: TaskResult, task: Task) -> list[dict[str, Any]]:
    """The record's metric points, each with its metric's declared direction.

    Built as `MetricPoint`s, so the fields of a point in the record are the one definition in
    `attnbench.metrics` (`POINT_FIELDS`), not a second list here. Raises `NonFiniteError` if any
    value is NaN or infinite: a diverged job is a failure, not a result.
    """
    for point in result.points:
        if not math.isfinite(float(point.value)):
            raise NonFiniteError(f"metric {point.metric} = {point.value}")
    directions = {m.name: m.higher_is_better for m in task.metrics}
    return [
        dataclasses.asdict(
            MetricPoint(
                metric=p.metric,
                value=float(p.value),
                x_name=p.x_name,
                x_value=None if p.x_value is None else float(p.x_value),
                higher_is_better=directions.get(p.metric),
            )
        )
        for p in result.points
    ]


def _settings_before_job() -> dict[str, Any]:
    """The process settings a record states when the job's own were never made."""
    return {"threads": torch.get_num_threads(), "flush_denormal": False, "cpu_allocator": None}


def _execute(task: Task, ident: dict[str, Any], cfg: DictConfig) -> _JobOutcome:
    """Set the process up and run the task under the time budget; never raises for the job.

    Every failure of the job becomes the outcome (status from `_classify`, traceback in the
    details), so the sweep goes on. `JobTimeout` too: it subclasses Exception so that task code
    cannot mistake it for a KeyboardInterrupt, and a broad except inside a task would only delay
    it.
    """
    device = torch.device(ident["device"])
    settings = _settings_before_job()  # until the job's own are made (if that fails, they stay)
    start = time.perf_counter()
    try:
        reason = VARIANTS.get(ident["variant"]).unavailable(device.type)
        if reason:  # a peer whose library or device is missing here: unsupported, not failed
            raise UnsupportedError(reason)
        ctx, settings = _job_context(cfg, ident)
        with time_budget(float(cfg.timeout_s)):
            result = task.measure(ctx)
        outcome = _JobOutcome("ok", None, settings, _metric_points(result, task), result.details)
    except Exception as exc:  # every job failure becomes a record; the sweep goes on
        status, error = _classify(exc)
        outcome = _JobOutcome(
            status, error, settings, details={"traceback": traceback.format_exc(limit=8)}
        )
        if device.type == "cuda":
            torch.cuda.empty_cache()
    outcome.duration_s = time.perf_counter() - start
    if multiprocessing.current_process().name != "MainProcess":
        release_probe()  # a launcher's worker must not keep a child pool (attnbench.toolkit.memory)
    return outcome


def _record(results_dir: str, job: PreparedJob, outcome: _JobOutcome) -> Record:
    """Write the job's record: its identity, code modules, outcome, environment, the variant's
    registry facts and the task's self-description.

    The variant's family, cost and origin go into the details, and the task's description
    (`Task.describe`) into ``task_info``, so that collection and the leaderboard can describe
    both without importing them.
    """
    ident = job.identity
    entry = VARIANTS.entry(ident["variant"])
    env = environment(torch.device(ident["device"]))
    env.update(outcome.settings)
    record = Record(
        run_id=job.run_id,
        status=outcome.status,
        error=outcome.error,
        metrics=outcome.points,
        env=env,
        created_at=datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
        duration_s=outcome.duration_s,
        details={
            **outcome.details,
            "variant_family": entry.obj.family,
            "variant_cost": entry.obj.cost,
            "variant_origin": entry.origin,
            "peer_of": entry.obj.peer_of,
            "variant_library": library_version(entry.obj.library),
            "variant_size_params": list(entry.obj.size_params),
        },
        task_info=job.task_class.describe().to_dict(),
        code_modules=job.code_modules,
        **ident,
    )
    path = write_record(results_dir, record)
    log.info(
        "%s × %s: %s in %.1fs → %s%s",
        ident["task"],
        ident["variant"],
        outcome.status,
        outcome.duration_s,
        path,
        f" ({outcome.error})" if outcome.error else "",
    )
    return record
