"""The ``attnbench-compare OLD NEW`` command: which metrics got worse between two results tables.

A metric point is matched across the tables by task, variant, their parameters, device, dtype,
metric and curve position (seeds are averaged). It is a regression when it moved in its bad
direction (declared by the task) by more than ``--threshold`` (relative) *and* by more than the
spread of the two measurements (`harness.metric_points`: the standard deviation over seeds, else
the interquartile range the task recorded, else nothing). Metrics without a direction are not
judged.

    attnbench-compare results_old/ results/ --threshold 0.05 --fail

exits 1 with ``--fail`` when anything regressed, so an author can gate a change on it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from attnbench.harness.collect import TABLE_NAME
from attnbench.harness.metric_points import POINT, point_stats


def read_table(source: str | Path) -> pd.DataFrame:
    """A results table from a parquet or CSV file, or from a results folder holding one."""
    path = Path(source)
    if path.is_dir():
        path = path / TABLE_NAME
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} does not exist; give a results folder or its {TABLE_NAME} "
            "(attnbench-collect writes it)."
        )
    return pd.read_csv(path) if path.suffix == ".csv" else pd.read_parquet(path)


def summarise(table: pd.DataFrame) -> pd.DataFrame:
    """Mean and spread per metric point (`harness.metric_points`), directed metrics only; an
    unknown spread counts as 0."""
    stats = point_stats(table)
    stats["spread"] = stats["spread"].fillna(0.0)
    return stats[stats["higher_is_better"].notna()]


def compare(old: pd.DataFrame, new: pd.DataFrame, threshold: float = 0.05) -> pd.DataFrame:
    """One row per metric point found in both tables, with ``worse_by`` and ``regressed``.

    ``worse_by`` is the relative change in the metric's bad direction (negative: it improved).
    """
    merged = summarise(old).merge(summarise(new), on=POINT, suffixes=("_old", "_new"))
    sign = np.where(merged["higher_is_better_old"].astype(bool), -1.0, 1.0)
    delta = merged["mean_new"] - merged["mean_old"]
    scale = merged["mean_old"].abs().replace(0.0, np.nan)
    merged["worse_by"] = sign * delta / scale
    outside = delta.abs() > merged["spread_old"] + merged["spread_new"]
    merged["regressed"] = (merged["worse_by"] > threshold) & outside
    return merged


def format_report(result: pd.DataFrame, threshold: float) -> str:
    """Text report: the regressions, then a one-line count."""
    lines = []
    regressed = result[result["regressed"]].sort_values("worse_by", ascending=False)
    for _, r in regressed.iterrows():
        where = f" at {r['x_name']}={r['x_value']:g}" if r["x_name"] else ""
        lines.append(
            f"WORSE {r['task']} × {r['variant']} {r['variant_params']}: {r['metric']}{where} "
            f"{r['mean_old']:.4g} → {r['mean_new']:.4g} ({100 * r['worse_by']:+.1f}%, "
            f"spread {r['spread_old']:.2g} / {r['spread_new']:.2g})"
        )
    improved = int(((result["worse_by"] < -threshold) & ~result["regressed"]).sum())
    lines.append(
        f"{len(result)} metric points compared: {len(regressed)} worse by more than "
        f"{100 * threshold:g}% and outside the spread, {improved} better."
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``attnbench-compare``."""
    parser = argparse.ArgumentParser(prog="attnbench-compare", description=__doc__.split("\n")[0])
    parser.add_argument("old", help="the baseline results folder or table (parquet / CSV)")
    parser.add_argument("new", help="the results folder or table to check")
    parser.add_argument(
        "--threshold", type=float, default=0.05, help="relative change that counts (default 0.05)"
    )
    parser.add_argument("--fail", action="store_true", help="exit 1 if anything got worse")
    args = parser.parse_args(argv)
    if not args.threshold >= 0:
        parser.error(f"--threshold must be >= 0, got {args.threshold}.")
    try:
        old, new = read_table(args.old), read_table(args.new)
    except (FileNotFoundError, ValueError, OSError) as exc:
        print(f"attnbench-compare: {exc}", file=sys.stderr)
        return 2
    result = compare(old, new, args.threshold)
    print(format_report(result, args.threshold))
    return 1 if args.fail and bool(result["regressed"].any()) else 0


if __name__ == "__main__":
    sys.exit(main())
