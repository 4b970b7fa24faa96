"""Collect run records into the tidy results table ``<results_dir>/results.parquet``.

One row per metric point; a job without metrics (failed, oom, unsupported) still gets one row
(metric and value null) so that nothing is lost. The throughput scaling fits (`harness.scaling`)
are appended as rows of their own (run_id ``fit-…``). Unreadable or foreign JSON files in
``runs/`` are skipped with a warning and counted; a record of a newer schema is refused.

Collection is incremental: ``<results_dir>/.collected.json`` remembers each record file's size
and modification time at the last collection, and the rows of unchanged files are taken from the
existing table instead of re-reading the JSON. A changed, new or removed file is picked up; a
missing or unreadable index or table means a full collection.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from attnbench.harness.records import (
    Record,
    RecordSchemaError,
    atomic_write_text,
    read_record,
    runs_dir,
)
from attnbench.harness.scaling import scaling_rows

log = logging.getLogger(__name__)

COLUMNS = [
    "run_id",
    "status",
    "error",
    "task",
    "variant",
    "variant_family",
    "variant_params",
    "task_params",
    "seed",
    "device",
    "device_name",
    "dtype",
    "metric",
    "value",
    "x_name",
    "x_value",
    "higher_is_better",
    "attnbench_version",
    "torch_version",
    "git_commit",
    "git_dirty",
    "threads",
    "hostname",
    "created_at",
    "duration_s",
]
TABLE_NAME = "results.parquet"
INDEX_NAME = ".collected.json"


@dataclass
class CollectSummary:
    """What a collection did."""

    path: Path
    n_records: int = 0
    n_rows: int = 0
    n_reused: int = 0  # records whose rows came from the previous table unchanged
    skipped: list[str] = field(default_factory=list)

    def describe(self) -> str:
        """One line for the console."""
        text = f"collected {self.n_records} records ({self.n_rows} rows) into {self.path}"
        if self.n_reused:
            text += f" ({self.n_reused} unchanged since the last collection)"
        if self.skipped:
            text += f"; skipped {len(self.skipped)} unreadable files"
        return text


def record_rows(record: Record) -> list[dict]:
    """The tidy rows of one record."""
    common = {
        "run_id": record.run_id,
        "status": record.status,
        "error": record.error,
        "task": record.task,
        "variant": record.variant,
        "variant_family": record.details.get("variant_family"),
        "variant_params": json.dumps(record.variant_params, sort_keys=True),
        "task_params": json.dumps(record.task_params, sort_keys=True),
        "seed": record.seed,
        "device": record.device,
        "device_name": record.env.get("device_name"),
        "dtype": record.dtype,
        "attnbench_version": record.env.get("attnbench_version"),
        "torch_version": record.env.get("torch_version"),
        "git_commit": record.env.get("git_commit"),
        "git_dirty": record.env.get("git_dirty"),
        "threads": record.env.get("threads"),
        "hostname": record.env.get("hostname"),
        "created_at": record.created_at,
        "duration_s": record.duration_s,
    }
    points = record.metrics or [
        {"metric": None, "value": None, "x_name": None, "x_value": None, "higher_is_better": None}
    ]
    return [
        {
            **common,
            **{k: p.get(k) for k in ("metric", "value", "x_name", "x_value", "higher_is_better")},
        }
        for p in points
    ]


def _stamp(path: Path) -> list[int]:
    stat = path.stat()
    return [stat.st_size, stat.st_mtime_ns]


def _previous(results_dir: Path) -> tuple[dict[str, list[int]], pd.DataFrame | None]:
    """The last collection's index and table, or ({}, None) when either is unusable."""
    try:
        index = json.loads((results_dir / INDEX_NAME).read_text())
        table = pd.read_parquet(results_dir / TABLE_NAME)
    except (OSError, ValueError, ImportError):
        return {}, None
    if not isinstance(index, dict) or list(table.columns) != COLUMNS:
        return {}, None
    return index, table


def results_frame(
    results_dir: str | os.PathLike, incremental: bool = True
) -> tuple[pd.DataFrame, CollectSummary, dict[str, list[int]]]:
    """Read every record under ``results_dir/runs`` into the tidy table (not written).

    Returns:
        (table, summary, index of the record files read: name → [size, mtime_ns]).
    """
    results_dir = Path(results_dir)
    summary = CollectSummary(path=results_dir / TABLE_NAME)
    old_index, old_table = _previous(results_dir) if incremental else ({}, None)
    reused_ids: list[str] = []
    index: dict[str, list[int]] = {}
    rows: list[dict] = []
    for path in sorted(runs_dir(results_dir).glob("*.json")):
        stamp = _stamp(path)
        if old_table is not None and old_index.get(path.name) == stamp:
            reused_ids.append(path.stem)
            index[path.name] = stamp
            summary.n_records += 1
            continue
        try:
            record = read_record(path)
        except RecordSchemaError as exc:
            summary.skipped.append(str(path))
            warnings.warn(str(exc), stacklevel=2)
            continue
        except (OSError, ValueError, TypeError) as exc:
            summary.skipped.append(str(path))
            warnings.warn(f"skipping unreadable record {path}: {exc}", stacklevel=2)
            continue
        rows.extend(record_rows(record))
        index[path.name] = stamp
        summary.n_records += 1
    parts = [pd.DataFrame(rows, columns=COLUMNS)]
    if reused_ids:
        parts.insert(0, old_table[old_table["run_id"].isin(set(reused_ids))])
        summary.n_reused = len(reused_ids)
    frame = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
    frame = frame.astype({"value": "float64", "x_value": "float64", "duration_s": "float64"})
    fits = scaling_rows(frame)
    if fits:
        frame = pd.concat([frame, pd.DataFrame(fits, columns=COLUMNS)], ignore_index=True)
    frame = frame.astype({"value": "float64", "x_value": "float64", "duration_s": "float64"})
    summary.n_rows = len(frame)
    return frame, summary, index


def write_table(frame: pd.DataFrame, path: Path) -> None:
    """Write ``frame`` as parquet atomically (temporary file in the same folder, then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        frame.to_parquet(tmp, index=False)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def collect(results_dir: str | os.PathLike = "results", incremental: bool = True) -> CollectSummary:
    """Consolidate the run records of ``results_dir`` into ``results_dir/results.parquet``.

    Args:
        results_dir: Folder holding ``runs/``.
        incremental: Reuse the rows of record files unchanged since the last collection.
    """
    frame, summary, index = results_frame(results_dir, incremental)
    write_table(frame, summary.path)
    atomic_write_text(Path(results_dir) / INDEX_NAME, json.dumps(index))
    return summary


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``attnbench-collect [RESULTS_DIR]``."""
    parser = argparse.ArgumentParser(prog="attnbench-collect", description=__doc__.splitlines()[0])
    parser.add_argument(
        "results_dir", nargs="?", default="results", help="folder holding runs/ (default: results)"
    )
    parser.add_argument(
        "--full", action="store_true", help="re-read every record (ignore the last collection)"
    )
    args = parser.parse_args(argv)
    if not runs_dir(args.results_dir).is_dir():
        print(
            f"attnbench-collect: no run records in {runs_dir(args.results_dir)}; "
            "run a sweep first (attnbench -m sweep=quick).",
            file=sys.stderr,
        )
        return 1
    summary = collect(args.results_dir, incremental=not args.full)
    print(summary.describe())
    return 0


if __name__ == "__main__":
    sys.exit(main())
