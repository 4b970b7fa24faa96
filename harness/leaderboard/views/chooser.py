""" "Which attention for my case": the reader picks a machine, a cost to budget (a task's declared
`TaskInfo.budgets`, e.g. the time per generated token or the state a sequence holds), a position
on its curve axis (e.g. the context length), a limit and a quality column; the page lists the
variants within the limit, best quality first, and marks those on the quality–cost frontier
(no other listed variant is at least as good for at most the cost).

Built here as data (`chooser_data`), drawn by the page's static JavaScript: no server, works from
``file://``. Every value comes from the rows the rest of the page shows:

- **cost**: per configuration (variant and its parameters), machine and curve position, the
  median over runs of the budget metric; values its task flags unsteady or inaccurate
  (`harness.leaderboard.steadiness`) are left out, as in every contest;
- **quality**: per configuration, the mean of a ranked quality column's headline over its runs
  (the overview's columns, `harness.leaderboard.columns`).

A configuration is listed only where both were measured *for that configuration* (the same
variant parameters): a quality of one setting is never paired with the cost of another under one
name. The panel says how many configurations it leaves out for want of one or the other.
"""

from __future__ import annotations

import json

import pandas as pd

from attnbench.harness.leaderboard.columns import Columns
from attnbench.harness.leaderboard.ranking import MACHINE
from attnbench.harness.leaderboard.steadiness import untrusted
from attnbench.harness.leaderboard.tables import config_labels, size_params_of
from attnbench.task_info import TaskInfo

CONFIG = ["variant", "variant_params"]


def _ok(frame: pd.DataFrame) -> pd.DataFrame:
    done = (frame["status"] == "ok") & ~frame["derived"].astype(bool)
    return frame[done & frame["metric"].notna()]


def _budgets(ok: pd.DataFrame, infos: dict[str, TaskInfo]) -> tuple[list[dict], pd.DataFrame]:
    """The budget metrics with results (label, unit, axis) and their cost rows: one per budget,
    configuration, machine and curve position, the median of its trusted values."""
    budgets, costs = [], []
    for task, info in sorted(infos.items()):
        mine = ok[ok["task"] == task]
        trusted = mine[~untrusted(mine)]
        for metric in info.budgets:
            rows = trusted[(trusted["metric"] == metric) & trusted["x_value"].notna()]
            if rows.empty:
                continue
            x_name = rows["x_name"].iloc[0]
            rows = rows[rows["x_name"] == x_name]
            declared = info.metric(metric)
            axis = next((a for a in info.axes if a.name == x_name), None)
            budgets.append(
                {
                    "label": f"{info.title}: {info.metric_title(metric)}",
                    "unit": declared.unit if declared else "",
                    "axis": info.axis_title(x_name),
                    "position": [axis.title, axis.unit] if axis else [x_name, ""],
                }
            )
            median = rows.groupby([*CONFIG, MACHINE, "x_value"])["value"].median()
            costs.append(median.reset_index().assign(budget=len(budgets) - 1))
    return budgets, pd.concat(costs, ignore_index=True) if costs else pd.DataFrame()


def _qualities(columns: Columns) -> tuple[list[dict], pd.DataFrame]:
    """The ranked quality columns (label, direction) and each configuration's mean headline."""
    ok = _ok(columns.frame)
    qualities, values = [], []
    for h in columns.headlines:
        if h.cost or h.higher_is_better is None:
            continue
        rows = ok[(ok["task"] == h.task) & (ok["metric"] == h.metric)]
        if rows.empty:
            continue
        qualities.append(
            {"label": h.label or f"{h.task}: {h.metric}", "higher": h.higher_is_better}
        )
        mean = rows.groupby(CONFIG)["value"].mean().reset_index()
        values.append(mean.assign(quality=len(qualities) - 1))
    return qualities, pd.concat(values, ignore_index=True) if values else pd.DataFrame()


def chooser_data(frame: pd.DataFrame, columns: Columns, infos: dict[str, TaskInfo]) -> dict | None:
    """The panel's data (see the module docstring); None where no configuration has both a
    budget metric and a quality value."""
    if frame.empty:
        return None
    budgets, costs = _budgets(_ok(frame), infos)
    qualities, values = _qualities(columns)
    if costs.empty or values.empty:
        return None
    both = set(map(tuple, costs[CONFIG].values)) & set(map(tuple, values[CONFIG].values))
    if not both:
        return None
    configs = sorted(both)
    labels = config_labels(pd.DataFrame(configs, columns=CONFIG), size_params_of(frame))
    index = {c: i for i, c in enumerate(configs)}
    left_out = {"no_cost": _count(values, both), "no_quality": _count(costs, both)}
    costs = costs[[tuple(c) in index for c in costs[CONFIG].values]]
    quality: list[dict[str, float]] = [{} for _ in qualities]
    for row in values.itertuples(index=False):
        if (row.variant, row.variant_params) in index:
            quality[row.quality][str(index[(row.variant, row.variant_params)])] = float(row.value)
    return {
        "budgets": budgets,
        "qualities": qualities,
        "configs": [labels[c] for c in configs],
        "quality": quality,
        "machines": sorted(costs[MACHINE].unique().tolist()),
        "cost": [
            [
                int(r.budget),
                str(getattr(r, MACHINE)),
                float(r.x_value),
                index[(r.variant, r.variant_params)],
                float(r.value),
            ]
            for r in costs.itertuples(index=False)
        ],
        "left_out": left_out,
    }


def _count(rows: pd.DataFrame, both: set) -> int:
    """How many configurations of ``rows`` are not among ``both``."""
    return len(set(map(tuple, rows[CONFIG].values)) - both)


def embeddable(data: dict) -> str:
    """``data`` as JSON safe inside a <script> element: ``<``, ``>`` and ``&`` as ``\\u``
    escapes, so that no name in it can end the element (the page sets it as text, never as
    markup)."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
