"""Concentration statistics and the closed forms of theory.md §2."""

from __future__ import annotations

import math

import pytest
import torch

from attnbench.harness.model import ModelConfig, SequenceModel
from attnbench.harness.task_api import JobContext, build_task
from attnbench.harness.variant_api import VariantShape, build_variant
from attnbench.tasks.concentration import (
    attention_maps,
    decay_s_closed_form,
    identity_s_closed_form,
    row_statistics,
    softmax_s_closed_form,
    sparsity_s,
)

D = 16


def _gaussian_row(variant, gamma, n_keys, mu=0.0, seed=0, **params):
    """One query with logit spread γ over n_keys keys k ~ N(μ·1/√D, I)."""
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(D, generator=g)
    q = (gamma * math.sqrt(D) * u / u.norm()).view(1, 1, 1, D)
    k = torch.randn(1, 1, n_keys, D, generator=g) + mu * u / u.norm() / gamma
    var = build_variant(variant, params, VariantShape(1, D, n_keys))
    return var.attention_weights(q.double(), k.double())[0, 0, 0]


def test_sparsity_extremes():
    n = 400
    assert sparsity_s(torch.ones(n)) == pytest.approx(1.0)
    assert sparsity_s(torch.nn.functional.one_hot(torch.tensor(3), n).float()) == pytest.approx(
        1 / math.sqrt(n)
    )
    stats = row_statistics(torch.full((1, n, n), 1 / n))
    assert stats["entropy"] == pytest.approx(math.log(n))
    assert stats["ds_error"] < 1e-6  # float32 rows of 1/400: sums off by rounding only
    assert stats["effective_size"] == pytest.approx(n) and stats["max_weight"] == pytest.approx(
        1 / n
    )


@pytest.mark.parametrize("gamma", [0.25, 0.5, 1.0])
def test_softmax_sparsity_is_exp_minus_gamma_squared_over_two(gamma):
    # n = 1e6 keys, γ ≤ 1 (e^{2s} is heavy-tailed): Monte-Carlo error well under 1%
    s = float(sparsity_s(_gaussian_row("softmax", gamma, 1_000_000)))
    assert s == pytest.approx(softmax_s_closed_form(gamma), rel=0.01)


@pytest.mark.parametrize("beta", [0.0, 0.5, 2.0])
def test_identity_linear_sparsity_closed_form_and_floor(beta):
    s = float(sparsity_s(_gaussian_row("identity", 1.0, 1_000_000, mu=beta)))
    assert s == pytest.approx(identity_s_closed_form(beta, 1.0), rel=0.01)
    assert s >= math.sqrt(2 / math.pi) * 0.99  # it cannot focus


def test_identity_floor_is_sqrt_two_over_pi():
    assert identity_s_closed_form(0.0, 1.0) == pytest.approx(math.sqrt(2 / math.pi))
    assert min(identity_s_closed_form(b, 1.0) for b in (-1, -0.1, 0.3, 3)) > math.sqrt(2 / math.pi)


def test_decay_sparsity_formula_exactly():
    assert decay_s_closed_form(0.9, 100) == pytest.approx(0.435878, abs=1e-6)
    # the decay variant's last row with q·k/√d ≡ 1 is λ^{n−1−j}: its S is the formula
    n, lam = 100, 0.9
    q = torch.ones(1, 1, n, D, dtype=torch.float64)
    k = torch.ones(1, 1, n, D, dtype=torch.float64) / math.sqrt(D)  # q·k/√D = 1
    var = build_variant("decay", {"decay": lam}, VariantShape(1, D, n))
    row = var.attention_weights(q, k, causal=True)[0, 0, -1]
    assert float(sparsity_s(row)) == pytest.approx(decay_s_closed_form(lam, n), abs=1e-9)


def test_gaussian_run_sweeps_every_scale():
    ctx = JobContext("sinkhorn", {"n_iters": 41}, torch.device("cpu"), torch.float32, 0, 2)
    result = build_task("concentration", {"seq_len": 64, "scales": [0.5, 1.0]}).run(ctx)
    got = {(p.metric, p.x_value): p.value for p in result.points}
    for scale in (0.5, 1.0):
        assert got[("ds_error", scale)] < 1e-3  # Sinkhorn: doubly stochastic
        assert got[("sparsity_s_softmax_theory", scale)] == pytest.approx(math.exp(-(scale**2) / 2))


def test_attention_maps_of_a_model():
    cfg = ModelConfig(d_model=16, n_layers=3, n_heads=2, max_len=10, vocab_size=12, output_dim=12)
    model = SequenceModel(cfg, "softmax", {})
    maps = attention_maps(model, torch.randint(0, 12, (4, 10)))
    assert len(maps) == 3 and all(m.shape == (4, 2, 10, 10) for m in maps)
    torch.testing.assert_close(maps[0].sum(-1), torch.ones(4, 2, 10))
    assert torch.all(maps[1].triu(1) == 0)  # causal


def test_recall_source_reports_per_layer():
    ctx = JobContext("softmax", {}, torch.device("cpu"), torch.float32, 0, 2)
    result = build_task("concentration", {"source": "recall", "recall_steps": 3}).run(ctx)
    layers = {p.x_value for p in result.points if p.metric == "entropy"}
    assert layers == {0, 1}
