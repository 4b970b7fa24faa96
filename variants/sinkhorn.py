"""Sinkhorn (doubly stochastic) attention — Sinkformers (Sander et al. 2022), theory.md §1.

The plan P = diag(e^f)·exp(L)·diag(e^g), L = QKᵀ/(√d·ε), is found by alternating row and column
normalisation in the log domain: a row half-step sets f_i = −logsumexp_j(L_ij + g_j) (rows sum to
1), a column half-step sets g_j = log(N/M) − logsumexp_i(L_ij + f_i) (columns sum to N/M).
Conventions (Sinkformers'): ``n_iters`` counts half-steps and starts with rows, so one half-step
is exactly softmax. Nothing is ever divided: every update is a log-sum-exp.

Memory: L is never held whole. A row half-step and the column half-step after it share one pass
over query chunks (O(chunk·M) live): a chunk's rows are complete, so its row softmax
P = exp(L + g + f) is final within the chunk, and the column step only needs the column sums of P
accumulated over chunks, g ← g + log(N/M) − log Σ_i P_ij. So n_iters = 3 costs one such pass plus
the last row half-step, which is softmax(L + g): one fused `F.scaled_dot_product_attention` call
with g as an additive mask. An even n_iters ends on a column step, whose plan is the previous row
softmax with column j scaled by exp(g_new − g_old)_j: the same SDPA call on scaled values. So
n_iters = 2k and 2k + 1 cost the same: k passes and one SDPA call. Where a column sum is too
small for float precision (a key no query attends to, at very low temperature) the pass is redone
exactly in the log domain, with log-sum-exps over rows and columns. Passes fold (B, H) into one
batch so that `torch.baddbmm` adds the potential inside the GEMM; chunks are sized to stay in
cache (`CHUNK_BYTES`). Limits converge slowly when L has a large spread: measure the marginal
error (`marginal_error`) rather than assume it. Not causal: column normalisation couples every
query to every key.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from attnbench import AttentionVariant, VariantShape, register_variant
from attnbench.variants.kernels.blocksparse import rows_per_chunk

CHUNK_BYTES = 8 * 1024 * 1024  # logits of one chunk of a fused pass (best of 2-16 MiB, 2 CPU cores)
SHIFT_LIMIT = 60.0  # largest column shift folded into the values (e^60 ≪ float32's e^88)


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
        """Column log-potentials (g before the last column half-step, g after it), (B, H, M).

        Every (row, column) pair of half-steps is one fused pass; the final row half-step of an
        odd n_iters is left to `forward`. Row potentials are never stored: they follow from g.
        """
        bsz, heads, n, d = q.shape
        m = k.shape[-2]
        q3 = q.reshape(bsz * heads, n, d)  # (B, H) folded: baddbmm adds the bias in the GEMM
        kt3 = k.reshape(bsz * heads, m, d).transpose(1, 2)
        g_prev = g = q.new_zeros(bsz * heads, m)
        for _ in range(self.params.n_iters // 2):
            g_prev, g = g, self._row_then_column(q3, kt3, g, self._scale(q))
        return g_prev.reshape(bsz, heads, m), g.reshape(bsz, heads, m)

    @staticmethod
    def _row_then_column(q3, kt3, g, scale):
        """g after one row half-step then one column half-step, in one pass over query chunks."""
        bh, n, m = q3.shape[0], q3.shape[1], kt3.shape[2]
        step = max(1, CHUNK_BYTES // (bh * m * q3.element_size()))
        bias = g.unsqueeze(-2)
        inplace = not (torch.is_grad_enabled() and (q3.requires_grad or kt3.requires_grad))
        col_sum = q3.new_zeros(bh, 1, m)
        ones = q3.new_ones(bh, 1, step)
        for s in range(0, n, step):
            logits = torch.baddbmm(bias, q3[:, s : s + step], kt3, alpha=scale)  # L + g
            if inplace:  # the row softmax written over the logits, no second chunk in memory
                probs = torch.ops.aten._softmax.out(logits, -1, False, out=logits)
                col_sum.baddbmm_(ones[:, :, : probs.shape[1]], probs)  # column sums as a GEMM
            else:
                col_sum = col_sum + logits.softmax(-1).sum(-2, keepdim=True)
        col_sum = col_sum.squeeze(1)
        # each term of a column sum is flushed below float's smallest normal: a sum this far above
        # n of those loses at most 1e-7 of itself; below, redo the pass in the log domain
        if bool((col_sum >= n * torch.finfo(q3.dtype).tiny * 1e7).all()):
            return g + math.log(n / m) - col_sum.log()
        return SinkhornAttention._row_then_column_log(q3, kt3, g, scale)

    @staticmethod
    def _row_then_column_log(q3, kt3, g, scale):
        """`_row_then_column` with log-sum-exps only: exact where probabilities underflow."""
        n, m = q3.shape[1], kt3.shape[2]
        step = rows_per_chunk(q3.unsqueeze(0), m)
        starts = range(0, n, step)
        f = -torch.cat(
            [
                torch.baddbmm(g.unsqueeze(-2), q3[:, s : s + step], kt3, alpha=scale).logsumexp(-1)
                for s in starts
            ],
            dim=-1,
        )
        bias = f.unsqueeze(-1)
        parts = [
            torch.baddbmm(bias[:, s : s + step], q3[:, s : s + step], kt3, alpha=scale).logsumexp(
                -2
            )
            for s in starts
        ]
        return math.log(n / m) - torch.stack(parts).logsumexp(dim=0)

    def forward(self, q, k, v, causal=False):
        self.check_inputs(q, k, v, causal)
        g_prev, g = self.potentials(q, k)
        scale = self._scale(q)
        if self.params.n_iters % 2 == 1:  # the final row half-step is softmax(L + g): fused SDPA
            return F.scaled_dot_product_attention(q, k, v, attn_mask=g.unsqueeze(-2), scale=scale)
        # even: the plan is the last row step's softmax(L + g_prev) with column j scaled by
        # exp(g − g_prev), so scaling value j instead makes it one fused SDPA call, as long as
        # the scales stay well inside float range
        shift = g - g_prev
        if bool(shift.max() < SHIFT_LIMIT):
            scaled = v * shift.exp().unsqueeze(-1)
            return F.scaled_dot_product_attention(
                q, k, scaled, attn_mask=g_prev.unsqueeze(-2), scale=scale
            )
        kt = k.transpose(-2, -1)
        step = rows_per_chunk(q, k.shape[-2])
        outs = []
        for s in range(0, q.shape[-2], step):
            logits = (q[:, :, s : s + step] @ kt) * scale
            lse = (logits + g_prev.unsqueeze(-2)).logsumexp(-1, keepdim=True)
            outs.append(torch.exp(logits + g.unsqueeze(-2) - lse) @ v)
        return torch.cat(outs, dim=2)

    def attention_weights(self, q, k, causal=False):
        g_prev, g = self.potentials(q, k)
        logits = (q @ k.transpose(-2, -1)) * self._scale(q)
        if self.params.n_iters % 2 == 1:
            return torch.softmax(logits + g.unsqueeze(-2), dim=-1)
        log_rows = (logits + g_prev.unsqueeze(-2)).log_softmax(dim=-1)
        return torch.exp(log_rows + (g - g_prev).unsqueeze(-2))

    @staticmethod
    def marginal_error(weights: torch.Tensor) -> tuple[float, float]:
        """(max |row sum − 1|, max |column sum − N/M|) of a (…, N, M) plan."""
        n, m = weights.shape[-2:]
        rows = (weights.sum(-1) - 1).abs().max().item()
        cols = (weights.sum(-2) - n / m).abs().max().item()
        return rows, cols

    def forward_flops(self, batch, heads, n, m, d, dv, causal) -> float:
        """The score GEMMs this kernel runs, plus the value mix: one score pass per *pair* of
        half-steps (`_row_then_column` fuses a row and a column step into one pass), and one for
        the final row step, fused with the mix in SDPA: D·(n_iters // 2 + 1) + Dv per pair.
        (It counted one pass per half-step, D·n_iters, until `torch.utils.flop_counter` showed
        the kernel does 3/4 of that at n_iters = 3.) The log-domain fallback, taken only where
        probabilities underflow, does two passes per pair and is not counted."""
        passes = self.params.n_iters // 2 + 1
        return 2.0 * batch * heads * n * m * (d * passes + dv)
