"""``--strict``, the same flag on every command: what would be a warning and a skip is an error.

Two things are skipped with a warning by default, and under ``--strict`` make the command fail:

- **A plugin that failed to load** (`harness.discovery`), in the commands that load plugins
  (``attnbench``, ``attnbench-variants``, ``attnbench-speed``). Checked before the command does
  anything (`refuse_broken_plugins`): one sentence per plugin, exit status 2, as for any other
  bad input, since a run without the plugin is not the run that was asked for.
- **A record that cannot be read** (malformed, or of a newer schema: what collection skips), in
  the commands that read results (``attnbench-collect``, ``attnbench-leaderboard``,
  ``attnbench-compare``). Found only by reading, so the command finishes its work from the valid
  records (the table, page or report is then right about everything it shows) and exits 1
  afterwards, naming every such file (`report_bad_records`): the status ``harness.sweep.outcome``
  gives a sweep with a job that left no record, which is the same kind of fault: work done,
  something missing from it. Refusing before writing instead would leave the previous table or
  page in place, older and just as incomplete.

The record-reading commands import no plugin (they work from the records and the table alone,
where the plugins that made them may not be installed), so no plugin can fail in them and
``--strict`` checks their records only.

Example:
    >>> parser = argparse.ArgumentParser(prog="attnbench-collect")
    >>> add_strict_flag(parser, reads_records=True)
    >>> parser.parse_args(["--strict"]).strict
    True
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

FLAG = "--strict"
PLUGINS_STATUS = 2  # refused before any work, like other bad input
RECORDS_STATUS = 1  # work done from the valid records, some left out (`harness.sweep.outcome`'s 1)

PLUGINS_HELP = "fail (exit 2, before doing anything) if a plugin failed to load, instead of warning"
RECORDS_HELP = (
    "fail (exit 1, after finishing from the valid records) if a run record cannot be read "
    "(malformed, or of a newer schema), instead of warning and skipping it; this command loads "
    "no plugin"
)


def add_strict_flag(parser: argparse.ArgumentParser, *, reads_records: bool) -> None:
    """Add ``--strict`` to a command's parser, its help saying what it makes an error there."""
    parser.add_argument(
        FLAG, action="store_true", help=RECORDS_HELP if reads_records else PLUGINS_HELP
    )


def take_strict_flag(argv: list[str]) -> tuple[list[str], bool]:
    """(``argv`` without ``--strict``, whether it was there), for a command whose other arguments
    belong to a parser that must not see the flag (Hydra's, in ``attnbench``)."""
    rest = [a for a in argv if a != FLAG]
    return rest, len(rest) != len(argv)


def plugin_errors() -> list[str]:
    """One sentence per plugin that failed to load (loading them now if not yet loaded, without
    the warnings: these sentences replace them), and per entry the commands skip because its
    Params make no config option."""
    # these import torch and Hydra: only where asked
    from attnbench.harness.discovery import load_plugins
    from attnbench.harness.jobs.config import params_problem
    from attnbench.task import TASKS
    from attnbench.variant import VARIANTS

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        broken = load_plugins()
    skipped = [params_problem(r, n) for r in (VARIANTS, TASKS) for n in r.names()]
    return [
        f"{f.source} failed to load: {f.reason}; fix or uninstall it ({FLAG} makes this an error)."
        for f in broken
    ] + [f"{problem.rstrip('.')} ({FLAG} makes this an error)." for problem in skipped if problem]


def refuse_broken_plugins(prog: str) -> int:
    """Under ``--strict``, before the command starts: print one sentence per plugin that failed
    to load and return `PLUGINS_STATUS`; 0 when every plugin loaded."""
    errors = plugin_errors()
    for error in errors:
        print(f"{prog}: {error}", file=sys.stderr)
    return PLUGINS_STATUS if errors else 0


def bad_records(results: str | Path) -> list[str]:
    """ "file: why" for each record file under a results folder's ``runs/`` that collection would
    skip: not a regular file, not a valid record, or of a newer schema.

    ``results`` is a results folder, or a table file whose folder holds ``runs/`` (as
    ``attnbench-compare`` takes them); a table with no ``runs/`` beside it has no records to
    check.
    """
    from attnbench.harness.jobs.records import read_record, runs_dir

    folder = Path(results)
    folder = folder if folder.is_dir() else folder.parent
    found = []
    for path in sorted(runs_dir(folder).glob("*.json")):
        if path.is_symlink() or not path.is_file():
            found.append(f"{path}: not a regular file")
            continue
        try:
            read_record(path)
        except (OSError, ValueError) as exc:  # invalid JSON or field; a newer schema
            found.append(str(exc) if str(path) in str(exc) else f"{path}: {exc}")
    return found


def report_bad_records(prog: str, found: list[str]) -> int:
    """Under ``--strict``, after the command's work: print one line per record file it left out
    (`bad_records`, or a collection's own list) and return `RECORDS_STATUS`; 0 when none."""
    for item in found:
        print(f"{prog}: left out {item} ({FLAG} makes this an error).", file=sys.stderr)
    return RECORDS_STATUS if found else 0
