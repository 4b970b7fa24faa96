"""Forgetting MQAR (Zoology's ``forgetting_mqar``): some keys are reassigned a new value after
the first bindings, and each query asks for the key's latest value.

Data: `attnbench.tasks.recall.forgetting_data` (Zoology's generator semantics, one deviation
listed there). Everything else is `recall`'s (`attnbench.tasks.recall`): the model (Zoology's
attention baseline: a short convolution, then the variant; no positions), the training mixture
and test ladder, the convergence rule, the tuning on the validation split, Zoology's accuracy
and the state-size axis. ``n_updates`` reassignments per sequence, at every size of the ladder,
as Zoology's sweep (``forgetting_configs.py``: ``num_updates`` left at its default 4 for every
configuration); each configuration is then lengthened where it needs to (4·pairs + 2·n_updates
tokens at least).

What it separates: a model that recalls every binding but cannot tell which of a key's two
values came last answers a reassigned key right half the time, so its accuracy is at most
1 − U/(2P) (``order_blind_by_pairs``, drawn beside ``accuracy_by_pairs``). Linear attention and
one softmax layer without positions are such models: both bindings of a key enter their readout
with equal weight. The delta rule's write replaces the value a key held; a decay (gated linear
attention, Mamba-2) weighs the later binding more. ``accuracy_reassigned`` scores the reassigned
keys alone (order-blind: 0.5), ``accuracy_kept`` the others (plain MQAR inside the same
sequences).

Deviations from Zoology's forgetting sweep (besides `recall`'s, docs/recall.md): its mixture
grows the pairs as squares (4, 9, 16, 25, 36 at lengths 64–256, tests to 256 pairs at 2048
tokens); ours is `recall`'s halving ladder, so that the two columns share their sizes on the
board and a sweep varies the same keys. Zoology's sweep switches ``random_non_queries`` on (its
default), as here.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attnbench import Metric, MetricPoint, register_task
from attnbench.tasks.recall import Recall, RecallParams, evaluation_ladder, training_mixture
from attnbench.tasks.recall.forgetting_data import (
    forgetting_batch,
    order_blind_accuracy,
    reassigned_queries,
)
from attnbench.tasks.recall.mqar_data import IGNORE
from attnbench.toolkit.training import CONVERGED


@dataclass
class ForgettingParams(RecallParams):
    """Parameters of `forgetting_recall`: `recall`'s, and the reassignments per sequence. The
    defaults train on 8 pairs (4 reassigned: Zoology's defaults for the generator) and 4 pairs
    (all reassigned), and test also at 16 pairs."""

    n_kv_pairs: int = 8
    n_updates: int = 4  # keys reassigned per sequence, at every size (Zoology's default 4)


@register_task("forgetting_recall")
class ForgettingRecall(Recall):
    """Zoology's forgetting MQAR: recall the latest value of each key, some keys reassigned."""

    Params = ForgettingParams
    description = (
        "Forgetting MQAR (Zoology's): some keys are reassigned a new value mid-sequence and each "
        "query asks for the latest; separates overwriting a binding from keeping both."
    )
    label = "Recall with reassigned keys (forgetting MQAR)"
    axes = (
        *Recall.axes,
        Metric("n_updates", None, "Keys reassigned per sequence", label="reassigned keys"),
    )
    battery = ""  # not one of MAD's tasks
    charts = ("accuracy_by_pairs", "accuracy_reassigned_by_pairs", *Recall.charts[1:])
    chart_references = {
        "accuracy_by_pairs": {
            "order_blind_by_pairs": "perfect recall, blind to which value came last",
            "context_guess_by_pairs": "a random value of the sequence (1/pairs)",
        },
        "accuracy_reassigned_by_pairs": {
            "order_blind_reassigned": "either of the key's two values (1/2)",
        },
    }
    convergence = {
        **Recall.convergence,
        **{
            m: CONVERGED
            for m in (
                "accuracy_reassigned",
                "accuracy_kept",
                "accuracy_reassigned_by_pairs",
            )
        },
    }
    metrics = (
        *Recall.metrics,
        Metric(
            "accuracy_reassigned",
            True,
            "Accuracy at the queries of reassigned keys, over the test ladder (0.5: order-blind)",
            label="accuracy on reassigned keys",
        ),
        Metric(
            "accuracy_kept",
            True,
            "Accuracy at the queries of keys bound once, over the test ladder",
            label="accuracy on keys bound once",
        ),
        Metric(
            "accuracy_reassigned_by_pairs",
            True,
            "Accuracy at the queries of reassigned keys, per test configuration",
            label="accuracy on reassigned keys",
        ),
        Metric(
            "order_blind_by_pairs",
            None,
            "1 − U/(2P): perfect recall that cannot tell which of two values came last",
            label="accuracy of order-blind perfect recall",
        ),
        Metric(
            "order_blind_reassigned",
            None,
            "1/2: either of a reassigned key's two values",
            label="order-blind accuracy on reassigned keys",
        ),
    )

    def training_configs(self) -> list[tuple[int, int]]:
        """`recall`'s mixture, each length at least 4·pairs + 2·n_updates."""
        return training_mixture(self.params, 2 * self.params.n_updates)

    def test_configs(self) -> list[tuple[int, int]]:
        """`recall`'s ladder, each length at least 4·pairs + 2·n_updates."""
        return evaluation_ladder(self.params, 2 * self.params.n_updates)

    def check(self) -> None:
        """The reassignments first: no more than the pairs of the smallest training
        configuration, then room for them in the sequence (which covers `recall`'s own
        4·n_kv_pairs), then `recall`'s checks. In that order, so that the value a refusal asks
        for is the one to set: the pairs bound does not depend on seq_len, and the room asked
        for is enough for `recall` too."""
        p = self.params
        if p.n_updates < 0:
            raise ValueError(f"task.n_updates={p.n_updates} must be >= 0.")
        self.require_positive("seq_len", "n_kv_pairs", "min_kv_pairs")  # before the mixture
        fewest = min(k for _, k in self.training_configs())
        if p.n_updates > fewest:
            raise ValueError(
                f"task.n_updates={p.n_updates} exceeds the {fewest} pairs of the smallest "
                f"training configuration: use n_updates <= {fewest}, or raise task.min_kv_pairs "
                f"(at most task.n_kv_pairs={p.n_kv_pairs})."
            )
        if 4 * p.n_kv_pairs + 2 * p.n_updates > p.seq_len:
            raise ValueError(
                f"task.seq_len={p.seq_len} is too short for n_kv_pairs={p.n_kv_pairs} and "
                f"n_updates={p.n_updates}: need seq_len >= 4·n_kv_pairs + 2·n_updates = "
                f"{4 * p.n_kv_pairs + 2 * p.n_updates}."
            )
        super().check()

    def data(self, n: int, config: tuple[int, int], gen: torch.Generator):
        """``n`` sequences of one (seq_len, n_kv_pairs) configuration."""
        p = self.params
        length, pairs = config
        return forgetting_batch(
            n,
            length,
            pairs,
            p.n_updates,
            p.vocab_size,
            gen,
            power_a=p.power_a,
            random_filler=p.random_filler,
        )

    def test_points(self, splits: dict, predicted: dict) -> list[MetricPoint]:
        """Accuracy on the reassigned keys and on the others, and the order-blind levels."""
        u = self.params.n_updates
        hits = {True: 0, False: 0}
        counts = {True: 0, False: 0}
        points = []
        for (length, k), (x, y) in splits.items():
            reassigned = reassigned_queries(x, y, k, u)
            right = predicted[(length, k)] == y
            for flag, mask in ((True, reassigned), (False, (y != IGNORE) & ~reassigned)):
                hits[flag] += int((right & mask).sum())
                counts[flag] += int(mask.sum())
            if reassigned.any():
                value = float((right & reassigned).sum() / reassigned.sum())
                points.append(MetricPoint("accuracy_reassigned_by_pairs", value, "n_kv_pairs", k))
                points.append(MetricPoint("order_blind_reassigned", 0.5, "n_kv_pairs", k))
            blind = order_blind_accuracy(k, u)
            points.append(MetricPoint("order_blind_by_pairs", blind, "n_kv_pairs", k))
        for flag, name in ((True, "accuracy_reassigned"), (False, "accuracy_kept")):
            if counts[flag]:
                points.append(MetricPoint(name, hits[flag] / counts[flag]))
        return points
