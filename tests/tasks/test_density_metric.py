"""Every task records `density` at the length its variant attends over (`Task.density_size`):
1 for softmax, and for a window of a fifth of the sequence the count written out here, at tiny
sizes (a few training steps: density does not depend on how well a model learns)."""

from __future__ import annotations

import math

import pytest
import torch

from attnbench.task import TASKS, JobContext, build_task

MAD_TINY = dict(  # a few steps of MAD's tasks (tasks/mad)
    vocab_size=32,
    train_size=16,
    test_size=8,
    val_size=8,
    steps=2,
    batch_size=8,
    d_model=16,
    n_heads=2,
)

STATE_TINY = dict(  # a few steps of the state-tracking tasks (tasks/state_tracking)
    train_length=20,
    test_lengths=[40],
    train_size=16,
    test_size=8,
    val_size=8,
    steps=2,
    batch_size=8,
    d_model=16,
)

# (task, tiny params, (n, causal) the variant must be scored at)
SETTINGS = [
    (
        "throughput",
        dict(
            seq_len=40,
            n_heads=1,
            head_dim=8,
            backward=False,
            min_samples=4,
            min_run_time=1e-3,
            max_timing_s=0.5,
        ),
        (40, False),
    ),
    (
        "recall",
        dict(
            seq_len=32,
            n_kv_pairs=4,
            min_kv_pairs=4,
            vocab_size=64,
            train_size=32,
            test_size=8,
            steps=2,
            batch_size=8,
            d_model=16,
        ),
        (32, True),
    ),
    (
        "forgetting_recall",
        dict(
            seq_len=32,
            n_kv_pairs=4,
            min_kv_pairs=4,
            n_updates=2,
            vocab_size=64,
            train_size=32,
            test_size=8,
            val_size=8,
            steps=2,
            batch_size=8,
            d_model=16,
        ),
        (32, True),
    ),
    (
        "copy",
        dict(
            seq_len=12, n_to_copy=3, train_size=32, test_size=8, steps=2, batch_size=8, d_model=16
        ),
        (16, True),  # context, copy token, the output positions (MAD's layout)
    ),
    (
        "icl_regression",
        dict(
            n_dims=2, n_points=6, steps=2, batch_size=8, eval_prompts=16, bootstrap=10, d_model=16
        ),
        (12, True),  # x₁, y₁, …: 2·n_points tokens
    ),
    (
        "icl_regression",
        dict(mode="one_layer", n_dims=2, n_points=9, steps=2, layer_batch_size=8),
        (10, False),  # the examples and the query
    ),
    (
        "icl_regression",
        dict(mode="attention_system", n_dims=2, n_points=20, system_runs=1, steps=2),
        (20, False),  # the history points, as queries and keys
    ),
    (
        "decode",
        dict(
            seq_len=40,
            new_tokens=2,
            n_heads=1,
            head_dim=8,
            min_samples=4,
            min_run_time=1e-3,
            max_timing_s=0.5,
        ),
        (40, True),  # the context the generated tokens attend over, causal
    ),
    ("concentration", dict(seq_len=30, scales=[1.0], n_batches=1, head_dim=8), (30, False)),
    (
        "lm",  # the code corpus: always installed (the running Python's standard library)
        dict(
            corpus="code",
            context=20,
            tokens=80,
            batch_size=4,
            eval_tokens=80,
            val_tokens=20,
            d_model=16,
            n_layers=1,
            new_tokens=2,
        ),
        (20, True),  # the training context
    ),
    ("concentration", dict(source="recall", recall_steps=1), (64, True)),
    *[
        (task, dict(MAD_TINY, seq_len=24), (n, True))
        for task, n in [("fuzzy_recall", 24), ("noisy_recall", 23)]  # noisy: MAD's shift by one
    ],
    *[(task, dict(MAD_TINY, seq_len=16), (16, True)) for task in ("memorization", "compression")],
    *[
        (task, dict(STATE_TINY), (20, True))  # the training length (tasks/state_tracking)
        for task in ("parity", "modular_arithmetic", "word_problem")
    ],
]


def window_density(n: int, w: int, causal: bool) -> float:
    """Causal: min(i + 1, w) keys for query i; else |i − j| < w, clipped at both ends."""
    if causal:
        return sum(min(i + 1, w) for i in range(n)) / (n * (n + 1) / 2)
    return sum(min(i, w - 1) + min(n - 1 - i, w - 1) + 1 for i in range(n)) / n**2


def _density(task: str, params: dict, variant: str, variant_params: dict) -> dict:
    if task == "icl_regression" and params.get("mode") == "one_layer":
        params = {**params, "layer_eval_prompts": 16}
    ctx = JobContext(variant, variant_params, torch.device("cpu"), torch.float32, 0, 1)
    points = build_task(task, params).measure(ctx).points
    return {(p.metric, p.x_name, p.x_value): p.value for p in points if "density" in p.metric}


def test_every_task_is_covered():
    assert {task for task, _, _ in SETTINGS} == set(TASKS.names())


@pytest.mark.parametrize(
    "task, params, size",
    SETTINGS,
    ids=[f"{t}-{p.get('mode', p.get('source', ''))}" for t, p, _ in SETTINGS],
)
def test_density_is_one_for_softmax_and_exact_for_a_window(task, params, size):
    n, causal = size
    assert build_task(task, params).density_size() == (n, n, causal)
    dense = _density(task, params, "softmax", {})
    assert dense and set(dense.values()) == {1.0}
    x = ("seq_len", n) if task in ("throughput", "decode") else (None, None)
    assert ("density", *x) in dense
    window = _density(task, params, "window", {"window": 0.2})
    expected = window_density(n, math.ceil(0.2 * n), causal)
    assert window[("density", *x)] == pytest.approx(expected)
    assert expected < 0.5


def test_recall_records_density_at_each_test_length():
    params = dict(SETTINGS[1][1], test_doublings=2)  # pairs 4, 8, 16 at lengths 32, 32, 64
    window = _density("recall", params, "window", {"window": 0.2})
    by_pairs = {x: v for (metric, _, x), v in window.items() if metric == "density_by_pairs"}
    assert by_pairs == pytest.approx(
        {
            4: window_density(32, 7, True),
            8: window_density(32, 7, True),
            16: window_density(64, 13, True),
        }
    )
