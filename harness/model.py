"""The one small model every training task uses, so variants differ only in their attention.

embedding (tokens, or a linear map of vectors) + learned absolute positions → ``n_layers`` ×
[pre-LayerNorm shared multi-head attention (`harness.layer`) + pre-LayerNorm MLP] → LayerNorm →
linear head.

With ``token_shift`` (on by default for token tasks) each position's input also carries the previous
token's embedding — a width-2 causal convolution, like the short convolutions of Zoology and H3.
It binds each token to its predecessor, so retrieval (recall, copying) is left to the attention
variant rather than to learning a previous-token head from absolute positions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from attnbench.harness.layer import MultiHeadAttention


@dataclass
class ModelConfig:
    """Size of the shared model.

    Attributes:
        d_model: Width.
        n_layers: Number of blocks.
        n_heads: Attention heads per block (must divide d_model).
        mlp_ratio: MLP hidden width / d_model.
        max_len: Longest sequence (positional table size).
        vocab_size: Token vocabulary; 0 for vector inputs of width ``input_dim``.
        input_dim: Width of vector inputs (used when vocab_size is 0).
        output_dim: Width of the head's output (vocabulary logits or regression targets).
        causal: Whether attention masks the future.
        token_shift: Mix the previous position's embedding into each input (see module docstring).
    """

    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 2
    mlp_ratio: int = 4
    max_len: int = 256
    vocab_size: int = 0
    input_dim: int = 0
    output_dim: int = 1
    causal: bool = True
    token_shift: bool = False


class Block(nn.Module):
    """Pre-LayerNorm transformer block with the shared attention layer."""

    def __init__(self, cfg: ModelConfig, variant: str, variant_params: dict[str, Any]) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(cfg.d_model)
        self.attn = MultiHeadAttention(
            cfg.d_model,
            cfg.n_heads,
            variant,
            variant_params,
            max_len=cfg.max_len,
            causal=cfg.causal,
        )
        self.norm2 = nn.LayerNorm(cfg.d_model)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.d_model, cfg.mlp_ratio * cfg.d_model),
            nn.GELU(),
            nn.Linear(cfg.mlp_ratio * cfg.d_model, cfg.d_model),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class SequenceModel(nn.Module):
    """(B, N) tokens or (B, N, input_dim) vectors → (B, N, output_dim)."""

    def __init__(self, cfg: ModelConfig, variant: str, variant_params: dict[str, Any]) -> None:
        super().__init__()
        if cfg.vocab_size <= 0 and cfg.input_dim <= 0:
            raise ValueError(
                "ModelConfig needs vocab_size > 0 (tokens) or input_dim > 0 (vectors)."
            )
        self.cfg = cfg
        self.embed = (
            nn.Embedding(cfg.vocab_size, cfg.d_model)
            if cfg.vocab_size > 0
            else nn.Linear(cfg.input_dim, cfg.d_model)
        )
        self.pos = nn.Parameter(torch.randn(cfg.max_len, cfg.d_model) * 0.02)
        self.shift = nn.Linear(2 * cfg.d_model, cfg.d_model) if cfg.token_shift else None
        self.blocks = nn.ModuleList(
            Block(cfg, variant, variant_params) for _ in range(cfg.n_layers)
        )
        self.norm = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.output_dim)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        n = inputs.shape[1]
        if n > self.cfg.max_len:
            raise ValueError(
                f"sequence of {n} is longer than the model's max_len {self.cfg.max_len}."
            )
        x = self.embed(inputs)
        if self.shift is not None:
            previous = torch.cat([torch.zeros_like(x[:, :1]), x[:, :-1]], dim=1)
            x = self.shift(torch.cat([x, previous], dim=-1))
        x = x + self.pos[:n]
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))

    def attention_layers(self) -> list[MultiHeadAttention]:
        """The attention layers, first to last (for diagnostics of trained models)."""
        return [block.attn for block in self.blocks]
