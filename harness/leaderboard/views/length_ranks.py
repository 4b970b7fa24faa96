"""Cost ranks at the smallest and the largest size measured, side by side.

At 128 tokens the set-up of a call (launches, allocations, the Python around a kernel) weighs
more than the kernel; at 4k the kernel is all. The ranking of variants by a cost can flip
between the two (flash-attention #2317: FlashAttention-4 slower than FlashAttention-2 at 128
tokens), and a reader who runs short batches must not read the ranking of long ones. So, per
budget the chooser offers (`views.chooser.cost_points`: a task's declared budgets or its
timings, one budget per setting apart from the curve axis) and machine measured at two
positions or more: every configuration with a trusted cost at both ends, its value and rank at
the smallest and at the largest position, and how far its rank moved. Ties share the better
rank. The values are the chooser's (medians of the trusted values), so the two never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from attnbench.harness.leaderboard.ranking import MACHINE
from attnbench.harness.leaderboard.tables import (
    Cell,
    Column,
    Table,
    config_labels,
    format_value,
    size_params_of,
)
from attnbench.harness.leaderboard.views.chooser import CONFIG, cost_points
from attnbench.harness.leaderboard.views.chooser_reasons import OK
from attnbench.task_info import TaskInfo


@dataclass
class RankTable:
    """One budget on one machine: what it ranks, where, and the table."""

    title: str
    machine: str
    table: Table


def _at(x: float, position: list) -> str:
    name, unit = position
    return f"{name} {x:g} {unit}".strip()


def _moved(before: int, after: int) -> Cell:
    """The rank's move from the smallest to the largest size: "↑ 3" better, "↓ 2" worse."""
    if after == before:
        return Cell("=", 0)
    return Cell(f"{'↑' if after < before else '↓'} {abs(after - before)}", before - after)


def cost_ranks(frame: pd.DataFrame, infos: dict[str, TaskInfo]) -> list[RankTable]:
    """The tables of the module docstring for the rows a page shows (``frame``, judged for
    steadiness) and their tasks' declarations ``infos``."""
    if frame.empty:
        return []
    budgets, _, points = cost_points(frame, infos)
    if points.empty:
        return []
    configs = sorted(set(map(tuple, points[CONFIG].values)))
    labels = config_labels(pd.DataFrame(configs, columns=CONFIG), size_params_of(frame))
    return length_ranks(budgets, points, labels)


def length_ranks(
    budgets: list[dict], points: pd.DataFrame, labels: dict[tuple[str, str], str]
) -> list[RankTable]:
    """The tables of the module docstring from the chooser's ``budgets`` and ``points`` (one row
    per budget, configuration, machine and position, with ``value`` and ``verdict``) and the
    configurations' ``labels``; none where no budget has two positions."""
    if points.empty:
        return []
    trusted = points[points["verdict"] == OK]
    tables = []
    for (b, machine), rows in trusted.groupby(["budget", MACHINE]):
        xs = sorted(rows["x_value"].unique())
        if len(xs) < 2:
            continue
        budget = budgets[int(b)]
        ends = rows[rows["x_value"].isin([xs[0], xs[-1]])]
        wide = ends.pivot_table(index=CONFIG, columns="x_value", values="value").dropna()
        if len(wide) < 2:
            continue
        small, large = wide[xs[0]], wide[xs[-1]]
        rank_small = small.rank(method="min").astype(int)
        rank_large = large.rank(method="min").astype(int)
        unit = budget["unit"]
        columns = [
            Column("config", "variant"),
            Column("small", f"{_at(xs[0], budget['position'])} ({unit})", higher_is_better=False),
            Column("rank_small", f"rank at {xs[0]:g}"),
            Column("large", f"{_at(xs[-1], budget['position'])} ({unit})", higher_is_better=False),
            Column("rank_large", f"rank at {xs[-1]:g}"),
            Column(
                "moved",
                "rank moved",
                "how many places the rank rose (↑) or fell (↓) from the smallest size to the "
                "largest",
            ),
        ]
        table = Table(columns)
        for config in large.sort_values().index:
            a, z = int(rank_small[config]), int(rank_large[config])
            table.rows.append(
                [
                    Cell(labels.get(config, config[0]), labels.get(config, config[0])),
                    Cell(format_value(small[config]), float(small[config]), best=a == 1),
                    Cell(f"#{a}", a),
                    Cell(format_value(large[config]), float(large[config]), best=z == 1),
                    Cell(f"#{z}", z),
                    _moved(a, z),
                ]
            )
        tables.append(RankTable(budget["label"], str(machine), table))
    return tables
