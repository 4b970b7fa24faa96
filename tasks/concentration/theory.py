"""Closed forms of the sparsity S of attention rows on Gaussian logits (theory.md §2), and when
they apply at a finite number of keys.

Setting: a row's weights are a_j ∝ f(ℓ_j) for logits ℓ_j = β + γε_j, ε_j ~ N(0, 1) i.i.d. over
the n keys. As n → ∞, S(a) = E|a|/√E[a²] tends to E|f(β+γε)| / √E[f²(β+γε)]: scale-free, so a
pointwise variant's normalisation (a row sum, a 1/M) does not change it. The forms below are that
ratio for each family's f:

- exp (softmax):            S = exp(−γ²/2), for every β;
- identity (plain linear):  S = [√(2/π)·γ·e^{−β²/(2γ²)} + β·erf(β/(√2γ))] / √(β²+γ²);
- relu² (GAU), t = β/γ:     S = M₂(t)/√M₄(t) with M_k(t) = E[(t+ε)₊^k] (`relu_moment`);
- non-negative linear attention, f = q̃·φ(k), k ~ N(0, I): S = 1/√(1 + q̃ᵀΣ̃q̃/(q̃ᵀμ̃)²);
- explicit decay: a_j = w_j·s_j with a fixed pattern w and s_j ~ N(0, γ²): S → √(2/π)·S(w),
  the identity form at β = 0 times the pattern's own S (`decay_pattern_s`).

**When a form applies.** The measured S divides the key-average of |f| by the root of the
key-average of f². The limit needs that average of f² to be close to E f²: its relative standard
error is r = √(Var(f²)/(n·(E f²)²)) = √((E f⁴/(E f²)² − 1)/n) (n → n_eff = (Σw²)²/Σw⁴ for a
weighted pattern). By the delta method, S ≈ A/√B with A, B the key-averages of |f| and f² has
relative bias (3/8)·r² − ½·Cov(A, B)/(E A·E B); the covariance is ≥ 0 (|f| and f² rise together),
so the bias is at most (3/8)·r² to leading order, and its spread within a row is of order r. We
draw a closed form only where r ≤ `APPLIES_MAX_REL_SE` = 0.35: a bias below 4.6% by that bound
(at n = 512 the measured one is under 2% for every family here). For exp,
E f⁴/(E f²)² = e^{4γ²}: at n = 512 only γ ≲ 1.02 qualifies, in line with theory.md's caveat
(Monte Carlo of the exp case needs γ ≤ 1 and n ≥ 1e5). For relu² the same rule asks for enough
non-zero keys: E f⁴/(E f²)² grows like 1/Φ(t) as t → −∞.
`tests/tasks/test_concentration.py` checks, at every grid point where a form is drawn, that the
measured S is within a few percent of it, and that it is far off where the rule refuses.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

APPLIES_MAX_REL_SE = 0.35  # largest r at which a form is drawn (r: relative SE of the mean of f²)
SQRT_2_OVER_PI = math.sqrt(2 / math.pi)


def gaussian_expectation(f: Callable[[float], float], beta: float, gamma: float) -> float:
    """E f(β + γε) for ε ~ N(0, 1), by adaptive quadrature (relative accuracy, no absolute floor,
    so small expectations such as far tails keep their digits)."""
    from scipy import integrate, stats  # imported here: scipy.stats costs every process 1 s

    value, _ = integrate.quad(
        lambda x: f(beta + gamma * x) * stats.norm.pdf(x), -math.inf, math.inf, epsabs=0
    )
    return value


def rel_se_of_mean_square(second: float, fourth: float, n_eff: float) -> float:
    """r = √((E f⁴/(E f²)² − 1)/n_eff): relative standard error of an n_eff-key average of f²."""
    return math.sqrt(max(fourth / second**2 - 1, 0.0) / n_eff)


def applies(rel_se: float) -> bool:
    """Whether the n → ∞ form is drawn at this relative standard error (module docstring)."""
    return rel_se <= APPLIES_MAX_REL_SE


# softmax: f = exp


def softmax_s_closed_form(gamma: float) -> float:
    """S of softmax rows for logits β + γε, n → ∞: exp(−γ²/2), independent of β."""
    return math.exp(-(gamma**2) / 2)


def softmax_rel_se(gamma: float, n: int) -> float:
    """r for f = exp: E e^{4γε}/(E e^{2γε})² = e^{4γ²}."""
    return math.sqrt(math.expm1(4 * gamma**2) / n)


# identity (plain linear): f = ℓ


def identity_s_closed_form(beta: float, gamma: float) -> float:
    """S of plain linear rows a_j = β + γε, n → ∞ (minimum √(2/π) at β = 0)."""
    num = SQRT_2_OVER_PI * gamma * math.exp(-(beta**2) / (2 * gamma**2))
    num += beta * math.erf(beta / (math.sqrt(2) * gamma))
    return num / math.sqrt(beta**2 + gamma**2)


def identity_rel_se(beta: float, gamma: float, n_eff: float) -> float:
    """r for f = β + γε: E f² = β² + γ², E f⁴ = β⁴ + 6β²γ² + 3γ⁴."""
    second = beta**2 + gamma**2
    return rel_se_of_mean_square(second, beta**4 + 6 * beta**2 * gamma**2 + 3 * gamma**4, n_eff)


# relu²: f = relu(ℓ)² = γ²·(t + ε)₊², t = β/γ


def relu_moment(k: int, t: float) -> float:
    """M_k(t) = E[(t + ε)₊^k], ε ~ N(0, 1).

    Closed form through the parabolic cylinder function: ∫₀^∞ y^k φ(y − t) dy =
    k!·e^{−t²/4}/√(2π)·D_{−k−1}(−t). Unlike the polynomial-times-Φ forms (M₂ = (t²+1)Φ(t) +
    tφ(t), …) it does not cancel catastrophically for very negative t.
    """
    from scipy import special  # imported on use, as in gaussian_expectation

    return (
        math.factorial(k)
        * math.exp(-(t**2) / 4)
        / math.sqrt(2 * math.pi)
        * special.pbdv(-k - 1, -t)[0]
    )


def relu2_s_closed_form(t: float) -> float:
    """S of relu(ℓ)² rows with t = β/γ (bias over logit spread), n → ∞: M₂(t)/√M₄(t).

    1/√6 ≈ 0.408 at t = 0; → 1 as t → +∞; → 0 only as t → −∞ (a negative bias)."""
    return relu_moment(2, t) / math.sqrt(relu_moment(4, t))


def relu2_rel_se(t: float, n: int) -> float:
    """r for f = (t + ε)₊²: E f⁴/(E f²)² = M₈/M₄²."""
    return rel_se_of_mean_square(relu_moment(4, t), relu_moment(8, t), n)


# a pointwise f without a closed form (sigmoid): the same ratio by quadrature


def pointwise_s(
    f: Callable[[float], float], beta: float, gamma: float, n: int
) -> tuple[float, float]:
    """(S, r) of rows a_j = f(β + γε_j) for any pointwise f, by quadrature of theory.md §2's
    ratio E|f|/√E f² and of the rule's E f⁴ (used for sigmoid)."""
    first = gaussian_expectation(lambda x: abs(f(x)), beta, gamma)
    second = gaussian_expectation(lambda x: f(x) ** 2, beta, gamma)
    fourth = gaussian_expectation(lambda x: f(x) ** 4, beta, gamma)
    return first / math.sqrt(second), rel_se_of_mean_square(second, fourth, n)


def sigmoid(x: float) -> float:
    """σ(x), without overflow for very negative x."""
    from scipy import special  # imported on use, as in gaussian_expectation

    return float(special.expit(x))


# non-negative linear attention: f = q̃·φ(k), k ~ N(0, I_d)


def feature_cumulants(phi: Callable[[float], float]) -> tuple[float, float, float, float]:
    """First four cumulants of φ(z), z ~ N(0, 1), by quadrature (φ applied per coordinate)."""
    m1, m2, m3, m4 = (
        gaussian_expectation(lambda x, p=p: phi(x) ** p, 0.0, 1.0) for p in range(1, 5)
    )
    k2 = m2 - m1**2
    k3 = m3 - 3 * m1 * m2 + 2 * m1**3
    k4 = m4 - 4 * m1 * m3 - 3 * m2**2 + 12 * m1**2 * m2 - 6 * m1**4
    return m1, k2, k3, k4


def linear_s_closed_form(
    q_features: torch.Tensor, cumulants: tuple[float, float, float, float], n: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(S, r) per row of non-negative linear attention with query features q̃ (…, d).

    f = Σ_i q̃_i X_i with X_i = φ(k_i) i.i.d.: cumulants add, κ_r(f) = κ_r(X)·Σ_i q̃_i^r. So
    E f = μ̃·Σq̃ and Var f = σ̃²·‖q̃‖²: S = E f/√E f² = 1/√(1 + q̃ᵀΣ̃q̃/(q̃ᵀμ̃)²) with Σ̃ = σ̃²I,
    theory.md's formula (f ≥ 0, so E|f| = E f). E f⁴ from the four cumulants gives r.
    """
    q = q_features.double()
    c1, c2, c3, c4 = (c * q.pow(r).sum(-1) for r, c in enumerate(cumulants, start=1))
    second = c2 + c1**2
    fourth = c4 + 4 * c3 * c1 + 3 * c2**2 + 6 * c2 * c1**2 + c1**4
    s = c1 / second.sqrt()
    r = ((fourth / second**2 - 1).clamp_min(0) / n).sqrt()
    return s, r


# explicit decay: a_j = w_j·s_j, fixed pattern w


def decay_s_closed_form(lam: float, n: int) -> float:
    """S of explicit-decay rows a_j = λ^{n−j}, j = 1…n (the pattern alone, exact at any n)."""
    return math.sqrt((1 - lam**n) / (n * (1 - lam)) * (1 + lam) / (1 + lam**n))


def decay_pattern_s(
    pattern: torch.Tensor, allowed: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(S, r) per row of a_j = w_j·s_j, s_j ~ N(0, γ²) i.i.d., for a non-negative pattern w.

    Over the row's n allowed keys, the key-averages of |w s| and (w s)² tend to γ√(2/π)·mean(w)
    and γ²·mean(w²) once the pattern spreads over many keys, so S → √(2/π)·S(w): the identity
    form at β = 0 times the pattern's own S (for the last causal row of λ^{i−j},
    `decay_s_closed_form`). The average of w²s² has effective size n_eff = (Σw²)²/Σw⁴, and
    E s⁴/(E s²)² = 3, so r = √(2/n_eff).
    """
    w = pattern.double() * allowed
    n = allowed.sum(-1)
    s_w = w.sum(-1) / (n * w.square().sum(-1)).sqrt()
    n_eff = w.square().sum(-1).square() / w.pow(4).sum(-1)
    return SQRT_2_OVER_PI * s_w, (2 / n_eff).sqrt()
