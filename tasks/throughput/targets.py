"""The ``attnbench-speed`` command: the speed targets of the fast variants, as ratios from one run.

Absolute times on a shared machine drift by tens of percent between minutes; ratios of two
measurements taken back to back do not. So every case is timed once per round, rounds are repeated,
each target's ratio is computed within a round, and the report gives the median ratio over rounds
with its range. CPU, float32, B = 1, H = 4, D = 64, the job's thread count; peak memory is measured
in the memory-probe process (`attnbench.toolkit.memory`), of a forward or of a forward+backward.

Besides plain ratios, a target can scale its ratio (a sparse variant's speed-up times its density
is the fraction of its ideal speed-up 1/density it reaches) or subtract a case (the marginal cost
of one more Sinkhorn half-step); a target without a bound is reported, not judged.

    attnbench-speed [--rounds 5] [--threads 2] [--json] [--strict]

exits non-zero when a target is missed; with ``--strict``, 2 before measuring anything when a plugin
failed to load (`attnbench.harness.cli.strict`). The same targets are asserted by the on-demand
benchmarks in ``tests/benchmarks`` (``pytest -o addopts="" tests/benchmarks``).

It lives beside the throughput task, not in the engine: the targets name built-in variants and
reuse the throughput task's memory probe, and the engine names no variant or task.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch.utils import benchmark

from attnbench import VariantShape, build_variant, load_plugins, random_gates
from attnbench.harness.cli.interrupt import on_ctrl_c, quiet_when_the_reader_leaves
from attnbench.harness.cli.parser import OneLineParser
from attnbench.harness.cli.strict import add_strict_flag, refuse_broken_plugins
from attnbench.tasks.throughput import forward_peak_mib
from attnbench.toolkit.memory import isolated_cpu_peak, reuse_freed_memory
from attnbench.toolkit.timing import usable_cores

HEADS, HEAD_DIM = 4, 64


@dataclass(frozen=True, eq=False)
class Case:
    """One timed call: a variant (or ``sdpa``, the raw kernel) at one length, forward only or
    forward+backward (gradients of q, k, v and the variant's parameters)."""

    variant: str
    seq_len: int
    causal: bool
    params: dict = field(default_factory=dict, hash=False, compare=False)
    backward: bool = False

    @property
    def key(self) -> str:
        """Names the case with every parameter: two cases are the same call iff keys are equal."""
        params = "".join(f",{k}={v}" for k, v in sorted(self.params.items()))
        kind = "+bwd" if self.backward else ""
        return f"{self.variant}{params}@{self.seq_len}{'c' if self.causal else ''}{kind}"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Case) and self.key == other.key

    def __hash__(self) -> int:
        return hash(self.key)


@dataclass(frozen=True)
class Target:
    """A bound on ``factor × numerator / denominator`` of times or peak memories, or on one peak
    (MiB). ``bound`` None: measured and reported, not a target (e.g. each Sinkhorn half-step)."""

    label: str
    numerator: Case
    denominator: Case | None  # None: the bound is on ``numerator``'s peak memory in MiB
    bound: float | None
    at_least: bool  # True: the value must be ≥ bound; False: ≤ bound
    quantity: str = "time"  # "time" or "memory"
    factor: float = 1.0  # e.g. a density: the time ratio as a fraction of its ideal
    minus: Case | None = None  # time: (numerator − minus) / denominator, a marginal cost

    def cases(self) -> list[Case]:
        return [c for c in (self.numerator, self.denominator, self.minus) if c is not None]

    def value(self, measured: dict[Case, float | None]) -> float | None:
        """The target's quantity from measured times or peaks (None where one is unknown)."""
        num = measured[self.numerator]
        if self.denominator is None:
            return num
        den = measured[self.denominator]
        if num is None or not den:
            return None
        if self.minus is not None:
            num -= measured[self.minus]
        return self.factor * num / den


def _case(name: str, n: int, causal: bool = True, **params) -> Case:
    return Case(name, n, causal, params)


SDPA_C8, SDPA_C16 = _case("sdpa", 8192), _case("sdpa", 16384)
SDPA_C8_BWD = Case("sdpa", 8192, True, {}, backward=True)
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
MIXERS = ("delta_net", "gated_delta_net", "gla", "mamba2")  # chunked, with gates (#42)
SINKHORN_HALF_STEPS = range(1, 7)  # n_iters whose cost is reported beside the target's 3


def _sized(name: str, n: int, causal: bool = True, backward: bool = False) -> Case:
    return Case(name, n, causal, PAPER_SIZES.get(name, {}), backward)


def _density(case: Case) -> float:
    """The pattern's density at the case's size (pairs scored over pairs allowed)."""
    load_plugins()
    variant = build_variant(case.variant, case.params, VariantShape(HEADS, HEAD_DIM, case.seq_len))
    return variant.density(case.seq_len, case.seq_len, case.causal)


def _linear_cost_targets(name: str, **params) -> list[Target]:
    at8, at16 = _case(name, 8192, **params), _case(name, 16384, **params)
    bwd8, bwd16 = (Case(name, n, True, params, backward=True) for n in (8192, 16384))
    return [
        Target(f"{name}: dense causal SDPA / {name} at 8k", SDPA_C8, at8, 5.0, True),
        Target(f"{name}: time(16k) / time(8k)", at16, at8, 2.5, False),
        Target(f"{name}: peak MiB at 16k", at16, None, 160.0, False, "memory"),
        Target(f"{name}: fwd+bwd, dense causal SDPA / {name} at 8k", SDPA_C8_BWD, bwd8, 5.0, True),
        Target(f"{name}: fwd+bwd peak MiB(16k) / (8k)", bwd16, bwd8, 2.3, False, "memory"),
    ]


def _mixer_targets(name: str, bound: float | None = 4.0) -> list[Target]:
    """The data-dependent mixers' chunked forms (#42): at least 4× faster than dense causal SDPA
    at 8k, and linear in the length; ``bound`` None reports without judging (mesa: its 30
    conjugate-gradient steps cost about 60 linear-attention passes)."""
    at8, at16 = _case(name, 8192), _case(name, 16384)
    return [
        Target(f"{name}: dense causal SDPA / {name} at 8k", SDPA_C8, at8, bound, True),
        Target(f"{name}: time(16k) / time(8k)", at16, at8, 2.5 if bound else None, False),
    ]


def _sparse_targets(name: str) -> list[Target]:
    """At 8k causal: within half of the ideal speed-up 1/density; O(n·w) memory."""
    at8, at16 = _sized(name, 8192), _sized(name, 16384)
    return [
        Target(
            f"{name}: fraction of its ideal at 8k (density × SDPA time / {name} time)",
            SDPA_C8,
            at8,
            0.5,
            True,
            factor=_density(at8),
        ),
        Target(
            f"{name}: peak MiB(16k) / peak MiB(8k) (O(n·w) memory)", at16, at8, 2.5, False, "memory"
        ),
    ]


# each sparse variant's size parameter over its valid range (absolute counts, then fractions of
# the sequence), the others at their defaults, at causal 8k: no setting may fall off a cliff
DENSITY_SWEEPS: dict[str, tuple[str, tuple[float, ...]]] = {
    "window": ("window", (64, 256, 0.05, 0.1, 0.2, 0.35, 0.5)),
    "strided": ("local", (64, 0.05, 0.1, 0.2, 0.35)),
    "bigbird": ("block", (32, 64, 1 / 64, 1 / 32, 1 / 16, 1 / 8)),
    "learned_pattern": ("block", (32, 64, 1 / 64, 1 / 32, 1 / 16, 1 / 8)),
    "topk": ("k", (32, 128, 0.05, 0.1, 0.2, 0.35, 0.5)),
}
CLIFF_BOUND = 1.5  # no setting of a sparse variant may cost more than this × dense causal SDPA
SPARSE_ENOUGH = 0.1  # at or below this density, at least half the ideal speed-up 1/density


def cliff_targets() -> list[Target]:
    """Every sparse variant at every sampled value of its size parameter (`DENSITY_SWEEPS`),
    causal 8k: its time over dense causal SDPA's at most CLIFF_BOUND, and where its density is
    at most SPARSE_ENOUGH, at least half its ideal speed-up.

    The ideal 1/density assumes the work follows the pairs kept. A variant whose cost is n²
    (`AttentionVariant.cost`: top-k scores every pair to choose its k) has no such ideal: its
    fraction is reported, not judged."""
    load_plugins()
    targets = []
    for name, (key, values) in DENSITY_SWEEPS.items():
        scores_every_pair = build_variant(name).cost == "n²"
        for value in values:
            case = _case(name, 8192, **{key: value})
            density = _density(case)
            setting = f"{name} {key}={value:g} (density {density:.3f})"
            targets.append(
                Target(
                    f"{setting}: time / dense causal SDPA at 8k (no cliff)",
                    case,
                    SDPA_C8,
                    CLIFF_BOUND,
                    False,
                )
            )
            if density <= SPARSE_ENOUGH:
                targets.append(
                    Target(
                        f"{setting}: fraction of its ideal at 8k"
                        + (" (its cost is n²: reported)" if scores_every_pair else ""),
                        SDPA_C8,
                        case,
                        None if scores_every_pair else 0.5,
                        True,
                        factor=density,
                    )
                )
    return targets


def all_targets() -> list[Target]:
    """Every target of `attnbench-speed` (a function: the sparse targets build their variants to
    know their densities, which an import should not do)."""
    window = {n: _sized("window", n) for n in (8192, 16384, 32768)}
    window_bwd = {n: _sized("window", n, backward=True) for n in (8192, 16384)}
    softmax4k = _case("softmax", 4096, causal=False)
    return [
        Target(
            "softmax / raw SDPA at 4k (wrapper overhead)",
            softmax4k,
            _case("sdpa", 4096, causal=False),
            1.05,
            False,
        ),
        Target("window: dense causal SDPA / window at 8k", SDPA_C8, window[8192], 8.0, True),
        Target("window: dense causal SDPA / window at 16k", SDPA_C16, window[16384], 8.0, True),
        Target(
            "window: time per token at 32k / at 8k (flat)",
            window[32768],
            window[8192],
            1.2,
            False,
            factor=8192 / 32768,
        ),
        Target(
            "window: fwd+bwd, dense causal SDPA / window at 8k",
            SDPA_C8_BWD,
            window_bwd[8192],
            4.0,
            True,
        ),
        Target(
            "window: fwd+bwd peak MiB(16k) / (8k)",
            window_bwd[16384],
            window_bwd[8192],
            2.3,
            False,
            "memory",
        ),
        *_linear_cost_targets("linear", feature_map="elu1"),
        *_linear_cost_targets("decay"),
        *(t for name in MIXERS for t in _mixer_targets(name)),
        *_mixer_targets("mesa", bound=None),
        *_sparse_targets("strided"),
        *_sparse_targets("bigbird"),
        Target(
            "sinkhorn (3 half-steps) / softmax at 4k",
            _case("sinkhorn", 4096, causal=False, n_iters=3),
            softmax4k,
            2.5,
            False,
        ),
        *[
            Target(
                f"sinkhorn: half-step {i} (n_iters {i} − {i - 1}) / softmax at 4k",
                _case("sinkhorn", 4096, causal=False, n_iters=i),
                softmax4k,
                None,
                False,
                minus=_case("sinkhorn", 4096, causal=False, n_iters=i - 1),
            )
            for i in SINKHORN_HALF_STEPS
            if i > 1
        ],
        Target(
            "sinkhorn: peak MiB at 8k",
            _case("sinkhorn", 8192, causal=False),
            None,
            64.0,
            False,
            "memory",
        ),
        Target("relu2 / dense causal SDPA at 8k", _case("relu2", 8192), SDPA_C8, 1.3, False),
        Target("sigmoid / dense causal SDPA at 8k", _case("sigmoid", 8192), SDPA_C8, 1.3, False),
        Target("topk / dense causal SDPA at 8k", _sized("topk", 8192), SDPA_C8, CLIFF_BOUND, False),
        *cliff_targets(),
    ]


def _call(case: Case) -> Callable[[], object]:
    """The timed call of ``case``: its inputs are built here, outside the timed region."""
    gen = torch.Generator().manual_seed(0)
    q, k, v = (
        torch.randn(1, HEADS, case.seq_len, HEAD_DIM, generator=gen).requires_grad_(case.backward)
        for _ in range(3)
    )
    if case.variant == "sdpa":
        module = None
        forward = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=case.causal)  # noqa: E731
    else:
        shape = VariantShape(HEADS, HEAD_DIM, case.seq_len)
        module = build_variant(case.variant, case.params, shape)
        # a gated mixer's raw gates, standard normal as q, k and v ({} for an ungated variant)
        gates = random_gates(
            module, 1, case.seq_len, head_dim=HEAD_DIM, kv_heads=HEADS, generator=gen
        )
        forward = lambda: module(q, k, v, causal=case.causal, gates=gates)  # noqa: E731
    if not case.backward:

        def forward_only():
            with torch.no_grad():
                return forward()

        return forward_only
    grad = torch.randn(1, HEADS, case.seq_len, HEAD_DIM, generator=gen)
    leaves = [q, k, v, *(module.parameters() if module is not None else ())]

    def forward_backward():
        forward().backward(grad)
        for t in leaves:
            t.grad = None

    return forward_backward


def _peak_mib(case: Case) -> float | None:
    shape = (1, HEADS, case.seq_len, HEAD_DIM)
    return isolated_cpu_peak(
        forward_peak_mib, case.variant, case.params, shape, "float32", 0, case.causal, case.backward
    )


@dataclass
class SpeedVerdict:
    """A target's measured value: median over rounds, with the range of the rounds."""

    target: Target
    median: float | None
    low: float | None
    high: float | None

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
    targets: list[Target] | None = None,
    rounds: int = 5,
    threads: int = 2,
    min_run_time: float = 0.3,
) -> tuple[list[SpeedVerdict], dict[str, float]]:
    """Time every case of ``targets`` (default: `targets()`) once per round, interleaved, and
    evaluate each target within each round.

    Returns:
        (one `SpeedVerdict` per target, median milliseconds per case key).
    """
    load_plugins()
    targets = all_targets() if targets is None else targets
    torch.set_num_threads(threads)
    torch.set_flush_denormal(True)
    reuse_freed_memory()
    timed = {c for t in targets if t.quantity == "time" for c in t.cases()}
    calls = {}
    for case in sorted(timed, key=lambda c: c.key):
        calls[case] = _call(case)
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


def format_table(outcomes: list[SpeedVerdict], medians: dict[str, float], rounds: int) -> str:
    """The Markdown report of `measure`: min, median and max of the rounds' values."""
    lines = [
        f"Ratios within each of {rounds} rounds (memory: one probe, so min = median = max).",
        "",
        "| target | min | median | max | bound | met |",
        "|---|---|---|---|---|---|",
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
        lines.append(f"| {o.target.label} | {cells} | {bound} | {met} |")
    lines += ["", "Median ms per call (context only; compare ratios, not these):", ""]
    lines += [f"- {key}: {ms:.1f} ms" for key, ms in sorted(medians.items())]
    return "\n".join(lines)


@quiet_when_the_reader_leaves
@on_ctrl_c(
    "attnbench-speed: interrupted by Ctrl-C before the report; nothing was written (run it "
    "again to measure)."
)
def main(argv: list[str] | None = None) -> int:
    """``attnbench-speed [--rounds N] [--threads N] [--json] [--strict]``: measure, print the
    report, exit 0 when every target is met, else 1."""
    parser = OneLineParser(prog="attnbench-speed", description=__doc__.split("\n")[0])
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
    if args.strict and (status := refuse_broken_plugins("attnbench-speed")):
        return status
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
