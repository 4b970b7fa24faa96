"""Pointwise attention: weights a_ij = f(s_ij + b) with no row normalisation.

`relu2` (GAU, Hua et al. 2022): a_ij = relu(s_ij + b)² / M. `sigmoid` (Ramapuram et al. 2024):
a_ij = σ(s_ij + b), with b = −log M by default so that a row's weights sum to O(1).
Here s = QKᵀ/√d, and M is the number of keys (also in the causal form, where key j > i gets
weight 0). Computed in query chunks, so memory stays O(chunk·M) rather than O(N·M).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from attnbench import AttentionVariant, register_variant
from attnbench.variants.blocksparse import rows_per_chunk
from attnbench.variants.masking import causal_pattern


def pointwise_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    weight: Callable[[torch.Tensor], torch.Tensor],
    causal: bool,
) -> torch.Tensor:
    """Σ_j weight(s_ij)·v_j over visible keys, in query chunks under a fixed memory budget."""
    n, m = q.shape[-2], k.shape[-2]
    scale = 1 / math.sqrt(q.shape[-1])
    chunk = rows_per_chunk(q, m)
    outs = []
    for s in range(0, n, chunk):
        w = weight((q[:, :, s : s + chunk] @ k.transpose(-2, -1)) * scale)
        if causal:
            rows = torch.arange(s, min(n, s + chunk), device=q.device).view(-1, 1)
            w = w.masked_fill(torch.arange(m, device=q.device) > rows, 0.0)
        outs.append(w @ v)
    return torch.cat(outs, dim=2)


class PointwiseAttention(AttentionVariant):
    """Shared body of the pointwise variants: subclasses define `weight(scores, m)`."""

    cost = "n²"
    supports_causal = True

    def weight(self, scores: torch.Tensor, m: int) -> torch.Tensor:
        """Weights from scaled scores s = q·k/√d, for M = m keys."""
        raise NotImplementedError

    def forward(self, q, k, v, causal=False):
        self.check_inputs(q, k, v, causal)
        m = k.shape[-2]
        return pointwise_attention(q, k, v, lambda s: self.weight(s, m), causal)

    def attention_weights(self, q, k, causal=False):
        w = self.weight(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), k.shape[-2])
        if causal:
            w = w * causal_pattern(q.shape[-2], k.shape[-2], q.device)
        return w


@dataclass
class Relu2Params:
    """Hyperparameters of `relu2`."""

    bias: float = 0.0  # b in relu(s + b)²; a negative b lets the pattern focus (theory.md §2)


@register_variant("relu2")
class Relu2Attention(PointwiseAttention):
    """GAU-style relu(s + b)² / M attention."""

    family = "relu2"
    Params = Relu2Params

    def weight(self, scores, m):
        return F.relu(scores + self.params.bias).square() / m


@dataclass
class SigmoidParams:
    """Hyperparameters of `sigmoid`."""

    bias: float | None = None  # b in σ(s + b); None: −log M (M = number of keys)


@register_variant("sigmoid")
class SigmoidAttention(PointwiseAttention):
    """σ(s + b) attention, each weight in (0, 1), rows not normalised."""

    family = "sigmoid"
    Params = SigmoidParams

    def weight(self, scores, m):
        bias = -math.log(m) if self.params.bias is None else self.params.bias
        return torch.sigmoid(scores + bias)
