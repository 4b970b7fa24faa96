"""Sinkhorn attention against softmax, a dense float64 Sinkhorn, and POT's log-domain solver."""

from __future__ import annotations

import math

import numpy as np
import ot
import pytest
import torch
from conftest import random_qkv
from references import naive_softmax, sinkhorn_dense

from attnbench.harness.variant_api import build_variant


def _logits(q, k, eps=1.0):
    return q @ k.transpose(-2, -1) / (math.sqrt(q.shape[-1]) * eps)


def test_one_half_step_is_softmax():
    q, k, v = random_qkv(b=2, h=3, n=31, m=17, d=16)
    out = build_variant("sinkhorn", {"n_iters": 1})(q, k, v)
    torch.testing.assert_close(out, naive_softmax(q, k, v), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n_iters", [2, 3, 4, 7])
def test_equals_dense_sinkhorn_half_steps(n_iters):
    q, k, v = random_qkv(b=1, h=2, n=24, m=40, d=8)
    variant = build_variant("sinkhorn", {"n_iters": n_iters, "temperature": 0.7})
    plan = sinkhorn_dense(_logits(q, k, 0.7), n_iters)
    torch.testing.assert_close(variant.attention_weights(q, k).double(), plan, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(variant(q, k, v), (plan @ v.double()).float(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n, m", [(32, 32), (24, 48)])
def test_converges_to_doubly_stochastic(n, m):
    q, k, _ = random_qkv(b=1, h=2, n=n, m=m, d=8, seed=1)
    plan = build_variant("sinkhorn", {"n_iters": 201}).attention_weights(q, k)
    rows, cols = build_variant("sinkhorn").marginal_error(plan)
    assert rows < 1e-4 and cols < 1e-4, (rows, cols)


def test_plan_matches_pot_sinkhorn_log():
    n, m, eps = 20, 30, 0.8
    q, k, _ = random_qkv(b=1, h=1, n=n, m=m, d=8, seed=2)
    scores = (q @ k.transpose(-2, -1) / math.sqrt(8))[0, 0].double()
    plan = build_variant("sinkhorn", {"n_iters": 501, "temperature": eps}).attention_weights(q, k)
    a, b = np.full(n, 1 / n), np.full(m, 1 / m)
    pot_plan = ot.sinkhorn(
        a, b, -scores.numpy(), reg=eps, method="sinkhorn_log", numItermax=10_000, stopThr=1e-12
    )
    # POT's plan has total mass 1; ours has rows summing to 1 (mass n): compare the limits
    np.testing.assert_allclose(plan[0, 0].double().numpy() / n, pot_plan, rtol=1e-4, atol=1e-7)


def test_limit_ignores_row_and_column_shifts_softmax_only_rows():
    n = 16
    q, k, _ = random_qkv(b=1, h=1, n=n, d=8, seed=3)
    logits = _logits(q, k)
    row, col = torch.randn(n, 1) * 3, torch.randn(1, n) * 3
    limit = lambda x: sinkhorn_dense(x, 401)  # noqa: E731
    torch.testing.assert_close(limit(logits + row), limit(logits), rtol=1e-6, atol=1e-8)
    torch.testing.assert_close(limit(logits + col), limit(logits), rtol=1e-6, atol=1e-8)
    soft = lambda x: torch.softmax(x.double(), -1)  # noqa: E731
    torch.testing.assert_close(soft(logits + row), soft(logits))
    assert not torch.allclose(soft(logits + col), soft(logits), atol=1e-3)


def test_log_domain_survives_large_logits():
    """exp(S/ε) overflows float32 here; the log-domain updates do not."""
    q, k, v = random_qkv(b=1, h=1, n=32, d=8, seed=4)
    out = build_variant("sinkhorn", {"n_iters": 8, "temperature": 0.01})(q * 10, k, v)
    assert torch.isfinite(out).all()
