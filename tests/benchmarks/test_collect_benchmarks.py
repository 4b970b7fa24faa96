"""Collecting a 1,000-job sweep: full and incremental (run on demand, see test_speed_benchmarks)."""

from __future__ import annotations

import pytest
from conftest import make_record

from attnbench.harness.jobs.records import write_record
from attnbench.harness.results.collect import collect

N_RECORDS = 1000


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep")
    points = [
        {
            "metric": m,
            "value": 1.0,
            "x_name": "seq_len",
            "x_value": 256.0,
            "higher_is_better": False,
        }
        for m in ("fwd_ms", "fwd_ms_iqr", "fwd_bwd_ms", "peak_mem_mib", "gflops", "tokens_per_s")
    ]
    for i in range(N_RECORDS):
        write_record(
            root,
            make_record(
                f"run {i}",
                status="ok",
                task="throughput",
                variant=("softmax", "linear", "window", "decay")[i % 4],
                task_params={"seq_len": 256},
                variant_params={},
                seed=i,
                device="cpu",
                dtype="float32",
                metrics=points,
                env={"torch_version": "x"},
            ),
        )
    return root


def test_collect_1000_records_full(benchmark, sweep_dir):
    summary = benchmark.pedantic(collect, (sweep_dir,), {"incremental": False}, rounds=3)
    assert summary.n_records == N_RECORDS


def test_collect_1000_records_incremental(benchmark, sweep_dir):
    collect(sweep_dir)
    summary = benchmark.pedantic(collect, (sweep_dir,), rounds=3)
    assert summary.n_reused == N_RECORDS
