"""Kernelised attention without softmax: `linear` (normalised) and `identity` (unnormalised).

`linear`: φ(q)·Σφ(k)vᵀ / (φ(q)·Σφ(k) + eps) (Katharopoulos et al. 2020). Cost is linear in the
sequence length: keys and values are summarised in a (D, Dv) state; the causal form is chunkwise
(`variants.kernels.prefix_sums`).

`identity`: attention with h = identity, (QKᵀ/√d)·V / M (theory.md §3: least squares is this
attention with whitened features). Computed as Q·(KᵀV) — the same linear-cost association.

Both take grouped-query heads natively: the state KᵀV (and Σφ(k)) is computed once per key/value
head and read by the query heads of its group, so fewer key/value heads save that work.

Their incremental forms keep that state (`variants.decoding.RecurrentState`): a D×Dv matrix per
key/value head, plus a D-vector normaliser for linear, Σφ(k)vᵀ and Σφ(k) over past tokens, the
same size at every length.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from attnbench import (
    AttentionVariant,
    VariantShape,
    per_query_head,
    register_incremental,
    register_variant,
)
from attnbench.masks import causal_pattern
from attnbench.variants.decoding import RecurrentState
from attnbench.variants.kernels.prefix_sums import (
    causal_kernel_sums,
    checked_chunk,
    machine_chunk,
)

FEATURE_MAPS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "elu1": lambda x: F.elu(x) + 1.0,
    "relu": F.relu,
    "identity": lambda x: x,  # plain linear attention: the normaliser can vanish or change sign
}


def _linear_flops(
    variant: AttentionVariant, b: int, h: int, n: int, m: int, d: int, dv: int, causal: bool, c: int
) -> float:
    """FLOPs of the association Q·(KᵀV): the state KᵀV, once per key/value head; the readout
    Q·S and (causal) the C×C blocks within chunks, per query head. ``h`` query heads share
    key/value heads as the instance's shape does (H_kv of every H), so under grouped-query heads
    the state is counted as often as it is computed, not once per query head."""
    kv = h * variant.shape.kv_heads / variant.shape.n_heads
    if causal:
        return 2.0 * b * n * (h * min(c, n) * (d + dv) + (h + kv) * d * dv)
    return 2.0 * b * (h * n + kv * m) * d * dv


@dataclass
class LinearParams:
    """Hyperparameters of `linear`."""

    feature_map: str = "elu1"  # φ applied to queries and keys: elu1, relu or identity
    # causal form: positions per chunk (C×C work inside, prefix sums across); 0: chosen on the
    # machine (`prefix_sums.machine_chunk`)
    chunk_size: int = 0
    eps: float = 1e-6  # added to the normaliser φ(q)·Σφ(k) so that it never divides by zero


@register_variant("linear")
class LinearAttention(AttentionVariant):
    """Kernelised linear attention with a feature map; chunkwise when causal."""

    family = "linear"
    cost = "n"
    supports_causal = True
    grouped_query = True  # one state per key/value head (module docstring)
    Params = LinearParams

    def __init__(self, params: LinearParams, shape: VariantShape) -> None:
        super().__init__(params, shape)
        if params.feature_map not in FEATURE_MAPS:
            raise ValueError(
                f"linear feature_map {params.feature_map!r} is not known; "
                f"valid: {', '.join(sorted(FEATURE_MAPS))}."
            )
        self.last_chunk = checked_chunk("linear", params.chunk_size)  # the last call's
        if not params.eps >= 0:  # a negative eps can cancel the normaliser: a division by ~0
            raise ValueError(f"linear eps must be >= 0, got {params.eps}; try 1e-6.")
        self.phi = FEATURE_MAPS[params.feature_map]

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False
    ) -> torch.Tensor:
        self.check_inputs(q, k, v, causal)
        if causal:
            phi, eps = self.phi, self.params.eps
            c = self.params.chunk_size or machine_chunk(self.name, q, k, v, None, phi, eps)
            self.last_chunk = c
            return causal_kernel_sums(q, k, v, c, feature_map=phi, eps=eps)
        fq, fk = self.phi(q), self.phi(k)
        num = per_query_head(fq, fk.transpose(-2, -1) @ v)
        den = per_query_head(fq, fk.sum(dim=-2).unsqueeze(-1))
        return num / (den + self.params.eps)

    def attention_weights(
        self, q: torch.Tensor, k: torch.Tensor, causal: bool = False
    ) -> torch.Tensor:
        scores = self.phi(q) @ self.phi(k).transpose(-2, -1)
        if causal:
            scores = scores * causal_pattern(q.shape[-2], k.shape[-2], q.device)
        return scores / (scores.sum(dim=-1, keepdim=True) + self.params.eps)

    def forward_flops(self, batch, heads, n, m, d, dv, causal) -> float:
        """Work this implementation does (not the dense-equivalent count)."""
        return _linear_flops(self, batch, heads, n, m, d, dv, causal, self.last_chunk)


@dataclass
class IdentityParams:
    """Hyperparameters of `identity`."""

    chunk_size: int = 0  # causal form: positions per chunk; 0: chosen on the machine


@register_variant("identity")
class IdentityAttention(AttentionVariant):
    """(QKᵀ/√d)·V / M with no normalisation (h = identity), at linear cost."""

    family = "unnormalised"
    estimator = "least_squares"  # theory §3: least squares is attention without normalisation
    cost = "n"
    supports_causal = True
    grouped_query = True  # one state per key/value head (module docstring)
    Params = IdentityParams

    def __init__(self, params: IdentityParams, shape: VariantShape) -> None:
        super().__init__(params, shape)
        self.last_chunk = checked_chunk("identity", params.chunk_size)  # the last call's

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False
    ) -> torch.Tensor:
        self.check_inputs(q, k, v, causal)
        scale = 1.0 / (math.sqrt(q.shape[-1]) * k.shape[-2])
        if causal:
            c = self.params.chunk_size or machine_chunk(self.name, q, k, v, scale=scale)
            self.last_chunk = c
            return causal_kernel_sums(q, k, v, c, scale=scale)
        return per_query_head(q * scale, k.transpose(-2, -1) @ v)

    def attention_weights(
        self, q: torch.Tensor, k: torch.Tensor, causal: bool = False
    ) -> torch.Tensor:
        weights = q @ k.transpose(-2, -1) / (math.sqrt(q.shape[-1]) * k.shape[-2])
        if causal:
            weights = weights * causal_pattern(q.shape[-2], k.shape[-2], q.device)
        return weights

    def forward_flops(self, batch, heads, n, m, d, dv, causal) -> float:
        return _linear_flops(self, batch, heads, n, m, d, dv, causal, self.last_chunk)


@register_incremental("identity")
class IdentityIncremental(RecurrentState):
    """S = Σ k vᵀ; out = q·S / (√D·M) with M = ``max_len`` (identity's causal normaliser)."""

    def _extend(self, q, k, v):
        scale = 1 / (math.sqrt(q.shape[-1]) * self.max_len)
        if q.shape[-2] == 1:  # a step: fold the token in, then read S_t
            self.state.add_(k.transpose(-2, -1) @ v)
            return self.per_query_head(q, self.state).mul_(scale)
        out = self.per_query_head(q, self.state) * scale
        chunk = self.variant.last_chunk
        out = out + causal_kernel_sums(q, self.repeat_kv(k), self.repeat_kv(v), chunk, scale=scale)
        self.state += k.transpose(-2, -1) @ v
        return out


@register_incremental("linear")
class LinearIncremental(RecurrentState):
    """S = Σ φ(k)vᵀ and z = Σ φ(k); out = φ(q)·S / (φ(q)·z + eps)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.key_sum = torch.zeros(
            self.batch, self.kv_heads, self.head_dim, 1, device=self.device, dtype=self.dtype
        )

    def state_size(self, n: int) -> int:
        return self.kv_heads * self.head_dim * (self.value_dim + 1)

    def state_tensors(self) -> list[torch.Tensor]:
        return [self.state, self.key_sum]

    def _extend(self, q, k, v):
        phi, eps = self.variant.phi, self.variant.params.eps
        fq, fk = phi(q), phi(k)
        if q.shape[-2] == 1:  # a step: fold the token in, then read
            self.state.add_(fk.transpose(-2, -1) @ v)
            self.key_sum.add_(fk.transpose(-2, -1))
            num = self.per_query_head(fq, self.state)
            return num / (self.per_query_head(fq, self.key_sum) + eps)
        num = self.per_query_head(fq, self.state)
        den = self.per_query_head(fq, self.key_sum)
        # the new tokens among themselves: values with a column of ones give the normaliser
        ones = v.new_ones(*v.shape[:-1], 1)
        values = self.repeat_kv(torch.cat([v, ones], dim=-1))
        inner = causal_kernel_sums(fq, self.repeat_kv(fk), values, self.variant.last_chunk)
        num, den = num + inner[..., :-1], den + inner[..., -1:]
        self.state += fk.transpose(-2, -1) @ v
        self.key_sum += fk.sum(dim=-2, keepdim=True).transpose(-2, -1)
        return num / (den + eps)
