"""Entropic optimal transport and the Sinkhorn divergence (theory.md §1), as a diagnostic of how
far an attention plan is from the plan entropic OT would make of the same scores.

Softmax attention solves the *semi-relaxed* entropic OT problem: rows sum to 1, columns are free
(theory.md §1). Sinkhorn attention imposes both marginals, so a converged Sinkhorn plan gives every
key the same total weight. The diagnostic (`key_marginal_divergence`) asks, for any variant, how
far the weight its plan gives the keys is from that uniform marginal, measured in the geometry of
the keys: the Sinkhorn divergence S_ε(b̂, u) between b̂ (the plan's column sums, rows taken as
|a|/Σ|a| so signed and unnormalised variants have one too) and the uniform u, with the cost
c(k, k') = ‖k − k'‖²/d between keys. S_ε is ≥ 0 and 0 exactly when b̂ = u (Feydy et al. 2019), so
it is 0 for a converged Sinkhorn plan and grows as a plan piles its weight on some keys; unlike a
plain distance between weight vectors it counts moving weight to a *nearby* key as cheap.

OT_ε follows POT's convention (`ot.solve(M, a, b, reg=ε).value`): min over plans P with
marginals a, b of ⟨P, C⟩ + ε·KL(P ‖ abᵀ), the entropic term included, so that
S_ε(a, b) = OT_ε(a, b) − ½OT_ε(a, a) − ½OT_ε(b, b). (POT's `empirical_sinkhorn_divergence`
keeps only ⟨P, C⟩ in each term; this is not that.)
"""

from __future__ import annotations

import torch

DIAGNOSTIC_EPS = 0.5  # ε of the diagnostic, in units of the key cost ‖k − k'‖²/d (≈ 2 on average)


class NotConvergedError(ArithmeticError):
    """Sinkhorn's iterations ended before the plan met its marginals: its value is not OT_ε."""


def entropic_ot(
    a: torch.Tensor,
    b: torch.Tensor,
    cost: torch.Tensor,
    eps: float,
    max_iters: int = 2000,
    tol: float = 1e-10,
) -> float:
    """OT_ε(a, b) = min_P ⟨P, C⟩ + ε·KL(P ‖ abᵀ) over P ≥ 0 with P1 = a, Pᵀ1 = b (masses 1).

    Log-domain Sinkhorn in float64 (potentials f, g; P_ij = a_i b_j exp((f_i + g_j − C_ij)/ε)),
    iterated until the row marginal is met to ``tol`` (the column marginal is exact after each
    column update). Points without mass are dropped first: they carry no plan.

    Raises:
        NotConvergedError: the row marginal still misses by more than ``tol`` after
            ``max_iters`` iterations; a value from a plan off its marginals would be reported
            as OT_ε without being it.
    """
    a, b, cost = a.double(), b.double(), cost.double()
    rows, cols = a > 0, b > 0
    a, b, cost = a[rows], b[cols], cost[rows][:, cols]
    log_a, log_b = a.log(), b.log()
    f = torch.zeros_like(a)
    g = torch.zeros_like(b)
    for _ in range(max_iters):
        f = -eps * torch.logsumexp(log_b[None, :] + (g[None, :] - cost) / eps, dim=1)
        g = -eps * torch.logsumexp(log_a[:, None] + (f[:, None] - cost) / eps, dim=0)
        log_plan = log_a[:, None] + log_b[None, :] + (f[:, None] + g[None, :] - cost) / eps
        miss = float((log_plan.exp().sum(1) - a).abs().sum())
        if miss < tol:
            break
    else:
        raise NotConvergedError(
            f"entropic OT at eps={eps} still misses its row marginal by {miss:.2e} (> {tol:.0e}) "
            f"after {max_iters} iterations; raise max_iters or eps."
        )
    plan = log_plan.exp()
    kl = (plan * (log_plan - log_a[:, None] - log_b[None, :])).sum() - plan.sum() + 1
    return float((plan * cost).sum() + eps * kl)


def sinkhorn_divergence(a: torch.Tensor, b: torch.Tensor, cost: torch.Tensor, eps: float) -> float:
    """S_ε(a, b) = OT_ε(a, b) − ½OT_ε(a, a) − ½OT_ε(b, b) between two weightings of the same
    points (``cost`` between every pair of them)."""
    return (
        entropic_ot(a, b, cost, eps)
        - 0.5 * entropic_ot(a, a, cost, eps)
        - 0.5 * entropic_ot(b, b, cost, eps)
    )


def key_cost(keys: torch.Tensor) -> torch.Tensor:
    """(M, M) cost ‖k_j − k_l‖²/d between keys (M, d): about 2 for independent N(0, I_d) ones."""
    k = keys.double()
    return torch.cdist(k, k).square() / k.shape[-1]


def key_marginal_divergence(
    weights: torch.Tensor, keys: torch.Tensor, eps: float = DIAGNOSTIC_EPS
) -> float | None:
    """S_ε between the key marginal of an attention plan and the uniform one (module docstring).

    ``weights`` (N, M): one row per query, each taken as |a|/Σ|a| with mass 1/N (empty rows carry
    no mass and are left out); ``keys`` (M, d). None when every row is empty (no plan).
    """
    w = weights.double().abs()
    mass = w.sum(-1, keepdim=True)
    full = mass.squeeze(-1) > 0
    if not full.any():
        return None
    plan = w[full] / mass[full]
    marginal = plan.mean(0)
    uniform = torch.full_like(marginal, 1 / len(marginal))
    return sinkhorn_divergence(marginal, uniform, key_cost(keys), eps)
