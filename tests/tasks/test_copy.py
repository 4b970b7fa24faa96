from __future__ import annotations

import pytest
import torch

from attnbench.task import JobContext, build_task
from attnbench.tasks.copy import BLANK, SEPARATOR, copy_batch, greedy_copy


def test_copy_sequences_hide_the_data_in_order():
    x, y, data = copy_batch(
        100, seq_len=20, n_to_copy=5, vocab_size=10, gen=torch.Generator().manual_seed(0)
    )
    assert x.shape == y.shape == (100, 25)
    for row_x, row_y, row_d in zip(x.tolist(), y.tolist(), data.tolist(), strict=True):
        context = row_x[:20]
        assert [t for t in context if t != BLANK] == row_d  # in order, nothing else
        assert row_x[20] == SEPARATOR and row_x[21:] == row_d[:-1]  # teacher forcing
        assert row_y[20:] == row_d and set(row_y[:20]) == {-100}


def test_greedy_decoding_writes_what_the_model_predicts():
    class Oracle(torch.nn.Module):  # predicts token (position mod 7) + 2 everywhere
        def forward(self, seq):
            pos = torch.arange(seq.shape[1])
            return torch.nn.functional.one_hot(pos % 7 + 2, 10).float().expand(seq.shape[0], -1, -1)

    out = greedy_copy(Oracle(), torch.zeros(3, 5, dtype=torch.long), 4)
    assert out.tolist() == [[6, 7, 8, 2]] * 3  # predictions made at positions 4, 5, 6, 7


def test_softmax_learns_selective_copying():
    params = dict(
        seq_len=16, n_to_copy=3, vocab_size=8, train_size=4000, test_size=200, steps=300, d_model=32
    )
    ctx = JobContext("softmax", {}, torch.device("cpu"), torch.float32, 0, 2)
    points = {p.metric: p.value for p in build_task("copy", params).run(ctx).points}
    assert points["chance_accuracy"] == pytest.approx(1 / 6)
    assert points["accuracy"] > 0.8
    assert points["val_accuracy"] > 0.8  # 750 validation tokens: binomial sd ≈ 0.015 at 0.9
    # a sequence is exact iff all its 3 tokens are right: at most accuracy, and (union bound)
    # at least 1 − 3·(1 − accuracy), since each wrong sequence holds at least one wrong token
    assert 1 - 3 * (1 - points["accuracy"]) <= points["exact_match"] <= points["accuracy"]
