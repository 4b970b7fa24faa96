"""Peak memory of a piece of work, measured rather than estimated.

CUDA: the caching allocator's peak (`torch.cuda.max_memory_allocated`) after
`reset_peak_memory_stats`, minus what was allocated before the work started.

CPU (Linux): the process's peak resident set. Before the work, `/proc/self/clear_refs` is written
with "5", which resets the kernel's high-water mark VmHWM to the current RSS; after it, VmHWM minus
the RSS before is the peak extra memory the work touched. So that freed tensors really leave the
RSS (and a later measurement is not flattered by reused pages), glibc's mmap threshold is pinned
at 64 KiB with `mallopt` *during the measurement only*: larger buffers are mmapped and returned to
the kernel when freed. Afterwards it is set to 32 MiB, glibc's own ceiling for its dynamic
threshold (where it settles in long runs): a 64 KiB threshold left in place makes every later
tensor allocation an mmap/munmap pair and slows training jobs in the same process several-fold.

Caveats (CPU): RSS counts pages *touched*, so an allocation that is never written is not counted;
other threads of the process (e.g. a data loader) are counted too; page granularity is 4 KiB; where
/proc/self/clear_refs is unavailable (not Linux, or forbidden) the CPU peak is reported as unknown
(None), never guessed.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import re
from collections.abc import Callable
from pathlib import Path

import torch

_M_MMAP_THRESHOLD = -3
_MIB = 1024 * 1024
MEASURING_THRESHOLD = 64 * 1024
RUNNING_THRESHOLD = 32 * _MIB


@functools.lru_cache(maxsize=1)
def _mallopt():
    libc_name = ctypes.util.find_library("c")
    if not libc_name:
        return None
    try:
        return ctypes.CDLL(libc_name).mallopt
    except (OSError, AttributeError):
        return None


def set_mmap_threshold(threshold_bytes: int) -> bool:
    """Set glibc's mmap threshold (False where there is no glibc)."""
    mallopt = _mallopt()
    return bool(mallopt and mallopt(_M_MMAP_THRESHOLD, threshold_bytes))


@contextlib.contextmanager
def freed_memory_returned():
    """Within the block, buffers over 64 KiB go back to the kernel when freed (module docstring)."""
    set_mmap_threshold(MEASURING_THRESHOLD)
    try:
        yield
    finally:
        set_mmap_threshold(RUNNING_THRESHOLD)


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

    Returns None where the platform gives no honest measurement (see module docstring).
    """
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        work()
        torch.cuda.synchronize(device)
        return (torch.cuda.max_memory_allocated(device) - base) / _MIB
    with freed_memory_returned():
        try:
            base_kib = _reset_cpu_peak()
        except OSError:
            return None
        work()
        with contextlib.suppress(OSError):
            return max(0, _status_kib("VmHWM") - base_kib) / 1024
    return None
