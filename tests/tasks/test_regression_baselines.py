"""The baselines reproduce the analytic curves of theory.md §4 within Monte-Carlo error.

Tolerances are 4 standard errors of the Monte-Carlo mean (computed from the samples themselves), so
a correct baseline fails with probability below 1e-4 per check, and a wrong formula fails at once.
"""

from __future__ import annotations

import math

import pytest
import torch

from attnbench.tasks import regression_baselines as rb


def _prompts(n_prompts, n, d, noise=0.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    xs = torch.randn(n_prompts, n + 1, d, generator=g, dtype=torch.float64)
    w = torch.randn(n_prompts, d, generator=g, dtype=torch.float64)
    clean = (xs * w.unsqueeze(1)).sum(-1)
    return xs, clean, clean + noise * torch.randn(clean.shape, generator=g, dtype=torch.float64)


def _error_at(predict, n, d, noise=0.0, n_prompts=4000, seed=0):
    """Mean and standard error of the error / d predicting point n from n examples."""
    xs, clean, observed = _prompts(n_prompts, n, d, noise, seed)
    pred = predict(xs[:, :n], observed[:, :n], xs[:, n])
    err = (pred - clean[:, n]).square() / d
    return float(err.mean()), float(err.std() / math.sqrt(n_prompts))


def _close(measured, expected):
    mean, se = measured
    assert abs(mean - expected) <= 4 * se + 1e-9, (mean, se, expected)


@pytest.mark.parametrize("n", [0, 2, 5, 9, 10, 14])
def test_min_norm_least_squares_curve(n):
    d = 10
    _close(_error_at(rb.least_squares, n, d), max(d - n, 0) / d)


@pytest.mark.parametrize("n", [12, 20])
def test_least_squares_with_noise(n):
    d, sigma = 5, 0.5
    _close(_error_at(rb.least_squares, n, d, noise=sigma, n_prompts=20000), sigma**2 / (n - d - 1))


@pytest.mark.parametrize("n", [1, 3, 5, 10, 20])
def test_averaging_curve(n):
    d = 5
    _close(_error_at(rb.averaging, n, d, n_prompts=40000), (d + 1) / n)


def test_ridge_beats_least_squares_near_n_equals_d():
    """d = 20, σ = 1, n = 15: ridge (λ = σ²) ≈ 0.349, least squares ≈ 0.438 (theory.md §4)."""
    ridge = _error_at(lambda x, y, q: rb.ridge(x, y, q, 1.0), 15, 20, noise=1.0, n_prompts=8000)
    ls = _error_at(rb.least_squares, 15, 20, noise=1.0, n_prompts=8000)
    _close(ridge, 0.349)
    _close(ls, 0.25 + 15 / 4 / 20)  # (d − n)/d + σ²·n/((d − n − 1)·d) = 0.4375
    assert ridge[0] < ls[0]


@pytest.mark.parametrize("n, expected", [(5, 1.11), (10, 0.92), (40, 0.68)])
def test_three_nearest_neighbours_d20(n, expected):
    mean, se = _error_at(rb.nearest_neighbours, n, 20, n_prompts=8000)
    assert abs(mean - expected) <= 4 * se + 0.01 * expected  # the theory's values are rounded


def test_prefix_errors_only_use_earlier_points():
    xs, clean, observed = _prompts(50, 8, 4)
    base = rb.prefix_errors(rb.least_squares, xs, observed, clean)
    changed = observed.clone()
    changed[:, 5:] += 100.0  # the future
    later = rb.prefix_errors(rb.least_squares, xs, changed, clean)
    torch.testing.assert_close(later[:, :6], base[:, :6])
    assert not torch.allclose(later[:, 6:], base[:, 6:])
