"""The overview's columns: one per task, or one per value of a task's ``column_by`` parameter.

A task whose parameter values measure different things (`TaskInfo.column_by`, e.g. a mode that
trains another model on another problem) must not have them averaged into one number. Rather
than teaching the ranking about modes, the rows of such a task are relabelled with their column,
``task (value)``, before ranking: each column is then a task of its own for
`harness.leaderboard.ranking.standings`. Contests are per setting anyway, so only the columns'
values, their win rates and the aggregate over columns change; the quality-against-cost charts
split the same way. The task sections of the page keep the real task names.

**A cost column is at one stated size.** A cost measured along a curve axis (throughput's ratio
at each sequence length, decode's at each context) is not averaged over the axis: a mean of
per-token costs at 1k and 32k tokens of context describes neither, and it would change with
whichever sizes a sweep happened to run. The column keeps the rows at one position,
`stated_position` (the one measured for the most variants, the largest of ties), names it in its
header, and the quality-against-cost charts use the same position.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pandas as pd

from attnbench.harness.leaderboard.ranking import Headline, Standings
from attnbench.harness.leaderboard.tables import Words
from attnbench.task_info import TaskInfo


@dataclass
class Columns:
    """The overview's columns and the rows they are computed from.

    Attributes:
        frame: The rows, with ``task`` replaced by the column name for tasks that split.
        headlines: One per column that has a headline, in column order.
        task_of: column name → the task it belongs to.
    """

    frame: pd.DataFrame
    headlines: list[Headline] = field(default_factory=list)
    task_of: dict[str, str] = field(default_factory=dict)


def column_name(task: str, value: object) -> str:
    """The overview column of a split task's rows whose parameter has ``value``."""
    return f"{task} ({_text(value)})"


def _text(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _values(task_params: pd.Series, key: str) -> pd.Series:
    """Each row's value of the task parameter ``key`` (None where a record lacks it); each
    distinct JSON text is parsed once."""
    parsed = {text: json.loads(text).get(key) for text in task_params.dropna().unique()}
    return task_params.map(parsed)


def stated_position(rows: pd.DataFrame) -> tuple[str, float] | None:
    """(axis, value) of the curve position at which the most variants have ok rows among
    ``rows`` (one metric's), the largest value of ties; None for a metric without a curve axis."""
    along = rows[rows["x_value"].notna() & (rows["status"] == "ok")]
    if "derived" in along:
        along = along[~along["derived"].astype(bool)]
    if along.empty:
        return None
    x_name = along["x_name"].iloc[0]
    counts = along[along["x_name"] == x_name].groupby("x_value")["variant"].nunique()
    return x_name, float(counts[counts == counts.max()].index.max())


def position_text(info: TaskInfo, x_name: str, x_value: float) -> str:
    """A curve position as the task names its axis: "context length 4096 tokens" where it
    declares the axis (`TaskInfo.axes`), else the axis in words, "sequence length 4096"."""
    return Words(info).setting(x_name, x_value)


def _at_stated_position(
    frame: pd.DataFrame, task: str, metric: str, info: TaskInfo
) -> tuple[pd.DataFrame, str]:
    """``frame`` without the rows of ``task`` at other positions of ``metric``'s curve axis
    than `stated_position` (rows of other tasks and the task's scalars kept), and the position
    as `position_text` names it ("" when the metric has no axis)."""
    mine = frame["task"] == task
    position = stated_position(frame[mine & (frame["metric"] == metric)])
    if position is None:
        return frame, ""
    x_name, x_value = position
    elsewhere = mine & (frame["x_name"] == x_name) & (frame["x_value"] != x_value)
    return frame[~elsewhere], position_text(info, x_name, x_value)


def _headline(
    task: str, info: TaskInfo, metric_name: str, where: str = "", group: str = ""
) -> Headline:
    metric = info.metric(metric_name)
    description = metric.description if metric else ""
    # a split column keeps its " (value)", in words: a mode's identifier ("one_layer") is what
    # the command line takes, the page reads "one layer"
    title = info.title + task.removeprefix(info.name).replace("_", " ")
    return Headline(
        task,
        metric_name,
        metric.higher_is_better if metric else None,
        f"{description} ({where})" if where else description,
        steady_flag=info.steadiness.get(metric_name, ""),
        accuracy_flag=info.accuracy.get(metric_name, ""),
        converge_flag=info.convergence.get(metric_name, ""),
        chance_metric=info.chance_metric if metric_name == info.headline else "",
        ceiling=info.ceiling if metric_name == info.headline else None,
        trained=bool(info.convergence) or bool(info.tuning and info.tuning.params),
        cost=bool(info.cost_metric) and metric_name == info.cost_metric,
        group=group,
        label=f"{title}: {Words(info).metric(metric_name)}",
        battery=info.battery,
    )


def overview_columns(frame: pd.DataFrame, infos: dict[str, TaskInfo]) -> Columns:
    """The columns of ``frame``'s tasks (by name) with the rows relabelled for them.

    A task without a description or a headline has no column. A split task's rows that lack
    the parameter (records from before it existed) stay in the task's own column.
    """
    if frame.empty:
        return Columns(frame)
    task_col = frame["task"].copy()
    result = Columns(frame)
    for task in sorted(frame["task"].dropna().unique()):
        info = infos.get(task)
        if info is None or not (info.headline or info.column_headlines):
            continue
        if not info.column_by:
            if info.headline:
                headline = _headline(task, info, info.headline)
                if headline.cost:
                    frame, headline.at = _at_stated_position(frame, task, info.headline, info)
                    task_col = task_col.loc[frame.index]
                result.headlines.append(headline)
                result.task_of[task] = task
            continue
        mine = frame["task"] == task
        values = _values(frame.loc[mine, "task_params"], info.column_by)
        present = {_text(v): v for v in values.dropna().unique()}
        if values.isna().any() and info.headline:  # rows without the parameter
            result.headlines.append(_headline(task, info, info.headline))
            result.task_of[task] = task
        for text in sorted(present):
            name = column_name(task, present[text])
            metric = info.column_headlines.get(text, info.headline)
            if not metric:
                continue
            where = f"{info.column_by}={text}"
            result.headlines.append(_headline(name, info, metric, where, group=task))
            result.task_of[name] = task
        split = values.notna()
        task_col.loc[split[split].index] = values[split].map(lambda v, t=task: column_name(t, v))
    result.frame = frame.assign(task=task_col)
    return result


def with_batteries(computed: Standings, ordered: list[Headline]) -> list[Headline]:
    """``ordered`` with one column per battery (`TaskInfo.battery`, e.g. MAD's six tasks) of two
    or more ranked quality columns, placed after its last member: per entry, the mean of the
    members' values (each already the mean over its task's settings, as MAD averages its
    difficulty levels), only where the entry has a value in every member (an average over the
    tasks a variant happened to run would not compare). Its values go into ``computed.values``
    under the column's name; it is shown, not ranked: its members already vote in the rank.
    """
    members: dict[str, list[Headline]] = {}
    for h in ordered:
        if h.battery and not h.cost and h.higher_is_better is not None:
            members.setdefault(h.battery, []).append(h)
    out = list(ordered)
    for battery, group in sorted(members.items()):
        if len(group) < 2 or len({h.higher_is_better for h in group}) > 1:
            continue
        name = f"{battery} (mean of {len(group)})"
        table = pd.concat([computed.values[h.task][0] for h in group], axis=1)
        computed.values[name] = (table.mean(axis=1, skipna=False), pd.Series(dtype=float))
        metrics = "/".join(sorted({h.metric for h in group}))
        named = "/".join(sorted({_metric_words(h) for h in group}))
        column = Headline(
            name,
            metrics,
            group[0].higher_is_better,
            f"Mean of the {battery} battery's {len(group)} columns' {metrics} (each the mean "
            f"over its settings), where a row has all of them: " + ", ".join(h.task for h in group),
            label=f"{battery.upper()}: mean {named} of {len(group)} tasks",
            battery=battery,
            members=tuple(h.task for h in group),
        )
        out.insert(out.index(group[-1]) + 1, column)
    return out


def _metric_words(h: Headline) -> str:
    """The metric of a column as its label names it (`_headline`: "<task title>: <metric>")."""
    return h.label.partition(": ")[2] or h.metric
