"""Selective copying (as in MAD, Poli et al. 2024).

A context of ``seq_len`` positions holds ``n_to_copy`` data tokens at random positions among blank
(noise) tokens. After a separator the model must write the data tokens out, in order. It is trained
with teacher forcing (next-token loss on the output part only) and evaluated by greedy decoding:
token accuracy over the written tokens, and exact match (every token right). Chance token accuracy
is one over the number of data tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attnbench import JobContext, Metric, MetricPoint, Task, TaskResult, Tuning, register_task
from attnbench.metrics import DENSITY
from attnbench.task import TEST_STREAM, VALIDATION_STREAM
from attnbench.toolkit.model import ModelConfig, SequenceModel
from attnbench.toolkit.training import IGNORE_INDEX, TrainConfig, fit_token_model

BLANK, SEPARATOR, FIRST_DATA = 0, 1, 2


def copy_batch(
    n: int, seq_len: int, n_to_copy: int, vocab_size: int, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``n`` selective-copy sequences.

    Returns:
        inputs (n, seq_len + n_to_copy): context, separator, then the data tokens but the last
        (teacher forcing); targets (same shape, −100 outside the output part); data (n, n_to_copy).
    """
    data = torch.randint(FIRST_DATA, vocab_size, (n, n_to_copy), generator=gen)
    where = torch.rand(n, seq_len, generator=gen).argsort(dim=1)[:, :n_to_copy].sort(dim=1).values
    context = torch.full((n, seq_len), BLANK, dtype=torch.long)
    context.scatter_(1, where, data)
    inputs = torch.cat([context, torch.full((n, 1), SEPARATOR), data[:, :-1]], dim=1)
    targets = torch.full_like(inputs, IGNORE_INDEX)
    targets[:, seq_len:] = data
    return inputs, targets, data


@torch.no_grad()
def greedy_copy(model: SequenceModel, prompt: torch.Tensor, n_to_copy: int) -> torch.Tensor:
    """Write ``n_to_copy`` tokens after ``prompt`` (context + separator) by greedy decoding."""
    seq = prompt
    for _ in range(n_to_copy):
        nxt = model(seq)[:, -1].argmax(dim=-1, keepdim=True)
        seq = torch.cat([seq, nxt], dim=1)
    return seq[:, prompt.shape[1] :]


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
            "Token accuracy of the greedily written output",
            label="copy accuracy",
        ),
        Metric("val_accuracy", True, "accuracy on the validation split (picks tuned lr)"),
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
    )

    def density_size(self) -> tuple[int, int, bool]:
        """The model's input: context, separator and the output but its last token, causal."""
        n = self.params.seq_len + self.params.n_to_copy
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

    def run(self, ctx: JobContext) -> TaskResult:
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
        curve = fit_token_model(
            model,
            x,
            y,
            TrainConfig(
                steps=p.steps, batch_size=p.batch_size, lr=p.lr, weight_decay=p.weight_decay
            ),
            device=ctx.device,
            seed=ctx.seed,
            desc=f"copy/{ctx.variant_name}",
        )
        right = self.written_right(model, ctx, p.test_size, TEST_STREAM)
        val_right = self.written_right(model, ctx, p.val_size, VALIDATION_STREAM)
        points = [
            MetricPoint("accuracy", float(right.float().mean())),
            MetricPoint("exact_match", float(right.all(dim=1).float().mean())),
            MetricPoint("val_accuracy", float(val_right.float().mean())),
            MetricPoint("chance_accuracy", 1 / (p.vocab_size - FIRST_DATA)),
            MetricPoint("final_loss", curve[-1][1]),
            MetricPoint("density", model.density(self.density_size()[0])),
        ]
        return TaskResult(points=points, details={"loss_curve": curve})

    def written_right(
        self, model: SequenceModel, ctx: JobContext, size: int, stream: int
    ) -> torch.Tensor:
        """(size, n_to_copy) booleans: which tokens the model writes out right on ``size`` fresh
        sequences of generator stream ``stream`` (the test or the validation split)."""
        p = self.params
        x, _, data = copy_batch(size, p.seq_len, p.n_to_copy, p.vocab_size, ctx.generator(stream))
        written = torch.cat(
            [
                greedy_copy(model, x[i : i + 250, : p.seq_len + 1].to(ctx.device), p.n_to_copy)
                for i in range(0, size, 250)
            ]
        ).cpu()
        return written == data
