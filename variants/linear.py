"""Linear attention: φ(q)·Σφ(k)vᵀ / φ(q)·Σφ(k) (Katharopoulos et al. 2020).

Cost is linear in sequence length: the keys and values are summarised in a (D, Dv) state. The
causal form is chunkwise: inside a chunk of C positions the masked C×C products are computed
directly; across chunks a prefix sum of the per-chunk states carries the past. It equals the
explicit recurrence S_t = S_{t−1} + φ(k_t)v_tᵀ, z_t = z_{t−1} + φ(k_t),
out_t = φ(q_t)S_t / (φ(q_t)·z_t + eps) (checked in the tests).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from harness.variant_api import AttentionVariant, VariantShape, register_variant
from variants.masking import causal_pattern

FEATURE_MAPS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "elu1": lambda x: F.elu(x) + 1.0,
    "relu": F.relu,
}


@dataclass
class LinearParams:
    """Hyperparameters of `linear`."""

    feature_map: str = "elu1"  # φ applied to queries and keys: one of FEATURE_MAPS
    chunk_size: int = 64  # causal form: positions per chunk (C×C work inside, prefix sums across)
    eps: float = 1e-6  # added to the normaliser φ(q)·Σφ(k) so that it never divides by zero


@register_variant("linear")
class LinearAttention(AttentionVariant):
    """Kernelised linear attention with a positive feature map; chunkwise when causal."""

    family = "linear"
    cost = "n"
    supports_causal = True
    Params = LinearParams

    def __init__(self, params: LinearParams, shape: VariantShape) -> None:
        super().__init__(params, shape)
        if params.feature_map not in FEATURE_MAPS:
            raise ValueError(
                f"linear feature_map {params.feature_map!r} is not known; "
                f"valid: {', '.join(sorted(FEATURE_MAPS))}."
            )
        if params.chunk_size < 1:
            raise ValueError(f"linear chunk_size must be >= 1, got {params.chunk_size}.")
        self.phi = FEATURE_MAPS[params.feature_map]

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False
    ) -> torch.Tensor:
        self.check_inputs(q, k, v, causal)
        fq, fk = self.phi(q), self.phi(k)
        if causal:
            return self._causal_chunked(fq, fk, v)
        kv = fk.transpose(-2, -1) @ v  # (B, H, D, Dv)
        z = fk.sum(dim=-2)  # (B, H, D)
        num = fq @ kv
        den = (fq @ z.unsqueeze(-1)) + self.params.eps
        return num / den

    def _causal_chunked(self, fq: torch.Tensor, fk: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        b, h, n, d = fq.shape
        m, dv = fk.shape[-2], v.shape[-1]
        if m != n:
            raise ValueError(f"causal linear attention needs as many keys as queries ({n} vs {m}).")
        c = min(self.params.chunk_size, n)
        pad = (-n) % c
        if pad:  # zero features contribute nothing; padded queries are dropped below
            fq, fk, v = (F.pad(t, (0, 0, 0, pad)) for t in (fq, fk, v))
        nc = (n + pad) // c
        fq = fq.reshape(b, h, nc, c, d)
        fk = fk.reshape(b, h, nc, c, d)
        v = v.reshape(b, h, nc, c, dv)

        within = (fq @ fk.transpose(-2, -1)).masked_fill(~causal_pattern(c, c, fq.device), 0.0)
        num = within @ v
        den = within.sum(dim=-1, keepdim=True)

        chunk_kv = fk.transpose(-2, -1) @ v  # (B, H, nc, D, Dv)
        past_kv = torch.cumsum(chunk_kv, dim=2) - chunk_kv  # exclusive prefix over chunks
        chunk_z = fk.sum(dim=-2)  # (B, H, nc, D)
        past_z = torch.cumsum(chunk_z, dim=2) - chunk_z
        num = num + fq @ past_kv
        den = den + fq @ past_z.unsqueeze(-1)
        out = num / (den + self.params.eps)
        return out.reshape(b, h, nc * c, dv)[:, :, :n]

    def attention_weights(
        self, q: torch.Tensor, k: torch.Tensor, causal: bool = False
    ) -> torch.Tensor:
        scores = self.phi(q) @ self.phi(k).transpose(-2, -1)
        if causal:
            scores = scores * causal_pattern(q.shape[-2], k.shape[-2], q.device)
        return scores / (scores.sum(dim=-1, keepdim=True) + self.params.eps)

    def forward_flops(
        self, batch: int, heads: int, n: int, m: int, d: int, dv: int, causal: bool
    ) -> float:
        """Work this implementation does (not the dense-equivalent count)."""
        if causal:  # per position: C×C block scores and mix, chunk state, and readout
            c = min(self.params.chunk_size, n)
            return 2.0 * batch * heads * n * (c * (d + dv) + 2 * d * dv)
        return 2.0 * batch * heads * (n + m) * d * dv
