"""Block-sparse softmax attention: compute only the key blocks each query block lists.

The sequence is cut into blocks of ``block`` positions. For query block c, ``key_blocks[..., c, :]``
lists the K key blocks it may see (−1 = none, entries unique per row). Only those K·block keys are
gathered and scored, so the work and memory are O(N·K·block), never O(N·M). A token-level
predicate ``allowed(qpos, kpos)`` refines the pattern inside the gathered tiles (causality, exact
window edges), and ``block_bias`` adds a per-(query block, key block) term to the logits (learned
gates). Excluded positions get a −∞ logit. Query blocks are processed in groups so that one group's
tiles stay under a fixed byte budget whatever the sequence length.

Returns the output and the row log-sum-exp, so partial attentions over disjoint key sets can be
merged exactly (`merge_partials`). A row with no allowed key outputs 0 with log-sum-exp −∞.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

TILE_BYTES = 16 * 1024 * 1024  # working-set budget of one group of query blocks (or query rows)

Predicate = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def rows_per_chunk(q: torch.Tensor, m: int, live_copies: int = 2) -> int:
    """Query rows per chunk so that ``live_copies`` (B, H, rows, m) tensors fit in TILE_BYTES."""
    per_row = live_copies * q.shape[0] * q.shape[1] * m * q.element_size()
    return max(1, TILE_BYTES // max(1, per_row))


def _pad_to(x: torch.Tensor, length: int) -> torch.Tensor:
    pad = length - x.shape[-2]
    return F.pad(x, (0, 0, 0, pad)) if pad else x


def dedupe_blocks(key_blocks: torch.Tensor) -> torch.Tensor:
    """Each row (last dim) sorted, with repeated block indices replaced by −1."""
    sorted_idx = key_blocks.sort(dim=-1).values
    repeated = torch.zeros_like(sorted_idx, dtype=torch.bool)
    repeated[..., 1:] = sorted_idx[..., 1:] == sorted_idx[..., :-1]
    return sorted_idx.masked_fill(repeated | (sorted_idx < 0), -1)


def block_sparse_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    key_blocks: torch.Tensor,
    block: int,
    *,
    scale: float,
    allowed: Predicate | None = None,
    block_bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax attention restricted to listed key blocks (see the module docstring).

    Args:
        q: (B, H, N, D); k: (B, H, M, D); v: (B, H, M, Dv).
        key_blocks: Long tensor (nbq, K) or broadcastable to (B, H, nbq, K); −1 marks no block.
        block: Block length (positions).
        scale: Logit scale (e.g. 1/√d).
        allowed: Optional predicate on token positions, called with qpos (g, block, 1) and kpos
            (..., g, 1, K·block); True where the pair is kept.
        block_bias: Optional float tensor broadcastable to (B, H, nbq, K) added to the logits
            (its last dimension must be K, not broadcast).

    Returns:
        (out (B, H, N, Dv), lse (B, H, N)).
    """
    bsz, heads, n, d = q.shape
    m, dv = k.shape[-2], v.shape[-1]
    nbq, nbk = math.ceil(n / block), math.ceil(m / block)
    qb = _pad_to(q, nbq * block).reshape(bsz, heads, nbq, block, d)
    kb = _pad_to(k, nbk * block).reshape(bsz, heads, nbk, block, d)
    vb = _pad_to(v, nbk * block).reshape(bsz, heads, nbk, block, dv)
    shared = key_blocks.dim() == 2  # one pattern for every batch and head
    used = (key_blocks >= 0).flatten(0, -2).any(dim=0)  # drop columns no query block uses
    if not bool(used.all()):
        key_blocks = key_blocks[..., used]
        if block_bias is not None:
            block_bias = block_bias[..., used]
    if not shared:
        key_blocks = key_blocks.expand(bsz, heads, nbq, key_blocks.shape[-1])
    n_keys = key_blocks.shape[-1] * block
    valid = (key_blocks >= 0) & (key_blocks < nbk)
    idx = key_blocks.clamp(0, nbk - 1)
    offsets = torch.arange(block, device=q.device)
    bytes_per_qblock = 3 * bsz * heads * block * n_keys * q.element_size()
    group = max(1, TILE_BYTES // max(1, bytes_per_qblock))

    outs, lses = [], []
    for s in range(0, nbq, group):
        e = min(nbq, s + group)
        g = e - s
        ib = idx[s:e] if shared else idx[:, :, s:e]
        if shared:
            kg, vg = kb[:, :, ib], vb[:, :, ib]  # (B, H, g, K, block, D)
        else:
            bi = torch.arange(bsz, device=q.device).view(-1, 1, 1, 1)
            hi = torch.arange(heads, device=q.device).view(1, -1, 1, 1)
            kg, vg = kb[bi, hi, ib], vb[bi, hi, ib]
        kg = kg.reshape(bsz, heads, g, n_keys, d)
        vg = vg.reshape(bsz, heads, g, n_keys, dv)
        logits = (qb[:, :, s:e] @ kg.transpose(-2, -1)) * scale  # (B, H, g, block, K·block)

        kpos = (ib.unsqueeze(-1) * block + offsets).flatten(-2).unsqueeze(-2)  # (.., g, 1, K·block)
        vb_ok = valid[s:e] if shared else valid[:, :, s:e]
        keep = vb_ok.unsqueeze(-1).expand(*vb_ok.shape, block).flatten(-2).unsqueeze(-2)
        keep = keep & (kpos < m)
        if allowed is not None:
            qpos = ((torch.arange(s, e, device=q.device) * block).view(-1, 1) + offsets).unsqueeze(
                -1
            )
            keep = keep & allowed(qpos, kpos)
        if block_bias is not None:
            bias = block_bias.expand(*block_bias.shape[:-2], nbq, block_bias.shape[-1])[..., s:e, :]
            logits = logits + bias.unsqueeze(-1).expand(*bias.shape, block).flatten(-2).unsqueeze(
                -2
            )
        dead = ~keep.any(dim=-1, keepdim=True)  # rows with no key: finite junk, zeroed below
        logits = logits.masked_fill(~keep & ~dead, float("-inf"))
        lse = torch.logsumexp(logits, dim=-1, keepdim=True)
        probs = torch.exp(logits - lse).masked_fill(dead, 0.0)
        outs.append(probs @ vg)
        lses.append(lse.masked_fill(dead, float("-inf")).squeeze(-1).expand(bsz, heads, g, block))
    out = torch.cat(outs, dim=2).reshape(bsz, heads, nbq * block, dv)[:, :, :n]
    lse = torch.cat(lses, dim=2).reshape(bsz, heads, nbq * block)[:, :, :n]
    return out, lse


def merge_partials(
    parts: list[tuple[torch.Tensor, torch.Tensor]],
) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge softmax attentions over disjoint key sets given (out, lse) of each: exact."""
    lse = torch.stack([p[1] for p in parts]).logsumexp(dim=0)
    safe = torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))
    out = sum(torch.exp(part_lse - safe).unsqueeze(-1) * part_out for part_out, part_lse in parts)
    return out, lse


def local_key_blocks(
    nbq: int, nbk: int, block: int, window: int, causal: bool, device: torch.device | None = None
) -> torch.Tensor:
    """Key blocks that can hold keys within ``window`` positions of each query block (nbq, K)."""
    reach = math.ceil((window - 1) / block) if window > 1 else 0
    lo = -reach
    hi = 0 if causal else reach
    c = torch.arange(nbq, device=device).view(-1, 1)
    blocks = c + torch.arange(lo, hi + 1, device=device).view(1, -1)
    return blocks.masked_fill((blocks < 0) | (blocks >= nbk), -1)
