"""When a trained result is a claim about the mixer: the learning curve and its verdict.

A quality number measured after a fixed, small number of steps says who learns fastest, not
who learns best. So a training task evaluates its validation metric at log-spaced points of
training (two per doubling of the examples seen) and the loop stops early when

- **solved**: the metric reached the task's ceiling within its noise; or
- **plateaued**: the last doubling of training (from the point at half the examples to now)
  improved it by less than its noise, at least ``min_fraction`` of the cap is spent, and the
  metric is above chance by more than its noise. A model at chance is not stopped early: recall
  tasks sit at chance for a while and then learn suddenly (an induction head forming), so a flat
  stretch at chance says nothing yet.

A run that reaches the cap (the task's ``steps``) is **converged** when its last doubling
improved it by less than its noise, and otherwise **still learning**: its numbers are marked
on the board and enter no contest, like an unsteady timing.

The noise of an accuracy over n validation targets is that of a difference of two binomial
proportions at two standard errors (`binomial_noise`): the two points of a doubling are measured
on the same validation set by two models, so a change smaller than this is not evidence of
learning.

Torch-free: the rule is arithmetic on the curve, tested on its own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

SOLVED = "solved"
PLATEAUED = "plateaued"
STILL_LEARNING = "still learning at the cap"
NOT_EVALUATED = "no learning curve"


def binomial_noise(p: float, n: int) -> float:
    """Two standard errors of the difference of two accuracies near ``p`` over ``n`` targets
    each: 2·√(2·p(1−p)/n), with p(1−p) at least 1/n (so an accuracy of 0 or 1 still has the
    noise of one target in n)."""
    if n <= 0:
        raise ValueError(f"need at least one validation target, got n={n}")
    return 2.0 * math.sqrt(2.0 * max(p * (1.0 - p), 1.0 / n) / n)


def evaluation_steps(cap: int, first: int = 8) -> list[int]:
    """The steps after which the validation metric is measured: two log-spaced points per
    doubling (the cap and round(cap/√2), each halved down to about ``first`` steps), ascending,
    the cap last. Each point's half (floor) is a point too, which the plateau rule compares."""
    if cap < 1:
        raise ValueError(f"the cap must be at least one step, got {cap}")
    low = max(1, min(first, cap))
    steps = set()
    for start in (cap, round(cap / math.sqrt(2))):
        while start >= low:
            steps.add(start)
            start //= 2
    return sorted(steps | {cap})


@dataclass(frozen=True)
class StopRule:
    """What solved means for a task's validation metric, and when a plateau may end training.

    Attributes:
        ceiling: The best value the metric can take (an accuracy: 1).
        higher_is_better: The metric's direction.
        chance: The metric of a model that learned nothing (an accuracy: one over the
            answers); no plateau stop within noise of it.
        min_fraction: No plateau stop before this fraction of the cap (a solved stop may come
            at any point).
    """

    ceiling: float = 1.0
    higher_is_better: bool = True
    chance: float = 0.0
    min_fraction: float = 0.5


@dataclass
class CurvePoint:
    """One measurement of the learning curve."""

    step: int
    examples: int
    value: float
    noise: float


@dataclass
class Convergence:
    """The learning curve of one run and the verdict the stop rule gives it."""

    rule: StopRule
    cap: int
    points: list[CurvePoint] = field(default_factory=list)
    reason: str = NOT_EVALUATED

    def gain(self, old: float, new: float) -> float:
        """How much better ``new`` is than ``old`` in the metric's direction."""
        return new - old if self.rule.higher_is_better else old - new

    def observe(self, point: CurvePoint) -> bool:
        """Record ``point``; whether training should stop there (``reason`` says why)."""
        self.points.append(point)
        gap = self.gain(point.value, self.rule.ceiling)
        if gap <= point.noise:
            self.reason = SOLVED
            return True
        half = [p for p in self.points[:-1] if p.step <= point.step // 2]
        if not half:
            self.reason = STILL_LEARNING
            return False
        flat = self.gain(half[-1].value, point.value) < point.noise
        at_cap = point.step >= self.cap
        learned = self.gain(self.rule.chance, point.value) > point.noise
        late = point.step >= self.rule.min_fraction * self.cap
        if flat and (at_cap or (learned and late)):
            self.reason = PLATEAUED
            return True
        self.reason = STILL_LEARNING
        return False

    @property
    def converged(self) -> bool | None:
        """True: solved or plateaued; False: still learning at the cap; None: never evaluated."""
        if not self.points:
            return None
        return self.reason in (SOLVED, PLATEAUED)
