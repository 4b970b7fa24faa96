"""Collect run records into the tidy results table ``<results_dir>/results.parquet``.

One row per metric point; a job without metrics (failed, oom, unsupported) still gets one row
(metric and value null) so that nothing is lost. The scaling fits the tasks declare
(`harness.results.scaling`) are appended as rows of their own, marked ``derived`` (they
summarise runs and are not runs), fitted on current rows only.

Rows are keyed by run_id, read from the records themselves, not from file names: a renamed record
keeps its rows, a copied one adds none. Where several records share a run_id (a failed re-run
kept beside an `ok` record, `harness.jobs.records.write_record`), the best one gives the rows
(`ok` first, then the newest); ``attempts`` counts the distinct records and ``latest_status`` is
the newest one's status, so the board can say that the latest attempt failed.

``current`` marks the records made by the installed code: every module in a record's
``code_modules`` still has the recorded source digest (`harness.jobs.fingerprint`). A record of
older code is history (``current`` false), kept in the table and left off the board by default.
A record whose modules cannot be found here at all (its plugin is not installed) counts as
current unless a newer record of the same job supersedes it; a record from before code
fingerprints (schema < 3) is never current.

Every record is checked field by field (`harness.jobs.records.read_record`); a bad one is
skipped with a warning naming its file and field, and never blocks the others. Records of a newer
schema are left untouched and reported.

Collection is incremental: the table's parquet metadata remembers each record file's size,
modification time, run_id and status at the last collection, and the rows of unchanged records
are taken from the existing table. Table and memory are one file written atomically, under a lock
(``.collect.lock``), so concurrent collectors never leave them inconsistent; one that waits on it
longer than a collection takes says who holds it and for how long (`harness.results.lock_holder`).
The metadata also carries the tasks' self-descriptions (`attnbench.task_info`), so the
leaderboard reads everything it shows from the table alone (`read_table`), without importing any
task or variant.

A table is never replaced by one that drops runs it holds without being told: the table may be
the only copy of its runs (copied without ``runs/``, records moved or deleted since), so where
the records no longer give every run the table holds, `collect` raises `MissingRunsError` and
leaves the table as it is, unless called with ``drop_missing=True`` (``attnbench-collect
--drop-missing``). A run is a distinct run_id among the rows not ``derived``; a sweep only adds
runs (a re-run keeps its run_id, a record of other code is a run of its own), so it never meets
this.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import time
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from filelock import FileLock, Timeout

from attnbench.harness.jobs.fingerprint import (
    DISTRIBUTION,
    NOT_INSTALLED,
    module_digest,
    module_file,
)
from attnbench.harness.jobs.paths import looping_link, not_a_file
from attnbench.harness.jobs.records import (
    NewerSchemaError,
    Record,
    RecordSchemaError,
    atomic_file,
    make_run_id,
    read_record,
    runs_dir,
)
from attnbench.harness.results.fit_quality import judged_fit_rows
from attnbench.harness.results.lock_holder import clear_note, describe_holder, note_holder
from attnbench.metrics import POINT_FIELDS
from attnbench.task_info import TaskInfo

log = logging.getLogger(__name__)

COLUMNS = [
    "run_id",
    "derived",  # True: computed at collection from other rows (a scaling fit), not a run
    "status",
    "error",
    "task",
    "variant",
    "variant_family",
    "peer_of",  # the built-in variant with the same maths, for a library's variant; else ""
    "variant_library",  # "<distribution> <version>" of a library's variant; "" for our own
    "variant_size_params",  # its parameters that are pattern sizes, comma-separated; else ""
    "variant_params",
    "task_params",
    "seed",
    "device",
    "device_name",
    "hardware",  # part of the job's identity: the CPU model or GPU name
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
    "git_dirty_files",  # the code files that differed from the commit, comma-separated
    "code_source",  # "checkout" (a commit is known) or "distribution" (an installed wheel)
    "threads",
    "hostname",
    "created_at",
    "duration_s",
    "code_fingerprint",
    "current",  # made by the installed code (see the module docstring)
    "attempts",  # distinct records of this run_id (a failed re-run beside an ok one: 2)
    "latest_status",  # status of the newest of them
    "record_file",  # the file under runs/ the rows come from
    "annotation",  # text the task declares beside the metric (TaskInfo.annotations), else ""
]
# columns a later layout added → the value a table of an earlier one reads as (`table_file.load`)
COLUMN_DEFAULTS = {"annotation": "", "variant_size_params": ""}
TABLE_NAME = "results.parquet"
LOCK_NAME = ".collect.lock"
LOCK_PATIENCE_S = 10.0  # longer than a collection takes: a wait past it is said, with the holder
TABLE_DTYPES = {
    "derived": "bool",
    "current": "bool",
    "attempts": "int64",
    "value": "float64",
    "x_value": "float64",
    "duration_s": "float64",
}
METADATA_KEY = b"attnbench"  # parquet schema metadata, see `TableMeta`
# a job without its code: records of one job and different code supersede each other
JOB_KEY = [
    "task",
    "variant",
    "variant_params",
    "task_params",
    "seed",
    "device",
    "dtype",
    "threads",
    "hardware",
]
STATUS_RANK = {"ok": 0, "unsupported": 1, "timeout": 2, "oom": 3, "failed": 4}


@dataclass
class FileEntry:
    """What collection remembers of one record file: its stamp, its content's digest and the
    record's key facts. The stamp (size, mtime) is the quick check; where it differs, the digest
    says whether the content did (a clone or a copy gives every file a new mtime, so without it
    a committed table would look out of date in every checkout). Tables written before the
    digest was kept have "" there and go by the stamp alone."""

    size: int
    mtime_ns: int
    run_id: str
    status: str
    created_at: str
    fingerprint: str
    sha256: str = ""
    # its run_id is the hash of its identity (`make_run_id`): a record copied or edited into
    # another run's id is not, and never gives that run's rows while a genuine record does
    genuine: bool = True

    def as_list(self) -> list:
        return [
            self.size,
            self.mtime_ns,
            self.run_id,
            self.status,
            self.created_at,
            self.fingerprint,
            self.sha256,
            self.genuine,
        ]

    def unchanged(self, path: Path) -> bool:
        """Whether ``path`` still holds the content this entry was made from."""
        size, mtime_ns = _stamp(path)
        if size != self.size:
            return False
        return mtime_ns == self.mtime_ns or (bool(self.sha256) and self.sha256 == _sha256(path))


@dataclass
class TableMeta:
    """The table's parquet metadata: task descriptions and the memory of the last collection.

    Attributes:
        tasks: Task name → `TaskInfo` (from the newest record of each task).
        files: Record file name → `FileEntry`.
        primary: run_id → the file its rows come from.
        code: Code fingerprint → {module: source digest}, for judging ``current``.
    """

    tasks: dict[str, TaskInfo] = field(default_factory=dict)
    files: dict[str, FileEntry] = field(default_factory=dict)
    primary: dict[str, str] = field(default_factory=dict)
    code: dict[str, dict[str, str]] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(
            {
                "tasks": {name: info.to_dict() for name, info in sorted(self.tasks.items())},
                "files": {name: e.as_list() for name, e in sorted(self.files.items())},
                "primary": dict(sorted(self.primary.items())),
                "code": dict(sorted(self.code.items())),
            }
        )

    @classmethod
    def from_json(cls, text: bytes | str) -> TableMeta:
        data = json.loads(text)
        return cls(
            tasks={n: TaskInfo.from_dict(d) for n, d in data.get("tasks", {}).items()},
            files={n: FileEntry(*e) for n, e in data.get("files", {}).items()},
            primary=dict(data.get("primary", {})),
            code={fp: dict(m) for fp, m in data.get("code", {}).items()},
        )


@dataclass
class CollectSummary:
    """What a collection did."""

    path: Path
    n_records: int = 0  # distinct runs (run_ids) in the table
    n_rows: int = 0
    n_reused: int = 0  # runs whose rows came from the previous table unchanged
    n_stale: int = 0  # runs of older code (history: in the table, not current)
    skipped: list[str] = field(default_factory=list)  # unreadable or invalid files, with why
    newer: list[str] = field(default_factory=list)  # records of a newer schema, left untouched
    dropped: int = 0  # runs the last table held whose records are gone (``drop_missing``)
    set_aside: Path | None = None  # where an unreadable last table was moved (`_set_aside`)

    def describe(self) -> str:
        """One line for the console."""
        text = f"collected {self.n_records} records ({self.n_rows} rows) into {self.path}"
        if self.n_reused:
            text += f" ({self.n_reused} unchanged since the last collection)"
        if self.n_stale:
            text += f"; {self.n_stale} of older code kept as history"
        if self.skipped:
            text += f"; skipped {len(self.skipped)} invalid files (first: {self.skipped[0]})"
        if self.newer:
            text += f"; left {len(self.newer)} records of a newer schema untouched"
        if self.dropped:
            text += f"; dropped {self.dropped} run(s) whose records are gone, as told"
        if self.set_aside:
            text += (
                f"; the last table could not be read and was moved to {self.set_aside} (it may "
                "hold runs whose records are gone)"
            )
        return text


def _as_list(value: object) -> list:
    """A list field of a record's env (older records lack it; a malformed one is ignored)."""
    return value if isinstance(value, list) else []


def _names(value: object) -> str:
    """A record's list of names as the table's text, comma-separated ("" for none, or for a
    value that is no list of names: an older or a hand-made record)."""
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return ""
    return ",".join(value)


def record_rows(record: Record, record_file: str = "") -> list[dict]:
    """The tidy rows of one record."""
    common = {
        "run_id": record.run_id,
        "derived": False,
        "status": record.status,
        "error": record.error,
        "task": record.task,
        "variant": record.variant,
        "variant_family": record.details.get("variant_family"),
        "peer_of": str(record.details.get("peer_of") or ""),  # older records: ""
        "variant_library": str(record.details.get("variant_library") or ""),
        "variant_size_params": _names(record.details.get("variant_size_params")),
        "variant_params": json.dumps(record.variant_params, sort_keys=True),
        "task_params": json.dumps(record.task_params, sort_keys=True),
        "seed": record.seed,
        "device": record.device,
        "device_name": record.env.get("device_name"),
        "hardware": record.hardware,
        "dtype": record.dtype,
        "attnbench_version": record.env.get("attnbench_version"),
        "torch_version": record.env.get("torch_version"),
        "git_commit": record.env.get("git_commit"),
        "git_dirty": record.env.get("git_dirty"),
        "git_dirty_files": ", ".join(map(str, _as_list(record.env.get("git_dirty_files")))),
        "code_source": record.env.get("code_source"),
        "threads": record.threads,
        "hostname": record.env.get("hostname"),
        "created_at": record.created_at,
        "duration_s": record.duration_s,
        "code_fingerprint": record.code_fingerprint,
        "current": True,  # judged for the whole table in `_mark_current`
        "attempts": 1,
        "latest_status": record.status,
        "record_file": record_file,
    }
    empty = dict.fromkeys(POINT_FIELDS)
    points = record.metrics or [empty]
    annotated = (record.task_info or {}).get("annotations") or {}
    return [
        {
            **common,
            **{k: p.get(k) for k in POINT_FIELDS},
            "annotation": _annotation(record, annotated, p),
        }
        for p in points
    ]


def _annotation(record: Record, annotated: dict, point: dict) -> str:
    """The text of the record's details the task declares beside ``point``'s metric
    (`TaskInfo.annotations`, e.g. which kernel a timing ran); "" where none."""
    key = annotated.get(point.get("metric")) if isinstance(annotated, dict) else None
    value = record.details.get(key) if isinstance(key, str) else None
    return value if isinstance(value, str) else ""


def read_table(path: str | os.PathLike) -> tuple[pd.DataFrame, dict[str, TaskInfo]]:
    """The results table at ``path`` and the task descriptions in its metadata.

    Raises:
        OSError, ValueError (pyarrow's errors included): the file is missing or not a table.
    """
    frame, meta = _read_with_meta(path)
    return frame, meta.tasks


def _read_with_meta(path: str | os.PathLike) -> tuple[pd.DataFrame, TableMeta]:
    table = pq.read_table(path)
    raw = (table.schema.metadata or {}).get(METADATA_KEY)
    try:
        meta = TableMeta.from_json(raw) if raw else TableMeta()
    except (TypeError, KeyError) as exc:
        raise ValueError(f"{path} has unreadable attnbench metadata ({exc})") from None
    return table.to_pandas(), meta


def _previous(results_dir: Path) -> tuple[TableMeta, pd.DataFrame | None]:
    """The last collection's memory and its run rows; (empty, None) if unusable."""
    try:
        table, meta = _read_with_meta(results_dir / TABLE_NAME)
    except (OSError, ValueError, ImportError):
        return TableMeta(), None
    if list(table.columns) != COLUMNS:
        return TableMeta(tasks=meta.tasks), None
    return meta, table[~table["derived"].astype(bool)]


def uncollected(results_dir: str | os.PathLike) -> int:
    """How many record files of ``results_dir/runs`` the table does not reflect: new or changed
    since the last collection, or gone from the folder. Reads only the table's metadata.

    `harness.results.freshness` asks before a table is read, so that records a sweep wrote after
    the table (a sweep stopped before it collected, records copied in) are collected rather than
    shown as "not valid records of the table's runs".
    """
    results_dir = Path(results_dir)
    table = results_dir / TABLE_NAME
    try:
        collected_ns = table.stat().st_mtime_ns
    except OSError:
        return 0  # no table: the caller's own checks say so
    files = _remembered_files(table)
    if files is None:
        return 0  # no usable table: the caller's own checks say so
    present, changed = set(), 0
    for path in runs_dir(results_dir).glob("*.json"):
        if path.is_symlink() or not path.is_file():
            continue
        present.add(path.name)
        entry = files.get(path.name)
        if entry is None:  # new, unless the last collection saw it and skipped it (not a record)
            changed += path.stat().st_mtime_ns > collected_ns
        elif not entry.unchanged(path):
            changed += 1
    return changed + len(set(files) - present)


def _remembered_files(table: Path) -> dict[str, FileEntry] | None:
    """The record files the last collection of ``table`` took (`TableMeta.files`), read from its
    metadata alone; None where there is no usable table."""
    try:
        raw = (pq.read_schema(table).metadata or {}).get(METADATA_KEY)
        return TableMeta.from_json(raw).files if raw else {}
    except (OSError, ValueError, TypeError, KeyError, pa.ArrowException):
        return None


def left_out(results_dir: str | os.PathLike) -> list[str]:
    """The record files of ``results_dir/runs`` that its table's last collection left out, each
    in the line collection warned it with ("skipping PATH: field seed = … is beyond …", "left
    untouched: …"): a file that is not a regular file, not a valid record, or of a newer schema.

    The table remembers only the files it took, so a reader of a table that is not collected
    again (it is fresh, or the folder cannot be written) finds the others here, each read again,
    and can name them as collection did. A valid record the table does not hold yet (written
    since) is not left out: `uncollected` counts it. Empty where there is no usable table.
    """
    results_dir = Path(results_dir)
    files = _remembered_files(results_dir / TABLE_NAME)
    if files is None:
        return []
    lines = []
    for path in sorted(runs_dir(results_dir).glob("*.json")):
        if path.name in files:
            continue
        if path.is_symlink() or not path.is_file():
            lines.append(f"skipping {path}: not a regular file")
            continue
        try:
            read_record(path)
        except (RecordSchemaError, OSError, ValueError) as exc:
            lines.append(_skipped_line(path, exc))
    return lines


def _skipped_line(path: Path, exc: Exception) -> str:
    """The line collection warns a record file it leaves out with (``exc``: why)."""
    if isinstance(exc, NewerSchemaError):
        return f"left untouched: {exc}"
    return f"skipping {exc}" if str(path) in str(exc) else f"skipping {path}: {exc}"


def judged_now(frame: pd.DataFrame, table: str | os.PathLike) -> tuple[pd.DataFrame, int]:
    """``frame``, the table read from ``table``, with ``current`` judged against the installed
    code, and how many runs that changed. Where a run changed, the
    derived rows (scaling fits) of its task are dropped: they were fitted over what was current
    for the other code. For a table that cannot be collected again (no records beside it, a
    record gone, a read-only folder), so its runs of older code are still left out."""
    code = _table_code(table)
    runs = frame[~frame["derived"].astype(bool)]
    if code is None or runs.empty:
        return frame, 0
    now = _judged_where_known(runs, code)
    changed = runs.loc[now != runs["current"].astype(bool)]
    if changed.empty:
        return frame, 0
    frame = frame.copy()
    frame.loc[now.index, "current"] = now
    refitted = frame["derived"].astype(bool) & frame["task"].isin(set(changed["task"]))
    return frame[~refitted], int(changed["run_id"].nunique())


def unjudged(frame: pd.DataFrame, table: str | os.PathLike) -> int:
    """How many runs of ``frame`` (the table read from ``table``) are marked current though the
    table does not record their code (no metadata, or none for their fingerprint: a table not
    written by this collector, or altered). Nothing can judge them against the installed code;
    the reader says so rather than call them the installed code's."""
    code = _table_code(table) or {}
    runs = frame[~frame["derived"].astype(bool) & frame["current"].astype(bool)]
    return int(runs.loc[~runs["code_fingerprint"].isin(set(code)), "run_id"].nunique())


def _table_code(table: str | os.PathLike) -> dict[str, dict[str, str]] | None:
    """The table's memory of its runs' code (fingerprint → module digests); {} where it has
    none, None where its schema cannot be read."""
    try:
        raw = (pq.read_schema(table).metadata or {}).get(METADATA_KEY)
        return TableMeta.from_json(raw).code if raw else {}
    except (OSError, ValueError, TypeError, KeyError, pa.ArrowException):
        return None


def judgement_due(results_dir: str | os.PathLike) -> tuple[int, int]:
    """How many runs of ``results_dir``'s table carry a ``current`` judged against other code
    than the installed attnbench (a table collected before the code changed, such as a committed
    reference: `judged_now`), and how many are marked current without a record of their code
    (`unjudged`), from the table's metadata and one read of a few of its columns; (0, 0) without
    a usable table (the caller's own checks say so).

    `harness.results.freshness` asks before a table is read, so that runs of older code are
    left out for the code installed, not for the code that happened to collect them.
    """
    table = Path(results_dir) / TABLE_NAME
    runs = _judging_columns(table)
    return (0, 0) if runs is None else (judged_now(runs, table)[1], unjudged(runs, table))


def _judging_columns(table: Path) -> pd.DataFrame | None:
    """The columns of ``table`` that judging its runs reads; None for no usable table."""
    columns = ["run_id", "derived", "current", "code_fingerprint", "created_at", *JOB_KEY]
    try:
        return pq.read_table(table, columns=columns).to_pandas()
    except (OSError, ValueError, TypeError, KeyError, pa.ArrowException):
        return None


def _judged_where_known(runs: pd.DataFrame, code: dict[str, dict[str, str]]) -> pd.Series:
    """``current`` of ``runs`` judged now where the table remembers their code (its metadata's
    fingerprint → module digests); the table's own flag where it does not (a table written
    without that memory cannot be judged again, and is not judged stale for it)."""
    known = runs["code_fingerprint"].isin(set(code))
    return _mark_current(runs, code).where(known, runs["current"].astype(bool))


def _stamp(path: Path) -> tuple[int, int]:
    stat = path.stat()
    return stat.st_size, stat.st_mtime_ns


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _best(names: list[str], files: dict[str, FileEntry]) -> str:
    """The file whose record gives a run's rows: a genuine one (`FileEntry.genuine`) first, then
    ok, then the newest, then the file named after the run_id, then by name (deterministic)."""

    def key(name: str) -> tuple:
        e = files[name]
        status = -STATUS_RANK.get(e.status, 9)
        return (e.genuine, status, e.created_at, name == f"{e.run_id}.json", name)

    return max(names, key=key)


class _CodeJudge:
    """Whether a code fingerprint is the installed code's: "current", "stale" or "unknown"."""

    def __init__(self, code: dict[str, dict[str, str]]) -> None:
        self.code = code
        self.digests: dict[str, str | None] = {}

    def _digest(self, module: str) -> str | None:
        if module not in self.digests:
            self.digests[module] = module_digest(module)
        return self.digests[module]

    def state(self, fingerprint: str) -> str:
        modules = self.code.get(fingerprint)
        if not fingerprint or not modules:
            return "stale"  # recorded before code fingerprints: which code made it is unknown
        unknown = False
        for module, digest in modules.items():
            now = self._digest(module)
            if now is None and module_file(module.split(".")[0]) is None:
                unknown = True  # its package is not installed here: cannot tell
            elif module.startswith(DISTRIBUTION) and now == NOT_INSTALLED != digest:
                unknown = True  # a library it wrapped is not installed here: cannot tell
            elif now != digest:
                return "stale"  # changed, or removed from a package that is installed
        return "unknown" if unknown else "current"


def _mark_current(frame: pd.DataFrame, code: dict[str, dict[str, str]]) -> pd.Series:
    """The ``current`` column (see the module docstring)."""
    if frame.empty:
        return pd.Series([], dtype=bool)
    judge = _CodeJudge(code)
    runs = frame.drop_duplicates("run_id").set_index("run_id")
    state = runs["code_fingerprint"].fillna("").map(judge.state)
    live = runs[state != "stale"]
    newest = live.groupby(JOB_KEY, dropna=False)["created_at"].transform("max")
    superseded = live["created_at"] < newest
    current = (state == "current") | (
        (state == "unknown") & ~superseded.reindex(state.index, fill_value=True)
    )
    return frame["run_id"].map(current).astype(bool)


def results_frame(
    results_dir: str | os.PathLike, incremental: bool = True
) -> tuple[pd.DataFrame, CollectSummary, TableMeta]:
    """Read every record under ``results_dir/runs`` into the tidy table (not written).

    Returns:
        (table, summary, the metadata to store with it).
    """
    results_dir = Path(results_dir)
    summary = CollectSummary(path=results_dir / TABLE_NAME)
    old, old_table = _previous(results_dir) if incremental else (TableMeta(), None)
    read = _read_files(results_dir, old, old_table is not None, summary)
    runs = _run_rows(results_dir, read, old.primary, summary)
    frame = _with_fits(_run_frame(runs, old_table, read.meta, summary), read.meta.tasks)
    summary.n_records = len(runs.attempts)
    summary.n_stale = int(frame.loc[~frame["current"], "run_id"].nunique())
    summary.n_rows = len(frame)
    return frame, summary, read.meta


@dataclass
class _Read:
    """What reading the record files gave: the metadata to store with the table, and the records
    read anew (file name → record; the files unchanged since the last collection are not read)."""

    meta: TableMeta
    records: dict[str, Record] = field(default_factory=dict)


@dataclass
class _RunRows:
    """Every run's rows, by where they come from, and its attempts.

    Attributes:
        rows: The rows of the records read for this table.
        reused: run_ids whose rows are taken from the previous table unchanged.
        attempts: run_id → how many distinct records it has.
        latest: run_id → the status of the newest of them.
    """

    rows: list[dict] = field(default_factory=list)
    reused: set[str] = field(default_factory=set)
    attempts: dict[str, int] = field(default_factory=dict)
    latest: dict[str, str] = field(default_factory=dict)


# The warnings of a collection name the line that called `results_frame`: each ``stacklevel``
# below is 2 plus the depth of its function under `results_frame`.


def _read_files(results_dir: Path, old: TableMeta, reuse: bool, summary: CollectSummary) -> _Read:
    """Read the record files of ``results_dir/runs``, except, where ``reuse``, those unchanged
    since the last collection (``old``), which keep their entry."""
    read = _Read(TableMeta(tasks=dict(old.tasks), code=dict(old.code)))
    newest: dict[str, str] = {}  # task → created_at of the record its description came from
    for path in sorted(runs_dir(results_dir).glob("*.json")):
        if path.is_symlink() or not path.is_file():
            summary.skipped.append(f"{path}: not a regular file")
            warnings.warn(f"skipping {path}: not a regular file", stacklevel=3)
            continue
        earlier = old.files.get(path.name)
        if reuse and earlier and earlier.unchanged(path):
            read.meta.files[path.name] = replace(
                earlier, mtime_ns=_stamp(path)[1]
            )  # a copy's mtime
            continue
        stamp = _stamp(path)
        record = _read_new(path, summary)
        if record is not None:
            read.records[path.name] = record
            _remember(read.meta, newest, path, stamp, record)
    return read


def _read_new(path: Path, summary: CollectSummary) -> Record | None:
    """The record in ``path``; None where it is invalid or of a newer schema (``summary`` and a
    warning say so)."""
    try:
        return read_record(path)
    except NewerSchemaError as exc:
        summary.newer.append(str(path))
        warnings.warn(_skipped_line(path, exc), stacklevel=4)
    except (RecordSchemaError, OSError, ValueError) as exc:  # ValueError: JSON, fields
        summary.skipped.append(f"{path.name}: {exc}")
        warnings.warn(_skipped_line(path, exc), stacklevel=4)
    return None


def _remember(
    meta: TableMeta, newest: dict[str, str], path: Path, stamp: tuple[int, int], record: Record
) -> None:
    """Enter a record read anew in ``meta``: its file, its code, and its task's description where
    it is the newest record of the task so far (``newest``: task → created_at)."""
    meta.files[path.name] = FileEntry(
        *stamp,
        record.run_id,
        record.status,
        record.created_at,
        record.code_fingerprint,
        _sha256(path),
        make_run_id(record.identity()) == record.run_id,
    )
    if record.code_fingerprint and record.code_modules:  # the two agree (`record_from_data`)
        meta.code[record.code_fingerprint] = record.code_modules
    if record.task_info and record.created_at >= newest.get(record.task, ""):
        meta.tasks[record.task] = TaskInfo.from_dict(record.task_info)
        newest[record.task] = record.created_at


def _attempts(names: list[str], files: dict[str, FileEntry]) -> tuple[int, str]:
    """(distinct records, status of the newest) of one run's record files ``names``."""
    distinct = {(files[n].created_at, files[n].status) for n in names}
    latest = max(distinct, key=lambda a: (a[0], -STATUS_RANK.get(a[1], 9)))[1]
    return len(distinct), latest


def _run_rows(
    results_dir: Path, read: _Read, old_primary: dict[str, str], summary: CollectSummary
) -> _RunRows:
    """Each run's rows from its best record (`_best`, entered in ``read.meta.primary``): reused
    where the last collection (``old_primary``) took them from the same unchanged file."""
    by_run: dict[str, list[str]] = {}
    for name, entry in read.meta.files.items():
        by_run.setdefault(entry.run_id, []).append(name)
    runs = _RunRows()
    for run_id, names in sorted(by_run.items()):
        primary = _best(names, read.meta.files)
        read.meta.primary[run_id] = primary
        runs.attempts[run_id], runs.latest[run_id] = _attempts(names, read.meta.files)
        if primary not in read.records and old_primary.get(run_id) == primary:
            runs.reused.add(run_id)
            continue
        record = read.records.get(primary)
        if record is None:  # unchanged, but it gives the rows now (its sibling went away)
            try:
                record = read_record(runs_dir(results_dir) / primary)
            except (OSError, ValueError) as exc:  # changed since it was listed
                summary.skipped.append(f"{primary}: {exc}")
                warnings.warn(f"skipping {primary}: {exc}", stacklevel=3)
                continue
        runs.rows.extend(record_rows(record, primary))
    return runs


def _run_frame(
    runs: _RunRows, old_table: pd.DataFrame | None, meta: TableMeta, summary: CollectSummary
) -> pd.DataFrame:
    """The run rows as a table: the reused rows of ``old_table``, then the new ones, with their
    attempts and ``current`` judged against ``meta.code``."""
    parts = [pd.DataFrame(runs.rows, columns=COLUMNS)]
    if runs.reused and old_table is not None:
        parts.insert(0, old_table[old_table["run_id"].isin(runs.reused)])
        summary.n_reused = len(runs.reused)
    frame = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
    frame["attempts"] = frame["run_id"].map(runs.attempts)
    frame["latest_status"] = frame["run_id"].map(runs.latest)
    frame["current"] = _mark_current(frame, meta.code)
    return frame.astype(TABLE_DTYPES)


def _with_fits(frame: pd.DataFrame, tasks: dict[str, TaskInfo]) -> pd.DataFrame:
    """``frame`` with the scaling fits of its current rows appended, fitted over steady points
    only, each judged reliable or not (`harness.results.fit_quality`)."""
    current = frame[frame["current"]]
    fits = [{**row, "current": True, "attempts": 0} for row in judged_fit_rows(current, tasks)]
    if fits:
        frame = pd.concat([frame, pd.DataFrame(fits, columns=COLUMNS)], ignore_index=True)
    return frame.astype(TABLE_DTYPES)


def write_table(frame: pd.DataFrame, path: Path, meta: TableMeta | None = None) -> None:
    """Write ``frame`` as parquet atomically (temporary file in the same folder, then rename),
    with ``meta`` (task descriptions and the collection's memory) in its metadata."""
    table = pa.Table.from_pandas(frame, preserve_index=False)
    table = table.replace_schema_metadata(
        {**(table.schema.metadata or {}), METADATA_KEY: (meta or TableMeta()).to_json().encode()}
    )
    with atomic_file(path) as tmp:
        pq.write_table(table, tmp)


class MissingRunsError(ValueError):
    """Collecting would replace the table with one that lacks runs it holds (their records are
    gone from ``runs/`` or no longer valid); the table is left as it is. The message is one
    sentence naming the folder, both run counts and the flag that collects anyway.

    Attributes:
        results_dir: The results folder.
        held: Runs (distinct run_ids, not derived) the table holds.
        collected: Runs the records give.
        missing: Runs of the table the records no longer give.
    """

    def __init__(self, results_dir: Path, held: int, collected: int, missing: int) -> None:
        self.results_dir = results_dir
        self.held = held
        self.collected = collected
        self.missing = missing
        super().__init__(
            f"{missing} of the {held} runs {results_dir / TABLE_NAME} holds have no valid record "
            f"in {runs_dir(results_dir)} any more (the records there give {collected} runs), so "
            "collecting would drop them; the table is left as it is: restore the records, "
            f"or drop those runs with attnbench-collect --drop-missing {results_dir}."
        )


def table_kind_error(table: Path, kind: str) -> str:
    """The sentence for a table file ``table`` that is ``kind`` (`not_a_file`), not a file."""
    return (
        f"{table} is {kind}, not a results table file; remove it and collect the records again "
        f"(attnbench-collect {table.parent})"
    )


def run_ids(frame: pd.DataFrame) -> set[str]:
    """The runs of a results table: the distinct run_ids of its rows not ``derived`` (a table of
    an older layout without the column: of all its rows)."""
    if "run_id" not in frame.columns:
        return set()
    if "derived" in frame.columns:
        frame = frame[~frame["derived"].astype(bool)]
    return set(frame["run_id"].dropna().astype(str))


def _held_runs(path: Path) -> set[str] | None:
    """The runs of the table at ``path`` (none where there is no table); None where there is one
    that cannot be read."""
    if not path.exists():
        return set()
    try:
        names = pq.read_schema(path).names
        columns = [c for c in ("run_id", "derived") if c in names]
        return run_ids(pq.read_table(path, columns=columns).to_pandas()) if columns else set()
    except (OSError, ValueError, pa.ArrowException):
        return None


def _set_aside(table: Path) -> Path:
    """Move an unreadable ``table`` to a name of its own beside it and return that name: it may
    hold runs whose records are gone (a table copied without its folder, a disk error), so a new
    collection never writes over it; the user decides what to do with it."""
    stamp = time.strftime("%Y%m%dT%H%M%S")
    aside = table.with_name(f"{table.stem}.unreadable-{stamp}{table.suffix}")
    n = 1
    while aside.exists():
        n += 1
        aside = table.with_name(f"{table.stem}.unreadable-{stamp}-{n}{table.suffix}")
    os.replace(table, aside)
    log.warning("%s could not be read; moved it to %s and wrote a new table", table, aside)
    return aside


def collect(
    results_dir: str | os.PathLike = "results",
    incremental: bool = True,
    drop_missing: bool = False,
) -> CollectSummary:
    """Consolidate the run records of ``results_dir`` into ``results_dir/results.parquet``.

    Holds ``results_dir/.collect.lock`` from reading the last table to writing the new one, so
    that two collectors (two sweeps ending together) take turns and neither loses the other's
    records.

    Args:
        results_dir: Folder holding ``runs/``.
        incremental: Reuse the rows of record files unchanged since the last collection.
        drop_missing: Write the table even where it drops runs the last one held (their records
            are gone); without it that raises `MissingRunsError` (see the module docstring).

    Raises:
        MissingRunsError: the records no longer give every run the table holds; nothing written.
        OSError: the folder cannot be written, ``runs/`` is a symbolic link that leads back
            into itself (ELOOP; read as an empty folder, it would look like every run gone), or
            ``results.parquet`` is not a regular file (EINVAL: a named pipe, a folder).
    """
    results_dir = Path(results_dir)
    if looping_link(runs_dir(results_dir)):
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(runs_dir(results_dir)))
    if kind := not_a_file(results_dir / TABLE_NAME):  # reading a named pipe would never end
        raise OSError(errno.EINVAL, table_kind_error(results_dir / TABLE_NAME, kind))
    results_dir.mkdir(parents=True, exist_ok=True)
    with _collection_lock(results_dir / LOCK_NAME):
        _remove_orphans(results_dir)
        held = _held_runs(results_dir / TABLE_NAME)
        aside = _set_aside(results_dir / TABLE_NAME) if held is None else None
        frame, summary, meta = results_frame(results_dir, incremental)
        summary.set_aside = aside
        runs = run_ids(frame)
        missing = (held or set()) - runs
        if missing and not drop_missing:
            raise MissingRunsError(results_dir, len(held), len(runs), len(missing))
        summary.dropped = len(missing)
        write_table(frame, summary.path, meta)
    return summary


@contextlib.contextmanager
def _collection_lock(lock_file: Path):
    """Hold the collection lock ``lock_file``, leaving a note of this process beside it; where
    another holds it longer than `LOCK_PATIENCE_S`, say who and for how long
    (`lock_holder.describe_holder`: a stopped collector never ends its hold), then wait on."""
    lock = FileLock(lock_file)
    try:
        lock.acquire(timeout=LOCK_PATIENCE_S)
    except Timeout:
        log.warning(
            "waiting for the collection lock %s: it is %s; Ctrl-C stops waiting.",
            lock_file,
            describe_holder(lock_file),
        )
        lock.acquire()
    try:
        note_holder(lock_file)
        yield
    finally:
        clear_note(lock_file)
        lock.release()


def _remove_orphans(results_dir: Path) -> None:
    """Delete the temporary tables of collectors that were killed (kill -9 gives no chance to
    clean up). Only a collector holding the lock writes one, and this one holds it now, so every
    temporary table there is an orphan."""
    for orphan in results_dir.glob(f".{TABLE_NAME}.*.tmp"):
        with contextlib.suppress(OSError):
            orphan.unlink()
            log.info("removed %s, left by a collection that was killed", orphan)
