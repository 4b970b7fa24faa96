"""The ``attnbench-speed`` command: the speed targets of the fast variants, as ratios from one run.

Absolute times on a shared machine drift by tens of percent between minutes; ratios of two
measurements taken back to back do not. So every case is timed once per round, rounds are repeated,
each target's ratio is computed within a round, and the report gives the median ratio over rounds
with its range, at the job's thread count; peak memory is read once per case.

    attnbench-speed [--rounds 5] [--threads 2] [--json] [--strict]

exits non-zero when a target is missed; with ``--strict``, 2 before measuring anything when a plugin
or a declaration of targets failed to load (`attnbench.harness.cli.strict`).

The targets are the tasks' data, found through the entry-point group ``attnbench.speed_targets``
as plugins are (`attnbench.harness.discovery`): each entry names a function that returns a list of
targets (`SpeedTarget`), so the command names no task and no variant, and a plugin task declares
its targets the same way. An entry that fails to load is a warning naming it, and is skipped.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Protocol, runtime_checkable

import torch
from torch.utils import benchmark

from attnbench.harness.cli.interrupt import on_ctrl_c, quiet_when_the_reader_leaves
from attnbench.harness.cli.parser import OneLineParser
from attnbench.harness.cli.strict import (
    FLAG,
    PLUGINS_STATUS,
    add_strict_flag,
    refuse_broken_plugins,
)
from attnbench.harness.discovery import PluginFailure, PluginLoadWarning, load_plugins
from attnbench.toolkit.memory import reuse_freed_memory
from attnbench.toolkit.timing import timed_region, usable_cores

PROG = "attnbench-speed"
THIN_MARGIN = 0.2  # the margin the developers' host keeps on every target (issue #57)
TARGETS_GROUP = "attnbench.speed_targets"


class SpeedCase(Protocol):
    """One call the command measures; hashable, and equal to another case iff it is the same
    call, so that a call several targets share is measured once."""

    @property
    def key(self) -> str:
        """Names the call in the report's list of times."""

    def timed_call(self) -> Callable[[], object]:
        """The call to time, its inputs built (outside the timed region)."""

    def peak_mib(self) -> float | None:
        """The call's peak memory in MiB (None where it cannot be read here)."""


@runtime_checkable
class SpeedTarget(Protocol):
    """A bound on a quantity computed from measured cases: times (each round's) or peak memories.

    ``bound`` None: reported, not judged; ``at_least``: the value must be ≥ ``bound``, else ≤;
    ``quantity``: ``"time"`` or ``"memory"``, which measurements `value` is given."""

    label: str
    bound: float | None
    at_least: bool
    quantity: str

    def cases(self) -> list[SpeedCase]:
        """The calls whose measurements `value` reads."""

    def value(self, measured: Mapping[SpeedCase, float | None]) -> float | None:
        """The quantity from one round's times, or from the peaks (None where one is unknown)."""


def _describe(exc: BaseException) -> str:
    """``ExceptionType: first line of the message``."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0].rstrip('.')}" if lines else type(exc).__name__


def _load_entry(ep: metadata.EntryPoint) -> list[SpeedTarget]:
    declared = list(ep.load()())
    for target in declared:
        if not isinstance(target, SpeedTarget):
            raise TypeError(f"{target!r} is not a speed target (a label, bound, cases, value…)")
    return declared


def declared_targets() -> tuple[list[SpeedTarget], list[PluginFailure]]:
    """(every target the installed distributions declare, their entry points taken by name; the
    entries that failed to load or to give targets). Plugins are loaded first, so that a
    declaration can build its variants."""
    load_plugins()
    targets: list[SpeedTarget] = []
    failed = []
    for ep in sorted(metadata.entry_points(group=TARGETS_GROUP), key=lambda ep: ep.name):
        try:
            targets += _load_entry(ep)
        except Exception as exc:  # a broken declaration must not take the others down
            dist = ep.dist.name if ep.dist is not None else "unknown"
            failed.append(PluginFailure(TARGETS_GROUP, ep.name, ep.value, dist, _describe(exc)))
    return targets, failed


@dataclass
class SpeedVerdict:
    """A target's measured value: median over rounds, with the range of the rounds."""

    target: SpeedTarget
    median: float | None
    low: float | None
    high: float | None

    @property
    def margin(self) -> float | None:
        """How far the median is inside its bound, as a fraction of the bound's side (0.2: a
        ≥ 4 met at 4.8, a ≤ 1.3 at 1.083); negative when missed; None without a bound or a
        median."""
        if self.target.bound is None or not self.median:
            return None
        if self.target.at_least:
            return self.median / self.target.bound - 1.0
        return self.target.bound / self.median - 1.0

    @property
    def thin(self) -> bool:
        """Met with less than `THIN_MARGIN` to spare, on a target another host may move (its
        ``host_sensitive``, True where a target does not say)."""
        sensitive = getattr(self.target, "host_sensitive", True)
        return sensitive and self.margin is not None and self.margin < THIN_MARGIN

    @property
    def met(self) -> bool:
        """Within the bound (a reported quantity without a bound is always met)."""
        if self.target.bound is None:
            return True
        if self.median is None:
            return False
        if self.target.at_least:
            return self.median >= self.target.bound
        return self.median <= self.target.bound


def measure(
    targets: list[SpeedTarget],
    rounds: int = 5,
    threads: int = 2,
    min_run_time: float = 0.3,
) -> tuple[list[SpeedVerdict], dict[str, float]]:
    """Time every case of ``targets`` once per round, interleaved, and evaluate each target
    within each round; read each memory target's peaks once.

    Returns:
        (one `SpeedVerdict` per target, median milliseconds per case key).
    """
    load_plugins()
    torch.set_num_threads(threads)
    torch.set_flush_denormal(True)
    reuse_freed_memory()
    timed = {c for t in targets if t.quantity == "time" for c in t.cases()}
    calls = {}
    for case in sorted(timed, key=lambda c: c.key):
        calls[case] = case.timed_call()
        calls[case]()  # first call and lazy initialisation, outside every round
    per_round: list[dict[SpeedCase, float]] = []
    with timed_region():  # (every kernel tuned itself at the first calls above)
        per_round += [_one_round(calls, threads, min_run_time) for _ in range(rounds)]
    peaks = {c: c.peak_mib() for t in targets if t.quantity == "memory" for c in t.cases()}

    outcomes = []
    for t in targets:
        values = [t.value(r) for r in per_round] if t.quantity == "time" else [t.value(peaks)]
        known = [v for v in values if v is not None]
        outcomes.append(
            SpeedVerdict(
                t,
                statistics.median(known) if known else None,
                min(known) if known else None,
                max(known) if known else None,
            )
        )
    medians = {c.key: 1e3 * statistics.median(r[c] for r in per_round) for c in calls}
    return outcomes, medians


def _one_round(calls: dict, threads: int, min_run_time: float) -> dict:
    """Each case's median seconds per call in one `blocked_autorange` round."""
    times = {}
    for case, fn in calls.items():
        timer = benchmark.Timer("fn()", globals={"fn": fn}, num_threads=threads)
        times[case] = timer.blocked_autorange(min_run_time=min_run_time).median
    return times


def format_table(outcomes: list[SpeedVerdict], medians: dict[str, float], rounds: int) -> str:
    """The Markdown report of `measure`: min, median and max of the rounds' values."""
    lines = [
        f"Ratios within each of {rounds} rounds (memory: one probe, so min = median = max).",
        "",
        "| target | min | median | max | bound | met | margin |",
        "|---|---|---|---|---|---|---|",
    ]
    for o in outcomes:
        if o.target.bound is None:
            bound, met = "(reported)", "—"
        else:
            bound = ("≥ " if o.target.at_least else "≤ ") + f"{o.target.bound:g}"
            met = "yes" if o.met else "NO"
        if o.median is None:
            cells = "unknown (no measurement on this platform) | | "
        else:
            cells = f"{o.low:.3g} | {o.median:.3g} | {o.high:.3g}"
        margin = "" if o.margin is None else f"{o.margin:+.0%}"
        lines.append(f"| {o.target.label} | {cells} | {bound} | {met} | {margin} |")
    thin = [o for o in outcomes if o.met and o.thin]
    if thin:
        lines += [
            "",
            f"Met with less than {THIN_MARGIN:.0%} margin (a host {THIN_MARGIN:.0%} slower at "
            "these kernels than at the reference's may miss them): "
            + "; ".join(o.target.label for o in thin)
            + ".",
        ]
    lines += ["", "Median ms per call (context only; compare ratios, not these):", ""]
    lines += [f"- {key}: {ms:.1f} ms" for key, ms in sorted(medians.items())]
    return "\n".join(lines)


def _as_json(outcomes: list[SpeedVerdict], medians: dict[str, float]) -> str:
    rows = [
        {
            "target": o.target.label,
            "median": o.median,
            "min": o.low,
            "max": o.high,
            "bound": o.target.bound,
            "at_least": o.target.at_least,
            "met": o.met,
            "margin": o.margin,
            "thin": o.thin,
        }
        for o in outcomes
    ]
    return json.dumps({"targets": rows, "median_ms": medians}, indent=2)


def _refuse_or_warn(failed: list[PluginFailure], strict: bool) -> int:
    """Under ``--strict``, one sentence per declaration that failed and `PLUGINS_STATUS`; else
    a warning naming each, and 0."""
    for f in failed:
        if strict:
            print(
                f"{PROG}: {f.source} failed to load: {f.reason}; fix or uninstall it ({FLAG} "
                "makes this an error).",
                file=sys.stderr,
            )
        else:
            warnings.warn(
                f"attnbench: {f.source} failed to load and is skipped: {f.reason}",
                PluginLoadWarning,
                stacklevel=2,
            )
    return PLUGINS_STATUS if strict and failed else 0


@quiet_when_the_reader_leaves
@on_ctrl_c(
    "attnbench-speed: interrupted by Ctrl-C before the report; nothing was written (run it "
    "again to measure)."
)
def main(argv: list[str] | None = None) -> int:
    """``attnbench-speed [--rounds N] [--threads N] [--json] [--strict]``: measure, print the
    report, exit 0 when every target is met, else 1."""
    parser = OneLineParser(prog=PROG, description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="timing rounds (default 5)")
    parser.add_argument(
        "--threads",
        type=int,
        default=min(2, usable_cores()),
        help="CPU threads, at most the cores usable here (default 2, or 1 on one core)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of Markdown")
    add_strict_flag(parser, reads_records=False)
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.threads < 1:
        parser.error(f"--rounds and --threads must be >= 1, got {args.rounds}, {args.threads}.")
    if args.threads > usable_cores():  # more threads than cores time the scheduler, not a kernel
        parser.error(
            f"--threads {args.threads} is more than the {usable_cores()} CPU cores usable here; "
            f"use --threads {usable_cores()} or fewer."
        )
    if args.strict and (status := refuse_broken_plugins(PROG)):
        return status
    targets, failed = declared_targets()
    if status := _refuse_or_warn(failed, args.strict):
        return status
    before = _cpu_seconds()
    outcomes, medians = measure(targets, rounds=args.rounds, threads=args.threads)
    others = _others_cores(before, _cpu_seconds())
    print(
        _as_json(outcomes, medians) if args.json else format_table(outcomes, medians, args.rounds)
    )
    missed = sum(1 for o in outcomes if o.met is False)
    if missed and others is not None and others > BUSY_CORES:
        print(
            f"{PROG}: {missed} target(s) missed while other processes kept {others:.1f} of the "
            f"{usable_cores()} cores busy on average: they slow kernels unevenly, so a miss here "
            "may be theirs; rerun when the machine is quiet before reading it as the code's.",
            file=sys.stderr,
        )
    return 0 if all(o.met for o in outcomes) else 1


BUSY_CORES = 0.25  # other processes' mean use of the cores that makes a run's misses suspect


def _cpu_seconds() -> tuple[float, float, float] | None:
    """(wall seconds, CPU seconds of every process on the machine, CPU seconds of this one and
    its children), read from Linux's /proc/stat; None elsewhere."""
    try:
        import resource  # Unix only

        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
        ticks = [int(x) for x in fields]
        hz = os.sysconf("SC_CLK_TCK")
    except (ImportError, OSError, ValueError, IndexError):
        return None
    busy = sum(ticks) - ticks[3] - (ticks[4] if len(ticks) > 4 else 0)  # all but idle, iowait
    own = sum(
        resource.getrusage(w).ru_utime + resource.getrusage(w).ru_stime
        for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return time.monotonic(), busy / hz, own


def _others_cores(
    before: tuple[float, float, float] | None, after: tuple[float, float, float] | None
) -> float | None:
    """How many cores other processes used on average between ``before`` and ``after``
    (`_cpu_seconds`): the machine's CPU time less this run's, over the wall time; None where
    unknown. Not the load average, which still counts work that ended before the run began."""
    if before is None or after is None or after[0] <= before[0]:
        return None
    others = (after[1] - before[1]) - (after[2] - before[2])
    return max(0.0, others / (after[0] - before[0]))


if __name__ == "__main__":
    sys.exit(main())
