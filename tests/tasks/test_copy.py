from __future__ import annotations

import pytest
import torch

from attnbench.task import JobContext, build_task
from attnbench.tasks.copy import BLANK, FIRST_DATA, SEPARATOR, copy_batch


def test_copy_sequences_hide_the_data_in_order_as_mad_places_them():
    x, y, data = copy_batch(
        100, seq_len=20, n_to_copy=5, vocab_size=10, gen=torch.Generator().manual_seed(0)
    )
    assert x.shape == y.shape == (100, 26)  # context, copy token, five output positions
    assert data.min() >= FIRST_DATA and data.max() < 10
    for row_x, row_y, row_d in zip(x.tolist(), y.tolist(), data.tolist(), strict=True):
        context = row_x[:20]
        assert [t for t in context if t != BLANK] == row_d  # in order, nothing else
        assert context[-1] != BLANK  # MAD: the last data token sits right before the copy token
        assert row_x[20] == SEPARATOR and row_x[21:] == [BLANK] * 5  # outputs read at blanks
        assert row_y[21:] == row_d and set(row_y[:21]) == {-100}


def test_the_gaps_before_the_data_tokens_are_a_uniform_multinomial():
    """MAD puts each blank before a data token chosen uniformly: the gap before token j counts
    the blanks that chose it, Binomial(blanks, 1/n) each; mean (blanks/n) and variance
    (blanks·(1/n)(1 − 1/n)) checked over 4000 sequences within 4 standard errors."""
    n, seq_len, size = 8, 64, 4000
    x, _, _ = copy_batch(size, seq_len, n, 16, torch.Generator().manual_seed(1))
    data_at = (x[:, :seq_len] != BLANK).nonzero()[:, 1].view(size, n)
    before = torch.diff(data_at, dim=1, prepend=torch.full((size, 1), -1)) - 1
    blanks = seq_len - n
    mean, var = blanks / n, blanks * (1 / n) * (1 - 1 / n)
    gaps = before.double()
    assert (gaps.mean(0) - mean).abs().max() < 4 * (var / size) ** 0.5
    # the variance of a sample variance ≈ 2σ⁴/(m−1) for a near-normal binomial of mean 7
    assert (gaps.var(0) - var).abs().max() < 4 * (2 * var**2 / (size - 1)) ** 0.5
    assert (data_at[:, -1] == seq_len - 1).all()


def test_softmax_learns_selective_copying():
    params = dict(
        seq_len=16, n_to_copy=3, vocab_size=8, train_size=4000, test_size=200, steps=300, d_model=32
    )
    ctx = JobContext("softmax", {}, torch.device("cpu"), torch.float32, 0, 2)
    points = {p.metric: p.value for p in build_task("copy", params).measure(ctx).points}
    assert points["chance_accuracy"] == pytest.approx(1 / 6)
    assert points["accuracy"] > 0.8
    assert points["val_accuracy"] > 0.8  # 750 validation tokens: binomial sd ≈ 0.015 at 0.9
    # a sequence is exact iff all its 3 tokens are right: at most accuracy, and (union bound)
    # at least 1 − 3·(1 − accuracy), since each wrong sequence holds at least one wrong token
    assert 1 - 3 * (1 - points["accuracy"]) <= points["exact_match"] <= points["accuracy"]
