"""MAD's synthetic battery (Poli et al. 2024, "Mechanistic Design and Scaling of Hybrid
Architectures", ``athms/mad-lab``): what its four tasks that attnbench lacked share.

MAD scores a sequence mixer on six tasks: in-context recall (our `recall`), fuzzy recall, noisy
recall, selective copying (our `copy`), compression and memorization. This package holds the
four others: the sequences in `attnbench.tasks.mad.data`, the tasks in `attnbench.tasks.mad.tasks`,
the compression model in `attnbench.tasks.mad.autoencoder`, and here the protocol they share
(`MadTask`):

* **Model**: MAD's layout at MAD's width, the shared model (`attnbench.toolkit.model`) with
  ``n_layers`` = 2 blocks of (the variant's attention, an MLP): MAD's [mixer, SwiGLU, mixer, SwiGLU]
  at ``d_model`` = 128 and 16 heads (MAD's ``mh-attention``). Compression runs it as an encoder
  (`attnbench.tasks.mad.autoencoder`).
* **Training**: AdamW on fixed training sets (``train_size`` sequences, MAD's
  ``num_train_examples``), the shared loop (`attnbench.toolkit.training`); the learning rate and
  the weight decay are tuning axes (MAD's grid: lr 1e-4, 5e-4, 1e-3 × weight decay 0, 0.1) picked
  per setting on a validation split, never on the test (``conf/sweep/mad.yaml``).
* **Score**: token accuracy over the scored positions of ``test_size`` fresh sequences (MAD's
  ``test_acc``). The data are drawn from ``data_seed``, not from the job's seed, so every seed and
  every point of the grid trains and is scored on the same sequences (MAD's fixed data seed).
* **Difficulty**: MAD's levels (vocabulary, length, training examples, noise) are the task
  parameters; a preset runs MAD's baseline and each change (``conf/sweep/mad.yaml``), and a task's
  board column is the mean over those settings, as MAD averages over them.

Every task here declares ``battery = "mad"``: the board's ``mad`` column is the mean of the
battery's task columns (docs/mad.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from attnbench import JobContext, Metric, MetricPoint, Task, TaskResult, Tuning
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

BATTERY = "mad"
EVAL_TOKENS = 65536  # tokens per evaluation batch


@dataclass
class MadParams:
    """The parameters every MAD task has (its own add its difficulty levels)."""

    seq_len: int = 128  # MAD's seq_len
    vocab_size: int = 16  # MAD's vocab_size
    train_size: int = 12800  # fixed training sequences (MAD's num_train_examples)
    test_size: int = 1280  # fresh test sequences (MAD's num_test_examples)
    val_size: int = 640  # validation sequences (pick tuned lr and weight decay)
    data_seed: int = 0  # draws every split (MAD: one data seed for the whole grid)
    steps: int = 1000  # optimiser steps (MAD: 200 epochs)
    batch_size: int = 128  # sequences per step (MAD's)
    lr: float = 5e-4  # peak AdamW learning rate (MAD's grid: 1e-4, 5e-4, 1e-3)
    weight_decay: float = 0.0  # AdamW weight decay (MAD's grid: 0, 0.1)
    d_model: int = 128  # model width (MAD's)
    n_layers: int = 2  # blocks of (attention, MLP): MAD's 4 layers
    n_heads: int = 16  # heads per attention layer (MAD's mh-attention)


class MadTask(Task):
    """A MAD task: build the model, train on a fixed set, score fresh sequences.

    A subclass sets ``Params`` (a `MadParams`), ``description`` and implements `batch`; it may
    override `build_model` (compression) and `check_task`.
    """

    battery = BATTERY
    headline = "accuracy"
    tuning = Tuning(["lr", "weight_decay"], "val_accuracy")
    metrics = (
        Metric(
            "accuracy",
            True,
            "Token accuracy at the scored positions of fresh sequences",
            label="accuracy",
        ),
        Metric(
            "val_accuracy",
            True,
            "accuracy on the validation split (picks tuned lr and wd)",
            label="validation accuracy",
        ),
        Metric(
            "chance_accuracy",
            None,
            "Chance level: one over the tokens a target can be",
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
    # the parameters the board names (MAD's protocol varies length, vocabulary and training
    # set), the tuned ones, and the learning curve's axis
    axes = (
        WIDTH_AXIS,
        *SEQUENCE_AXES,
        *TUNED_AXES,
        EXAMPLES_AXIS,
    )
    # every trained number is judged by the run's convergence (attnbench.toolkit.convergence)
    chance_metric = "chance_accuracy"  # with the ceiling: does a column separate the variants
    ceiling = 1.0
    convergence = {m: CONVERGED for m in ("accuracy", "val_accuracy")}

    def batch(
        self, n: int, gen: torch.Generator, training: bool
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``n`` sequences: (inputs, training targets, test targets), −100 where not scored."""
        raise NotImplementedError

    def chance(self) -> float:
        """Chance accuracy: one over the number of tokens a scored target can be."""
        raise NotImplementedError

    def check_task(self) -> None:
        """The task's own refusals (one sentence each)."""

    def density_size(self) -> tuple[int, int, bool]:
        """The model's input length, causal."""
        n = self.params.seq_len
        return n, n, True

    def check(self) -> None:
        """Refuse impossible sizes with one sentence."""
        p = self.params
        self.require_positive(
            "seq_len",
            "vocab_size",
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
        self.check_task()

    def model_config(self) -> ModelConfig:
        """MAD's layout on the shared model: (attention, MLP) × n_layers, causal."""
        p = self.params
        return ModelConfig(
            d_model=p.d_model,
            n_layers=p.n_layers,
            n_heads=p.n_heads,
            max_len=self.density_size()[0],
            vocab_size=p.vocab_size,
            output_dim=p.vocab_size,
            causal=True,
        )

    def build_model(self, ctx: JobContext) -> nn.Module:
        """The model on the job's device and dtype: (B, N) tokens → (B, N, vocab) logits."""
        return SequenceModel(self.model_config(), ctx.variant_name, ctx.variant_params).to(
            ctx.device, ctx.dtype
        )

    def data_generator(self, offset: int) -> torch.Generator:
        """A generator of the data, seeded by ``data_seed`` alone (the module docstring)."""
        return torch.Generator().manual_seed(self.params.data_seed * 1_000_003 + offset)

    @torch.no_grad()
    def hits(self, model: nn.Module, ctx: JobContext, size: int, stream: int) -> torch.Tensor:
        """(scored positions,) booleans: which test targets of ``size`` fresh sequences of
        generator stream ``stream`` the model predicts (argmax) right."""
        x, _, y = self.batch(size, self.data_generator(stream), training=False)
        step = max(1, EVAL_TOKENS // x.shape[1])
        out = []
        for i in range(0, size, step):
            target = y[i : i + step]
            scored = target != IGNORE_INDEX
            logits = model(x[i : i + step].to(ctx.device)).cpu()
            out.append(logits[scored].argmax(-1) == target[scored])
        return torch.cat(out)

    def measure(self, ctx: JobContext) -> TaskResult:
        p = self.params
        torch.manual_seed(ctx.seed)
        model = self.build_model(ctx)
        x, y, _ = self.batch(p.train_size, self.data_generator(1), training=True)
        cfg = TrainConfig(
            steps=p.steps, batch_size=p.batch_size, lr=p.lr, weight_decay=p.weight_decay
        )

        def evaluate() -> tuple[float, float]:
            return accuracy_with_noise(self.hits(model, ctx, p.val_size, VALIDATION_STREAM))

        outcome = fit_token_model(
            model,
            x,
            y,
            cfg,
            device=ctx.device,
            seed=ctx.seed,
            desc=f"{self.name}/{ctx.variant_name}",
            evaluate=evaluate,
            rule=StopRule(ceiling=1.0, chance=self.chance()),
        )
        right = self.hits(model, ctx, p.test_size, TEST_STREAM)
        encoder = getattr(model, "encoder", model)
        points = [
            *outcome.points(),
            MetricPoint("accuracy", float(right.float().mean())),
            MetricPoint("val_accuracy", outcome.convergence.points[-1].value),
            MetricPoint("chance_accuracy", self.chance()),
            MetricPoint("final_loss", outcome.curve[-1][1]),
            MetricPoint("density", encoder.density(self.density_size()[0])),
        ]
        details = {**outcome.details(), "scored_test_tokens": int(right.numel())}
        return TaskResult(points=points, details=details)
