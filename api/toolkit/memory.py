"""Peak memory of a piece of work, measured rather than estimated.

CUDA: the caching allocator's peak (`torch.cuda.max_memory_allocated`) after
`reset_peak_memory_stats`, minus what was allocated before the work started.

CPU (Linux): the peak resident set of a process. `/proc/self/clear_refs` is written with "5",
which resets the kernel's high-water mark VmHWM to the current RSS; after the work, VmHWM minus
the RSS before is the peak extra memory the work touched. That is only honest in a process whose
freed memory goes back to the kernel: glibc keeps freed buffers in its heap, and later work that
reuses those resident pages raises no high-water mark (seen here: readings of 0 MiB after a few
jobs). So CPU measurements run in one long-lived helper process (`isolated_cpu_peak`), spawned
once, whose glibc mmap threshold is pinned at 64 KiB from the start: every buffer above that is
mmapped and unmapped when freed, so its heap never holds large free chunks. The job's own process
keeps glibc's defaults (a 64 KiB threshold there made training several-fold slower).

Caveats (CPU): RSS counts pages *touched*, so an allocation that is never written is not counted;
other threads of the process (e.g. a data loader) are counted too; page granularity is 4 KiB; where
/proc/self/clear_refs is unavailable (not Linux, or forbidden) the CPU peak is reported as unknown
(None), never guessed.

The probe is a fresh process: a variant is built there by name, so the registry must hold what
the job's process holds. Whoever fills that registry (the engine, loading the plugins) registers
the same loading with `at_probe_start`, and the probe runs it first; a task needs no engine
import for it.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import gc
import multiprocessing
import re
import signal
import threading
import warnings
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import torch

from attnbench.toolkit.parent_watch import end_with_parent

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_MIB = 1024 * 1024
PINNED_THRESHOLD = 64 * 1024
_probe: ProcessPoolExecutor | None = None
_STDLIB_METHODS = ("fork", "spawn", "forkserver")
_probe_setup: list[Callable[[], object]] = []  # run first in every probe (`at_probe_start`)


def at_probe_start(fn: Callable[[], object]) -> None:
    """Run ``fn()`` first in every memory-probe process started from now on (once per
    function). ``fn`` must be a module-level function: it is pickled by name. The engine
    registers its plugin loading, so that a probed function can build any registered variant."""
    if fn not in _probe_setup:
        _probe_setup.append(fn)


def _init_probe(*setup: Callable[[], object]) -> None:
    """The probe's start: pin glibc's mmap threshold, ignore Ctrl-C, end with its parent, show
    no warnings, then run ``setup`` (`at_probe_start`'s functions).

    A Ctrl-C in a terminal reaches the whole process group, the probe included; the job's own
    process decides what it means (`harness.sweep.stop`: finish the running job first), and a
    probe killed by it would fail that job and print its own traceback.

    The probe repeats work the job's own process has done (imports, plugins, the same call), and
    that process has shown each warning once, as one sentence; the probe's copies came raw, with
    a code location and a source line, on the same terminal.
    """
    warnings.simplefilter("ignore")
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    end_with_parent()  # a killed job's process gives its probe no signal
    _mallopt(_M_MMAP_THRESHOLD, PINNED_THRESHOLD)
    for fn in setup:
        fn()


@contextlib.contextmanager
def _sigint_ignored():
    """Ignore SIGINT while the probe is spawned, so it starts with SIGINT ignored (an ignored
    signal stays ignored across exec, and Python keeps it so) rather than only once its
    initializer runs, after seconds of imports. Main thread only, where signals are set."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def main_script_hidden():
    """Start processes without the caller's main module: spawn's child imports it again (by
    ``__main__.__file__`` for ``python script.py``, by ``__main__.__spec__`` for ``python -m
    module``), which runs a script's top level a second time, ``attnbench.run`` call included,
    when the script has no ``if __name__ == "__main__":`` guard. With both hidden the child
    starts from its own imports alone; the functions it runs are importable by module name."""
    import sys

    main = sys.modules["__main__"]
    saved = {k: main.__dict__[k] for k in ("__file__", "__spec__") if k in main.__dict__}
    main.__dict__.pop("__file__", None)
    if "__spec__" in saved:
        main.__dict__["__spec__"] = None
    try:
        yield
    finally:
        main.__dict__.update(saved)


REUSE_MMAP_THRESHOLD = 32 * _MIB  # glibc's largest allowed value on 64-bit
REUSE_TRIM_THRESHOLD = 1024 * _MIB


def _mallopt(param: int, value: int) -> bool:
    libc_name = ctypes.util.find_library("c")
    if not libc_name:
        return False
    with contextlib.suppress(OSError, AttributeError):
        return bool(ctypes.CDLL(libc_name).mallopt(param, value))
    return False


def reuse_freed_memory() -> str | None:
    """Let glibc keep freed buffers (up to 32 MiB each) for reuse instead of unmapping them.

    With glibc's defaults a large tensor freed at the end of one call is returned to the kernel
    and the next call's allocation faults its pages in again, zero-filled: a cost that made
    timings say more about the allocator than the variant (docs/design-notes.md). Applied to the
    timing process only (jobs and
    ``attnbench-speed``); the memory probe keeps its own low threshold. Returns a description for
    the record, or None where the C library is not glibc.
    """
    if _mallopt(_M_MMAP_THRESHOLD, REUSE_MMAP_THRESHOLD) and _mallopt(
        _M_TRIM_THRESHOLD, REUSE_TRIM_THRESHOLD
    ):
        return (
            f"glibc mmap_threshold={REUSE_MMAP_THRESHOLD // _MIB}MiB "
            f"trim_threshold={REUSE_TRIM_THRESHOLD // _MIB}MiB"
        )
    return None


def isolated_cpu_peak(fn: Callable[..., float | None], *args: Any) -> float | None:
    """Run ``fn(*args)`` in the memory-probe process and return its result.

    ``fn`` must be a module-level function (it is pickled by name) that builds its inputs and
    returns `peak_memory_mib` of its work. The probe process is spawned on first use and reused.
    """
    global _probe
    if _probe is None:
        if multiprocessing.get_start_method(allow_none=True) not in (None, *_STDLIB_METHODS):
            # Inside a joblib (loky) worker the default start method is "loky", which a spawned
            # child cannot set up; the probe needs only the standard library's spawn.
            multiprocessing.set_start_method("spawn", force=True)
        _probe = ProcessPoolExecutor(
            1,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_init_probe,
            initargs=tuple(_probe_setup),
        )
        with main_script_hidden(), _sigint_ignored():  # the first submit spawns the process
            future = _probe.submit(fn, *args)
    else:
        future = _probe.submit(fn, *args)
    return future.result()


def release_probe() -> None:
    """Shut the memory-probe process down (it is spawned again on next use).

    Called after each job that runs in a launcher's worker process (joblib/loky): a worker that
    still owns a live child pool never finishes its hand-back, and the sweep would hang.
    """
    global _probe
    if _probe is not None:
        _probe.shutdown(wait=True)
        _probe = None


def _status_kib(field: str) -> int:
    text = Path("/proc/self/status").read_text()
    match = re.search(rf"^{field}:\s+(\d+) kB", text, re.MULTILINE)
    if match is None:
        raise OSError(f"{field} not in /proc/self/status")
    return int(match.group(1))


def _reset_cpu_peak() -> int:
    """Reset VmHWM to the current RSS; return that RSS in KiB."""
    Path("/proc/self/clear_refs").write_text("5")
    return _status_kib("VmRSS")


def peak_memory_mib(work: Callable[[], object], device: torch.device) -> float | None:
    """Peak extra memory (MiB) used while running ``work()`` once on ``device``.

    On CPU, call it inside `isolated_cpu_peak` (see the module docstring); in another process
    the reading can miss memory reused from glibc's heap. Returns None where the platform gives no
    honest measurement.
    """
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        work()
        torch.cuda.synchronize(device)
        return (torch.cuda.max_memory_allocated(device) - base) / _MIB
    gc.collect()  # garbage freed during the work would lower the RSS under the baseline
    try:
        base_kib = _reset_cpu_peak()
    except OSError:
        return None
    work()
    with contextlib.suppress(OSError):
        return max(0, _status_kib("VmHWM") - base_kib) / 1024
    return None
