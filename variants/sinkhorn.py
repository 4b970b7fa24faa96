"""Sinkhorn (doubly stochastic) attention — Sinkformers (Sander et al. 2022), theory.md §1.

The plan P = diag(e^f)·exp(L)·diag(e^g), L = QKᵀ/(√d·ε), is found by alternating row and column
normalisation in the log domain: a row half-step sets f_i = −logsumexp_j(L_ij + g_j) (rows sum to
1), a column half-step sets g_j = log(N/M) − logsumexp_i(L_ij + f_i) (columns sum to N/M).
Conventions (Sinkformers'): ``n_iters`` counts half-steps and starts with rows, so one half-step
is exactly softmax. Nothing is ever divided: every update is a log-sum-exp.

Memory: L is never held whole. Each half-step is one pass over query chunks (O(chunk·M) live);
column log-sum-exps are accumulated across chunks. The last half-step, when it is a row step, is
softmax(L + g): one fused `F.scaled_dot_product_attention` call with g as an additive mask.
Row and column passes fold (B, H) into one batch so that `torch.baddbmm` adds the potential inside
the GEMM. Limits converge slowly when L has a large spread: measure the marginal error
(`marginal_error`) rather than assume it. Not causal: column normalisation couples every
query to every key.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from attnbench import AttentionVariant, VariantShape, register_variant
from attnbench.variants.blocksparse import rows_per_chunk


@dataclass
class SinkhornParams:
    """Hyperparameters of `sinkhorn`."""

    n_iters: int = 3  # Sinkhorn half-steps, rows first; 1 = softmax
    temperature: float = 1.0  # ε: logits are QKᵀ/(√d·ε)


@register_variant("sinkhorn")
class SinkhornAttention(AttentionVariant):
    """Doubly stochastic attention by log-domain Sinkhorn half-steps."""

    family = "sinkhorn"
    cost = "n²"
    supports_causal = False
    Params = SinkhornParams

    def __init__(self, params: SinkhornParams, shape: VariantShape) -> None:
        super().__init__(params, shape)
        if params.n_iters < 1:
            raise ValueError(f"sinkhorn n_iters must be >= 1 (1 = softmax), got {params.n_iters}.")
        if not params.temperature > 0:
            raise ValueError(f"sinkhorn temperature must be > 0, got {params.temperature}.")

    def _scale(self, q: torch.Tensor) -> float:
        return 1.0 / (math.sqrt(q.shape[-1]) * self.params.temperature)

    def potentials(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-potentials (f, g) after all half-steps except a final row step (see forward)."""
        bsz, heads, n, d = q.shape
        m = k.shape[-2]
        scale = self._scale(q)
        q3 = q.reshape(bsz * heads, n, d)  # (B, H) folded: baddbmm adds the bias in the GEMM
        kt3 = k.reshape(bsz * heads, m, d).transpose(1, 2)
        step = rows_per_chunk(q, m)
        starts = range(0, n, step)
        f = q.new_zeros(bsz * heads, n)
        g = q.new_zeros(bsz * heads, m)
        col_mass = math.log(n / m)
        last = self.params.n_iters if self.params.n_iters % 2 == 0 else self.params.n_iters - 1
        for half_step in range(1, last + 1):
            if half_step % 2:  # rows: f_i = −logsumexp_j(L_ij + g_j)
                bias = g.unsqueeze(-2)
                f = -torch.cat(
                    [
                        torch.baddbmm(bias, q3[:, s : s + step], kt3, alpha=scale).logsumexp(-1)
                        for s in starts
                    ],
                    dim=-1,
                )
            else:  # columns: g_j = log(N/M) − logsumexp_i(L_ij + f_i), accumulated over chunks
                bias = f.unsqueeze(-1)
                parts = [
                    torch.baddbmm(
                        bias[:, s : s + step], q3[:, s : s + step], kt3, alpha=scale
                    ).logsumexp(-2)
                    for s in starts
                ]
                g = col_mass - torch.stack(parts).logsumexp(dim=0)
        return f.reshape(bsz, heads, n), g.reshape(bsz, heads, m)

    def forward(self, q, k, v, causal=False):
        self.check_inputs(q, k, v, causal)
        f, g = self.potentials(q, k)
        scale = self._scale(q)
        if self.params.n_iters % 2 == 1:  # the final row half-step is softmax(L + g): fused SDPA
            return F.scaled_dot_product_attention(q, k, v, attn_mask=g.unsqueeze(-2), scale=scale)
        kt = k.transpose(-2, -1)
        step = rows_per_chunk(q, k.shape[-2])
        outs = []
        for s in range(0, q.shape[-2], step):
            logits = (q[:, :, s : s + step] @ kt) * scale + g.unsqueeze(-2)
            outs.append(torch.exp(logits + f[:, :, s : s + step].unsqueeze(-1)) @ v)
        return torch.cat(outs, dim=2)

    def attention_weights(self, q, k, causal=False):
        f, g = self.potentials(q, k)
        logits = (q @ k.transpose(-2, -1)) * self._scale(q) + g.unsqueeze(-2)
        if self.params.n_iters % 2 == 1:
            return torch.softmax(logits, dim=-1)
        return torch.exp(logits + f.unsqueeze(-1))

    @staticmethod
    def marginal_error(weights: torch.Tensor) -> tuple[float, float]:
        """(max |row sum − 1|, max |column sum − N/M|) of a (…, N, M) plan."""
        n, m = weights.shape[-2:]
        rows = (weights.sum(-1) - 1).abs().max().item()
        cols = (weights.sum(-2) - n / m).abs().max().item()
        return rows, cols

    def forward_flops(self, batch, heads, n, m, d, dv, causal) -> float:
        """One score pass per half-step, plus the value mix."""
        return 2.0 * batch * heads * n * m * (d * self.params.n_iters + dv)
