"""How attnbench times a piece of work (`time_call`), and when it trusts the timing.

1. The caller builds the inputs, outside the timed region.
2. The first call is timed on its own (``first_call_ms``: initialisation, kernel selection,
   compilation) and never mixed into the samples.
3. Warm-up: a few more untimed calls (where a kernel tunes itself on first use: the first call
   and the samples run inside `timed_region`, which no tuning enters).
4. Samples: `torch.utils.benchmark.Timer` rounds (`blocked_autorange`, the job's thread count,
   CUDA synchronised around each block) of at least ``min_run_time`` seconds.
5. Steadiness (`Steadiness`, `sample_until_steady`): rounds go on until the window of samples
   judged has halves whose medians agree within ``rtol`` and an IQR within ``max_rel_iqr`` of its
   median, or ``max_time_s`` has passed; the window slides past a disturbance that went away.
6. The busy-machine check (`MachineCheck`): a load that lasts the whole timing slows every sample
   alike, which no window shows, so a calibration GEMM before and after and the CPU time other
   processes used meanwhile flag it (``steady=False``, with the reasons).
7. A reference in alternating rounds (``reference``): each round follows a shorter round of a
   reference kernel on the same inputs, and ``ratio`` is the median of sample / reference. A load
   that slows both alike cancels in it, so tasks rank by the ratio and show the time beside it.

Reported, for the window last judged only, in milliseconds per call (`Timing`). Never compare
absolute times across runs or machines; compare ratios taken in the same run. The measurements
behind the defaults: docs/design-notes.md.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils import benchmark

# Why each default (the measurements behind them: docs/design-notes.md):
# a window of 10 has halves whose medians are medians of five, and a disturbance covering fewer
# than three quarters of it cannot hold both quartiles, so it cannot pass as steady
MIN_SAMPLES = 10  # default window size
# attnbench-compare calls a change of more than 5 % a regression: a timing whose own halves
# differ by more cannot support that claim
RTOL = 0.05  # default tolerance of the halves' medians
# above a small quiet machine's ordinary spread, far below a disturbed timing's
MAX_REL_IQR = 0.25  # default bound of IQR / median
# outlasts a neighbour of a few seconds; a machine that stays busy costs ~20 s a throughput job
MAX_TIME_S = 10.0  # default cap on the seconds of sampling
FEWEST_SAMPLES = 4  # the rule needs two samples per half
# a quiet machine's daemons use ~1 %, a neighbour busy on one core of two 50 %
MAX_FOREIGN_CPU = 0.25  # other processes' share of this job's CPUs that flags a timing
# half way between a quiet machine's largest drifts and a real load's slow-down
MAX_PROBE_DRIFT = 0.5  # relative change of the calibration probe that flags a timing
REFERENCE_ROUND = 0.5  # a reference round runs this fraction of a work round's min_run_time
PROBE_SIZE = {"cpu": 1024, "cuda": 4096}  # the calibration GEMM's square size per device type


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

    The window is judged once it holds at least ``rule.min_samples``. When its halves disagree
    it first grows to twice that (more samples settle a noisy median); beyond, its older half is
    dropped, so it slides forward to what the machine does now (a neighbour that slowed the
    first samples and went away is left behind). When the halves agree but the spread is too
    wide, sampling goes on with every sample kept. At the cap the last window judged is returned
    (its verdict unsteady).

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
class CpuSnapshot:
    """Where this job's CPUs stood at one moment (`cpu_snapshot`)."""

    wall_s: float  # time.perf_counter()
    busy_s: float  # busy time of this job's CPUs since boot, every process (steal included)
    own_s: float  # this process's CPU time (user + system, every thread)
    n_cpus: int  # CPUs counted: those this process may run on


def cpu_snapshot(stat_text: str | None = None) -> CpuSnapshot | None:
    """The busy time of this process's CPUs (``/proc/stat``'s per-CPU lines for the CPUs in its
    affinity mask, so a container on a larger host counts only its own) and this process's CPU
    time; None where ``/proc/stat`` is not there (not Linux).

    Args:
        stat_text: The text of ``/proc/stat`` (for tests); default: read it now.
    """
    if stat_text is None:
        try:
            with open("/proc/stat") as f:
                stat_text = f.read()
        except OSError:
            return None
    allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    busy, n = 0, 0
    for line in stat_text.splitlines():
        name, _, rest = line.partition(" ")
        if not (name.startswith("cpu") and name[3:].isdigit()):
            continue
        if allowed is not None and int(name[3:]) not in allowed:
            continue
        # user nice system idle iowait irq softirq steal (guest time is inside user already)
        fields = [int(x) for x in rest.split()[:8]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
        busy += sum(fields) - idle
        n += 1
    if n == 0:
        return None
    own = os.times()
    return CpuSnapshot(time.perf_counter(), busy / ticks, own.user + own.system, n)


def foreign_cpu_share(before: CpuSnapshot | None, after: CpuSnapshot | None) -> float:
    """The share of this job's CPUs that other processes used between two snapshots (0 to 1;
    nan when unknown): the CPUs' busy time minus this process's own, over wall time × CPUs."""
    if before is None or after is None or after.wall_s <= before.wall_s:
        return math.nan
    others = (after.busy_s - before.busy_s) - (after.own_s - before.own_s)
    capacity = (after.wall_s - before.wall_s) * after.n_cpus
    return float(min(1.0, max(0.0, others / capacity)))


def load_average() -> float:
    """The 1-minute load average (nan where the platform has none)."""
    try:
        return float(os.getloadavg()[0])
    except (OSError, AttributeError):
        return math.nan


def calibration_probe(
    device: torch.device, num_threads: int, bursts: int = 3, repeats: int = 3, gap_s: float = 0.03
) -> float:
    """Milliseconds of one fixed GEMM (square, `PROBE_SIZE` for the device type; float32 on
    CPU, bfloat16 on CUDA): the fastest call of ``bursts`` bursts of ``repeats`` timed calls,
    each burst after one untimed call, ``gap_s`` apart. Its operands and output are made outside
    the timed calls and depend on nothing of the job, so two probes on a quiet machine agree,
    and a probe that drifted says the machine changed, not the work.

    Why the fastest call of bursts spread over ~0.3 s: a machine that slowed down slows every
    call, fastest included, while a short disturbance (the memory-probe process of
    `attnbench.toolkit.memory` exiting just before, a thread pool waking) slows some; probes of
    back-to-back calls flagged quiet timings (docs/design-notes.md).
    """
    n = PROBE_SIZE.get(device.type, PROBE_SIZE["cpu"])
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    gen = torch.Generator().manual_seed(0)
    a, b = (torch.randn(n, n, generator=gen).to(device=device, dtype=dtype) for _ in range(2))
    out = torch.empty(n, n, device=device, dtype=dtype)  # no allocation inside the timed calls
    previous = torch.get_num_threads()
    torch.set_num_threads(num_threads)
    fastest = math.inf
    try:
        for burst in range(bursts):
            if burst:
                time.sleep(gap_s)
            for i in range(repeats + 1):
                _sync(device)
                start = time.perf_counter()
                torch.mm(a, b, out=out)
                _sync(device)
                if i:  # the first call of a burst wakes the thread pool: untimed
                    fastest = min(fastest, (time.perf_counter() - start) * 1e3)
    finally:
        torch.set_num_threads(previous)
    return float(fastest)


@dataclass(frozen=True)
class MachineCheck:
    """When a machine counts as quiet enough for a timing taken on it (module docstring, step 6).

    Attributes:
        max_foreign_cpu: Other processes may use at most this share of the job's CPUs.
        max_probe_drift: The calibration probe after the timing may differ from the one before
            by at most this fraction of the smaller.
    """

    max_foreign_cpu: float = MAX_FOREIGN_CPU
    max_probe_drift: float = MAX_PROBE_DRIFT

    def reasons(self, foreign_cpu: float, probe_drift: float) -> tuple[str, ...]:
        """Why a timing is not to be trusted on these readings (empty: nothing against it);
        an unknown reading (nan) is no reason."""
        out = []
        if foreign_cpu > self.max_foreign_cpu:
            out.append(
                f"other processes used {foreign_cpu:.0%} of this job's CPUs while it was timed "
                f"(at most {self.max_foreign_cpu:.0%} allowed)"
            )
        if probe_drift > self.max_probe_drift:
            out.append(
                f"the calibration GEMM changed by {probe_drift:.0%} between before and after "
                f"(at most {self.max_probe_drift:.0%} allowed)"
            )
        return tuple(out)


@dataclass(frozen=True)
class Timing:
    """Summary of the judged window of samples of one timed call, in milliseconds per call.

    Attributes:
        median_ms, iqr_ms: Median and interquartile range of the window.
        n_samples: Samples in the window.
        first_call_ms: The first call, timed on its own.
        samples_ms: The window's samples, in the order taken.
        steady: Whether the timing is trusted: the window passed the steadiness rule and the
            machine check found nothing against it (``reasons`` empty).
        rel_iqr: IQR / median of the window.
        halves_gap: Relative gap between the medians of the window's older and newer halves.
        n_taken: Samples taken in all, those dropped from the window included.
        sampling_s: Seconds spent sampling (first call and warm-up excluded).
        reasons: Why the timing is not steady, one sentence each (empty when it is).
        ratio: Median over the window of each sample / the reference round before it (nan
            without a reference).
        reference_ms: Median of the reference's samples taken in the window's rounds (nan
            without a reference).
        probe_before_ms, probe_after_ms: The calibration probe (`calibration_probe`).
        probe_drift: |after − before| / min(before, after).
        foreign_cpu: Share of the job's CPUs other processes used while sampling (nan: unknown).
        load_avg: 1-minute load average when sampling ended.
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
    reasons: tuple[str, ...] = ()
    ratio: float = math.nan
    reference_ms: float = math.nan
    probe_before_ms: float = math.nan
    probe_after_ms: float = math.nan
    probe_drift: float = math.nan
    foreign_cpu: float = math.nan
    load_avg: float = math.nan


_timed_depth = 0  # how many `timed_region` blocks are open (nested timings count once each)


@contextlib.contextmanager
def timed_region() -> Iterator[None]:
    """Mark the block as timed: a kernel that would tune itself here (`attnbench.variants.kernels.
    autotune`) runs its default configuration instead, so a measurement never times a tuning."""
    global _timed_depth
    _timed_depth += 1
    try:
        yield
    finally:
        _timed_depth -= 1


def in_timed_region() -> bool:
    """Whether a `timed_region` block is open (in this process)."""
    return _timed_depth > 0


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class _Interleaved:
    """Rounds of the work, each after a shorter round of the reference (module docstring, step
    7): ``take_round`` for `sample_until_steady`, remembering which reference median each sample
    of the work is to be divided by."""

    def __init__(self, work: benchmark.Timer, reference: benchmark.Timer | None, min_run_time):
        self.work, self.reference, self.min_run_time = work, reference, min_run_time
        self.ref_of_sample: list[float] = []  # per sample of the work, in the order taken

    def __call__(self) -> list[float]:
        ref = math.nan
        if self.reference is not None:
            ref_round = self.reference.blocked_autorange(
                min_run_time=self.min_run_time * REFERENCE_ROUND
            )
            ref = float(np.median(ref_round.times))
        times = list(self.work.blocked_autorange(min_run_time=self.min_run_time).times)
        self.ref_of_sample += [ref] * len(times)
        return times

    def ratio(self, window: Sequence[float]) -> tuple[float, float]:
        """(median ratio, median reference) over ``window``, the last samples taken (the judged
        window is always a suffix of the samples taken: `sample_until_steady` only appends and
        drops from the front)."""
        refs = np.asarray(self.ref_of_sample[len(self.ref_of_sample) - len(window) :])
        if self.reference is None or not len(refs):
            return math.nan, math.nan
        return float(np.median(np.asarray(window) / refs)), float(np.median(refs))


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
    reference: Callable[[], object] | None = None,
    machine: MachineCheck | None = MachineCheck(),  # noqa: B008 (frozen, never mutated)
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
        reference: A reference kernel timed in alternating rounds (step 7): the timing's
            ``ratio`` is the work over it. None: no ratio.
        machine: The machine check (step 6); None: no probe, no CPU accounting.
        label: Label of the Timer measurement.
    """
    rule = Steadiness(rtol=rtol, max_rel_iqr=max_rel_iqr, min_samples=min_samples)
    _sync(device)
    with timed_region():  # a kernel not tuned yet runs its default here, and tunes in warm-up
        start = time.perf_counter()
        fn()
        _sync(device)
        first_call_ms = (time.perf_counter() - start) * 1e3
    for _ in range(max(warmup, 1)):
        fn()
        if reference is not None:
            reference()
    _sync(device)

    def timer(stmt_fn: Callable[[], object]) -> benchmark.Timer:
        return benchmark.Timer(
            stmt="fn()", globals={"fn": stmt_fn}, num_threads=num_threads, label=label
        )

    rounds = _Interleaved(timer(fn), timer(reference) if reference else None, min_run_time)
    probe_before = calibration_probe(device, num_threads) if machine else math.nan
    before = cpu_snapshot() if machine else None
    with timed_region():
        found = sample_until_steady(rounds, rule, max_time_s)
    after = cpu_snapshot() if machine else None
    probe_after = calibration_probe(device, num_threads) if machine else math.nan
    foreign = foreign_cpu_share(before, after)
    drift = _relative(abs(probe_after - probe_before), min(probe_before, probe_after))
    verdict = found.verdict
    reasons = () if verdict.steady else (_window_reason(verdict, rule),)
    reasons += machine.reasons(foreign, drift) if machine else ()
    ratio, reference_ms = rounds.ratio(found.window)
    return Timing(
        median_ms=verdict.median * 1e3,
        iqr_ms=verdict.iqr * 1e3,
        n_samples=len(found.window),
        first_call_ms=first_call_ms,
        samples_ms=tuple(x * 1e3 for x in found.window),
        steady=not reasons,
        rel_iqr=verdict.rel_iqr,
        halves_gap=verdict.halves_gap,
        n_taken=found.n_taken,
        sampling_s=found.elapsed_s,
        reasons=reasons,
        ratio=ratio,
        reference_ms=reference_ms * 1e3,
        probe_before_ms=probe_before,
        probe_after_ms=probe_after,
        probe_drift=drift if machine else math.nan,
        foreign_cpu=foreign,
        load_avg=load_average(),
    )


def _window_reason(verdict: Verdict, rule: Steadiness) -> str:
    """The sentence saying why a window did not settle by the time cap."""
    if verdict.halves_gap > rule.rtol:
        return (
            f"the samples' older and newer halves differ by {verdict.halves_gap:.0%} "
            f"(at most {rule.rtol:.0%} allowed) when the time cap was reached"
        )
    return (
        f"the samples' IQR is {verdict.rel_iqr:.0%} of their median (at most "
        f"{rule.max_rel_iqr:.0%} allowed) when the time cap was reached"
    )


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the platform has one):
    more timing threads than cores would time the scheduler, not a kernel."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1
