"""A stop that reaches a job inside one long native call.

Python runs a signal's handler only between bytecodes. A job inside one long kernel (softmax
over 10⁶ tokens: minutes in one call) therefore ignored SIGTERM and a second Ctrl-C until the
kernel returned, printing nothing, although the docs promise an immediate stop. The C-level half
of Python's handler does act at once: it writes the signal's number to the wakeup file
descriptor (`signal.set_wakeup_fd`). `watch_stops` reads that descriptor in a daemon thread. A
signal that stops the command now (SIGTERM; the Ctrl-C that stops now: the second in a sweep,
the first elsewhere) whose Python handler has not run within `GRACE_S` is one it cannot run
(handlers note that they ran: `taken`). The thread then says so in one line, collects the
finished records into the table (the sweep's own collection would run only after the kernel),
and ends the process with the command's status (143, 130): the running job leaves no record, as
after any stop-now. A job's own process (``timeout_s``), a joblib worker and the memory probe
end with it (`harness.jobs.job`, `attnbench.toolkit.parent_watch`).

Torch's kernels release Python's global lock, so the thread runs beside them; a native call that
keeps the lock (a C loop of the interpreter itself) holds the thread up too, and stops when it
returns. The watcher starts only where no one else uses the wakeup descriptor (asyncio does).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections import Counter
from pathlib import Path

GRACE_S = 2.0  # a handler that has not run by then waits on a native call
STATUS = {signal.SIGTERM: 143, signal.SIGINT: 130}

_taken: Counter[int] = Counter()  # stop signals whose Python handler ran
_seen: Counter[int] = Counter()  # stop signals that arrived (the watcher's count)
_ctrl_c_to_stop = 1  # which Ctrl-C stops now: the second while a sweep runs (`harness.sweep.stop`)
_results_dir: Path | None = None  # the running command's results folder, collected on a stop
_watching = False  # the thread runs (started once per process)
_active = False  # a command watches now (`watch_stops` to `stop_watching`)
_previous_fd = -1  # the wakeup descriptor before the command's
_write_fd = -1


def noting(handler):
    """Mark ``handler`` as one that calls `taken` first: the watcher acts only where such a
    handler is installed (a handler of someone else's, a test's or a notebook's, is theirs)."""
    handler.notes_taken = True
    return handler


def taken(signum: int) -> None:
    """Note that the Python handler of ``signum`` ran (called first thing by each handler)."""
    _taken[signum] += 1


def sweep_running(running: bool) -> None:
    """A sweep's graceful stop is installed (the first Ctrl-C waits for the running job) or not."""
    global _ctrl_c_to_stop
    _ctrl_c_to_stop = 2 if running else 1


def collect_on_stop(results_dir: str | os.PathLike | None) -> None:
    """The results folder a stop in a native call collects (the command's, once Hydra composed
    it)."""
    global _results_dir
    _results_dir = None if results_dir is None else Path(str(results_dir))


@noting
def interrupt_noted(signum: int, frame: object) -> None:
    """Python's default Ctrl-C (``KeyboardInterrupt``), noted as taken."""
    taken(signum)
    signal.default_int_handler(signum, frame)


def watch_stops() -> bool:
    """Watch for stops (module docstring) until `stop_watching`, from the main thread; False
    where it cannot: not the main thread, or the wakeup descriptor already someone else's."""
    global _watching, _active, _previous_fd, _write_fd
    if threading.current_thread() is not threading.main_thread():
        return False
    if not _watching:
        read, _write_fd = os.pipe()
        os.set_blocking(_write_fd, False)
        threading.Thread(
            target=_watch, args=(read,), name="attnbench-stop-watch", daemon=True
        ).start()
        _watching = True
    try:
        previous = signal.set_wakeup_fd(_write_fd, warn_on_full_buffer=False)
    except (ValueError, OSError):
        return False
    if previous not in (-1, _write_fd):  # another's (asyncio's): leave it as it was
        signal.set_wakeup_fd(previous)
        return False
    _previous_fd, _active = previous, True
    _taken.clear()
    _seen.clear()
    return True


def stop_watching() -> None:
    """The command is over: the watcher acts no more, the wakeup descriptor is as it was."""
    global _active
    if not _active:
        return
    _active = False
    if threading.current_thread() is threading.main_thread():
        with contextlib.suppress(ValueError, OSError):
            signal.set_wakeup_fd(_previous_fd)


def _watch(read: int) -> None:
    """Read the signals as they arrive; act on a stop-now one its handler does not take up."""
    while True:
        try:
            data = os.read(read, 64)
        except OSError:
            return
        if not data:
            return
        for signum in data:
            if not _active:  # between commands (a process that runs several): not ours
                continue
            _seen[signum] += 1
            if signum == signal.SIGTERM or (
                signum == signal.SIGINT and _seen[signum] >= _ctrl_c_to_stop
            ):
                _stop_if_stuck(signum, _seen[signum])


def _stop_if_stuck(signum: int, count: int) -> None:
    """After `GRACE_S`: if the handler of the ``count``-th ``signum`` has not run, stop here."""
    deadline = time.monotonic() + GRACE_S
    while time.monotonic() < deadline:
        if _taken[signum] >= count:
            return
        time.sleep(0.05)
    if _taken[signum] >= count or not _active:
        return
    if not getattr(signal.getsignal(signum), "notes_taken", False):
        return  # a handler of someone else's is installed: its owner decides
    name = "SIGTERM" if signum == signal.SIGTERM else "Ctrl-C"
    _say(
        f"attnbench: {name}: the running job is inside one long native call, which Python's "
        "signal handlers wait for; stopping now (that job leaves no record)."
    )
    _collect_finished()
    os._exit(STATUS.get(signum, 128 + signum))


def _collect_finished() -> None:
    """Collect the command's results folder, in one line either way."""
    if _results_dir is None:
        return
    from attnbench.harness.results.collect import collect

    try:
        summary = collect(_results_dir)
    except Exception as exc:  # said, never raised: the process ends next
        _say(
            f"attnbench: collecting {_results_dir} failed ({type(exc).__name__}: {exc}); the "
            f"records are kept: run attnbench-collect {_results_dir}."
        )
        return
    _say(f"attnbench: {summary.describe()}")


def _say(line: str) -> None:
    with contextlib.suppress(OSError):
        os.write(2, (line + "\n").encode())
