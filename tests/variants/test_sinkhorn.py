"""Sinkhorn attention against softmax, a dense float64 Sinkhorn, and POT's log-domain solver."""

from __future__ import annotations

import math

import numpy as np
import ot
import pytest
import torch
from conftest import random_qkv
from references import naive_softmax, sinkhorn_dense, sinkhorn_log_dense

from attnbench.variant import build_variant


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


def _shifted(q, k, row=None, col=None):
    """Queries and keys of width d + 1 whose logits q'·k'/√(d+1) are q·k/√d + row_i + col_j:
    the shifts ride on one extra coordinate, so the variant itself sees them."""
    d = q.shape[-1]
    q2 = q * math.sqrt((d + 1) / d)
    ones_q = torch.ones_like(q[..., :1])
    ones_k = torch.ones_like(k[..., :1])
    if row is not None:  # q' = [q, r_i·√(d+1)], k' = [k, 1]
        return torch.cat([q2, row * math.sqrt(d + 1)], -1), torch.cat([k, ones_k], -1)
    if col is not None:  # q' = [q, √(d+1)], k' = [k, c_j]
        return torch.cat([q2, ones_q * math.sqrt(d + 1)], -1), torch.cat([k, col], -1)
    return torch.cat([q2, 0 * ones_q], -1), torch.cat([k, ones_k], -1)


def test_variant_ignores_row_shifts_and_its_limit_column_shifts_softmax_only_rows():
    """theory.md §1, on the variant: a row shift r·1ᵀ of the logits is absorbed by the first
    row half-step, so any n_iters gives the same plan (float64: agreement to 1e-12); a column
    shift 1·cᵀ is absorbed only in the limit (401 half-steps, marginal error < 1e-10 here). One
    half-step (softmax) changes under a column shift."""
    n = 16
    q, k, _ = random_qkv(b=1, h=1, n=n, d=8, seed=3, dtype=torch.float64)
    g = torch.Generator().manual_seed(7)
    row = 3 * torch.randn(1, 1, n, 1, generator=g, dtype=torch.float64)
    col = 3 * torch.randn(1, 1, n, 1, generator=g, dtype=torch.float64)
    base = _shifted(q, k)
    shift = _logits(*_shifted(q, k, row=row)) - _logits(*base)
    torch.testing.assert_close(shift, row.expand(1, 1, n, n))  # the construction shifts rows
    shift = _logits(*_shifted(q, k, col=col)) - _logits(*base)
    torch.testing.assert_close(shift, col.transpose(-2, -1).expand(1, 1, n, n))
    for n_iters in (1, 2, 3, 6):
        variant = build_variant("sinkhorn", {"n_iters": n_iters})
        plan = variant.attention_weights(*base)
        torch.testing.assert_close(
            variant.attention_weights(*_shifted(q, k, row=row)), plan, rtol=1e-12, atol=1e-12
        )
    limit = build_variant("sinkhorn", {"n_iters": 401})
    plan = limit.attention_weights(*base)
    assert max(limit.marginal_error(plan)) < 1e-10
    torch.testing.assert_close(
        limit.attention_weights(*_shifted(q, k, col=col)), plan, rtol=1e-8, atol=1e-10
    )
    soft = build_variant("sinkhorn", {"n_iters": 1})
    moved = soft.attention_weights(*_shifted(q, k, col=col)) - soft.attention_weights(*base)
    assert moved.abs().max() > 0.1
    # and the extra coordinate is a faithful shift: without it the plan is the same
    torch.testing.assert_close(limit.attention_weights(q, k), plan, rtol=1e-8, atol=1e-10)


def test_log_domain_survives_large_logits():
    """exp(S/ε) overflows float32 (and float64) here; the log-domain updates do not, and give
    the plan of a float64 log-domain reference (`sinkhorn_log_dense`). Logits reach ~1e3, where
    float32 keeps ~1e-4 of absolute accuracy in a logit: the plan agrees to 1e-3."""
    q, k, v = random_qkv(b=1, h=1, n=32, d=8, seed=4)
    variant = build_variant("sinkhorn", {"n_iters": 8, "temperature": 0.01})
    logits = _logits(q.double() * 10, k.double(), 0.01)
    assert logits.abs().max() > 700  # e^700 overflows float64
    plan = sinkhorn_log_dense(logits, 8)
    torch.testing.assert_close(
        variant.attention_weights(q * 10, k).double(), plan, atol=1e-3, rtol=0
    )
    out = variant(q * 10, k, v)
    torch.testing.assert_close(out.double(), plan @ v.double(), atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("n_iters", [2, 3, 4, 5])
def test_chunked_passes_and_gradients_equal_dense_half_steps(n_iters, monkeypatch):
    """Chunks of 3 rows (many chunks, a short last one): the fused row-then-column pass must
    accumulate its column sums across chunks exactly; gradients match the dense plan's."""
    from attnbench.variants import sinkhorn

    monkeypatch.setattr(sinkhorn, "CHUNK_BYTES", 3 * 2 * 40 * 8)  # 3 rows of (B·H, M) float64
    gen = torch.Generator().manual_seed(n_iters)
    q, k, v = (
        torch.randn(1, 2, size, 8, generator=gen, dtype=torch.float64) for size in (25, 40, 40)
    )
    variant = build_variant("sinkhorn", {"n_iters": n_iters, "temperature": 0.7})
    leaves = [x.clone().requires_grad_(True) for x in (q, k, v)]
    out = variant(*leaves)
    dense_leaves = [x.clone().requires_grad_(True) for x in (q, k, v)]
    dq, dk, dv = dense_leaves
    expected = sinkhorn_dense(_logits(dq, dk, 0.7), n_iters) @ dv
    torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-12)
    with torch.no_grad():  # the in-place pass (softmax over the logits, GEMM column sums)
        torch.testing.assert_close(variant(q, k, v), expected, rtol=1e-10, atol=1e-12)
    grad = torch.randn_like(out)
    for a, b in zip(
        torch.autograd.grad(out, leaves, grad),
        torch.autograd.grad(expected, dense_leaves, grad),
        strict=True,
    ):
        torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-10)


def test_underflowing_column_sums_fall_back_to_the_log_domain(monkeypatch):
    """At ε = 0.01 some keys get no mass from any query in float32: the fused pass's column
    sums underflow, the exact log-domain pass is taken, and the plan stays finite and right."""
    from attnbench.variants import sinkhorn

    calls = []
    exact = sinkhorn.SinkhornAttention._row_then_column_log
    monkeypatch.setattr(
        sinkhorn.SinkhornAttention,
        "_row_then_column_log",
        staticmethod(lambda *a: calls.append(1) or exact(*a)),
    )
    q, k, v = random_qkv(b=1, h=1, n=32, d=8, seed=4)
    variant = build_variant("sinkhorn", {"n_iters": 3, "temperature": 0.01})
    out = variant(q * 10, k, v)
    assert calls, "the fused pass should have found underflowing column sums"
    plan = sinkhorn_log_dense(_logits(q.double() * 10, k.double(), 0.01), 3)
    torch.testing.assert_close(out.double(), plan @ v.double(), atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("fold_into_values", [True, False])
def test_even_half_steps_by_scaled_values_or_explicitly(fold_into_values, monkeypatch):
    """An even n_iters ends on a column step: SDPA on values scaled by exp(g − g_prev), or, when
    a scale would leave float range, the explicit chunked plan. Both equal the dense plan."""
    from attnbench.variants import sinkhorn

    if not fold_into_values:
        monkeypatch.setattr(sinkhorn, "SHIFT_LIMIT", float("-inf"))
    q, k, v = random_qkv(b=1, h=2, n=24, m=40, d=8)
    variant = build_variant("sinkhorn", {"n_iters": 4, "temperature": 0.7})
    plan = sinkhorn_dense(_logits(q, k, 0.7), 4)
    torch.testing.assert_close(variant(q, k, v), (plan @ v.double()).float(), rtol=1e-5, atol=1e-5)
