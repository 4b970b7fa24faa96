"""Seed-averaged metric points of the tidy results table, with their spread.

A metric point is one (task, variant, their parameters, device, dtype, metric, curve position);
its seeds are averaged. Its spread is the standard deviation over seeds where there are several,
else the interquartile range the task recorded for the same point (metric ``<name>_iqr``, e.g.
``fwd_ms_iqr``), else unknown (NaN). `attnbench-compare` and the leaderboard overview both read
uncertainty this way.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

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
    iqr = stats[stats["metric"].str.endswith(SPREAD_SUFFIX)].copy()
    iqr["metric"] = iqr["metric"].str.removesuffix(SPREAD_SUFFIX)
    iqr = iqr[point + ["mean"]].rename(columns={"mean": "iqr"})
    stats = stats.merge(iqr, on=point, how="left")
    stats["spread"] = np.where(stats["n"] > 1, stats["std"], stats["iqr"]).astype(float)
    directions = ok.groupby("metric")["higher_is_better"].first()
    stats["higher_is_better"] = stats["metric"].map(directions)
    return stats.drop(columns=["std", "iqr"])
