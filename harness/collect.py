"""Collect run records into the tidy results table ``<results_dir>/results.parquet``.

One row per metric point; a job without metrics (failed, oom, unsupported) still gets one row
(metric and value null) so that nothing is lost. The scaling fits the tasks declare
(`harness.scaling`) are appended as rows of their own, marked ``derived`` (they summarise runs and
are not runs). Unreadable or foreign JSON files in ``runs/`` are skipped with a warning and
counted; a record of a newer schema is refused.

The table carries the tasks' self-descriptions (`harness.task_info`, taken from the records) in
its parquet metadata, so the leaderboard reads everything it shows from the table alone
(`read_table`), without importing any task or variant.

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
import pyarrow as pa
import pyarrow.parquet as pq

from attnbench.harness.metrics import POINT_FIELDS
from attnbench.harness.records import (
    Record,
    RecordSchemaError,
    atomic_write_text,
    read_record,
    runs_dir,
)
from attnbench.harness.scaling import fit_rows
from attnbench.harness.task_info import TaskInfo

log = logging.getLogger(__name__)

COLUMNS = [
    "run_id",
    "derived",  # True: computed at collection from other rows (a scaling fit), not a run
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
DTYPES = {"derived": "bool", "value": "float64", "x_value": "float64", "duration_s": "float64"}
METADATA_KEY = b"attnbench"  # parquet schema metadata: {"tasks": {name: TaskInfo as data}}


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
        "derived": False,
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
    empty = dict.fromkeys(POINT_FIELDS)
    points = record.metrics or [empty]
    return [{**common, **{k: p.get(k) for k in POINT_FIELDS}} for p in points]


def _stamp(path: Path) -> list[int]:
    stat = path.stat()
    return [stat.st_size, stat.st_mtime_ns]


def read_table(path: str | os.PathLike) -> tuple[pd.DataFrame, dict[str, TaskInfo]]:
    """The results table at ``path`` and the task descriptions in its metadata.

    Raises:
        OSError, ValueError (pyarrow's errors included): the file is missing or not a table.
    """
    table = pq.read_table(path)
    meta = (table.schema.metadata or {}).get(METADATA_KEY)
    infos: dict[str, TaskInfo] = {}
    if meta:
        for name, data in json.loads(meta).get("tasks", {}).items():
            infos[name] = TaskInfo.from_dict(data)
    return table.to_pandas(), infos


def _previous(
    results_dir: Path,
) -> tuple[dict[str, list[int]], pd.DataFrame | None, dict[str, TaskInfo]]:
    """The last collection's index, table and task descriptions; ({}, None, {}) if unusable."""
    try:
        index = json.loads((results_dir / INDEX_NAME).read_text())
        table, infos = read_table(results_dir / TABLE_NAME)
    except (OSError, ValueError, ImportError):
        return {}, None, {}
    if not isinstance(index, dict) or list(table.columns) != COLUMNS:
        return {}, None, {}
    return index, table[~table["derived"].astype(bool)], infos


def results_frame(
    results_dir: str | os.PathLike, incremental: bool = True
) -> tuple[pd.DataFrame, CollectSummary, dict[str, list[int]], dict[str, TaskInfo]]:
    """Read every record under ``results_dir/runs`` into the tidy table (not written).

    Returns:
        (table, summary, index of the record files read: name → [size, mtime_ns], the task
        descriptions: the newest record's of each task, else the previous table's).
    """
    results_dir = Path(results_dir)
    summary = CollectSummary(path=results_dir / TABLE_NAME)
    old_index, old_table, infos = _previous(results_dir) if incremental else ({}, None, {})
    newest: dict[str, str] = {}  # task → created_at of the record its description came from
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
        if record.task_info and record.created_at >= newest.get(record.task, ""):
            infos[record.task] = TaskInfo.from_dict(record.task_info)
            newest[record.task] = record.created_at
        index[path.name] = stamp
        summary.n_records += 1
    parts = [pd.DataFrame(rows, columns=COLUMNS)]
    if reused_ids:
        parts.insert(0, old_table[old_table["run_id"].isin(set(reused_ids))])
        summary.n_reused = len(reused_ids)
    frame = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
    frame = frame.astype(DTYPES)
    fits = [
        row
        for task, info in sorted(infos.items())
        for fit in info.scaling_fits
        for row in fit_rows(frame, task, fit)
    ]
    if fits:
        frame = pd.concat([frame, pd.DataFrame(fits, columns=COLUMNS)], ignore_index=True)
    frame = frame.astype(DTYPES)
    summary.n_rows = len(frame)
    return frame, summary, index, infos


def write_table(frame: pd.DataFrame, path: Path, infos: dict[str, TaskInfo] | None = None) -> None:
    """Write ``frame`` as parquet atomically (temporary file in the same folder, then rename),
    with the task descriptions ``infos`` in its metadata."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    table = pa.Table.from_pandas(frame, preserve_index=False)
    meta = {"tasks": {name: info.to_dict() for name, info in sorted((infos or {}).items())}}
    table = table.replace_schema_metadata(
        {**(table.schema.metadata or {}), METADATA_KEY: json.dumps(meta).encode()}
    )
    try:
        pq.write_table(table, tmp)
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
    frame, summary, index, infos = results_frame(results_dir, incremental)
    write_table(frame, summary.path, infos)
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
