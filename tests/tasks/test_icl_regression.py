from __future__ import annotations

import math

import pytest
import torch

from attnbench.harness.jobs.preflight import ConfigError, check_overrides
from attnbench.task import JobContext, build_task
from attnbench.tasks.icl_regression import (
    AttentionSystem,
    IclRegression,
    OneLayer,
    bootstrap_band,
    paired_ratio,
)
from attnbench.tasks.icl_regression import baselines as rb
from attnbench.variant import VARIANTS

# theory.md §3: n = 100, d = 10, X ~ U[−10, 10], noise N(0, 1), β ~ N(0, I), 1000 steps, 10 runs
SYSTEM = dict(
    mode="attention_system", n_dims=10, n_points=100, noise_std=1.0, steps=1000, system_runs=10
)


@pytest.fixture
def one_thread():
    """Tiny matrices: one thread is several times faster than two on a busy machine (denormals
    are flushed in every test, as in every CPU job: tests/conftest.py; unflushed, the d = 100
    system's products ran 24 times slower, 413 ms an evaluation against 17.5)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _run(variant, **params):
    ctx = JobContext(variant, {}, torch.device("cpu"), torch.float32, 0, 1)
    result = build_task("icl_regression", params).measure(ctx)
    return {(p.metric, p.x_value): p.value for p in result.points}, result.details


def test_identity_attention_system_converges_to_least_squares(one_thread):
    points, details = _run("identity", **SYSTEM)
    assert details["linear_in_x"]
    assert len(details["error_rates"]) == 10
    # theory.md §3: below 1e-4 in every run (measured max 3.8e-5 over the 10 seeded runs)
    assert max(details["error_rates"]) < 1e-4
    assert points[("error_rate_vs_ls", None)] == max(details["error_rates"])
    assert points[("loss_ratio_vs_ls", None)] == pytest.approx(1.0, abs=1e-3)


def test_softmax_attention_system_does_not(one_thread):
    points, details = _run("softmax", **SYSTEM)
    assert not details["linear_in_x"]
    assert ("error_rate_vs_ls", None) not in points  # not linear in x: no β_eq to compare
    # 1–2 orders above least squares at n = 100 (measured medians 45–62 over the 10 runs on the
    # AVX-512, AVX2 and generic kernels of one host)
    assert 10 < points[("loss_ratio_vs_ls", None)] < 100
    # and no run comes near it (best of 10 measured: 11.6 AVX-512, 9.2 AVX2, 5.3 generic), the
    # contrast with n = 1000 below, where the best of 4 is within 3 % of least squares
    assert min(details["loss_ratios"]) > 3


@pytest.mark.slow
def test_softmax_attention_system_at_a_thousand_points_and_in_high_dimension(one_thread):
    """theory.md §3 at n = 1000: softmax's loss over least squares' "approaches" at d = 10 and is
    "again about 3 orders worse" at d = 100.

    At d = 10 the fit is non-convex with two basins: runs end either near least squares' loss
    (ratio 0.88–1.05) or stuck 1–2 orders above it (18–59), and which basin a run reaches depends
    on the rounding of its first L-BFGS steps, even in float64: the same four seeds gave 22, 51,
    18, 1.02 on AVX-512 kernels, 1.02, 1.05, 0.88, 1.02 on AVX2 and 0.89, 1.03, 1.03, 59 on the
    generic ones. So the median over runs is a property of the CPU, not of the claim. The claim
    is that softmax *can* match least squares at n = 1000 (it cannot at n = 100, see above): the
    best of four runs within 10 % of least squares' loss, on every kernel. At d = 100 every run
    is about 3 orders worse (1050 AVX-512, 1065 AVX2). The identity system stays least squares
    at d = 100 (error rate 1.7e-5). The runs are the task's own (`system_run`), fitted one at a
    time until one is within the bound, as the claim needs no more (on AVX2 the first is)."""
    task = build_task("icl_regression", {**SYSTEM, "n_points": 1000, "system_runs": 4})
    ctx = JobContext("softmax", {}, torch.device("cpu"), torch.float32, 0, 1)
    ratios = []
    for run in range(4):
        ratios.append(task.system_run(ctx, run).loss_ratio)
        if ratios[-1] < 1.1:
            break
    assert min(ratios) < 1.1, ratios
    high_d = {**SYSTEM, "n_dims": 100, "n_points": 1000, "system_runs": 1}
    softmax, _ = _run("softmax", **high_d)
    # about 3 orders: ten times the d = 10 bound, and half an order's room below 1000
    assert softmax[("loss_ratio_vs_ls", None)] > 10**2.5
    identity, details = _run("identity", **high_d)
    assert max(details["error_rates"]) < 1e-4


def test_prompt_tokens_interleave_inputs_and_padded_outputs():
    xs = torch.arange(12.0).view(1, 3, 4)
    ys = torch.tensor([[10.0, 20.0, 30.0]])
    tokens = IclRegression.interleave(xs, ys)
    assert tokens.shape == (1, 6, 4)
    torch.testing.assert_close(tokens[0, 0::2], xs[0])
    torch.testing.assert_close(
        tokens[0, 1::2], torch.tensor([[10.0, 0, 0, 0], [20.0, 0, 0, 0], [30.0, 0, 0, 0]])
    )


def test_prompt_mode_reports_curves_bands_and_baselines(one_thread):
    points, details = _run(
        "softmax", n_dims=3, n_points=6, steps=20, eval_prompts=300, d_model=16, n_layers=1
    )
    for i in range(6):
        lo, mid, hi = (points[(m, i)] for m in ("mse_q05", "mse", "mse_q95"))
        assert lo <= mid <= hi
        for b in ("least_squares", "ridge", "averaging", "knn3", "gd_step"):
            assert (f"mse_{b}", i) in points
    assert points[("mse_least_squares", 5)] < 1e-6  # n = 5 ≥ d = 3: exact, noiseless
    # one optimal step: between least squares and the zero predictor (error / d = 1 at n = 0)
    assert points[("mse_gd_step", 0)] == points[("mse_averaging", 0)]
    assert points[("mse_least_squares", 5)] < points[("mse_gd_step", 5)] < 1.0
    assert len(details["loss_curve"]) > 0
    # softmax claims no estimator: no regression-view ratio
    assert details["estimator"] == "" and ("mse_vs_estimator", None) not in points


def test_prompt_mode_sets_a_variant_beside_the_estimator_it_implements(one_thread):
    """The regression view: `identity` claims least squares (AttentionVariant.estimator), and
    its ratio is its mean error over least squares' mean error on the same test prompts."""
    size = {"n_dims": 3, "n_points": 6, "steps": 20, "eval_prompts": 300, "d_model": 16}
    points, details = _run("identity", n_layers=1, **size)
    assert details["estimator"] == "least_squares"
    curve = [points[("mse_least_squares", i)] for i in range(6)]
    assert points[("mse_vs_estimator", None)] == pytest.approx(
        points[("mse_mean", None)] / (sum(curve) / 6), rel=1e-5
    )


def test_bootstrap_band_brackets_the_mean_and_collapses_for_constants():
    g = torch.Generator().manual_seed(0)
    errors = torch.rand(500, 3, generator=g)
    lo, hi = bootstrap_band(errors, 500, torch.Generator().manual_seed(1))
    mean = errors.mean(0)
    assert (lo < mean).all() and (mean < hi).all() and ((hi - lo) < 0.1).all()
    lo, hi = bootstrap_band(torch.full((100, 2), 0.5), 100, torch.Generator().manual_seed(1))
    torch.testing.assert_close(lo, torch.full((2,), 0.5))
    torch.testing.assert_close(hi, torch.full((2,), 0.5))


def test_bad_mode_is_one_clear_sentence():
    with pytest.raises(ValueError, match="task.mode='regress' is not valid; use one of prompt, "):
        build_task("icl_regression", {"mode": "regress"}).check()


def _float64(variant):
    return JobContext(variant, {}, torch.device("cpu"), torch.float64, 0, 1)


def test_least_squares_is_the_identity_system_with_whitening_weights():
    """theory.md §3: from X = UΣVᵀ, W_q = W_k = Λ⁻¹Vᵀ (Λ = Σ) gives W_qᵀW_k = (XᵀX)⁻¹, and with
    w_v = √d·n (cancelling `identity`'s 1/(√d·M)) the task's own system predicts exactly least
    squares' values at the history points (float64: agreement to ~1e-12 relative)."""
    n, d = 50, 7
    g = torch.Generator().manual_seed(0)
    x = (torch.rand(n, d, generator=g, dtype=torch.float64) * 2 - 1) * 10
    y = x @ torch.randn(d, generator=g, dtype=torch.float64) + torch.randn(n, generator=g).double()
    _, sigma, vt = torch.linalg.svd(x, full_matrices=False)
    whiten = torch.diag(1 / sigma) @ vt
    system = AttentionSystem(_float64("identity"), d, n, g)
    with torch.no_grad():
        system.w_q.copy_(whiten)
        system.w_k.copy_(whiten)
        system.w_v.fill_(math.sqrt(d) * n)
        pred = system(x, y)
    ls = rb.least_squares(x.unsqueeze(0).expand(n, -1, -1), y.unsqueeze(0).expand(n, -1), x)
    torch.testing.assert_close(pred, ls, rtol=1e-10, atol=1e-10 * float(y.abs().max()))


def test_one_linear_layer_expresses_the_optimal_gradient_step_exactly():
    """theory.md §4 (von Oswald et al.): W_Q = W_K = [[I, 0], [0, 0]], a value projection copying
    y with weight η*·√D·M/n (D = d + 1, M = n + 1: `identity`'s 1/(√D·M)), identity output: the
    task's layer then predicts exactly one step with η* on every prompt (float64)."""
    n, d, prompts = 6, 4, 200
    task = build_task("icl_regression", {"mode": "one_layer", "n_dims": d, "n_points": n})
    layer = OneLayer(_float64("identity"), d, n)
    step = task.gd_theory(n).step
    proj = torch.zeros(d + 1, d + 1, dtype=torch.float64)
    proj[:d, :d] = torch.eye(d)
    value = torch.zeros(d + 1, d + 1, dtype=torch.float64)
    value[d, d] = step * math.sqrt(d + 1) * (n + 1) / n
    with torch.no_grad():
        layer.attention.qkv.weight.copy_(torch.cat([proj, proj, value]))
        layer.attention.qkv.bias.zero_()
        layer.attention.out.weight.copy_(torch.eye(d + 1))
        layer.attention.out.bias.zero_()
    xs, _, _, ys = task.sample_prompts(prompts, torch.Generator().manual_seed(1), n + 1)
    xs, ys = xs.double(), ys.double()
    with torch.no_grad():
        pred = layer(xs[:, :n], ys[:, :n], xs[:, n]).double()
    expected = rb.gd_step(xs[:, :n], ys[:, :n], xs[:, n], step)
    torch.testing.assert_close(pred, expected, rtol=1e-6, atol=1e-6)  # the layer returns float32


def test_trained_identity_layer_matches_the_gradient_step(one_thread):
    """Training finds the step: d = n = 5, uniform inputs. One layer can at best compute the
    optimal step (theory.md §4: its other terms are uncorrelated with the target), so the ratio is
    one-sided: at least 1 less 3 of its paired standard errors (~0.1 % with 20k prompts), and at
    most 1.02 for 600 steps of training; gd_over_zero is the exact (d − 0.2)/(n + d − 0.2)
    within 4 of its standard errors."""
    points, details = _run(
        "identity",
        mode="one_layer",
        n_dims=5,
        n_points=5,
        x_dist="uniform",
        steps=600,
        layer_eval_prompts=20000,
    )
    ratio, se = points[("loss_ratio_vs_gd", None)], points[("loss_ratio_vs_gd_se", None)]
    assert se < 0.01
    assert 1 - 3 * se <= ratio <= 1.02
    assert points[("cosine_vs_gd", None)] > 0.98
    assert points[("gd_over_zero_theory", None)] == pytest.approx(4.8 / 9.8)
    gap = abs(points[("gd_over_zero", None)] - 4.8 / 9.8)
    assert gap < 4 * points[("gd_over_zero_se", None)]
    assert points[("mse", None)] == points[("mse_mean", None)]
    ratio = points[("mse", None)] / points[("mse_gd_step", None)]
    assert ratio == pytest.approx(points[("loss_ratio_vs_gd", None)])
    assert details["x_dist"] == "uniform" and details["x_scale"] == 1.0


def test_one_layer_runs_non_causal_variants_and_reports_every_metric():
    points, _ = _run(
        "sinkhorn", mode="one_layer", n_dims=3, n_points=4, steps=5, layer_eval_prompts=100
    )
    for m in ("mse", "mse_gd_step", "mse_zero", "loss_ratio_vs_gd", "cosine_vs_gd"):
        assert (m, None) in points


def test_paired_ratio_standard_error_matches_the_spread_over_repeats():
    """The delta-method standard error against the actual spread of the ratio over 400
    independent repeats (its own relative error is ~1/√(2·400) ≈ 4%, so 20% is safe)."""
    g = torch.Generator().manual_seed(5)
    ratios, ses = [], []
    for _ in range(400):
        b = torch.rand(500, generator=g) * 2
        a = b * 1.1 + 0.3 * torch.randn(500, generator=g)
        r, se = paired_ratio(a, b)
        ratios.append(r)
        ses.append(se)
    spread = torch.tensor(ratios).std().item()
    assert sum(ses) / len(ses) == pytest.approx(spread, rel=0.2)


def test_attention_system_reports_single_values_with_meaningful_baselines(one_thread):
    """No curve over one x value; 3-NN is leave-one-out (in-sample it read each point's own label:
    error far below least squares'), averaging is divided by the sample second moment (dividing
    by 1 on U[−10, 10] inputs, E x² = 33.3, gave errors ~24,000)."""
    points, _ = _run(
        "identity", mode="attention_system", n_dims=10, n_points=100, noise_std=1.0,
        steps=200, system_runs=2,
    )  # fmt: skip
    assert not any(x is not None for (_, x) in points)
    ls = points[("mse_least_squares", None)]
    assert points[("mse", None)] == pytest.approx(ls, rel=1e-3)
    assert points[("mse_knn3", None)] > 10 * ls
    assert ls < points[("mse_averaging", None)] < 100  # the zero predictor's is E(β·x)²/d ≈ 33


def test_input_distribution_defaults_follow_the_mode():
    def inputs(**params):
        return build_task("icl_regression", params).inputs()

    assert inputs(mode="attention_system") == ("uniform", 10.0)
    assert inputs(mode="one_layer") == ("gaussian", 1.0)
    assert inputs(mode="prompt", x_dist="uniform", x_scale=2.0) == ("uniform", 2.0)
    with pytest.raises(ValueError, match="task.x_dist='cauchy' is not valid; use one of auto, "):
        build_task("icl_regression", {"x_dist": "cauchy"})
    with pytest.raises(ValueError, match="task.x_scale must be a finite number >= 0, got -1.0"):
        build_task("icl_regression", {"x_scale": -1.0})


def test_the_old_x_range_is_refused_naming_its_replacement_keys():
    with pytest.raises(ConfigError, match="task.x_range is not a parameter of task") as err:
        check_overrides(["task=icl_regression", "task.x_range=10"], multirun=False)
    assert "x_dist" in str(err.value) and "x_scale" in str(err.value)


def test_the_gd_step_reference_is_scored_at_the_optimal_step(one_thread, monkeypatch):
    """The task's reference line: one GD step at η* on the layer's own test prompts. Computed
    here without the task's theory code: Gaussian inputs, no noise, η* = n/((n + d + 1)·s)
    (theory.md §4), and the clean targets recovered from the n = d examples themselves (they
    determine w exactly). The reported error must be that step's to 1e-5 (the prompts are
    float32): a step 3 % off moves it by about 0.1 % (the excess error grows as
    (η/η* − 1)²·(d·s)²/T; measured 0.16 % on these prompts), far outside."""
    n = d = 5
    seen = {}
    real_gd_step = rb.gd_step

    def recording(xs, ys, queries, step):
        seen.update(xs=xs, ys=ys, queries=queries)
        return real_gd_step(xs, ys, queries, step)

    monkeypatch.setattr(rb, "gd_step", recording)
    points, _ = _run(
        "identity", mode="one_layer", n_dims=d, n_points=n, steps=5, layer_eval_prompts=2000
    )
    xs, ys, queries = (seen[k].double() for k in ("xs", "ys", "queries"))
    w = torch.linalg.solve(xs, ys.unsqueeze(-1)).squeeze(-1)  # noiseless: y_i = w·x_i exactly
    target = (w * queries).sum(-1)
    eta = n / (n + d + 1)  # s = 1
    step = eta * (xs * ys.unsqueeze(-1)).mean(dim=1)
    expected = ((step * queries).sum(-1) - target).square().mean() / d
    assert points[("mse_gd_step", None)] == pytest.approx(float(expected), rel=1e-5)


def test_a_gated_variant_is_an_attention_system_with_gates_from_its_inputs(one_thread):
    """A gated mixer as h: its gates come from the history points through a learned map, as
    W_q and W_k do (an ungated system has no such map), and it trains to a finite ratio."""
    from attnbench.tasks.icl_regression import AttentionSystem

    ctx = JobContext("delta_net", {}, torch.device("cpu"), torch.float32, 0, 1)
    system = AttentionSystem(ctx, 3, 20, torch.Generator().manual_seed(0))
    assert set(system.w_gates) == {"beta"} and system.w_gates["beta"].shape == (1, 3)
    x, y = torch.randn(20, 3), torch.randn(20)
    system(x, y).square().sum().backward()
    assert system.w_gates["beta"].grad.abs().sum() > 0
    softmax = JobContext("softmax", {}, torch.device("cpu"), torch.float32, 0, 1)
    assert len(AttentionSystem(softmax, 3, 20, torch.Generator().manual_seed(0)).w_gates) == 0
    points, _ = _run("delta_net", **{**SYSTEM, "system_runs": 2})
    assert math.isfinite(points[("loss_ratio_vs_ls", None)])


def test_a_line_search_that_overflows_keeps_the_best_point_and_says_so(monkeypatch):
    """L-BFGS's strong-Wolfe search can extrapolate a step past the float range (a last-bit
    change of a gradient decides whether it does): the fit ends at the best point evaluated,
    the curve ends at its loss, and the system says why it stopped."""
    n, d = 30, 5
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    y = x @ torch.randn(d, generator=g, dtype=torch.float64)
    system = AttentionSystem(_float64("identity"), d, n, g)

    def step(self, closure):  # two evaluations, the second worse, then the overflow
        closure()
        with torch.no_grad():
            for t in system.parameters():
                t.add_(1.0)
        closure()
        raise RuntimeError("value cannot be converted to type float without overflow")

    monkeypatch.setattr(torch.optim.LBFGS, "step", step)
    start = [t.detach().clone() for t in system.parameters()]
    curve = system.fit(x, y, steps=10)
    assert curve[-1][1] == min(loss for _, loss in curve[:-1]) == curve[0][1]
    assert all(torch.equal(a, b) for a, b in zip(system.parameters(), start, strict=True))
    assert "overflow" in system.stopped and "best point kept" in system.stopped


@pytest.mark.parametrize(
    "name", [n for n in VARIANTS.names() if VARIANTS.get(n).gates and not VARIANTS.get(n).library]
)
def test_every_gated_variant_gets_gates_of_its_widths_in_an_attention_system(name):
    """Each gate's map gives the width the variant declares: one per head, D per key, and one
    per value (the system's single value channel, y), so that a forward runs and is finite."""
    from attnbench.tasks.icl_regression import AttentionSystem

    ctx = JobContext(name, {}, torch.device("cpu"), torch.float32, 0, 1)
    system = AttentionSystem(ctx, 3, 8, torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.isfinite(system(torch.randn(8, 3), torch.randn(8))).all()


def test_a_fit_plateaued_when_its_last_doubling_gained_under_a_thousandth():
    """The verdict of an L-BFGS fit that reached its cap: the best loss of the first half of
    its evaluations against the best overall (`SYSTEM_PLATEAU` relative)."""
    from attnbench.tasks.icl_regression import SYSTEM_PLATEAU, fit_plateaued

    flat = [(1, 10.0), (2, 1.0005), (3, 1.0003), (4, 1.0002)]
    assert fit_plateaued(flat)  # best by evaluation 2 of 4: 1.0005, then 1.0002: 3e-4 < 1e-3
    falling = [(1, 10.0), (2, 2.0), (3, 1.5), (4, 1.0)]
    assert not fit_plateaued(falling)  # 2.0 → 1.0 over evaluations 3–4
    edge = 1.0 + 2 * SYSTEM_PLATEAU
    assert not fit_plateaued([(1, 5.0), (2, edge), (3, 1.2), (4, 1.0)])
    assert not fit_plateaued([(1, 1.0)])  # one evaluation: too short to tell


def test_plateau_noise_is_two_errors_of_a_difference_with_a_relative_floor():
    from attnbench.tasks.icl_regression import PLATEAU_RTOL, plateau_noise

    assert plateau_noise(1.0, 0.1) == pytest.approx(2 * math.sqrt(2) * 0.1)
    assert plateau_noise(2.0, 1e-6) == pytest.approx(2 * PLATEAU_RTOL)


def test_one_layer_stops_where_its_ratio_plateaus_and_marks_a_ratio_still_falling(one_thread):
    """The learning curve (ratio to the GD step against prompts seen) is recorded; 1200 steps at
    d = n = 5, uniform inputs: the ratio drops from ~2.1 to ~1.00 by step ~420 and is flat after
    (measured 1.0038 → 1.0085 between steps 424 and 600), so the run stops before its cap,
    converged. At d = n = 10, Gaussian inputs and a 160-step cap the ratio is still in its
    descent (1.29 → 1.17 over the last doubling, measured), so the run is still learning and its
    values enter no rank."""
    params = dict(mode="one_layer", n_dims=5, n_points=5, x_dist="uniform")
    points, _ = _run("identity", steps=1200, layer_eval_prompts=2000, **params)
    curve = sorted((x, v) for (m, x), v in points.items() if m == "learning_curve")
    assert len(curve) >= 8 and curve[0][1] > 1.8
    assert points[("converged", None)] == 1.0
    assert curve[-1][0] == points[("examples_seen", None)] < 1200 * 256  # 256 prompts a step
    assert points[("loss_ratio_vs_gd", None)] < 1.03
    still, _ = _run(
        "identity", mode="one_layer", n_dims=10, n_points=10, x_dist="gaussian", steps=160,
        layer_eval_prompts=200, layer_lr=0.01,
    )  # fmt: skip
    assert still[("converged", None)] == 0.0


def test_an_attention_system_fit_cut_off_by_its_cap_is_still_learning(one_thread):
    """Three L-BFGS iterations leave the softmax system far above its optimum (ratio ~470 to
    least squares, measured; ~45 at 1000), so its values are marked still learning; the
    identity system stops on L-BFGS's tolerance well inside 200 iterations: converged."""
    cut, _ = _run("softmax", **{**SYSTEM, "steps": 3, "system_runs": 1})
    assert cut[("converged", None)] == 0.0
    done, _ = _run("identity", **{**SYSTEM, "steps": 200, "system_runs": 2})
    assert done[("converged", None)] == 1.0
