"""Which value of a tuning axis wins: one rule for the board and for the sweep that follows it.

A task declares tuning axes and the validation metric that picks them (`TaskInfo.tuning`). A
preset sweeps several values per (variant, setting); each value, a *candidate*, has a validation
score per seed it was run with. The winner is the candidate with the best mean score **over the
seeds every scored candidate has** (where they share none: over each one's own seeds):

- a grid run at every seed (values × seeds) is compared on all of them, as a plain mean would;
- a grid tuned at one seed, then run at more seeds at the winner only (the ``seeds_at_best``
  grids of a preset, `hydra_plugins.attnbench_sweeper`) is compared on the tuning seed, so the
  winner's extra seeds cannot make it lose (or win) against values that never had them;
- a sweep stopped part-way compares what every value has, never one value's lucky extra seed.

A seed whose score is NaN (the run diverged) counts as a seed the candidate has no score at, as
a failed run's: both are left out of the compared seeds alike. A candidate without a score
(failed, or from code before the task measured it) cannot win; ties
go to the candidate whose label sorts first, so the choice never depends on run order. Torch-free.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Scored:
    """A candidate's score: the mean over the compared seeds (NaN: none), and how many."""

    score: float
    n_seeds: int


def value_label(params: Mapping[str, object], axes: Iterable[str]) -> str:
    """A candidate's label: the values ``params`` (a run's task parameters) give the tuning
    ``axes``, as canonical JSON. Ties go to the label that sorts first, so the board and the
    sweep must label alike."""
    return json.dumps({a: _number(params[a]) for a in axes if a in params}, sort_keys=True)


def _number(value: object) -> object:
    """A value as one candidate whatever its spelling: a number written as text (a quoted
    override, ``task.lr='0.01'``) is that number, an integral float an int (1.0 and 1 are one
    value), anything else as it is."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return value
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    return value


def _seeds(by_seed: Mapping[int, float]) -> set[int]:
    """The seeds a candidate has a score at (NaN is none, as a failed run's)."""
    return {seed for seed, value in by_seed.items() if not math.isnan(value)}


def compared_seeds(scores: Mapping[str, Mapping[int, float]]) -> set[int]:
    """The seeds the candidates are compared on: those every candidate with a score has; where
    they share none, every seed (each candidate then scored on its own)."""
    scored = [_seeds(by_seed) for by_seed in scores.values() if _seeds(by_seed)]
    if not scored:
        return set()
    shared = set.intersection(*scored)
    return shared if shared else set.union(*scored)


def score_candidates(scores: Mapping[str, Mapping[int, float]]) -> dict[str, Scored]:
    """Each candidate's `Scored` on `compared_seeds`; ``scores`` is label → {seed: score}."""
    seeds = compared_seeds(scores)
    out = {}
    for label, by_seed in scores.items():
        values = [v for s, v in by_seed.items() if s in seeds and not math.isnan(v)]
        out[label] = Scored(sum(values) / len(values) if values else math.nan, len(values))
    return out


def winner(scored: Mapping[str, Scored], higher_is_better: bool) -> str | None:
    """The winning label of `score_candidates`' result; None where no candidate has a score."""
    valid = [label for label, s in scored.items() if not math.isnan(s.score)]
    if not valid:
        return None
    sign = -1.0 if higher_is_better else 1.0
    return min(valid, key=lambda label: (sign * scored[label].score, label))
