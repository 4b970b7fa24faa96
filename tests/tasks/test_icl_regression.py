from __future__ import annotations

import pytest
import torch

from attnbench.harness.task_api import JobContext, build_task
from attnbench.tasks.icl_regression import IclRegression, bootstrap_band

# theory.md §3: n = 100, d = 10, X ~ U[−10, 10], noise N(0, 1), β ~ N(0, I), 1000 steps, 10 runs
SYSTEM = dict(
    mode="attention_system", n_dims=10, n_points=100, noise_std=1.0, steps=1000, system_runs=10
)


def _run(variant, **params):
    ctx = JobContext(variant, {}, torch.device("cpu"), torch.float32, 0, 2)
    result = build_task("icl_regression", params).run(ctx)
    return {(p.metric, p.x_value): p.value for p in result.points}, result.details


def test_identity_attention_system_converges_to_least_squares():
    points, details = _run("identity", **SYSTEM)
    assert details["linear_in_x"]
    assert len(details["error_rates"]) == 10
    assert max(details["error_rates"]) < 1e-3  # every seed
    assert points[("error_rate_vs_ls", None)] == max(details["error_rates"])
    assert points[("loss_ratio_vs_ls", None)] == pytest.approx(1.0, abs=1e-3)


def test_softmax_attention_system_does_not():
    points, details = _run("softmax", **SYSTEM)
    assert not details["linear_in_x"]
    assert ("error_rate_vs_ls", None) not in points  # not linear in x: no β_eq to compare
    assert points[("loss_ratio_vs_ls", None)] > 10  # 1–2 orders above least squares at n = 100


def test_prompt_tokens_interleave_inputs_and_padded_outputs():
    xs = torch.arange(12.0).view(1, 3, 4)
    ys = torch.tensor([[10.0, 20.0, 30.0]])
    tokens = IclRegression.interleave(xs, ys)
    assert tokens.shape == (1, 6, 4)
    torch.testing.assert_close(tokens[0, 0::2], xs[0])
    torch.testing.assert_close(
        tokens[0, 1::2], torch.tensor([[10.0, 0, 0, 0], [20.0, 0, 0, 0], [30.0, 0, 0, 0]])
    )


def test_prompt_mode_reports_curves_bands_and_baselines():
    points, details = _run(
        "softmax", n_dims=3, n_points=6, steps=20, eval_prompts=300, d_model=16, n_layers=1
    )
    for i in range(6):
        lo, mid, hi = (points[(m, i)] for m in ("mse_q05", "mse", "mse_q95"))
        assert lo <= mid <= hi
        for b in ("least_squares", "ridge", "averaging", "knn3"):
            assert (f"mse_{b}", i) in points
    assert points[("mse_least_squares", 5)] < 1e-6  # n = 5 ≥ d = 3: exact, noiseless
    assert len(details["loss_curve"]) > 0


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
