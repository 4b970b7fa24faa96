"""One job: build the task and variant from a composed config, run, measure, write the record.

`run(cfg)` never raises for a failure of the job itself: a failing, non-finite, out-of-memory or
unsupported job becomes a record with its status and error, so a sweep goes on. It does raise for
bad configuration that no job could run with (unknown names, invalid device): checking a job's
values is `harness.validation.prepare_job`.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import signal
import threading
import time
import traceback
from datetime import datetime, timezone

import torch
from omegaconf import DictConfig

from attnbench.harness.discovery import load_plugins
from attnbench.harness.env import environment
from attnbench.harness.memory import release_probe, reuse_freed_memory
from attnbench.harness.records import Record, find_ok_record, make_run_id, write_record
from attnbench.harness.task_api import JobContext, NonFiniteError
from attnbench.harness.validation import DTYPES, prepare_job
from attnbench.harness.variant_api import VARIANTS, UnsupportedError

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
    """(status, error text) of a job that raised ``exc``."""
    text = f"{type(exc).__name__}: {exc}"
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


def run(cfg: DictConfig) -> Record:
    """Run the job described by ``cfg`` (a composed attnbench config) and write its record.

    Returns:
        The record written (or the existing `ok` record when the job was already done and
        ``cfg.overwrite`` is false).
    """
    load_plugins()
    ident, task = prepare_job(cfg)  # bad values fail here, before any work or record
    entry = VARIANTS.entry(ident["variant"])
    run_id = make_run_id(ident)
    results_dir = cfg.results_dir
    if not cfg.overwrite:
        done = find_ok_record(results_dir, run_id)
        if done is not None:
            log.info(
                "skip %s × %s: finished earlier (run %s)", ident["task"], ident["variant"], run_id
            )
            return done

    device = torch.device(ident["device"])
    threads = int(cfg.threads) or torch.get_num_threads()
    torch.set_num_threads(threads)
    flush_denormal = torch.set_flush_denormal(True) if device.type == "cpu" else False
    allocator = reuse_freed_memory() if device.type == "cpu" else None
    torch.manual_seed(ident["seed"])
    ctx = JobContext(
        variant_name=ident["variant"],
        variant_params=ident["variant_params"],
        device=device,
        dtype=DTYPES[ident["dtype"]],
        seed=ident["seed"],
        threads=threads,
    )

    start = time.perf_counter()
    status, error, points, details = "ok", None, [], {}
    try:
        with time_budget(float(cfg.timeout_s)):
            result = task.run(ctx)
        for point in result.points:
            if not torch.isfinite(torch.tensor(float(point.value))):
                raise NonFiniteError(f"metric {point.metric} = {point.value}")
        directions = {m.name: m.higher_is_better for m in task.metrics}
        points = [
            {
                "metric": p.metric,
                "value": float(p.value),
                "x_name": p.x_name,
                "x_value": None if p.x_value is None else float(p.x_value),
                "higher_is_better": directions.get(p.metric),
            }
            for p in result.points
        ]
        details = result.details
    except Exception as exc:  # every job failure becomes a record; the sweep goes on
        # (JobTimeout too: it subclasses Exception so that task code cannot mistake it for a
        # KeyboardInterrupt, and a broad except inside a task would only delay it)
        status, error = _classify(exc)
        details = {"traceback": traceback.format_exc(limit=8)}
        if device.type == "cuda":
            torch.cuda.empty_cache()
    duration = time.perf_counter() - start
    if multiprocessing.current_process().name != "MainProcess":
        release_probe()  # a launcher's worker must not keep a child pool (harness.memory)

    env = environment(device)
    env.update(threads=threads, flush_denormal=flush_denormal, cpu_allocator=allocator)
    record = Record(
        run_id=run_id,
        status=status,
        error=error,
        metrics=points,
        env=env,
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        duration_s=duration,
        details={
            **details,
            "variant_family": entry.obj.family,
            "variant_cost": entry.obj.cost,
            "variant_origin": entry.origin,
        },
        **ident,
    )
    path = write_record(results_dir, record)
    log.info(
        "%s × %s: %s in %.1fs → %s%s",
        ident["task"],
        ident["variant"],
        status,
        duration,
        path,
        f" ({error})" if error else "",
    )
    return record
