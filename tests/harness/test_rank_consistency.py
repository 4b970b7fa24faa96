"""The quality rank is consistent with its columns (`harness.leaderboard.ranking`).

Property: if variant A is at least as good as B on every voting column (its seed mean is not
worse) and better beyond the contest's margin on one, A ranks above B. Checked on random boards
(seeded, so each draw passes or fails deterministically): variants with three seeds each of
random spread, several quality columns, some of which cast no vote.
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from attnbench.harness.leaderboard.ranking import (
    ENTRY,
    TIE_Z,
    Headline,
    no_vote_reason,
    standings,
    uncertainty,
    with_machine,
)
from attnbench.harness.leaderboard.steadiness import judge_steadiness
from attnbench.harness.results.collect import COLUMNS

SEEDS = 3


def _board(rng: np.random.Generator, n_variants: int, n_columns: int) -> pd.DataFrame:
    """Three seeds per (variant, column): a level per variant and column, a spread per entry
    (some nearly none, some large), and a few columns where every variant has one level (at
    chance, say), which must cast no vote."""
    columns: dict[str, dict[str, list[float]]] = {}
    flat = set(rng.choice(n_columns, size=rng.integers(0, 2), replace=False).tolist())
    for c in range(n_columns):
        columns[f"t{c}"] = {}
        for v in range(n_variants):
            level = 0.5 if c in flat else rng.choice([0.2, 0.4, 0.6, 0.8]) + rng.normal(0, 0.03)
            spread = rng.choice([0.0, 0.005, 0.03, 0.1])
            columns[f"t{c}"][f"v{v}"] = [
                float(level + spread * rng.standard_normal()) if c not in flat else 0.5
                for _ in range(SEEDS)
            ]
    return _fixed_board(columns)


def _seed_stats(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (column, variant): seed mean, std and count."""
    return frame.groupby(["task", "variant"])["value"].agg(["mean", "std", "count"])


def _margin(stats: pd.DataFrame, task: str) -> float:
    """The contest's tie margin: TIE_Z·√2 pooled standard errors (the module's rule)."""
    mine = stats.loc[task]
    u = uncertainty(pd.DataFrame({"spread": mine["std"], "n": mine["count"]}))
    return TIE_Z * float(np.sqrt(2 * np.mean(u**2)))


@pytest.mark.parametrize("draw", range(40))
def test_a_variant_as_good_everywhere_and_better_somewhere_ranks_above(draw):
    rng = np.random.default_rng(draw)
    frame = _board(rng, n_variants=int(rng.integers(3, 7)), n_columns=int(rng.integers(2, 6)))
    headlines = [Headline(t, "acc", True, t) for t in sorted(frame["task"].unique())]
    computed = standings(judge_steadiness(with_machine(frame), {}), headlines)
    assert computed is not None
    voting = [h.task for h in headlines if h.task not in computed.no_vote]
    stats = _seed_stats(frame)
    rank = computed.overall.droplevel([e for e in ENTRY if e != "variant"])
    checked = 0
    for a, b in itertools.permutations(sorted(frame["variant"].unique()), 2):
        diffs = {t: stats.loc[(t, a), "mean"] - stats.loc[(t, b), "mean"] for t in voting}
        as_good = all(d >= 0 for d in diffs.values())
        better = any(d > _margin(stats, t) for t, d in diffs.items())
        if as_good and better:
            checked += 1
            assert rank[a] < rank[b], (a, b, diffs, rank.to_dict())
    # the flat columns (every variant at one level) cast no vote
    flat = {
        t for t in frame["task"].unique() if frame.loc[frame["task"] == t, "value"].nunique() == 1
    }
    assert flat <= set(computed.no_vote)
    if draw == 0:
        assert checked, "the first draw must hold a dominated pair, or the test checks nothing"


def test_columns_that_do_not_separate_the_variants_cast_no_vote_and_say_why():
    points = pd.DataFrame(
        {"mean": [0.0101, 0.0099, 0.0100], "spread": [0.001] * 3, "n": [3] * 3},
        index=pd.MultiIndex.from_tuples(
            [(v, "{}", "cpu", "float32", "{}", "", -1.0, 1) for v in "ABC"],
            names=[*ENTRY, "task_params", "x_name", "x_value", "threads"],
        ),
    )
    h = Headline("t", "acc", True, chance_metric="chance", ceiling=1.0, trained=True)
    assert no_vote_reason(points, h) == "every variant within seed noise of every other"
    one_seed = points.assign(mean=[0.9, 0.5, 0.1], n=[1] * 3, spread=[float("nan")] * 3)
    assert (
        no_vote_reason(one_seed, h) == "one seed per value: no seed noise to tell a win from luck"
    )
    # a column that is not trained (a diagnostic, a closed form) is not held to seeds
    assert no_vote_reason(one_seed, Headline("t", "acc", True)) == ""
    apart = points.assign(mean=[0.012, 0.010, 0.008], spread=[1e-5] * 3)
    chance = pd.Series(0.01, index=points.index)
    assert no_vote_reason(apart, h, chance) == "every variant at chance"  # within 2 % of the span
    top = points.assign(mean=[0.999, 0.995, 0.990], spread=[1e-5] * 3)
    assert no_vote_reason(top, h, chance) == "every variant at the ceiling"
    assert no_vote_reason(points.assign(mean=[0.9, 0.5, 0.1]), h, chance) == ""


def _fixed_board(columns: dict[str, dict[str, list[float]]]) -> pd.DataFrame:
    rows = []
    for task, by_variant in columns.items():
        for variant, seeds in by_variant.items():
            for seed, value in enumerate(seeds):
                row = dict.fromkeys(COLUMNS)
                row.update(
                    run_id=f"{task}-{variant}-{seed}",
                    status="ok",
                    derived=False,
                    task=task,
                    variant=variant,
                    variant_params="{}",
                    task_params="{}",
                    seed=seed,
                    device="cpu",
                    hardware="Some CPU",
                    threads=1,
                    dtype="float32",
                    metric="acc",
                    value=value,
                )
                rows.append(row)
    return pd.DataFrame(rows, columns=COLUMNS)


def test_a_noisier_variant_that_is_as_good_is_not_ranked_below_by_a_third():
    """The case per-pair margins get wrong: in four columns A and B have the same mean, A's
    seeds spread (se 0.05) and B's not, and C is 0.05 below both; in a fifth A leads. Per-pair,
    B beats C (no noise between them) while A ties C, so B gathered more wins than A and ranked
    above it. With one pooled margin per contest the four columns are ties throughout (no vote),
    and A, better in the fifth, ranks first."""
    spread = 0.05 * 3**0.5  # seed std whose standard error over 3 seeds is 0.05
    noisy = {"A": [0.6 - spread, 0.6, 0.6 + spread], "B": [0.6] * 3, "C": [0.55] * 3}
    columns = {f"t{i}": noisy for i in range(4)}
    columns["t4"] = {"A": [0.7] * 3, "B": [0.6] * 3, "C": [0.6] * 3}
    frame = _fixed_board(columns)
    headlines = [Headline(t, "acc", True, t) for t in columns]
    computed = standings(judge_steadiness(with_machine(frame), {}), headlines)
    rank = computed.overall.droplevel([e for e in ENTRY if e != "variant"])
    assert rank["A"] < rank["B"]
    assert set(computed.no_vote) == {"t0", "t1", "t2", "t3"}
