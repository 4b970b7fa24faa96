"""The compression task's model, MAD's auto-encoder layout on the shared model.

The encoder is the shared model (`attnbench.toolkit.model.SequenceModel`, causal, the variant's
attention in each block) and keeps only the last position's state: the compression token, the one
position that has seen the whole sequence. The decoder is MAD's fixed one: that single vector plus a
sinusoidal embedding of each position, a non-expanding two-layer MLP (norm, linear, GELU, twice),
then a norm and the vocabulary head. So everything the decoder knows about the sequence went through
one position of the variant's output.
"""

from __future__ import annotations

import torch
from torch import nn

from attnbench.toolkit.model import ModelConfig, SequenceModel


def sinusoidal_positions(n: int, d: int) -> torch.Tensor:
    """(n, d): position t's sin(t·ω_i) in the first half, cos(t·ω_i) in the second, with
    ω_i = 10000^(−i/(d/2 − 1)) (the transformer's table laid out as MAD's ``posemb_sincos_1d``)."""
    half = d // 2
    omega = 10000.0 ** (-torch.arange(half, dtype=torch.float64) / max(1, half - 1))
    angles = torch.arange(n, dtype=torch.float64)[:, None] * omega[None, :]
    table = torch.zeros(n, d, dtype=torch.float64)
    table[:, :half], table[:, half : 2 * half] = angles.sin(), angles.cos()
    return table.float()


class AutoEncoder(nn.Module):
    """(B, N) tokens → (B, N, vocab) logits of the same tokens, decoded from the last state."""

    def __init__(self, cfg: ModelConfig, variant: str, variant_params: dict) -> None:
        super().__init__()
        self.encoder = SequenceModel(cfg, variant, variant_params)
        d = cfg.d_model
        self.register_buffer("positions", sinusoidal_positions(cfg.max_len, d), persistent=False)
        self.decoder = nn.Sequential(
            nn.LayerNorm(d), nn.Linear(d, d), nn.GELU(), nn.LayerNorm(d), nn.Linear(d, d), nn.GELU()
        )
        self.unembed = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, cfg.output_dim))

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        code = self.encoder.features(inputs)[:, -1]  # (B, d): the compression token's state
        x = code[:, None, :] + self.positions[: inputs.shape[1]].to(code.dtype)
        return self.unembed(self.decoder(x))
