"""Open a results table given on the command line, or say in one sentence what is wrong with it.

`attnbench-compare OLD NEW` and `attnbench-leaderboard` read tables that may be missing, cut
short, not a table at all, or written by an older attnbench without the columns this version
reads. None of these is a bug to show as a traceback: `TableError` carries one sentence that
names the file and the fix (usually: collect again, in full), and the commands print it and exit
with status 2. The reading itself stays in `harness.results.collect.read_table` (parquet, with
the task descriptions from its metadata); this module adds CSV (the leaderboard publishes
``results.csv``), folders, and the checks.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import pandas as pd
import pyarrow as pa

from attnbench.harness.jobs.paths import not_a_file, too_long
from attnbench.harness.jobs.records import records_of
from attnbench.harness.results.collect import (
    COLUMN_DEFAULTS,
    TABLE_NAME,
    read_table,
    table_kind_error,
)
from attnbench.task_info import TaskInfo

MAX_REASON = 160  # characters of the reader's own message quoted in a TableError


class TableError(ValueError):
    """A results table that cannot be used; the message is one sentence naming the file and
    what to do."""


def locate(source: str | os.PathLike) -> Path:
    """The table file ``source`` names: the file itself, or a results folder's ``results.parquet``.

    Raises:
        TableError: nothing there, a folder without a table, or a table that is not a regular
            file (a named pipe would make the reader wait for a writer forever).
    """
    path = Path(source)
    if reason := too_long(path):
        raise TableError(f"{path} is too long ({reason}); give a shorter path.")
    refuse_non_file(path / TABLE_NAME if path.is_dir() else path)
    if path.is_dir():
        if not (path / TABLE_NAME).is_file() and (parent := records_of(path)) is not None:
            raise TableError(
                f"{path} is the run records folder of {parent}; give the results folder: {parent}."
            )
        if not (path / TABLE_NAME).is_file():
            raise TableError(
                f"{path} has no {TABLE_NAME}; collect its records first "
                f"(attnbench-collect {path}) or give a table file."
            )
        return path / TABLE_NAME
    if not path.is_file():
        raise TableError(
            f"{path} does not exist; give a results folder or its {TABLE_NAME} "
            "(attnbench-collect writes it)."
        )
    return path


def refuse_non_file(table: Path) -> None:
    """Raise `TableError` where ``table`` is there but is not a regular file: opening a named
    pipe to read it waits for a writer forever, silently."""
    if kind := not_a_file(table):
        raise TableError(f"{table_kind_error(table, kind)}.")


def _recollect(path: Path) -> str:
    """The command that rewrites the table at ``path`` in the current layout."""
    folder = path.parent if path.name == TABLE_NAME else "RESULTS_DIR"
    return f"attnbench-collect --full {folder}"


def load(
    source: str | os.PathLike, required: Iterable[str]
) -> tuple[pd.DataFrame, dict[str, TaskInfo], Path]:
    """The table at ``source`` (parquet, or CSV by its suffix; or a results folder), the task
    descriptions in its metadata (none for CSV), and the file's path.

    Args:
        source: A table file or a results folder.
        required: Columns the caller reads; a table without one of them is of an older layout.

    Raises:
        TableError: the file is missing, unreadable, not a table, or lacks a required column.
    """
    path = locate(source)
    if path.suffix == ".json" and (folder := records_of(path.parent)) is not None:
        raise TableError(
            f"{path} is a run record, not a results table; give the results folder: {folder}."
        )
    try:
        if path.suffix == ".csv":
            frame, infos = pd.read_csv(path), {}
        else:
            frame, infos = read_table(path)
    except (OSError, ValueError, TypeError, KeyError, AttributeError, pa.ArrowException) as exc:
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        if len(reason) > MAX_REASON:  # cut at a word, and say so: not mid-word
            reason = reason[:MAX_REASON].rsplit(" ", 1)[0] + " …"
        kind = "CSV" if path.suffix == ".csv" else "parquet"
        records = path.parent / "runs"
        fix = (
            f"collect it again with `{_recollect(path)}`"
            if records.is_dir()
            else f"restore it, or the records ({records}) it was collected from"
        )
        raise TableError(
            f"{path} is not a readable {kind} results table ({reason}); {fix}."
        ) from None
    for column, default in COLUMN_DEFAULTS.items():  # added since: older tables lack it
        if column in required and column not in frame.columns:
            frame[column] = default
    missing = [c for c in required if c not in frame.columns]
    if missing:
        shown = ", ".join(missing[:5]) + (", …" if len(missing) > 5 else "")
        raise TableError(
            f"{path} lacks the column(s) {shown} of the results table (an older attnbench wrote "
            f"it); collect it again with `{_recollect(path)}`."
        )
    return frame, infos, path
