"""Ours vs theirs: each of our variants beside the library implementations of the same maths.

A variant from a library (an adapter of a peer implementation) says so in its records: the
table's ``variant_library`` column holds "<distribution> <version>" (empty for our own variants)
and ``peer_of`` names our variant with the same maths (empty for a library variant with no
counterpart here). The board finds the pairs from these two columns only; it names no variant.

What is compared, per task, comes from the task's own declarations (`attnbench.task_info`):
- a task that measures a cost (it declares ``cost_metric``, e.g. latency) is compared as a
  *ratio* ours / peer of its headline and its charted metrics (the ones with a direction), per
  task setting: below 1 means ours is lower (faster, less memory) for a lower-is-better metric;
- any other task (quality: accuracy, loss) is compared on its headline, the two values side by
  side, with the difference ours − peer as the sort key (a ratio of accuracies reads badly).

Same run only: a pair of values is made only from rows of the same machine (hardware,
`ranking.machine_labels`) and thread count, the same host, dtype, task parameters and curve
position, so that both were measured under the same conditions, in practice in the same sweep.
Ratios across machines are never made. Only current rows count (records of the installed code,
collection's ``current``), and where a job has several (several sweeps, a record of unknown code
beside a newer one), the newest record of each seed. Seeds are averaged on each side before the
ratio.
A value from a timing its run flagged unsteady, or of a kernel outside its tolerance
(`harness.leaderboard.steadiness`), is marked, with a note, on either side of a pair.
Variant parameters pair where they agree on the names both sides have (a parameter only one side
has says nothing about the other); a side with several configurations in a task is labelled with
its parameters.

A library variant whose library or device is missing here writes an ``unsupported`` record with
a one-sentence reason. That is the library being unavailable on this machine, not a failure: the
section lists it as "unavailable here" with its reason, and the page keeps it out of the table of
runs that did not finish (`unavailable`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import pandas as pd

from attnbench.harness.leaderboard.ranking import MACHINE, THREADS, machine_labels
from attnbench.harness.leaderboard.steadiness import untrusted
from attnbench.harness.leaderboard.tables import (
    UNSTEADY_MARK,
    Cell,
    Column,
    Table,
    expand_params,
    format_value,
    key_columns,
    varying,
)
from attnbench.task_info import TaskInfo

PEER_OF = "peer_of"  # column: our variant with the same maths ("" for none)
LIBRARY = "variant_library"  # column: "<distribution> <version>" ("" for our own variants)
OURS = "attnbench"  # the library our own variants are named with
HOST = "host"  # working column: hostname, "" when unknown
# a value measured per job: one pair of values per (setting, curve position) and metric
POINT = [MACHINE, THREADS, HOST, "dtype", "task_params", "metric", "x_name", "x_value"]


@dataclass
class PairTable:
    """One task's comparison: the table and a line saying how to read it."""

    task: str
    how: str  # "ratio" (ours / peer) or "side by side"
    note: str
    table: Table


@dataclass
class PeerSection:
    """The "Ours vs theirs" section: a table per task, the unavailable peers, loose ends."""

    tables: list[PairTable] = field(default_factory=list)
    unavailable: Table | None = None  # library variants that could not run here, with why
    unpaired: list[str] = field(default_factory=list)  # pairs with no shared setting, one line each


def _text(column: pd.Series) -> pd.Series:
    """A text column with missing values (older records, CSV, derived rows) as ""."""
    return column.map(lambda v: "" if v is None or v != v else str(v))


def libraries(frame: pd.DataFrame) -> dict[str, str]:
    """variant → its library and version ("local-attention 1.11.2"), for library variants only;
    several versions in one table are all named."""
    if LIBRARY not in frame or frame.empty:
        return {}
    lib = _text(frame[LIBRARY])
    named = frame.assign(**{LIBRARY: lib})[lib != ""]
    return {
        str(variant): ", ".join(sorted(set(group)))
        for variant, group in named.groupby("variant")[LIBRARY]
    }


def labelled(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with each library variant's name followed by its library, "peer_x (lib 1.0)",
    so that every table and chart of the page says whose implementation a row is."""
    names = libraries(frame)
    if not names:
        return frame
    label = frame["variant"].map(lambda v: f"{v} ({names[v]})" if v in names else v)
    return frame.assign(variant=label)


def unavailable(frame: pd.DataFrame) -> pd.Series:
    """Rows of library variants that could not run here (``unsupported``: library or device
    missing, or a setting the library does not offer): not failures."""
    if frame.empty or LIBRARY not in frame:
        return pd.Series(False, index=frame.index, dtype=bool)
    return (frame["status"] == "unsupported") & (_text(frame[LIBRARY]) != "")


def _compared(info: TaskInfo | None) -> tuple[list[str], bool]:
    """(metrics compared, as ratios?) of a task, from its declarations (see the module
    docstring); only metrics with a direction."""
    if info is None or not info.headline:
        return [], False
    is_cost = bool(info.cost_metric)
    names = [info.headline, *(info.charts if is_cost else [])]
    names = list(dict.fromkeys(names))  # declared order, once each
    kept = []
    for name in names:
        metric = info.metric(name)
        if metric is not None and metric.higher_is_better is not None:
            kept.append(name)
    return kept, is_cost


def _newest_seed_means(rows: pd.DataFrame) -> pd.DataFrame:
    """One value per variant configuration and point: the newest record of each seed, then the
    mean over seeds, with the versions it was measured with and whether a seed's value is
    untrusted (column ``unsteady`` of ``rows``)."""
    rows = rows.assign(
        **{
            HOST: _text(rows["hostname"]),
            "x_name": _text(rows["x_name"]),
            "x_value": rows["x_value"].fillna(-1.0),  # NaN never matches in a merge
            LIBRARY: _text(rows[LIBRARY]),
            PEER_OF: _text(rows[PEER_OF]),
            "version": _text(rows["attnbench_version"]),
        }
    )
    job = ["variant", "variant_params", *POINT, "seed"]
    rows = rows.sort_values("created_at").drop_duplicates(job, keep="last")
    return (
        rows.groupby(["variant", "variant_params", *POINT], dropna=False)
        .agg(
            value=("value", "mean"),
            seeds=("seed", "nunique"),
            library=(LIBRARY, "first"),
            peer_of=(PEER_OF, "first"),
            version=("version", lambda s: ", ".join(sorted(set(s) - {""})) or "?"),
            unsteady=("unsteady", "any"),
        )
        .reset_index()
    )


def _params_agree(ours: str, theirs: str) -> bool:
    """Whether two variants' parameters (JSON text) agree on every name both have."""
    a, b = json.loads(ours), json.loads(theirs)
    return all(a[k] == b[k] for k in a.keys() & b.keys())


def _name(variant: str, params: str, several: bool, library: str) -> str:
    """ "window (attnbench 0.2.0)", with the parameters where the variant has several configs."""
    return f"{variant}{' ' + params if several else ''} ({library})"


def _pairs(means: pd.DataFrame) -> pd.DataFrame:
    """Every (our row, peer row) of the same point whose shared parameters agree."""
    ours = means[means["library"] == ""]
    theirs = means[(means["library"] != "") & (means["peer_of"] != "")]
    merged = theirs.merge(
        ours,
        left_on=[PEER_OF, *POINT],
        right_on=["variant", *POINT],
        suffixes=("_peer", "_ours"),
    )
    if merged.empty:
        return merged
    agree = [
        _params_agree(a, b)
        for a, b in zip(merged["variant_params_ours"], merged["variant_params_peer"], strict=True)
    ]
    return merged[agree]


def _column_name(metric: str, x_name: str, x_value: float, params: dict) -> str:
    """The metric, or "metric at x=v" for a curve point whose position is not the job's own
    setting (the table has one column per metric and such position)."""
    if not x_name or x_value == -1.0 or params.get(x_name) == x_value:
        return metric
    return f"{metric} at {x_name}={x_value:g}"


def _task_table(pairs: pd.DataFrame, info: TaskInfo, metrics: list[str], ratio: bool) -> Table:
    """The comparison table of one task: a row per pair, machine, dtype and setting."""
    pairs = pairs.assign(pair=_pair_labels(pairs))
    task_params = expand_params(pairs, "task_params", "task")
    settings = varying(task_params)
    pairs = pd.concat([pairs, task_params[settings]], axis=1)
    own = pairs["task_params"].map(json.loads)
    pairs = pairs.assign(
        column=[
            _column_name(m, x, v, p)
            for m, x, v, p in zip(
                pairs["metric"], pairs["x_name"], pairs["x_value"], own, strict=True
            )
        ]
    )
    keys = ["pair", MACHINE, "dtype", *settings]
    pairs = key_columns(pairs, keys)
    base = {c: m for c, m in zip(pairs["column"], pairs["metric"], strict=True)}
    columns = sorted(set(pairs["column"]), key=lambda c: (metrics.index(base[c]), c))
    table = Table(columns=_pair_headers(info, settings, {c: base[c] for c in columns}, ratio))
    for key, group in pairs.groupby(keys, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        by_column = group.set_index("column")
        table.rows.append(
            [
                *(Cell(str(k), _sortable(k)) for k in key),
                *(_pair_cell(by_column, c, ratio) for c in columns),
            ]
        )
    return table


def _pair_labels(pairs: pd.DataFrame) -> pd.Series:
    """Each pair as "ours (attnbench version) / peer (library)", a side's parameters named where
    it has several configurations in the task."""
    several = {
        side: pairs.groupby(f"variant_{side}")[f"variant_params_{side}"].nunique()
        for side in ("ours", "peer")
    }

    def label(row: pd.Series) -> str:
        ours = _name(
            row["variant_ours"],
            row["variant_params_ours"],
            several["ours"][row["variant_ours"]] > 1,
            f"{OURS} {row['version_ours']}",
        )
        peer = _name(
            row["variant_peer"],
            row["variant_params_peer"],
            several["peer"][row["variant_peer"]] > 1,
            row["library_peer"],
        )
        return f"{ours} / {peer}"

    return pairs.apply(label, axis=1)


def _pair_headers(
    info: TaskInfo, settings: list[str], columns: dict[str, str], ratio: bool
) -> list[Column]:
    """The comparison table's columns: the pair, machine, dtype, the settings that differ, then
    one per value column (column → the metric it shows), described as a ratio or side by side."""
    headers = [
        Column("pair", "ours / peer" if ratio else "ours vs peer", "Our variant and its peer"),
        Column(MACHINE, MACHINE, "Hardware (and threads on CPU): both rows measured here"),
        Column("dtype", "dtype"),
        *[Column(k, k) for k in settings],
    ]
    for c, metric in columns.items():
        declared = info.metric(metric)
        desc = declared.description if declared else ""
        unit = f" ({declared.unit})" if declared and declared.unit else ""
        if ratio:
            better = "above" if declared and declared.higher_is_better else "below"
            what = f"ours / peer of {c}{unit}; {better} 1: ours is better. {desc}"
        else:
            what = f"ours vs peer, {c}{unit}; sorted by ours − peer. {desc}"
        headers.append(Column(c, c, what, declared.higher_is_better if declared else None))
    return headers


def _pair_cell(by_column: pd.DataFrame, column: str, ratio: bool) -> Cell:
    """One pair's cell in ``column`` (``by_column``: the pair's values, indexed by column): ours /
    peer, or the two side by side; marked where either side's timing is unsteady."""
    if column not in by_column.index:
        return Cell("–", math.inf)
    row = by_column.loc[column]
    if isinstance(row, pd.DataFrame):  # several peer/our configurations agree: first
        row = row.iloc[0]
    ours, peer = float(row["value_ours"]), float(row["value_peer"])
    if ratio:
        value = ours / peer if peer else math.nan
        text = (
            f"{format_value(value)} ({format_value(ours)} / {format_value(peer)})"
            if not math.isnan(value)
            else f"– ({format_value(ours)} / {format_value(peer)})"
        )
        cell = Cell(text, value if not math.isnan(value) else math.inf)
    else:
        seeds = f"{int(row['seeds_ours'])} / {int(row['seeds_peer'])} seeds"
        text = f"{format_value(ours)} vs {format_value(peer)} ({seeds})"
        cell = Cell(text, ours - peer)
    sides = [side for side in ("ours", "peer") if row[f"unsteady_{side}"]]
    if sides:
        cell.text = UNSTEADY_MARK + cell.text
        cell.note = (
            f"the timing of {' and '.join(sides)} is unsteady: its samples never "
            "settled within the time cap"
        )
    return cell


def _sortable(value: object) -> float | str:
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return str(value)


def _unavailable_table(frame: pd.DataFrame) -> Table | None:
    """Library variants that could not run here: one row per variant, machine, dtype and reason,
    with the number of jobs."""
    rows = frame[unavailable(frame) & ~frame["derived"].astype(bool)].drop_duplicates("run_id")
    if rows.empty:
        return None
    rows = rows.assign(
        **{
            LIBRARY: _text(rows[LIBRARY]),
            PEER_OF: _text(rows[PEER_OF]),
            "error": _text(rows["error"]),
        }
    )
    keys = ["variant", LIBRARY, PEER_OF, MACHINE, "dtype", "error"]
    counts = rows.groupby(keys, sort=True).size()
    table = Table(
        columns=[
            Column("variant", "variant"),
            Column(LIBRARY, "library"),
            Column(PEER_OF, "peer of", "Our variant with the same maths (empty: none)"),
            Column(MACHINE, MACHINE),
            Column("dtype", "dtype"),
            Column("error", "why unavailable here"),
            Column("jobs", "jobs", "Jobs of the sweep that this covers"),
        ]
    )
    for key, n in counts.items():
        table.rows.append([*(Cell(str(k), str(k)) for k in key), Cell(str(n), int(n))])
    return table


def peer_section(frame: pd.DataFrame, infos: dict[str, TaskInfo]) -> PeerSection | None:
    """The "Ours vs theirs" section of a results table (the page's shown rows, judged by
    `steadiness.judge_steadiness`, with or without their machine column); None when the table
    has no library variant at all."""
    if frame.empty or LIBRARY not in frame or not (_text(frame[LIBRARY]) != "").any():
        return None
    if MACHINE not in frame:
        frame = frame.assign(**{MACHINE: machine_labels(frame)})
    section = PeerSection(unavailable=_unavailable_table(frame))
    runs = frame[
        (frame["status"] == "ok")
        & ~frame["derived"].astype(bool)
        & frame["current"].astype(bool)
        & frame["metric"].notna()
    ]
    paired: set[tuple[str, str]] = set()
    for task in sorted(runs["task"].unique()):
        info = infos.get(task)
        metrics, ratio = _compared(info)
        mine = runs[runs["task"] == task]
        rows = mine[mine["metric"].isin(metrics)]
        rows = rows.assign(unsteady=untrusted(rows))
        if rows.empty:
            continue
        pairs = _pairs(_newest_seed_means(rows))
        if pairs.empty:
            continue
        paired |= set(zip(pairs["variant_ours"], pairs["variant_peer"], strict=True))
        if ratio:
            note = (
                f"ours / peer of each value (ours / peer in brackets), {', '.join(metrics)}; "
                "below 1: ours is lower, which is better for a latency or memory"
            )
        else:
            note = f"{', '.join(metrics)}: ours vs peer (sorted by the difference ours − peer)"
        section.tables.append(
            PairTable(
                task,
                "ours / peer" if ratio else "side by side",
                note,
                _task_table(pairs, info, metrics, ratio),
            )
        )
    declared = frame[(_text(frame[LIBRARY]) != "") & (_text(frame[PEER_OF]) != "")]
    declared = declared[declared["status"] == "ok"]
    for peer, ours in sorted(set(zip(declared["variant"], _text(declared[PEER_OF]), strict=True))):
        if (ours, peer) not in paired:
            section.unpaired.append(
                f"{peer} (peer of {ours}): no setting where both have current ok runs on the "
                "same machine, host and dtype"
            )
    return section
