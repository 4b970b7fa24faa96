"""Sinkhorn (doubly stochastic) attention — Sinkformers (Sander et al. 2022), theory.md §1.

The plan P = diag(e^f)·exp(L)·diag(e^g), L = QKᵀ/(√d·ε), is found by alternating row and column
normalisation in the log domain: a row half-step sets f_i = −logsumexp_j(L_ij + g_j) (rows sum to
1), a column half-step sets g_j = log(N/M) − logsumexp_i(L_ij + f_i) (columns sum to N/M).
Conventions (Sinkformers'): ``n_iters`` counts half-steps and starts with rows, so one half-step
is exactly softmax. Nothing is ever divided: every update is a log-sum-exp.

Memory: L is never held whole. Each half-step is one pass over query chunks (O(chunk·M) live);
column log-sum-exps are accumulated across chunks. The last half-step, when it is a row step, is
fused with the output pass. Limits converge slowly when L has a large spread: measure the marginal
error (`marginal_error`) rather than assume it. Not causal: column normalisation couples every
query to every key.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from harness.variant_api import AttentionVariant, VariantShape, register_variant
from variants.blocksparse import rows_per_chunk


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

    def _chunks(self, q: torch.Tensor, m: int):
        step = rows_per_chunk(q, m)
        return range(0, q.shape[-2], step), step

    def potentials(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-potentials (f, g) after all half-steps except a final row step (see forward)."""
        n, m = q.shape[-2], k.shape[-2]
        scale, kt = self._scale(q), k.transpose(-2, -1)
        starts, step = self._chunks(q, m)
        f = q.new_zeros(q.shape[:-1])
        g = q.new_zeros(k.shape[:-1])
        col_mass = math.log(n / m)
        last = self.params.n_iters if self.params.n_iters % 2 == 0 else self.params.n_iters - 1
        for half_step in range(1, last + 1):
            if half_step % 2:  # rows
                f = torch.cat(
                    [
                        -torch.logsumexp(
                            (q[:, :, s : s + step] @ kt) * scale + g.unsqueeze(-2), dim=-1
                        )
                        for s in starts
                    ],
                    dim=-1,
                )
            else:  # columns
                parts = [
                    torch.logsumexp(
                        (q[:, :, s : s + step] @ kt) * scale + f[:, :, s : s + step].unsqueeze(-1),
                        dim=-2,
                    )
                    for s in starts
                ]
                g = col_mass - torch.stack(parts).logsumexp(dim=0)
        return f, g

    def forward(self, q, k, v, causal=False):
        self.check_inputs(q, k, v, causal)
        f, g = self.potentials(q, k)
        scale, kt = self._scale(q), k.transpose(-2, -1)
        starts, step = self._chunks(q, k.shape[-2])
        ends_with_rows = self.params.n_iters % 2 == 1
        outs = []
        for s in starts:
            logits = (q[:, :, s : s + step] @ kt) * scale + g.unsqueeze(-2)
            if ends_with_rows:  # fused final row half-step
                outs.append(torch.softmax(logits, dim=-1) @ v)
            else:
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
