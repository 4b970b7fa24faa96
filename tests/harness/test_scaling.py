from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from attnbench.harness.collect import collect
from attnbench.harness.records import Record, write_record
from attnbench.harness.scaling import fit_loglog, scaling_rows


def test_fit_recovers_exponents_and_interval_brackets_them():
    n = np.array([256.0, 512, 1024, 2048, 4096])
    noise = np.exp(np.array([0.02, -0.01, 0.015, -0.02, 0.01]))
    slope, _, lo, hi = fit_loglog(n, 3e-6 * n**2 * noise)
    assert slope == pytest.approx(2.0, abs=0.03) and lo < 2.0 < hi and hi - lo < 0.2
    slope, intercept, lo, hi = fit_loglog(n, 0.5 * n)  # exact: zero-width interval
    assert slope == pytest.approx(1.0) and intercept == pytest.approx(math.log(0.5))
    assert lo == pytest.approx(1.0) and hi == pytest.approx(1.0)


def _write(tmp_path, variant, seq_len, ms, causal=False):
    write_record(
        tmp_path,
        Record(
            run_id=f"{variant}-{seq_len}-{causal}",
            status="ok",
            task="throughput",
            variant=variant,
            task_params={"seq_len": seq_len, "causal": causal},
            variant_params={},
            seed=0,
            device="cpu",
            dtype="float32",
            env={},
            metrics=[
                {
                    "metric": "fwd_ms",
                    "value": ms,
                    "x_name": "seq_len",
                    "x_value": seq_len,
                    "higher_is_better": False,
                }
            ],
        ),
    )


def test_collected_table_gets_exponents_and_the_crossover_with_softmax(tmp_path):
    for n in (512, 1024, 2048, 4096):
        _write(tmp_path, "softmax", n, 1e-5 * n**2)  # 1e-5·n²
        _write(tmp_path, "linear", n, 0.01 * n)  # 0.01·n: equal to softmax at n = 1000
        _write(tmp_path, "linear", n, 0.01 * n, causal=True)  # no softmax in this setting
    _write(tmp_path, "window", 512, 1.0)  # one length: nothing to fit
    collect(tmp_path)
    frame = pd.read_parquet(tmp_path / "results.parquet")
    fits = frame[frame["run_id"].str.startswith("fit-")]
    got = {
        (r.variant, json.loads(r.task_params)["causal"], r.metric): r.value
        for r in fits.itertuples()
    }
    assert got[("softmax", False, "scaling_exponent")] == pytest.approx(2.0)
    assert got[("linear", False, "scaling_exponent")] == pytest.approx(1.0)
    assert got[("linear", False, "crossover_seq_len")] == pytest.approx(1000.0)
    assert ("linear", True, "crossover_seq_len") not in got
    assert ("softmax", False, "crossover_seq_len") not in got
    assert not any(v == "window" for v, _, _ in got)


def test_no_throughput_rows_no_fits():
    frame = pd.DataFrame(
        {
            "status": ["ok"],
            "task": ["recall"],
            "metric": ["accuracy"],
            "x_name": [None],
            "task_params": ["{}"],
        }
    )
    assert scaling_rows(frame) == []
