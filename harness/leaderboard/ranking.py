"""The overview: one row per variant (per device and dtype), one column per task's headline metric.

Ranking is by **mean win rate**. A *contest* is one task setting (task parameters and curve
position, on one device and dtype) of a task whose headline metric has a direction. In a contest
every pair of entries that both ran it is compared on their seed-averaged headline value: the
better one scores 1, a tie (equal to 1e-9 relative) scores ½ each. An entry's win rate in a task is
its mean score over the task's contests, each contest's score divided by the number of opponents;
its aggregate is the mean of its task win rates. Ranks are within a device and dtype ("min" method:
ties share a rank).
Headline metrics without a direction (e.g. concentration's S(x)) are shown but not ranked.
Values and their spread (seed std, else the recorded IQR) come from `harness.metric_points`.

Entries that never met (no shared contest) are not compared; an entry's aggregate only averages
the tasks it took part in, and the overview says how many that was.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from attnbench.harness.leaderboard.tables import Cell, Column, Table, format_value
from attnbench.harness.metric_points import point_stats

TIE_RTOL = 1e-9
ENTRY = ["variant", "variant_params", "device", "dtype"]
SETTING = ["task_params", "x_name", "x_value"]
CONTEST = ["device", "dtype", *SETTING]  # entries compete only on the same hardware and dtype


@dataclass
class Headline:
    """A task's headline metric: name, direction (None: not ranked), description."""

    task: str
    metric: str
    higher_is_better: bool | None
    description: str = ""


@dataclass
class Overview:
    """The overview table plus, per row, the attributes the page filters on."""

    table: Table
    filters: list[dict[str, str]] = field(default_factory=list)  # device, dtype, family per row
    options: dict[str, list[str]] = field(default_factory=dict)  # distinct values per filter


def contest_scores(values: pd.Series, higher_is_better: bool) -> pd.Series:
    """Each entry's score in one contest: (wins + ½·ties) / opponents; empty below 2 entries."""
    if len(values) < 2:
        return pd.Series(dtype=float)
    v = values.to_numpy(dtype=float)
    diff = v[:, None] - v[None, :]
    if not higher_is_better:
        diff = -diff
    scale = np.maximum(np.abs(v[:, None]), np.abs(v[None, :]))
    tie = np.abs(v[:, None] - v[None, :]) <= TIE_RTOL * scale
    score = np.where(tie, 0.5, (diff > 0).astype(float))
    np.fill_diagonal(score, 0.0)
    return pd.Series(score.sum(axis=1) / (len(v) - 1), index=values.index)


def task_win_rates(means: pd.Series, higher_is_better: bool) -> pd.Series:
    """Mean contest score per entry (index: ENTRY) of one task's seed-averaged headline values
    ``means``, indexed by ENTRY + SETTING."""
    scores = []
    for _, contest in means.groupby(level=CONTEST, dropna=False):
        s = contest_scores(contest.droplevel(SETTING), higher_is_better)
        if not s.empty:
            scores.append(s)
    if not scores:
        return pd.Series(dtype=float)
    return pd.concat(scores).groupby(level=ENTRY).mean()


def _label(variant: str, params: str, n_configs: int) -> str:
    return variant if n_configs == 1 else f"{variant} {params}"


def overview(
    frame: pd.DataFrame, headlines: list[Headline], families: dict[str, str]
) -> Overview | None:
    """The overview of the ok, non-fit rows of ``frame`` (see the module docstring)."""
    stats = point_stats(frame[~frame["run_id"].str.startswith("fit-")])
    headlines = [
        h for h in headlines if ((stats["task"] == h.task) & (stats["metric"] == h.metric)).any()
    ]
    if not headlines:
        return None
    entries = stats[stats["task"].isin([h.task for h in headlines])][ENTRY].drop_duplicates()
    entries = entries.sort_values(ENTRY).set_index(ENTRY)
    configs = entries.reset_index().groupby("variant")["variant_params"].nunique()

    value_cols, rank_cols, rates = {}, {}, {}
    for h in headlines:
        points = stats[(stats["task"] == h.task) & (stats["metric"] == h.metric)]
        points = points.set_index([*ENTRY, *SETTING])
        value = points["mean"].groupby(level=ENTRY).mean()
        spread = points["spread"].groupby(level=ENTRY).mean()
        value_cols[h.task] = (value, spread)
        if h.higher_is_better is not None:
            rate = task_win_rates(points["mean"], h.higher_is_better)
            rates[h.task] = rate
            rank_cols[h.task] = _ranks(rate)
    by_task = pd.concat(rates, axis=1) if rates else pd.DataFrame()
    aggregate = by_task.mean(axis=1) if rates else pd.Series(dtype=float)
    n_tasks = by_task.notna().sum(axis=1) if rates else pd.Series(dtype=int)
    overall = _ranks(aggregate)

    columns = [
        Column("rank", "rank", "Rank by mean win rate within device and dtype", True),
        Column("variant", "variant"),
        Column("family", "family"),
        Column("device", "device"),
        Column("dtype", "dtype"),
        Column(
            "win_rate",
            "mean win rate",
            "Mean over tasks of the share of head-to-head comparisons won (ties ½)",
            True,
        ),
    ]
    for h in headlines:
        what = (
            "ranked by win rate" if h.higher_is_better is not None else "no direction: not ranked"
        )
        columns.append(
            Column(
                h.task,
                f"{h.task}: {h.metric}",
                f"{h.description} — mean over the task's settings (± spread over seeds or IQR), "
                f"#rank within the task; {what}",
                h.higher_is_better,
            )
        )
    table = Table(columns=columns)
    result = Overview(table=table)
    for key in entries.index:
        variant, params, device, dtype = key
        rank = overall.get(key, math.nan)
        rate = aggregate.get(key, math.nan)
        cells = [
            Cell(_rank_text(rank), _sort(rank), rank == 1),
            Cell(_label(variant, params, int(configs[variant])), variant),
            Cell(families.get(variant, ""), families.get(variant, "")),
            Cell(device, device),
            Cell(dtype, dtype),
            Cell(
                "–" if math.isnan(rate) else f"{rate:.3f} ({int(n_tasks.get(key, 0))} tasks)",
                _sort(rate, missing=-math.inf),
                rank == 1,
            ),
        ]
        for h in headlines:
            value, spread = value_cols[h.task]
            v, s = value.get(key, math.nan), spread.get(key, math.nan)
            r = rank_cols.get(h.task, pd.Series(dtype=float)).get(key, math.nan)
            text = format_value(v) if not math.isnan(v) else "–"
            if not math.isnan(v) and not math.isnan(s):
                text += f" ± {format_value(s)}"
            if not math.isnan(r):
                text += f" · #{int(r)}"
            # sorting by a task column sorts by its rank (values of different settings do not
            # compare); unranked tasks sort by value, in their arrow's direction if any
            cells.append(Cell(text, _sort(r) if h.task in rank_cols else _sort(v), r == 1))
        table.rows.append(cells)
        result.filters.append(
            {"device": device, "dtype": dtype, "family": families.get(variant, "")}
        )
    for name in ("device", "dtype", "family"):
        result.options[name] = sorted({f[name] for f in result.filters})
    return result


def _ranks(scores: pd.Series) -> pd.Series:
    """Rank 1 = highest score, within each device and dtype; ties share the lower rank."""
    if scores.empty:
        return scores
    groups = scores.groupby(level=["device", "dtype"])
    return groups.rank(method="min", ascending=False)


def _rank_text(rank: float) -> str:
    return "–" if math.isnan(rank) else f"#{int(rank)}"


def _sort(value: float, missing: float = math.inf) -> float:
    """Sort key; a missing value sorts last in the column's natural order."""
    return missing if value is None or math.isnan(value) else float(value)
