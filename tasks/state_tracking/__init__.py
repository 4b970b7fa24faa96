"""State tracking with length extrapolation: `parity`, `modular_arithmetic`, `word_problem`
(Grazzi et al. 2025, "Unlocking State-Tracking in Linear RNNs Through Negative Eigenvalues";
Merrill et al. 2024, "The Illusion of State in State-Space Models"; Siems et al. 2025,
"DeltaProduct"; Deletang et al. 2023, "Neural Networks and the Chomsky Hierarchy").

A linear recurrence whose transition has eigenvalues in [0, 1] provably cannot count modulo 2 at
every length; these tasks measure whether a mixer tracks a state, by training on sequences of up
to ``train_length`` tokens and testing at longer ones. This package holds what the three share
(`StateTrackingTask`): the sequences are in `attnbench.tasks.state_tracking.data`, the groups in
`attnbench.tasks.state_tracking.groups`, the tasks in `attnbench.tasks.state_tracking.tasks`.

* **Model**: the shared model (`attnbench.toolkit.model`), causal, without positional embeddings
  (a learned table cannot extrapolate past the lengths it was trained on, and the papers' linear
  RNNs have none; softmax attention sees order through its causal mask alone), ``n_layers``
  blocks of (attention, MLP), an optional short convolution before each attention layer (the
  DeltaNet layers of Grazzi et al. carry one).
* **Training** (`attnbench.toolkit.training`): AdamW on a fixed training set of ``train_size``
  sequences drawn from ``data_seed`` (so every seed and variant sees the same data, as in MQAR),
  cross-entropy at the scored positions. Where the target is defined at every prefix (parity,
  the word problem, arithmetic without brackets) each training sequence is ``train_length``
  long and every prefix is scored: for a causal model, the output at position t depends on the
  first t tokens only, so this is training on every length 1…L at once (Merrill et al.'s token
  tagging; Grazzi et al. score only the end of sequences whose length is drawn uniformly, which
  is the same lengths, one per sequence). Bracketed arithmetic scores the end alone, of
  expressions of a length uniform in [1, L].
* **Convergence** (`attnbench.toolkit.convergence`): the learning curve is the final-position
  accuracy of ``val_size`` fresh sequences (a split of its own) at the longest test length, its
  noise that of ``val_size`` targets; training stops when solved or plateaued. At the training
  length (``val_length``) a model is solved long before it extrapolates, so a stop there would
  measure the budget, not the mixer (docs/state-tracking.md has the numbers); Grazzi et al.'s
  validation split, likewise, spans their test lengths. The learning rate and weight decay are
  picked on it (`Tuning`), never on the test split.
* **Test**: the accuracy at the end of sequences of each of ``test_lengths``
  (``accuracy_by_length``, final-position accuracy, as Grazzi et al. and Deletang et al.
  score; for the word problem it is the accuracy of the prefix product at position n, the curve
  of DeltaProduct's figures). Where every prefix is scored, one set of ``test_size`` sequences
  of the longest length gives every point (the output at position n of a causal model is its
  output for the first n tokens alone); bracketed expressions are drawn per length. The
  headline ``accuracy`` is the point at the longest test length.

**Deviations from the papers** (each with its reason in docs/state-tracking.md): CPU sizes
(train up to 32 tokens, test to 256, thousands of sequences, not millions); every prefix scored
where the papers score the end of sequences of random lengths (the same lengths, sharing
prefixes); no padding, masked label slot or BOS token; validation at the longest test length;
raw accuracy beside its chance level (xLSTM's tables rescale it); the shared model, not the
papers' layers (no short convolution on q, k, v inside the mixer).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from attnbench import JobContext, Metric, MetricPoint, Task, TaskResult, Tuning
from attnbench.metrics import DENSITY
from attnbench.task import TEST_STREAM, VALIDATION_STREAM
from attnbench.toolkit.convergence import StopRule, binomial_noise
from attnbench.toolkit.model import ModelConfig, SequenceModel
from attnbench.toolkit.training import (
    CONVERGED,
    EXAMPLES_AXIS,
    LEARNING_CURVE_METRICS,
    TUNED_AXES,
    WIDTH_AXIS,
    TrainConfig,
    fit_token_model,
)

EVAL_TOKENS = 65536  # tokens per evaluation batch
LENGTH = "length"  # the curve axis: the test sequence's length in tokens


@dataclass
class StateParams:
    """The parameters every state-tracking task has (defaults: a CPU size; the papers' in
    docs/state-tracking.md)."""

    train_length: int = 32  # L: training sequences hold up to L tokens
    # lengths tested (tokens); at least one above train_length; the headline is at the longest
    test_lengths: list[int] = field(default_factory=lambda: [32, 64, 128, 256])
    train_size: int = 4000  # fixed training sequences (drawn from data_seed)
    test_size: int = 500  # fresh test sequences (per length where drawn per length)
    val_size: int = 500  # validation sequences (the learning curve; picks tuned lr)
    # length of the validation sequences; 0: the longest test length (Grazzi et al. validate at
    # their test lengths; at the training length a model is solved long before it extrapolates)
    val_length: int = 0
    data_seed: int = 0  # draws every split: every seed and variant sees the same sequences
    steps: int = 2000  # optimiser steps at most; fewer where solved or plateaued
    batch_size: int = 64  # sequences per step
    lr: float = 3e-3  # peak AdamW learning rate
    weight_decay: float = 0.0  # AdamW weight decay (Grazzi et al.'s 0)
    d_model: int = 32  # model width
    n_layers: int = 1  # blocks of (attention, MLP)
    n_heads: int = 2  # heads per attention layer
    short_conv: int = 0  # kernel of a gated short causal convolution before attention; 0: none


class StateTrackingTask(Task):
    """Train on lengths up to L, score the end of longer sequences.

    A subclass sets ``Params``, ``label``, ``description`` and implements `vocab_size`,
    `classes`, `batch` (and `dense` false where only the end of a sequence is scored)."""

    headline = "accuracy"
    tuning = Tuning(["lr", "weight_decay"], "val_accuracy")
    axes = (
        Metric(LENGTH, None, "Test sequence length", "tokens", label="test length"),
        Metric(
            "train_length", None, "Longest training sequence", "tokens", label="training length"
        ),
        WIDTH_AXIS,
        *TUNED_AXES,
        EXAMPLES_AXIS,
    )
    charts = ("accuracy_by_length", "learning_curve")
    chart_references = {"accuracy_by_length": {"chance_by_length": "chance"}}
    chance_metric = "chance_accuracy"
    ceiling = 1.0
    convergence = {
        m: CONVERGED
        for m in (
            "accuracy",
            "accuracy_by_length",
            "val_accuracy",
            "accuracy_trained_lengths",
            "accuracy_beyond",
        )
    }
    metrics = (
        Metric(
            "accuracy",
            True,
            "Final-position accuracy at the longest test length (length extrapolation)",
            label="accuracy at the longest length",
        ),
        Metric(
            "accuracy_by_length",
            True,
            "Final-position accuracy of sequences of each test length",
            label="accuracy",
        ),
        Metric(
            "val_accuracy",
            True,
            "Final-position accuracy on the validation split, at the longest test length unless "
            "val_length says otherwise (picks tuned lr and weight decay)",
            label="validation accuracy",
        ),
        Metric(
            "accuracy_trained_lengths",
            True,
            "Mean over the test lengths within the training length",
            label="accuracy within trained lengths",
        ),
        Metric(
            "accuracy_beyond",
            True,
            "Mean over the test lengths past the training length",
            label="accuracy beyond trained lengths",
        ),
        Metric("chance_accuracy", None, "Chance level: one over the classes", label="chance"),
        Metric("chance_by_length", None, "Chance level at each test length", label="chance"),
        Metric(
            "final_loss",
            False,
            "Training loss at the end (mean of the last stretch)",
            label="final training loss",
        ),
        DENSITY,
        *LEARNING_CURVE_METRICS,
    )
    # every prefix has a target (parity, word problem, arithmetic without brackets)
    dense: bool = True

    def vocab_size(self) -> int:
        """Input tokens."""
        raise NotImplementedError

    def classes(self) -> int:
        """Values a target can take."""
        raise NotImplementedError

    def batch(
        self, n: int, length: int, gen: torch.Generator, training: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``n`` sequences of ``length`` tokens: (inputs, targets), −100 where not scored.
        Dense tasks score every prefix; the others the end (``training``: of a length uniform
        in [1, length], padded to ``length``)."""
        raise NotImplementedError

    def end_position(self, length: int) -> int:
        """Index of the target that scores a sequence of ``length`` tokens (its last)."""
        return length - 1

    def check_task(self) -> None:
        """The task's own refusals (one sentence each)."""

    def chance(self) -> float:
        """Chance accuracy: one over the classes."""
        return 1.0 / self.classes()

    def density_size(self) -> tuple[int, int, bool]:
        """The training length, causal."""
        n = self.params.train_length
        return n, n, True

    def check(self) -> None:
        """Refuse impossible settings with one sentence."""
        p = self.params
        self.require_positive(
            "train_length",
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
        if not 0 <= p.data_seed < 2**32:
            raise ValueError(f"task.data_seed={p.data_seed} is not valid; use 0 to 2^32 − 1.")
        if p.short_conv < 0 or p.val_length < 0:
            raise ValueError(
                f"task.short_conv={p.short_conv} and task.val_length={p.val_length} must be "
                ">= 0 (0: none, and the longest test length)."
            )
        lengths = list(p.test_lengths)
        if not lengths or min(lengths) < 1 or max(lengths) <= p.train_length:
            raise ValueError(
                f"task.test_lengths={lengths} must be positive lengths, at least one above "
                f"task.train_length={p.train_length} (the task measures length extrapolation)."
            )
        self.check_task()

    def build_model(self, ctx: JobContext) -> SequenceModel:
        """The causal model without positional embeddings (module docstring)."""
        p = self.params
        cfg = ModelConfig(
            d_model=p.d_model,
            n_layers=p.n_layers,
            n_heads=p.n_heads,
            max_len=max(p.test_lengths),
            vocab_size=self.vocab_size(),
            output_dim=self.classes(),
            causal=True,
            positions=False,
            short_conv=p.short_conv,
        )
        return SequenceModel(cfg, ctx.variant_name, ctx.variant_params).to(ctx.device, ctx.dtype)

    def data_generator(self, offset: int) -> torch.Generator:
        """A generator seeded by ``data_seed`` alone (every job sees the same sequences)."""
        return torch.Generator().manual_seed(self.params.data_seed * 1_000_003 + offset)

    @torch.no_grad()
    def predict(self, model: nn.Module, ctx: JobContext, x: torch.Tensor) -> torch.Tensor:
        """(n, N) argmax predictions at every position, on the CPU."""
        step = max(1, EVAL_TOKENS // x.shape[1])
        return torch.cat(
            [model(x[i : i + step].to(ctx.device)).argmax(-1).cpu() for i in range(0, len(x), step)]
        )

    def validation_length(self) -> int:
        """The length the validation split is drawn at: ``val_length``, 0 the longest test."""
        p = self.params
        return p.val_length or max(p.test_lengths)

    def validation_accuracy(self, model: nn.Module, ctx: JobContext) -> tuple[float, float]:
        """Final-position accuracy of the validation split, and its noise (one independent
        target per sequence)."""
        p = self.params
        n = self.validation_length()
        x, y = self.batch(p.val_size, n, self.data_generator(VALIDATION_STREAM))
        end = self.end_position(n)
        accuracy = float((self.predict(model, ctx, x)[:, end] == y[:, end]).float().mean())
        return accuracy, binomial_noise(accuracy, p.val_size)

    def accuracy_by_length(self, model: nn.Module, ctx: JobContext) -> dict[int, float]:
        """Final-position test accuracy at each test length (module docstring)."""
        p = self.params
        lengths = sorted(set(p.test_lengths))
        if self.dense:
            x, y = self.batch(p.test_size, lengths[-1], self.data_generator(TEST_STREAM))
            right = self.predict(model, ctx, x) == y
            return {n: float(right[:, self.end_position(n)].float().mean()) for n in lengths}
        out = {}
        for n in lengths:
            x, y = self.batch(p.test_size, n, self.data_generator(TEST_STREAM + n))
            end = self.end_position(n)
            out[n] = float((self.predict(model, ctx, x)[:, end] == y[:, end]).float().mean())
        return out

    def measure(self, ctx: JobContext) -> TaskResult:
        p = self.params
        torch.manual_seed(ctx.seed)
        model = self.build_model(ctx)
        x, y = self.batch(p.train_size, p.train_length, self.data_generator(1), training=True)
        cfg = TrainConfig(
            steps=p.steps, batch_size=p.batch_size, lr=p.lr, weight_decay=p.weight_decay
        )
        outcome = fit_token_model(
            model,
            x,
            y,
            cfg,
            device=ctx.device,
            seed=ctx.seed,
            desc=f"{self.name}/{ctx.variant_name}",
            evaluate=lambda: self.validation_accuracy(model, ctx),
            rule=StopRule(ceiling=1.0, chance=self.chance()),
        )
        by_length = self.accuracy_by_length(model, ctx)
        trained = [a for n, a in by_length.items() if n <= p.train_length]
        beyond = [a for n, a in by_length.items() if n > p.train_length]
        points = [
            *outcome.points(),
            MetricPoint("accuracy", by_length[max(by_length)]),
            MetricPoint("val_accuracy", outcome.convergence.points[-1].value),
            MetricPoint("accuracy_beyond", sum(beyond) / len(beyond)),
            MetricPoint("chance_accuracy", self.chance()),
            MetricPoint("final_loss", outcome.curve[-1][1]),
            MetricPoint("density", model.density(p.train_length)),
        ]
        if trained:
            points.append(MetricPoint("accuracy_trained_lengths", sum(trained) / len(trained)))
        for n, acc in by_length.items():
            points.append(MetricPoint("accuracy_by_length", acc, LENGTH, n))
            points.append(MetricPoint("chance_by_length", self.chance(), LENGTH, n))
        details = {
            **outcome.details(),
            "train_length": p.train_length,
            "test_lengths": sorted(by_length),
            "val_length": self.validation_length(),
            "scored": "every prefix" if self.dense else "the end of each sequence",
        }
        return TaskResult(points=points, details=details)
