from __future__ import annotations

import itertools
import math
import os
import statistics
import subprocess
import sys
import time

import pytest
import torch

from attnbench.toolkit import timing
from attnbench.toolkit.timing import Steadiness, sample_until_steady, time_call


def test_first_call_is_reported_apart_from_steady_state():
    calls = []

    def work():
        if not calls:
            time.sleep(0.05)  # one-off initialisation
        calls.append(1)

    t = time_call(work, device=torch.device("cpu"), num_threads=1, min_samples=7, min_run_time=0.01)
    assert t.first_call_ms >= 50
    assert t.median_ms < 5  # steady-state calls do no sleeping
    assert t.n_samples >= 7 and len(t.samples_ms) == t.n_samples
    assert min(t.samples_ms) <= t.median_ms <= max(t.samples_ms)
    assert 0 <= t.iqr_ms <= max(t.samples_ms) - min(t.samples_ms)
    assert t.n_taken >= t.n_samples and t.sampling_s > 0
    assert t.rel_iqr == pytest.approx(t.iqr_ms / t.median_ms)


class FakeMachine:
    """Samples (seconds per call) from a script, ``per_round`` at a time, on a fake clock that
    advances by the time the samples took."""

    def __init__(self, script, per_round: int = 1):
        self.script = iter(script)
        self.per_round = per_round
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    def take_round(self) -> list[float]:
        samples = [next(self.script) for _ in range(self.per_round)]
        self.now += sum(samples)
        return samples


def _wobble(level: float, n: int | None = None):
    """``level`` ± 2 %, repeating (forever when ``n`` is None)."""
    pattern = (1.0, 1.02, 0.98, 1.01, 0.99)
    i = 0
    while n is None or i < n:
        yield level * pattern[i % len(pattern)]
        i += 1


def test_steady_samples_pass_at_the_first_judgement():
    machine = FakeMachine(_wobble(0.06), per_round=5)
    found = sample_until_steady(machine.take_round, Steadiness(), 10.0, machine.clock)
    assert found.verdict.steady and found.n_taken == 10 and len(found.window) == 10
    assert found.verdict.median == pytest.approx(0.06, rel=0.02)
    assert found.verdict.rel_iqr < 0.05 and found.verdict.halves_gap < 0.01


def test_a_step_from_500_to_60_ms_is_retaken_and_reports_only_the_quiet_samples():
    """Issue #15: a neighbour slowed the first samples to ~500 ms; the rest were ~60 ms."""
    machine = FakeMachine(itertools.chain(_wobble(0.5, 5), _wobble(0.06)))
    found = sample_until_steady(machine.take_round, Steadiness(), 10.0, machine.clock)
    assert found.verdict.steady
    assert found.verdict.median == pytest.approx(0.06, rel=0.03)
    assert max(found.window) < 0.07  # the window judged holds no disturbed sample
    assert found.n_taken > len(found.window)  # the disturbed ones were taken, then dropped
    # what is reported describes exactly the samples judged
    assert found.verdict == Steadiness().judge(found.window)


def test_a_step_is_flagged_when_the_cap_comes_first():
    machine = FakeMachine(itertools.chain(_wobble(0.5, 5), _wobble(0.06)))
    found = sample_until_steady(machine.take_round, Steadiness(), 3.0, machine.clock)
    assert not found.verdict.steady
    assert found.verdict == Steadiness().judge(found.window)


def test_the_time_cap_is_respected_and_min_samples_always_taken():
    def alternating():  # 10 ms and 20 ms in turn: the halves agree, the spread never narrows
        while True:
            yield 0.01
            yield 0.02

    machine = FakeMachine(alternating(), per_round=3)
    found = sample_until_steady(machine.take_round, Steadiness(), 1.5, machine.clock)
    assert not found.verdict.steady and found.verdict.rel_iqr > 0.25
    # the cap is checked between rounds: at most one round (3 × 20 ms) past it
    assert 1.5 <= found.elapsed_s <= 1.5 + 0.06
    # with no time at all, the window still gets its minimum, judged once
    machine = FakeMachine(_wobble(1.0, 100), per_round=1)
    found = sample_until_steady(machine.take_round, Steadiness(min_samples=6), 0.0, machine.clock)
    assert found.n_taken == 6 and len(found.window) == 6


def test_a_disturbance_of_most_of_a_short_window_would_pass_unseen():
    """Why min_samples is 10, not the old 5 (attnbench.toolkit.timing docstring): with 5,
    issue #15's four slow samples then a quiet one look steady; with 10 they do not."""
    issue = [0.50, 0.45, 0.52, 0.48, 0.06, 0.06, 0.059, 0.061, 0.06, 0.06]
    assert Steadiness(min_samples=5).judge(issue[:5]).steady
    assert not Steadiness().judge(issue).steady


def test_the_rule_needs_two_samples_per_half():
    with pytest.raises(ValueError, match="min_samples must be >= 4"):
        Steadiness(min_samples=3)
    verdict = Steadiness().judge([1.0, 1.0, 2.0, 2.0])
    assert verdict.halves_gap == pytest.approx(1.0) and not verdict.steady


# --- a real neighbour --------------------------------------------------------------------------

SPINNER = "import sys\nprint('ready', flush=True)\nsys.stdin.read(1)\nwhile True:\n    pass\n"
QUIET_FIRST = 9  # calls before the neighbour starts: first call, warm-up, the first 3 samples
DISTURBED = 10  # calls during which it runs (it is stopped inside the last one)


def test_a_neighbour_on_every_core_during_part_of_the_timing_is_flagged_or_left_behind():
    """The load test of issue #15: a real CPU-bound timing (a 768² matmul on 2 threads, a few
    ms), with 3 busy processes per core started after the first samples and stopped after a
    fixed number of calls. The timing must come back flagged unsteady, or steady at a speed well
    away from the disturbed one: never steady at the disturbed speed.

    Why it cannot be flaky: the neighbour is controlled by call count, not by time, so however
    much it slows the calls, it disturbs a fixed number of samples. A call outlasts
    ``min_run_time``, so each Timer round is one sample, preceded by one untimed call of the
    Timer's block-size estimate: the 10 disturbed calls are at most 5 samples, while every
    window judged holds at least 10. With the slow samples at most half of a window, its IQR
    spans both speeds unless they are within ~30 % of each other (the rule's bound of 0.25), so
    a steady window's median stays near the undisturbed samples. The comparison is with the
    disturbed calls, not with a quiet level, because this machine is shared: another process may
    slow the undisturbed samples too. The disturbance itself is checked (its calls took more than
    twice the fastest undisturbed one), so a pass is never for want of a neighbour.
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if 3 * cores > 96:
        pytest.skip(f"{cores} cores: too many to load them all from a test")
    spinners = [
        subprocess.Popen(
            [sys.executable, "-c", SPINNER], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        for _ in range(3 * cores)
    ]
    a, b = torch.randn(768, 768), torch.randn(768, 768)
    calls: list[tuple[float, bool]] = []  # (seconds, under load)

    def stop_spinners() -> None:
        for p in spinners:
            if p.poll() is None:
                p.kill()
            p.wait()

    def work() -> None:
        n = len(calls)
        if n == QUIET_FIRST:
            for p in spinners:
                p.stdin.write(b"x")
                p.stdin.flush()
        disturbed = QUIET_FIRST <= n < QUIET_FIRST + DISTURBED
        if n == QUIET_FIRST + DISTURBED - 1:
            stop_spinners()
        start = time.perf_counter()
        torch.mm(a, b)
        calls.append((time.perf_counter() - start, disturbed))

    try:
        for p in spinners:
            assert p.stdout.readline() == b"ready\n"
        t = time_call(
            work, device=torch.device("cpu"), num_threads=2, min_run_time=1e-4, max_time_s=10.0
        )
    finally:
        stop_spinners()
        for p in spinners:
            p.stdin.close()
            p.stdout.close()
    fastest = min(s for s, disturbed in calls[1:] if not disturbed) * 1e3
    slow = statistics.median(s for s, disturbed in calls if disturbed) * 1e3
    assert slow > 2 * fastest, f"the neighbour hardly slowed the work ({slow:.2f} ms)"
    assert not t.steady or t.median_ms < 0.75 * slow, (
        f"reported steady at {t.median_ms:.2f} ms; the disturbed calls took {slow:.2f} ms: {t}"
    )


def _spinners(n: int) -> list[subprocess.Popen]:
    """``n`` busy processes, each spinning once it reads a byte (started by `_start`)."""
    return [
        subprocess.Popen(
            [sys.executable, "-c", SPINNER], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        for _ in range(n)
    ]


def _start(spinners: list[subprocess.Popen]) -> None:
    for p in spinners:
        assert p.stdout.readline() == b"ready\n"
    for p in spinners:
        p.stdin.write(b"x")
        p.stdin.flush()


def _stop(spinners: list[subprocess.Popen]) -> None:
    for p in spinners:
        if p.poll() is None:
            p.kill()
        p.wait()
        p.stdin.close()
        p.stdout.close()


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="needs Linux's /proc/stat")
def test_a_load_that_lasts_the_whole_timing_is_flagged():
    """Issue #24's busy machine: a neighbour on every core that starts before the timing and
    outlasts it slows every sample alike, so the window rule alone passes it as steady (the
    docstring of `attnbench.toolkit.timing` says so). The machine check must flag it, naming the
    other processes' CPU time. The ratio to the interleaved reference is *not* asserted to survive:
    under this much oversubscription a 2-thread kernel waits a whole scheduler slice whenever one of
    its threads is descheduled, so a 1 ms GEMM and a 2 ms one both take ~30 ms and their ratio
    collapses towards 1 (measured while writing this test). That is why a loaded timing is flagged
    and left out, not rescued by the ratio.

    Why it cannot be flaky: 3 spinners per core take about 3/4 of every core from a 2-thread
    job under a fair scheduler, far over the 25 % bound; the flag reads CPU time that the
    kernel accounts, not the samples."""
    cores = len(os.sched_getaffinity(0))
    if 3 * cores > 96:
        pytest.skip(f"{cores} cores: too many to load them all from a test")
    a, b = torch.randn(384, 384), torch.randn(384, 384)
    big = torch.randn(768, 384)

    def timed(**kw):
        return time_call(
            lambda: torch.mm(big, b),
            reference=lambda: torch.mm(a, b),
            device=torch.device("cpu"),
            num_threads=2,
            min_run_time=0.02,
            max_time_s=3.0,
            **kw,
        )

    quiet = timed()
    spinners = _spinners(3 * cores)
    try:
        _start(spinners)
        time.sleep(0.2)  # the load is there before the timing starts
        loaded = timed()
        window_only = timed(machine=None)
    finally:
        _stop(spinners)
    assert not loaded.steady, f"a whole-timing load passed as steady: {loaded}"
    assert loaded.foreign_cpu > 0.5, loaded
    assert any("other processes" in r for r in loaded.reasons), loaded.reasons
    assert math.isnan(window_only.foreign_cpu)  # machine=None: the check is off, not faked
    assert quiet.ratio > 0 and loaded.ratio > 0


def test_foreign_cpu_share_reads_other_processes_time_from_proc_stat():
    """Two made-up /proc/stat readings 1 s apart on 2 CPUs: 150 ticks (1.5 s at 100 Hz) busy
    in all, 0.5 s of them this process's own → other processes used 1.0 of 2 CPU-seconds."""
    if not hasattr(os, "sched_getaffinity") or os.sysconf("SC_CLK_TCK") != 100:
        pytest.skip("the made-up readings assume Linux ticks of 10 ms")
    cpus = sorted(os.sched_getaffinity(0))[:2]
    if len(cpus) < 2:
        pytest.skip("needs two CPUs in the affinity mask")

    def stat(user: int) -> str:
        lines = ["cpu  0 0 0 0 0 0 0 0 0 0"]  # the aggregate line is ignored
        lines += [f"cpu{c} {user} 0 0 1000 0 0 0 0 0 0" for c in cpus]
        lines += ["cpu999 5000 0 0 0 0 0 0 0 0 0"]  # not ours: not counted
        return "\n".join(lines)

    before = timing.cpu_snapshot(stat(100))
    after = timing.cpu_snapshot(stat(175))
    assert before is not None and after is not None and before.n_cpus == 2
    before = timing.CpuSnapshot(0.0, before.busy_s, 10.0, 2)
    after = timing.CpuSnapshot(1.0, after.busy_s, 10.5, 2)
    assert timing.foreign_cpu_share(before, after) == pytest.approx(0.5)
    assert math.isnan(timing.foreign_cpu_share(None, after))


def test_machine_check_thresholds():
    check = timing.MachineCheck(max_foreign_cpu=0.25, max_probe_drift=0.3)
    assert check.reasons(0.2, 0.1) == ()
    assert check.reasons(math.nan, math.nan) == ()  # unknown is no reason
    assert len(check.reasons(0.3, 0.1)) == 1 and "other processes" in check.reasons(0.3, 0.1)[0]
    assert len(check.reasons(0.0, 0.31)) == 1 and "calibration" in check.reasons(0.0, 0.31)[0]
