"""Multi-query associative recall (MQAR, Arora et al. 2023 "Zoology").

A sequence opens with ``n_kv_pairs`` key-value pairs (k₁ v₁ k₂ v₂ …); later, at random positions
among filler tokens, each key appears again as a query and the model must output its value there.
Only those query positions are scored. Keys come from the lower half of the vocabulary, values from
the upper half; token 0 is filler. A causal model is trained on a fixed training set and evaluated
on fresh sequences, at the trained number of pairs and at fewer (accuracy by number of pairs).
Chance level is one over the number of values.

``causal=false`` trains a bidirectional model. That is still a fair recall test: a query's answer
(its value) only ever appears in the key-value prefix, never at or after the query, so looking
ahead reveals nothing. It lets variants that cannot be causal (``sinkhorn``) be measured here.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attnbench import JobContext, Metric, MetricPoint, Task, TaskResult, register_task
from attnbench.harness.model import ModelConfig, SequenceModel
from attnbench.harness.training import IGNORE_INDEX as IGNORE
from attnbench.harness.training import TrainConfig, fit_token_model


def mqar_batch(
    n: int, seq_len: int, n_pairs: int, vocab_size: int, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` MQAR sequences: inputs (n, seq_len) and targets (−100 except at query positions)."""
    half = vocab_size // 2
    keys = torch.rand(n, half - 1, generator=gen).argsort(dim=1)[:, :n_pairs] + 1  # distinct
    values = torch.randint(half, vocab_size, (n, n_pairs), generator=gen)
    inputs = torch.zeros(n, seq_len, dtype=torch.long)
    targets = torch.full((n, seq_len), IGNORE, dtype=torch.long)
    inputs[:, 0 : 2 * n_pairs : 2] = keys
    inputs[:, 1 : 2 * n_pairs : 2] = values
    free = seq_len - 2 * n_pairs
    where = torch.rand(n, free, generator=gen).argsort(dim=1)[:, :n_pairs] + 2 * n_pairs
    order = torch.rand(n, n_pairs, generator=gen).argsort(dim=1)
    rows = torch.arange(n).unsqueeze(1)
    inputs[rows, where] = keys.gather(1, order)
    targets[rows, where] = values.gather(1, order)
    return inputs, targets


def token_accuracy(logits: torch.Tensor, targets: torch.Tensor) -> float:
    """Fraction of scored positions (target ≠ −100) where the argmax is the target."""
    scored = targets != IGNORE
    return float((logits.argmax(-1)[scored] == targets[scored]).float().mean())


@dataclass
class RecallParams:
    """Parameters of the `recall` task."""

    seq_len: int = 128  # tokens per sequence
    n_kv_pairs: int = 32  # key-value pairs per sequence (3·pairs ≤ seq_len)
    vocab_size: int = 256  # keys from [1, V/2), values from [V/2, V)
    train_size: int = 20000  # fixed training sequences
    test_size: int = 1000  # fresh evaluation sequences per number of pairs
    steps: int = 1000  # optimiser steps
    batch_size: int = 32  # sequences per step
    lr: float = 3e-3  # peak AdamW learning rate
    d_model: int = 64  # model width
    n_layers: int = 2  # attention + MLP blocks
    n_heads: int = 2  # heads per attention layer
    causal: bool = True  # false: bidirectional attention (answers never lie after their query)


@register_task("recall")
class Recall(Task):
    """Associative recall accuracy after training a small causal model."""

    Params = RecallParams
    description = "Multi-query associative recall (MQAR): recall the value bound to each key."
    headline = "accuracy"
    charts = ("accuracy_by_pairs",)
    metrics = (
        Metric("accuracy", True, "Value accuracy at query positions, trained number of pairs"),
        Metric("accuracy_by_pairs", True, "Value accuracy by number of key-value pairs"),
        Metric("chance_accuracy", None, "Chance level: one over the number of values"),
        Metric("final_loss", False, "Training loss at the end (mean of the last stretch)"),
    )

    def check(self) -> None:
        """Refuse impossible sizes with one sentence."""
        p = self.params
        self.require_positive(
            "seq_len",
            "n_kv_pairs",
            "train_size",
            "test_size",
            "steps",
            "batch_size",
            "d_model",
            "n_layers",
            "n_heads",
        )
        self.require_finite("lr", above=0)
        self.require_divides("n_heads", "d_model")
        if 3 * p.n_kv_pairs > p.seq_len:
            raise ValueError(
                f"task.seq_len={p.seq_len} is too short for n_kv_pairs="
                f"{p.n_kv_pairs}: need seq_len >= 3·n_kv_pairs = {3 * p.n_kv_pairs}."
            )
        if p.vocab_size // 2 - 1 < p.n_kv_pairs:
            raise ValueError(
                f"task.vocab_size={p.vocab_size} has too few keys for n_kv_pairs="
                f"{p.n_kv_pairs}: need vocab_size >= {2 * p.n_kv_pairs + 2}."
            )

    def build_model(self, ctx: JobContext) -> SequenceModel:
        """The shared model sized for this task, on the job's device and dtype."""
        p = self.params
        cfg = ModelConfig(
            d_model=p.d_model,
            n_layers=p.n_layers,
            n_heads=p.n_heads,
            max_len=p.seq_len,
            vocab_size=p.vocab_size,
            output_dim=p.vocab_size,
            token_shift=True,
            causal=p.causal,
        )
        return SequenceModel(cfg, ctx.variant_name, ctx.variant_params).to(ctx.device, ctx.dtype)

    def fit(self, ctx: JobContext) -> tuple[SequenceModel, list[tuple[int, float]]]:
        """Train the model on a fixed training set; returns it and its loss curve."""
        p = self.params
        torch.manual_seed(ctx.seed)
        model = self.build_model(ctx)
        x, y = mqar_batch(p.train_size, p.seq_len, p.n_kv_pairs, p.vocab_size, ctx.generator(1))
        cfg = TrainConfig(steps=p.steps, batch_size=p.batch_size, lr=p.lr)
        curve = fit_token_model(
            model, x, y, cfg, device=ctx.device, seed=ctx.seed, desc=f"recall/{ctx.variant_name}"
        )
        return model, curve

    @torch.no_grad()
    def evaluate(self, model: SequenceModel, ctx: JobContext, n_pairs: int) -> float:
        """Accuracy on ``test_size`` fresh sequences with ``n_pairs`` pairs."""
        p = self.params
        x, y = mqar_batch(
            p.test_size, p.seq_len, n_pairs, p.vocab_size, ctx.generator(100 + n_pairs)
        )
        logits = torch.cat(
            [model(x[i : i + 256].to(ctx.device)).float().cpu() for i in range(0, p.test_size, 256)]
        )
        return token_accuracy(logits, y)

    def run(self, ctx: JobContext) -> TaskResult:
        p = self.params
        model, curve = self.fit(ctx)
        pairs = sorted({max(1, p.n_kv_pairs // 4), max(1, p.n_kv_pairs // 2), p.n_kv_pairs})
        by_pairs = {n: self.evaluate(model, ctx, n) for n in pairs}
        points = [
            MetricPoint("accuracy", by_pairs[p.n_kv_pairs]),
            MetricPoint("chance_accuracy", 1 / (p.vocab_size - p.vocab_size // 2)),
            MetricPoint("final_loss", curve[-1][1]),
            *(
                MetricPoint("accuracy_by_pairs", acc, "n_kv_pairs", n)
                for n, acc in by_pairs.items()
            ),
        ]
        return TaskResult(points=points, details={"loss_curve": curve})
