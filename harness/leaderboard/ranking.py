"""The overview: one row per variant (per machine and dtype), one column per task's headline metric.

A *machine* is the hardware a run was measured on (CPU model or GPU name, `machine_labels`): a
laptop's timings never compete with a server's. The thread count is part of every contest and
point instead (`SETTING`), so timings compete only at equal threads, while a variant's row keeps
its quality runs (one thread each under joblib) and its timings (two threads) together.

Ranking is by **mean win rate**. A *contest* is one task setting (task parameters and curve
position, on one machine and dtype) of a task whose headline metric has a direction. In a contest
every pair of entries that both ran it is compared on their seed-averaged headline value.

**The rule: a win must hold beyond the spread, else it is a tie.** Each value has an uncertainty
u: the standard error of its seed mean (seed std / √seeds) when it has two or more seeds; half its
recorded interquartile range when it has one seed and the task recorded one (a timing's median:
conservative, since a median of several samples varies less than its samples); else 0 (one seed,
nothing known: the comparison is plain, and the overview's "n seeds" says so). Entries a and b
are tied when |mean_a − mean_b| ≤ 2·√(u_a² + u_b²) (about a 95% two-sided z-test of the
difference; with 3 seeds the t-distribution would ask for a wider margin, so the rule errs
towards calling wins, never towards hiding a clear one) or equal to 1e-9 relative; otherwise the
better one scores 1 and the other 0. A tie scores ½ each.

An entry's win rate in a task is its mean score over the task's contests, each contest's score
divided by the number of opponents; its aggregate is the mean of its task win rates. Ranks are
within a machine and dtype ("min" method: ties share a rank).
Headline metrics without a direction (e.g. concentration's S(x)) are shown but not ranked.
Values and their spread (seed std, else the recorded IQR) come from `harness.metric_points`.

Entries that never met (no shared contest) are not compared; an entry's aggregate only averages
the tasks it took part in, and the overview says how many that was.

This module computes (`standings`); `harness.leaderboard.overview` turns the result into cells.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from attnbench.harness.metric_points import POINT, point_stats

TIE_RTOL = 1e-9
TIE_Z = 2.0  # a difference within TIE_Z combined standard errors is a tie
MACHINE = "machine"  # the column `machine_labels` fills
THREADS = "threads"
ENTRY = ["variant", "variant_params", MACHINE, "dtype"]
SETTING = ["task_params", "x_name", "x_value", THREADS]
CONTEST = [MACHINE, "dtype", *SETTING]  # entries compete only on the same machine and dtype
MACHINE_POINT = [MACHINE if c == "device" else c for c in POINT] + [THREADS]


def machine_labels(frame: pd.DataFrame) -> pd.Series:
    """Each row's machine: its hardware (CPU model or GPU name; the device type when unknown).
    Threads are not part of it: they are part of each contest (see the module docstring)."""

    def label(hardware: object, device: object) -> str:
        return str(hardware) if isinstance(hardware, str) and hardware else str(device)

    labels = [label(h, d) for h, d in zip(frame["hardware"], frame["device"], strict=True)]
    return pd.Series(labels, index=frame.index, dtype=object)


def with_machine(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` (a collected results table) with its ``machine`` column, as the page uses it."""
    return frame.assign(**{MACHINE: machine_labels(frame)})


@dataclass
class Headline:
    """A task's headline metric: name, direction (None: not ranked), description."""

    task: str
    metric: str
    higher_is_better: bool | None
    description: str = ""


def uncertainty(points: pd.DataFrame) -> pd.Series:
    """Each point's uncertainty u (see the module docstring) from its ``spread`` and ``n``."""
    spread = points["spread"].astype(float).fillna(0.0)
    n = points["n"].astype(float)
    return pd.Series(
        np.where(n > 1, spread / np.sqrt(n.clip(lower=1)), spread / 2), index=points.index
    )


def contest_scores(
    values: pd.Series, higher_is_better: bool, uncertainties: pd.Series | None = None
) -> pd.Series:
    """Each entry's score in one contest: (wins + ½·ties) / opponents; empty below 2 entries.

    A difference within TIE_Z combined uncertainties is a tie (module docstring); without
    ``uncertainties`` the comparison is plain."""
    if len(values) < 2:
        return pd.Series(dtype=float)
    v = values.to_numpy(dtype=float)
    u = np.zeros_like(v) if uncertainties is None else uncertainties.to_numpy(dtype=float)
    diff = v[:, None] - v[None, :]
    if not higher_is_better:
        diff = -diff
    scale = np.maximum(np.abs(v[:, None]), np.abs(v[None, :]))
    margin = TIE_Z * np.sqrt(u[:, None] ** 2 + u[None, :] ** 2)
    tie = np.abs(diff) <= np.maximum(TIE_RTOL * scale, margin)
    score = np.where(tie, 0.5, (diff > 0).astype(float))
    np.fill_diagonal(score, 0.0)
    return pd.Series(score.sum(axis=1) / (len(v) - 1), index=values.index)


def task_win_rates(
    means: pd.Series, higher_is_better: bool, uncertainties: pd.Series | None = None
) -> pd.Series:
    """Mean contest score per entry (index: ENTRY) of one task's seed-averaged headline values
    ``means`` (and their ``uncertainties``, same index), indexed by ENTRY + SETTING."""
    scores = []
    for _, contest in means.groupby(level=CONTEST, dropna=False):
        u = None if uncertainties is None else uncertainties.loc[contest.index]
        s = contest_scores(
            contest.droplevel(SETTING),
            higher_is_better,
            None if u is None else u.droplevel(SETTING),
        )
        if not s.empty:
            scores.append(s)
    if not scores:
        return pd.Series(dtype=float)
    return pd.concat(scores).groupby(level=ENTRY).mean()


@dataclass
class Standings:
    """The computed overview: per entry (index ENTRY), each task's value, spread, win rate and
    rank, and the aggregate.

    Attributes:
        entries: Every entry with a headline value, sorted (a MultiIndex over ENTRY).
        headlines: The headlines that have results, in column order.
        values: task → (seed-averaged value, spread), each averaged over the task's settings.
        task_ranks: task → rank by win rate (ranked tasks only).
        aggregate: Mean of the task win rates.
        n_tasks: How many ranked tasks each aggregate averages.
        overall: Rank by the aggregate within machine and dtype.
    """

    entries: pd.MultiIndex
    headlines: list[Headline]
    values: dict[str, tuple[pd.Series, pd.Series]]
    task_ranks: dict[str, pd.Series]
    aggregate: pd.Series
    n_tasks: pd.Series
    overall: pd.Series


def standings(frame: pd.DataFrame, headlines: list[Headline]) -> Standings | None:
    """Win rates and ranks of the ok run rows of ``frame`` (see the module docstring); None when
    no headline has results."""
    stats = point_stats(frame[~frame["derived"].astype(bool)], MACHINE_POINT)
    headlines = [
        h for h in headlines if ((stats["task"] == h.task) & (stats["metric"] == h.metric)).any()
    ]
    if not headlines:
        return None
    entries = stats[stats["task"].isin([h.task for h in headlines])][ENTRY].drop_duplicates()
    entries = entries.sort_values(ENTRY).set_index(ENTRY).index
    values, task_ranks, rates = {}, {}, {}
    for h in headlines:
        points = stats[(stats["task"] == h.task) & (stats["metric"] == h.metric)]
        points = points.set_index([*ENTRY, *SETTING])
        values[h.task] = (
            points["mean"].groupby(level=ENTRY).mean(),
            points["spread"].groupby(level=ENTRY).mean(),
        )
        if h.higher_is_better is not None:
            rate = task_win_rates(points["mean"], h.higher_is_better, uncertainty(points))
            if rate.empty:  # no contest had two entries: nothing to rank in this task
                continue
            rates[h.task] = rate
            task_ranks[h.task] = rank_within_hardware(rate)
    by_task = pd.concat(rates, axis=1) if rates else pd.DataFrame()
    aggregate = by_task.mean(axis=1) if rates else pd.Series(dtype=float)
    n_tasks = by_task.notna().sum(axis=1) if rates else pd.Series(dtype=int)
    return Standings(
        entries=entries,
        headlines=headlines,
        values=values,
        task_ranks=task_ranks,
        aggregate=aggregate,
        n_tasks=n_tasks,
        overall=rank_within_hardware(aggregate),
    )


def rank_within_hardware(scores: pd.Series) -> pd.Series:
    """Rank 1 = highest score, within each machine and dtype; ties share the lower rank."""
    if scores.empty:
        return scores
    groups = scores.groupby(level=[MACHINE, "dtype"])
    return groups.rank(method="min", ascending=False)
