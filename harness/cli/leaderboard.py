"""``attnbench-leaderboard``: the command line of `attnbench.harness.leaderboard.site`."""

from __future__ import annotations

import sys
from pathlib import Path

from attnbench.harness.cli.interrupt import on_ctrl_c, quiet_when_the_reader_leaves
from attnbench.harness.cli.parser import OneLineParser
from attnbench.harness.cli.strict import add_strict_flag, bad_records, report_bad_records
from attnbench.harness.jobs.paths import write_failure
from attnbench.harness.jobs.records import runs_is_a_file
from attnbench.harness.leaderboard.publish import SiteError
from attnbench.harness.leaderboard.site import build_site, site_folder
from attnbench.harness.results.collect import TABLE_NAME
from attnbench.harness.results.table_file import TableError

# what a stopped build leaves, true at any moment (`site.build_site`'s order of writes)
WHOLE = "is whole, either the previous build's or this one's"
LEFT = (
    f"every file in the site folder {WHOLE}; build it again to bring the page, its table and "
    "its records in step."
)


@quiet_when_the_reader_leaves
@on_ctrl_c(
    f"attnbench-leaderboard: interrupted by Ctrl-C; {LEFT}",
    sigterm=f"attnbench-leaderboard: stopped by SIGTERM; {LEFT}",
)
def main(argv: list[str] | None = None) -> int:
    """Entry point of ``attnbench-leaderboard [RESULTS_DIR ...] [-o OUT_DIR]``."""
    parser = OneLineParser(
        prog="attnbench-leaderboard", description="Build the static leaderboard site."
    )
    parser.add_argument(
        "results_dir",
        nargs="*",
        default=["results"],
        help="folders with results.parquet / runs/ (default: results); several make one board "
        "(e.g. a CPU and a GPU reference), which needs -o",
    )
    parser.add_argument(
        "-o",
        "--out",
        default=None,
        help="site folder, not the results folder or its runs/ (default RESULTS_DIR/leaderboard)",
    )
    parser.add_argument(
        "--include-stale",
        action="store_true",
        help="also show runs of older code (default: only runs of the installed code)",
    )
    add_strict_flag(parser, reads_records=True)
    args = parser.parse_args(argv)
    named = "the results folder" if len(args.results_dir) == 1 else "a results folder"
    for value, what in (*((d, named) for d in args.results_dir), (args.out, "-o")):
        if value is not None and not value.strip():  # Path("") is the working folder
            print(f"attnbench-leaderboard: {what} is empty; give a folder.", file=sys.stderr)
            return 2
    for folder in args.results_dir:  # else "no results yet", which is not so
        if refusal := runs_is_a_file(folder):
            print(f"attnbench-leaderboard: {refusal}", file=sys.stderr)
            return 2
    folders = args.results_dir if len(args.results_dir) > 1 else args.results_dir[0]
    try:
        index = build_site(folders, args.out, include_stale=args.include_stale)
    except (SiteError, TableError) as exc:
        print(f"attnbench-leaderboard: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a full disk, a folder made read-only while it ran
        out = site_folder(folders, args.out)
        print(
            f"attnbench-leaderboard: could not write the site folder {out} "
            f"({write_failure(exc, '-o OUT_DIR')}); every file in it {WHOLE}.",
            file=sys.stderr,
        )
        return 2
    for folder in args.results_dir:
        if not (Path(folder) / TABLE_NAME).exists():
            print(
                f"attnbench-leaderboard: no results yet in {folder}; run "
                "`attnbench -m sweep=quick` first. "
                + (
                    "Wrote an empty page:"
                    if len(args.results_dir) == 1
                    else "The page shows nothing from it."
                ),
                file=sys.stderr,
            )
    print(index.resolve())
    if args.strict:  # the page is built from the valid records; the status names the others
        return max(
            report_bad_records("attnbench-leaderboard", bad_records(folder))
            for folder in args.results_dir
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
