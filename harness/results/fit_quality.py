"""Which points a scaling fit may use, and when its exponent is to be believed.

`harness.results.scaling` fits log(metric) against log(axis) for every variant and setting. Two
things can make such a fit say something false:

1. **Points from unsteady timings.** A timing its task flagged unsteady (`TaskInfo.steadiness`,
   e.g. a loaded machine, `attnbench.toolkit.timing`) is left out before fitting, like it is left
   out of every contest; a curve left with fewer than `harness.results.scaling.MIN_POINTS` points
   gets no fit.
2. **An exponent no attention kernel has.** A cost that falls with the sequence length or grows
   faster than cubically (a 95 % interval entirely below 0 or above 3), or one whose interval is
   wider than ±`MAX_HALF_WIDTH`, is marked unreliable: the fit row ``<exponent>_reliable`` is 0,
   the board shows the fit as unreliable and its legend gives no exponent. Why ±0.5: it is the
   gap between the classes the board exists to tell apart (n, n·log n ≈ n^1.1 at these sizes,
   n^1.5, n²); an interval wider than that cannot say which class a variant is in. The interval,
   not the slope alone, is held against [0, 3]: a cost that does not grow (a decoder's fixed
   state) fits a slope a hair below 0 as often as above it, and that is a flat cost measured
   well, not a falling one. So is a slope within ±`FLAT_SLOPE` of 0 whose tight interval ends
   just below 0: that little slope is within the spread of one timing from run to run.
   A crossover (where a variant's line meets its reference's) is dropped when either fit is
   unreliable: the meeting point of two unbelievable lines is not a finding.

Kept apart from `harness.results.scaling` on purpose: that module is in every job's code
fingerprint (tasks import `ScalingFit`), and the judgement of points is collection's business.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from attnbench.harness.results.metric_points import declared_steadiness, unsteady_rows
from attnbench.harness.results.scaling import fit_rows
from attnbench.task_info import ScalingFit, TaskInfo

EXPONENT_RANGE = (0.0, 3.0)  # exponents outside this are no attention kernel's cost
MAX_HALF_WIDTH = 0.5  # a wider 95 % interval cannot tell n from n^1.5 from n²
# a slope this close to 0 is a flat cost, even where a tight interval lies just below 0: 2^-0.05
# is 3 % per doubling of the length, inside the spread of one timing from run to run
FLAT_SLOPE = 0.05
RELIABLE_SUFFIX = "_reliable"


def reliable(slope: float, low: float, high: float) -> bool:
    """Whether a fitted exponent is believable (module docstring, item 2)."""
    if not all(math.isfinite(v) for v in (slope, low, high)):
        return False
    overlaps = high >= EXPONENT_RANGE[0] and low <= EXPONENT_RANGE[1]
    flat = abs(slope) <= FLAT_SLOPE
    return (overlaps or flat) and low <= slope <= high and (high - low) / 2 <= MAX_HALF_WIDTH


def judged_fit_rows(frame: pd.DataFrame, infos: dict[str, TaskInfo]) -> list[dict[str, Any]]:
    """The fit rows of every fit the tasks ``infos`` declare, over the steady rows of ``frame``
    only, each fit with its ``<exponent>_reliable`` row (1.0 or 0.0)."""
    left_out = unsteady_rows(frame, declared_steadiness(infos))
    steady = frame[~left_out]
    out: list[dict[str, Any]] = []
    for task, info in sorted(infos.items()):
        for fit in info.scaling_fits:
            rows = fit_rows(steady, task, fit)
            marks = _reliability_rows(rows, fit)
            out += _believable_crossovers(rows, marks, fit) + marks
    return out


def _believable_crossovers(
    rows: list[dict[str, Any]], marks: list[dict[str, Any]], fit: ScalingFit
) -> list[dict[str, Any]]:
    """``rows`` without the crossovers that rest on an unreliable fit, the variant's own or its
    reference's in the same setting: where two lines meet says nothing when either slope is not
    to be believed."""
    believed = {m["run_id"] for m in marks if m["value"] == 1.0}
    setting = ("device", "hardware", "threads", "dtype", "task_params")
    reference_ok = {
        tuple(m[k] for k in setting): m["value"] == 1.0
        for m in marks
        if m["variant"] == fit.reference_variant
    }
    return [
        row
        for row in rows
        if row["metric"] != fit.crossover_name
        or (row["run_id"] in believed and reference_ok.get(tuple(row[k] for k in setting), False))
    ]


def _reliability_rows(rows: list[dict[str, Any]], fit: ScalingFit) -> list[dict[str, Any]]:
    """One ``<exponent>_reliable`` row per fit (run_id) among ``rows``."""
    by_fit: dict[str, dict[str, Any]] = {}
    for row in rows:
        by_fit.setdefault(row["run_id"], {"base": row})[row["metric"]] = row["value"]
    out = []
    for values in by_fit.values():
        ok = reliable(
            values.get(fit.name, math.nan),
            values.get(f"{fit.name}_ci_low", math.nan),
            values.get(f"{fit.name}_ci_high", math.nan),
        )
        out.append(
            {
                **values["base"],
                "metric": fit.name + RELIABLE_SUFFIX,
                "value": 1.0 if ok else 0.0,
                "higher_is_better": None,
            }
        )
    return out
