"""Collect run records into the tidy results table ``<results_dir>/results.parquet``.

One row per metric point; a job without metrics (failed, oom, unsupported) still gets one row
(metric and value null) so that nothing is lost. The throughput scaling fits (`harness.scaling`)
are appended as rows of their own (run_id ``fit-…``). Unreadable or foreign JSON files in
``runs/`` are skipped with a warning and counted; a record of a newer schema is refused.
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

from harness.records import Record, RecordSchemaError, read_record, runs_dir
from harness.scaling import scaling_rows

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


@dataclass
class CollectSummary:
    """What a collection did."""

    path: Path
    n_records: int = 0
    n_rows: int = 0
    skipped: list[str] = field(default_factory=list)

    def describe(self) -> str:
        """One line for the console."""
        text = f"collected {self.n_records} records ({self.n_rows} rows) into {self.path}"
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


def results_frame(results_dir: str | os.PathLike) -> tuple[pd.DataFrame, CollectSummary]:
    """Read every record under ``results_dir/runs`` into the tidy table (not written)."""
    summary = CollectSummary(path=Path(results_dir) / TABLE_NAME)
    rows: list[dict] = []
    for path in sorted(runs_dir(results_dir).glob("*.json")):
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
        summary.n_records += 1
    frame = pd.DataFrame(rows, columns=COLUMNS)
    fits = scaling_rows(frame)
    if fits:
        frame = pd.concat([frame, pd.DataFrame(fits, columns=COLUMNS)], ignore_index=True)
    frame = frame.astype({"value": "float64", "x_value": "float64", "duration_s": "float64"})
    summary.n_rows = len(frame)
    return frame, summary


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


def collect(results_dir: str | os.PathLike = "results") -> CollectSummary:
    """Consolidate the run records of ``results_dir`` into ``results_dir/results.parquet``."""
    frame, summary = results_frame(results_dir)
    write_table(frame, summary.path)
    return summary


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``attnbench-collect [RESULTS_DIR]``."""
    parser = argparse.ArgumentParser(prog="attnbench-collect", description=__doc__.splitlines()[0])
    parser.add_argument(
        "results_dir", nargs="?", default="results", help="folder holding runs/ (default: results)"
    )
    args = parser.parse_args(argv)
    if not runs_dir(args.results_dir).is_dir():
        print(
            f"attnbench-collect: no run records in {runs_dir(args.results_dir)}; "
            "run a sweep first (attnbench -m sweep=quick).",
            file=sys.stderr,
        )
        return 1
    summary = collect(args.results_dir)
    print(summary.describe())
    return 0


if __name__ == "__main__":
    sys.exit(main())
