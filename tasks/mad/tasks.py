"""MAD's fuzzy recall, noisy recall, memorization and compression (`attnbench.tasks.mad`).

Defaults are MAD's baseline settings (``athms/mad-lab``, ``configs/tasks/*.yml``) at MAD's width;
MAD's difficulty levels are the parameters a preset varies (``conf/sweep/mad.yaml``):

================  =====================================  ===========================================
task              baseline                               MAD's changes (one at a time)
================  =====================================  ===========================================
fuzzy_recall      vocab 16, seq 128, 12 800 examples,    vocab 32, 64, 128; seq 256, 512, 1024;
                  key and value motifs of 1-3 tokens     examples 6400, 3200, 1600, 800
noisy_recall      vocab 32 (16 of them noise), seq 128,  vocab 48, 80, 144; seq 256, 512, 1024;
                  12 800 examples, 20 % noise            examples 6400 … 800; noise 40, 60, 80 %
memorization      vocab 256, seq 32, 256 examples        vocab 512, 1024, 2048, 4096, 8192
compression       vocab 16, seq 32, 12 800 examples      vocab 32, 64, 128; seq 64, 128, 256;
                                                         examples 6400 … 800
================  =====================================  ===========================================
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attnbench import JobContext, Metric, register_task
from attnbench.tasks.mad import MadParams, MadTask
from attnbench.tasks.mad.autoencoder import AutoEncoder
from attnbench.tasks.mad.data import (
    compression_batch,
    fuzzy_recall_batch,
    fuzzy_recall_vocabulary,
    memorization_batch,
    memorization_map,
    noisy_recall_batch,
    noisy_recall_vocabulary,
)


@dataclass
class FuzzyRecallParams(MadParams):
    """Parameters of `fuzzy_recall` (MAD's baseline)."""

    k_motif: int = 3  # longest key, in tokens (test keys are this long)
    v_motif: int = 3  # longest value, in tokens


@register_task("fuzzy_recall")
class FuzzyRecall(MadTask):
    """MAD's fuzzy in-context recall: keys and values of several tokens."""

    Params = FuzzyRecallParams
    label = "Fuzzy recall (MAD)"
    axes = (
        *MadTask.axes,
        Metric("k_motif", None, "Longest key", "tokens", label="key length"),
        Metric("v_motif", None, "Longest value", "tokens", label="value length"),
    )
    description = (
        "MAD's fuzzy recall: keys and values are runs of 1-3 tokens; write out the value of a key "
        "seen before (every repeat, the final probe's too)."
    )

    def check_task(self) -> None:
        p = self.params
        self.require_positive("k_motif", "v_motif")
        n_keys, n_values, _ = fuzzy_recall_vocabulary(p.vocab_size)
        if n_keys < p.k_motif or n_values < p.v_motif:
            raise ValueError(
                f"task.vocab_size={p.vocab_size} has too few tokens for motifs of {p.k_motif} "
                f"distinct key and {p.v_motif} value tokens: need vocab_size >= "
                f"{2 * max(p.k_motif, p.v_motif) + 1}."
            )
        if p.seq_len < 3 * (p.k_motif + p.v_motif):
            raise ValueError(
                f"task.seq_len={p.seq_len} leaves no room for a pair beside the probe: need "
                f"seq_len >= 3·(k_motif + v_motif) = {3 * (p.k_motif + p.v_motif)}."
            )

    def batch(self, n: int, gen: torch.Generator, training: bool):
        p = self.params
        return fuzzy_recall_batch(
            n, p.seq_len, p.vocab_size, p.k_motif, p.v_motif, training=training, gen=gen
        )

    def chance(self) -> float:
        return 1 / fuzzy_recall_vocabulary(self.params.vocab_size)[1]


@dataclass
class NoisyRecallParams(MadParams):
    """Parameters of `noisy_recall` (MAD's baseline)."""

    vocab_size: int = 32  # all tokens, the noise tokens included
    noise_vocab_size: int = 16  # noise tokens (the top of the vocabulary)
    frac_noise: float = 0.2  # probability that a slot is two noise tokens


@register_task("noisy_recall")
class NoisyRecall(MadTask):
    """MAD's noisy in-context recall: noise tokens among the key-value pairs."""

    Params = NoisyRecallParams
    label = "Noisy recall (MAD)"
    axes = (
        *MadTask.axes,
        Metric("noise_vocab_size", None, "Noise tokens of the vocabulary", label="noise tokens"),
        Metric("frac_noise", None, "Probability that a slot is noise", label="noise fraction"),
    )
    description = (
        "MAD's noisy recall: key-value pairs among noise tokens; write out the value of every key "
        "seen before."
    )

    def density_size(self) -> tuple[int, int, bool]:
        """MAD's inputs are the sequence but its last token."""
        n = self.params.seq_len - 1
        return n, n, True

    def check_task(self) -> None:
        p = self.params
        n_keys, n_values = noisy_recall_vocabulary(p.vocab_size, p.noise_vocab_size)
        if p.seq_len < 4 or p.seq_len % 2:
            raise ValueError(f"task.seq_len={p.seq_len} must be even and >= 4 (two-token slots).")
        if p.noise_vocab_size < 0 or n_keys < 1:
            raise ValueError(
                f"task.noise_vocab_size={p.noise_vocab_size} must be >= 0 and leave at least 2 "
                f"key and value tokens of task.vocab_size={p.vocab_size}."
            )
        if not 0 <= p.frac_noise < 1 or (p.frac_noise > 0 and p.noise_vocab_size < 1):
            raise ValueError(
                f"task.frac_noise={p.frac_noise} must be in [0, 1), and above 0 only with "
                "noise tokens (task.noise_vocab_size >= 1)."
            )

    def batch(self, n: int, gen: torch.Generator, training: bool):
        p = self.params
        return noisy_recall_batch(
            n, p.seq_len, p.vocab_size, p.noise_vocab_size, p.frac_noise, gen=gen
        )

    def chance(self) -> float:
        p = self.params
        return 1 / noisy_recall_vocabulary(p.vocab_size, p.noise_vocab_size)[1]


@dataclass
class MemorizationParams(MadParams):
    """Parameters of `memorization` (MAD's baseline)."""

    seq_len: int = 32
    vocab_size: int = 256
    train_size: int = 256


@register_task("memorization")
class Memorization(MadTask):
    """MAD's memorization: a fixed key-to-value map learned in the weights, no context."""

    Params = MemorizationParams
    label = "Memorization (MAD)"
    description = (
        "MAD's memorization: answer each key with its value under one fixed map, learned in the "
        "weights (nothing in the context tells)."
    )

    def check_task(self) -> None:
        p = self.params
        if p.seq_len < 2 or p.seq_len % 2:
            raise ValueError(f"task.seq_len={p.seq_len} must be even and >= 2 (key, insert).")
        if p.vocab_size < 4:
            raise ValueError(f"task.vocab_size={p.vocab_size} must be >= 4.")

    def table(self) -> torch.Tensor:
        """The fixed map, drawn from ``data_seed`` (stream 0), the same for every split."""
        return memorization_map(self.params.vocab_size, self.data_generator(0))

    def batch(self, n: int, gen: torch.Generator, training: bool):
        p = self.params
        return memorization_batch(n, p.seq_len, p.vocab_size, self.table(), gen)

    def chance(self) -> float:
        clean = self.params.vocab_size - 1
        return 1 / (clean - clean // 2)


@dataclass
class CompressionParams(MadParams):
    """Parameters of `compression` (MAD's baseline)."""

    seq_len: int = 32


@register_task("compression")
class Compression(MadTask):
    """MAD's compression: squeeze a sequence through one position and reconstruct it."""

    Params = CompressionParams
    label = "Compression (MAD)"
    description = (
        "MAD's compression: reconstruct every token of a random sequence from the state of its "
        "last position alone (an auto-encoder)."
    )

    def check_task(self) -> None:
        p = self.params
        if p.seq_len < 2:
            raise ValueError(
                f"task.seq_len={p.seq_len} must be >= 2: a token or more, then the compression "
                "token."
            )
        if p.vocab_size < 3:
            raise ValueError(
                f"task.vocab_size={p.vocab_size} must be >= 3: two tokens or more to draw the "
                "sequence from, besides the compression token."
            )

    def build_model(self, ctx: JobContext) -> AutoEncoder:
        """MAD's auto-encoder around the shared model (`attnbench.tasks.mad.autoencoder`)."""
        model = AutoEncoder(self.model_config(), ctx.variant_name, ctx.variant_params)
        return model.to(ctx.device, ctx.dtype)

    def batch(self, n: int, gen: torch.Generator, training: bool):
        p = self.params
        return compression_batch(n, p.seq_len, p.vocab_size, gen)

    def chance(self) -> float:
        return 1 / (self.params.vocab_size - 1)
