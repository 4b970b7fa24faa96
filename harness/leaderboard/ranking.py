"""The overview: one row per variant (per machine and dtype), one column per task's headline metric.

A *machine* is the hardware a run was measured on (`machine_labels`): the GPU name, or the CPU
model with the vector capability torch dispatched to (`harness.jobs.env.device_name`), so a
laptop's timings never compete with a server's, nor AVX2 timings with AVX-512 ones on hosts that
share a CPU model name. A CPU hardware that names no capability (an older record: "AMD EPYC"
beside "AMD EPYC (AVX512)") is a machine of its own, since which ISA it ran is not known. The
thread count is part of every contest and point instead (`SETTING`), so timings compete only at
equal threads, while a variant's row keeps its quality runs (one thread each under joblib) and its
timings (two threads) together.

**Quality and cost are ranked apart, and only like with like.** A column is a *cost* column
when its task's headline is the cost metric the task declares (`TaskInfo.cost_metric`, e.g.
throughput's ratio to dense SDPA), else a *quality* column. Why not one number over both: any
single score trades quality for speed at an exchange rate the page would have to invent (is
0.1 of recall worth 2× the latency?), and an average over whatever columns a row happens to
have can rank first a variant that was timed but never trained.
So the overview's rank is the **quality rank**: the mean win rate over *the same set* of
quality columns for every entry it ranks, given to the entries ranked in all of them. The set,
within each machine and dtype, is the one on which the rank rests on the most results (entries
ranked in all of its columns × columns; ties: more columns), not simply the widest: a sweep
that runs some tasks for some families only (state tracking for the recurrent mixers), and
still-learning points that leave a column out of an entry's set, can make the widest set one
that three entries of twenty share. A ranked entry's other quality columns keep their own
ranks and enter no aggregate. An entry not ranked in every compared column (a sparse variant
timed at its paper's size and never trained, a library's kernel, a variant whose training
failed or is still learning) shows its per-column ranks and no quality rank, and its cell says
why. Cost keeps its own column and rank, and the page draws quality
against cost (`harness.leaderboard.tradeoffs`): a Pareto view, where each reader picks the
exchange rate.

Within a column, ranking is by **win rate**. A *contest* is one task setting (task parameters
and curve position, on one machine and dtype) of a task whose headline metric has a direction.
In a contest every pair of entries that both ran it is compared on their seed-averaged headline
value.

**The rule: a win must hold beyond the spread, else it is a tie.** Each value has an uncertainty
u: the standard error of its seed mean (seed std / √seeds) when it has two or more seeds; half its
recorded interquartile range when it has one seed and the task recorded one (a timing's median:
conservative, since a median of several samples varies less than its samples); else 0 (one seed,
nothing known: the comparison is plain, and the overview's "n seeds" says so). A contest's noise
is pooled over its entries, u² = mean of their u²; entries a and b are tied when
|mean_a − mean_b| ≤ 2·√2·u (about a 95% two-sided z-test of a difference of two such values;
with 3 seeds the t-distribution would ask for a wider margin, so the rule errs towards calling
wins, never towards hiding a clear one) or equal to 1e-9 relative; otherwise the better one
scores 1 and the other 0. A tie scores ½ each. One margin per contest, not per pair, is what
makes the rank consistent with its columns: if A is at least as good as B on every voting column
and better beyond the margin on one, A ranks above B (`tests/harness/test_rank_consistency.py`);
with per-pair margins a noisier A could tie a third entry that B beats.

**A column votes only if it separates the variants** (`no_vote_reason`): a trained column (its
task tunes parameters or judges convergence) whose every value rests on a single seed (no noise
to tell a win from luck), one where every entry is tied with
every other in every contest, or one where every entry sits at chance or at the ceiling (the
task's ``chance_metric`` and ``ceiling``), is shown and ranked within itself but casts no vote in
the quality rank, and its header says why.

An entry's win rate in a task is its mean score over the task's contests, each contest's score
divided by the number of opponents; its aggregate is the mean over the *tasks* of its win rates
in their quality columns, a task split into several columns (its modes, `columns`) averaging
them first: **each task has one vote**, however many columns it shows, so a task does not weigh
more for measuring several things. Ranks are within a machine and dtype ("min" method: ties share
a rank).
Headline metrics without a direction (e.g. concentration's S(x)) are shown but not ranked.
Values and their spread (seed std, else the recorded IQR) come from `harness.results.metric_points`.

Entries that never met (no shared contest) are not compared; an entry's aggregate averages the
quality tasks it was ranked in, and it gets a quality rank only with the full set (above).
The ranked entries' aggregates come from their contests with each other only, so a row
outside the ranked set (a plugin run on one task) moves no ranked row's win rate.

**Unsteady timings enter no contest.** Where a task declares a steadiness flag for its headline
(`TaskInfo.steadiness`, carried by `Headline.steady_flag`), a run whose flag is 0 at a curve
position is left out of that point before seeds are averaged: its value enters neither a contest
nor the entry's value, and the entry counts it (`Standings.unsteady`) so that the overview can
mark it. An entry left with no steady value in a task shows the mean of its unsteady ones,
unranked. A run without the flag (an older record) is unknown, which is not unsteady. A value
whose kernel computed outside its declared error (`TaskInfo.accuracy`, `Headline.accuracy_flag`)
is left out the same way: the time of a wrong result is no time. Which values those are is
decided once for the page (`harness.leaderboard.steadiness`): the rows come judged, and this
module reads their ``untrusted`` column.

This module computes (`standings`); `harness.leaderboard.overview` turns the result into cells.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from attnbench.harness.leaderboard.steadiness import untrusted
from attnbench.harness.results.metric_points import POINT, point_stats

TIE_RTOL = 1e-9
TIE_Z = 2.0  # a difference within TIE_Z combined standard errors is a tie
NEAR_LEVEL = 0.02  # a one-seed value this close (share of chance → ceiling) to a level is at it
MACHINE = "machine"  # the column `machine_labels` fills
THREADS = "threads"
ENTRY = ["variant", "variant_params", MACHINE, "dtype"]
SETTING = ["task_params", "x_name", "x_value", THREADS]
CONTEST = [MACHINE, "dtype", *SETTING]  # entries compete only on the same machine and dtype
MACHINE_POINT = [MACHINE if c == "device" else c for c in POINT] + [THREADS]


def machine_labels(frame: pd.DataFrame) -> pd.Series:
    """Each row's machine: its hardware (CPU model and capability, or GPU name; the device type
    when unknown).
    Threads are not part of it: they are part of each contest (see the module docstring)."""

    def label(hardware: object, device: object) -> str:
        return str(hardware) if isinstance(hardware, str) and hardware else str(device)

    labels = [label(h, d) for h, d in zip(frame["hardware"], frame["device"], strict=True)]
    return pd.Series(labels, index=frame.index, dtype=object)


def with_machine(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` (a collected results table) with its ``machine`` column, as the page uses it."""
    return frame.assign(**{MACHINE: machine_labels(frame)})


def shown_rows(frame: pd.DataFrame, include_stale: bool = False) -> pd.DataFrame:
    """The rows of a collected results table that the board shows, with their machine: those of
    the installed code (collection's ``current``), so that old code's numbers never mix with new
    ones; every row with ``include_stale`` (``attnbench-leaderboard --include-stale``). The
    board's page and `attnbench.results` both read a table through this rule."""
    return with_machine(frame if include_stale else frame[frame["current"].astype(bool)])


def count_stale(frame: pd.DataFrame) -> int:
    """How many runs of a collected results table are of older code: those `shown_rows` leaves
    out by default, which the board's header counts."""
    stale = ~frame["current"].astype(bool) & ~frame["derived"].astype(bool)
    return int(frame.loc[stale, "run_id"].nunique())


@dataclass
class Headline:
    """A task's headline metric: name, direction (None: not ranked), description, and the 0/1
    metrics of the same run that say whether its timing was steady and whether the timed kernel
    was within its error tolerance ("": none declared)."""

    task: str
    metric: str
    higher_is_better: bool | None
    description: str = ""
    steady_flag: str = ""
    accuracy_flag: str = ""
    converge_flag: str = ""  # the 0/1 metric saying the run's training converged
    cost: bool = False  # the task's declared cost metric: ranked apart from quality
    group: str = ""  # the task a column belongs to ("": ``task``); a task's columns share one vote
    at: str = ""  # the one curve position the column is at, e.g. "seq_len=4096" (`columns`)
    label: str = ""  # the column's name for readers, "task: metric" in the task's words
    battery: str = ""  # the task's battery (TaskInfo.battery; `columns.with_batteries`)
    members: tuple[str, ...] = ()  # a battery's column: the columns it is the mean of
    chance_metric: str = ""  # the metric of the same run holding the headline's chance level
    trained: bool = False  # a trained result (its task tunes or judges convergence): seeds needed
    ceiling: float | None = None  # the headline's best possible value (None: unbounded)


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

    A difference within TIE_Z·√2 pooled uncertainties is a tie (module docstring); without
    ``uncertainties`` the comparison is plain."""
    if len(values) < 2:
        return pd.Series(dtype=float)
    v = values.to_numpy(dtype=float)
    u = np.zeros_like(v) if uncertainties is None else uncertainties.to_numpy(dtype=float)
    diff = v[:, None] - v[None, :]
    if not higher_is_better:
        diff = -diff
    scale = np.maximum(np.abs(v[:, None]), np.abs(v[None, :]))
    margin = TIE_Z * np.sqrt(2 * np.mean(u**2))  # one pooled margin per contest (docstring)
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
        aggregate: Mean over the quality tasks of the entry's win rates, one vote per task (a
            task's columns averaged first); every entry ranked in a quality column has one,
            and those with a quality rank have it from contests among themselves.
        overall: The quality rank: by the aggregate within machine and dtype, for the entries
            ranked in the compared set of quality columns only (module docstring).
        compared: (machine, dtype) → the quality columns the quality rank compares.
        ranked_in: Per entry, the quality columns it was ranked in (a tuple, column order).
        no_vote: quality column → why it casts no vote in the quality rank (`no_vote_reason`);
            absent where it votes.
        unsteady: task → per entry, the unsteady values left out (runs × curve positions);
            entries without any are absent.
        steady_values: task → per entry, how many values the task's value rests on after
            unsteady ones were left out (0: it shows unsteady values only).
    """

    entries: pd.MultiIndex
    headlines: list[Headline]
    values: dict[str, tuple[pd.Series, pd.Series]]
    task_ranks: dict[str, pd.Series]
    aggregate: pd.Series
    overall: pd.Series
    unsteady: dict[str, pd.Series] = field(default_factory=dict)
    steady_values: dict[str, pd.Series] = field(default_factory=dict)
    compared: dict[tuple[str, str], tuple[str, ...]] = field(default_factory=dict)
    ranked_in: pd.Series = field(default_factory=lambda: pd.Series(dtype=object))
    no_vote: dict[str, str] = field(default_factory=dict)

    def compared_for(self, entry: tuple) -> tuple[str, ...]:
        """The quality columns the quality rank compares on ``entry``'s machine and dtype."""
        return self.compared.get(hardware_of(entry), ())


def hardware_of(entry: tuple) -> tuple[str, str]:
    """(machine, dtype) of an ENTRY key: where its ranks are made."""
    return entry[ENTRY.index(MACHINE)], entry[ENTRY.index("dtype")]


def standings(frame: pd.DataFrame, headlines: list[Headline]) -> Standings | None:
    """Win rates and ranks of the ok run rows of ``frame`` (judged by
    `steadiness.judge_steadiness`; see the module docstring); None when no headline has
    results."""
    judged = _judged(frame)
    every = judged.every
    headlines = [
        h for h in headlines if ((every["task"] == h.task) & (every["metric"] == h.metric)).any()
    ]
    if not headlines:
        return None
    entries = every[every["task"].isin([h.task for h in headlines])][ENTRY].drop_duplicates()
    entries = entries.sort_values(ENTRY).set_index(ENTRY).index
    tasks = _TaskResults()
    for h in headlines:
        _add_task(tasks, h, judged)
    quality = _quality_rank(headlines, tasks.rates, tasks.contests, tasks.no_vote)
    return Standings(
        entries=entries,
        headlines=headlines,
        values=tasks.values,
        task_ranks=tasks.task_ranks,
        aggregate=quality.aggregate,
        overall=quality.overall,
        unsteady=tasks.unsteady,
        steady_values=tasks.steady_values,
        compared=quality.compared,
        ranked_in=quality.ranked_in,
        no_vote=tasks.no_vote,
    )


@dataclass
class _Judged:
    """The run rows and their points, with the untrusted timings told apart.

    Attributes:
        runs: The run rows (no derived rows).
        left_out: Per row of ``runs``, whether it is an unsteady timing, or one of a kernel
            outside its error tolerance (`steadiness.untrusted`).
        every: The points of every run row.
        stats: The points of the rows not left out: what competes.
    """

    runs: pd.DataFrame
    left_out: pd.Series
    every: pd.DataFrame
    stats: pd.DataFrame


def _judged(frame: pd.DataFrame) -> _Judged:
    """The run rows of ``frame`` and their points, the untrusted ones told apart."""
    runs = frame[~frame["derived"].astype(bool)]
    left_out = untrusted(runs)
    every = point_stats(runs, MACHINE_POINT)
    stats = point_stats(runs[~left_out], MACHINE_POINT) if left_out.any() else every
    return _Judged(runs, left_out, every, stats)


@dataclass
class _TaskResults:
    """Per task (column): the fields of the same names of `Standings`, and ``rates``, its win
    rates (ranked tasks with a contest only)."""

    values: dict[str, tuple[pd.Series, pd.Series]] = field(default_factory=dict)
    task_ranks: dict[str, pd.Series] = field(default_factory=dict)
    rates: dict[str, pd.Series] = field(default_factory=dict)
    unsteady: dict[str, pd.Series] = field(default_factory=dict)
    steady_values: dict[str, pd.Series] = field(default_factory=dict)
    # column → (its competing points, indexed ENTRY + SETTING; higher_is_better)
    contests: dict[str, tuple[pd.DataFrame, bool]] = field(default_factory=dict)
    no_vote: dict[str, str] = field(default_factory=dict)  # column → why it casts no vote


def _add_task(tasks: _TaskResults, h: Headline, judged: _Judged) -> None:
    """Enter the values, left-out counts, win rates and ranks of the column of ``h``."""
    points, every_point = (
        table[(table["task"] == h.task) & (table["metric"] == h.metric)].set_index(
            [*ENTRY, *SETTING]
        )
        for table in (judged.stats, judged.every)
    )  # the steady (or unjudged) values compete; every value is shown where none is left
    means = [p[["mean", "spread"]].groupby(level=ENTRY).mean() for p in (points, every_point)]
    only_unsteady = means[1][~means[1].index.isin(means[0].index)]
    shown = pd.concat([means[0], only_unsteady])
    tasks.values[h.task] = (shown["mean"], shown["spread"])
    runs = judged.runs
    mine = runs[judged.left_out & (runs["task"] == h.task) & (runs["metric"] == h.metric)]
    if not mine.empty:
        tasks.unsteady[h.task] = mine.groupby(ENTRY).size()
        tasks.steady_values[h.task] = points["n"].groupby(level=ENTRY).sum()
    if h.higher_is_better is not None:
        rate = task_win_rates(points["mean"], h.higher_is_better, uncertainty(points))
        if not rate.empty:  # else no contest had two entries: nothing to rank in this task
            tasks.rates[h.task] = rate
            tasks.task_ranks[h.task] = rank_within_hardware(rate)
            tasks.contests[h.task] = (points, h.higher_is_better)
            chance = judged.stats[
                (judged.stats["task"] == h.task) & (judged.stats["metric"] == h.chance_metric)
            ].set_index([*ENTRY, *SETTING])["mean"]
            reason = no_vote_reason(points, h, chance if h.chance_metric else None)
            if reason and not h.cost:
                tasks.no_vote[h.task] = reason
        elif not h.cost and not shown.empty:  # shown, yet no contest: say why it has no vote
            left_out = len(only_unsteady)  # entries whose every value was left out
            why = "each was run by one variant only"
            if left_out:
                what = (
                    "are still learning at their cap"
                    if h.converge_flag
                    else "have only values left out"
                )
                why = f"{left_out} of {len(shown)} variants {what}"
            tasks.no_vote[h.task] = f"no setting with two ranked values: {why}"


def no_vote_reason(points: pd.DataFrame, h: Headline, chance: pd.Series | None = None) -> str:
    """Why the column of ``h`` casts no vote in the quality rank, "" where it votes.

    A column votes only if it separates the variants, and only a column with a measured noise
    can show that: not a trained column (``h.trained``) whose every value rests on one seed and
    records no spread (a trained number varies with its seed); not where, in
    every contest, every entry is tied with every other (all within seed noise of each other),
    nor where every entry is
    within noise of the chance level (``chance``: the chance metric's value per point, index as
    ``points``) or of the headline's ceiling. "Within noise" of a level is within TIE_Z
    standard errors of the point's seeds, or within NEAR_LEVEL of the span from chance to
    ceiling (a one-seed value has no standard error, and a hundredth is its rounding)."""
    one_seed = (points["n"] <= 1).all() and points["spread"].isna().all()
    if h.trained and one_seed:
        return "one seed per value: no seed noise to tell a win from luck"
    u = uncertainty(points)
    separated = False
    for _, contest in points["mean"].groupby(level=CONTEST, dropna=False):
        s = contest_scores(contest, bool(h.higher_is_better), u.loc[contest.index])
        separated = separated or bool((s != 0.5).any())
    if not separated:
        return "every variant within seed noise of every other"
    levels = chance.reindex(points.index) if chance is not None else None
    span = (
        abs(h.ceiling - levels.mean())
        if levels is not None and h.ceiling is not None and levels.notna().any()
        else 0.0
    )
    room = np.maximum(TIE_Z * u, NEAR_LEVEL * span)
    at_chance = levels is not None and levels.notna().all()
    if at_chance and ((points["mean"] - levels).abs() <= room).all():
        return "every variant at chance"
    if h.ceiling is not None and ((points["mean"] - h.ceiling).abs() <= room).all():
        return "every variant at the ceiling"
    return ""


@dataclass
class _QualityRank:
    """The fields of the same names of `Standings`."""

    aggregate: pd.Series
    overall: pd.Series
    compared: dict[tuple[str, str], tuple[str, ...]]
    ranked_in: pd.Series


def _quality_rank(
    headlines: list[Headline],
    rates: dict[str, pd.Series],
    contests: dict[str, tuple[pd.DataFrame, bool]],
    no_vote: dict[str, str],
) -> _QualityRank:
    """The aggregate over the quality columns' win ``rates`` (one vote per task) and the quality
    rank of the entries ranked in the compared set of columns (module docstring).

    The ranked entries' aggregate is made from contests among themselves only (``contests``:
    each column's competing points): a row outside the ranked set (a plugin run on one task)
    must not move the ranked rows' win rates."""
    quality = [
        h.task for h in headlines if not h.cost and h.task in rates and h.task not in no_vote
    ]
    if not quality:
        empty = pd.Series(dtype=float)
        return _QualityRank(empty, empty, {}, pd.Series(dtype=object))
    group = {h.task: h.group or h.task for h in headlines}
    by_task = pd.concat({t: rates[t] for t in quality}, axis=1)
    ranked_in = by_task.notna().apply(lambda row: tuple(row.index[row]), axis=1)
    compared = compared_columns(ranked_in, list(by_task.columns))
    like_with_like = pd.Series(  # ranked in every compared column of its machine and dtype
        [
            hardware_of(k) in compared and set(compared[hardware_of(k)]) <= set(cols)
            for k, cols in ranked_in.items()
        ],
        index=ranked_in.index,
        dtype=bool,
    )
    aggregate = _votes(by_task, group).mean(axis=1)
    for hardware, columns in compared.items():  # the ranked: the compared columns, each other
        ranked = ranked_in.index[like_with_like]
        ranked = ranked[[hardware_of(k) == hardware for k in ranked]]
        among_ranked = _rates_among(ranked, {t: contests[t] for t in columns})
        if not among_ranked.empty:
            aggregate.loc[among_ranked.index] = _votes(among_ranked, group).mean(axis=1)
    overall = rank_within_hardware(aggregate[like_with_like])
    return _QualityRank(aggregate, overall, compared, ranked_in)


def _votes(by_task: pd.DataFrame, group: dict[str, str]) -> pd.DataFrame:
    """One vote per task: the win rates of a task's columns averaged (module docstring)."""
    return by_task.T.groupby(lambda column: group[column]).mean().T


def _rates_among(entries: pd.Index, contests: dict[str, tuple[pd.DataFrame, bool]]) -> pd.DataFrame:
    """Per column, the win rates of ``entries`` from their contests with each other only."""
    rates = {}
    for column, (points, higher_is_better) in contests.items():
        mine = points[points.index.droplevel(SETTING).isin(entries)]
        rate = task_win_rates(mine["mean"], higher_is_better, uncertainty(mine))
        if not rate.empty:
            rates[column] = rate
    return pd.concat(rates, axis=1) if rates else pd.DataFrame()


def compared_columns(
    ranked_in: pd.Series, order: list[str] | None = None
) -> dict[tuple[str, str], tuple[str, ...]]:
    """(machine, dtype) → the set of quality columns the quality rank compares there: of the
    sets of columns some entries are all ranked in (``ranked_in``, index ENTRY: each entry's
    columns), the one on which the rank rests on the most results, entries ranked in all of
    them × columns; ties broken by more columns, then by the columns' names (module docstring).
    ``order``: the columns' order on the page, which the returned sets keep (else by name).

    Not simply the set with the most columns: where a sweep runs some tasks for some families
    only (state tracking for the recurrent mixers) and a still-learning point leaves its column
    out of an entry's set, the widest set can be shared by three entries of twenty."""
    out: dict[tuple[str, str], tuple[str, ...]] = {}
    if ranked_in.empty:
        return out
    for (machine, dtype), group in ranked_in.groupby(level=[MACHINE, "dtype"]):
        sets = [frozenset(cols) for cols in group]
        columns = sorted(frozenset().union(*sets))
        if order is not None:
            columns = [col for col in order if col in columns]
        candidates = (  # a handful of quality columns: every subset some entry is ranked in
            (-shared * len(chosen), -len(chosen), chosen)
            for size in range(1, len(columns) + 1)
            for chosen in itertools.combinations(columns, size)
            if (shared := sum(1 for s in sets if s.issuperset(chosen)))
        )
        best = min(candidates, default=None)
        if best is not None:
            out[(machine, dtype)] = best[2]
    return out


def rank_within_hardware(scores: pd.Series) -> pd.Series:
    """Rank 1 = highest score, within each machine and dtype; ties share the lower rank."""
    if scores.empty:
        return scores
    groups = scores.groupby(level=[MACHINE, "dtype"])
    return groups.rank(method="min", ascending=False)
