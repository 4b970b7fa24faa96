"""Which code produced each run of a results table: its commit, whether the code that ran
differed from that commit (and in which files), or the installed version where no commit is known.

A record's `git_dirty` counts code only (`harness.jobs.env.CODE_PATHS`), and its `code_modules` name
the digest of every module its fingerprint hashed; this module turns the table's columns into the
lines `attnbench-collect` prints: one per commit and kind (clean, dirty, installed), and with
``--provenance`` one per run. A reader can then check out the commit a number names and know it
is the code that measured it.
"""

from __future__ import annotations

import pandas as pd

RUN_COLUMNS = ["run_id", "task", "variant", "git_commit", "git_dirty", "git_dirty_files"]


def _runs(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per run (not the fit rows), with the provenance columns."""
    runs = frame[~frame["derived"].astype(bool)]
    columns = [c for c in (*RUN_COLUMNS, "attnbench_version", "code_source") if c in runs]
    return runs[columns].drop_duplicates("run_id")


def _kind(run: pd.Series) -> str:
    commit = run.get("git_commit")
    if not isinstance(commit, str) or not commit:
        return f"installed attnbench {run.get('attnbench_version') or '(version unknown)'}"
    state = "code differs from it" if bool(run.get("git_dirty")) else "clean code"
    return f"commit {commit[:12]}, {state}"


def summary_lines(frame: pd.DataFrame) -> list[str]:
    """``provenance: N runs of commit abc, clean code`` per commit and kind, dirty ones last,
    each naming the files that differed."""
    runs = _runs(frame)
    if runs.empty:
        return []
    kinds = runs.apply(_kind, axis=1)
    lines = []
    for kind, group in sorted(runs.groupby(kinds), key=lambda kv: ("differs" in kv[0], kv[0])):
        text = f"provenance: {len(group)} run{'s' if len(group) != 1 else ''} of {kind}"
        files = sorted(
            {f.strip() for fs in group.get("git_dirty_files", []) for f in str(fs).split(",")}
            - {""}
        )
        if files:
            text += f" ({', '.join(files[:8])}{', …' if len(files) > 8 else ''})"
        lines.append(text)
    return lines


def per_run_lines(frame: pd.DataFrame) -> list[str]:
    """One line per run: run_id, task × variant, and its provenance."""
    lines = []
    for _, run in _runs(frame).sort_values("run_id").iterrows():
        files = str(run.get("git_dirty_files") or "")
        lines.append(
            f"{run['run_id']}  {run['task']} × {run['variant']}: {_kind(run)}"
            + (f" ({files})" if files else "")
        )
    return lines
