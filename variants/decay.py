"""Explicit-decay attention (linear RNN / retention): a_ij = λ^{i−j}·(q_i·k_j)/√d for j ≤ i.

The causal form is the recurrence S_t = λ·S_{t−1} + k_t v_tᵀ, out_t = q_t·S_t/√d, computed chunkwise
(`variants.kernels.prefix_sums`). Non-causal calls use the bidirectional weights λ^{|i−j|}: the
causal sums forwards plus the causal sums of the reversed sequence, minus the diagonal counted
twice. Per head, λ_h = 1 − 2^(−5−h) by default (RetNet's schedule), or one λ for all heads. The
pattern is fixed (recency only): theory.md §2 gives its sparsity S in closed form.

Its incremental form keeps S, a D×Dv matrix per head decayed by λ each token, the same size at
every length (`variants.decoding.RecurrentState`). λ is per query head, so heads that share keys
and values (grouped-query) still accumulate different states: one S per query head, as without
grouping.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from attnbench import AttentionVariant, VariantShape, register_incremental, register_variant
from attnbench.masks import causal_pattern
from attnbench.variants.decoding import RecurrentState
from attnbench.variants.kernels.prefix_sums import (
    causal_kernel_sums,
    checked_chunk,
    machine_chunk,
)


@dataclass
class DecayParams:
    """Hyperparameters of `decay`."""

    decay: float | None = None  # λ in (0, 1] for every head; None: λ_h = 1 − 2^(−5−h) per head
    # positions per chunk of the chunkwise form; 0: chosen on the machine
    # (`prefix_sums.machine_chunk`)
    chunk_size: int = 0


@register_variant("decay")
class DecayAttention(AttentionVariant):
    """λ^{i−j}-weighted unnormalised attention at linear cost (retention-style)."""

    family = "decay"
    cost = "n"
    supports_causal = True
    requires_equal_lengths = True
    Params = DecayParams

    def __init__(self, params: DecayParams, shape: VariantShape) -> None:
        super().__init__(params, shape)
        if params.decay is not None and not 0 < params.decay <= 1:
            raise ValueError(f"decay must be in (0, 1], got {params.decay}; try 0.9.")
        self.last_chunk = checked_chunk("decay", params.chunk_size)  # the last call's
        if params.decay is None:
            lam = 1 - 2.0 ** (-5 - torch.arange(shape.n_heads, dtype=torch.float64))
        else:
            lam = torch.full((shape.n_heads,), float(params.decay), dtype=torch.float64)
        self.register_buffer("log_decay", torch.log(lam).float(), persistent=False)

    def decays(self) -> torch.Tensor:
        """λ per head, shape (H,)."""
        return torch.exp(self.log_decay)

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False
    ) -> torch.Tensor:
        self.check_inputs(q, k, v, causal)
        scale = 1 / math.sqrt(q.shape[-1])
        ld = self.log_decay
        c = self.params.chunk_size or machine_chunk(self.name, q, k, v, ld, scale=scale)
        self.last_chunk = c
        out = causal_kernel_sums(q, k, v, c, ld, scale=scale)
        if causal:
            return out
        qr, kr, vr = (t.flip(-2) for t in (q, k, v))  # reversed sequence: the anti-causal half
        backward = causal_kernel_sums(qr, kr, vr, c, ld, scale=scale).flip(-2)
        diagonal = (q * k).sum(-1, keepdim=True) * scale * v
        return out + backward - diagonal

    def attention_weights(
        self, q: torch.Tensor, k: torch.Tensor, causal: bool = False
    ) -> torch.Tensor:
        n, m = q.shape[-2], k.shape[-2]
        i = torch.arange(n, device=q.device)[:, None]
        j = torch.arange(m, device=q.device)[None, :]
        gaps = (i - j).abs().to(q.dtype)
        weights = torch.exp(gaps * self.log_decay.to(q.dtype).view(-1, 1, 1))
        weights = weights * (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        if causal:
            weights = weights * causal_pattern(n, m, q.device)
        return weights

    def forward_flops(self, batch, heads, n, m, d, dv, causal) -> float:
        c = min(self.last_chunk, n)
        one_pass = 2.0 * batch * heads * n * (c * (d + dv) + 2 * d * dv)
        return one_pass if causal else 2 * one_pass


@register_incremental("decay")
class DecayIncremental(RecurrentState):
    """S_t = λ·S_{t−1} + k_t v_tᵀ, out_t = q_t·S_t / √D, with λ per head: one S per query head,
    also with grouped keys and values (heads with different λ accumulate different states)."""

    state_heads_are_query_heads = True

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        log_decay = self.variant.log_decay.to(device=self.device, dtype=self.dtype)
        self.log_decay = log_decay.view(-1, 1, 1)  # (H, 1, 1)
        self.decay = torch.exp(self.log_decay)

    def _extend(self, q, k, v):
        n, scale = q.shape[-2], 1 / math.sqrt(q.shape[-1])
        k, v = self.repeat_kv(k), self.repeat_kv(v)
        if n == 1:  # a step: S_t = λ·S_{t−1} + k vᵀ, then read it
            self.state.mul_(self.decay).add_(k.transpose(-2, -1) @ v)
            return (q @ self.state).mul_(scale)
        steps = torch.arange(n, device=q.device, dtype=q.dtype).view(1, -1, 1)
        # the earlier tokens reach position t + i decayed by λ^{i+1}
        out = (q @ self.state) * torch.exp((steps + 1) * self.log_decay) * scale
        out = out + causal_kernel_sums(
            q, k, v, self.variant.last_chunk, self.variant.log_decay, scale=scale
        )
        to_end = torch.exp((n - 1 - steps) * self.log_decay)  # λ^{n−1−i}: (H, n, 1)
        self.state.mul_(torch.exp(n * self.log_decay)).add_((k * to_end).transpose(-2, -1) @ v)
        return out
