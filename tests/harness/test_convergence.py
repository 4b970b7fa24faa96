"""The convergence rule of trained results (`attnbench.toolkit.convergence`) and the training
loop that applies it (`attnbench.toolkit.training.train`)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from attnbench.toolkit.convergence import (
    PLATEAUED,
    SOLVED,
    STILL_LEARNING,
    Convergence,
    CurvePoint,
    StopRule,
    binomial_noise,
    evaluation_steps,
)
from attnbench.toolkit.training import (
    CONVERGED,
    EXAMPLES_SEEN,
    LEARNING_CURVE,
    MS_PER_STEP,
    TrainConfig,
    train,
)


def test_evaluation_steps_are_two_per_doubling_and_hold_every_half():
    steps = evaluation_steps(1024)
    assert steps[-1] == 1024 and steps[0] >= 8
    assert all(b > a for a, b in zip(steps, steps[1:], strict=False))
    ratios = [b / a for a, b in zip(steps, steps[1:], strict=False)]
    assert all(abs(r - math.sqrt(2)) < 0.1 for r in ratios)
    # the plateau rule compares each point with the one at half its steps
    assert all(s // 2 in steps for s in steps if s >= 16)
    assert evaluation_steps(5) == [5]  # below the first point: the cap alone


def test_binomial_noise_is_two_standard_errors_of_a_difference():
    assert binomial_noise(0.5, 400) == pytest.approx(2 * math.sqrt(2 * 0.25 / 400))
    # at 0 or 1 the noise of one target in n, not zero
    assert binomial_noise(1.0, 400) == pytest.approx(2 * math.sqrt(2 / 400**2))
    with pytest.raises(ValueError):
        binomial_noise(0.5, 0)


def _run(values: list[float], cap: int = 64, noise: float = 0.01, **rule) -> Convergence:
    """Feed ``values`` at `evaluation_steps(cap)` until the rule stops."""
    conv = Convergence(StopRule(**rule), cap)
    for step, value in zip(evaluation_steps(cap), values, strict=False):
        if conv.observe(CurvePoint(step, step, value, noise)):
            break
    return conv


def test_solved_stops_at_the_ceiling_within_noise():
    conv = _run([0.3, 0.6, 0.995, 1.0, 1.0])
    assert conv.reason == SOLVED and conv.converged is True
    assert len(conv.points) == 3  # stopped at the first point within noise of the ceiling


def test_a_flat_curve_at_chance_is_not_stopped_early_but_converged_at_the_cap():
    """Recall sits at chance before it learns: no early plateau stop there; at the cap a flat
    curve is converged (at chance), which is a finding, not a failure to measure."""
    steps = evaluation_steps(64)
    conv = _run([0.01] * len(steps), chance=0.01)
    assert len(conv.points) == len(steps)
    assert conv.reason == PLATEAUED and conv.converged is True


def test_a_plateau_above_chance_stops_after_the_minimum_fraction():
    steps = evaluation_steps(64)  # [11, 22, 45] and [8, 16, 32, 64]
    conv = _run([0.2, 0.5, 0.7, 0.7, 0.7, 0.7, 0.7], chance=0.01)
    assert conv.reason == PLATEAUED
    assert conv.points[-1].step == 32 and conv.points[-1].step >= 0.5 * 64
    assert len(conv.points) < len(steps)


def test_still_improving_at_the_cap_is_still_learning():
    steps = evaluation_steps(64)
    values = [0.1 * i for i in range(1, len(steps) + 1)]  # gains 0.2 per doubling
    conv = _run(values)
    assert conv.reason == STILL_LEARNING and conv.converged is False


def test_a_gain_within_noise_is_a_plateau_and_one_beyond_it_is_not():
    cap, steps = 64, evaluation_steps(64)
    flat = [0.5] * (len(steps) - 1)
    assert _run([*flat, 0.5 + 0.009], cap, noise=0.01).reason == PLATEAUED
    assert _run([*flat[:-2], 0.5, 0.5, 0.5 + 0.011], cap, noise=0.01, min_fraction=1.0).reason == (
        STILL_LEARNING
    )


def test_lower_is_better_metrics_use_their_direction():
    conv = _run([1.0, 0.5, 0.2, 0.05, 0.004], ceiling=0.0, higher_is_better=False)
    assert conv.reason == SOLVED


class _Target(nn.Module):
    """A scalar to fit: the loss is (w − 1)², the evaluation 1 − |w − 1| (solved at w = 1)."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(()))


def test_train_stops_when_solved_and_records_the_curve_and_verdict():
    torch.manual_seed(0)
    model = _Target()
    seen: list[bool] = []

    def evaluate():
        seen.append(torch.is_grad_enabled() or model.training)
        return 1 - abs(float(model.w) - 1), 0.01

    cfg = TrainConfig(steps=2000, batch_size=4, lr=0.05, weight_decay=0.0, grad_clip=0)
    out = train(model, lambda step: (model.w - 1) ** 2, cfg, evaluate=evaluate)
    assert out.convergence.reason == SOLVED and out.steps < cfg.steps
    assert out.examples == out.steps * cfg.batch_size
    assert not any(seen)  # evaluated in eval mode, without gradients
    assert out.ms_per_step > 0
    points = {(p.metric, p.x_value): p.value for p in out.points()}
    assert points[(CONVERGED, None)] == 1.0 and points[(EXAMPLES_SEEN, None)] == out.examples
    curve = sorted((x, v) for (m, x), v in points.items() if m == LEARNING_CURVE)
    assert [x for x, _ in curve] == [s * 4 for s in evaluation_steps(2000) if s <= out.steps]
    assert curve[-1][1] >= 0.99
    assert (MS_PER_STEP, None) in points
    assert out.details()["stopped"] == SOLVED


def test_train_at_a_cap_too_small_marks_the_run_still_learning():
    model = _Target()
    cfg = TrainConfig(steps=64, batch_size=1, lr=1e-3, weight_decay=0.0, grad_clip=0, warmup=0)
    out = train(
        model,
        lambda step: (model.w - 1) ** 2,
        cfg,
        evaluate=lambda: (1 - abs(float(model.w) - 1), 1e-4),
    )
    assert out.steps == 64 and out.convergence.converged is False
    assert {p.metric: p.value for p in out.points()}[CONVERGED] == 0.0


def test_train_without_an_evaluation_keeps_no_verdict():
    model = _Target()
    out = train(model, lambda step: (model.w - 1) ** 2, TrainConfig(steps=5, batch_size=1))
    assert out.convergence is None and out.steps == 5
    assert {p.metric for p in out.points()} == {MS_PER_STEP}
