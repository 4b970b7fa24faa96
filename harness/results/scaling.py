"""Scaling fits a task declares: how a metric grows along an axis, and where two variants cross.

A task declares, as data, which of its metrics to fit against which axis and against which
reference variant (`ScalingFit`); the built-in throughput task fits its forward latency against
the sequence length with dense softmax as the reference. The declaration travels in every
record (`harness.jobs.records`), so collection computes the fits from the records alone, with no
plugin imported.

For every variant and setting (its parameters, device, dtype and every task parameter but the
axis) measured at `MIN_POINTS` or more axis values, log(metric) is fitted against log(axis) by
least squares: the slope is the scaling exponent (≈2 for dense attention in the sequence length,
≈1 for linear cost), with a 95% confidence interval from the Student t distribution on n − 2
degrees of freedom. Where the reference variant was measured in the same setting, the crossover
is the axis value at which the two fitted lines meet: above it the variant is cheaper (reported
only when its exponent is the lower one). The fits become rows of the results table, marked
``derived``, beside the runs they summarise.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from typing import Any

import numpy as np
import pandas as pd

from attnbench.task_info import MIN_POINTS, ScalingFit


def fit_loglog(xs: np.ndarray, ys: np.ndarray) -> tuple[float, float, float, float]:
    """(slope, intercept, ci_low, ci_high) of log(ys) = intercept + slope·log(xs)."""
    from scipy import stats  # here, not at the top: the leaderboard imports this module

    x, y = np.log(xs), np.log(ys)
    slope, intercept = np.polyfit(x, y, 1)
    dof = len(x) - 2
    if dof <= 0:
        return float(slope), float(intercept), math.nan, math.nan
    residual = y - (intercept + slope * x)
    se = math.sqrt(float(residual @ residual) / dof / float(((x - x.mean()) ** 2).sum()))
    half = float(stats.t.ppf(0.975, dof)) * se
    return float(slope), float(intercept), float(slope - half), float(slope + half)


def _setting_without(task_params: pd.Series, axis: str) -> pd.Series:
    return task_params.map(
        lambda text: json.dumps(
            {k: v for k, v in json.loads(text).items() if k != axis}, sort_keys=True
        )
    )


def fit_rows(frame: pd.DataFrame, task: str, fit: ScalingFit) -> list[dict[str, Any]]:
    """Rows (results-table columns, ``derived`` true) of every fit ``fit`` allows in ``task``."""
    rows = frame[
        (frame["status"] == "ok")
        & (frame["task"] == task)
        & (frame["metric"] == fit.metric)
        & (frame["x_name"] == fit.axis)
    ]
    if rows.empty:
        return []
    rows = rows.assign(setting=_setting_without(rows["task_params"], fit.axis))
    # one fit per machine (hardware and threads): timings of different machines never mix
    keys = ["variant", "variant_params", "device", "hardware", "threads", "dtype", "setting"]
    rows = rows.assign(hardware=rows["hardware"].fillna(""), threads=rows["threads"].fillna(0))
    fits = {}
    for key, group in rows.groupby(keys):
        curve = group.groupby("x_value")["value"].mean()
        if len(curve) >= MIN_POINTS and (curve > 0).all():
            fits[key] = fit_loglog(curve.index.to_numpy(), curve.to_numpy())
    directions = {m["name"]: m["higher_is_better"] for m in fit.metrics()}
    out = []
    for key, (slope, intercept, low, high) in fits.items():
        variant, variant_params, device, hardware, threads, dtype, setting = key
        reference = next(
            (f for k, f in fits.items() if k[0] == fit.reference_variant and k[2:] == key[2:]),
            None,
        )
        values = {fit.name: slope, f"{fit.name}_ci_low": low, f"{fit.name}_ci_high": high}
        if reference is not None and variant != fit.reference_variant and slope < reference[0]:
            log_crossover = (intercept - reference[1]) / (reference[0] - slope)
            # slopes equal but for rounding put the crossover past any float: it never comes
            if log_crossover < math.log(sys.float_info.max):
                values[fit.crossover_name] = math.exp(log_crossover)
        ident = json.dumps([task, fit.to_dict(), *key], sort_keys=True, default=str)
        run_id = hashlib.sha256(ident.encode()).hexdigest()[:16]
        for metric, value in values.items():
            out.append(
                {
                    "run_id": run_id,
                    "derived": True,
                    "status": "ok",
                    "task": task,
                    "variant": variant,
                    "variant_params": variant_params,
                    "task_params": setting,
                    "device": device,
                    "hardware": hardware or None,
                    "threads": threads,
                    "dtype": dtype,
                    "metric": metric,
                    "value": value,
                    "higher_is_better": directions.get(metric),
                }
            )
    return out
