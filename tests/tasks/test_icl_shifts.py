"""Garg et al.'s distribution shifts (`icl_shifts`) and the curriculum (`icl_curriculum`): each
shift draws what it says, least squares and the model are scored on the same prompts at the same
positions, and the curriculum grows as Garg's does."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from attnbench.harness.cli.app import CONF_DIR
from attnbench.task import JobContext, build_task
from attnbench.tasks.icl_regression import baselines as rb
from attnbench.tasks.icl_regression import shifts as icl_shifts
from attnbench.tasks.icl_regression.curriculum import Curriculum

D, N = 6, 10


def _shift(name: str, size: int = 4000, seed: int = 0) -> icl_shifts.ShiftedPrompts:
    return icl_shifts.sample_shift(name, size, N, D, torch.Generator().manual_seed(seed))


def _covariance(x: torch.Tensor) -> torch.Tensor:
    flat = x.reshape(-1, x.shape[-1]).double()
    return flat.T @ flat / len(flat)


def test_skewed_inputs_have_eigenvalues_one_over_k_squared_and_trace_d():
    """x = z·T, T = U·diag(1/k)·Uᵀ·c: cov = c²·U·diag(1/k²)·Uᵀ with trace d. 40 000 inputs: the
    sample covariance's entries are within a few 1/√40000 = 0.5% relative of the truth."""
    x = _shift("skewed").examples
    eig = torch.linalg.eigvalsh(_covariance(x)).flip(0)
    expected = 1 / torch.arange(1, D + 1, dtype=torch.float64) ** 2
    expected *= D / expected.sum()
    assert torch.allclose(eig, expected, rtol=0.05, atol=0.01)
    assert float(eig.sum()) == pytest.approx(D, rel=0.02)


def test_half_subspace_inputs_span_half_the_dimensions_with_trace_d():
    x = _shift("half_subspace").examples
    eig = torch.linalg.eigvalsh(_covariance(x)).flip(0)
    assert torch.all(eig[D // 2 :] < 1e-8)  # exactly rank d/2
    assert torch.allclose(eig[: D // 2], torch.full((D // 2,), 2.0, dtype=torch.float64), rtol=0.05)


@pytest.mark.parametrize("key", list(icl_shifts.SCALES))
def test_scaled_inputs_and_weights(key):
    """Std of x·s is s; labels w·x with w·s have variance s²·d (40 000 of each: 1% relative)."""
    s = icl_shifts.SCALES[key]
    x = _shift(f"x_scale_{key}")
    assert float(x.examples.std()) == pytest.approx(s, rel=0.02)
    y = _shift(f"y_scale_{key}")
    assert float(y.examples.std()) == pytest.approx(1.0, rel=0.02)
    assert float(y.labels.var()) == pytest.approx(s * s * D, rel=0.05)
    assert torch.equal(y.labels, y.targets)  # noiseless: the target is the label


def test_noisy_labels_are_renormalised_and_scored_against_the_clean_target():
    """Labels (w·x + ε)·c with c = √(d/(d + 1)): variance d like training; label − target = c·ε."""
    p = _shift("noisy")
    assert float(p.labels.var()) == pytest.approx(D, rel=0.03)
    c2 = D / (D + 1)
    assert float((p.labels - p.targets).var()) == pytest.approx(c2, rel=0.03)
    assert float(p.targets.var()) == pytest.approx(c2 * D, rel=0.03)


def test_one_orthant_examples_share_one_sign_pattern_and_the_query_does_not():
    p = _shift("one_orthant")
    signs = p.examples.sign()
    assert torch.all(signs == signs[:, :1])  # every example of a prompt in one orthant
    assert not torch.all(p.queries.sign() == signs)  # the queries are unconstrained
    assert float((p.queries.sign() == signs).double().mean()) == pytest.approx(0.5, abs=0.01)


def test_orthogonal_queries_are_orthogonal_to_the_examples_before_them_with_their_norm():
    p = _shift("orthogonal_query", size=500)
    assert p.positions == list(range(min(N, D)))
    for i in p.positions:
        q = p.queries[:, i].double()
        before = p.examples[:, :i].double()
        if i:  # float32 inputs of norm ~√d: a dot product of 1e-4 is orthogonal to 1e-5
            assert float((before @ q.unsqueeze(-1)).abs().max()) < 1e-4
        assert torch.allclose(q.norm(dim=-1), p.examples[:, i].double().norm(dim=-1), rtol=1e-5)


def test_repeated_queries_are_earlier_examples():
    p = _shift("repeated_query", size=500)
    assert p.positions == list(range(1, N))
    for i in p.positions:
        gap = (p.examples[:, :i] - p.queries[:, i : i + 1]).abs().sum(-1).min(dim=1).values
        assert torch.all(gap == 0)


def test_least_squares_under_the_shifts_where_its_answer_is_known():
    """Noiseless least squares: exact from d/2 examples in a d/2-dimensional subspace; exact on a
    repeated example (it interpolates); 0 for a query orthogonal to its examples (the min-norm
    weights lie in their span), so its error is the target's square / d."""
    half = _shift("half_subspace", size=300)
    err = icl_shifts.least_squares_errors(half)
    assert err[:, D // 2 :].max() < 1e-8
    assert err[:, D // 2 - 1].mean() > 0.1  # one example short of the subspace: not exact
    repeated = _shift("repeated_query", size=300)
    assert icl_shifts.least_squares_errors(repeated).max() < 1e-8
    orthogonal = _shift("orthogonal_query", size=300)
    expected = orthogonal.targets[:, orthogonal.positions].double().square() / D
    assert torch.allclose(icl_shifts.least_squares_errors(orthogonal), expected, atol=1e-8)


def _least_squares_model(xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
    """A causal 'model' that predicts position k by least squares on the k pairs before it."""
    return torch.stack(
        [rb.least_squares(xs[:, :k], ys[:, :k], xs[:, k]) for k in range(xs.shape[1])], dim=1
    )


@pytest.mark.parametrize(
    "name", ["skewed", "noisy", "one_orthant", "orthogonal_query", "repeated_query"]
)
def test_a_model_that_is_least_squares_scores_as_least_squares(name):
    """`model_errors` runs the model on the prefix that ends at each query: a model computing
    least squares must match `least_squares_errors` at every scored position."""
    p = _shift(name, size=200)
    assert torch.allclose(
        icl_shifts.model_errors(_least_squares_model, p),
        icl_shifts.least_squares_errors(p),
        atol=1e-6,
    )


def test_a_model_that_reads_the_query_label_is_caught():
    """The query's label is never shown: a 'model' that reads the label at its own position
    scores 0 only if that label were the target; `model_errors` gives it a zero label."""

    def cheat(xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
        return ys

    p = _shift("repeated_query", size=200)
    assert icl_shifts.model_errors(cheat, p).mean() > 0.5


def test_curriculum_grows_as_gargs():
    """Garg's: d 5→20 by 1 and points 11→41 by 2 every 2000 steps."""
    c = Curriculum(5, 20, 11, 41, interval=2000)
    assert c.at(0) == (5, 11)
    assert c.at(1999) == (5, 11)
    assert c.at(2000) == (6, 13)
    assert c.at(2000 * 15) == (20, 41)
    assert c.at(10**6) == (20, 41)
    assert c.full_from() == 30000  # the points need 15 increments, the dims 15


def _ctx(seed: int = 0) -> JobContext:
    return JobContext("softmax", {}, torch.device("cpu"), torch.float32, seed, 1)


def test_curriculum_prompts_zero_the_coordinates_beyond_the_current_dimension():
    task = build_task("icl_regression", {"mode": "prompt", "n_dims": 5, "n_points": 7})
    xs, w, clean, observed = task.sample_prompts(16, torch.Generator().manual_seed(0), 3, 2)
    assert xs.shape == (16, 3, 5)
    assert torch.all(xs[..., 2:] == 0) and torch.all(xs[..., :2] != 0)
    assert torch.allclose(clean, (xs[..., :2] * w[:, None, :2]).sum(-1))


@pytest.mark.parametrize(
    ("params", "fragment"),
    [
        ({"curriculum_dims": 9}, "task.curriculum_dims=9"),
        ({"curriculum_points": -1}, "task.curriculum_points=-1"),
        ({"curriculum_points": 2, "curriculum_interval": 0}, "curriculum_interval"),
        ({"shifts": "skewed+nope"}, "'nope'"),
    ],
)
def test_bad_curriculum_or_shift_is_one_sentence(params, fragment):
    with pytest.raises(ValueError, match="task.") as err:
        build_task("icl_regression", {"mode": "prompt", "n_dims": 5, "n_points": 8, **params})
    assert fragment in str(err.value)


def test_prompt_mode_scores_the_shifts_with_least_squares_on_the_same_prompts():
    params = dict(
        mode="prompt", n_dims=3, n_points=6, n_layers=1, d_model=16, n_heads=1, steps=3,
        batch_size=8, eval_prompts=64, val_prompts=16, bootstrap=10,
        curriculum_dims=1, curriculum_points=2, curriculum_interval=1,
        shifts="skewed+orthogonal_query",
    )  # fmt: skip
    result = build_task("icl_regression", params).measure(_ctx())
    got = {(p.metric, p.x_value) for p in result.points}
    for i in range(6):
        assert ("mse_skewed", i) in got and ("mse_skewed_least_squares", i) in got
    assert {x for m, x in got if m == "mse_orthogonal_query"} == {0, 1, 2}  # positions < d
    assert not any(m.startswith("mse_noisy") for m, _ in got)  # not asked for
    assert result.details["curriculum_full_from_step"] == 2  # dims 1→3 by 1, points 2→6 by 2
    assert math.isfinite(next(p.value for p in result.points if p.metric == "mse_skewed"))
    values = {(p.metric, p.x_value): p.value for p in result.points}
    assert all(("mse_zero", i) in values for i in range(6))  # the scale the curve falls from
    # with no example every baseline predicts 0: least squares' first point is the zero predictor's
    assert values[("mse_least_squares", 0)] == pytest.approx(values[("mse_zero", 0)], rel=1e-6)
    assert values[("mse_zero", 5)] > 2 * values[("mse_least_squares", 5)]  # n ≥ d: LS is exact


def test_the_paper_presets_curriculum_runs_its_first_steps_on_cpu():
    """`sweep=paper`'s prompt grid (a GPU preset: 500k steps of a 12-layer model) as its file
    says, trained for 2 steps on the CPU: the curriculum starts at Garg's (5 dims, 11 examples)
    and the model it builds trains and is scored on the full 20 × 41 problem."""
    grids = OmegaConf.load(Path(CONF_DIR) / "sweep" / "paper.yaml").hydra.sweeper.grids
    (grid,) = [g for g in grids if g.get("task") == "icl_regression" and g["task.mode"] == "prompt"]
    params = {k.removeprefix("task."): v for k, v in grid.items() if k.startswith("task.")}
    task = build_task("icl_regression", params)
    assert task.curriculum().at(0) == (5, 11) and task.curriculum().at(30000) == (20, 41)
    assert task.params.steps == 500000 and task.shift_names() == list(icl_shifts.SHIFTS)
    params.update(steps=2, eval_prompts=64, val_prompts=64, bootstrap=10, shifts="skewed")
    result = build_task("icl_regression", params).measure(_ctx())
    points = {(p.metric, p.x_value): p.value for p in result.points}
    assert all(math.isfinite(v) for v in points.values())
    assert ("mse", 40) in points and ("mse_skewed", 40) in points


def test_sparse_weights_have_exactly_k_non_zero_coordinates_among_the_active_ones():
    """Garg's sparse linear regression: k of the d weights non-zero, chosen per prompt."""
    task = build_task(
        "icl_regression", {"mode": "prompt", "n_dims": 8, "n_points": 5, "w_sparsity": 3}
    )
    _, w, _, _ = task.sample_prompts(2000, torch.Generator().manual_seed(0))
    assert torch.all((w != 0).sum(1) == 3)
    share = (w != 0).double().mean(0)  # each coordinate kept with probability 3/8 (se 0.011)
    assert torch.allclose(share, torch.full((8,), 3 / 8, dtype=torch.float64), atol=0.05)
    _, w, _, _ = task.sample_prompts(200, torch.Generator().manual_seed(0), dims=4)
    assert torch.all(w[:, 4:] == 0) and torch.all((w != 0).sum(1) == 3)  # curriculum: active dims
    with pytest.raises(ValueError, match="task.w_sparsity=9"):
        build_task("icl_regression", {"mode": "prompt", "n_dims": 8, "w_sparsity": 9})


def test_sparse_prompts_get_the_lasso_baseline_and_dense_ones_do_not():
    params = dict(
        mode="prompt", n_dims=4, n_points=5, n_layers=1, d_model=16, n_heads=1, steps=2,
        batch_size=8, eval_prompts=32, val_prompts=16, bootstrap=10,
    )  # fmt: skip
    sparse = build_task("icl_regression", {**params, "w_sparsity": 1}).measure(_ctx()).points
    assert {p.x_value for p in sparse if p.metric == "mse_lasso"} == set(range(5))
    dense = build_task("icl_regression", params).measure(_ctx()).points
    assert not any(p.metric == "mse_lasso" for p in dense)


def test_a_negative_curriculum_start_is_named_not_w_sparsity():
    """curriculum_dims=-1 is refused in a sentence that names curriculum_dims (it used to reach
    the w_sparsity check first, whose bound it sets, and name w_sparsity)."""
    with pytest.raises(ValueError, match=r"task.curriculum_dims=-1 is not valid"):
        build_task("icl_regression", {"mode": "prompt", "n_dims": 8, "curriculum_dims": -1})
