"""Run records: one JSON file per job, written atomically, read back with a field-by-field check.

Layout: ``<results_dir>/runs/<run_id>.json``. ``run_id`` is a hash of the job's identity: what
determines its measurement (task, variant, their parameters, seed, device, dtype, thread count,
hardware, and the fingerprint of the code that ran it, `harness.jobs.fingerprint`), so re-running a
sweep finds the records it already has, and a change of code, threads or machine runs anew.

Records are history: none is ever overwritten by a worse one. `write_record` keeps an existing
`ok` record in its place when a re-run fails (the failure is kept beside it, as an attempt file
``<run_id>.<time>.json``), moves an older record of the same run to such an attempt file when a
newer one takes its place, and never touches a file it cannot read (a record of a newer schema).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import logging
import math
import os
import re
import secrets
import stat
import types
import typing
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from attnbench.harness.jobs.fingerprint import combined_digest
from attnbench.task_info import TaskInfo

log = logging.getLogger(__name__)

# 2: task_info and env.code_source; 3: threads, hardware and the code fingerprint in the identity
SCHEMA_VERSION = 3
STATUSES = ("ok", "failed", "oom", "timeout", "unsupported")
# the statuses of a job that failed (not `unsupported`: a declaration, not a crash)
FAILURES = ("failed", "oom", "timeout")
# The form of every run_id `make_run_id` produces (and of the fit rows' ids). A string of this
# form is safe as a file name and inside a link; anything else read from a table or a folder
# (``../../etc/passwd``, quotes, a trailing newline) must not become either (use fullmatch).
RUN_ID_PATTERN = re.compile(r"[0-9a-f]{16}")
IDENTITY_FIELDS = (
    "task",
    "task_params",
    "variant",
    "variant_params",
    "seed",
    "device",
    "dtype",
    "threads",
    "hardware",
    "code_fingerprint",
)


ATTEMPT_NAME = re.compile(r"([0-9a-f]{16})\.[0-9]{8}T[0-9]{6}Z(?:-[0-9]+)?\.json")


def attempt_run_id(file_name: str) -> str | None:
    """The run_id of a kept attempt's file name (``<run_id>.<time>.json``, see `write_record`);
    None for any other name."""
    match = ATTEMPT_NAME.fullmatch(file_name)
    return match.group(1) if match else None


def is_run_id(text: object) -> bool:
    """Whether ``text`` is a run_id as `make_run_id` makes them (16 lowercase hex digits)."""
    return isinstance(text, str) and RUN_ID_PATTERN.fullmatch(text) is not None


class RecordSchemaError(ValueError):
    """A file is not a record this version of attnbench can read (foreign, or a newer schema)."""


class NewerSchemaError(RecordSchemaError):
    """A record written by a newer attnbench: left untouched, and reported."""


class RecordFieldError(ValueError):
    """A record's field is missing or of the wrong type; the message names the file and field."""


@dataclass
class Record:
    """Everything one job produced and everything needed to reproduce it.

    Attributes:
        run_id: Hash of the job identity (`identity`, `make_run_id`).
        status: One of `STATUSES`.
        error: Error text when status is not "ok".
        task, variant: Registered names.
        task_params, variant_params: Resolved hyperparameters.
        seed, device, dtype: Job settings (device resolved, e.g. "cpu" rather than "auto").
        threads: CPU threads the job ran with (resolved: never 0).
        hardware: The machine it ran on (`harness.jobs.env.device_name`): the CPU model and the
            vector capability torch dispatched to (device cpu), or the GPU name (device cuda).
        code_fingerprint: Digest of `code_modules` (`harness.jobs.fingerprint.combined_digest`).
        code_modules: {module: SHA-256 of its source} of the variant's and task's modules and the
            project modules they use; collection compares them with the installed code.
        metrics: Metric points: dicts with metric, value, x_name, x_value, higher_is_better.
        env: Versions, commit, machine, threads (see `harness.jobs.env.environment`).
        created_at: ISO-8601 UTC time the job finished.
        duration_s: Wall time of the job.
        details: Task-specific extras (loss curves, sample counts, ...).
        task_info: The task's self-description (`attnbench.task_info.TaskInfo` as data): its
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
    threads: int = 0
    hardware: str = ""
    code_fingerprint: str = ""
    code_modules: dict[str, str] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    def identity(self) -> dict[str, Any]:
        """The fields its run_id hashes (`IDENTITY_FIELDS`)."""
        return {name: getattr(self, name) for name in IDENTITY_FIELDS}

    def to_json(self) -> str:
        """The record as indented JSON text (non-finite floats are written as null)."""
        return json.dumps(_finite_or_none(dataclasses.asdict(self)), indent=1, sort_keys=True)


def make_run_id(identity: dict[str, Any]) -> str:
    """Stable 16-hex-digit hash of a job identity (key order does not matter)."""
    canonical = json.dumps(identity, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def runs_dir(results_dir: str | os.PathLike) -> Path:
    """Folder holding one JSON record per job."""
    return Path(results_dir) / "runs"


def records_of(folder: str | os.PathLike) -> Path | None:
    """The results folder whose ``runs/`` ``folder`` is, where a results folder was asked for
    and its records folder given (``results/runs``: named runs, with records, without a runs/ of
    its own); else None. The commands then name the results folder, not ``results/runs/runs``."""
    path = Path(folder)
    try:
        if path.name != "runs" or (path / "runs").exists() or not path.is_dir():
            return None
        return path.parent if any(path.glob("*.json")) else None
    except OSError:
        return None


def runs_is_a_file(results_dir: str | os.PathLike) -> str | None:
    """The refusal of a results folder whose ``runs`` is a file, not the records folder a sweep
    writes (the commands that read records say so rather than "no records"); None otherwise,
    also where the name is too long to look at (the caller's own checks say that)."""
    runs = runs_dir(results_dir)
    try:
        a_file = runs.exists() and not runs.is_dir()
    except OSError:
        return None
    if not a_file:
        return None
    return (
        f"{runs} is a file, not the folder of run records a sweep writes; move it aside or give "
        "another results folder."
    )


def record_path(results_dir: str | os.PathLike, run_id: str) -> Path:
    """Where the record of ``run_id`` lives; a ``run_id`` that is not one is refused, so that no
    text from a record or a config ever becomes a path."""
    if not is_run_id(run_id):
        raise ValueError(f"run_id {run_id!r} is not 16 lowercase hex digits")
    return runs_dir(results_dir) / f"{run_id}.json"


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that readers see the old file or the new one, never a part.

    The text goes to a temporary file in the same folder, is flushed to disk, then renamed.
    """
    with atomic_file(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


@contextlib.contextmanager
def atomic_file(path: Path):
    """A temporary path beside ``path`` for a writer that takes a path (pandas' ``to_csv`` and
    ``to_parquet``, a copy): renamed onto ``path`` when the block ends, removed if it raised, so
    that a reader, or an interrupted writer, sees the old file or the new one, never a part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        # the name is chosen before the file exists, so that a stop (Ctrl-C, a caught SIGTERM)
        # landing anywhere from here on leaves no file behind: `finally` knows its name
        tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
            break
        except FileExistsError:
            continue
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    try:
        yield tmp
        os.chmod(tmp, 0o644)  # the umask may have taken bits; results are meant to be shared
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _attempt_path(record_file: Path, created_at: str) -> Path:
    """A free file name beside ``record_file`` for a kept attempt: ``<run_id>.<time>[-k].json``."""
    stamp = re.sub(r"[^0-9T]", "", created_at.split("+")[0])[:15] or "unknown"
    for k in range(1, 10_000):
        suffix = f"{stamp}Z" if k == 1 else f"{stamp}Z-{k}"
        candidate = record_file.with_name(f"{record_file.stem}.{suffix}.json")
        if not candidate.exists():
            return candidate
    raise FileExistsError(f"no free attempt file name beside {record_file}")


def write_record(results_dir: str | os.PathLike, record: Record) -> Path:
    """Write ``record`` under ``results_dir`` atomically, never destroying an earlier record.

    The run's file ``runs/<run_id>.json`` holds its best record. If that file exists:

    - it holds an `ok` record and ``record`` is not ok: the `ok` record stays, and ``record`` is
      written beside it as an attempt (the leaderboard says that the latest attempt failed);
    - it cannot be read (a newer schema, or not a record): it is left untouched, reported, and
      ``record`` is written beside it as an attempt;
    - otherwise the earlier record moves to an attempt file and ``record`` takes its place.

    Returns:
        The path ``record`` was written to.
    """
    path = record_path(results_dir, record.run_id)
    if path.exists():
        try:
            earlier = read_record(path)
        except (OSError, ValueError) as exc:
            beside = _attempt_path(path, record.created_at)
            log.warning("left %s untouched (%s); wrote the new record to %s", path, exc, beside)
            atomic_write_text(beside, record.to_json())
            return beside
        if earlier.status == "ok" and record.status != "ok":
            beside = _attempt_path(path, record.created_at)
            atomic_write_text(beside, record.to_json())
            return beside
        os.replace(path, _attempt_path(path, earlier.created_at))  # history, kept
    atomic_write_text(path, record.to_json())
    return path


def _type_name(expected: type | tuple[type, ...]) -> str:
    types = expected if isinstance(expected, tuple) else (expected,)
    return " or ".join("null" if t is type(None) else t.__name__ for t in types)


def _check_type(where: str, name: str, value: Any, expected: type | tuple[type, ...]) -> None:
    types = expected if isinstance(expected, tuple) else (expected,)
    ok = isinstance(value, types) and not (isinstance(value, bool) and bool not in types)
    if not ok:
        raise RecordFieldError(
            f"{where}: field {name} must be {_type_name(expected)}, "
            f"not {type(value).__name__} ({json.dumps(value, default=str)[:60]})"
        )


FIELD_TYPES: dict[str, type | tuple[type, ...]] = {
    "run_id": str,
    "status": str,
    "task": str,
    "variant": str,
    "task_params": dict,
    "variant_params": dict,
    "seed": int,
    "device": str,
    "dtype": str,
    "error": (str, type(None)),
    "metrics": list,
    "env": dict,
    "created_at": str,
    "duration_s": (int, float, type(None)),  # null: written from a non-finite value
    "details": dict,
    "task_info": dict,
    "threads": int,
    "hardware": str,
    "code_fingerprint": str,
    "code_modules": dict,
    "schema_version": int,
}
POINT_TYPES: dict[str, type | tuple[type, ...]] = {
    "metric": str,
    "value": (int, float, type(None)),  # null: a non-finite value (a failed job has no points)
    "x_name": (str, type(None)),
    "x_value": (int, float, type(None)),
    "higher_is_better": (bool, type(None)),
}
REQUIRED = ("run_id", "status", "task", "variant", "task_params", "variant_params", "seed")


def _upgrade(data: dict[str, Any]) -> dict[str, Any]:
    """Fill what older schemas lacked: threads and hardware from the environment they recorded.
    (Their code fingerprint stays empty: collection marks such records stale.)"""
    env = data.get("env") if isinstance(data.get("env"), dict) else {}
    if data.get("schema_version", 0) < 3:
        data.setdefault("threads", env.get("threads") or 0)
        data.setdefault("hardware", env.get("device_name") or "")
    return data


INT64 = (-(2**63), 2**63 - 1)  # what a table column of integers holds (pyarrow's int64)


def _check_int64(where: str, path: str, value: Any) -> None:
    """Refuse an integer a table cannot hold (JSON allows any size: ``"seed": 10**30``), naming
    its field, so that one such file is skipped rather than failing a whole collection."""
    if isinstance(value, dict):
        for key, item in value.items():
            _check_int64(where, f"{path}.{key}" if path else str(key), item)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _check_int64(where, f"{path}[{i}]", item)
    elif isinstance(value, int) and not INT64[0] <= value <= INT64[1]:
        raise RecordFieldError(
            f"{where}: field {path} = {value} is beyond a 64-bit integer's range"
        )


def record_from_data(data: Any, where: str) -> Record:
    """A `Record` from parsed JSON, every field checked for its type.

    Raises:
        RecordSchemaError: not an attnbench record; `NewerSchemaError`: one of a newer schema.
        RecordFieldError: a field is missing or mistyped; the message names ``where`` and it.
    """
    if not isinstance(data, dict) or "run_id" not in data or "schema_version" not in data:
        raise RecordSchemaError(f"{where} is not an attnbench run record")
    version = data["schema_version"]
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise RecordFieldError(
            f"{where}: field schema_version {version!r} is not a schema version (a whole number "
            f"from 1 to {SCHEMA_VERSION})"
        )
    if version > SCHEMA_VERSION:
        raise NewerSchemaError(
            f"{where} has record schema version {version}, newer than this attnbench reads "
            f"({SCHEMA_VERSION}); upgrade attnbench (pip install -U attnbench) to read it."
        )
    data = _upgrade(dict(data))
    _check_int64(where, "", data)
    for name in REQUIRED:
        if name not in data:
            raise RecordFieldError(f"{where}: field {name} is missing")
    for name, expected in FIELD_TYPES.items():
        if name in data:
            _check_type(where, name, data[name], expected)
    if not is_run_id(data["run_id"]):
        raise RecordFieldError(f"{where}: field run_id {data['run_id']!r} is not a run id")
    if data.get("created_at") and not _is_timestamp(data["created_at"]):
        raise RecordFieldError(
            f"{where}: field created_at {data['created_at']!r} is not an ISO 8601 time"
        )
    if data["status"] not in STATUSES:
        raise RecordFieldError(
            f"{where}: field status {data['status']!r} is not one of {', '.join(STATUSES)}"
        )
    _check_points(where, data.get("metrics", []))
    for module, digest in data.get("code_modules", {}).items():
        _check_type(where, f"code_modules[{module}]", digest, str)
    fingerprint, modules = data.get("code_fingerprint"), data.get("code_modules")
    if fingerprint and modules and combined_digest(modules) != fingerprint:
        # collection judges every record of a fingerprint by the modules recorded with it: one
        # whose two disagree would decide whether other runs are current
        raise RecordFieldError(
            f"{where}: field code_fingerprint {fingerprint!r} is not the digest of its "
            f"code_modules ({combined_digest(modules)!r}): the record was altered"
        )
    if data.get("task_info"):
        _check_fields(where, "task_info", data["task_info"], TaskInfo)
        _check_flags(where, data.get("metrics", []), data["task_info"])
    known = {f.name for f in dataclasses.fields(Record)}
    return Record(**{k: v for k, v in data.items() if k in known})


def _check_points(where: str, points: list) -> None:
    """Each metric point a dict of the right types, named, with its value present (null for a
    non-finite one: a record never holds Infinity or NaN, which `to_json` writes as null), and
    no point twice (one metric at one x, which the table keys its rows by)."""
    seen: set[tuple] = set()
    for i, point in enumerate(points):
        _check_type(where, f"metrics[{i}]", point, dict)
        for name, expected in POINT_TYPES.items():
            _check_type(where, f"metrics[{i}].{name}", point.get(name), expected)
        if not point["metric"].strip():
            raise RecordFieldError(f"{where}: field metrics[{i}].metric is empty")
        if "value" not in point:
            raise RecordFieldError(f"{where}: field metrics[{i}].value is missing")
        for name in ("value", "x_value"):
            number = point.get(name)
            if isinstance(number, float) and not math.isfinite(number):
                raise RecordFieldError(
                    f"{where}: field metrics[{i}].{name} is {number}, not a finite number (a "
                    "record writes null for a value that is not)"
                )
        key = (point["metric"], point.get("x_name"), point.get("x_value"))
        if key in seen:
            at = f" at {key[1]} = {key[2]}" if key[1] is not None else ""
            raise RecordFieldError(f"{where}: field metrics[{i}] repeats {key[0]}{at}")
        seen.add(key)


def _check_flags(where: str, points: list, task_info: dict) -> None:
    """A 0/1 flag the task declares (steadiness, accuracy, convergence) holds 0, 1 or null:
    the board reads any other number as a share ("converged in 267 %")."""
    flags = {
        flag
        for kind in ("steadiness", "accuracy", "convergence")
        for flag in (task_info.get(kind) or {}).values()
    }
    for i, point in enumerate(points):
        if point["metric"] in flags and point["value"] not in (0, 1, None):
            raise RecordFieldError(
                f"{where}: field metrics[{i}].value {point['value']!r} of the flag "
                f"{point['metric']} is not 0 or 1"
            )


@functools.cache
def _type_hints(cls: type) -> dict[str, Any]:
    """The resolved field types of a dataclass (resolving them is slow, and every record asks)."""
    return typing.get_type_hints(cls)


def _check_fields(where: str, name: str, value: Any, hint: Any) -> None:
    """Check ``value`` (parsed JSON) against the type ``hint`` of the dataclass field it will
    fill, recursively: the nested `TaskInfo` of a record is read by every later collection and
    board, so a mistyped one is refused here, naming the field, like any other malformed record.
    Keys a dataclass does not know are ignored (a newer attnbench may add some), as its
    ``from_dict`` ignores them."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return
        (inner,) = [a for a in args if a is not type(None)]
        _check_fields(where, name, value, inner)
    elif dataclasses.is_dataclass(hint):
        _check_type(where, name, value, dict)
        hints = _type_hints(hint)
        for f in dataclasses.fields(hint):
            missing = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            if f.name in value:
                _check_fields(where, f"{name}.{f.name}", value[f.name], hints[f.name])
            elif missing:
                raise RecordFieldError(f"{where}: field {name}.{f.name} is missing")
    elif origin is list:
        _check_type(where, name, value, list)
        for i, item in enumerate(value):
            _check_fields(where, f"{name}[{i}]", item, args[0])
    elif origin is dict:
        _check_type(where, name, value, dict)
        for key, item in value.items():
            _check_fields(where, f"{name}[{key}]", item, args[1])
    elif origin is tuple:  # stored as a JSON list of fixed length
        _check_type(where, name, value, list)
        if len(value) != len(args):
            raise RecordFieldError(f"{where}: field {name} must hold {len(args)} values")
        for i, (item, inner) in enumerate(zip(value, args, strict=True)):
            _check_fields(where, f"{name}[{i}]", item, inner)
    else:
        _check_type(where, name, value, (int, float) if hint is float else hint)


def _is_timestamp(text: str) -> bool:
    """Whether ``text`` is an ISO 8601 time with its zone, as a record writes it: collection picks
    the newest attempt by comparing these strings, which another format would break."""
    try:
        return datetime.fromisoformat(text).tzinfo is not None
    except ValueError:
        return False


def read_record(path: Path) -> Record:
    """Read and check one record (see `record_from_data`).

    Raises:
        RecordSchemaError, RecordFieldError: see `record_from_data`.
        json.JSONDecodeError (a ValueError), OSError, UnicodeDecodeError: the file is unreadable.
    """
    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except RecursionError:  # arrays or objects nested thousands deep: not a record
        raise RecordSchemaError(f"{path}: JSON nested too deeply to be a record") from None
    return record_from_data(data, str(path))


def find_finished_record(
    results_dir: str | os.PathLike, run_id: str, statuses: tuple[str, ...] = ("ok",)
) -> Record | None:
    """The finished record of ``run_id`` (status in ``statuses``); None if there is none.

    It is looked for where collection finds it (`harness.results.collect`), so that a job skipped as
    finished is always on the table: the run's file and its kept attempts
    (``<run_id>.<time>.json``, where `write_record` puts a new record when the run's file cannot
    be read), regular files only (collection does not follow links), the record's own run_id
    matching. Of several, an `ok` one first, then the newest.
    """
    folder = runs_dir(results_dir)
    candidates = [record_path(results_dir, run_id)]
    with contextlib.suppress(OSError):  # no runs/ folder (yet): the run's file alone
        candidates += [
            folder / entry.name
            for entry in os.scandir(folder)
            if attempt_run_id(entry.name) == run_id
        ]
    found = []
    for path in candidates:
        try:
            if not stat.S_ISREG(path.lstat().st_mode):
                continue
            record = read_record(path)
        except (OSError, ValueError):
            continue
        if record.status in statuses and record.run_id == run_id:
            found.append(record)
    if not found:
        return None
    return max(found, key=lambda r: (r.status == "ok", r.created_at))


def _finite_or_none(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if obj == obj and obj not in (float("inf"), float("-inf")) else None
    if isinstance(obj, dict):
        return {k: _finite_or_none(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite_or_none(v) for v in obj]
    return obj
