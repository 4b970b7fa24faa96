"""The shared multi-head attention layer: projections → variant → output projection.

Variants only mix per-head tensors; every model in attnbench (the training tasks) wraps them in
this one layer, so variants are compared with identical projections and head layout.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from attnbench.variant import AttentionVariant, VariantShape, build_variant, gate_width


class MultiHeadAttention(nn.Module):
    """x: (B, N, d_model) → (B, N, d_model) with the attention variant ``variant`` per head.

    Args:
        d_model: Model width; must be divisible by ``n_heads``.
        n_heads: Number of heads H; head_dim = d_model / H.
        variant: Registered variant name.
        variant_params: Its hyperparameters (defaults for the rest).
        max_len: Longest sequence the layer will see.
        causal: Whether the layer masks the future.
        bias: Whether the projections have biases.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        variant: str,
        variant_params: dict[str, Any] | None = None,
        *,
        max_len: int = 4096,
        causal: bool = False,
        bias: bool = True,
    ) -> None:
        super().__init__()
        if n_heads < 1 or d_model % n_heads != 0:
            raise ValueError(
                f"n_heads={n_heads} must divide d_model={d_model}; pick a divisor of {d_model}."
            )
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        self.causal = causal
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out = nn.Linear(d_model, d_model, bias=bias)
        self.attention: AttentionVariant = build_variant(
            variant, variant_params, VariantShape(n_heads, self.head_dim, max_len)
        )
        # a gated variant's gates come from the input like q, k and v: one linear map each
        # (attnbench.variant, "Gates"); none for an ungated variant, so its layer is unchanged
        self.gate_proj = nn.ModuleDict(
            {
                name: nn.Linear(d_model, n_heads * gate_width(width, self.head_dim), bias=True)
                for name, width in self.attention.gates.items()
            }
        )

    def project_gates(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """The variant's raw gates from x (B, N, d_model): name → (B, H, N, width); {} for an
        ungated variant."""
        b, n, _ = x.shape
        return {
            name: proj(x).view(b, n, self.n_heads, -1).transpose(1, 2)
            for name, proj in self.gate_proj.items()
        }

    def split_heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Project x to per-head q, k, v of shape (B, H, N, head_dim)."""
        b, n, _ = x.shape
        qkv = self.qkv(x).view(b, n, 3, self.n_heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        return q, k, v

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.split_heads(x)
        if self.gate_proj:
            gates = self.project_gates(x)
            mixed = self.attention(q, k, v, causal=self.causal, gates=gates)
        else:
            mixed = self.attention(q, k, v, causal=self.causal)  # (B, H, N, head_dim)
        b, h, n, d = mixed.shape
        return self.out(mixed.transpose(1, 2).reshape(b, n, h * d))
