from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from conftest import random_qkv
from references import naive_softmax

from attnbench.tasks.concentration import row_statistics
from attnbench.variant import VariantShape, build_variant


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("temperature", [0.5, 1.0, 3.0])
def test_equals_naive_softmax(causal, temperature):
    q, k, v = random_qkv(b=2, h=4, n=37, d=16, dv=12)
    out = build_variant("softmax", {"temperature": temperature})(q, k, v, causal=causal)
    torch.testing.assert_close(
        out, naive_softmax(q, k, v, causal, temperature), rtol=1e-5, atol=1e-5
    )


def test_learned_temperature_is_per_head_and_starts_at_the_given_value():
    variant = build_variant(
        "softmax",
        {"temperature": 2.0, "learn_temperature": True},
        VariantShape(n_heads=3, head_dim=8, max_len=64),
    )
    torch.testing.assert_close(variant.temperatures(), torch.full((3,), 2.0))
    with torch.no_grad():
        variant.theta.copy_(torch.tensor([-1.0, 0.0, 2.0]))
    q, k, v = random_qkv(b=1, h=3, n=10, d=8)
    out = variant(q, k, v, causal=True)
    eps = F.softplus(torch.tensor([-1.0, 0.0, 2.0]))
    for h in range(3):
        ref = naive_softmax(q[:, h : h + 1], k[:, h : h + 1], v[:, h : h + 1], True, float(eps[h]))
        torch.testing.assert_close(out[:, h : h + 1], ref, rtol=1e-5, atol=1e-5)


def test_temperature_limits():
    q, k, v = random_qkv(b=1, h=1, n=9, d=8)
    cold = build_variant("softmax", {"temperature": 1e-4}).attention_weights(q, k)
    assert torch.allclose(cold.max(-1).values, torch.ones(1))  # one-hot rows: argmax
    hot = build_variant("softmax", {"temperature": 1e6}).attention_weights(q, k)
    torch.testing.assert_close(hot, torch.full_like(hot, 1 / 9), rtol=1e-4, atol=1e-5)


def test_rejects_non_positive_temperature():
    with pytest.raises(ValueError, match="temperature must be > 0"):
        build_variant("softmax", {"temperature": 0.0})


def test_without_the_one_over_sqrt_d_scale_row_entropy_collapses_as_d_grows():
    """theory.md §5: scaled dot product keeps logit variance ≈ 1, so rows keep their entropy as
    d grows; without 1/√d (temperature ε = 1/√d undoes it) the logit variance is d and the rows
    collapse. q, k ~ N(0, I_d), 256 queries, n = 512 keys. Scaled: logits N(0, γ²) with
    γ² = ‖q‖²/d, E γ² = 1, so the large-n entropy log n − γ²/2 averages log n − ½; the finite-n
    deviation measured at d = 4 (the widest spread of γ²) is 0.035 nats, the tolerance 0.1."""
    n, entropies = 512, {}
    for d in (4, 16, 64, 256):
        g = torch.Generator().manual_seed(d)
        q = torch.randn(1, 1, 256, d, generator=g, dtype=torch.float64)
        k = torch.randn(1, 1, n, d, generator=g, dtype=torch.float64)
        scaled = build_variant("softmax", {}).attention_weights(q, k)
        unscaled = build_variant("softmax", {"temperature": 1 / d**0.5}).attention_weights(q, k)
        entropies[d] = (row_statistics(scaled)["entropy"], row_statistics(unscaled)["entropy"])
    for scaled, _ in entropies.values():
        assert scaled == pytest.approx(math.log(n) - 0.5, abs=0.1)
    unscaled = [u for _, u in entropies.values()]
    assert unscaled == sorted(unscaled, reverse=True)  # collapses as d grows
    assert unscaled[-1] < 1.0  # d = 256: fewer than e¹ keys effectively attended


def _semi_relaxed_objective(plan: torch.Tensor, scores: torch.Tensor, eps: float) -> torch.Tensor:
    """⟨A, −S⟩ + ε Σ A log A per batch (theory.md §1), for plans with rows summing to 1."""
    return (plan * -scores).sum((-2, -1)) + eps * torch.xlogy(plan, plan).sum((-2, -1))


def check_semi_relaxed_optimality(plan: torch.Tensor, scores: torch.Tensor, eps: float) -> None:
    """The KKT conditions of min_{A ≥ 0, A1 = 1} ⟨A, −S⟩ + ε Σ A log A: A > 0 everywhere, rows sum
    to 1, and the gradient −S + ε(log A + 1) is constant along each row (its Lagrange multiplier);
    as the problem is strictly convex these make A *the* minimiser. Checked in float64 to 1e-9."""
    assert torch.all(plan > 0)
    torch.testing.assert_close(plan.sum(-1), torch.ones_like(plan[..., 0]), rtol=0, atol=1e-12)
    gradient = -scores + eps * (plan.log() + 1)
    spread = gradient.amax(-1) - gradient.amin(-1)
    assert float(spread.max()) < 1e-9, float(spread.max())


@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.0])
def test_softmax_is_the_semi_relaxed_entropic_ot_plan_and_a_perturbed_plan_is_not(temperature):
    """theory.md §1: softmax(S/ε) solves the semi-relaxed entropic OT problem (rows sum to 1,
    columns free). The variant's weights meet its optimality conditions and beat every feasible
    perturbation of them (rows still summing to 1); a perturbed plan fails the conditions."""
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(2, 3, 9, 8, generator=gen, dtype=torch.float64)
    k = torch.randn(2, 3, 11, 8, generator=gen, dtype=torch.float64)
    variant = build_variant("softmax", {"temperature": temperature}).double()
    plan = variant.attention_weights(q, k)
    scores = q @ k.transpose(-1, -2) / math.sqrt(8)  # S = QKᵀ/√d; ε is the temperature
    check_semi_relaxed_optimality(plan, scores, temperature)
    best = _semi_relaxed_objective(plan, scores, temperature)
    for scale in (1e-3, 1e-1):
        direction = torch.randn(plan.shape, generator=gen, dtype=torch.float64)
        direction -= direction.mean(-1, keepdim=True)  # keeps every row's sum
        perturbed = (plan + scale * direction * plan).clamp(min=1e-300)
        perturbed /= perturbed.sum(-1, keepdim=True)
        assert torch.all(_semi_relaxed_objective(perturbed, scores, temperature) > best)
        with pytest.raises(AssertionError):
            check_semi_relaxed_optimality(perturbed, scores, temperature)
