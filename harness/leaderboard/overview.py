"""The overview table: one row per variant (per machine and dtype), one column per task's headline
(or per value of a task's ``column_by`` parameter: `harness.leaderboard.columns`).

Rendering only: the numbers (values, spreads, win rates, ranks) come from
`harness.leaderboard.ranking.standings`; this module turns them into cells with text, sort keys
and the marks of the best entries, plus the attributes the page filters rows on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from attnbench.harness.leaderboard.columns import with_batteries
from attnbench.harness.leaderboard.ranking import Headline, Standings, standings
from attnbench.harness.leaderboard.tables import (
    UNSTEADY_MARK,
    Cell,
    Column,
    Table,
    config_labels,
    distinct_headers,
    size_params_of,
)


@dataclass
class Overview:
    """The overview table plus, per row, the attributes the page filters on."""

    table: Table
    filters: list[dict[str, str]] = field(default_factory=list)  # machine, dtype, family per row
    options: dict[str, list[str]] = field(default_factory=dict)  # distinct values per filter
    rule: str = ""  # how the ranks are made, in words, shown above the table


def overview(
    frame: pd.DataFrame, headlines: list[Headline], families: dict[str, str]
) -> Overview | None:
    """The overview of the ok run rows of ``frame``; None when no headline has results."""
    computed = standings(frame, headlines)
    if computed is None:
        return None
    ordered = with_batteries(computed, _column_order(computed.headlines))
    labels = config_labels(computed.entries.to_frame(index=False), size_params_of(frame))
    result = Overview(table=Table(columns=_columns(ordered, computed.no_vote)))
    for key in _row_order(computed):
        variant, _, machine, dtype = key
        family = families.get(variant, "")
        result.table.rows.append(_row(computed, key, labels, ordered, family))
        result.filters.append({"machine": machine, "dtype": dtype, "family": family})
    for name in ("machine", "dtype", "family"):
        result.options[name] = sorted({f[name] for f in result.filters})
    result.rule = _rule(computed, [h for h in ordered if h.cost])
    return result


def _column_order(headlines: list[Headline]) -> list[Headline]:
    """Ranked quality columns, then the cost, then what has no direction (shown, not ranked):
    the columns the ranks are made of come first, so that they fit a 1400 px window."""
    quality = [h for h in headlines if not h.cost and h.higher_is_better is not None]
    cost = [h for h in headlines if h.cost]
    unranked = [h for h in headlines if not h.cost and h.higher_is_better is None]
    return [*quality, *cost, *unranked]


def _columns(ordered: list[Headline], no_vote: dict[str, str] | None = None) -> list[Column]:
    """The overview's columns: rank, variant and win rate, a column per headline (in the order
    of ``ordered``; ``no_vote``: column → why it casts no vote), then the row's attributes; no
    two of one title (a clash names the columns' tasks, `distinct_headers`)."""
    columns = [
        Column("rank", "quality rank", _RANK_HELP, True),
        Column("variant", "variant"),
        Column(
            "win_rate",
            "quality win rate",
            "Mean over the quality tasks (one vote each) of the share of head-to-head comparisons "
            "won (ties ½); (k of n): ranked in k of the n quality columns the rank compares",
            True,
        ),
        *[_headline_column(h, (no_vote or {}).get(h.task, "")) for h in ordered],
        Column("family", "family"),
        Column(
            "machine",
            "machine",
            "Hardware (CPU model or GPU); timings compete only at equal threads",
        ),
        Column("dtype", "dtype"),
    ]
    distinct_headers(columns, lambda col: [f" ({col.key})"])
    return columns


def _headline_column(h: Headline, no_vote: str = "") -> Column:
    """A task's column: its headline, where it is taken, and how it is ranked (``no_vote``: why
    it casts no vote in the quality rank, "" where it votes)."""
    if h.members:  # a battery's mean (`columns.with_batteries`)
        what = "not ranked: its tasks vote in the rank on their own"
        return Column(h.task, h.label, f"{h.description}; {what}", h.higher_is_better)
    what = "ranked by win rate" if h.higher_is_better is not None else "no direction: not ranked"
    if h.cost:
        what += "; a cost: ranked on its own, never averaged into the quality rank"
    if h.steady_flag or h.accuracy_flag:
        judged = "unsteady or inaccurate" if h.accuracy_flag else "unsteady"
        what += f"; {UNSTEADY_MARK}: {judged} timings left out (hover the cell)"
    if h.converge_flag:
        what += f"; {UNSTEADY_MARK}: runs still learning at their cap left out (hover the cell)"
    if no_vote:
        what += f"; NO VOTE in the quality rank: {no_vote}, so it does not separate the variants"
    where = (
        f"at {h.at} (the size measured for the most variants), mean over the task's other settings"
        if h.at
        else "mean over the task's settings"
    )
    return Column(
        h.task,
        (h.label or f"{h.task}: {h.metric}")
        + (f" @ {h.at}" if h.at else "")
        + (" (no vote)" if no_vote else ""),
        f"{h.description} — {where} (± spread over seeds or IQR), #rank within the task; {what}",
        h.higher_is_better,
    )


def _row_order(computed: Standings) -> list[tuple]:
    """The entries in row order: the ranked ones by rank, then the rest by win rate."""

    def order(key: tuple) -> tuple:
        rank, rate = computed.overall.get(key, math.nan), computed.aggregate.get(key, math.nan)
        return (_sort(rank), -_sort(rate, missing=-math.inf), key)

    return sorted(computed.entries, key=order)


def _row(
    computed: Standings,
    key: tuple,
    labels: dict[tuple[str, str], str],
    ordered: list[Headline],
    family: str,
) -> list[Cell]:
    """The cells of one entry's row (columns as `_columns`)."""
    variant, params, machine, dtype = key
    rank = computed.overall.get(key, math.nan)
    rate = computed.aggregate.get(key, math.nan)
    return [
        Cell(_rank_text(rank), _sort(rank), rank == 1, note=_unranked_note(computed, key)),
        Cell(labels[(variant, params)], variant),
        Cell(
            "–" if math.isnan(rate) else f"{rate:.3f}" + _columns_text(computed, key),
            _sort(rate, missing=-math.inf),
            rank == 1,
        ),
        *[_headline_cell(computed, h, key) for h in ordered],
        Cell(family, family),
        Cell(machine, machine),
        Cell(dtype, dtype),
    ]


def _headline_cell(computed: Standings, h: Headline, key: tuple) -> Cell:
    """An entry's cell in the column of ``h``: value ± spread · #rank, marked where timings were
    left out."""
    value, spread = computed.values[h.task]
    v, s = value.get(key, math.nan), spread.get(key, math.nan)
    r = computed.task_ranks.get(h.task, pd.Series(dtype=float)).get(key, math.nan)
    # three figures here (the task tables keep four): the overview must fit 1400 px
    text = f"{v:.3g}" if not math.isnan(v) else "–"
    if not math.isnan(v) and not math.isnan(s):
        text += f" ± {s:.2g}"  # a spread needs two figures, and the column less width
    if not math.isnan(r):
        text += f" · #{int(r)}"
    note = _unsteady_note(computed, h, key)
    if note:
        text = UNSTEADY_MARK + text
    # sorting by a task column sorts by its rank (values of different settings do not
    # compare); unranked tasks sort by value, in their arrow's direction if any
    ranked = h.task in computed.task_ranks
    return Cell(text, _sort(r) if ranked else _sort(v), r == 1, note=note)


_RANK_HELP = (
    "Rank by the mean win rate over one set of quality columns, among the rows ranked in all of "
    "them (the rule above the table); cost is ranked in its own column"
)


def _rule(computed: Standings, cost: list[Headline]) -> str:
    """The sentence above the overview saying how its ranks are made, naming the columns."""
    compared = sorted({cols for cols in computed.compared.values()})
    if not compared and computed.no_vote:
        text = (
            "No quality column votes (each one's header says why: one seed per value, all "
            "variants tied, at chance or at the ceiling, or still learning), so there is no "
            "quality rank."
        )
    elif not compared:
        text = "No quality column has two entries in a contest, so there is no quality rank."
    else:
        words = {h.task: (h.label or h.task).split(":")[0] for h in computed.headlines}
        names = "; ".join(", ".join(words.get(c, c) for c in cols) for cols in compared)
        text = (
            f"Quality rank: the mean win rate over the quality columns ({names}), given only to "
            "the rows ranked in all of them on the same machine and dtype, so that every ranked "
            "row competed on the same tasks. Those columns are the set on which the rank rests "
            "on the most results (rows × columns); a ranked row's other quality columns keep "
            "their own ranks, and a row not ranked in all of them (a kernel timed but never "
            "trained, a failed task, a value still learning) shows its per-column ranks only."
        )
    if cost:
        text += (
            " Cost ("
            + ", ".join(
                (h.label or f"{h.task}: {h.metric}") + (f" at {h.at}" if h.at else "") for h in cost
            )
            + ") is ranked in its "
            "own column and never averaged with quality: one number would have to invent an "
            "exchange rate between them. Quality against cost is drawn below, for you to judge."
        )
    return text + (
        " A win must exceed two combined standard errors (over seeds, or half the timing's "
        f"IQR), else it is a tie; timings marked {UNSTEADY_MARK} enter no contest."
    )


def _columns_text(computed: Standings, key: tuple) -> str:
    """ " (k of n)" after a win rate that does not average the compared columns (the header's
    description says what k and n count)."""
    cols = set(computed.ranked_in.get(key, ()))
    want = computed.compared_for(key)
    shared = [c for c in want if c in cols]
    return "" if len(shared) == len(want) else f" ({len(shared)} of {len(want)})"


def _unranked_note(computed: Standings, key: tuple) -> str:
    """Why a row has no quality rank (hover of its rank cell); "" when it has one."""
    if key in computed.overall.index:
        return ""
    cols = tuple(computed.ranked_in.get(key, ()))
    want = computed.compared_for(key)
    if not want:
        return ""
    if not cols:
        return "no quality rank: this row was ranked in no quality column"
    missing = ", ".join(c for c in want if c not in cols)
    return f"no quality rank: not ranked in {missing}; the rank compares rows ranked in all of them"


def _unsteady_note(computed: Standings, h: Headline, key: tuple) -> str:
    """The hover note of an entry's cell in a task column that had timings left out (unsteady,
    or of a kernel outside its error tolerance where the task judges that), else ""."""
    task = h.task
    left_out = int(computed.unsteady.get(task, pd.Series(dtype=int)).get(key, 0))
    if not left_out:
        return ""
    if h.converge_flag and not (h.steady_flag or h.accuracy_flag):
        runs = f"{left_out} value{'s' if left_out != 1 else ''} of runs still learning at their cap"
        why = "the validation accuracy still rose over the last doubling of training"
        if computed.steady_values.get(task, pd.Series(dtype=int)).get(key, 0):
            return f"{runs} left out of this value and its rank ({why})"
        return f"only {runs} here ({why}): shown, not ranked"
    kind = "untrusted" if h.accuracy_flag else "unsteady"
    timings = f"{left_out} {kind} timing{'s' if left_out != 1 else ''}"
    why = "their samples never settled, or the machine was busy"
    if h.accuracy_flag:
        why += ", or the kernel erred beyond its declared tolerance"
    why += ": the records say which"
    if computed.steady_values.get(task, pd.Series(dtype=int)).get(key, 0):
        return f"{timings} left out of this value and its rank ({why})"
    return f"only {timings} here ({why}): shown, not ranked"


def _rank_text(rank: float) -> str:
    return "–" if math.isnan(rank) else f"#{int(rank)}"


def _sort(value: float, missing: float = math.inf) -> float:
    """Sort key; a missing value sorts last in the column's natural order."""
    return missing if value is None or math.isnan(value) else float(value)
