from __future__ import annotations

import pytest
import torch

from attnbench.harness.task_api import JobContext, build_task
from attnbench.tasks.recall import mqar_batch

IGNORE = -100


def _ctx(variant="softmax", seed=0):
    return JobContext(variant, {}, torch.device("cpu"), torch.float32, seed, 2)


def test_mqar_sequences_bind_each_query_to_its_value():
    x, y = mqar_batch(
        200, seq_len=40, n_pairs=6, vocab_size=32, gen=torch.Generator().manual_seed(0)
    )
    for row_x, row_y in zip(x.tolist(), y.tolist(), strict=True):
        keys, values = row_x[0:12:2], row_x[1:12:2]
        assert len(set(keys)) == 6 and all(1 <= k < 16 for k in keys)
        assert all(16 <= v < 32 for v in values)
        scored = [i for i, t in enumerate(row_y) if t != IGNORE]
        assert len(scored) == 6 and min(scored) >= 12
        binding = dict(zip(keys, values, strict=True))
        for i in scored:
            assert row_y[i] == binding[row_x[i]]  # the query is a key; the target its value
        assert all(row_x[i] == 0 for i in range(12, 40) if i not in scored)  # filler


def test_softmax_learns_recall_far_above_chance():
    params = dict(
        seq_len=32,
        n_kv_pairs=4,
        vocab_size=32,
        train_size=4000,
        test_size=400,
        steps=300,
        d_model=32,
    )
    points = {
        (p.metric, p.x_value): p.value for p in build_task("recall", params).run(_ctx()).points
    }
    assert points[("chance_accuracy", None)] == pytest.approx(1 / 16)
    assert points[("accuracy", None)] > 0.9
    assert points[("accuracy_by_pairs", 4)] == points[("accuracy", None)]
    assert {x for m, x in points if m == "accuracy_by_pairs"} == {1, 2, 4}


def test_same_config_and_seed_give_the_same_metrics():
    params = dict(
        seq_len=24, n_kv_pairs=3, vocab_size=16, train_size=200, test_size=50, steps=10, d_model=16
    )
    runs = [
        [(p.metric, p.value) for p in build_task("recall", params).run(_ctx()).points]
        for _ in range(2)
    ]
    assert runs[0] == runs[1]
    other_seed = [
        (p.metric, p.value) for p in build_task("recall", params).run(_ctx(seed=1)).points
    ]
    assert other_seed != runs[0]


@pytest.mark.parametrize(
    "params, message",
    [
        ({"seq_len": 10, "n_kv_pairs": 4}, "need seq_len >= 3·n_kv_pairs = 12"),
        ({"vocab_size": 8, "n_kv_pairs": 4}, "need vocab_size >= 10"),
        ({"steps": 0}, "task.steps must be >= 1, got 0"),
    ],
)
def test_impossible_sizes_are_refused(params, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("·", ".")):
        build_task("recall", params).check()


def test_answers_never_lie_at_or_after_their_query():
    """Why causal=false is a fair recall test: looking ahead cannot reveal a value."""
    x, y = mqar_batch(
        300, seq_len=48, n_pairs=8, vocab_size=40, gen=torch.Generator().manual_seed(1)
    )
    for row_x, row_y in zip(x.tolist(), y.tolist(), strict=True):
        for p, target in enumerate(row_y):
            if target != IGNORE:
                assert target not in row_x[p:]


def test_non_causal_recall_runs_for_a_variant_that_cannot_be_causal():
    params = dict(
        seq_len=24,
        n_kv_pairs=3,
        vocab_size=16,
        train_size=200,
        test_size=50,
        steps=5,
        d_model=16,
        causal=False,
    )
    points = {p.metric for p in build_task("recall", params).run(_ctx("sinkhorn")).points}
    assert "accuracy" in points
