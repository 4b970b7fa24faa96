"""The ``attnbench-compare OLD NEW`` command: what got worse, or went away, between two tables.

A metric point is one (task, variant, their parameters, device, dtype, metric, curve position),
its seeds averaged (`harness.results.metric_points`). Everything OLD had is accounted for in NEW,
and each kind of loss is a regression of its own:

- ``WORSE``: a point in both tables moved in its bad direction (declared by the task) by more
  than ``--threshold`` (relative) *and* by more than the spread of the two measurements (the
  standard deviation over seeds, else the interquartile range the task recorded, else nothing).
  Metrics without a direction are not judged.
- ``FAILED``: a job (a setting and a seed) that ends ``failed``, ``oom`` or ``timeout`` in NEW
  where OLD ran the setting ok (unless OLD's run of that very job failed too).
- ``MISSING``: OLD's points of which NEW has no ok value, grouped as coarsely as is true: a whole
  ``variant`` of a task, a ``setting`` (task and variant parameters, device, dtype), a ``metric``
  of a setting, or single ``point`` s of a curve. A setting NEW recorded as ``unsupported`` is
  missing, with that status noted. Points of a FAILED job's setting are not listed again.
- ``EMPTY``: NEW has no runs at all (also when OLD has none).

A point is judged only between runs on the same machine (column ``hardware``: the CPU model and
the vector capability torch dispatched to, or the GPU name, `harness.jobs.env.device_name`). The
same setting timed under AVX2 and under AVX-512, or on two GPUs, differs by the machine, not the
code, so a point of OLD that NEW has only from other hardware is listed as ``OTHER MACHINE``,
grouped per variant, naming both machines: not judged (neither worse nor better), not missing,
and not a regression. Points with runs on several machines are judged on each machine both
tables share. A run without a value there (or a table without the column) is on an unknown
machine, which is another machine than any named one.

A point whose timing is unsteady in either table (its task's steadiness flag,
`attnbench.task_info.TaskInfo.steadiness`, is 0 for a seed at that point) is not judged: where it
would be ``WORSE`` it is listed as ``UNSTEADY`` instead, with the change and the table whose
timing never settled, and it is not a regression (the remedy is to measure again on a quiet
machine, not to revert). The flags come from the tables' task descriptions; a CSV table has
none, and a run without the flag (an older record) is unknown, which is judged as before.

Points and jobs only in NEW are listed as ``NEW`` and are not regressions. Which rows count:

- Derived rows (column ``derived`` true: the scaling fits of `harness.results.scaling`) are left
  out. They are not measurements but functions of the runs they summarise, which are compared
  point by point; their presence follows from how many lengths a variant ran at, and their
  intervals are not a spread of the kind used here.
- Where a table has the column ``current``, only its current rows are compared: the others are
  history, records of code older than what collected the table. Tables without it (older
  layouts, CSV exports) are compared whole.

    attnbench-compare results_old/ results/ --threshold 0.05 --fail

exits 1 with ``--fail`` when there is any regression of any kind, so an author can gate a change
on it, and 2 (one sentence on stderr) when a table cannot be read. With ``--strict``, a run
record beside either table (in its results folder's ``runs/``) that collection skips, being
invalid or of a newer schema, is named after the report and makes the exit status 1
(`harness.cli.strict`): the tables then lack a run, and a comparison that passes without it proves
less than it seems to.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from attnbench.harness.jobs.records import FAILURES
from attnbench.harness.results.metric_points import (
    POINT,
    point_stats,
    unsteady_rows,
)

HARDWARE = "hardware"
UNKNOWN_HARDWARE = "an unknown machine"  # how a run without ``hardware`` is named
MACHINE_POINT = [*POINT, HARDWARE]  # a point as judged: on one machine

SETTING = ["task", "variant", "variant_params", "task_params", "device", "dtype"]
JOB_COLUMNS = [*SETTING, "seed"]  # a job: a setting and a seed
REQUIRED = list(dict.fromkeys([*JOB_COLUMNS, *POINT, "status", "value", "higher_is_better"]))
# How missing points are grouped, coarsest first: a point is reported at the first level whose
# whole key the other table lacks.
LEVELS = [
    ("variant", ["task", "variant"]),
    ("setting", SETTING),
    ("metric", [*SETTING, "metric"]),
    ("point", POINT),
]
MAX_ERROR = 120  # characters of a failed job's error text in its report line


def _flag(column: pd.Series) -> pd.Series:
    """A boolean column as booleans, also when read from CSV (text, or missing values)."""
    return column.astype("string").str.lower().isin(["true", "1", "1.0"])


def runs(table: pd.DataFrame) -> pd.DataFrame:
    """The rows compare judges: runs (not derived fit rows), and only current ones where the
    table says which are current."""
    keep = pd.Series(True, index=table.index)
    if "derived" in table.columns:
        keep &= ~_flag(table["derived"])
    if "current" in table.columns:
        keep &= _flag(table["current"])
    rows = table[keep].copy()
    known = rows[HARDWARE] if HARDWARE in rows.columns else pd.Series(None, index=rows.index)
    known = known.astype(object).where(known.notna() & known.astype(str).ne(""), None)
    rows[HARDWARE] = known.fillna(UNKNOWN_HARDWARE)
    # One dtype per key column whichever way the table was read (parquet, CSV with empty
    # columns, a table with no rows), so that the two tables' keys can be matched.
    for col in ("value", "x_value", "seed"):
        rows[col] = pd.to_numeric(rows[col], errors="coerce").astype(float)
    for col in {*JOB_COLUMNS, *POINT} - {"x_value", "seed"}:
        rows[col] = rows[col].astype(object).where(rows[col].notna(), None)
    return rows


def _split(frame: pd.DataFrame, other: pd.DataFrame, cols: list[str]) -> tuple[pd.DataFrame, ...]:
    """(rows of ``frame`` whose ``cols`` key ``other`` lacks, the rest). Missing values in a key
    match each other, as in every pandas merge."""
    marked = frame.merge(other[cols].drop_duplicates(), on=cols, how="left", indicator=True)
    absent = marked["_merge"] == "left_only"
    marked = marked.drop(columns="_merge")
    return marked[absent], marked[~absent]


def points(table: pd.DataFrame, steadiness: Iterable[tuple[str, str, str]] = ()) -> pd.DataFrame:
    """Seed-averaged points of the runs of ``table`` with at least one value, every metric, one
    row per machine a point ran on (`MACHINE_POINT`: seeds of other hardware are never averaged
    together), and ``unsteady``: whether a seed's timing behind the point was flagged unsteady
    (``steadiness``: (task, metric, flag metric), `declared_steadiness` of
    `harness.results.metric_points`)."""
    rows = runs(table)
    stats = point_stats(rows, MACHINE_POINT)
    stats["spread"] = stats["spread"].fillna(0.0)  # unknown spread counts as none
    steadiness = list(steadiness)
    stats["unsteady"] = False
    stats["zero_flags"] = ""  # the flag metrics at 0 behind the point, comma-separated
    for flag in sorted({f for _, _, f in steadiness}):
        unsteady = unsteady_rows(rows, [p for p in steadiness if p[2] == flag])
        if not unsteady.any():
            continue
        marked = point_stats(rows[unsteady], MACHINE_POINT)[MACHINE_POINT].drop_duplicates()
        hit = (
            stats.merge(marked, on=MACHINE_POINT, how="left", indicator=True)["_merge"]
            .eq("both")
            .to_numpy()
        )
        stats["unsteady"] |= hit
        stats.loc[hit, "zero_flags"] += np.where(stats.loc[hit, "zero_flags"] == "", "", ",")
        stats.loc[hit, "zero_flags"] += flag
    return stats[stats["n"] > 0]


def jobs(table: pd.DataFrame) -> pd.DataFrame:
    """One row per job (setting and seed) of the runs of ``table``: ``ok`` (any run of it
    finished) and, for jobs with no ok run, the ``status`` and ``error`` of a failing one."""
    rows = runs(table)
    rows = rows.assign(ok=rows["status"] == "ok", failing=rows["status"].isin(FAILURES))
    rows = rows.sort_values(["ok", "failing"], ascending=False)  # ok first, then failures
    first = rows.groupby(JOB_COLUMNS, dropna=False, sort=False).first().reset_index()
    error = first["error"] if "error" in first.columns else pd.Series(None, index=first.index)
    return first.assign(error=error)[[*JOB_COLUMNS, "ok", "failing", "status", "error"]]


def gaps(ours: pd.DataFrame, theirs: pd.DataFrame, their_runs: pd.DataFrame) -> pd.DataFrame:
    """The points of ``ours`` that ``theirs`` lacks on any machine, grouped by `LEVELS`: one row
    per gap with ``kind``, its key columns (the finer ones empty), ``n_points`` (a point counted
    once however many machines ran it), and ``note``: the statuses ``their_runs`` recorded for
    that key instead of a value (e.g. "unsupported")."""
    rest, _ = _split(ours[POINT].drop_duplicates(), theirs, POINT)
    not_ok = their_runs[their_runs["status"] != "ok"]
    out = []
    for kind, cols in LEVELS:
        gone, rest = _split(rest, theirs, cols)
        if gone.empty:
            continue
        grouped = gone.groupby(cols, dropna=False, sort=True).size().reset_index(name="n_points")
        notes = not_ok.groupby(cols, dropna=False)["status"].agg(
            lambda s: ", ".join(sorted(set(s)))
        )
        # keys as objects on both sides: a column all NaN among the not-ok runs (their metric:
        # a job without metrics has none) is float there and text in ``grouped``
        as_objects = {c: object for c in cols}
        grouped = grouped.astype(as_objects).merge(
            notes.rename("note").reset_index().astype(as_objects), on=cols, how="left"
        )
        out.append(grouped.assign(kind=kind))
    columns = ["kind", *POINT, "n_points", "note"]
    frame = pd.concat(out, ignore_index=True) if out else pd.DataFrame(columns=columns)
    text = {c: object for c in columns if c not in ("x_value", "n_points")}
    return frame.reindex(columns=columns).astype(text)


@dataclass
class Comparison:
    """What `compare` found.

    Attributes:
        matched: One row per directed metric point in both tables on the same machine: the
            `MACHINE_POINT` columns, ``mean``, ``spread``, ``n`` and ``unsteady`` (``_old`` /
            ``_new``), ``worse_by`` (relative change in the bad direction; negative: it
            improved), ``regressed``, and ``unsteady_worse`` (it would have regressed, but a
            timing behind it is unsteady).
        other_machine: OLD's directed points (POINT columns) that NEW has only from other
            hardware: ``hardware_old`` (the machine of OLD's point) and ``hardware_new`` (NEW's
            machines for it, joined by " and "). Not judged, not regressions.
        missing: OLD's points NEW lacks, grouped (see `gaps`); each row is one MISSING line.
        failed: NEW's failing jobs where OLD ran the setting ok: JOB_COLUMNS, status, error.
        new: NEW's points OLD lacks, grouped like ``missing`` (not regressions).
        new_failed: NEW's failing jobs in settings OLD did not run ok, except jobs that failed
            in OLD too (not regressions).
        new_is_empty: NEW has no runs.
        old_is_empty: OLD has no runs (nothing to hold NEW to; said, not a regression).
    """

    matched: pd.DataFrame
    other_machine: pd.DataFrame
    missing: pd.DataFrame
    failed: pd.DataFrame
    new: pd.DataFrame
    new_failed: pd.DataFrame
    new_is_empty: bool
    old_is_empty: bool

    def counts(self) -> dict[str, int]:
        """Regressions per kind (MISSING in metric points, FAILED in jobs)."""
        return {
            "WORSE": int(self.matched["regressed"].sum()),
            "MISSING": int(self.missing["n_points"].sum()),
            "FAILED": len(self.failed),
            "EMPTY": int(self.new_is_empty),
        }

    @property
    def regressed(self) -> bool:
        """Whether anything of any kind regressed."""
        return any(self.counts().values())


def _directed(stats: pd.DataFrame) -> pd.DataFrame:
    return stats[stats["higher_is_better"].notna()]


def _judge(old: pd.DataFrame, new: pd.DataFrame, threshold: float) -> pd.DataFrame:
    """The directed points both tables have on the same machine, with ``worse_by`` and
    ``regressed``."""
    merged = _directed(old).merge(_directed(new), on=MACHINE_POINT, suffixes=("_old", "_new"))
    sign = np.where(_flag(merged["higher_is_better_old"]), -1.0, 1.0)
    delta = merged["mean_new"] - merged["mean_old"]
    scale = merged["mean_old"].abs().replace(0.0, np.nan)
    merged["worse_by"] = sign * delta / scale
    outside = delta.abs() > merged["spread_old"] + merged["spread_new"]
    worse = (merged["worse_by"] > threshold) & outside
    unsteady = merged["unsteady_old"] | merged["unsteady_new"]
    merged["regressed"] = worse & ~unsteady
    merged["unsteady_worse"] = worse & unsteady
    return merged


def _other_machine(old: pd.DataFrame, new: pd.DataFrame) -> pd.DataFrame:
    """OLD's directed points that NEW has, but never on OLD's machine for them: the POINT
    columns, ``hardware_old`` and ``hardware_new`` (NEW's machines for the point)."""
    old, new = _directed(old), _directed(new)
    unmatched, _ = _split(old, new, MACHINE_POINT)
    elsewhere = new.groupby(POINT, dropna=False, sort=True)[HARDWARE].agg(
        lambda s: " and ".join(sorted(set(s)))
    )
    elsewhere = elsewhere.rename("hardware_new").reset_index()
    # keys as objects on both sides (see `gaps`): an empty side's columns may be of another dtype
    as_objects = {c: object for c in POINT if c != "x_value"}
    found = (
        unmatched[MACHINE_POINT].astype(as_objects).merge(elsewhere.astype(as_objects), on=POINT)
    )
    return found.rename(columns={HARDWARE: "hardware_old"}).reset_index(drop=True)


def compare(
    old: pd.DataFrame,
    new: pd.DataFrame,
    threshold: float = 0.05,
    steadiness: Iterable[tuple[str, str, str]] = (),
) -> Comparison:
    """Hold the table ``new`` to everything the table ``old`` had (see the module docstring).
    ``steadiness``: the (task, metric, flag metric) pairs whose flag marks unsteady timings
    (`harness.results.metric_points.declared_steadiness` of the tables' task descriptions)."""
    steadiness = list(steadiness)
    old_runs, new_runs = runs(old), runs(new)
    old_points, new_points = points(old, steadiness), points(new, steadiness)
    old_jobs, new_jobs = jobs(old), jobs(new)

    failing = new_jobs[~new_jobs["ok"] & new_jobs["failing"]]
    ok_before, _ = _split(failing, old_jobs[old_jobs["ok"]], SETTING)  # setting never ok in OLD
    failed_before = old_jobs[~old_jobs["ok"] & old_jobs["failing"]]
    regressions, _ = _split(
        failing, pd.concat([ok_before[JOB_COLUMNS], failed_before[JOB_COLUMNS]]), JOB_COLUMNS
    )
    first_failures, _ = _split(ok_before, failed_before, JOB_COLUMNS)  # not failing already in OLD

    unexplained, _ = _split(old_points, regressions, SETTING)  # a FAILED line explains the rest
    return Comparison(
        matched=_judge(old_points, new_points, threshold),
        other_machine=_other_machine(old_points, new_points),
        missing=gaps(unexplained, new_points, new_runs),
        failed=regressions.reset_index(drop=True),
        new=gaps(new_points, old_points, old_runs),
        new_failed=first_failures.reset_index(drop=True),
        new_is_empty=new_runs.empty,
        old_is_empty=old_runs.empty,
    )


def _setting_text(r: pd.Series) -> str:
    return (
        f"{r['task']} × {r['variant']} {r['variant_params']} {r['task_params']} "
        f"{r['device']} {r['dtype']}"
    )


def _gap_line(label: str, r: pd.Series, side: str) -> str:
    """One MISSING or NEW line; ``side`` is the table that lacks the points."""
    n = int(r["n_points"])
    count = f"{n} metric point{'s' if n != 1 else ''} not in {side}"
    note = f"; {side} recorded: {r['note']}" if isinstance(r["note"], str) else ""
    if r["kind"] == "variant":
        return f"{label} variant {r['task']} × {r['variant']}: {count}{note}"
    if r["kind"] == "setting":
        return f"{label} setting {_setting_text(r)}: {count}{note}"
    if r["kind"] == "metric":
        return f"{label} metric {_setting_text(r)}: {r['metric']} ({count}){note}"
    where = f" at {r['x_name']}={r['x_value']:g}" if r["x_name"] else ""
    return f"{label} point {_setting_text(r)}: {r['metric']}{where}{note}"


def _job_line(label: str, r: pd.Series, what: str) -> str:
    lines = str(r["error"]).strip().splitlines() if isinstance(r["error"], str) else []
    error = f" ({lines[0][:MAX_ERROR]})" if lines else ""
    seed = f"{r['seed']:g}" if pd.api.types.is_number(r["seed"]) else str(r["seed"])
    return f"{label} {_setting_text(r)} seed {seed}: {r['status']} {what}{error}"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _other_machine_lines(other: pd.DataFrame) -> list[str]:
    """One OTHER MACHINE line per variant (with its parameters) and pair of machines."""
    keys = ["task", "variant", "variant_params", "hardware_old", "hardware_new"]
    lines = []
    for key, group in other.groupby(keys, dropna=False, sort=True):
        task, variant, params, old_hw, new_hw = key
        metrics = ", ".join(sorted(set(group["metric"])))
        lines.append(
            f"OTHER MACHINE {task} × {variant} {params}: "
            f"{_plural(len(group), 'metric point')} ({metrics}) not judged: OLD ran on {old_hw}, "
            f"NEW on {new_hw} (run both on one machine to compare them)"
        )
    return lines


# why a value whose flag is 0 is not judged, by the kind of flag (`TaskInfo`'s dict naming it)
UNTRUSTED_WHY = {
    "steadiness": "the timing in {sides} is unsteady (measure it again on a quiet machine)",
    "accuracy": "the kernel in {sides} is outside its error tolerance (its time is no measurement)",
    "convergence": "the run in {sides} is still learning at its cap (train it to convergence)",
}


def _change(row: pd.Series) -> str:
    """The signed relative change from OLD to NEW (a fall of half is -50.0%, whichever the
    metric's direction: the line's kind says whether it is worse)."""
    return f"{100 * (row['mean_new'] - row['mean_old']) / abs(row['mean_old']):+.1f}%"


def _untrusted_why(row: pd.Series, flag_kinds: dict[str, str]) -> str:
    """Why a point is not judged: per kind of flag at 0 (``flag_kinds``: flag metric → its kind,
    `harness.results.metric_points.flag_kinds`; an undeclared one reads as a timing's), the
    tables where it is."""
    sides: dict[str, list[str]] = {}
    for side in ("OLD", "NEW"):
        for flag in filter(None, str(row.get(f"zero_flags_{side.lower()}", "")).split(",")):
            kind = flag_kinds.get(flag, "steadiness")
            if side not in sides.setdefault(kind, []):
                sides[kind].append(side)
    sides = sides or {"steadiness": [s for s in ("OLD", "NEW") if row[f"unsteady_{s.lower()}"]]}
    return "; ".join(
        UNTRUSTED_WHY[kind].format(sides=" and ".join(where)) for kind, where in sides.items()
    )


def format_report(
    result: Comparison, threshold: float, flag_kinds: dict[str, str] | None = None
) -> str:
    """Text report: one line per regression (WORSE, FAILED, MISSING, EMPTY), per UNSTEADY point
    (worse, but not judged, saying why: ``flag_kinds``, flag metric → kind of flag), per variant
    measured on OTHER MACHINEs (not judged), the NEW lines, then a one-line count of each
    kind."""
    lines = []
    matched = result.matched
    for _, r in matched[matched["regressed"]].sort_values("worse_by", ascending=False).iterrows():
        where = f" at {r['x_name']}={r['x_value']:g}" if r["x_name"] else ""
        lines.append(
            f"WORSE {r['task']} × {r['variant']} {r['variant_params']}: {r['metric']}{where} "
            f"{r['mean_old']:.4g} → {r['mean_new']:.4g} ({_change(r)}, "
            f"spread {r['spread_old']:.2g} / {r['spread_new']:.2g})"
        )
    for _, r in matched[matched["unsteady_worse"]].iterrows():
        where = f" at {r['x_name']}={r['x_value']:g}" if r["x_name"] else ""
        lines.append(
            f"UNSTEADY {r['task']} × {r['variant']} {r['variant_params']}: {r['metric']}{where} "
            f"{r['mean_old']:.4g} → {r['mean_new']:.4g} ({_change(r)}) not judged: "
            f"{_untrusted_why(r, flag_kinds or {})}"
        )
    lines += _other_machine_lines(result.other_machine)
    lines += [_job_line("FAILED", r, "in NEW, ok in OLD") for _, r in result.failed.iterrows()]
    lines += [_gap_line("MISSING", r, "NEW") for _, r in result.missing.iterrows()]
    if result.new_is_empty:
        lines.append("EMPTY NEW has no runs (no run rows, or none marked current).")
    lines += [_gap_line("NEW", r, "OLD") for _, r in result.new.iterrows()]
    lines += [
        _job_line("NEW", r, "in NEW, a setting OLD did not run ok")
        for _, r in result.new_failed.iterrows()
    ]
    if result.old_is_empty:
        lines.append("NOTE OLD has no runs: nothing to hold NEW to.")
    counts = result.counts()
    better = int(((matched["worse_by"] < -threshold) & ~matched["regressed"]).sum())
    n_new = int(result.new["n_points"].sum())
    summary = (
        f"{_plural(len(matched), 'metric point')} compared: {counts['WORSE']} worse by more "
        f"than {100 * threshold:g}% and outside the spread, {better} better; "
        f"{_plural(counts['MISSING'], 'metric point')} missing in NEW, "
        f"{_plural(counts['FAILED'], 'job')} failed in NEW"
    )
    n_unsteady = int(matched["unsteady_worse"].sum())
    summary += f"; {n_unsteady} worse but unsteady, not judged" if n_unsteady else ""
    n_other = len(result.other_machine)
    summary += (
        f"; {_plural(n_other, 'metric point')} only on another machine in NEW, not judged"
        if n_other
        else ""
    )
    summary += "; NEW is empty" if result.new_is_empty else ""
    lines.append(summary + f"; {_plural(n_new, 'metric point')} new in NEW.")
    return "\n".join(lines)
