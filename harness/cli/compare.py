"""``attnbench-compare``: the command line of `attnbench.harness.results.compare`."""

from __future__ import annotations

import sys

from attnbench.harness.cli.interrupt import on_ctrl_c, quiet_when_the_reader_leaves
from attnbench.harness.cli.parser import OneLineParser
from attnbench.harness.cli.strict import add_strict_flag, bad_records, report_bad_records
from attnbench.harness.jobs.paths import looping_link
from attnbench.harness.results.compare import (
    REQUIRED,
    compare,
    format_report,
)
from attnbench.harness.results.metric_points import (
    declared_steadiness,
    flag_kinds,
)
from attnbench.harness.results.table_file import TableError, load


@quiet_when_the_reader_leaves
@on_ctrl_c("attnbench-compare: interrupted by Ctrl-C; it writes nothing.")
def main(argv: list[str] | None = None) -> int:
    """Entry point of ``attnbench-compare``."""
    parser = OneLineParser(prog="attnbench-compare", description=__doc__.split("\n")[0])
    parser.add_argument("old", help="the baseline results folder or table (parquet / CSV)")
    parser.add_argument("new", help="the results folder or table to check")
    parser.add_argument(
        "--threshold", type=float, default=0.05, help="relative change that counts (default 0.05)"
    )
    parser.add_argument(
        "--fail",
        action="store_true",
        help="exit 1 on any regression: worse, missing, failed, or an empty NEW",
    )
    add_strict_flag(parser, reads_records=True)
    args = parser.parse_args(argv)
    # nan and inf would pass every regression; past 1e300 its percentage is inf ("inf%")
    if not 0 <= args.threshold <= 1e300:
        print(
            f"attnbench-compare: --threshold {args.threshold} is not a relative change; give a "
            "number from 0 to 1e300, e.g. --threshold 0.05.",
            file=sys.stderr,
        )
        return 2
    for source in (args.old, args.new):
        if reason := looping_link(source):  # else called missing: "does not exist"
            print(
                f"attnbench-compare: {source} cannot be read ({reason}); fix the link or give "
                "another results folder or table.",
                file=sys.stderr,
            )
            return 2
    try:
        old, old_infos, _ = load(args.old, REQUIRED)
        new, new_infos, _ = load(args.new, REQUIRED)
    except TableError as exc:
        print(f"attnbench-compare: {exc}", file=sys.stderr)
        return 2
    infos = {**old_infos, **new_infos}
    result = compare(old, new, args.threshold, declared_steadiness(infos))
    print(format_report(result, args.threshold, flag_kinds(infos)))
    status = 1 if args.fail and result.regressed else 0
    if args.strict:
        found = list(dict.fromkeys([*bad_records(args.old), *bad_records(args.new)]))
        status = max(status, report_bad_records("attnbench-compare", found))
    return status


if __name__ == "__main__":
    sys.exit(main())
