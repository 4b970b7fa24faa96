"""The Sinkhorn divergence of theory.md §1 and the concentration task's diagnostic built on it:
against POT, zero for a converged Sinkhorn plan, positive for softmax, and a mutant that drops a
self-term fails."""

from __future__ import annotations

import ot
import pytest
import torch

from attnbench.task import JobContext, build_task
from attnbench.tasks.concentration import ot_divergence as od
from attnbench.variant import VariantShape, build_variant


def _problem(m: int = 40, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    keys = torch.randn(m, 8, generator=gen)
    a = torch.rand(m, generator=gen, dtype=torch.float64) + 0.1
    b = torch.rand(m, generator=gen, dtype=torch.float64) + 0.1
    return od.key_cost(keys), a / a.sum(), b / b.sum()


@pytest.mark.parametrize("eps", [0.1, 0.5, 2.0])
def test_entropic_ot_matches_pot(eps):
    """POT's `ot.solve(M, a, b, reg=ε).value` is ⟨P, M⟩ + ε·KL(P ‖ abᵀ) at its optimum; both
    solvers stop at marginal errors ≤ 1e-9, which moves the value by less than 1e-7 relative."""
    cost, a, b = _problem()
    expected = ot.solve(cost.numpy(), a.numpy(), b.numpy(), reg=eps, max_iter=10000, tol=1e-12)
    assert od.entropic_ot(a, b, cost, eps) == pytest.approx(float(expected.value), rel=1e-7)


def _pot_divergence(a, b, cost, eps) -> float:
    def value(x, y):
        return float(ot.solve(cost.numpy(), x.numpy(), y.numpy(), reg=eps, tol=1e-12).value)

    return value(a, b) - 0.5 * value(a, a) - 0.5 * value(b, b)


def test_sinkhorn_divergence_matches_pot_and_is_zero_only_for_equal_measures():
    cost, a, b = _problem()
    got = od.sinkhorn_divergence(a, b, cost, 0.5)
    assert got == pytest.approx(_pot_divergence(a, b, cost, 0.5), rel=1e-6)
    assert got > 1e-4  # two different weightings of the same points
    assert abs(od.sinkhorn_divergence(a, a, cost, 0.5)) < 1e-12


def check_zero_for_a_converged_plan(divergence) -> None:
    """The diagnostic's claim: a plan whose key marginal is uniform (a converged Sinkhorn plan)
    scores 0, to the solver's tolerance; used below on the real function and on a mutant."""
    cost, a, _ = _problem()
    uniform = torch.full_like(a, 1 / len(a))
    assert abs(divergence(uniform, uniform, cost, 0.5)) < 1e-9


def test_the_zero_check_rejects_a_divergence_without_its_self_terms():
    check_zero_for_a_converged_plan(od.sinkhorn_divergence)

    def mutant(a, b, cost, eps):  # the plain entropic OT value: biased, not 0 for a = b
        return od.entropic_ot(a, b, cost, eps) - 0.5 * od.entropic_ot(b, b, cost, eps)

    with pytest.raises(AssertionError):
        check_zero_for_a_converged_plan(mutant)


def _plan(variant: str, params: dict, scale: float = 2.0, n: int = 64, d: int = 16):
    gen = torch.Generator().manual_seed(1)
    keys = torch.randn(n, d, generator=gen, dtype=torch.float64)
    u = torch.randn(n, d, generator=gen, dtype=torch.float64)
    queries = scale * d**0.5 * u / u.norm(dim=-1, keepdim=True)
    attn = build_variant(variant, params, VariantShape(1, d, n)).double()
    weights = attn.attention_weights(queries[None, None], keys[None, None])[0, 0]
    return weights, keys


def test_a_converged_sinkhorn_plan_scores_zero_and_softmax_does_not():
    """Sinkhorn run to convergence (200 half-steps at γ = 2: column sums within 1e-10) has the
    uniform key marginal; softmax, the semi-relaxed plan, gives some keys more weight."""
    weights, keys = _plan("sinkhorn", {"n_iters": 201})
    assert torch.allclose(weights.sum(0), torch.ones(64, dtype=torch.float64), atol=1e-8)
    assert abs(od.key_marginal_divergence(weights, keys)) < 1e-9
    weights, keys = _plan("softmax", {})
    assert od.key_marginal_divergence(weights, keys) > 1e-3
    few, keys = _plan("sinkhorn", {"n_iters": 3})  # part-way: between the two
    assert 0 < od.key_marginal_divergence(few, keys) < od.key_marginal_divergence(weights, keys)


def test_empty_rows_carry_no_mass_and_an_empty_plan_has_no_divergence():
    weights, keys = _plan("softmax", {})
    half = weights.clone()
    half[::2] = 0
    assert od.key_marginal_divergence(half, keys) == pytest.approx(
        od.key_marginal_divergence(weights[1::2], keys), rel=1e-9
    )
    assert od.key_marginal_divergence(torch.zeros(4, 64), keys) is None


def test_the_concentration_task_reports_it_per_scale_where_the_plan_is_not_causal():
    ctx = JobContext("softmax", {}, torch.device("cpu"), torch.float32, 0, 1)
    params = {"seq_len": 64, "head_dim": 16, "scales": [0.5, 4.0], "n_batches": 1}
    points = build_task("concentration", params).measure(ctx).points
    values = {p.x_value: p.value for p in points if p.metric == "sinkhorn_divergence"}
    assert set(values) == {0.5, 4.0} and 0 < values[0.5] < values[4.0]  # sharper: more uneven
    causal = build_task("concentration", {**params, "causal": True}).measure(ctx).points
    assert not any(p.metric == "sinkhorn_divergence" for p in causal)


def test_entropic_ot_refuses_to_report_an_unconverged_plan():
    """Stopped at its cap with the marginals still off, the value is not OT_ε: it raises instead
    of returning it. At the default cap the same problem converges (the POT test above)."""
    cost, a, b = _problem()
    with pytest.raises(od.NotConvergedError, match="after 3 iterations"):
        od.entropic_ot(a, b, cost, 0.1, max_iters=3)
    od.entropic_ot(a, b, cost, 0.1)  # converges within the default cap: no error


@pytest.mark.parametrize("d", [4, 64])
def test_key_cost_is_scaled_by_the_dimension(d):
    """‖k − k'‖²/d between independent N(0, I_d) keys has mean 2 in every dimension (E‖k − k'‖²
    = 2d); unscaled it would be 2d. The mean over all pairs of M keys is a U-statistic whose
    variance is about 4ζ₁/M with ζ₁ = Var(E[‖k − k'‖²/d | k]) = Var(‖k‖²)/d² = 2/d, so its
    standard error is √(8/(dM)): 0.071 at d = 4, M = 400. A window of ±0.3 (over 4 standard
    errors) holds the truth and rejects a cost without the 1/d (mean 8 or 128)."""
    m = 400
    keys = torch.randn(m, d, generator=torch.Generator().manual_seed(d))
    cost = od.key_cost(keys)
    off_diagonal = cost[~torch.eye(m, dtype=torch.bool)]
    assert float(off_diagonal.mean()) == pytest.approx(2.0, abs=0.3)
    assert torch.allclose(cost, torch.cdist(keys.double(), keys.double()).square() / d)
