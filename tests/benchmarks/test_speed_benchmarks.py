"""The speed targets (issues #5 and #15) as pytest-benchmark benchmarks (CPU, float32).

Each timed call (a forward, or a forward+backward) is a pytest-benchmark case, so its
statistics land in pytest-benchmark's table and JSON; `test_speed_targets_hold` measures every
target as a ratio within interleaved rounds (`attnbench.harness.cli.speed`, the command
``attnbench-speed`` runs) and asserts the bounds. Run on demand:

    pytest -o addopts="" tests/benchmarks
"""

from __future__ import annotations

import pytest
import torch

from attnbench.harness.cli.speed import format_table, measure
from attnbench.tasks.throughput.targets import Case, all_targets
from attnbench.toolkit.memory import reuse_freed_memory

CASES = sorted(
    {c for t in all_targets() if t.quantity == "time" for c in t.cases()}, key=lambda c: c.key
)


@pytest.fixture(scope="module", autouse=True)
def _cpu_timing_settings():
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    torch.set_flush_denormal(True)
    reuse_freed_memory()
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.key)
def test_call_speed(benchmark, case: Case):
    benchmark.pedantic(case.timed_call(), rounds=5, warmup_rounds=1, iterations=1)


def test_speed_targets_hold(benchmark):
    outcomes, medians = benchmark.pedantic(
        measure, args=(all_targets(),), kwargs={"rounds": 5, "threads": 2}, rounds=1, iterations=1
    )
    report = format_table(outcomes, medians, 5)
    print(report)
    missed = [o.target.label for o in outcomes if not o.met]
    assert not missed, f"targets missed: {missed}\n{report}"
