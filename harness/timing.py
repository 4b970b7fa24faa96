"""How attnbench times a piece of work.

Method:
1. Inputs are built by the caller, outside the timed region.
2. The first call is timed on its own (``first_call_ms``: lazy initialisation, kernel selection,
   compilation) and never mixed into the steady-state samples.
3. Warm-up: a few more untimed calls.
4. Steady state: `torch.utils.benchmark.Timer` with ``num_threads`` set to the job's thread count;
   `blocked_autorange` picks how many calls make one sample (each block ≥ ~10 ms where possible)
   and runs for at least ``min_run_time`` seconds; more blocks are added until there are at least
   ``min_samples`` samples. On CUDA the Timer synchronises the device around each block.
5. Reported: median, interquartile range (IQR) and the number of samples, in milliseconds per call.
6. CPU jobs flush denormals and let glibc reuse freed buffers instead of unmapping them
   (`harness.memory.reuse_freed_memory`); both are recorded in the record's ``env``.

Never compare absolute times across runs or machines; compare ratios measured in the same run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils import benchmark


@dataclass(frozen=True)
class Timing:
    """Summary of the steady-state samples of one timed call, in milliseconds per call."""

    median_ms: float
    iqr_ms: float
    n_samples: int
    first_call_ms: float
    samples_ms: tuple[float, ...]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_call(
    fn: Callable[[], object],
    *,
    device: torch.device,
    num_threads: int,
    min_samples: int = 5,
    min_run_time: float = 0.2,
    warmup: int = 2,
    label: str = "attnbench",
) -> Timing:
    """Time ``fn()`` by the method in the module docstring.

    Args:
        fn: The work; its inputs must already exist.
        device: Where the work runs (CUDA is synchronised).
        num_threads: Threads for the Timer (and the job).
        min_samples: At least this many samples are taken.
        min_run_time: Seconds of steady-state timing per `blocked_autorange` round.
        warmup: Untimed calls after the first call.
        label: Label of the Timer measurement.
    """
    _sync(device)
    start = time.perf_counter()
    fn()
    _sync(device)
    first_call_ms = (time.perf_counter() - start) * 1e3
    for _ in range(warmup):
        fn()
    _sync(device)

    timer = benchmark.Timer(stmt="fn()", globals={"fn": fn}, num_threads=num_threads, label=label)
    samples: list[float] = []
    while len(samples) < min_samples:
        samples.extend(timer.blocked_autorange(min_run_time=min_run_time).times)
    ms = np.asarray(samples) * 1e3
    q1, median, q3 = np.percentile(ms, [25, 50, 75])
    return Timing(
        median_ms=float(median),
        iqr_ms=float(q3 - q1),
        n_samples=len(samples),
        first_call_ms=first_call_ms,
        samples_ms=tuple(float(x) for x in ms),
    )
