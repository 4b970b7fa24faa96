"""What a sweep's grids cost and what their quality columns show, from its records.

    python docs/quick_costs.py RESULTS_DIR [--against OTHER_RESULTS_DIR]

Reads ``RESULTS_DIR/runs/*.json`` (the records; no table needed) and prints two markdown tables,
the ones in docs/sweeps.md ("What quick costs and shows"):

- **cost**, per board column (a task, or ``task (mode)`` where the task splits its columns by a
  parameter, as the board does): jobs, job time (the records' ``duration_s`` summed: the time
  inside the jobs, not the launcher's), its share, seconds per job;
- **shows**, per quality column with more than one seed: the headline's spread over seeds (the
  median over variants of the standard deviation), how many neighbouring pairs of the ranking
  by the mean are apart by more than twice their pooled standard deviation, and how the ranking
  moves with the seeds: variants whose rank changes when the ranking uses the first two seeds
  only, against the ranking from the two disjoint single seeds 0 and 1 (what seed noise alone
  moves). With ``--against``, also the variants whose rank differs in the other run.

Only ``ok`` records count; a ranking ties by name.
"""

from __future__ import annotations

import argparse
import ast
import json
import statistics
from collections import defaultdict
from itertools import pairwise
from pathlib import Path


def column_of(record: dict) -> str:
    """The board column of a record: its task, or ``task (value)`` for a split task."""
    by = record.get("task_info", {}).get("column_by") or ""
    value = record.get("task_params", {}).get(by) if by else None
    return record["task"] if value is None else f"{record['task']} ({value})"


def headline_of(record: dict) -> tuple[str, bool]:
    """(metric, higher_is_better) that the board ranks the record's column by."""
    info = record.get("task_info", {})
    by = info.get("column_by") or ""
    value = record.get("task_params", {}).get(by) if by else None
    metric = info.get("column_headlines", {}).get(str(value), info.get("headline", ""))
    higher = next((m["higher_is_better"] for m in _metrics(info) if m["name"] == metric), None)
    return metric, bool(higher)


def _metrics(info: dict) -> list[dict]:
    found = info.get("metrics", [])  # a record holds the list as Python's text of it
    return ast.literal_eval(found) if isinstance(found, str) else found


def load(results_dir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((results_dir / "runs").glob("*.json"))]


def costs(records: list[dict]) -> list[tuple[str, int, float, float]]:
    """(column, jobs, job seconds, share) per column, costliest first."""
    by: dict[str, list[float]] = defaultdict(list)
    for r in records:
        by[column_of(r)].append(float(r.get("duration_s") or 0.0))
    total = sum(sum(v) for v in by.values()) or 1.0
    rows = [(c, len(v), sum(v), sum(v) / total) for c, v in by.items()]
    return sorted(rows, key=lambda row: -row[2])


def headline_values(records: list[dict]) -> dict[str, dict[str, dict[int, float]]]:
    """column → variant → seed → headline value (scalar rows of ``ok`` records)."""
    out: dict[str, dict[str, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
    for r in records:
        if r.get("status") != "ok":
            continue
        metric, _ = headline_of(r)
        for point in r.get("metrics", []):
            if point["metric"] == metric and point.get("x_name") is None:
                out[column_of(r)][r["variant"]][int(r["seed"])] = float(point["value"])
    return out


def ranking(values: dict[str, dict[int, float]], higher: bool, seeds=None) -> list[str]:
    """Variants by their mean over ``seeds`` (all where None), best first."""
    means = {
        v: statistics.fmean(s[k] for k in (seeds if seeds is not None else s))
        for v, s in values.items()
        if seeds is None or all(k in s for k in seeds)
    }
    return sorted(means, key=lambda v: ((-means[v] if higher else means[v]), v))


def moved(a: list[str], b: list[str]) -> list[str]:
    """Variants of both rankings whose position differs (positions among the common ones)."""
    common = [v for v in a if v in b]
    b_common = [v for v in b if v in common]
    return [v for i, v in enumerate(common) if b_common[i] != v]


def max_shift(a: list[str], b: list[str]) -> int:
    """The largest change of position of a variant between two rankings (common ones)."""
    common = [v for v in a if v in b]
    b_common = [v for v in b if v in common]
    return max((abs(i - b_common.index(v)) for i, v in enumerate(common)), default=0)


def _moves(a: list[str], b: list[str]) -> str:
    """How many variants change position, and the largest change: "N (at most K)"."""
    n = len(moved(a, b))
    return f"{n} (at most {max_shift(a, b)})" if n else "0"


def shows(records: list[dict]) -> list[dict]:
    """Per quality column with at least two seeds: spread, resolved neighbours, seed moves."""
    higher_of = {column_of(r): headline_of(r)[1] for r in records}
    rows = []
    for column, values in sorted(headline_values(records).items()):
        seeds = sorted({k for s in values.values() for k in s})
        if len(seeds) < 2 or column.startswith(("throughput", "decode")):
            continue
        higher = higher_of[column]
        order = ranking(values, higher)
        sd = {v: statistics.stdev(s.values()) if len(s) > 1 else 0.0 for v, s in values.items()}
        mean = {v: statistics.fmean(s.values()) for v, s in values.items()}
        resolved = sum(
            abs(mean[a] - mean[b]) > 2 * ((sd[a] ** 2 + sd[b] ** 2) / 2) ** 0.5
            for a, b in pairwise(order)
        )
        rows.append(
            {
                "column": column,
                "variants": len(order),
                "seeds": len(seeds),
                "median_sd": statistics.median(sd.values()),
                "resolved": resolved,
                "pairs": len(order) - 1,
                "moved_first_two": _moves(order, ranking(values, higher, seeds[:2])),
                "moved_seed_vs_seed": _moves(
                    ranking(values, higher, seeds[:1]), ranking(values, higher, seeds[1:2])
                ),
            }
        )
    return rows


def against(records: list[dict], other: list[dict]) -> list[tuple[str, list[str]]]:
    """Per quality column in both runs: the variants whose rank differs between them."""
    mine, theirs = headline_values(records), headline_values(other)
    higher_of = {column_of(r): headline_of(r)[1] for r in records}
    out = []
    for column in sorted(set(mine) & set(theirs)):
        if column.startswith(("throughput", "decode")):
            continue
        higher = higher_of[column]
        out.append((column, moved(ranking(mine[column], higher), ranking(theirs[column], higher))))
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results_dir", type=Path)
    parser.add_argument("--against", type=Path, help="another run's results folder")
    args = parser.parse_args(argv)
    records = load(args.results_dir)
    print("| column | jobs | job time (s) | share | s per job |\n|---|---|---|---|---|")
    for column, jobs, seconds, share in costs(records):
        print(f"| {column} | {jobs} | {seconds:.0f} | {share:.0%} | {seconds / jobs:.2f} |")
    total = sum(row[2] for row in costs(records))
    print(f"| all | {len(records)} | {total:.0f} | | |\n")
    print(
        "| column | variants × seeds | median sd over seeds | neighbours apart > 2 sd | "
        "ranks moved: first 2 seeds vs all | ranks moved: seed 0 alone vs seed 1 alone |\n"
        "|---|---|---|---|---|---|"
    )
    for row in shows(records):
        print(
            f"| {row['column']} | {row['variants']} × {row['seeds']} | {row['median_sd']:.3g} | "
            f"{row['resolved']} of {row['pairs']} | {row['moved_first_two']} | "
            f"{row['moved_seed_vs_seed']} |"
        )
    if args.against:
        print("\n| column | variants ranked differently from the other run |\n|---|---|")
        for column, names in against(records, load(args.against)):
            print(f"| {column} | {', '.join(names) or 'none'} |")


if __name__ == "__main__":
    main()
