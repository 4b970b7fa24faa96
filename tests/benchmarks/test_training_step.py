"""The time of one training step of the recall model, per variant (CPU, float32, one thread).

A quality job's cost is its steps × this time (`train_ms_per_step` in every record is the same
quantity, measured inside the job). Each variant's step is a pytest-benchmark case; the
ratio of each to softmax's step, timed in interleaved rounds of this process, is printed, since
only a ratio measured in one process survives a busy machine. Run on demand:

    pytest -o addopts="" tests/benchmarks/test_training_step.py -s
"""

from __future__ import annotations

import statistics
import time

import pytest
import torch

from attnbench.harness.discovery import load_plugins
from attnbench.task import JobContext, build_task
from attnbench.tasks.recall import query_loss, training_mixture
from attnbench.variant import VARIANTS

load_plugins()

# the reference's recall setting (sweep=recall_state): 128 tokens, 64 sequences a step,
# width 64, one head
PARAMS = dict(seq_len=128, n_kv_pairs=16, min_kv_pairs=16, vocab_size=256, d_model=64)
VARIANTS_TIMED = [
    "softmax",
    "linear",
    "decay",
    "gla",
    "mamba2",
    "delta_net",
    "gated_delta_net",
    "mesa",
]


def _step(variant: str):
    """A closure running one optimiser step of the recall model for ``variant``."""
    torch.manual_seed(0)
    task = build_task("recall", PARAMS)
    ctx = JobContext(variant, {}, torch.device("cpu"), torch.float32, 0, 1)
    model = task.build_model(ctx)
    x, y = task.data(64, training_mixture(task.params)[0], torch.Generator().manual_seed(0))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        query_loss(model, x, y).backward()
        opt.step()

    step()  # first call: kernels built and tuned outside the timing
    return step


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("variant", [v for v in VARIANTS_TIMED if v in VARIANTS.names()])
def test_training_step(benchmark, variant: str):
    benchmark.pedantic(_step(variant), rounds=5, warmup_rounds=1, iterations=1)


# a training step's time over softmax's, at most: the chunked forms keep the mixers within a few
# softmax steps (measured 1.2-1.9x on a 2-core AMD EPYC, AVX-512, 2026-11-28); mesa solves a
# ridge regression per token by conjugate gradients (8.5x there)
STEP_BOUND = {"mesa": 15.0}
DEFAULT_BOUND = 3.0


def _ratios() -> dict[str, tuple[float, float]]:
    """Each variant's median step (ms) and its ratio to softmax's, 5 interleaved rounds."""
    steps = {v: _step(v) for v in VARIANTS_TIMED if v in VARIANTS.names()}
    times: dict[str, list[float]] = {v: [] for v in steps}
    for _ in range(5):
        for v, step in steps.items():
            start = time.perf_counter()
            step()
            times[v].append(time.perf_counter() - start)
    base = statistics.median(times["softmax"])
    return {
        v: (1000 * statistics.median(ts), statistics.median(ts) / base) for v, ts in times.items()
    }


def test_training_steps_within_their_bound_of_softmax(benchmark):
    ratios = benchmark.pedantic(_ratios, rounds=1, iterations=1)
    for v, (ms, ratio) in ratios.items():
        print(f"{v:16s} {ms:8.1f} ms  {ratio:5.2f}x softmax")
    over = {v: r for v, (_, r) in ratios.items() if r > STEP_BOUND.get(v, DEFAULT_BOUND)}
    assert not over, f"training steps over their bound of softmax's: {over}"
