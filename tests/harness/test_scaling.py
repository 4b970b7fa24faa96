from __future__ import annotations

import json
import math

import numpy as np
import pytest
from conftest import make_record

from attnbench.harness.jobs.records import write_record
from attnbench.harness.results.collect import collect, read_table
from attnbench.harness.results.scaling import fit_loglog
from attnbench.task_info import ScalingFit, TaskInfo

# A made-up task: the fits come from the declaration its records carry, not from a task name the
# collector knows.
DECLARED = TaskInfo(
    name="speedtask",
    headline="cost_ms",
    scaling_fits=[ScalingFit("cost_ms", "length", reference_variant="dense")],
)


def test_fit_recovers_exponents_and_interval_brackets_them():
    n = np.array([256.0, 512, 1024, 2048, 4096])
    noise = np.exp(np.array([0.02, -0.01, 0.015, -0.02, 0.01]))
    slope, _, lo, hi = fit_loglog(n, 3e-6 * n**2 * noise)
    assert slope == pytest.approx(2.0, abs=0.03) and lo < 2.0 < hi and hi - lo < 0.2
    slope, intercept, lo, hi = fit_loglog(n, 0.5 * n)  # exact: zero-width interval
    assert slope == pytest.approx(1.0) and intercept == pytest.approx(math.log(0.5))
    assert lo == pytest.approx(1.0) and hi == pytest.approx(1.0)


def _write(tmp_path, variant, seq_len, ms, causal=False, info=DECLARED):
    write_record(
        tmp_path,
        make_record(
            f"{variant}-{seq_len}-{causal}",
            status="ok",
            task="speedtask",
            variant=variant,
            task_params={"length": seq_len, "causal": causal},
            task_info=info.to_dict(),
            variant_params={},
            seed=0,
            device="cpu",
            dtype="float32",
            env={},
            metrics=[
                {
                    "metric": "cost_ms",
                    "value": ms,
                    "x_name": "length",
                    "x_value": seq_len,
                    "higher_is_better": False,
                }
            ],
        ),
    )


def test_collected_table_gets_exponents_and_the_crossover_with_the_reference(tmp_path):
    for n in (512, 1024, 2048, 4096):
        _write(tmp_path, "dense", n, 1e-5 * n**2)  # 1e-5·n²
        _write(tmp_path, "linear", n, 0.01 * n)  # 0.01·n: equal to dense at n = 1000
        _write(tmp_path, "linear", n, 0.01 * n, causal=True)  # no reference in this setting
    _write(tmp_path, "window", 512, 1.0)  # one length: nothing to fit
    collect(tmp_path)
    frame, infos = read_table(tmp_path / "results.parquet")
    fits = frame[frame["derived"]]
    got = {
        (r.variant, json.loads(r.task_params)["causal"], r.metric): r.value
        for r in fits.itertuples()
    }
    assert got[("dense", False, "scaling_exponent")] == pytest.approx(2.0)
    assert got[("linear", False, "scaling_exponent")] == pytest.approx(1.0)
    assert got[("linear", False, "crossover_length")] == pytest.approx(1000.0)
    assert ("linear", True, "crossover_length") not in got
    assert ("dense", False, "crossover_length") not in got
    assert not any(v == "window" for v, _, _ in got)
    assert not frame.loc[~frame["derived"], "run_id"].isin(fits["run_id"]).any()
    # the declaration, and the metrics the fit adds, are in the table for the leaderboard
    assert infos["speedtask"] == DECLARED
    exponent = infos["speedtask"].metric("scaling_exponent")
    assert exponent is not None and exponent.higher_is_better is False


def test_no_declared_fit_no_fit_rows(tmp_path):
    undeclared = TaskInfo(name="speedtask", headline="cost_ms")
    for n in (512, 1024, 2048, 4096):
        _write(tmp_path, "dense", n, 1e-5 * n**2, info=undeclared)
    collect(tmp_path)
    frame, _ = read_table(tmp_path / "results.parquet")
    assert not frame["derived"].any() and len(frame) == 4


def test_slopes_equal_but_for_rounding_give_no_crossover_instead_of_an_overflow(tmp_path):
    """Two lines whose slopes differ by rounding only cross past any float (exp overflowed)."""
    for n in (512, 1024, 2048, 4096):
        _write(tmp_path, "dense", n, 1e-3 * n ** (1 + 1e-13))
        _write(tmp_path, "linear", n, 2e-3 * n)  # a hair's lower slope, twice as costly
    collect(tmp_path)
    frame, _ = read_table(tmp_path / "results.parquet")
    fits = frame[frame["derived"]]
    assert set(fits["variant"]) == {"dense", "linear"}
    assert "crossover_length" not in set(fits["metric"])
