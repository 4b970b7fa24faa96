"""``attnbench-collect``: the command line of `attnbench.harness.results.collect`."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

from attnbench.harness.cli.interrupt import on_ctrl_c, quiet_when_the_reader_leaves
from attnbench.harness.cli.parser import OneLineParser
from attnbench.harness.jobs.paths import looping_link, not_a_file, too_long, write_failure
from attnbench.harness.jobs.records import records_of, runs_dir, runs_is_a_file
from attnbench.harness.results.collect import (
    TABLE_NAME,
    MissingRunsError,
    collect,
    read_table,
    table_kind_error,
)


@quiet_when_the_reader_leaves
@on_ctrl_c(
    "attnbench-collect: interrupted by Ctrl-C; the table is as it was (collect again to finish)."
)
def main(argv: list[str] | None = None) -> int:
    """Entry point of ``attnbench-collect [RESULTS_DIR] [--full] [--drop-missing] [--strict]``.

    A table is not replaced by one that drops runs it holds (their records gone from ``runs/``):
    that is one sentence naming the folder, both run counts and ``--drop-missing``, exit status
    2, and the table is left as it is (`harness.results.collect.MissingRunsError`).

    With ``--strict``, a record file that is skipped (invalid, or of a newer schema) makes the
    command exit 1 after the table is written from the valid ones, one line per file instead of
    the warnings (`harness.cli.strict`: the table is then right about every record it holds, and
    the status says some are missing from it).
    """
    from attnbench.harness.cli.strict import add_strict_flag, bad_records, report_bad_records
    from attnbench.harness.results.provenance import per_run_lines, summary_lines

    parser = OneLineParser(prog="attnbench-collect", description=__doc__.splitlines()[0])
    parser.add_argument(
        "results_dir", nargs="?", default="results", help="folder holding runs/ (default: results)"
    )
    parser.add_argument(
        "--full", action="store_true", help="re-read every record (ignore the last collection)"
    )
    parser.add_argument(
        "--drop-missing",
        action="store_true",
        help="write the table even where it drops runs the last one held, whose records are "
        "gone from runs/ (without it, such a collection is refused and the table kept)",
    )
    parser.add_argument(
        "--provenance",
        action="store_true",
        help="print each run's provenance: its commit and whether the code differed from it",
    )
    add_strict_flag(parser, reads_records=True)
    args = parser.parse_args(argv)
    if not args.results_dir.strip():  # Path("") is the working folder
        print("attnbench-collect: the results folder is empty; give a folder.", file=sys.stderr)
        return 2
    if reason := too_long(runs_dir(args.results_dir)):
        print(f"attnbench-collect: {args.results_dir} is too long ({reason}).", file=sys.stderr)
        return 2
    if reason := looping_link(runs_dir(args.results_dir)):
        print(
            f"attnbench-collect: {args.results_dir} cannot be read ({reason}); fix the link or "
            "give another results folder.",
            file=sys.stderr,
        )
        return 2
    if not Path(args.results_dir).is_dir():
        print(
            f"attnbench-collect: no results folder {args.results_dir}; give the folder a sweep "
            "wrote (results_dir=…), or run a sweep first (attnbench -m sweep=quick).",
            file=sys.stderr,
        )
        return 2
    if (parent := records_of(args.results_dir)) is not None:
        print(
            f"attnbench-collect: {args.results_dir} is the run records folder of {parent}; give "
            f"the results folder: attnbench-collect {parent}.",
            file=sys.stderr,
        )
        return 2
    table = Path(args.results_dir) / TABLE_NAME
    if kind := not_a_file(table):  # reading a named pipe would wait for a writer forever
        print(
            f"attnbench-collect: {table_kind_error(table, kind)}.",
            file=sys.stderr,
        )
        return 2
    if refusal := runs_is_a_file(args.results_dir):
        print(f"attnbench-collect: {refusal}", file=sys.stderr)
        return 2
    runs = runs_dir(args.results_dir)
    if not runs.is_dir() and not table.exists():  # else: its runs are gone
        # bad input like a missing folder (exit 2): nothing here was ever a sweep's
        print(
            f"attnbench-collect: no run records in {runs}; give the folder a sweep wrote "
            "(results_dir=…), or run a sweep first (attnbench -m sweep=quick).",
            file=sys.stderr,
        )
        return 2
    try:
        with warnings.catch_warnings():
            if args.strict:  # reported below as errors instead
                warnings.simplefilter("ignore")
            summary = collect(
                args.results_dir, incremental=not args.full, drop_missing=args.drop_missing
            )
    except MissingRunsError as exc:
        print(f"attnbench-collect: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(
            f"attnbench-collect: cannot write the table in {args.results_dir} "
            f"({write_failure(exc)}).",
            file=sys.stderr,
        )
        return 2
    print(summary.describe())
    frame = read_table(table)[0]
    for line in per_run_lines(frame) if args.provenance else summary_lines(frame):
        print(line)
    if args.strict:  # the files left out, each named with its path, as the other commands do
        return report_bad_records("attnbench-collect", bad_records(args.results_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
