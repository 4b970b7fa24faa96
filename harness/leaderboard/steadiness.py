"""Which values of the page rest on timings that cannot be trusted, decided once per board.

A task declares, per timed metric, a 0/1 metric of the same run and curve position saying whether
the timing settled (`TaskInfo.steadiness`) and one saying whether the timed kernel computed
within its declared error (`TaskInfo.accuracy`). `judge_steadiness` reads those declarations once,
when the board has the rows it shows, and marks every row in two columns that each view reads:

- ``untrusted``: the row is a value of a timing its run flagged unsteady, or of a kernel outside
  its tolerance (`harness.results.metric_points.unsteady_rows`). Such a value enters no contest
  (`ranking`), no cost of the quality-against-cost charts unless a variant has nothing else
  (`tradeoffs`), no budget of the chooser (`views.chooser`), and is marked in ours vs theirs
  (`peers`).
- ``unsteady_timing``: the row *is* a steadiness flag at 0, one timing its run found unsteady;
  the page's header counts those of ok runs (`count_unsteady`). Accuracy flags are not counted
  there: an inaccurate value is marked ✗ on its own.
- ``still_learning``: the row *is* a convergence flag at 0 (`TaskInfo.convergence`), a trained
  run whose validation metric was still improving at its cap; its trained values are
  ``untrusted`` like an unsteady timing's, and the header counts those runs
  (`count_still_learning`).

A run that recorded no flag (an older record) is unknown there, which is not unsteady.
"""

from __future__ import annotations

import pandas as pd

from attnbench.harness.results.metric_points import (
    declared_convergence,
    declared_steadiness,
    unsteady_rows,
)
from attnbench.task_info import TaskInfo

UNTRUSTED = "untrusted"  # column: a value of an unsteady timing or an inaccurate kernel
UNSTEADY_TIMING = "unsteady_timing"  # column: a steadiness flag at 0 (one unsteady timing)
STILL_LEARNING = "still_learning"  # column: a convergence flag at 0 (a run still learning)


def judge_steadiness(frame: pd.DataFrame, infos: dict[str, TaskInfo]) -> pd.DataFrame:
    """``frame`` (the rows a page shows) with its ``untrusted``, ``unsteady_timing`` and
    ``still_learning`` columns, judged by the flags the task descriptions ``infos`` declare (see
    the module docstring)."""
    if frame.empty:
        no = pd.Series(False, index=frame.index, dtype=bool)
        return frame.assign(**{UNTRUSTED: no, UNSTEADY_TIMING: no, STILL_LEARNING: no})
    flags = {(task, flag) for task, info in infos.items() for flag in info.steadiness.values()}
    keys = pd.Series(list(zip(frame["task"], frame["metric"], strict=True)), index=frame.index)
    zero = frame["value"] == 0
    return frame.assign(
        **{
            UNTRUSTED: unsteady_rows(frame, declared_steadiness(infos)),
            UNSTEADY_TIMING: keys.isin(flags) & zero,
            STILL_LEARNING: keys.isin(declared_convergence(infos)) & zero,
        }
    )


def untrusted(rows: pd.DataFrame) -> pd.Series:
    """Per row of ``rows`` (rows of a judged frame), whether its value is untrusted.

    Raises:
        ValueError: ``rows`` were never judged (`judge_steadiness`).
    """
    if UNTRUSTED not in rows.columns:
        raise ValueError("these rows were never judged for steadiness (judge_steadiness)")
    return rows[UNTRUSTED].astype(bool)


def count_still_learning(frame: pd.DataFrame) -> int:
    """How many ok runs of ``frame`` (a judged frame) were still learning at their cap."""
    if frame.empty or STILL_LEARNING not in frame.columns:
        return 0
    ok = (frame["status"] == "ok") & ~frame["derived"].astype(bool)
    return int((ok & frame[STILL_LEARNING].astype(bool)).sum())


def count_unsteady(frame: pd.DataFrame) -> int:
    """How many timings of the ok runs of ``frame`` (a judged frame) their runs flagged
    unsteady."""
    if frame.empty:
        return 0
    ok = (frame["status"] == "ok") & ~frame["derived"].astype(bool)
    return int((ok & frame[UNSTEADY_TIMING].astype(bool)).sum())
