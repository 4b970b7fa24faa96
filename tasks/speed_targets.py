"""The ``attnbench-speed`` command: the speed targets of the fast variants, as ratios from one run.

Absolute times on a shared machine drift by tens of percent between minutes; ratios of two
measurements taken back to back do not. So every case is timed once per round, rounds are
repeated, each target's ratio is computed within a round, and the report gives the median ratio
over rounds with its range. CPU, float32, B = 1, H = 4, D = 64, the job's thread count; peak memory
is measured in the memory-probe process (`harness.memory`).

    attnbench-speed [--rounds 5] [--threads 2] [--json]

exits non-zero when a target is missed. The same targets are asserted by the on-demand
benchmarks in ``tests/benchmarks`` (``pytest -o addopts="" tests/benchmarks``).

It lives beside the throughput task, not in the engine: the targets name built-in variants and
reuse the throughput task's memory probe, and the engine names no variant or task.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch.utils import benchmark

from attnbench import VariantShape, build_variant, load_plugins
from attnbench.harness.memory import isolated_cpu_peak, reuse_freed_memory
from attnbench.tasks.throughput import forward_peak_mib

HEADS, HEAD_DIM = 4, 64


@dataclass(frozen=True)
class Case:
    """One timed call: a variant (or ``sdpa``, the raw kernel) at one length."""

    variant: str
    seq_len: int
    causal: bool
    params: dict = field(default_factory=dict, hash=False, compare=False)

    @property
    def key(self) -> str:
        return f"{self.variant}@{self.seq_len}{'c' if self.causal else ''}"


@dataclass(frozen=True)
class Target:
    """A bound on ``numerator / denominator`` of times or peak memories, or on one peak (MiB)."""

    label: str
    numerator: Case
    denominator: Case | None  # None: the bound is on ``numerator``'s peak memory in MiB
    bound: float
    at_least: bool  # True: the value must be ≥ bound; False: ≤ bound
    quantity: str = "time"  # "time" or "memory"

    def cases(self) -> list[Case]:
        return [c for c in (self.numerator, self.denominator) if c is not None]


def _case(name: str, n: int, causal: bool = True, **params) -> Case:
    return Case(name, n, causal, params)


SDPA_C8, SDPA_C16 = _case("sdpa", 8192), _case("sdpa", 16384)
# The papers' absolute sizes (the variants' defaults are fractions of the sequence, which would
# make an O(n·w) pattern grow with n): the same sizes as the presets' throughput grids, and
# those tests/variants/test_memory_scaling.py measures at N = 8192
PAPER_SIZES: dict[str, dict[str, float]] = {
    "window": {"window": 256},
    "peer_local_window": {"window": 256},
    "peer_natten_window": {"window": 256},
    "strided": {"local": 64, "stride": 64},
    "bigbird": {"block": 64, "n_random": 2},
    "learned_pattern": {"block": 64},
    "topk": {"k": 32},
}


def _linear_time_targets(name: str, **params) -> list[Target]:
    at8, at16 = _case(name, 8192, **params), _case(name, 16384, **params)
    return [
        Target(f"{name}: dense causal SDPA / {name} at 8k", SDPA_C8, at8, 5.0, True),
        Target(f"{name}: time(16k) / time(8k)", at16, at8, 2.5, False),
        Target(f"{name}: peak MiB at 16k", at16, None, 160.0, False, "memory"),
    ]


TARGETS: list[Target] = [
    Target(
        "softmax / raw SDPA at 4k (wrapper overhead)",
        _case("softmax", 4096, causal=False),
        _case("sdpa", 4096, causal=False),
        1.05,
        False,
    ),
    Target(
        "window: dense causal SDPA / window at 8k",
        SDPA_C8,
        _case("window", 8192, **PAPER_SIZES["window"]),
        4.0,
        True,
    ),
    Target(
        "window: time(16k) / time(8k)",
        _case("window", 16384, **PAPER_SIZES["window"]),
        _case("window", 8192, **PAPER_SIZES["window"]),
        2.3,
        False,
    ),
    *_linear_time_targets("linear", feature_map="elu1"),
    *_linear_time_targets("decay"),
    Target(
        "sinkhorn (3 half-steps) / softmax at 4k",
        _case("sinkhorn", 4096, causal=False, n_iters=3),
        _case("softmax", 4096, causal=False),
        4.0,
        False,
    ),
    Target(
        "sinkhorn: peak MiB at 8k",
        _case("sinkhorn", 8192, causal=False),
        None,
        64.0,
        False,
        "memory",
    ),
    *[
        t
        for name in ("strided", "bigbird")
        for t in (
            Target(
                f"{name}: dense causal SDPA / {name} at 8k",
                SDPA_C8,
                _case(name, 8192, **PAPER_SIZES[name]),
                1.0,
                True,
            ),
            Target(
                f"{name}: peak MiB(16k) / peak MiB(8k) (O(n·w) memory)",
                _case(name, 16384, **PAPER_SIZES[name]),
                _case(name, 8192, **PAPER_SIZES[name]),
                2.5,
                False,
                "memory",
            ),
        )
    ],
]


def _forward(case: Case) -> Callable[[], torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, HEADS, case.seq_len, HEAD_DIM, generator=gen) for _ in range(3))
    if case.variant == "sdpa":
        return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=case.causal)
    module = build_variant(case.variant, case.params, VariantShape(HEADS, HEAD_DIM, case.seq_len))
    return lambda: module(q, k, v, causal=case.causal)


def _peak_mib(case: Case) -> float | None:

    shape = (1, HEADS, case.seq_len, HEAD_DIM)
    return isolated_cpu_peak(
        forward_peak_mib, case.variant, case.params, shape, "float32", 0, case.causal
    )


@dataclass
class Outcome:
    """A target's measured value: median over rounds, with the range of the rounds."""

    target: Target
    median: float | None
    low: float | None
    high: float | None

    @property
    def met(self) -> bool:
        if self.median is None:
            return False
        return (
            self.median >= self.target.bound
            if self.target.at_least
            else (self.median <= self.target.bound)
        )


def measure(
    targets: list[Target] = TARGETS, rounds: int = 5, threads: int = 2, min_run_time: float = 0.3
) -> tuple[list[Outcome], dict[str, float]]:
    """Time every case of ``targets`` once per round and evaluate each target.

    Returns:
        (one `Outcome` per target, median milliseconds per case key).
    """
    load_plugins()
    torch.set_num_threads(threads)
    torch.set_flush_denormal(True)
    reuse_freed_memory()
    timed = {c for t in targets if t.quantity == "time" for c in t.cases()}
    calls = {}
    with torch.no_grad():
        for case in sorted(timed, key=lambda c: c.key):
            calls[case] = _forward(case)
            calls[case]()  # first call and lazy initialisation, outside every round
        per_round: list[dict[Case, float]] = []
        for _ in range(rounds):
            times = {}
            for case, fn in calls.items():
                timer = benchmark.Timer("fn()", globals={"fn": fn}, num_threads=threads)
                times[case] = timer.blocked_autorange(min_run_time=min_run_time).median
            per_round.append(times)
    peaks = {c: _peak_mib(c) for t in targets if t.quantity == "memory" for c in t.cases()}

    outcomes = []
    for t in targets:
        if t.quantity == "time":
            values = [r[t.numerator] / r[t.denominator] for r in per_round]
        elif t.denominator is None:
            values = [peaks[t.numerator]]
        else:
            num, den = peaks[t.numerator], peaks[t.denominator]
            values = [None if num is None or not den else num / den]
        known = [v for v in values if v is not None]
        outcomes.append(
            Outcome(
                t,
                statistics.median(known) if known else None,
                min(known) if known else None,
                max(known) if known else None,
            )
        )
    medians = {c.key: 1e3 * statistics.median(r[c] for r in per_round) for c in calls}
    return outcomes, medians


def format_table(outcomes: list[Outcome], medians: dict[str, float], rounds: int) -> str:
    """The Markdown report of `measure`."""
    lines = [
        f"| target | measured (median [min, max] of {rounds} rounds) | bound | met |",
        "|---|---|---|---|",
    ]
    for o in outcomes:
        bound = ("≥ " if o.target.at_least else "≤ ") + f"{o.target.bound:g}"
        if o.median is None:
            value = "unknown (no measurement on this platform)"
        elif o.low == o.high:
            value = f"{o.median:.3g}"
        else:
            value = f"{o.median:.3g} [{o.low:.3g}, {o.high:.3g}]"
        lines.append(f"| {o.target.label} | {value} | {bound} | {'yes' if o.met else 'NO'} |")
    lines += ["", "Median ms per call (context only; compare ratios, not these):", ""]
    lines += [f"- {key}: {ms:.1f} ms" for key, ms in sorted(medians.items())]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``attnbench-speed``."""
    parser = argparse.ArgumentParser(prog="attnbench-speed", description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="timing rounds (default 5)")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads (default 2)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of Markdown")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.threads < 1:
        parser.error(f"--rounds and --threads must be >= 1, got {args.rounds}, {args.threads}.")
    outcomes, medians = measure(rounds=args.rounds, threads=args.threads)
    if args.json:
        rows = [
            {
                "target": o.target.label,
                "median": o.median,
                "min": o.low,
                "max": o.high,
                "bound": o.target.bound,
                "at_least": o.target.at_least,
                "met": o.met,
            }
            for o in outcomes
        ]
        print(json.dumps({"targets": rows, "median_ms": medians}, indent=2))
    else:
        print(format_table(outcomes, medians, args.rounds))
    return 0 if all(o.met for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
