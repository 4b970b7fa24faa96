"""Banded softmax attention on CPU: each query sees a contiguous band of keys, no gather.

Query i sees keys j with i − before ≤ j ≤ i + after (N = M), the shape of a sliding window.
Queries are cut into blocks of ``block``; block c's keys are one contiguous range of
L = block + before + after positions, so the key and value tiles of all blocks are overlapping
*views* of K and V (`Tensor.unfold`), never copies, and every block goes through a single
`F.scaled_dot_product_attention` call (the blocks become its "heads" dimension) with one
(block, L) boolean mask shared by all blocks. Work is N·L instead of N·M; with block = 32 and a
256-token causal window 89% of the scored pairs are in the band.

The first and last few queries, whose band would leave the sequence, are two small masked calls
of their own (every query sees at least itself, so no row of a mask is empty). The masks depend
only on (before, after, block, n), so they are cached: nothing that depends only on the pattern
is rebuilt per call.

Without autograd, in float32 on a CPU, the whole band goes to a compiled kernel instead
(`tile_kernel`, built for the CPU capability torch dispatches to: blocks of 16 queries, one score
lane per query; window 64 at causal 8k in 3.0 ms on AVX-512 against 10 ms through SDPA's short
tiles); the SDPA path below serves autograd, other dtypes and devices, and machines where it
cannot be built.

Why the block size depends on autograd: measured on 2 CPU cores at N = 8192 with a 256 window,
32-query blocks are fastest forward (10× dense causal SDPA against 8× at 64), while SDPA's
backward prefers 64 (7× against 5× for forward+backward).
"""

from __future__ import annotations

import functools

import torch
from torch.nn.functional import scaled_dot_product_attention as sdpa

from attnbench.variants.kernels.tile import compiled_banded

FORWARD_BLOCK = 32  # queries per block when no gradient is needed
BACKWARD_BLOCK = 64  # queries per block when autograd records the call


# PyTorch's CPU flash kernel, which also returns the row log-sum-exp (a private op: absent in
# another build, then callers that need the log-sum-exp take their explicit path)
_CPU_FLASH = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)


def lse_available(*inputs: torch.Tensor) -> bool:
    """Whether `attention_with_lse` can run on these inputs (q, k, v): CPU, no autograd to
    record, and values of the keys' head size (the flash op refuses Dv ≠ D)."""
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in inputs)
    same_dims = len({t.shape[-1] for t in inputs}) == 1
    return _CPU_FLASH is not None and inputs[0].device.type == "cpu" and not grad and same_dims


def attention_with_lse(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, row log-sum-exp) of softmax attention over the boolean pattern ``allowed`` (CPU,
    no autograd: see `lse_available`). A row with no allowed key gives out 0 and lse −∞."""
    additive = _additive(allowed, q.dtype)
    out, lse = _CPU_FLASH(q, k, v, attn_mask=additive, scale=scale)
    empty = _empty_rows(allowed)
    return out, (lse.masked_fill(empty, float("-inf")) if empty is not None else lse)


@functools.lru_cache(maxsize=64)
def _additive(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The pattern as an additive mask (0 / −∞): the flash op takes no boolean mask."""
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill(
        ~allowed, float("-inf")
    )


@functools.lru_cache(maxsize=64)
def _empty_rows(allowed: torch.Tensor) -> torch.Tensor | None:
    """Rows of the pattern without a key (the flash op reports lse 0 there), or None."""
    empty = ~allowed.any(dim=-1)
    return empty if bool(empty.any()) else None


@functools.lru_cache(maxsize=64)
def _band_mask(rows: int, cols: int, row0: int, col0: int, before: int, after: int, device: str):
    """(rows, cols) bool: query row0 + a may see key col0 + b (the band, inside the sequence)."""
    i = torch.arange(row0, row0 + rows, device=device).view(-1, 1)
    j = torch.arange(col0, col0 + cols, device=device).view(1, -1)
    return (j >= i - before) & (j <= i + after)


def banded_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    before: int,
    after: int,
    scale: float,
    block: int = 0,
    with_lse: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Softmax attention of query i over keys [i − before, i + after] ∩ [0, N).

    Args:
        q, k, v: (B, H, N, D) with N = M (a band is positional).
        before, after: Keys seen before and after each query (causal window w: w − 1 and 0).
        scale: Logit scale.
        block: Queries per block; 0 picks `FORWARD_BLOCK` or `BACKWARD_BLOCK` (module docstring).
        with_lse: Return (out, row log-sum-exp (B, H, N)), for exact merges with other key sets
            (only where `lse_available`).
    """
    compiled = compiled_banded(q, k, v, before, after, scale)
    if compiled is not None:  # no autograd, float32 on a CPU: `tile_kernel`
        return compiled if with_lse else compiled[0]
    bsz, heads, n, d = q.shape
    dv = v.shape[-1]
    if not block:
        grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
        block = BACKWARD_BLOCK if grad else FORWARD_BLOCK
    span = block + before + after
    body_start = min(before, n)  # first query whose band starts at key 0 or later
    n_blocks = max(0, (n - after - body_start) // block)
    body_end = body_start + n_blocks * block
    device = str(q.device)
    parts, lses = [], []

    def attend(qp, kp, vp, mask):
        if not with_lse:
            return sdpa(qp, kp, vp, attn_mask=mask, scale=scale)
        out, lse = attention_with_lse(qp, kp, vp, mask, scale)
        lses.append(lse.reshape(bsz, heads, -1))
        return out

    if body_start > 0:  # head: the first queries, whose band starts before key 0
        keys = min(n, body_start + after)
        mask = _band_mask(body_start, keys, 0, 0, before, after, device)
        parts.append(attend(q[:, :, :body_start], k[:, :, :keys], v[:, :, :keys], mask))
    if n_blocks:
        fold = bsz * heads
        qb = q[:, :, body_start:body_end].reshape(fold, n_blocks, block, d)
        kb, vb = (
            x[:, :, : body_end - body_start + before + after]
            .unfold(-2, span, block)  # (B, H, blocks, D, span): overlapping views of K and V
            .transpose(-1, -2)
            .reshape(fold, n_blocks, span, x.shape[-1])
            for x in (k, v)
        )
        mask = _band_mask(block, span, before, 0, before, after, device)
        out = attend(qb, kb, vb, mask)
        parts.append(out.reshape(bsz, heads, n_blocks * block, dv))
    if body_end < n:  # tail: the last queries, whose band ends after key N − 1
        first_key = max(0, body_end - before)
        mask = _band_mask(n - body_end, n - first_key, body_end, first_key, before, after, device)
        tail = (x[:, :, first_key:] for x in (k, v))
        parts.append(attend(q[:, :, body_end:], *tail, mask))
    out = parts[0] if len(parts) == 1 else torch.cat(parts, dim=2)
    return (out, torch.cat(lses, dim=2)) if with_lse else out
