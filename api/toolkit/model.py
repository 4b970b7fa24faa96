"""The one small model every training task uses, so variants differ only in their attention.

embedding (tokens, or a linear map of vectors) + learned absolute positions → ``n_layers`` ×
[pre-LayerNorm shared multi-head attention (`attnbench.toolkit.layer`) + pre-LayerNorm MLP] →
LayerNorm → linear head.

Options let a task match the model of the paper its task comes from (recall: Zoology's MQAR
baseline): ``short_conv`` puts a gated short causal convolution (Zoology's ``BaseConv``) before
each attention layer, ``mlp=False`` drops the MLPs (Zoology's identity "state mixer"),
``positions=False`` drops the positional table (the convolution and the causal mask carry order),
``tie_embeddings`` shares the token embedding with the head, ``embed_dropout`` drops embedding
units while training.

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

from attnbench.toolkit.layer import MultiHeadAttention
from attnbench.variant import mean_density


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
        mlp: Whether each block has its MLP (False: attention only, Zoology's identity state mixer).
        positions: Whether learned absolute positions are added to the embedding.
        short_conv: Kernel size of a gated short causal convolution block before each attention
            layer (`ShortConv`, Zoology's ``BaseConv``); 0: none.
        tie_embeddings: Use the token embedding as the head's weight (needs output_dim ==
            vocab_size); the head then has no bias and the table starts N(0, 0.02²), as in Zoology.
        embed_dropout: Dropout on the embedding while training (Zoology: 0.1).
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
    mlp: bool = True
    positions: bool = True
    short_conv: int = 0
    tie_embeddings: bool = False
    embed_dropout: float = 0.0


class ShortConv(nn.Module):
    """Pre-LayerNorm gated short causal convolution: x + (conv(u) ⊙ W u + u), u = LN(x).

    Zoology's ``BaseConv`` with a short kernel: a depthwise causal convolution over the last
    ``kernel`` positions, gated elementwise by a linear projection, with the block's own skip.
    It gives the next attention layer each token together with its predecessors (what an
    induction head's first layer learns), as in Zoology's attention baseline, where it is the
    layer before attention.
    """

    def __init__(self, d_model: int, kernel: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.conv = nn.Conv1d(d_model, d_model, kernel, groups=d_model, padding=kernel - 1)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        u = self.norm(x)
        # padding on both sides, keep the first N outputs: position t sees t-kernel+1 … t
        conv = self.conv(u.transpose(1, 2))[..., : u.shape[1]].transpose(1, 2)
        return x + conv * self.proj(u) + u


class Block(nn.Module):
    """Pre-LayerNorm transformer block with the shared attention layer."""

    def __init__(self, cfg: ModelConfig, variant: str, variant_params: dict[str, Any]) -> None:
        super().__init__()
        self.conv = ShortConv(cfg.d_model, cfg.short_conv) if cfg.short_conv > 0 else None
        self.norm1 = nn.LayerNorm(cfg.d_model)
        self.attn = MultiHeadAttention(
            cfg.d_model,
            cfg.n_heads,
            variant,
            variant_params,
            max_len=cfg.max_len,
            causal=cfg.causal,
        )
        self.norm2 = nn.LayerNorm(cfg.d_model) if cfg.mlp else None
        self.mlp = (
            nn.Sequential(
                nn.Linear(cfg.d_model, cfg.mlp_ratio * cfg.d_model),
                nn.GELU(),
                nn.Linear(cfg.mlp_ratio * cfg.d_model, cfg.d_model),
            )
            if cfg.mlp
            else None
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.conv is not None:
            x = self.conv(x)
        x = x + self.attn(self.norm1(x))
        if self.mlp is None:
            return x
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
        self.pos = (
            nn.Parameter(torch.randn(cfg.max_len, cfg.d_model) * 0.02) if cfg.positions else None
        )
        self.shift = nn.Linear(2 * cfg.d_model, cfg.d_model) if cfg.token_shift else None
        self.dropout = nn.Dropout(cfg.embed_dropout)
        self.blocks = nn.ModuleList(
            Block(cfg, variant, variant_params) for _ in range(cfg.n_layers)
        )
        self.norm = nn.LayerNorm(cfg.d_model)
        tie = cfg.tie_embeddings and cfg.vocab_size > 0
        if tie and cfg.output_dim != cfg.vocab_size:
            raise ValueError(
                f"tie_embeddings needs output_dim == vocab_size, got {cfg.output_dim} and "
                f"{cfg.vocab_size}; untie them or make them equal."
            )
        self.head = nn.Linear(cfg.d_model, cfg.output_dim, bias=not tie)
        if tie:
            # Zoology's initialisation: a unit-variance table as the head would start with
            # logits of standard deviation √d_model
            nn.init.normal_(self.embed.weight, std=0.02)
            self.head.weight = self.embed.weight

    def features(self, inputs: torch.Tensor) -> torch.Tensor:
        """(B, N, d_model): the normalised last hidden states, before the head (a task that
        scores few positions applies ``head`` to those only)."""
        n = inputs.shape[1]
        if self.pos is not None and n > self.cfg.max_len:
            raise ValueError(
                f"sequence of {n} is longer than the model's max_len {self.cfg.max_len}."
            )
        x = self.embed(inputs)
        if self.shift is not None:
            previous = torch.cat([torch.zeros_like(x[:, :1]), x[:, :-1]], dim=1)
            x = self.shift(torch.cat([x, previous], dim=-1))
        if self.pos is not None:
            x = x + self.pos[:n]
        x = self.dropout(x)
        for block in self.blocks:
            x = block(x)
        return self.norm(x)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(inputs))

    def attention_layers(self) -> list[MultiHeadAttention]:
        """The attention layers, first to last (for diagnostics of trained models)."""
        return [block.attn for block in self.blocks]

    def density(self, n: int) -> float:
        """Mean `AttentionVariant.density` of the attention layers for a sequence of n (each
        layer's own pattern, as trained so far)."""
        return mean_density([a.attention for a in self.attention_layers()], n, n, self.cfg.causal)
