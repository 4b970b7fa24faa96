"""The baselines reproduce the analytic curves of theory.md §4 within Monte-Carlo error.

Tolerances are 4 standard errors of the Monte-Carlo mean (computed from the samples themselves), so
a correct baseline fails with probability below 1e-4 per check, and a wrong formula fails at once.
"""

from __future__ import annotations

import math

import pytest
import torch

from attnbench.tasks.icl_regression import baselines as rb


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
    """d = 20, σ = 1, n = 15: ridge (λ = σ²) 0.351, least squares 0.438 (theory.md §4). Ridge's
    error / d is E tr((XᵀX + I)⁻¹)/d, the posterior variance: 0.3514 by Monte Carlo over 2·10⁵
    draws of X (standard error 3·10⁻⁵), which 0.349 misses by 80 of those errors."""
    ridge = _error_at(lambda x, y, q: rb.ridge(x, y, q, 1.0), 15, 20, noise=1.0, n_prompts=8000)
    ls = _error_at(rb.least_squares, 15, 20, noise=1.0, n_prompts=8000)
    _close(ridge, 0.3514)
    _close(ls, 0.25 + 15 / 4 / 20)  # (d − n)/d + σ²·n/((d − n − 1)·d) = 0.4375
    assert ridge[0] < ls[0]


@pytest.mark.parametrize("n, expected", [(5, 1.11), (10, 0.92), (40, 0.69)])
def test_three_nearest_neighbours_d20(n, expected):
    """theory.md's values are rounded to two decimals (at 40: 0.6874 ± 0.0017 by Monte Carlo over
    4·10⁵ prompts), so the window is 4 standard errors plus the rounding's 0.005."""
    mean, se = _error_at(rb.nearest_neighbours, n, 20, n_prompts=8000)
    assert abs(mean - expected) <= 4 * se + 0.005


def test_prefix_errors_only_use_earlier_points():
    xs, clean, observed = _prompts(50, 8, 4)
    base = rb.prefix_errors(rb.least_squares, xs, observed, clean)
    changed = observed.clone()
    changed[:, 5:] += 100.0  # the future
    later = rb.prefix_errors(rb.least_squares, xs, changed, clean)
    torch.testing.assert_close(later[:, :6], base[:, :6])
    assert not torch.allclose(later[:, 6:], base[:, 6:])


# --- one gradient step (von Oswald et al. 2023) -------------------------------------------------


def _moments(x_dist, scale):
    return rb.coordinate_moments(x_dist, scale)


@pytest.mark.parametrize("n, d", [(10, 10), (5, 20), (40, 3)])
def test_gd_step_closed_forms_for_gaussian_and_uniform_inputs(n, d):
    """The general formula reduces to (d + 1)/(n + d + 1) (Gaussian, theory.md §4) and
    (d − 0.2)/(n + d − 0.2) (uniform); the ratio to the zero predictor does not depend on the
    scale of x."""
    for scale in (1.0, 3.0):
        gauss = rb.gd_step_theory(n, d, *_moments("gaussian", scale))
        assert gauss.ratio_to_zero == pytest.approx((d + 1) / (n + d + 1), rel=1e-12)
        assert gauss.mse_zero == pytest.approx(scale**2, rel=1e-12)
        assert gauss.step == pytest.approx(n / ((n + d + 1) * scale**2), rel=1e-12)
        uniform = rb.gd_step_theory(n, d, *_moments("uniform", scale))
        # scipy's uniform fourth moment is exact to ~1e-15
        assert uniform.ratio_to_zero == pytest.approx((d - 0.2) / (n + d - 0.2), rel=1e-12)
        assert uniform.mse_zero == pytest.approx(scale**2 / 3, rel=1e-12)
    assert rb.gd_step_theory(10, 10, 1.0, 3.0).ratio_to_zero == pytest.approx(11 / 21)
    assert rb.gd_step_theory(10, 10, 1 / 3, 1 / 5).ratio_to_zero == pytest.approx(9.8 / 19.8)


def _gd_prompts(n_prompts, n, d, x_dist, scale, noise, seed):
    g = torch.Generator().manual_seed(seed)
    xs = rb.sample_inputs((n_prompts, n + 1, d), x_dist, scale, g).double()
    w = torch.randn(n_prompts, d, generator=g, dtype=torch.float64)
    clean = (xs * w.unsqueeze(1)).sum(-1)
    observed = clean + noise * torch.randn(clean.shape, generator=g, dtype=torch.float64)
    return xs, clean, observed


@pytest.mark.parametrize(
    "x_dist, scale, noise", [("gaussian", 1.0, 0.0), ("uniform", 2.0, 0.0), ("gaussian", 0.5, 0.3)]
)
def test_gd_step_error_and_optimal_step_match_monte_carlo(x_dist, scale, noise):
    """Monte Carlo (40k prompts) of one step with η*: its error / d is the formula's within 4
    standard errors, and a step 20% smaller or larger does worse on the same prompts (the paired
    difference is more than 4 of its standard errors above 0: η* is the minimum)."""
    n, d, prompts = 8, 6, 40000
    theory = rb.gd_step_theory(n, d, *_moments(x_dist, scale), noise**2)
    xs, clean, observed = _gd_prompts(prompts, n, d, x_dist, scale, noise, seed=1)

    def errors(step):
        pred = rb.gd_step(xs[:, :n], observed[:, :n], xs[:, n], step)
        return (pred - clean[:, n]).square() / d

    best = errors(theory.step)
    _close((float(best.mean()), float(best.std() / math.sqrt(prompts))), theory.mse)
    zero = clean[:, n].square() / d
    _close((float(zero.mean()), float(zero.std() / math.sqrt(prompts))), theory.mse_zero)
    for factor in (0.8, 1.2):
        diff = errors(factor * theory.step) - best
        assert diff.mean() > 4 * diff.std() / math.sqrt(prompts), factor


def test_averaging_divides_by_the_second_moment():
    """Inputs N(0, 4·I): mean(y·x) estimates 4w, and dividing by s = 4 gives the s = 1 curve
    times s: error / d = s·(d + 1)/n (one step with η = 1/s, see `gd_step_theory`)."""
    n, d, prompts = 10, 5, 40000
    xs, clean, observed = _gd_prompts(prompts, n, d, "gaussian", 2.0, 0.0, seed=2)
    err = (rb.averaging(xs[:, :n], observed[:, :n], xs[:, n], 4.0) - clean[:, n]).square() / d
    _close((float(err.mean()), float(err.std() / math.sqrt(prompts))), 4.0 * (d + 1) / n)


def test_leave_one_out_neighbours_never_read_the_point_itself():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(30, 4, generator=g)
    y = torch.randn(30, generator=g)
    pred = rb.nearest_neighbours_leave_one_out(x, y, k=3)
    for i in range(30):
        others = [j for j in range(30) if j != i]
        dist = (x[others] - x[i]).square().sum(-1)
        nearest = [others[j] for j in dist.argsort()[:3].tolist()]
        assert float(pred[i]) == pytest.approx(float(y[nearest].mean()), rel=1e-6)
    changed = y.clone()
    changed[7] += 100.0  # a point's own label
    assert float(rb.nearest_neighbours_leave_one_out(x, changed)[7]) == pytest.approx(
        float(pred[7])
    )


def test_inputs_have_the_stated_moments():
    """Sample moments of 200k coordinates against scipy's exact ones (4 standard errors)."""
    g = torch.Generator().manual_seed(4)
    for x_dist, scale in (("gaussian", 1.5), ("uniform", 10.0)):
        x = rb.sample_inputs((200000,), x_dist, scale, g).double()
        s, m4 = rb.coordinate_moments(x_dist, scale)
        for sample, exact in ((x.square(), s), (x.pow(4), m4)):
            _close((float(sample.mean()), float(sample.std() / math.sqrt(len(x)))), exact)
    with pytest.raises(ValueError, match="x_dist='cauchy' is not known"):
        rb.coordinate_moments("cauchy", 1.0)


def check_lasso_kkt(lasso_fit, alpha: float) -> None:
    """The Lasso's optimality (KKT) conditions for (1/(2n))‖y − Xw‖² + α‖w‖₁: with
    c = Xᵀ(y − Xw)/n, c_j = α·sign(w_j) where w_j ≠ 0 and |c_j| ≤ α where w_j = 0. Read off the
    fitted predictor by querying it at the unit vectors; tolerance 1e-7 against a solver that
    stops when no weight moves by 1e-9."""
    gen = torch.Generator().manual_seed(3)
    p, n, d = 64, 5, 8
    x = torch.randn(p, n, d, generator=gen, dtype=torch.float64)
    w_true = torch.randn(p, d, generator=gen, dtype=torch.float64) * (torch.arange(d) < 2)
    y = (x * w_true[:, None]).sum(-1)
    w = torch.stack([lasso_fit(x, y, torch.eye(d, dtype=torch.float64)[j].expand(p, d), alpha)
                     for j in range(d)], dim=1)  # fmt: skip
    c = (x * (y - (x * w[:, None]).sum(-1)).unsqueeze(-1)).sum(1) / n
    active = w.abs() > 1e-12
    assert torch.allclose(c[active], alpha * torch.sign(w[active]), atol=1e-7)
    assert torch.all(c[~active].abs() <= alpha + 1e-7)
    assert active.any() and (~active).any()  # both kinds of condition were checked


def test_lasso_meets_its_optimality_conditions_and_a_wrong_threshold_does_not():
    check_lasso_kkt(rb.lasso, 0.1)

    def mutant(x, y, q, alpha):  # the soft threshold at 2α: the solution of another problem
        return rb.lasso(x, y, q, 2 * alpha)

    with pytest.raises(AssertionError):
        check_lasso_kkt(mutant, 0.1)


def test_lasso_beats_least_squares_on_sparse_weights_with_fewer_examples_than_dimensions():
    """Garg's sparse regression (2 of 10 weights non-zero, 6 examples): least squares' error is
    (d − n)/d·E‖w‖²/d-ish, the Lasso's far lower; 512 prompts make the gap many standard errors."""
    gen = torch.Generator().manual_seed(4)
    p, n, d = 512, 6, 10
    x = torch.randn(p, n, d, generator=gen)
    w = torch.randn(p, d, generator=gen) * (torch.rand(p, d, generator=gen).argsort(1) < 2)
    y = (x * w[:, None]).sum(-1)
    q = torch.randn(p, d, generator=gen)
    target = (q * w).sum(-1)
    err_lasso = (rb.lasso(x, y, q, 0.1) - target).square().mean()
    err_ls = (rb.least_squares(x, y, q) - target).square().mean()
    assert err_lasso < 0.5 * err_ls


def check_three_nearest(predict) -> None:
    """3-NN on a hand-made prompt whose neighbours are known: the query at 0, the examples at
    distances 1…6 along a line in shuffled order with labels 10^distance, so the mean of exactly
    the 3 nearest labels is (10 + 100 + 1000)/3 and any other count gives another number."""
    order = torch.tensor([4, 1, 6, 3, 5, 2], dtype=torch.float64)
    xs = torch.zeros(1, 6, 3, dtype=torch.float64)
    xs[0, :, 1] = order
    ys = (10**order).unsqueeze(0)
    pred = predict(xs, ys, torch.zeros(1, 3, dtype=torch.float64))
    assert float(pred) == pytest.approx(370.0, rel=1e-12)


def test_three_nearest_neighbours_are_exactly_three_and_the_nearest():
    check_three_nearest(rb.nearest_neighbours)
    for k in (2, 4):  # the mutants: a neighbour too few or too many
        with pytest.raises(AssertionError):
            check_three_nearest(lambda x, y, q, k=k: rb.nearest_neighbours(x, y, q, k=k))


def check_ridge_is_the_posterior_mean(ridge_at_sigma, sigma: float) -> None:
    """Under w ~ N(0, I) and noise N(0, σ²), E[w | X, y] = Xᵀ(XXᵀ + σ²I)⁻¹y (Gaussian
    conditioning, the n × n form): ridge with λ = σ² must predict exactly its q·E[w | X, y], the
    Bayes-optimal prediction, so λ = σ² is the best λ. Float64, 1e-9 relative."""
    gen = torch.Generator().manual_seed(5)
    p, n, d = 200, 7, 10
    x = torch.randn(p, n, d, generator=gen, dtype=torch.float64)
    y = torch.randn(p, n, generator=gen, dtype=torch.float64)
    q = torch.randn(p, d, generator=gen, dtype=torch.float64)
    gram = x @ x.transpose(1, 2) + sigma**2 * torch.eye(n, dtype=torch.float64)
    w_post = (x.transpose(1, 2) @ torch.linalg.solve(gram, y.unsqueeze(-1))).squeeze(-1)
    torch.testing.assert_close(ridge_at_sigma(x, y, q), (q * w_post).sum(-1), rtol=1e-9, atol=1e-12)


def test_ridge_with_lambda_sigma_squared_is_the_bayes_posterior_mean_and_nearby_lambdas_are_not():
    sigma = 0.7
    check_ridge_is_the_posterior_mean(lambda x, y, q: rb.ridge(x, y, q, sigma**2), sigma)
    for factor in (0.95, 1.05):  # λ off by 5%: another predictor, no longer Bayes-optimal
        with pytest.raises(AssertionError):
            check_ridge_is_the_posterior_mean(
                lambda x, y, q, f=factor: rb.ridge(x, y, q, f * sigma**2), sigma
            )


def _gd_signal(n_prompts: int, n: int, d: int, seed: int):
    """g = (1/n) Σ y_i x_i · q (one step's prediction per unit step) and the target t = w·q."""
    xs, clean, _ = _prompts(n_prompts, n, d, seed=seed)
    g = ((xs[:, :n] * clean[:, :n].unsqueeze(-1)).mean(1) * xs[:, n]).sum(-1)
    return g, clean[:, n]


def check_optimal_step(step: float, n: int, d: int) -> None:
    """The step minimising E(η·g − t)² is E[g t]/E[g²]: estimated by Monte Carlo (400 000
    prompts) with its delta-method standard error (≈ 0.15% relative here), the claimed step must
    lie within 4 of them, a window narrower than 1% (asserted), so a 1% error fails."""
    g, t = _gd_signal(400_000, n, d, seed=7)
    estimate = float((g * t).mean() / g.square().mean())
    # η̂ − η ≈ mean(g t − η g²)/E g²: its standard error from the samples
    se = float((g * t - estimate * g.square()).std() / (math.sqrt(len(g)) * g.square().mean()))
    assert 4 * se / estimate < 0.01, se / estimate
    assert abs(step - estimate) <= 4 * se, (step, estimate, se)


def test_the_optimal_gd_step_is_the_monte_carlo_minimiser_to_better_than_one_percent():
    n, d = 8, 6
    theory = rb.gd_step_theory(n, d, 1.0, 3.0)  # N(0, I) inputs: s = 1, E x⁴ = 3
    check_optimal_step(theory.step, n, d)
    for factor in (0.99, 1.01):
        with pytest.raises(AssertionError):
            check_optimal_step(factor * theory.step, n, d)


def test_online_gd_is_one_normalised_pass_in_order():
    """`online_gd` against a plain per-prompt loop (w ← w + (y − w·x)·x/‖x‖², in order), and
    its two defining facts: with orthogonal inputs one pass recovers w exactly (each projection
    fixes one coordinate and leaves the others), and the order of the examples matters (an
    estimator that averaged its examples, or took one batch step, would not depend on it)."""
    xs, clean, observed = _prompts(50, 7, 5, noise=0.3, seed=3)
    pred = rb.online_gd(xs[:, :7], observed[:, :7], xs[:, 7])
    for p in range(50):
        w = [0.0] * 5
        for i in range(7):
            x = xs[p, i].tolist()
            r = float(observed[p, i]) - sum(a * b for a, b in zip(w, x, strict=True))
            norm = sum(a * a for a in x)
            w = [a + r * b / norm for a, b in zip(w, x, strict=True)]
        assert float(pred[p]) == pytest.approx(
            sum(a * b for a, b in zip(w, xs[p, 7].tolist(), strict=True))
        )
    basis = torch.linalg.qr(torch.randn(5, 5, dtype=torch.float64))[0].T * 3.0  # rows ⟂, ‖·‖=3
    w_true = torch.randn(5, dtype=torch.float64)
    query = torch.randn(1, 5, dtype=torch.float64)
    exact = rb.online_gd(basis[None], (basis @ w_true)[None], query)
    assert float(exact) == pytest.approx(float(query @ w_true), abs=1e-12)
    reordered = rb.online_gd(xs[:, :7].flip(1), observed[:, :7].flip(1), xs[:, 7])
    assert not torch.allclose(reordered, pred)


def test_online_gd_is_the_delta_rule_with_unit_steps_on_normalised_keys():
    """The delta rule with β = 1, keys x_i/‖x_i‖ and values y_i/‖x_i‖, read by the query,
    predicts exactly what `online_gd` does (docs/theory.md: one delta-rule step is one gradient
    step). Computed by the registered `delta_net` with its features bypassed (identity
    activation; its L2 norm is then a no-op on normalised keys) and β = sigmoid(40) = 1 − 4e-18."""
    from attnbench import VariantShape, build_variant

    xs, _, observed = _prompts(3, 6, 4, noise=0.1, seed=5)
    norms = xs[:, :6].norm(dim=-1, keepdim=True)
    k = (xs[:, :6] / norms)[:, None]
    v = (observed[:, :6, None] / norms)[:, None]
    q = xs[:, 6:7][:, None]
    variant = build_variant(
        "delta_net", {"qk_activation": "identity"}, VariantShape(1, 4, 7)
    ).double()
    beta = torch.full((3, 1, 6, 1), 40.0, dtype=torch.float64)
    # a non-causal call: the query reads the state after the last key; q's own L2 norm and the
    # 1/√D scale multiply the read-out, so undo them
    out = variant(q, k, v, causal=False, gates={"beta": beta})[:, 0, 0, 0]
    out = out * xs[:, 6].norm(dim=-1) * 4**0.5
    expected = rb.online_gd(xs[:, :6], observed[:, :6], xs[:, 6])
    torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-10)
