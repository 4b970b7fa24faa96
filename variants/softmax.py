"""Softmax (scaled dot product) attention with a temperature.

Row-wise softmax(QKᵀ/(√d·ε)) is the semi-relaxed entropic optimal-transport plan (theory.md §1):
ε → 0 gives a hard argmax, ε → ∞ uniform rows. The forward pass is
`F.scaled_dot_product_attention`, so fused kernels (flash, memory-efficient, cuDNN) are used where
the device has them; the n×n matrix is materialised only by `attention_weights`.

Its incremental form (`SoftmaxIncremental`) keeps a KV cache of every key and value
(`variants.decoding.KeyValueCache`): a later query may weigh any earlier key, so none can be
dropped. A step is one SDPA call of the new query over the cache.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from attnbench import AttentionVariant, VariantShape, register_incremental, register_variant
from attnbench.masks import apply_pattern, causal_pattern
from attnbench.variants.decoding import KeyValueCache, masked_sdpa


@dataclass
class SoftmaxParams:
    """Hyperparameters of `softmax`."""

    temperature: float = 1.0  # ε > 0: logits are QKᵀ/(√d·ε); small ε sharpens, large ε flattens
    learn_temperature: bool = (
        False  # learn a per-head ε_h = softplus(θ_h), initialised at temperature
    )


@register_variant("softmax")
class SoftmaxAttention(AttentionVariant):
    """softmax(QKᵀ/(√d·ε))·V via `F.scaled_dot_product_attention`."""

    family = "softmax"
    cost = "n²"
    supports_causal = True
    grouped_query = True  # SDPA's grouped-query path reads each key/value head for its group
    Params = SoftmaxParams

    def __init__(self, params: SoftmaxParams, shape: VariantShape) -> None:
        super().__init__(params, shape)
        if not params.temperature > 0:
            raise ValueError(f"softmax temperature must be > 0, got {params.temperature}; try 1.0.")
        if params.learn_temperature:
            # softplus⁻¹(ε) = log(e^ε − 1), so that softplus(θ_h) starts at the given temperature
            theta0 = math.log(math.expm1(params.temperature))
            self.theta = nn.Parameter(torch.full((shape.n_heads,), theta0))

    def temperatures(self) -> torch.Tensor | float:
        """ε: a float, or a (H,) tensor when it is learned."""
        if self.params.learn_temperature:
            return F.softplus(self.theta)
        return self.params.temperature

    def _scaled_queries(self, q: torch.Tensor) -> tuple[torch.Tensor, float]:
        """Queries and SDPA scale such that (q·k)·scale = q·k/(√d·ε)."""
        eps = self.temperatures()
        if isinstance(eps, float):
            return q, 1.0 / (math.sqrt(q.shape[-1]) * eps)
        return q / eps.to(q.dtype).view(1, -1, 1, 1), 1.0 / math.sqrt(q.shape[-1])

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False
    ) -> torch.Tensor:
        self.check_inputs(q, k, v, causal)
        q, scale = self._scaled_queries(q)
        gqa = k.shape[1] != q.shape[1]
        return F.scaled_dot_product_attention(
            q, k, v, is_causal=causal, scale=scale, enable_gqa=gqa
        )

    def backward_flops(self, batch, heads, n, m, d, dv, causal) -> float:
        """2.5× the forward: SDPA's flash backward recomputes the scores (one product more than
        autograd's two per forward product), FlashAttention's convention."""
        return 2.5 * self.forward_flops(batch, heads, n, m, d, dv, causal)

    def attention_weights(
        self, q: torch.Tensor, k: torch.Tensor, causal: bool = False
    ) -> torch.Tensor:
        q, scale = self._scaled_queries(q)
        logits = (q @ k.transpose(-2, -1)) * scale
        if causal:
            logits = apply_pattern(logits, causal_pattern(q.shape[-2], k.shape[-2], q.device))
        return torch.softmax(logits, dim=-1)


@register_incremental("softmax")
class SoftmaxIncremental(KeyValueCache):
    """Softmax with a KV cache: a step is one SDPA call of one query over the cache."""

    def _attend(self, q, t, keys, values):
        q, scale = self.variant._scaled_queries(q)
        return masked_sdpa(q, t, keys, values, scale)
