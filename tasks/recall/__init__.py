"""Multi-query associative recall (MQAR) as Zoology measures it (Arora et al. 2023).

Data: `attnbench.tasks.recall.mqar_data` (Zoology's generator semantics: distinct keys and values,
power-law query gaps, random filler tokens, labels at the queries). Protocol, as Zoology's MQAR
sweeps (``zoology/experiments/mqar_example_configs``): train on a *mixture* of (seq_len, n_kv_pairs)
configurations, each batch from one configuration, and test on a ladder of configurations that goes
past the training ones (more pairs, longer sequences). Accuracy is Zoology's: per test sequence the
fraction of its queries answered, averaged over sequences; the headline is the mean over all test
configurations (equal test sizes, so Zoology's ``valid/accuracy``), and each test configuration is
reported as ``accuracy_by_pairs``.

The configurations form a ladder (so the contract keys keep one meaning and a sweep can vary
them): training pairs halve from ``n_kv_pairs`` down to ``min_kv_pairs``, at length
min(``seq_len``, ``tokens_per_pair``·pairs); testing continues doubling the pairs
``test_doublings`` times past ``n_kv_pairs``, at length max(4·pairs, the shortest training
length). ``seq_len=256, n_kv_pairs=64, min_kv_pairs=4, tokens_per_pair=16, test_doublings=2``
is exactly Zoology's mixture — train (64,4) (128,8) (256,16) (256,32) (256,64), test (64,4)
(64,8) (64,16) (128,32) (256,64) (512,128) (1024,256).

Model: the shared model configured as Zoology's attention baseline (``original_mqar_configs``:
a gated short convolution layer, then the attention layer; no MLP, no positional embeddings,
tied embeddings, one head). Our ``n_layers`` counts (convolution, attention) blocks, so the default
1 is Zoology's ``n_layers=2``. The README lists every remaining difference.

``causal=false`` trains a bidirectional model: still a fair recall test, since after a query there
are only fillers, drawn independently of every value, so looking ahead reveals nothing. It lets
variants that cannot be causal (``sinkhorn``) be measured here.

**State size** (Zoology's x axis: recall is bought with state). ``state_bytes`` is the memory a
causal model's attention layers hold per sequence while generating, at the longest test length
L: each layer's incremental form (`attnbench.incremental_form`: a KV cache, a ring of w, a D×Dv
matrix) counts its ``state_size(L)`` elements, in the job's dtype, summed over the layers; the
short convolution's few tokens are not counted, as every variant has the same one.
``accuracy_by_state_bytes`` is the headline along that axis: across a sweep of widths, one line per
variant, Zoology's figure. A variant without an incremental form, or a bidirectional model, has
no state to decode with: no point, and the record's details say why.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from attnbench import (
    JobContext,
    Metric,
    MetricPoint,
    Task,
    TaskResult,
    Tuning,
    UnsupportedError,
    incremental_form,
    register_task,
)
from attnbench.metrics import DENSITY
from attnbench.task import TEST_STREAM, VALIDATION_STREAM
from attnbench.tasks.recall.mqar_data import IGNORE, mqar_batch, sequence_accuracy
from attnbench.toolkit.convergence import StopRule, binomial_noise
from attnbench.toolkit.model import ModelConfig, SequenceModel
from attnbench.toolkit.training import (
    CONVERGED,
    EXAMPLES_AXIS,
    LEARNING_CURVE_METRICS,
    TUNED_AXES,
    WIDTH_AXIS,
    TrainConfig,
    TrainOutcome,
    train,
)

EVAL_TOKENS = 65536  # tokens per evaluation batch (sequences = this // seq_len)


@dataclass
class RecallParams:
    """Parameters of the `recall` task (defaults: a few minutes on two CPU cores; Zoology's
    sizes are in ``conf/sweep/paper.yaml``)."""

    seq_len: int = 64  # longest training sequence (even; >= 4·n_kv_pairs)
    n_kv_pairs: int = 16  # most key-value pairs in training (the top of the training ladder)
    min_kv_pairs: int = 4  # the ladder halves n_kv_pairs while it stays >= this (above: P only)
    tokens_per_pair: int = 16  # training length cap: min(seq_len, tokens_per_pair·pairs)
    test_doublings: int = 1  # test pairs go on doubling past n_kv_pairs this often (Zoology: 2)
    vocab_size: int = 512  # V: keys from [1, V/2), values from [V/2, V) (Zoology: 8192)
    power_a: float = 0.01  # query slot g has weight (g+1)^(power_a−1); 1 = uniform (Zoology)
    random_filler: bool = True  # fillers uniform over the vocabulary (Zoology), else token 0
    train_size: int = 4000  # fixed training sequences per training configuration
    test_size: int = 300  # fresh test sequences per test configuration
    val_size: int = 300  # validation sequences per test configuration (pick tuned parameters)
    data_seed: int = 0  # draws the training, test and validation sequences (Zoology's data seed)
    steps: int = 600  # optimiser steps at most (each on a batch of one configuration); fewer
    # where the validation accuracy is solved or plateaued (attnbench.toolkit.convergence)
    batch_size: int = 64  # sequences per step
    lr: float = 3e-3  # peak AdamW learning rate
    weight_decay: float = 0.1  # AdamW weight decay (Zoology's)
    d_model: int = 64  # model width
    n_layers: int = 1  # blocks of (short convolution, attention); 1 = Zoology's 2 layers
    n_heads: int = 1  # heads per attention layer (Zoology's baseline: 1)
    short_conv: int = 3  # kernel of the gated causal convolution before attention; 0: none
    embed_dropout: float = 0.0  # dropout on the embeddings while training (Zoology: 0.1)
    causal: bool = True  # false: bidirectional attention (nothing after a query reveals it)


def training_mixture(p: RecallParams, extra: int = 0) -> list[tuple[int, int]]:
    """(seq_len, n_kv_pairs) of the training mixture, fewest pairs first (see module docstring).
    ``extra`` tokens a sequence needs beyond 4·pairs (forgetting's reassignments) lengthen a
    configuration to max(tokens_per_pair·pairs, 4·pairs + extra), still capped at seq_len."""
    pairs = [p.n_kv_pairs]
    while pairs[-1] % 2 == 0 and pairs[-1] // 2 >= p.min_kv_pairs:
        pairs.append(pairs[-1] // 2)
    return [(min(p.seq_len, max(p.tokens_per_pair * k, 4 * k + extra)), k) for k in reversed(pairs)]


def evaluation_ladder(p: RecallParams, extra: int = 0) -> list[tuple[int, int]]:
    """(seq_len, n_kv_pairs) of the test ladder: the training pairs, then ``test_doublings``
    doublings past ``n_kv_pairs``, each at max(4·pairs + extra, the shortest training length)."""
    train_cfgs = training_mixture(p, extra)
    shortest = min(length for length, _ in train_cfgs)
    pairs = [k for _, k in train_cfgs] + [
        p.n_kv_pairs * 2**i for i in range(1, p.test_doublings + 1)
    ]
    return [(max(4 * k + extra, shortest), k) for k in pairs]


@register_task("recall")
class Recall(Task):
    """Zoology's MQAR: train on a mixture of sizes, test on a ladder that goes past it."""

    Params = RecallParams
    description = (
        "Multi-query associative recall (Zoology's MQAR): recall the value bound to each key; "
        "trained on a mixture of (seq_len, pairs), tested also on more pairs and longer sequences."
    )
    headline = "accuracy"
    label = "Associative recall (MQAR)"
    axes = (
        Metric("n_kv_pairs", None, "Key-value pairs in a test sequence", label="key-value pairs"),
        WIDTH_AXIS,
        Metric("seq_len", None, "Training sequence length", "tokens", label="sequence length"),
        Metric("min_kv_pairs", None, "Fewest key-value pairs in training", label="fewest pairs"),
        Metric("tokens_per_pair", None, "Training length cap per pair", label="tokens per pair"),
        Metric(
            "test_doublings", None, "Doublings of the pairs past training's", label="test doublings"
        ),
        Metric("vocab_size", None, "Tokens of the vocabulary", label="vocabulary size"),
        Metric("train_size", None, "Fixed training sequences", label="training sequences"),
        *TUNED_AXES,
        EXAMPLES_AXIS,
    )
    battery = "mad"  # MAD's selective copying / in-context recall (tasks/mad, docs/mad.md)
    tuning = Tuning(["lr", "weight_decay"], "val_accuracy")
    charts = (
        "accuracy_by_pairs",
        "accuracy_by_d_model",
        "accuracy_by_state_bytes",
        "learning_curve",
    )
    # every trained number is judged by the run's convergence (attnbench.toolkit.convergence)
    chance_metric = "chance_accuracy"  # with the ceiling: does a column separate the variants
    ceiling = 1.0
    convergence = {
        m: CONVERGED
        for m in (
            "accuracy",
            "accuracy_by_pairs",
            "val_accuracy",
            "accuracy_trained_sizes",
            "accuracy_beyond",
            "accuracy_by_d_model",
            "accuracy_by_state_bytes",
        )
    }
    chart_references = {
        "accuracy_by_pairs": {"context_guess_by_pairs": "a random value of the sequence (1/pairs)"}
    }
    metrics = (
        Metric(
            "accuracy",
            True,
            "Query accuracy, mean over the test configurations (Zoology's)",
            label="recall accuracy",
        ),
        Metric(
            "accuracy_by_pairs",
            True,
            "Query accuracy per test configuration, by its pairs",
            label="recall accuracy",
        ),
        Metric(
            "val_accuracy",
            True,
            "accuracy on the validation split (picks tuned lr)",
            label="validation accuracy",
        ),
        Metric(
            "accuracy_trained_sizes",
            True,
            "Mean over test configurations within training's",
            label="accuracy within trained sizes",
        ),
        Metric(
            "accuracy_beyond",
            True,
            "Mean over test configurations past training's sizes",
            label="accuracy beyond trained sizes",
        ),
        Metric(
            "accuracy_by_d_model",
            True,
            "The headline by model width (one line per variant)",
            label="recall accuracy",
        ),
        Metric(
            "state_bytes",
            False,
            "Bytes the attention layers hold per sequence while generating, at the longest test "
            "length (KV cache, ring or matrix; module docstring)",
            "B",
            label="state per sequence",
        ),
        Metric(
            "accuracy_by_state_bytes",
            True,
            "The headline by state size (Zoology's figure: one line per variant across widths)",
            label="recall accuracy",
        ),
        Metric(
            "chance_accuracy",
            None,
            "Chance level: one over the number of values",
            label="chance",
        ),
        Metric(
            "context_guess_by_pairs",
            None,
            "Accuracy of answering a random value of the context",
            label="accuracy of a random value of the context",
        ),
        Metric(
            "final_loss",
            False,
            "Training loss at the end (mean of the last stretch)",
            label="final training loss",
        ),
        DENSITY,
        Metric(
            "density_by_pairs",
            None,
            "density at each test configuration's length",
            label="density at the row's length",
        ),
        *LEARNING_CURVE_METRICS,
    )

    def training_configs(self) -> list[tuple[int, int]]:
        """(seq_len, n_kv_pairs) of the training mixture (`training_mixture`)."""
        return training_mixture(self.params)

    def test_configs(self) -> list[tuple[int, int]]:
        """(seq_len, n_kv_pairs) of the test ladder (`evaluation_ladder`)."""
        return evaluation_ladder(self.params)

    def density_size(self) -> tuple[int, int, bool]:
        """The longest training sequence (``seq_len``)."""
        return self.params.seq_len, self.params.seq_len, self.params.causal

    def check(self) -> None:
        """Refuse configurations no sequence can satisfy, with one sentence."""
        p = self.params
        self.require_positive(
            "seq_len",
            "n_kv_pairs",
            "min_kv_pairs",
            "tokens_per_pair",
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
        self.require_finite("lr", "power_a", above=0)
        self.require_finite("weight_decay", "embed_dropout", at_least=0)
        self.require_divides("n_heads", "d_model")
        self.require_batch_fits()
        if not 0 <= p.data_seed < 2**32:
            raise ValueError(f"task.data_seed={p.data_seed} is not valid; use 0 to 2^32 − 1.")
        if p.seq_len % 2:
            raise ValueError(f"task.seq_len={p.seq_len} must be even (query slots are pairs).")
        if 4 * p.n_kv_pairs > p.seq_len:
            raise ValueError(
                f"task.seq_len={p.seq_len} is too short for n_kv_pairs={p.n_kv_pairs}: need "
                f"seq_len >= 4·n_kv_pairs = {4 * p.n_kv_pairs} (a slot per query after the pairs)."
            )
        if p.tokens_per_pair < 4 or p.tokens_per_pair % 2:
            raise ValueError(
                f"task.tokens_per_pair={p.tokens_per_pair} must be even and >= 4 "
                "(each training length must hold 4·pairs and be even)."
            )
        if p.test_doublings < 0 or p.short_conv < 0 or p.embed_dropout >= 1:
            raise ValueError(
                f"task.test_doublings={p.test_doublings} and task.short_conv={p.short_conv} must "
                f"be >= 0 and task.embed_dropout={p.embed_dropout} below 1."
            )
        most = max(k for _, k in self.test_configs())
        if p.vocab_size // 2 - 1 < most:
            raise ValueError(
                f"task.vocab_size={p.vocab_size} has too few keys for the test ladder's {most} "
                f"distinct keys per sequence: need vocab_size >= {2 * most + 2}."
            )

    def build_model(self, ctx: JobContext) -> SequenceModel:
        """The shared model as Zoology's attention baseline, on the job's device and dtype."""
        p = self.params
        cfg = ModelConfig(
            d_model=p.d_model,
            n_layers=p.n_layers,
            n_heads=p.n_heads,
            max_len=max(length for length, _ in self.test_configs()),
            vocab_size=p.vocab_size,
            output_dim=p.vocab_size,
            causal=p.causal,
            token_shift=False,
            mlp=False,
            positions=False,
            short_conv=p.short_conv,
            tie_embeddings=True,
            embed_dropout=p.embed_dropout,
        )
        return SequenceModel(cfg, ctx.variant_name, ctx.variant_params).to(ctx.device, ctx.dtype)

    def data(self, n: int, config: tuple[int, int], gen: torch.Generator):
        """``n`` sequences of one (seq_len, n_kv_pairs) configuration."""
        p = self.params
        length, pairs = config
        return mqar_batch(
            n,
            length,
            pairs,
            p.vocab_size,
            gen,
            power_a=p.power_a,
            random_filler=p.random_filler,
        )

    def data_generator(self, offset: int) -> torch.Generator:
        """A generator of the data, seeded by ``data_seed`` and not by the job's seed: as in
        Zoology (its data config has its own seed), every run of a sweep trains and is scored on
        the same sequences, and seeds vary only the initialisation and the order of the batches.
        Variants are then compared on identical test sets."""
        return torch.Generator().manual_seed(self.params.data_seed * 1_000_003 + offset)

    def fit(self, ctx: JobContext) -> tuple[SequenceModel, TrainOutcome]:
        """Train on fixed training sets, one per configuration of the mixture; each step takes a
        batch of one configuration (so no padding), in an order shuffled every epoch, each
        configuration's last partial batch dropped (every step sees ``batch_size``). The
        validation accuracy over the test ladder's configurations is the learning curve, and
        stops training when solved or plateaued."""
        p = self.params
        torch.manual_seed(ctx.seed)
        model = self.build_model(ctx)
        gen = self.data_generator(1)
        sets = [self.data(p.train_size, c, gen) for c in self.training_configs()]
        order = torch.Generator().manual_seed(ctx.seed)
        queue: list[tuple[int, torch.Tensor]] = []  # (configuration, sequence indices)

        def loss_on_batch(step: int) -> torch.Tensor:
            if not queue:  # a new epoch: every batch of every configuration, shuffled
                batches = [
                    (i, perm[start : start + p.batch_size])
                    for i, (x, _) in enumerate(sets)
                    for perm in [torch.randperm(len(x), generator=order)]
                    for start in range(0, len(x) - p.batch_size + 1, p.batch_size)
                ]
                queue.extend(batches[j] for j in torch.randperm(len(batches), generator=order))
            i, idx = queue.pop()
            x, y = sets[i]
            return query_loss(model, x[idx].to(ctx.device), y[idx].to(ctx.device))

        validation = {c: self.split(c, validation=True) for c in self.test_configs()}
        targets = sum(int((y != IGNORE).sum()) for _, y in validation.values())

        def evaluate() -> tuple[float, float]:
            accuracy = sum(self.score(model, ctx, xy) for xy in validation.values())
            accuracy /= len(validation)
            return accuracy, binomial_noise(accuracy, targets)

        cfg = TrainConfig(
            steps=p.steps, batch_size=p.batch_size, lr=p.lr, weight_decay=p.weight_decay
        )
        outcome = train(
            model,
            loss_on_batch,
            cfg,
            desc=f"{self.name}/{ctx.variant_name}",
            evaluate=evaluate,
            rule=StopRule(ceiling=1.0, chance=1 / (p.vocab_size - p.vocab_size // 2)),
        )
        return model, outcome

    def split(self, config: tuple[int, int], validation: bool = False):
        """Fresh sequences of one configuration: ``test_size`` of the test split, or
        ``val_size`` of the validation split (another generator stream)."""
        p = self.params
        size, stream = (p.val_size, VALIDATION_STREAM) if validation else (p.test_size, TEST_STREAM)
        return self.data(size, config, self.data_generator(stream + config[1]))

    @torch.no_grad()
    def predict(self, model: SequenceModel, ctx: JobContext, xy) -> torch.Tensor:
        """(n, N) predictions at the query positions of sequences ``xy`` (−100 elsewhere), in
        batches of about ``EVAL_TOKENS`` tokens."""
        x, y = xy
        step = max(1, EVAL_TOKENS // x.shape[1])
        return torch.cat(
            [
                predict_queries(model, x[i : i + step].to(ctx.device), y[i : i + step])
                for i in range(0, x.shape[0], step)
            ]
        )

    def score(self, model: SequenceModel, ctx: JobContext, xy) -> float:
        """Zoology's accuracy on sequences ``xy`` of one configuration: per sequence the
        fraction of its queries answered, averaged over sequences."""
        return float(sequence_accuracy(self.predict(model, ctx, xy), xy[1]).mean())

    def test_points(self, splits: dict, predicted: dict) -> list[MetricPoint]:
        """Points a subclass adds from the test splits (configuration → (x, y)) and the
        predictions on them (configuration → (n, N)); none here."""
        return []

    def measure(self, ctx: JobContext) -> TaskResult:
        p = self.params
        model, outcome = self.fit(ctx)
        tests = self.test_configs()
        splits = {c: self.split(c) for c in tests}
        predicted = {c: self.predict(model, ctx, xy) for c, xy in splits.items()}
        by_config = {c: float(sequence_accuracy(predicted[c], splits[c][1]).mean()) for c in tests}
        trained = [
            a for (length, k), a in by_config.items() if k <= p.n_kv_pairs and length <= p.seq_len
        ]
        beyond = [
            a for (length, k), a in by_config.items() if k > p.n_kv_pairs or length > p.seq_len
        ]
        accuracy = sum(by_config.values()) / len(by_config)
        points = [
            *outcome.points(),
            MetricPoint("accuracy", accuracy),
            MetricPoint("val_accuracy", outcome.convergence.points[-1].value),
            MetricPoint("accuracy_by_d_model", accuracy, "d_model", p.d_model),
            MetricPoint("accuracy_trained_sizes", sum(trained) / len(trained)),
            MetricPoint("chance_accuracy", 1 / (p.vocab_size - p.vocab_size // 2)),
            MetricPoint("final_loss", outcome.curve[-1][1]),
            MetricPoint("density", model.density(p.seq_len)),
        ]
        if beyond:
            points.append(MetricPoint("accuracy_beyond", sum(beyond) / len(beyond)))
        for (length, k), acc in by_config.items():
            points.append(MetricPoint("accuracy_by_pairs", acc, "n_kv_pairs", k))
            points.append(MetricPoint("density_by_pairs", model.density(length), "n_kv_pairs", k))
            points.append(MetricPoint("context_guess_by_pairs", 1 / k, "n_kv_pairs", k))
        points.extend(self.test_points(splits, predicted))
        details = {
            **outcome.details(),
            "train_configs": self.training_configs(),
            "test_configs": tests,
        }
        longest = max(length for length, _ in tests)
        try:
            state = state_bytes(model, longest, ctx.dtype)
        except UnsupportedError as why:
            details["state_bytes"] = f"not recorded: {why}"
        else:
            points.append(MetricPoint("state_bytes", state))
            points.append(MetricPoint("accuracy_by_state_bytes", accuracy, "state_bytes", state))
            details["state_bytes"] = f"at the longest test length, {longest} tokens"
        return TaskResult(points=points, details=details)


def state_bytes(model: SequenceModel, n: int, dtype: torch.dtype) -> int:
    """Bytes of state the attention layers of ``model`` hold per sequence after n tokens when
    generating: each layer's incremental form sized on the meta device (nothing allocated).

    Raises:
        UnsupportedError: the model is bidirectional, or a layer's variant has no incremental form.
    """
    if not model.cfg.causal:
        raise UnsupportedError(
            "a bidirectional model (task.causal=false) does not generate token by token."
        )
    total = 0
    for layer in model.attention_layers():
        form = incremental_form(layer.attention, 1, n, layer.head_dim, device="meta", dtype=dtype)
        total += form.state_size(n)
    return total * dtype.itemsize


def query_loss(model: SequenceModel, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Cross-entropy at the query positions only (the head runs on those alone: the same loss
    as full logits with ignore_index, without a (B, N, V) tensor)."""
    scored = y != IGNORE
    logits = model.head(model.features(x)[scored])
    return nn.functional.cross_entropy(logits.float(), y[scored])


def predict_queries(model: SequenceModel, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """(B, N) argmax predictions at the query positions of ``y`` (−100 elsewhere), on the CPU."""
    scored = (y != IGNORE).to(x.device)
    logits = model.head(model.features(x)[scored])
    out = torch.full(y.shape, IGNORE, dtype=torch.long)
    out[scored.cpu()] = logits.argmax(-1).cpu()
    return out
