"""Seed-averaged metric points of the tidy results table, with their spread and steadiness.

A metric point is one (task, variant, their parameters, device, dtype, metric, curve position);
its seeds are averaged. Its spread is the standard deviation over seeds where there are several,
else the interquartile range the task recorded for the same point, else unknown (NaN).
`attnbench-compare` and the leaderboard overview both read uncertainty this way.

The pairing of a metric with its IQR is exact: metric ``X_iqr`` is the spread of metric ``X``
of the same point, and only where ``X`` itself is in the table (``fwd_ms_iqr`` of ``fwd_ms``).
A metric whose name merely ends in ``_iqr`` is nobody's spread when no metric is named by the
rest of it: ``fwd_ms_rel_iqr`` (IQR / median) would otherwise read as the spread of a metric
``fwd_ms_rel``.

Steadiness (`steadiness_flags`): a task may declare, per timed metric, a 0/1 metric of the same
run saying whether the timing settled (`attnbench.task_info.TaskInfo.steadiness`), one saying
whether the timed kernel computed within its declared error (`TaskInfo.accuracy`), and per trained
metric one saying whether training converged (`TaskInfo.convergence`). Each row gets the lowest of
its flags: a value is judged only when every flag is 1 (or unknown); a run that did not record a
flag (an older record) is unknown there, never unsteady. A flag is read at the row's curve
position, else, where the run recorded it without one, for every position of the run (a run
converges as a whole).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from attnbench.task_info import TaskInfo

POINT = [
    "task",
    "variant",
    "variant_params",
    "task_params",
    "device",
    "dtype",
    "metric",
    "x_name",
    "x_value",
]
SPREAD_SUFFIX = "_iqr"


def spread_of(metrics: Iterable[str]) -> dict[str, str]:
    """``X_iqr`` → ``X`` for the names in ``metrics`` that are the IQR of another of them."""
    names = set(metrics)
    return {
        name: name.removesuffix(SPREAD_SUFFIX)
        for name in names
        if name.endswith(SPREAD_SUFFIX) and name.removesuffix(SPREAD_SUFFIX) in names
    }


def point_stats(table: pd.DataFrame, point: list[str] = POINT) -> pd.DataFrame:
    """One row per metric point of the ok rows of ``table``: the ``point`` columns (default
    POINT; the leaderboard keys points by machine instead of device), ``mean``, ``n`` (seeds),
    ``spread`` and ``higher_is_better``. Missing curve positions become x_name "" and x_value −1,
    so that points without a curve still match across tables."""
    ok = table[(table["status"] == "ok") & table["metric"].notna()].copy()
    ok["x_value"] = ok["x_value"].fillna(-1.0)  # NaN never equals NaN in a merge or groupby
    ok["x_name"] = ok["x_name"].fillna("")
    stats = ok.groupby(point, dropna=False)["value"].agg(mean="mean", std="std", n="count")
    stats = stats.reset_index()
    spreads = spread_of(stats["metric"].unique())
    iqr = stats[stats["metric"].isin(list(spreads))].copy()
    iqr["metric"] = iqr["metric"].str.removesuffix(SPREAD_SUFFIX)  # X_iqr → X (exact: X exists)
    iqr = iqr[point + ["mean"]].rename(columns={"mean": "iqr"})
    stats = stats.merge(iqr, on=point, how="left")
    stats["spread"] = np.where(stats["n"] > 1, stats["std"], stats["iqr"]).astype(float)
    directions = ok.groupby("metric")["higher_is_better"].first()
    stats["higher_is_better"] = stats["metric"].map(directions)
    return stats.drop(columns=["std", "iqr"])


def declared_steadiness(infos: dict[str, TaskInfo]) -> list[tuple[str, str, str]]:
    """(task, metric, flag metric) for every flag the task descriptions ``infos`` (task →
    `TaskInfo`) declare: its steadiness, accuracy and convergence flags, all of which a value
    must pass to enter a contest."""
    return [
        (task, metric, flag)
        for task, info in sorted(infos.items())
        for metric, flag in sorted(
            {*info.steadiness.items(), *info.accuracy.items(), *info.convergence.items()}
        )
    ]


def flag_kinds(infos: dict[str, TaskInfo]) -> dict[str, str]:
    """Each flag metric ``infos`` declare → the kind of flag it is: "steadiness", "accuracy" or
    "convergence" (the `TaskInfo` field naming it), for saying why a value is not judged."""
    return {
        flag: kind
        for info in infos.values()
        for kind in ("steadiness", "accuracy", "convergence")
        for flag in getattr(info, kind).values()
    }


def declared_convergence(infos: dict[str, TaskInfo]) -> set[tuple[str, str]]:
    """(task, flag metric) of every convergence flag ``infos`` declare (a 0 there is a run
    still learning at its cap)."""
    return {(task, flag) for task, info in infos.items() for flag in info.convergence.values()}


def steadiness_flags(table: pd.DataFrame, pairs: Iterable[tuple[str, str, str]]) -> pd.Series:
    """Each row's steadiness, index aligned with ``table``: the value of the flag metric that
    ``pairs`` ((task, metric, flag metric), see `declared_steadiness`) name for the row's task and
    metric, from the same run (run_id) and curve position; 1.0 steady, 0.0 not; the lowest where
    several flags judge the metric. NaN (unknown) where the row's metric has no flag or its run
    recorded none (an older record)."""
    pairs = pd.DataFrame(list(pairs), columns=["task", "metric", "flag"]).drop_duplicates()
    if table.empty or pairs.empty:
        return pd.Series(np.nan, index=table.index, dtype=float)
    keys = ["run_id", "x_name", "x_value"]
    rows = table[["run_id", "task", "metric", "x_name", "x_value"]].copy()
    rows["x_value"] = pd.to_numeric(rows["x_value"], errors="coerce").fillna(-1.0).astype(float)
    rows["x_name"] = rows["x_name"].astype(object).where(rows["x_name"].notna(), "")
    rows = rows.assign(row=np.arange(len(rows)))
    wanted = rows.merge(pairs, on=["task", "metric"], how="inner")
    is_flag = rows["metric"].isin(set(pairs["flag"]))
    flags = rows.loc[is_flag, [*keys, "task", "metric"]].rename(columns={"metric": "flag"})
    flags["value"] = pd.to_numeric(table.loc[is_flag, "value"], errors="coerce").to_numpy()
    flags = flags.groupby([*keys, "task", "flag"])["value"].min()
    found = wanted.merge(flags.reset_index(), on=[*keys, "task", "flag"], how="left")
    whole = flags.reset_index()
    whole = whole[(whole["x_name"] == "") & (whole["x_value"] == -1.0)]
    whole = whole.drop(columns=["x_name", "x_value"]).rename(columns={"value": "whole"})
    found = found.merge(whole, on=["run_id", "task", "flag"], how="left")
    found["value"] = found["value"].fillna(found["whole"])  # a run-level flag judges every x
    lowest = found.groupby("row")["value"].min()  # NaN only where every flag is unknown
    out = np.full(len(table), np.nan)
    out[lowest.index.to_numpy()] = lowest.to_numpy(dtype=float)
    return pd.Series(out, index=table.index, dtype=float)


def unsteady_rows(table: pd.DataFrame, pairs: Iterable[tuple[str, str, str]]) -> pd.Series:
    """Whether each row of ``table`` is a value of a timing its run flagged unsteady (flag 0);
    unknown flags are not unsteady."""
    return steadiness_flags(table, pairs) == 0.0
