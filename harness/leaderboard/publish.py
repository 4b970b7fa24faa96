"""What the leaderboard may write, and which run records it publishes beside the page.

A leaderboard folder is meant to be uploaded as it is, so what lands in it is decided here:

- **Where.** The site folder must be a folder of its own that can be written: not the results
  folder itself and not inside its ``runs/`` (the site's ``runs/`` would mix with, or its clean-up
  delete, the records), not another results folder (a folder holding run records or a results
  table that no build of the site wrote: its records would be deleted and its table replaced),
  not an existing file, not read-only, and its ``runs/`` not a link. A build writes only into a
  folder that is empty, does not exist yet, or holds `SITE_MARK`, the file a build leaves first,
  so that the next build knows that what is there is its own (a user's ``index.html`` or notes
  are never replaced). `check_paths` says what is wrong in one sentence (`SiteError`) before
  anything is written.
- **Which records.** `copy_records` publishes a file of ``results/runs/`` only if it is a regular
  file (a link could publish any file the builder can read), named ``<run_id>.json`` with a
  run_id of the hash form (`harness.jobs.records.is_run_id`), a valid record
  (`harness.jobs.records.read_record`) whose own run_id is that name, and a run of the table being
  published. The bytes checked are the bytes published: the file is opened once without
  following links and its contents are validated in the site folder before they take the
  record's name. A ``runs/`` folder that links out of the results folder is not read at all.
  Published records of earlier builds that this build did not publish are removed
  (`remove_stale_records`, once the new page is in place), so the folder holds exactly the
  records the page links.
- **What a stopped build left.** Every file is written to a temporary file beside it and renamed
  into place; the temporary files of a build killed outright (SIGKILL) are removed by the next
  build of the folder (`remove_orphans`), only those of the board's own names.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import stat
import tempfile
from collections.abc import Collection
from pathlib import Path

from attnbench.harness.jobs.paths import looping_link, too_long
from attnbench.harness.jobs.records import (
    atomic_file,
    attempt_run_id,
    is_run_id,
    read_record,
    record_from_data,
    records_of,
    runs_dir,
)

log = logging.getLogger(__name__)


SITE_MARK = ".attnbench-site"
"""The file a build leaves in its site folder: what is there is the site's own, safe to replace."""

# a temporary file of `harness.jobs.records.atomic_file` (and so of `atomic_write_text` and
# `_publish`): "." + the name it becomes + "." + eight random characters + ".tmp"
_TEMPORARY = re.compile(r"\.(?P<name>.+)\.[a-z0-9_]{8}\.tmp")


class SiteError(ValueError):
    """The leaderboard cannot be written where it was asked to; one sentence naming the path and
    the fix."""


def _is_within(path: Path, folder: Path) -> bool:
    """Whether ``path`` is ``folder`` or inside it (both resolved, so links count where they
    lead)."""
    path, folder = path.resolve(), folder.resolve()
    return path == folder or folder in path.parents


def _is_site(folder: Path) -> bool:
    """Whether ``folder`` was written by a leaderboard build: it holds `SITE_MARK`.

    Only the mark counts. A page's title would also match a user's own copy of a board, or any
    page that happens to share it; a board built before the mark existed (before 2026-11-24) is
    refused like any folder of other files, and building again after emptying it is the fix.
    """
    return (folder / SITE_MARK).is_file()


def _names(folder: Path, where: str, fix: str) -> list[str]:
    """The names of what ``folder`` holds, sorted.

    Raises:
        SiteError: the folder cannot be listed.
    """
    try:
        return sorted(entry.name for entry in os.scandir(folder))
    except OSError as exc:
        raise SiteError(f"{where} cannot be read ({exc.strerror or exc}); {fix}.") from None


def _holds_results(folder: Path) -> bool:
    """Whether ``folder`` holds a results table or run records (``runs/*.json``)."""
    if (folder / "results.parquet").exists() or (folder / "results.csv").exists():
        return True
    records = folder / "runs"
    try:
        return records.is_dir() and any(e.name.endswith(".json") for e in os.scandir(records))
    except OSError:
        return True  # cannot tell: treat as records, never risk them


def check_paths(results_dir: Path, out: Path) -> None:
    """Raise `SiteError` unless a leaderboard of ``results_dir`` can be written to ``out``.

    Nothing is created: writability is probed with a temporary file in ``out`` or, if it does
    not exist yet, in its nearest existing parent (a probe, not ``os.access``, because a
    read-only mount or a root user makes permission bits say the wrong thing). A path through a
    symbolic link that leads back into itself is refused first: the checks below would call it
    missing or raise.
    """
    for path, what in ((results_dir, "the results folder"), (out, "the site folder")):
        if reason := too_long(path):
            raise SiteError(f"{what} {path} is too long ({reason}); give a shorter path.")
    if (parent := records_of(results_dir)) is not None:  # else an empty page, said as "no results"
        raise SiteError(
            f"{results_dir} is the run records folder of {parent}; give the results folder: "
            f"attnbench-leaderboard {parent}."
        )
    for path, checked, what in (
        (results_dir, runs_dir(results_dir), "the results folder"),
        (out, out, "the site folder"),
    ):
        if reason := looping_link(checked):
            raise SiteError(
                f"{what} {path} cannot be reached ({reason}); fix the link or give another folder."
            )
    if not results_dir.is_dir():
        if results_dir.exists():
            raise SiteError(
                f"{results_dir} is a file, not a results folder; give the folder that holds runs/."
            )
        raise SiteError(
            f"no results folder {results_dir}; run a sweep first "
            f"(attnbench -m sweep=quick results_dir={results_dir})."
        )
    where = f"the site folder {out}"
    fix = "choose another with -o OUT_DIR"
    if out.resolve() == results_dir.resolve():
        raise SiteError(f"{where} is the results folder itself; {fix}.")
    if _is_within(out, runs_dir(results_dir)):
        raise SiteError(f"{where} is inside the run records {runs_dir(results_dir)}; {fix}.")
    # another results folder's (or a site's) records: the build would write its pages and
    # copies among them (``OTHER/runs`` or below it, OTHER not named on the command line)
    for folder in (out.resolve(), *out.resolve().parents):
        if folder.name == "runs" and _holds_results(folder.parent):
            raise SiteError(f"{where} is inside the run records {folder}; {fix}.")
    if out.exists() and not out.is_dir():
        raise SiteError(f"{where} is an existing file, not a folder; {fix}.")
    records = out / "runs"
    if records.is_symlink() or (records.exists() and not records.is_dir()):
        raise SiteError(
            f"{records} is a link or a file, where the site keeps its copies of the records; "
            f"remove it or {fix}."
        )
    if out.is_dir() and not _is_site(out):
        if _holds_results(out):
            raise SiteError(
                f"{where} holds run records or a results table that no leaderboard build wrote "
                f"(another results folder?), which building there would delete or replace; {fix}."
            )
        if names := _names(out, where, fix):
            shown = ", ".join(names[:3]) + (", …" if len(names) > 3 else "")
            raise SiteError(
                f"{where} holds files that no leaderboard build wrote ({shown}: no {SITE_MARK} "
                f"mark), which building there could replace; empty it or {fix}."
            )
    existing = out
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise SiteError(f"{where} cannot be created: {existing} is a file; {fix}.")
    try:
        with tempfile.TemporaryFile(dir=existing, prefix=".attnbench-write-check-"):
            pass
    except OSError as exc:
        raise SiteError(f"{where} is not writable ({exc.strerror or exc}); {fix}.") from None


def _read_regular(path: Path) -> bytes:
    """The contents of ``path`` if it is a regular file, opened without following a link.

    Raises:
        OSError: a link (ELOOP from O_NOFOLLOW), not a regular file, or unreadable.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO or device would block or never end
            raise OSError(f"{path} is not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read()
    finally:
        os.close(fd)


def _unchanged(dest: Path, data: bytes) -> bool:
    """Whether ``dest`` is a regular file (not a link) holding exactly ``data``."""
    try:
        return _read_regular(dest) == data
    except OSError:
        return False


def _publish(source: Path, dest: Path, run_id: str) -> bool:
    """Copy the record ``source`` to ``dest`` if it is the valid record of ``run_id``: the bytes
    read once, validated, then written beside ``dest`` and renamed into place (`atomic_file`).

    Raises:
        OSError: the copy could not be written (a full disk, a read-only site folder): a fault
            of the site folder, not of the record, so the build stops rather than leave it out.
    """
    try:
        data = _read_regular(source)
    except OSError:
        return False
    if _unchanged(dest, data):  # an earlier build's copy: validated where it lies, not rewritten
        try:
            return read_record(dest).run_id == run_id
        except (OSError, ValueError, TypeError):
            pass
    try:
        if record_from_data(json.loads(data), str(source)).run_id != run_id:
            return False
    except (ValueError, TypeError, RecursionError):  # anything not a record (as read_record)
        return False
    with atomic_file(dest) as tmp:
        tmp.write_bytes(data)
    return True


def _uncollected(path: Path, run_id: str) -> bool:
    """Whether ``path`` is a valid record of ``run_id`` (a run the table does not hold: a
    record written after the last collection of a folder that cannot be written), a regular
    file: not a fault of the folder, and not to be called one."""
    if not is_run_id(run_id) or path.is_symlink() or not path.is_file():
        return False
    try:
        return read_record(path).run_id == run_id
    except (OSError, ValueError, TypeError):
        return False


def copy_records(
    results_dir: Path, out: Path, run_ids: set[str], keep: Collection[str] = ()
) -> set[str]:
    """Publish the records of the runs ``run_ids`` from ``results_dir/runs`` into ``out`` (see
    the module docstring), but those of ``keep`` (published from another folder of the same
    board); returns the run_ids published. Nothing is removed here: the copies earlier builds
    left that this one does not publish go once the new page is in place
    (`remove_stale_records`), so that a build stopped before then leaves every record the
    previous page links. What is left out is counted in one warning, but the records of runs in
    ``keep``: a copy of them is no fault (the page's header counts them as shown from the other
    folder).

    Raises:
        OSError: a copy could not be written (`_publish`).
    """
    out.mkdir(parents=True, exist_ok=True)
    source = runs_dir(results_dir)
    published: set[str] = set()
    left_out = 0
    if source.is_symlink() and not _is_within(source, results_dir):
        log.warning(
            "attnbench-leaderboard: %s links out of the results folder; no record was published.",
            source,
        )
    elif source.is_dir():
        for entry in sorted(os.scandir(source), key=lambda e: e.name):
            if not entry.name.endswith(".json"):
                continue
            run_id = entry.name.removesuffix(".json")
            if attempt_run_id(entry.name) in run_ids:
                continue  # an earlier or failed attempt beside the run's record: history, kept
            if run_id in keep or attempt_run_id(entry.name) in keep:
                continue  # a run an earlier folder of the board shows (its header counts them)
            if run_id not in run_ids and _uncollected(Path(entry.path), run_id):
                continue  # not collected into the table: `fresh_table`'s line says so
            if (
                is_run_id(run_id)
                and run_id in run_ids
                and _publish(Path(entry.path), out / entry.name, run_id)
            ):
                published.add(run_id)
            else:
                left_out += 1
    if left_out:
        log.warning(
            "attnbench-leaderboard: left out %d file(s) of %s that are not valid records of the "
            "table's runs (links, other files, invalid records).",
            left_out,
            source,
        )
    return published


class RecordSnapshot:
    """What a site's ``runs/`` held before a build, to put back if the build fails before its
    page is in place: the old page then still sits beside exactly the records it links (a build
    adds and replaces copies before it writes the page, `copy_records`)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.held = {name: path.read_bytes() for name, path in self._records().items()}

    def _records(self) -> dict[str, Path]:
        if self.folder.is_symlink() or not self.folder.is_dir():
            return {}
        return {
            entry.name: Path(entry.path)
            for entry in os.scandir(self.folder)
            if _is_record_name(entry.name) and entry.is_file(follow_symlinks=False)
        }

    def restore(self) -> None:
        """Remove the copies added since, write back those replaced (best effort: a full disk
        that failed the build may fail this too; what could not be put back stays as it is)."""
        for name, path in self._records().items():
            with contextlib.suppress(OSError):
                if name not in self.held:
                    path.unlink()
                elif path.read_bytes() != self.held[name]:
                    with atomic_file(path) as tmp:
                        tmp.write_bytes(self.held[name])


def remove_stale_records(out: Path, published: Collection[str]) -> None:
    """Remove the record copies in ``out`` (a site's ``runs/``) of runs not in ``published``:
    those an earlier build published and this one does not show."""
    if not out.is_dir():
        return
    for entry in os.scandir(out):
        run_id = entry.name.removesuffix(".json")
        stale = entry.name.endswith(".json") and is_run_id(run_id) and run_id not in published
        if stale and not entry.is_dir(follow_symlinks=False):
            os.unlink(entry.path)


def remove_orphans(out: Path, names: Collection[str]) -> None:
    """Remove the temporary files a build killed outright (SIGKILL) left in the site folder
    ``out``: those of the files ``names`` beside the page and of record copies in ``runs/``,
    and only in a folder that holds `SITE_MARK` (another folder's files are never touched)."""
    if not _is_site(out):
        return
    for folder, ours in ((out, lambda name: name in names), (out / "runs", _is_record_name)):
        if folder.is_symlink() or not folder.is_dir():
            continue
        for entry in os.scandir(folder):
            match = _TEMPORARY.fullmatch(entry.name)
            if match and ours(match["name"]) and entry.is_file(follow_symlinks=False):
                Path(entry.path).unlink(missing_ok=True)


def _is_record_name(name: str) -> bool:
    return name.endswith(".json") and is_run_id(name.removesuffix(".json"))
