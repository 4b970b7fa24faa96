"""Scaling fits of the throughput results: exponent and crossover length against dense softmax.

For every variant and setting (its parameters, device, dtype and every throughput parameter but
seq_len) measured at three or more sequence lengths, log(fwd_ms) is fitted against log(seq_len)
by least squares: the slope is the scaling exponent (≈2 for dense attention, ≈1 for linear cost),
with a 95% confidence interval from the Student t distribution on n − 2 degrees of freedom. Where
dense ``softmax`` was measured in the same setting, the crossover length is where the two fitted
lines meet: above it the variant is faster (reported only when the variant's exponent is lower).
The fits become rows of the results table (run_id ``fit-…``), next to the runs they summarise.
"""

from __future__ import annotations

import hashlib
import json
import math

import numpy as np
import pandas as pd
from scipy import stats

FITTED_METRIC = "fwd_ms"
MIN_LENGTHS = 3
REFERENCE_VARIANT = "softmax"


def fit_loglog(seq_lens: np.ndarray, times: np.ndarray) -> tuple[float, float, float, float]:
    """(slope, intercept, ci_low, ci_high) of log(times) = intercept + slope·log(seq_lens)."""
    x, y = np.log(seq_lens), np.log(times)
    slope, intercept = np.polyfit(x, y, 1)
    dof = len(x) - 2
    if dof <= 0:
        return float(slope), float(intercept), math.nan, math.nan
    residual = y - (intercept + slope * x)
    se = math.sqrt(float(residual @ residual) / dof / float(((x - x.mean()) ** 2).sum()))
    half = float(stats.t.ppf(0.975, dof)) * se
    return float(slope), float(intercept), float(slope - half), float(slope + half)


def scaling_rows(frame: pd.DataFrame) -> list[dict]:
    """Rows (in the results table's columns) of every fit the throughput results allow."""
    rows = frame[
        (frame["status"] == "ok")
        & (frame["task"] == "throughput")
        & (frame["metric"] == FITTED_METRIC)
        & (frame["x_name"] == "seq_len")
    ]
    if rows.empty:
        return []
    setting = rows["task_params"].map(
        lambda text: json.dumps(
            {k: v for k, v in json.loads(text).items() if k != "seq_len"}, sort_keys=True
        )
    )
    rows = rows.assign(setting=setting)
    keys = ["variant", "variant_params", "device", "dtype", "setting"]
    fits = {}
    for key, group in rows.groupby(keys):
        curve = group.groupby("x_value")["value"].mean()
        if len(curve) >= MIN_LENGTHS and (curve > 0).all():
            fits[key] = fit_loglog(curve.index.to_numpy(), curve.to_numpy())
    out = []
    for key, (slope, intercept, low, high) in fits.items():
        variant, variant_params, device, dtype, setting_text = key
        reference = next(
            (
                fit
                for k, fit in fits.items()
                if k[0] == REFERENCE_VARIANT and k[2:] == (device, dtype, setting_text)
            ),
            None,
        )
        values = {
            "scaling_exponent": slope,
            "scaling_exponent_ci_low": low,
            "scaling_exponent_ci_high": high,
        }
        if reference is not None and variant != REFERENCE_VARIANT and slope < reference[0]:
            crossing = (intercept - reference[1]) / (reference[0] - slope)
            values["crossover_seq_len"] = math.exp(crossing)
        run_id = "fit-" + hashlib.sha256(json.dumps(key).encode()).hexdigest()[:12]
        for metric, value in values.items():
            out.append(
                {
                    "run_id": run_id,
                    "status": "ok",
                    "error": None,
                    "task": "throughput",
                    "variant": variant,
                    "variant_params": variant_params,
                    "task_params": setting_text,
                    "device": device,
                    "dtype": dtype,
                    "metric": metric,
                    "value": value,
                    "x_name": None,
                    "x_value": None,
                    "higher_is_better": False
                    if metric in ("scaling_exponent", "crossover_seq_len")
                    else None,
                }
            )
    return out
