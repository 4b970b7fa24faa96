"""Why the chooser (`views.chooser`) leaves a variant out of its list, for every choice of budget,
machine, position and quality column: the panel names each variant it does not list, with the
first of these that holds.

- ``unsteady``: its timing here of a configuration with that quality was flagged unsteady, the
  machine busy while it ran (`harness.leaderboard.steadiness`): a value that enters no contest is
  no cost either;
- ``inaccurate``: that timing's kernel computed outside its declared error;
- ``partial``: its quality was measured in only some of the column's common settings
  (`views.chooser_quality`), so it has no value that compares;
- ``no_quality``: it has no value in this quality column at all (a library's kernel, timed only);
- ``mismatch``: it was timed here, but as another configuration than the one whose quality the
  column holds (a pattern timed at its paper's 256 tokens, trained at a fraction of n);
- ``not_here``: the cost was not measured at this position (the positions it was are named);
- ``no_cost``: the cost was never measured for it on this machine.

The limit is the page's (`over` is decided there, from the costs): everything else is here, so
that the reasons are tested as data and the page only shows them.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from attnbench.harness.leaderboard.ranking import MACHINE
from attnbench.harness.leaderboard.tables import param_text
from attnbench.harness.leaderboard.views.chooser_quality import Config, QualityColumn

CONFIG = ["variant", "variant_params"]
OK = "ok"  # a point's verdict: a trusted cost; else "unsteady" or "inaccurate"
BUSY = "unsteady"
KINDS = (BUSY, "inaccurate", "mismatch", "not_here", "no_cost", "partial", "no_quality")


@dataclass
class BudgetWords:
    """How the reasons name one budget: its cost ("per-token latency") and the unit of its
    positions ("tokens")."""

    what: str
    unit: str = ""


def left_out(
    points: pd.DataFrame,
    qualities: list[QualityColumn],
    words: list[BudgetWords],
    labels: dict[Config, str],
) -> list[list]:
    """[budget, machine, position, [quality columns], variant, kind, reason] for every variant
    the chooser does not list at that choice (see the module docstring); one entry for the
    columns that give a variant the same reason, busy machines first, then by `KINDS` and name.

    Args:
        points: One row per budget, configuration, machine and position measured: ``budget``
            (index), the `CONFIG` columns, ``machine``, ``x_value`` and ``verdict`` (`OK`,
            ``"unsteady"`` or ``"inaccurate"``: the timing there had no trusted value).
        qualities: The quality columns, in the page's order.
        words: Per budget, how to name it (`BudgetWords`).
        labels: configuration → its label on the page.
    """
    found: dict[tuple, list[int]] = {}
    for (b, machine), here in points.groupby(["budget", MACHINE], sort=True):
        timed = _variants(here)
        for x in sorted(here["x_value"].unique()):
            at_x = here[here["x_value"] == x]
            verdicts = dict(zip(map(tuple, at_x[CONFIG].values), at_x["verdict"], strict=True))
            for q, column in enumerate(qualities):
                for variant in timed | _variants_of(column):
                    why = reason(variant, verdicts, here, column, words[int(b)], labels)
                    if why is not None:
                        key = (int(b), str(machine), float(x), variant, *why)
                        found.setdefault(key, []).append(q)
    ordered = sorted(found, key=lambda k: (*k[:3], KINDS.index(k[4]), k[3], k[5]))
    return [[*k[:3], found[k], *k[3:]] for k in ordered]


def _variants(points: pd.DataFrame) -> set[str]:
    return set(points["variant"].astype(str))


def _variants_of(column: QualityColumn) -> set[str]:
    return {v for v, _ in [*column.values, *column.partial]}


def reason(
    variant: str,
    verdicts: dict[Config, str],
    measured: pd.DataFrame,
    column: QualityColumn,
    words: BudgetWords,
    labels: dict[Config, str],
) -> tuple[str, str] | None:
    """(kind, reason) why ``variant`` is not listed at a position; None where it is (one of its
    configurations has a trusted cost there and a quality in ``column``).

    Args:
        verdicts: configuration → its verdict at the position (the budget's, on this machine).
        measured: The budget's points on this machine (every position).
    """
    here = {c: v for c, v in verdicts.items() if c[0] == variant}
    quality = {c for c in column.values if c[0] == variant}
    partial = {c: n for c, n in column.partial.items() if c[0] == variant}
    if any(here.get(c) == OK for c in quality):
        return None
    for kind in (BUSY, "inaccurate"):
        if any(here.get(c) == kind for c in quality):
            return kind, _DROPPED[kind].format(what=words.what)
    if not quality:
        if partial:
            config, n = max(partial.items(), key=lambda item: item[1])
            return "partial", (
                f"its quality was measured in {n} of this column's {column.n_settings} settings"
                + _as(config, labels, partial)
            )
        return "no_quality", "no value in this quality column"
    if here:
        return "mismatch", (
            f"timed here as {_configs(here, labels)}, but its quality is of "
            f"{_configs(quality, labels)}: another configuration"
        )
    return _unmeasured(variant, measured, words)


_DROPPED = {
    BUSY: "its {what} here was timed while the machine was busy: unsteady, left out",
    "inaccurate": "its timed kernel here computed outside its declared error: left out",
}


def _as(config: Config, labels: dict[Config, str], partial: dict[Config, int]) -> str:
    """ " (as window=0.2n)" where the variant has several configurations, else ""."""
    return f" (as {labels.get(config, config[0])})" if len(partial) > 1 else ""


def _configs(configs, labels: dict[Config, str]) -> str:
    return " and ".join(sorted(f"“{labels.get(c, c[0])}”" for c in configs))


def _unmeasured(variant: str, measured: pd.DataFrame, words: BudgetWords) -> tuple[str, str]:
    """Where the variant's cost was not measured at this position: the positions it was
    measured at on this machine, or that it never was."""
    mine = measured[measured["variant"] == variant]
    if mine.empty:
        return "no_cost", f"its {words.what} was not measured on this machine"
    xs = sorted(mine["x_value"].unique())
    shown = ", ".join(param_text(float(x)) for x in xs) + (f" {words.unit}" if words.unit else "")
    return "not_here", f"its {words.what} was not measured here (only at {shown})"
