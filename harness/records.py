"""Run records: one JSON file per job, written atomically, read back with a schema check.

Layout: ``<results_dir>/runs/<run_id>.json``. ``run_id`` is a stable hash of the resolved job
config (task, variant, their parameters, seed, device, dtype), so re-running a sweep finds the
records it already has.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 2  # 2: task_info (the task's self-description) and env.code_source
STATUSES = ("ok", "failed", "oom", "timeout", "unsupported")


class RecordSchemaError(ValueError):
    """A record cannot be read by this version of attnbench."""


@dataclass
class Record:
    """Everything one job produced and everything needed to reproduce it.

    Attributes:
        run_id: Hash of the job identity (see `make_run_id`).
        status: One of `STATUSES`.
        error: Error text when status is not "ok".
        task, variant: Registered names.
        task_params, variant_params: Resolved hyperparameters.
        seed, device, dtype: Job settings (device resolved, e.g. "cpu" rather than "auto").
        metrics: Metric points: dicts with metric, value, x_name, x_value, higher_is_better.
        env: Versions, commit, machine, threads (see `harness.env.environment`).
        created_at: ISO-8601 UTC time the job finished.
        duration_s: Wall time of the job.
        details: Task-specific extras (loss curves, sample counts, ...).
        task_info: The task's self-description (`harness.task_info.TaskInfo` as data): its
            metrics, headline, charts, cost metric and scaling fits, so that collection and the
            leaderboard need no plugin. Empty in records of schema 1.
        schema_version: Version of this layout.
    """

    run_id: str
    status: str
    task: str
    variant: str
    task_params: dict[str, Any]
    variant_params: dict[str, Any]
    seed: int
    device: str
    dtype: str
    error: str | None = None
    metrics: list[dict[str, Any]] = field(default_factory=list)
    env: dict[str, Any] = field(default_factory=dict)
    created_at: str = ""
    duration_s: float = 0.0
    details: dict[str, Any] = field(default_factory=dict)
    task_info: dict[str, Any] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    def to_json(self) -> str:
        """The record as indented JSON text (non-finite floats are written as null)."""
        return json.dumps(_finite_or_none(dataclasses.asdict(self)), indent=1, sort_keys=True)


def make_run_id(identity: dict[str, Any]) -> str:
    """Stable 16-hex-digit hash of a job identity (key order does not matter)."""
    canonical = json.dumps(identity, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


# The form of every run_id `make_run_id` produces (and of the fit rows' ids). A string of this
# form is safe as a file name and inside a link; anything else read from a table or a folder
# (``../../etc/passwd``, quotes, a trailing newline) must not become either. \A…\Z, not ^…$:
# ``$`` also matches before a trailing newline.
RUN_ID_PATTERN = re.compile(r"\A[0-9a-f]{16}\Z")


def is_run_id(text: object) -> bool:
    """Whether ``text`` is a string of the run_id form (16 lowercase hex digits)."""
    return isinstance(text, str) and RUN_ID_PATTERN.match(text) is not None


def runs_dir(results_dir: str | os.PathLike) -> Path:
    """Folder holding one JSON record per job."""
    return Path(results_dir) / "runs"


def record_path(results_dir: str | os.PathLike, run_id: str) -> Path:
    """Where the record of ``run_id`` lives."""
    return runs_dir(results_dir) / f"{run_id}.json"


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that readers see the old file or the new one, never a part.

    The text goes to a temporary file in the same folder, is flushed to disk, then renamed.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; results are meant to be shared
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_record(results_dir: str | os.PathLike, record: Record) -> Path:
    """Atomically write ``record`` to its place under ``results_dir``; returns the path."""
    path = record_path(results_dir, record.run_id)
    atomic_write_text(path, record.to_json())
    return path


def read_record(path: Path) -> Record:
    """Read one record.

    Raises:
        RecordSchemaError: the file is not an attnbench record, or was written by a newer schema.
        json.JSONDecodeError, OSError: the file is unreadable.
    """
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or "run_id" not in data or "schema_version" not in data:
        raise RecordSchemaError(f"{path} is not an attnbench run record")
    version = data["schema_version"]
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        raise RecordSchemaError(
            f"{path} has record schema version {version}, newer than this attnbench reads "
            f"({SCHEMA_VERSION}); upgrade attnbench (pip install -U attnbench) to read it."
        )
    known = {f.name for f in dataclasses.fields(Record)}
    return Record(**{k: v for k, v in data.items() if k in known})


def find_ok_record(results_dir: str | os.PathLike, run_id: str) -> Record | None:
    """The finished (status ok) record of ``run_id``; None if there is none or it is unreadable."""
    path = record_path(results_dir, run_id)
    if not path.exists():
        return None
    try:
        record = read_record(path)
    except (OSError, ValueError):
        return None
    return record if record.status == "ok" else None


def _finite_or_none(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if obj == obj and obj not in (float("inf"), float("-inf")) else None
    if isinstance(obj, dict):
        return {k: _finite_or_none(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite_or_none(v) for v in obj]
    return obj
