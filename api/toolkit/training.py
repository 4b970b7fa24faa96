"""The training loop the quality tasks share: AdamW, warm-up + cosine schedule, seeded, with a
progress bar and the loss curve kept for the record."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from attnbench.task import NonFiniteError
from attnbench.toolkit.progress import progress


@dataclass
class TrainConfig:
    """Optimisation settings.

    Attributes:
        steps: Optimiser steps.
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


def train(
    model: nn.Module,
    loss_on_batch: Callable[[int], torch.Tensor],
    cfg: TrainConfig,
    *,
    desc: str = "train",
) -> list[tuple[int, float]]:
    """Train ``model`` for ``cfg.steps`` steps; ``loss_on_batch(step)`` draws a batch and returns
    its loss. Returns the loss curve as (step, loss) pairs (each the mean over its stretch).

    Raises:
        NonFiniteError: the loss became NaN or infinite.
    """
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, cfg))
    every = max(1, cfg.steps // max(1, cfg.curve_points))
    curve: list[tuple[int, float]] = []
    running, count = 0.0, 0
    model.train()
    # disable=None: a progress bar on a terminal, silence in logs and CI
    bar = progress(range(cfg.steps), desc=desc, leave=False, mininterval=1.0, disable=None)
    for step in bar:
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
        count += 1
        if (step + 1) % every == 0 or step + 1 == cfg.steps:
            curve.append((step + 1, running / count))
            bar.set_postfix(loss=f"{running / count:.4f}")
            running, count = 0.0, 0
    model.eval()
    return curve


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
) -> list[tuple[int, float]]:
    """Train a token model on a fixed dataset with cross-entropy at scored positions.

    Args:
        model: Maps (B, N) tokens to (B, N, vocab) logits.
        inputs, targets: (S, N) long tensors; targets are −100 where not scored.
        cfg: Optimisation settings (``batch_size`` sequences per step, reshuffled each epoch).
        device: Where to train.
        seed: Seeds the order of the examples.
        desc: Progress-bar label.

    Returns:
        The loss curve.
    """
    gen = torch.Generator().manual_seed(seed)
    n = inputs.shape[0]
    order = torch.randperm(n, generator=gen)

    def loss_on_batch(step: int) -> torch.Tensor:
        nonlocal order
        start = (step * cfg.batch_size) % n
        if start < cfg.batch_size and step > 0:
            order = torch.randperm(n, generator=gen)
        idx = order[start : start + cfg.batch_size]
        logits = model(inputs[idx].to(device))
        return nn.functional.cross_entropy(
            logits.flatten(0, 1).float(),
            targets[idx].to(device).flatten(),
            ignore_index=IGNORE_INDEX,
        )

    return train(model, loss_on_batch, cfg, desc=desc)
