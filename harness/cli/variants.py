"""The ``attnbench-variants`` command: list registered variants and where they came from.

Columns use the API's own words, so one name means one thing everywhere: ``cost`` is
`AttentionVariant.cost` and ``origin`` is the registry's `Entry.origin` (the distribution that
registered the variant), the same names the records keep as ``variant_cost`` and
``variant_origin``; ``library`` is a peer's `AttentionVariant.library` with its installed version
(``variant_library`` in records) and ``available`` is "yes" or `AttentionVariant.unavailable`'s
sentence for this machine's device.

A plugin that failed to load is listed after the table, one line each on stderr: a warning, or
with ``--strict`` an error that makes the command exit 2 (`harness.cli.strict`; the table is still
printed, being what one looks at to see what did load). A ``PATTERN`` that is the name a failed
plugin's entry point declares is refused in one sentence naming that plugin (exit 2), as
``attnbench variant=NAME`` would be.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import sys
import warnings

from attnbench.harness.cli.interrupt import on_ctrl_c, quiet_when_the_reader_leaves
from attnbench.harness.cli.parser import OneLineParser
from attnbench.harness.cli.strict import PLUGINS_STATUS, add_strict_flag, plugin_errors
from attnbench.harness.discovery import failure_for, failures, load_plugins
from attnbench.harness.jobs.config import params_problem
from attnbench.variant import VARIANTS, library_version


def local_device() -> str:
    """The device type this machine's jobs would use at best: "cuda" if torch sees one."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def variant_table(device: str | None = None) -> list[dict[str, object]]:
    """One dict per registered variant: name, family, cost, causal support, origin, the peer's
    library (with its installed version) and our variant it pairs with, whether it runs on
    ``device`` (default: this machine's best) — "yes" or the sentence saying why not — and
    params."""
    device = device or local_device()
    rows = []
    for entry in VARIANTS.entries():
        cls = entry.obj
        rows.append(
            {
                "name": entry.name,
                "family": cls.family,
                "cost": cls.cost,
                "causal": cls.supports_causal,
                "origin": entry.origin,
                "library": library_version(cls.library),
                "peer_of": cls.peer_of,
                "available": params_problem(VARIANTS, entry.name)
                or cls.unavailable(device)
                or "yes",
                "params": {
                    f.name: (
                        f.default if f.default is not dataclasses.MISSING else f.default_factory()
                    )
                    for f in dataclasses.fields(cls.Params)
                },
            }
        )
    return rows


@on_ctrl_c("attnbench-variants: interrupted by Ctrl-C; it writes nothing.")
@quiet_when_the_reader_leaves
def main(argv: list[str] | None = None) -> int:
    """Entry point of ``attnbench-variants [--json] [--strict] [PATTERN]``."""
    parser = OneLineParser(
        prog="attnbench-variants", description="List the registered attention variants."
    )
    parser.add_argument("pattern", nargs="?", default="*", help="shell-style filter, e.g. 'lin*'")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    add_strict_flag(parser, reads_records=False)
    args = parser.parse_args(argv)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # failures are reported below, once
        load_plugins()
    failed = failure_for(VARIANTS, args.pattern)  # a name, not a pattern, if one matches
    if failed and args.pattern not in VARIANTS:
        print(f"attnbench-variants: {failed.asked_for('variant')}", file=sys.stderr)
        return PLUGINS_STATUS
    names = set(VARIANTS.names(args.pattern))
    if not names:  # a header alone, exit 0, would read as "there are none"
        close = difflib.get_close_matches(args.pattern, VARIANTS.names(), n=3, cutoff=0.6)
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        print(
            f"attnbench-variants: no registered variant matches '{args.pattern}'.{hint} "
            "Run attnbench-variants without a pattern to list them all.",
            file=sys.stderr,
        )
        return 2
    rows = [r for r in variant_table() if r["name"] in names]
    broken = failures()
    if args.json:
        print(
            json.dumps(
                {"variants": rows, "failed_plugins": [dataclasses.asdict(f) for f in broken]},
                indent=1,
                default=str,
            )
        )
    else:
        header = ("name", "family", "cost", "causal", "origin", "library", "available")
        widths = [max(len(h), *(len(str(r[h])) for r in rows)) if rows else len(h) for h in header]
        print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
        for r in rows:
            print("  ".join(str(r[h]).ljust(w) for h, w in zip(header, widths, strict=True)))
    if args.strict:
        errors = plugin_errors()
        for error in errors:
            print(f"attnbench-variants: {error}", file=sys.stderr)
        return PLUGINS_STATUS if errors else 0
    if not args.json:
        for f in broken:
            print(
                f"attnbench-variants: warning: {f.source} failed to load: {f.reason}",
                file=sys.stderr,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
