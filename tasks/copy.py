"""Selective copying as MAD generates it (Poli et al. 2024, mad-lab's selective copying).

A context of ``seq_len`` positions holds ``n_to_copy`` data tokens among blank (noise) tokens;
then a copy token and ``n_to_copy`` blanks, at which the model must output the data tokens in
order (position i after the copy token: the i-th data token). The blanks are placed as MAD places
them: each blank goes before one of the data tokens, chosen uniformly, so the gaps before the
data tokens are even (a multinomial of the blanks over the data tokens) and the last data token
always sits right before the copy token. Trained with cross-entropy at the output positions only;
scored by the argmax there (no teacher forcing: the outputs are read at blank inputs, as MAD reads
them). Token accuracy over the output positions, and exact match (every token of a sequence
right). Chance token accuracy is one over the number of data tokens.

Differences from mad-lab, each for a reason: ``seq_len`` counts the context only (MAD's counts
the copy token and the outputs too: the contract key keeps its meaning); data tokens are 2…V−1
after blank 0 and copy token 1 (MAD: the two highest ids are special; the same count of data
tokens); the blanks are drawn from the job's data generator (mad-lab draws them from numpy's
global generator, unseeded, so its placements are not reproducible).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attnbench import JobContext, Metric, MetricPoint, Task, TaskResult, Tuning, register_task
from attnbench.metrics import DENSITY
from attnbench.task import TEST_STREAM, VALIDATION_STREAM
from attnbench.toolkit.convergence import StopRule
from attnbench.toolkit.model import ModelConfig, SequenceModel
from attnbench.toolkit.training import (
    CONVERGED,
    EXAMPLES_AXIS,
    IGNORE_INDEX,
    LEARNING_CURVE_METRICS,
    SEQUENCE_AXES,
    TUNED_AXES,
    WIDTH_AXIS,
    TrainConfig,
    accuracy_with_noise,
    fit_token_model,
)

BLANK, SEPARATOR, FIRST_DATA = 0, 1, 2  # SEPARATOR: MAD's copy token


def copy_batch(
    n: int, seq_len: int, n_to_copy: int, vocab_size: int, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``n`` selective-copy sequences, MAD's placement (module docstring).

    Returns:
        inputs (n, seq_len + 1 + n_to_copy): context, copy token, blanks; targets (same shape,
        −100 but at the last ``n_to_copy`` positions, which hold the data); data (n, n_to_copy).
    """
    data = torch.randint(FIRST_DATA, vocab_size, (n, n_to_copy), generator=gen)
    blanks = seq_len - n_to_copy
    # each blank goes before a data token chosen uniformly (MAD's np.insert at randint(0, n))
    before = torch.randint(0, n_to_copy, (n, blanks), generator=gen)
    gaps = torch.zeros(n, n_to_copy, dtype=torch.long)
    gaps.scatter_add_(1, before, torch.ones_like(before))
    where = gaps.cumsum(dim=1) + torch.arange(n_to_copy)
    context = torch.full((n, seq_len), BLANK, dtype=torch.long)
    context.scatter_(1, where, data)
    outputs = torch.full((n, n_to_copy), BLANK, dtype=torch.long)
    inputs = torch.cat([context, torch.full((n, 1), SEPARATOR), outputs], dim=1)
    targets = torch.full_like(inputs, IGNORE_INDEX)
    targets[:, seq_len + 1 :] = data
    return inputs, targets, data


@dataclass
class CopyParams:
    """Parameters of the `copy` task."""

    seq_len: int = 64  # context positions (the input adds the separator and the output)
    n_to_copy: int = 8  # data tokens to copy
    vocab_size: int = 16  # including blank and separator: data tokens are 2…V−1
    train_size: int = 20000  # fixed training sequences
    test_size: int = 500  # fresh evaluation sequences
    val_size: int = 250  # validation sequences, apart from training and test (pick tuned lr)
    steps: int = 1000  # optimiser steps
    batch_size: int = 32  # sequences per step
    lr: float = 3e-3  # peak AdamW learning rate
    weight_decay: float = 0.01  # AdamW weight decay (a tuning axis of MAD's protocol, sweep=mad)
    d_model: int = 64  # model width
    n_layers: int = 2  # attention + MLP blocks
    n_heads: int = 2  # heads per attention layer


@register_task("copy")
class SelectiveCopy(Task):
    """Selective copying accuracy after training a small causal model."""

    Params = CopyParams
    description = "Selective copying: write out the data tokens scattered in noise, in order."
    headline = "accuracy"
    battery = "mad"  # MAD's selective copying / in-context recall (tasks/mad, docs/mad.md)
    label = "Selective copying"
    tuning = Tuning(["lr", "weight_decay"], "val_accuracy")
    metrics = (
        Metric(
            "accuracy",
            True,
            "Token accuracy at the output positions (MAD's: argmax, no teacher forcing)",
            label="copy accuracy",
        ),
        Metric(
            "val_accuracy",
            True,
            "accuracy on the validation split (picks tuned lr)",
            label="validation accuracy",
        ),
        Metric(
            "exact_match",
            True,
            "Fraction of sequences written out entirely right",
            label="sequences copied exactly",
        ),
        Metric(
            "chance_accuracy",
            None,
            "Chance token accuracy: one over the data tokens",
            label="chance",
        ),
        Metric(
            "final_loss",
            False,
            "Training loss at the end (mean of the last stretch)",
            label="final training loss",
        ),
        DENSITY,
        *LEARNING_CURVE_METRICS,
    )
    charts = ("learning_curve",)
    axes = (
        WIDTH_AXIS,
        *SEQUENCE_AXES,
        Metric("n_to_copy", None, "Data tokens to copy", label="tokens to copy"),
        *TUNED_AXES,
        EXAMPLES_AXIS,
    )
    # every trained number is judged by the run's convergence (attnbench.toolkit.convergence)
    chance_metric = "chance_accuracy"  # with the ceiling: does a column separate the variants
    ceiling = 1.0
    convergence = {m: CONVERGED for m in ("accuracy", "val_accuracy", "exact_match")}

    def density_size(self) -> tuple[int, int, bool]:
        """The model's input: context, copy token and the output positions, causal."""
        n = self.params.seq_len + 1 + self.params.n_to_copy
        return n, n, True

    def check(self) -> None:
        """Refuse impossible sizes with one sentence."""
        p = self.params
        self.require_positive(
            "seq_len",
            "n_to_copy",
            "train_size",
            "test_size",
            "val_size",
            "steps",
            "batch_size",
            "d_model",
            "n_layers",
            "n_heads",
        )
        self.require_finite("lr", above=0)
        self.require_finite("weight_decay", at_least=0)
        self.require_divides("n_heads", "d_model")
        self.require_batch_fits()
        if p.n_to_copy > p.seq_len:
            raise ValueError(
                f"task.n_to_copy={p.n_to_copy} does not fit in task.seq_len="
                f"{p.seq_len}: use n_to_copy <= seq_len."
            )
        if p.vocab_size < FIRST_DATA + 2:
            raise ValueError(
                f"task.vocab_size={p.vocab_size} leaves fewer than 2 data tokens; "
                f"use vocab_size >= {FIRST_DATA + 2}."
            )

    def measure(self, ctx: JobContext) -> TaskResult:
        p = self.params
        torch.manual_seed(ctx.seed)
        cfg = ModelConfig(
            d_model=p.d_model,
            n_layers=p.n_layers,
            n_heads=p.n_heads,
            max_len=self.density_size()[0],
            vocab_size=p.vocab_size,
            output_dim=p.vocab_size,
            token_shift=True,
        )
        model = SequenceModel(cfg, ctx.variant_name, ctx.variant_params).to(ctx.device, ctx.dtype)
        x, y, _ = copy_batch(p.train_size, p.seq_len, p.n_to_copy, p.vocab_size, ctx.generator(1))
        chance = 1 / (p.vocab_size - FIRST_DATA)

        def evaluate() -> tuple[float, float]:
            return accuracy_with_noise(
                self.written_right(model, ctx, p.val_size, VALIDATION_STREAM)
            )

        outcome = fit_token_model(
            model,
            x,
            y,
            TrainConfig(
                steps=p.steps, batch_size=p.batch_size, lr=p.lr, weight_decay=p.weight_decay
            ),
            device=ctx.device,
            seed=ctx.seed,
            desc=f"copy/{ctx.variant_name}",
            evaluate=evaluate,
            rule=StopRule(ceiling=1.0, chance=chance),
        )
        right = self.written_right(model, ctx, p.test_size, TEST_STREAM)
        points = [
            *outcome.points(),
            MetricPoint("accuracy", float(right.float().mean())),
            MetricPoint("exact_match", float(right.all(dim=1).float().mean())),
            MetricPoint("val_accuracy", outcome.convergence.points[-1].value),
            MetricPoint("chance_accuracy", chance),
            MetricPoint("final_loss", outcome.curve[-1][1]),
            MetricPoint("density", model.density(self.density_size()[0])),
        ]
        return TaskResult(points=points, details=outcome.details())

    def written_right(
        self, model: SequenceModel, ctx: JobContext, size: int, stream: int
    ) -> torch.Tensor:
        """(size, n_to_copy) booleans: which tokens the model outputs right (argmax at the
        output positions) on ``size`` fresh sequences of generator stream ``stream`` (the test
        or the validation split)."""
        p = self.params
        x, _, data = copy_batch(size, p.seq_len, p.n_to_copy, p.vocab_size, ctx.generator(stream))
        written = torch.cat(
            [
                model(x[i : i + 250].to(ctx.device))[:, -p.n_to_copy :].argmax(-1).cpu()
                for i in range(0, size, 250)
            ]
        )
        return written == data
