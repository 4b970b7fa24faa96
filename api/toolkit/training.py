"""The training loop the quality tasks share: AdamW, warm-up + cosine schedule, seeded, with a
progress bar, the loss curve, and, where the task gives an evaluation, the learning curve of its
validation metric with early stopping and a convergence verdict (`attnbench.toolkit.convergence`).

``steps`` is the cap: the schedule runs over it, and a run stops before it only when solved or
plateaued. The time per optimiser step (the evaluations not counted) is kept, so that a record
says what its training cost."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from attnbench.metrics import Metric, MetricPoint
from attnbench.task import NonFiniteError
from attnbench.toolkit.convergence import (
    Convergence,
    CurvePoint,
    StopRule,
    binomial_noise,
    evaluation_steps,
)
from attnbench.toolkit.progress import progress


@dataclass
class TrainConfig:
    """Optimisation settings.

    Attributes:
        steps: Optimiser steps at most (the cap; the schedule runs over them).
        batch_size: Examples per step.
        lr: Peak learning rate (AdamW).
        weight_decay: AdamW weight decay.
        warmup: Fraction of steps of linear warm-up before the cosine decay.
        grad_clip: Global gradient-norm clip (0 = none).
        curve_points: How many points of the loss curve to keep.
    """

    steps: int = 500
    batch_size: int = 64
    lr: float = 3e-3
    weight_decay: float = 0.01
    warmup: float = 0.05
    grad_clip: float = 1.0
    curve_points: int = 50


def lr_factor(step: int, cfg: TrainConfig) -> float:
    """Multiplier of the peak learning rate at ``step``: linear warm-up, then cosine to 0."""
    warm = max(1, int(cfg.warmup * cfg.steps))
    if step < warm:
        return (step + 1) / warm
    progress = (step - warm) / max(1, cfg.steps - warm)
    return 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


Evaluate = Callable[[], tuple[float, float]]  # () → (validation value, its noise)

LEARNING_CURVE = "learning_curve"  # metric: the validation metric against examples seen
EXAMPLES_SEEN = "examples_seen"  # its curve axis; also the metric: examples seen when stopped
CONVERGED = "converged"  # metric: 1 solved or plateaued, 0 still learning at the cap
MS_PER_STEP = "train_ms_per_step"  # metric: wall time per optimiser step

LEARNING_CURVE_METRICS = (
    Metric(
        LEARNING_CURVE,
        True,
        "Validation accuracy against the training examples seen (log-spaced points; the curve "
        "stops where solved or plateaued)",
        label="validation accuracy while training",
    ),
    Metric(
        CONVERGED,
        None,
        "1: the validation accuracy was solved or plateaued (its last doubling of training "
        "gained less than its noise); 0: still learning at the cap, so not ranked",
        label="converged",
    ),
    Metric(EXAMPLES_SEEN, None, "Training examples seen when training stopped", label="examples"),
    Metric(
        MS_PER_STEP,
        None,
        "Mean wall time of an optimiser step in this job, evaluations not counted (depends on "
        "the machine and its load: a cost figure, not a contest)",
        "ms",
        label="time per training step",
    ),
)
EXAMPLES_AXIS = Metric(EXAMPLES_SEEN, None, "Training examples seen", label="examples seen")
# the parameters every trained task names alike: the tuned optimiser settings and the model's
# and training set's sizes (a task declares them in its ``axes``, beside its own)
TUNED_AXES = (
    Metric("lr", None, "Peak AdamW learning rate (tuned per variant)", label="learning rate"),
    Metric("weight_decay", None, "AdamW weight decay (tuned per variant)", label="weight decay"),
)
WIDTH_AXIS = Metric("d_model", None, "Model width", label="model width")
SEQUENCE_AXES = (
    Metric("seq_len", None, "Sequence length", "tokens", label="sequence length"),
    Metric("vocab_size", None, "Tokens of the vocabulary", label="vocabulary size"),
    Metric("train_size", None, "Fixed training sequences", label="training sequences"),
)


@dataclass
class TrainOutcome:
    """What a training run leaves besides the model.

    Attributes:
        curve: The loss curve, (step, mean loss over the stretch) pairs.
        steps: Optimiser steps run (the cap, or fewer where stopped early).
        examples: Training examples seen (steps × batch size).
        ms_per_step: Mean wall time of an optimiser step, evaluations not counted.
        convergence: The learning curve and its verdict; None where no evaluation was given.
    """

    curve: list[tuple[int, float]]
    steps: int
    examples: int
    ms_per_step: float
    convergence: Convergence | None = None

    def points(self) -> list[MetricPoint]:
        """The metric points every training task records: the learning curve (against examples
        seen), the convergence flag and the examples seen (where evaluated), the step time."""
        out = [MetricPoint(MS_PER_STEP, self.ms_per_step)]
        if self.convergence is not None and self.convergence.points:
            out += [
                MetricPoint(LEARNING_CURVE, p.value, EXAMPLES_SEEN, p.examples)
                for p in self.convergence.points
            ]
            out.append(MetricPoint(CONVERGED, float(bool(self.convergence.converged))))
            out.append(MetricPoint(EXAMPLES_SEEN, self.examples))
        return out

    def details(self) -> dict[str, Any]:
        """The record's details: the loss curve, and why training stopped."""
        out: dict[str, Any] = {"loss_curve": self.curve, "steps_run": self.steps}
        if self.convergence is not None:
            out["stopped"] = self.convergence.reason
        return out


def train(
    model: nn.Module,
    loss_on_batch: Callable[[int], torch.Tensor],
    cfg: TrainConfig,
    *,
    desc: str = "train",
    evaluate: Evaluate | None = None,
    rule: StopRule | None = None,
) -> TrainOutcome:
    """Train ``model`` for at most ``cfg.steps`` steps; ``loss_on_batch(step)`` draws a batch
    and returns its loss.

    With ``evaluate`` (the validation metric and its noise, called in eval mode without
    gradients) the metric is measured at `evaluation_steps` of the cap and training stops when
    ``rule`` (default: an accuracy, ceiling 1) says solved or plateaued.

    Raises:
        NonFiniteError: the loss became NaN or infinite.
    """
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, cfg))
    every = max(1, cfg.steps // max(1, cfg.curve_points))
    checks = set(evaluation_steps(cfg.steps)) if evaluate is not None else set()
    convergence = Convergence(rule or StopRule(), cfg.steps) if evaluate is not None else None
    curve: list[tuple[int, float]] = []
    running, count, spent, done = 0.0, 0, 0.0, 0
    model.train()
    # disable=None: a progress bar on a terminal, silence in logs and CI
    bar = progress(range(cfg.steps), desc=desc, leave=False, mininterval=1.0, disable=None)
    for step in bar:
        start = time.perf_counter()
        loss = loss_on_batch(step)
        if not torch.isfinite(loss):
            raise NonFiniteError(f"training loss became {loss.item()} at step {step}")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.grad_clip > 0:
            nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        sched.step()
        running += loss.item()
        spent += time.perf_counter() - start
        count += 1
        done = step + 1
        if done % every == 0 or done == cfg.steps:
            curve.append((done, running / count))
            bar.set_postfix(loss=f"{running / count:.4f}")
            running, count = 0.0, 0
        if done in checks and _evaluate(model, evaluate, convergence, done, cfg.batch_size):
            break
    if count:
        curve.append((done, running / count))
    bar.close()
    model.eval()
    return TrainOutcome(
        curve, done, done * cfg.batch_size, 1000.0 * spent / max(1, done), convergence
    )


def _evaluate(model, evaluate, convergence, step: int, batch_size: int) -> bool:
    """Measure the validation metric after ``step`` steps; whether training should stop."""
    model.eval()
    with torch.no_grad():
        value, noise = evaluate()
    model.train()
    return convergence.observe(CurvePoint(step, step * batch_size, float(value), float(noise)))


def accuracy_with_noise(right: torch.Tensor) -> tuple[float, float]:
    """(accuracy, its noise) of the booleans ``right`` (one per scored target): what a token
    task's ``evaluate`` returns (`binomial_noise` over ``right.numel()`` targets)."""
    accuracy = float(right.float().mean())
    return accuracy, binomial_noise(accuracy, right.numel())


IGNORE_INDEX = -100  # target value of positions that are not scored


def fit_token_model(
    model: nn.Module,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    cfg: TrainConfig,
    *,
    device: torch.device,
    seed: int,
    desc: str = "train",
    evaluate: Evaluate | None = None,
    rule: StopRule | None = None,
) -> TrainOutcome:
    """Train a token model on a fixed dataset with cross-entropy at scored positions.

    Args:
        model: Maps (B, N) tokens to (B, N, vocab) logits.
        inputs, targets: (S, N) long tensors; targets are −100 where not scored.
        cfg: Optimisation settings: ``batch_size`` sequences per step, from an order reshuffled
            each epoch whose last partial batch is dropped (as a DataLoader's ``drop_last``), so
            that every step sees exactly ``batch_size`` sequences and ``examples_seen`` is exact.
        device: Where to train.
        seed: Seeds the order of the examples.
        desc: Progress-bar label.
        evaluate, rule: The validation metric and the stop rule (`train`).

    Returns:
        The loss curve, the step time and the learning curve with its verdict.

    Raises:
        ValueError: fewer sequences than one batch (a task's `check` refuses that first).
    """
    gen = torch.Generator().manual_seed(seed)
    n = inputs.shape[0]
    per_epoch = n // cfg.batch_size
    if per_epoch < 1:
        raise ValueError(f"a batch of {cfg.batch_size} needs at least as many sequences; got {n}.")
    order = torch.randperm(n, generator=gen)

    def loss_on_batch(step: int) -> torch.Tensor:
        nonlocal order
        if step % per_epoch == 0 and step > 0:
            order = torch.randperm(n, generator=gen)
        start = (step % per_epoch) * cfg.batch_size
        idx = order[start : start + cfg.batch_size]
        logits = model(inputs[idx].to(device))
        return nn.functional.cross_entropy(
            logits.flatten(0, 1).float(),
            targets[idx].to(device).flatten(),
            ignore_index=IGNORE_INDEX,
        )

    return train(model, loss_on_batch, cfg, desc=desc, evaluate=evaluate, rule=rule)
