"""A results folder's table, fresh for the installed code: collected again first where it is not.

A table is *fresh* when it reflects every record file of ``runs/`` as it is now
(`harness.results.collect.uncollected`) and its ``current`` flags were judged against the code
installed here (`harness.results.collect.judgement_due`: a table collected before the code
changed, such as a committed reference, says which runs were current for the code that collected
it). Where a folder's table is not fresh, `fresh_table` collects it again before reading it, so
that every reader of a folder (the board, `attnbench.results`) shows the same runs as current.

What cannot be collected again is read as it is, in one line saying why, and judged on the way:

- a table without a ``runs/`` folder beside it (a table copied on its own) is the only copy of
  its runs; collecting nothing would replace it with an empty one, so it is never collected;
- a folder that cannot be written (read-only, a full disk: `OSError`), or records the table
  holds that are gone (`MissingRunsError`): the table stays as it is.

Every table read has its ``current`` judged against the installed code where its metadata
records the runs' code (`harness.results.collect.judged_now`), so runs of older code are left
out even where the table could not be collected again; runs whose code the table does not record
(`harness.results.collect.unjudged`) are counted, for the reader to say so.

A folder with records but no table whose records cannot be collected has no table to read:
`FreshnessError`, one sentence; or, for a reader that only reads (``in_memory=True``:
`attnbench.results`), the table made from the records in memory and not saved
(`harness.results.collect.results_frame`), in one line saying so. A folder with neither gives an
empty frame and no table.

A table read without collecting it again keeps no trace of the record files its last collection
left out (invalid, of a newer schema); ``left_out`` names them again, each in the line
collection warned it with (`harness.results.collect.left_out`), for a reader to say.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from attnbench.harness.jobs.records import runs_dir
from attnbench.harness.results.collect import (
    COLUMNS,
    TABLE_NAME,
    CollectSummary,
    MissingRunsError,
    collect,
    judged_now,
    judgement_due,
    left_out,
    results_frame,
    uncollected,
    unjudged,
)
from attnbench.harness.results.table_file import load, refuse_non_file
from attnbench.task_info import TaskInfo

log = logging.getLogger(__name__)


class FreshnessError(ValueError):
    """A results folder with records but no table, whose records could not be collected; the
    message is one sentence naming the folder, the reason and the command that collects them.

    Attributes:
        reason: The sentence's first part: the folder and why collecting failed.
    """

    def __init__(self, reason: str, fix: str) -> None:
        self.reason = reason
        super().__init__(f"{reason}; {fix}")


@dataclass
class FreshTable:
    """A results folder's table as `fresh_table` read it.

    Attributes:
        folder: The results folder.
        path: Its table file (``folder/results.parquet``), whether or not there is one.
        frame: The table's rows, ``current`` judged for the installed code; empty without a
            table.
        infos: Task name → `TaskInfo`, from the table's metadata.
        collected: The collection made before reading (None: none was made).
        n_judged: Runs whose ``current`` this read judged again, the table being judged against
            other code and not collected again (their tasks' fits are left out of ``frame``).
        n_unjudged: Runs marked current whose code the table does not record: nothing can judge
            them, and ``frame`` keeps the table's flag.
        notes: The lines said while reading, each "``who``: one sentence", in order.
        in_memory: The frame was made from the records in memory, the folder having no table
            and none could be written (``fresh_table(..., in_memory=True)``); ``collected``
            is that reading, and nothing was saved.
        left_out: Where the table was read without collecting it again, the record files its
            last collection left out, each in collection's line (`collect.left_out`); else
            empty (the collection made said them as it read them).
    """

    folder: Path
    path: Path
    frame: pd.DataFrame = field(default_factory=pd.DataFrame)
    infos: dict[str, TaskInfo] = field(default_factory=dict)
    collected: CollectSummary | None = None
    n_judged: int = 0
    n_unjudged: int = 0
    notes: list[str] = field(default_factory=list)
    in_memory: bool = False
    left_out: list[str] = field(default_factory=list)

    @property
    def has_table(self) -> bool:
        """Whether the folder has a table (after collecting, where it was collected)."""
        return self.path.exists()


class _Notes:
    """The lines of one read: each kept, and said at once through ``say``."""

    def __init__(self, who: str, say: Callable[[str], None], kept: list[str]) -> None:
        self.who, self.say, self.kept = who, say, kept

    def __call__(self, sentence: str) -> None:
        line = f"{self.who}: {sentence}"
        self.kept.append(line)
        self.say(line)


def fresh_table(
    folder: str | os.PathLike,
    who: str,
    say: Callable[[str], None] | None = None,
    *,
    in_memory: bool = False,
) -> FreshTable:
    """The table of the results folder ``folder``, collected again first where it is not fresh
    for the installed code, and judged for it where it cannot be (see the module docstring).

    Args:
        folder: A results folder (holding ``runs/``, ``results.parquet`` or both, or neither).
        who: The reader, first on each line said (e.g. "attnbench-leaderboard").
        say: Where each line goes as it is said (default: a warning of this module's logger,
            which a command without logging set up prints to stderr as it is).
        in_memory: Where the folder has records but no table and collecting them fails, make
            the table from the records in memory (``fresh.in_memory``) instead of raising: for
            a reader that needs no table file (the board publishes one).

    Returns:
        The table's rows and task descriptions, the collection made first, the counts of runs
        judged again and of runs that could not be judged, the lines said, and the record files
        left out of a table read as it is.

    Raises:
        FreshnessError: the folder has records but no table, and collecting them failed (and,
            with ``in_memory``, reading them too).
        TableError: the table is corrupt or of an older layout
            (`harness.results.table_file.load`).
    """
    folder = Path(folder)
    fresh = FreshTable(folder, folder / TABLE_NAME)
    refuse_non_file(fresh.path)  # a named pipe would hang every read below
    note = _Notes(who, say or _warn, fresh.notes)
    try:
        fresh.collected = _bring_up_to_date(folder, fresh.path, note)
    except FreshnessError as exc:
        if not in_memory:
            raise
        _read_in_memory(fresh, note, exc)
        return fresh
    if not fresh.path.exists():
        return fresh
    fresh.frame, fresh.infos = load(fresh.path, COLUMNS)[:2]
    if fresh.collected is None and runs_dir(folder).is_dir():
        fresh.left_out = left_out(folder)
    if not fresh.frame.empty:
        _judge(fresh, note)
    return fresh


def _read_in_memory(fresh: FreshTable, note: _Notes, failed: FreshnessError) -> None:
    """Make ``fresh``'s frame from the records of its folder in memory, saving nothing
    (`results_frame`: judged for the installed code as a collection judges it), and say so in
    one line; where they cannot be read either, raise ``failed``."""
    try:
        fresh.frame, fresh.collected, meta = results_frame(fresh.folder, incremental=False)
    except OSError:
        raise failed from None
    fresh.infos, fresh.in_memory = meta.tasks, True
    note(
        f"{failed.reason}; its table is made from them in memory, not saved (run "
        f"attnbench-collect {fresh.folder} where it can write to keep one)."
    )


def _warn(line: str) -> None:
    log.warning("%s", line)


def _judge(fresh: FreshTable, note: _Notes) -> None:
    """Judge ``fresh.frame`` for the installed code (`judged_now`) and count the runs nothing can
    judge (`unjudged`), saying each in one line."""
    table = fresh.path
    fresh.frame, fresh.n_judged = judged_now(fresh.frame, table)
    if fresh.n_judged:  # the table could not be collected again (`_bring_up_to_date` said why)
        note(
            f"{fresh.n_judged} run(s) of {table} were judged against other code than the "
            "installed attnbench; this page judges them again (runs of older code left out, "
            "their tasks' fits not drawn), the table stays as it is."
        )
    fresh.n_unjudged = unjudged(fresh.frame, table)
    if fresh.n_unjudged:
        note(
            f"{fresh.n_unjudged} run(s) of {table} are marked current but the table does not "
            "record their code (not written by attnbench-collect, or altered), so they cannot "
            "be judged against the installed attnbench; the page shows them as the table marks "
            "them and says so."
        )


def _bring_up_to_date(folder: Path, table: Path, note: _Notes) -> CollectSummary | None:
    """Collect the records of ``folder`` where it has records but no table, or records the
    table does not reflect, or a table judged against other code (`_collect_first`); the
    collection made, or None. A table without a ``runs/`` folder beside it is read as it is.

    Raises:
        FreshnessError: the folder has records but no table, and collecting them failed.
    """
    records = runs_dir(folder)
    if not table.exists() and records.is_dir():
        try:
            return collect(folder)
        except OSError as exc:
            raise FreshnessError(
                f"{folder} has records but no table, and collecting them failed "
                f"({exc.strerror or exc})",
                f"run attnbench-collect {folder} where it can write.",
            ) from None
    if not table.exists():
        return None
    if not records.is_dir():
        note(
            f"{table} has no run records beside it (no folder {records}); the board shows the "
            "table as it is and publishes no records."
        )
        return None
    if n_new := uncollected(folder):
        return _collect_first(folder, note, n_new=n_new)
    n_judged, n_unknown = judgement_due(folder)
    if n_judged:
        return _collect_first(
            folder,
            note,
            judged=f"{n_judged} run(s) of {table} were judged against other code than the "
            "installed attnbench",
        )
    if n_unknown:
        return _collect_first(
            folder,
            note,
            judged=f"{n_unknown} run(s) of {table} are marked current but the table does not "
            "record their code",
        )
    return None


def _collect_first(
    folder: Path, note: _Notes, n_new: int = 0, judged: str = ""
) -> CollectSummary | None:
    """Collect ``folder`` again: for the records written since its table was collected
    (``n_new``: a sweep stopped before collecting, records copied in), or for the code
    installed now (``judged``: the sentence saying which runs `judgement_due` found judged
    against other code, or without a record of their code), saying so. Where the folder cannot
    be written, or collecting would drop runs the table holds (`MissingRunsError`), the table
    stays as it is, and a line says why (for ``judged``, `_judge` says it when it reads the
    table)."""
    what = judged or f"{n_new} record file(s) of {runs_dir(folder)} are not collected yet"
    try:
        summary = collect(folder)
    except MissingRunsError as exc:
        note(
            f"{exc.missing} of the {exc.held} runs of {folder / TABLE_NAME} have no valid record "
            f"in {runs_dir(folder)} any more; the board shows the table as it is "
            f"(attnbench-collect --drop-missing {folder} drops them)."
        )
        return None
    except OSError as exc:
        if not judged:
            note(
                f"{what} and collecting failed ({exc.strerror or exc}); the board shows the "
                f"table as it was (run attnbench-collect {folder})."
            )
        return None
    if judged:
        note(f"{what}; collected again first.")
    else:
        note(f"collected {n_new} new or changed record file(s) of {runs_dir(folder)} first.")
    return summary
