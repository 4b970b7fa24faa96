"""Cosine-similarity softmax attention: softmax(τ·cos(q_i, k_j))·V (as in Swin Transformer v2)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from attnbench import AttentionVariant, IncrementalAttention, register_incremental, register_variant


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


@register_incremental("cosine_softmax")
class CosineSoftmaxIncremental(IncrementalAttention):
    """Token by token, for the `decode` task: a KV cache of unit-norm keys (normalised once, as
    they arrive). Softmax may weigh any earlier key, so every key is kept; the keys and values of
    a group of query heads are shared (grouped-query heads)."""

    grouped_query = True

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        lead = (self.batch, self.kv_heads, self.max_len)
        self.keys = torch.zeros(*lead, self.head_dim, device=self.device, dtype=self.dtype)
        self.values = torch.zeros(*lead, self.value_dim, device=self.device, dtype=self.dtype)

    def state_size(self, n):
        return n * self.kv_heads * (self.head_dim + self.value_dim)

    def state_tensors(self):
        return [self.keys[:, :, : self.position], self.values[:, :, : self.position]]

    def _extend(self, q, k, v):
        t, n = self.position, q.shape[-2]
        self.keys[:, :, t : t + n] = F.normalize(k, dim=-1)
        self.values[:, :, t : t + n] = v
        # query t + i sees keys 0 … t + i
        visible = torch.ones(n, t + n, dtype=torch.bool, device=q.device).tril(diagonal=t)
        return F.scaled_dot_product_attention(
            F.normalize(q, dim=-1),
            self.keys[:, :, : t + n],
            self.values[:, :, : t + n],
            attn_mask=visible,
            scale=self.variant.params.scale,
            enable_gqa=self.group > 1,
        )
