"""Cosine-similarity softmax attention: softmax(τ·cos(q_i, k_j))·V (as in Swin Transformer v2)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from attnbench import AttentionVariant, register_variant


@dataclass
class CosineParams:
    """Hyperparameters of `cosine_softmax`."""

    scale: float = 10.0  # τ > 0: logits are τ·cos(q, k), in [−τ, τ]; larger τ sharpens

    def __post_init__(self) -> None:
        # Refused here, the command line answers `variant.scale=0` with this one sentence (exit 2)
        # before any job runs; τ ≤ 0 would attend most to the least similar keys.
        if not self.scale > 0:
            raise ValueError(f"cosine_softmax scale must be > 0, got {self.scale}; try 10.0.")


@register_variant("cosine_softmax")
class CosineSoftmax(AttentionVariant):
    """softmax(τ·q̂·k̂ᵀ)·V with unit-norm queries and keys."""

    family = "softmax"
    cost = "n²"
    supports_causal = True
    Params = CosineParams

    def forward(self, q, k, v, causal=False):
        self.check_inputs(q, k, v, causal)
        q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=self.params.scale)

    def attention_weights(self, q, k, causal=False):
        logits = (
            self.params.scale * F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-2, -1)
        )
        if causal:
            n, m = logits.shape[-2:]
            visible = torch.ones(n, m, dtype=torch.bool, device=q.device).tril()
            logits = logits.masked_fill(~visible, float("-inf"))
        return logits.softmax(dim=-1)
