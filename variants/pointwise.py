"""Pointwise attention: weights a_ij = f(s_ij + b) with no row normalisation.

`relu2` (GAU, Hua et al. 2022): a_ij = relu(s_ij + b)² / M. `sigmoid` (Ramapuram et al. 2024):
a_ij = σ(s_ij + b), with b = −log M by default so that a row's weights sum to O(1).
Here s = QKᵀ/√d, and M is the number of keys (also in the causal form, where key j > i gets
weight 0).

Kernel: (query tile × key tile) blocks, so memory stays O(tile²) rather than O(N·M), and causal
attention skips every tile above the diagonal (half the work) and masks only the tiles that
cross it. Without a row normalisation there is no running maximum to carry: a query tile's
output is the plain sum of its key tiles' W·V products. Without autograd the weights are
computed in place in the score tile and each product is accumulated into the output with
`baddbmm_`; with autograd the same tiles are computed out of place. The tile sizes were picked
on 2 CPU cores at N = 8192 (256 × 512 keeps a tile of 4 heads in 2 MiB, within cache).

Without autograd on the CPU in float32 the forward is the compiled kernel
(`variants.kernels.pointwise`: the same tiles, fused, with sizes tuned on the machine) where it
is built; the torch path above serves every other call and is the kernel's reference.

Their incremental form (`PointwiseIncremental`) keeps a KV cache of every key and value
(`variants.decoding.KeyValueCache`): a later query may weigh any earlier key, so none can be
dropped.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from attnbench import AttentionVariant, register_incremental, register_variant
from attnbench.masks import causal_pattern, future_keys
from attnbench.variants.decoding import KeyValueCache
from attnbench.variants.kernels.pointwise import compiled_pointwise

QUERY_TILE, KEY_TILE = 256, 512

Weight = Callable[[torch.Tensor], torch.Tensor]


def pointwise_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    weight: Weight,
    weight_: Weight,
    causal: bool,
    tiles: tuple[int, int] = (QUERY_TILE, KEY_TILE),
    scale: float | None = None,
    shift: float = 0.0,
) -> torch.Tensor:
    """Σ_j weight(s_ij)·v_j over visible keys, by tiles (see the module docstring).

    ``weight`` maps a tile of scores s = scale·q·k + shift to weights out of place, ``weight_``
    in place (it may overwrite its argument and must return it); the in-place one is used
    without autograd. ``scale`` defaults to 1/√d; a variant folds what it can into the GEMM
    (`PointwiseAttention.affine`): the scale into Q once, the shift as the GEMM's addend, each
    a pass over the scores saved.
    """
    bsz, heads, n, d = q.shape
    m, dv = k.shape[-2], v.shape[-1]
    inplace = not (torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)))
    scale = 1 / math.sqrt(d) if scale is None else scale
    q3 = (q * scale).reshape(bsz * heads, n, d)  # the scale folded into Q once
    kt = k.reshape(bsz * heads, m, d).transpose(1, 2)
    v3 = v.reshape(bsz * heads, m, dv)
    rows, cols = tiles
    device = str(q.device)
    addend = q.new_full((1, 1, 1), shift) if shift else None
    out = q.new_empty(bsz * heads, n, dv) if inplace else None
    blocks = []
    for s in range(0, n, rows):
        e = min(n, s + rows)
        acc = out[:, s:e] if inplace else None
        for ks in range(0, min(m, e) if causal else m, cols):
            ke = min(m, ks + cols, e) if causal else min(m, ks + cols)
            if shift:  # the shift as the GEMM's addend: no pass of its own
                scores = torch.baddbmm(addend, q3[:, s:e], kt[:, :, ks:ke])
            else:
                scores = torch.bmm(q3[:, s:e], kt[:, :, ks:ke])
            w = weight_(scores) if inplace else weight(scores)
            if causal and ke - 1 > s:  # the tile crosses the diagonal
                future = future_keys(e - s, ke - ks, s - ks, device)
                w = w.masked_fill_(future, 0.0) if inplace else w.masked_fill(future, 0.0)
            if inplace:
                if ks == 0:
                    torch.bmm(w, v3[:, ks:ke], out=acc)
                else:
                    acc.baddbmm_(w, v3[:, ks:ke])
            else:
                acc = w @ v3[:, ks:ke] if acc is None else acc + w @ v3[:, ks:ke]
        if not inplace:
            blocks.append(acc)
    if not inplace:
        out = torch.cat(blocks, dim=1)
    return out.reshape(bsz, heads, n, dv)


class PointwiseAttention(AttentionVariant):
    """Shared body of the pointwise variants: subclasses define `weight(scores, m)`."""

    cost = "n²"
    supports_causal = True

    def weight(self, scores: torch.Tensor, m: int) -> torch.Tensor:
        """Weights from scaled scores s = q·k/√d, for M = m keys."""
        raise NotImplementedError

    def weight_(self, scores: torch.Tensor, m: int) -> torch.Tensor:
        """`weight` computed in place in ``scores`` (returned)."""
        raise NotImplementedError

    def affine(self, m: int) -> tuple[float, float]:
        """(a, b) folded into the score GEMM by `forward`: it computes a·s + b for s = q·k/√d
        (a multiplying Q once, b the GEMM's addend), and then `fused` and `fused_` on those.
        Default (1, 0): nothing folded."""
        return 1.0, 0.0

    def fused(self, scores: torch.Tensor, m: int) -> torch.Tensor:
        """`weight` of s, given a·s + b (`affine`), out of place."""
        return self.weight(scores, m)

    def fused_(self, scores: torch.Tensor, m: int) -> torch.Tensor:
        """`fused` in place in ``scores`` (returned)."""
        return self.weight_(scores, m)

    def kernel_form(self, m: int) -> tuple[str, float, float] | None:
        """(f, a, b) such that the weights are f(a·s + b) for s = q·k/√d, f one of the compiled
        kernel's functions (`variants.kernels.pointwise.KINDS`); None (a subclass with another
        weight): the torch path only."""
        return None

    def forward(self, q, k, v, causal=False):
        self.check_inputs(q, k, v, causal)
        m = k.shape[-2]
        if (form := self.kernel_form(m)) is not None:
            kind, a, b = form
            out = compiled_pointwise(q, k, v, kind, a / math.sqrt(q.shape[-1]), b, causal)
            if out is not None:
                return out
        a, b = self.affine(m)
        return pointwise_attention(
            q,
            k,
            v,
            lambda s: self.fused(s, m),
            lambda s: self.fused_(s, m),
            causal,
            scale=a / math.sqrt(q.shape[-1]),
            shift=b,
        )

    def attention_weights(self, q, k, causal=False):
        w = self.weight(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), k.shape[-2])
        if causal:
            w = w * causal_pattern(q.shape[-2], k.shape[-2], q.device)
        return w


@dataclass
class Relu2Params:
    """Hyperparameters of `relu2`."""

    bias: float = 0.0  # b in relu(s + b)²; a negative b lets the pattern focus (theory.md §2)


@register_variant("relu2")
class Relu2Attention(PointwiseAttention):
    """GAU-style relu(s + b)² / M attention."""

    family = "relu2"
    Params = Relu2Params

    def weight(self, scores, m):
        return F.relu(scores + self.params.bias).square() / m

    def weight_(self, scores, m):
        if self.params.bias:
            scores.add_(self.params.bias)
        return scores.relu_().square_().div_(m)

    # relu(s + b)² / M = relu((s + b)/√M)²: 1/√M into Q (and b/√M into the GEMM), so the
    # weights take two passes over the scores (relu, square), not three (and the division)
    def affine(self, m):
        return 1 / math.sqrt(m), self.params.bias / math.sqrt(m)

    def kernel_form(self, m):
        return ("relu2", *self.affine(m))

    def fused(self, scores, m):
        return F.relu(scores).square()

    def fused_(self, scores, m):
        return scores.relu_().square_()


@dataclass
class SigmoidParams:
    """Hyperparameters of `sigmoid`."""

    bias: float | None = None  # b in σ(s + b); None: −log M (M = number of keys)


@register_variant("sigmoid")
class SigmoidAttention(PointwiseAttention):
    """σ(s + b) attention, each weight in (0, 1), rows not normalised."""

    family = "sigmoid"
    Params = SigmoidParams

    def _bias(self, m: int) -> float:
        return -math.log(m) if self.params.bias is None else self.params.bias

    def weight(self, scores, m):
        return torch.sigmoid(scores + self._bias(m))

    def weight_(self, scores, m):
        return scores.add_(self._bias(m)).sigmoid_()

    def kernel_form(self, m):
        return "sigmoid", 1.0, self._bias(m)

    # (its bias stays a pass of its own: as the GEMM's addend (`baddbmm`) it is copied into the
    # output before the product, the same pass, measured no faster)


class PointwiseIncremental(KeyValueCache):
    """relu² and sigmoid with a KV cache; M in their weights is ``max_len`` (the causal forward's
    number of keys)."""

    def _attend(self, q, t, keys, values):
        m, variant = self.max_len, self.variant
        if t == 0 and q.shape[-2] > 1:
            # from the start: the variant's own tiled kernel over the whole reserved cache, so
            # that its M is max_len; keys not written yet (zeros) are after every query, causal
            # masking gives them weight 0 and the kernel skips their tiles
            whole = self.repeat_kv(self.keys), self.repeat_kv(self.values)
            return variant(q, *whole, causal=True)
        scale = 1 / math.sqrt(q.shape[-1])
        outs = []
        for scores, future, e in self.score_tiles(q, t, keys):
            weights = variant.weight(scores * scale, m)
            if future is not None:
                weights = weights.masked_fill(future, 0.0)
            outs.append(self.ungrouped(weights @ values[:, :, None, : t + e]))
        return torch.cat(outs, dim=2)


@register_incremental("relu2")
class Relu2Incremental(PointwiseIncremental):
    """relu(s + b)² / M with a KV cache."""


@register_incremental("sigmoid")
class SigmoidIncremental(PointwiseIncremental):
    """σ(s + b) with a KV cache (b = −log M by default)."""
