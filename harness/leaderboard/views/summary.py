"""The summary at the top of the page: the best variant of each overview column (per machine), and
per budget the chooser offers (`views.chooser.budget_metrics`: those a task declares, e.g. the
time per generated token, else its timings) the cheapest and the dearest variant at the smallest
and the largest size measured, with the ratio between them: the answer of a decode table ("at
32k of context, linear state decodes 100× cheaper per token than a KV cache") in one line per
regime. Read off the overview and the chooser's data, so it says nothing they do not.
"""

from __future__ import annotations

from dataclasses import dataclass

from attnbench.harness.leaderboard.overview import Overview

FIRST_COLUMN = 3  # rank, variant, win rate, then the headline columns


@dataclass
class Line:
    """One line of the summary: what it answers, where, and the answer."""

    what: str
    where: str
    answer: str


def best_per_column(overview: Overview | None) -> list[Line]:
    """Per ranked headline column and machine, the rows whose cell is the column's best (its
    rank #1, ties all named), with their values."""
    if overview is None:
        return []
    lines = []
    columns = overview.table.columns
    for j in range(FIRST_COLUMN, len(columns)):
        if columns[j].higher_is_better is None:
            continue
        best: dict[str, list[str]] = {}
        for row, filters in zip(overview.table.rows, overview.filters, strict=True):
            if row[j].best:
                value = row[j].text.split(" · #")[0]
                best.setdefault(filters["machine"], []).append(f"{row[1].text} ({value})")
        for machine, names in sorted(best.items()):
            what = f"{columns[j].header} {columns[j].arrow}"
            lines.append(Line(what, machine, ", ".join(names)))
    return lines


def _shown(value: float, unit: str) -> str:
    if unit == "B":
        for prefix in ("B", "KiB", "MiB", "GiB"):
            if value < 1024 or prefix == "GiB":
                return f"{value:.3g} {prefix}"
            value /= 1024
    return f"{value:.3g} {unit}".strip()


def _times(ratio: float) -> str:
    """ "4.11", "431", "2,048": three figures, whole numbers from a thousand on."""
    return f"{ratio:.3g}" if ratio < 1000 else f"{ratio:,.0f}"


def cost_regimes(chooser: dict | None) -> list[Line]:
    """Per budget and machine, at its smallest and largest position: the cheapest and the
    dearest configuration the chooser lists (those whose quality and cost are of one
    configuration), and how many times dearer."""
    if not chooser:
        return []
    lines = []
    for b, budget in enumerate(chooser["budgets"]):
        for machine in chooser["machines"]:
            rows = [c for c in chooser["cost"] if c[0] == b and c[1] == machine]
            positions = sorted({c[2] for c in rows})
            for x in dict.fromkeys([positions[0], positions[-1]] if positions else []):
                at = sorted((c[4], chooser["configs"][c[3]]) for c in rows if c[2] == x)
                (low, cheap), (high, dear) = at[0], at[-1]
                times = f", {_times(high / low)}× the cheapest" if low > 0 else ""
                answer = (
                    f"cheapest {cheap} ({_shown(low, budget['unit'])}); dearest {dear} "
                    f"({_shown(high, budget['unit'])}{times})"
                )
                name, unit = budget["position"]
                what = f"{budget['label']} at {name} {x:g} {unit}".rstrip()
                lines.append(Line(what, machine, answer))
    return lines
