"""How attnbench times a piece of work, and when it trusts the timing.

Method:
1. Inputs are built by the caller, outside the timed region.
2. The first call is timed on its own (``first_call_ms``: lazy initialisation, kernel selection,
   compilation) and never mixed into the steady-state samples.
3. Warm-up: a few more untimed calls.
4. Samples: `torch.utils.benchmark.Timer` with ``num_threads`` set to the job's thread count;
   each `blocked_autorange` round picks how many calls make one sample (timer overhead below
   0.01 % of a sample) and runs for at least ``min_run_time`` seconds. On CUDA the Timer
   synchronises the device around each block.
5. Steadiness (`Steadiness`): rounds are added until the *window* of samples under judgement is
   steady or ``max_time_s`` of sampling has passed. The window is judged once it holds at least
   ``min_samples``; it is steady when the medians of its older and newer halves agree within
   ``rtol`` (relative to the smaller one) and its IQR is at most ``max_rel_iqr`` of its median.
   When the halves disagree, the window first grows to twice ``min_samples`` (more samples settle
   a noisy median); beyond that its older half is dropped, so the window slides forward to what
   the machine does now (a neighbour that slowed the first samples down and went away is left
   behind). When the halves agree but the spread is too wide, sampling goes on with every sample
   kept. At least ``min_samples`` are always taken, even past the cap; at the cap the last window
   judged is reported with ``steady=False``.
6. Reported, for the window last judged and only for it: median, IQR, IQR / median, the
   relative gap of its halves' medians, its samples in the order taken, and whether it was
   steady; beside them the number of samples taken in all (dropped ones included) and the
   seconds spent sampling. In milliseconds per call.
7. CPU jobs flush denormals and let glibc reuse freed buffers instead of unmapping them
   (`harness.memory.reuse_freed_memory`); both are recorded in the record's ``env``.

Why these defaults:

- ``min_samples = 10``: each half's median is then a median of five. A disturbance covering
  fewer than three quarters of a window cannot hold both of its quartiles, so it cannot pass
  as steady whatever its own spread: a neighbour that slows 7 of 10 samples is always caught.
  With 5 samples it is not: issue #15's window@8k job (4 samples at 400–550 ms, then 57–60 ms)
  has windows like [L, L, L, L, q] whose halves agree and whose IQR lies inside the slow ones.
- ``rtol = 0.05``: `attnbench-compare` calls a change of more than 5 % (its default threshold)
  a regression; a timing whose own halves differ by more than that cannot support such a claim.
- ``max_rel_iqr = 0.25``: the quiet reference sweep on the project's 2-core CPU (2 threads,
  ``results/reference``: 104 timings) has a relative IQR of 0.08 at its median and 0.24 at its
  95th percentile, while issue #15's disturbed job had 0.99. A tighter bound would flag the
  ordinary noise of a small machine rather than a disturbed timing; the spread that remains is
  still carried into rankings as the value's uncertainty (half the IQR).
- ``max_time_s = 10``: long enough to outlast a neighbour of a few seconds (issue #15's lasted
  about 2 s) and to settle a noisy median, short enough that a machine that stays busy costs a
  throughput job (two timings) at most about 20 s more than a steady one.

What the rule cannot see: a neighbour that slows nearly every sample of a window alike (more
than three quarters of them, e.g. one that started before the timing and outlasts its first
window) looks like a slower variant. It catches a disturbance that begins, ends or comes and goes
while the timing runs.

Never compare absolute times across runs or machines; compare ratios measured in the same run.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils import benchmark

MIN_SAMPLES = 10  # default window size: see the module docstring
RTOL = 0.05  # default tolerance of the halves' medians
MAX_REL_IQR = 0.25  # default bound of IQR / median
MAX_TIME_S = 10.0  # default cap on the seconds of sampling
FEWEST_SAMPLES = 4  # the rule needs two samples per half


@dataclass(frozen=True)
class Verdict:
    """The steadiness rule's judgement of one window of samples (any unit)."""

    median: float
    iqr: float
    rel_iqr: float  # iqr / median
    halves_gap: float  # max / min of the two halves' medians, minus 1
    steady: bool


@dataclass(frozen=True)
class Steadiness:
    """When a window of timing samples counts as steady (module docstring, step 5).

    Attributes:
        rtol: The medians of the window's older and newer halves agree within this fraction of
            the smaller one.
        max_rel_iqr: The window's IQR is at most this fraction of its median.
        min_samples: A window is judged only with at least this many samples (>= 4).
    """

    rtol: float = RTOL
    max_rel_iqr: float = MAX_REL_IQR
    min_samples: int = MIN_SAMPLES

    def __post_init__(self) -> None:
        if not (math.isfinite(self.rtol) and self.rtol > 0):
            raise ValueError(f"rtol must be a finite number > 0, got {self.rtol}.")
        if not (math.isfinite(self.max_rel_iqr) and self.max_rel_iqr > 0):
            raise ValueError(f"max_rel_iqr must be a finite number > 0, got {self.max_rel_iqr}.")
        if self.min_samples < FEWEST_SAMPLES:
            raise ValueError(
                f"min_samples must be >= {FEWEST_SAMPLES} (two per half), got {self.min_samples}."
            )

    def judge(self, samples: Sequence[float]) -> Verdict:
        """The verdict on ``samples`` (in the order taken; at least 2)."""
        values = np.asarray(samples, dtype=float)
        half = len(values) // 2
        q1, median, q3 = np.percentile(values, [25, 50, 75])
        older, newer = float(np.median(values[:half])), float(np.median(values[half:]))
        gap = _relative(max(older, newer) - min(older, newer), min(older, newer))
        rel_iqr = _relative(q3 - q1, median)
        steady = bool(gap <= self.rtol and rel_iqr <= self.max_rel_iqr)
        return Verdict(float(median), float(q3 - q1), rel_iqr, gap, steady)


def _relative(amount: float, base: float) -> float:
    """``amount / base`` for a positive base; 0 for nothing of nothing, else infinite."""
    if base > 0:
        return float(amount / base)
    return 0.0 if amount == 0 else math.inf


@dataclass(frozen=True)
class Sampling:
    """What `sample_until_steady` found."""

    window: tuple[float, ...]  # the samples last judged, in the order taken
    verdict: Verdict
    n_taken: int  # every sample taken, including those dropped from the window
    elapsed_s: float  # seconds from the first round's start to the end of the last


def sample_until_steady(
    take_round: Callable[[], Sequence[float]],
    rule: Steadiness,
    max_time_s: float = MAX_TIME_S,
    clock: Callable[[], float] = time.perf_counter,
) -> Sampling:
    """Take rounds of samples until the window is steady or ``max_time_s`` has passed (module
    docstring, step 5). Separate from the Timer so the rule can be tested with made-up samples
    and a fake clock.

    Args:
        take_round: Returns the next round's samples (at least one).
        rule: The steadiness rule.
        max_time_s: Cap on the seconds of sampling, checked between rounds; at least
            ``rule.min_samples`` are taken whatever it says.
        clock: Seconds, monotonic.
    """
    start = clock()
    window: list[float] = []
    judged: tuple[tuple[float, ...], Verdict] | None = None
    n_taken = 0
    while True:
        if judged is not None and clock() - start >= max_time_s:
            return Sampling(judged[0], judged[1], n_taken, clock() - start)
        new = list(take_round())
        if not new:
            raise RuntimeError("a sampling round returned no samples")
        n_taken += len(new)
        window += new
        if len(window) < rule.min_samples:
            continue
        verdict = rule.judge(window)
        judged = (tuple(window), verdict)
        if verdict.steady:
            return Sampling(judged[0], verdict, n_taken, clock() - start)
        if verdict.halves_gap > rule.rtol and len(window) >= 2 * rule.min_samples:
            window = window[len(window) // 2 :]  # the older half: what the machine did before


@dataclass(frozen=True)
class Timing:
    """Summary of the judged window of samples of one timed call, in milliseconds per call.

    Attributes:
        median_ms, iqr_ms: Median and interquartile range of the window.
        n_samples: Samples in the window.
        first_call_ms: The first call, timed on its own.
        samples_ms: The window's samples, in the order taken.
        steady: Whether the window passed the steadiness rule (False: the cap was reached).
        rel_iqr: IQR / median of the window.
        halves_gap: Relative gap between the medians of the window's older and newer halves.
        n_taken: Samples taken in all, those dropped from the window included.
        sampling_s: Seconds spent sampling (first call and warm-up excluded).
    """

    median_ms: float
    iqr_ms: float
    n_samples: int
    first_call_ms: float
    samples_ms: tuple[float, ...]
    steady: bool
    rel_iqr: float
    halves_gap: float
    n_taken: int
    sampling_s: float


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_call(
    fn: Callable[[], object],
    *,
    device: torch.device,
    num_threads: int,
    min_samples: int = MIN_SAMPLES,
    min_run_time: float = 0.2,
    warmup: int = 2,
    rtol: float = RTOL,
    max_rel_iqr: float = MAX_REL_IQR,
    max_time_s: float = MAX_TIME_S,
    label: str = "attnbench",
) -> Timing:
    """Time ``fn()`` by the method in the module docstring.

    Args:
        fn: The work; its inputs must already exist.
        device: Where the work runs (CUDA is synchronised).
        num_threads: Threads for the Timer (and the job).
        min_samples: The smallest window judged (at least 4); at least this many are taken.
        min_run_time: Seconds of timing per `blocked_autorange` round.
        warmup: Untimed calls after the first call.
        rtol: Tolerance of the halves' medians (`Steadiness`).
        max_rel_iqr: Bound of IQR / median (`Steadiness`).
        max_time_s: Cap on the seconds of sampling before the timing is reported unsteady.
        label: Label of the Timer measurement.
    """
    rule = Steadiness(rtol=rtol, max_rel_iqr=max_rel_iqr, min_samples=min_samples)
    _sync(device)
    start = time.perf_counter()
    fn()
    _sync(device)
    first_call_ms = (time.perf_counter() - start) * 1e3
    for _ in range(warmup):
        fn()
    _sync(device)

    timer = benchmark.Timer(stmt="fn()", globals={"fn": fn}, num_threads=num_threads, label=label)
    found = sample_until_steady(
        lambda: timer.blocked_autorange(min_run_time=min_run_time).times, rule, max_time_s
    )
    verdict = found.verdict
    return Timing(
        median_ms=verdict.median * 1e3,
        iqr_ms=verdict.iqr * 1e3,
        n_samples=len(found.window),
        first_call_ms=first_call_ms,
        samples_ms=tuple(x * 1e3 for x in found.window),
        steady=verdict.steady,
        rel_iqr=verdict.rel_iqr,
        halves_gap=verdict.halves_gap,
        n_taken=found.n_taken,
        sampling_s=found.elapsed_s,
    )
