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

Kernels. Without autograd, in float32 on a CPU, and with no predicate beyond causality,
the compiled tile kernel (`tile_kernel.compiled_blocks`) runs the whole pattern: tiles of 16
queries over their listed key blocks, the bias added to the scores, the row log-sum-exp
returned (bigbird block 32 at causal 8k: 0.41 of its ideal speed-up through SDPA's short tiles).
Otherwise, where the log-sum-exp is not needed, each group of tiles is one fused
`F.scaled_dot_product_attention` call with a boolean mask (CPU), or, on CUDA and without a bias,
the whole pattern is one compiled `flex_attention` call whose `BlockMask` is built from the same
key-block lists and predicate (`flex_block_sparse_attention`). Otherwise the tiles are scored and
normalised explicitly. A block bias enters the fused call as one more head dimension: queries
get a column of ones and keys the column bias/scale, so q′·k′·scale = q·k·scale + bias, with no
float mask of the tiles' size to build (`learned_pattern`, causal 8k, block 1024, measured: 6.7×
dense causal SDPA explicit, 2.2× with an additive bias mask, 1.2× this way).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Hashable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from attnbench.variants.kernels.tile import NO_LIMIT, compiled_blocks

TILE_BYTES = 16 * 1024 * 1024  # working-set budget of one chunk of query rows (`rows_per_chunk`)
# working-set budget of one group of query blocks: measured at causal 8k (2 threads), 4 MiB was
# as fast as or faster than 2-32 MiB for bigbird (block 32 and 64) and learned_pattern (block
# 64: 0.123 of dense causal SDPA against 0.130-0.140 at 16-32 MiB)
GROUP_BYTES = 4 * 1024 * 1024

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


def listed_pairs(key_blocks: torch.Tensor, n: int, block: int, causal: bool) -> torch.Tensor:
    """Token pairs (query, key) each query block's listed key blocks hold, exactly.

    ``key_blocks`` is (..., nb, K) with −1 for none, over a sequence of n = M positions in blocks
    of ``block`` (the last one may be shorter). Causal counts only j <= i: an earlier block is
    whole, the block itself a triangle, a later one nothing. Returns (..., nb) float64 counts, so
    a variant's `scored_pairs` follows the engine's block lists without an N×N pattern.
    """
    nb = key_blocks.shape[-2]
    size = (n - torch.arange(nb, dtype=torch.float64) * block).clamp(max=block)
    valid = key_blocks >= 0
    kb = key_blocks.clamp(min=0).cpu()
    query_size = size.view(-1, 1).expand(nb, kb.shape[-1])
    pairs = query_size * size[kb]
    if causal:
        c = torch.arange(nb).view(-1, 1)
        triangle = query_size * (query_size + 1) / 2
        pairs = torch.where(kb < c, pairs, torch.where(kb == c, triangle, 0))
    return pairs.masked_fill(~valid.cpu(), 0).sum(dim=-1)


def block_sparse_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    key_blocks: torch.Tensor,
    block: int,
    *,
    scale: float,
    allowed: Predicate | None = None,
    causal: bool = False,
    block_bias: torch.Tensor | None = None,
    with_lse: bool = True,
    plan_key: Hashable | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Softmax attention restricted to listed key blocks (see the module docstring).

    Args:
        q: (B, H, N, D); k: (B, H, M, D); v: (B, H, M, Dv).
        key_blocks: Long tensor (nbq, K) or broadcastable to (B, H, nbq, K); −1 marks no block.
        block: Block length (positions).
        scale: Logit scale (e.g. 1/√d).
        allowed: Optional predicate on token positions, called with qpos (g, block, 1) and kpos
            (..., g, 1, K·block); True where the pair is kept.
        causal: Keep only keys at or before the query (with ``allowed``, both must hold). A
            pattern with no predicate beyond this can run on the compiled kernel.
        block_bias: Optional float tensor broadcastable to (B, H, nbq, K) added to the logits
            (its last dimension must be K, not broadcast).
        with_lse: Also return the log-sum-exp. Without it each group of tiles goes through one
            fused `F.scaled_dot_product_attention` call with a boolean mask, which never writes
            the logits out.
        plan_key: A hashable name of the pattern (``key_blocks`` and ``allowed``) for this
            length, when it is fixed: the pattern-only work (gather indices, token masks) is then
            computed once and reused by every call with the same key, shapes and device (the
            bias is not part of the plan: it may change every call).

    Returns:
        (out (B, H, N, Dv), lse (B, H, N) or None).
    """
    if allowed is None:  # float32 on a CPU, no autograd: `tile_kernel`
        fast = compiled_blocks(
            q, k, v, key_blocks, block, scale, bias=block_bias, hi=0 if causal else NO_LIMIT
        )
        if fast is not None:
            return fast if with_lse else (fast[0], None)
    allowed = with_causal(allowed, causal)
    bsz, heads, n, d = q.shape
    m, dv = k.shape[-2], v.shape[-1]
    nbq, nbk = math.ceil(n / block), math.ceil(m / block)
    if not with_lse and block_bias is None and q.is_cuda and flex_tile(block):
        return flex_block_sparse_attention(q, k, v, key_blocks, block, scale, allowed), None
    shared = key_blocks.dim() == 2  # one pattern for every batch and head
    if plan_key is None:
        plan = _tile_plan(key_blocks, n, m, block, allowed, q, with_lse)
    else:
        cache_key = (plan_key, n, m, block, bsz, heads, q.dtype, str(q.device), with_lse)
        plan = _PLANS.get(cache_key)
        if plan is None:
            plan = _PLANS[cache_key] = _tile_plan(key_blocks, n, m, block, allowed, q, with_lse)
            while len(_PLANS) > PLAN_CACHE_SIZE:
                _PLANS.pop(next(iter(_PLANS)))
    if block_bias is not None:  # (..., nbq, K) over the plan's key-block columns
        if plan.used is not None:
            block_bias = block_bias[..., plan.used]
        block_bias = block_bias.expand(*block_bias.shape[:-2], nbq, block_bias.shape[-1])
    qb = _pad_to(q, nbq * block).reshape(bsz, heads, nbq, block, d)
    kb = _pad_to(k, nbk * block)
    vb = _pad_to(v, nbk * block)
    if shared:  # (B·H, nbk, block·D): one index_select copies whole key blocks
        kb = kb.reshape(bsz * heads, nbk, block * d)
        vb = vb.reshape(bsz * heads, nbk, block * dv)
    else:
        kb = kb.reshape(bsz, heads, nbk, block, d)
        vb = vb.reshape(bsz, heads, nbk, block, dv)
    fused = not with_lse

    outs, lses = [], []
    for (s, e), ib, keep, dead in zip(plan.groups, plan.index, plan.keep, plan.dead, strict=True):
        g = e - s
        bias = None
        if block_bias is not None:  # (..., g, K·block): each key block's bias on its keys
            tiles = block_bias[..., s:e, :]
            bias = tiles.unsqueeze(-1).expand(*tiles.shape, block).flatten(-2)
        n_keys = ib.shape[-1] * block
        if shared:
            flat = ib.flatten()
            kg = kb.index_select(1, flat).reshape(bsz, heads, g, n_keys, d)
            vg = vb.index_select(1, flat).reshape(bsz, heads, g, n_keys, dv)
        else:
            bi = torch.arange(bsz, device=q.device).view(-1, 1, 1, 1)
            hi = torch.arange(heads, device=q.device).view(1, -1, 1, 1)
            kg = kb[bi, hi, ib].reshape(bsz, heads, g, n_keys, d)
            vg = vb[bi, hi, ib].reshape(bsz, heads, g, n_keys, dv)
        qg = qb[:, :, s:e]
        if fused:
            if bias is not None:
                qg, kg, vg = _bias_as_head_dim(qg, kg, vg, bias, scale)
            outs.append(_fused_tiles(qg, kg, vg, keep, dead, scale)[..., :dv])
            continue
        logits = (qg @ kg.transpose(-2, -1)) * scale  # (B, H, g, block, K·block)
        if bias is not None:
            logits = logits + bias.unsqueeze(-2)
        logits = logits.masked_fill(~keep & ~dead, float("-inf"))  # dead rows: finite junk
        lse = torch.logsumexp(logits, dim=-1, keepdim=True)
        probs = torch.exp(logits - lse).masked_fill(dead, 0.0)
        outs.append(probs @ vg)
        lses.append(lse.masked_fill(dead, float("-inf")).squeeze(-1).expand(bsz, heads, g, block))
    out = torch.cat(outs, dim=2).reshape(bsz, heads, nbq * block, dv)[:, :, :n]
    if fused:
        return out, None
    lse = torch.cat(lses, dim=2).reshape(bsz, heads, nbq * block)[:, :, :n]
    return out, lse


def causal_pairs(qpos: torch.Tensor, kpos: torch.Tensor) -> torch.Tensor:
    """The causal predicate: a key at or before its query."""
    return kpos <= qpos


def with_causal(allowed: Predicate | None, causal: bool) -> Predicate | None:
    """``allowed`` and, if ``causal``, `causal_pairs` too."""
    if not causal:
        return allowed
    if allowed is None:
        return causal_pairs
    return lambda qpos, kpos: causal_pairs(qpos, kpos) & allowed(qpos, kpos)


PLAN_CACHE_SIZE = 32  # patterns whose pattern-only work is kept (`plan_key`)
_PLANS: dict[Hashable, _TilePlan] = {}


@dataclass(frozen=True)
class _TilePlan:
    """The pattern-only work of a call, per group of query blocks (s, e): the key blocks to
    gather, the token mask and the rows with no key; ``used`` the key-block columns kept
    (None: all), by which a block bias is cut too."""

    groups: list[tuple[int, int]]
    index: list[torch.Tensor]  # (g, K) shared, else (B, H, g, K): clamped key block indices
    # broadcastable to (B, H, g, block, K·block): bool for the explicit path; for the fused one
    # additive (0 / −∞ in q's dtype), SDPA's own form, so that no call converts it again
    keep: list[torch.Tensor]
    dead: list[torch.Tensor]  # bool (..., g, block, 1): rows with no allowed key
    used: torch.Tensor | None


def _tile_plan(key_blocks, n, m, block, allowed, q, with_lse) -> _TilePlan:
    """Gather indices and token masks of every group (`block_sparse_attention`); masks are
    additive unless ``with_lse`` (the explicit path). Measured: SDPA converting a per-head
    boolean mask at every call took a third of `learned_pattern`'s time at causal 8k."""
    bsz, heads = q.shape[:2]
    nbq, nbk = math.ceil(n / block), math.ceil(m / block)
    shared = key_blocks.dim() == 2
    used = (key_blocks >= 0).flatten(0, -2).any(dim=0)  # drop columns no query block uses
    if bool(used.all()):
        used = None
    else:
        key_blocks = key_blocks[..., used]
    if not shared:
        key_blocks = key_blocks.expand(bsz, heads, nbq, key_blocks.shape[-1])
    n_keys = key_blocks.shape[-1] * block
    valid = (key_blocks >= 0) & (key_blocks < nbk)
    idx = key_blocks.clamp(0, nbk - 1)
    offsets = torch.arange(block, device=q.device)
    bytes_per_qblock = 3 * bsz * heads * block * n_keys * q.element_size()
    group = max(1, GROUP_BYTES // max(1, bytes_per_qblock))
    plan = _TilePlan([], [], [], [], used)
    for s in range(0, nbq, group):
        e = min(nbq, s + group)
        ib = idx[s:e] if shared else idx[:, :, s:e]
        kpos = (ib.unsqueeze(-1) * block + offsets).flatten(-2).unsqueeze(-2)  # (.., g, 1, K·block)
        ok = valid[s:e] if shared else valid[:, :, s:e]
        keep = ok.unsqueeze(-1).expand(*ok.shape, block).flatten(-2).unsqueeze(-2)
        keep = keep & (kpos < m)
        if allowed is not None:
            qpos = ((torch.arange(s, e, device=q.device) * block).view(-1, 1) + offsets).unsqueeze(
                -1
            )
            keep = keep & allowed(qpos, kpos)
        plan.groups.append((s, e))
        plan.index.append(ib.contiguous())
        plan.dead.append(~keep.any(dim=-1, keepdim=True))
        if not with_lse:
            keep = torch.zeros(keep.shape, dtype=q.dtype, device=q.device).masked_fill(
                ~keep, float("-inf")
            )
        plan.keep.append(keep)
    return plan


@functools.cache
def _compiled_flex() -> Callable[..., torch.Tensor]:
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False)


def flex_tile(block: int) -> int | None:
    """The tile flex_attention's compiled kernel takes for a `BlockMask` of ``block``: the
    largest of 128, 64, 32, 16 dividing it (its kernel needs the mask's blocks to be whole
    multiples of its tiles: a window's block of 103 failed to compile on an H200), or None:
    such a block takes the SDPA path instead."""
    return next((t for t in (128, 64, 32, 16) if block % t == 0), None)


def flex_block_sparse_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    key_blocks: torch.Tensor,
    block: int,
    scale: float,
    allowed: Predicate | None = None,
    compiled: bool = True,
    causal: bool = False,
) -> torch.Tensor:
    """`block_sparse_attention`'s output through `flex_attention` (no log-sum-exp).

    The listed key blocks become the `BlockMask` (flex visits only those tiles) and ``allowed``
    becomes its ``mask_mod``. ``compiled=False`` runs flex's unfused eager implementation, which
    materialises the scores: for checking the mask on CPU, not for speed.
    """
    from torch.nn.attention.flex_attention import BlockMask, flex_attention

    allowed = with_causal(allowed, causal)
    n, m = q.shape[-2], k.shape[-2]
    nbk = math.ceil(m / block)
    lists = key_blocks
    while lists.dim() < 4:  # (B or 1, H or 1, nbq, K)
        lists = lists.unsqueeze(0)
    lists = lists.masked_fill(lists >= nbk, -1)
    valid = lists >= 0
    order = torch.argsort((~valid).to(torch.int8), dim=-1, stable=True)  # listed blocks first
    indices = lists.gather(-1, order).clamp(min=0).to(torch.int32)
    if indices.shape[-1] < nbk:
        indices = F.pad(indices, (0, nbk - indices.shape[-1]))
    counts = valid.sum(dim=-1).to(torch.int32)

    listed = torch.zeros(*lists.shape[:-1], nbk + 1, dtype=torch.bool, device=q.device)
    listed.scatter_(-1, lists.masked_fill(~valid, nbk).long(), True)  # column nbk: "none"
    per_batch, per_head = lists.shape[0] > 1, lists.shape[1] > 1

    def mask_mod(b, h, q_idx, kv_idx):
        # the block lists are part of the pattern: eager flex ignores the BlockMask's sparsity
        bi, hi = (b if per_batch else 0), (h if per_head else 0)
        keep = listed[bi, hi, q_idx // block, kv_idx // block] & (kv_idx < m)
        return keep if allowed is None else keep & allowed(q_idx, kv_idx)

    block_mask = BlockMask.from_kv_blocks(
        counts, indices, BLOCK_SIZE=block, mask_mod=mask_mod, seq_lengths=(n, m)
    )
    if not compiled:
        return flex_attention(q, k, v, block_mask=block_mask, scale=scale)
    tile = flex_tile(block)
    options = None if tile == 128 else {"BLOCK_M": tile, "BLOCK_N": tile}  # 128: flex's own
    return _compiled_flex()(q, k, v, block_mask=block_mask, scale=scale, kernel_options=options)


def _bias_as_head_dim(
    qg: torch.Tensor, kg: torch.Tensor, vg: torch.Tensor, bias: torch.Tensor, scale: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(q′, k′, v′) whose scaled products carry ``bias`` (..., g, K·block): q′ = [q, 1],
    k′ = [k, bias/scale], so scale·q′·k′ = scale·q·k + bias; v′ gets a zero column where it had
    the head size of q (SDPA's fused CPU kernel wants equal sizes; the output drops it). The
    bias stays differentiable."""
    ones = qg.new_ones(*qg.shape[:-1], 1)
    column = (bias / scale).to(kg.dtype).unsqueeze(-1).expand(*kg.shape[:-1], 1)
    qg, kg = torch.cat([qg, ones], dim=-1), torch.cat([kg, column], dim=-1)
    if vg.shape[-1] == qg.shape[-1] - 1:
        vg = F.pad(vg, (0, 1))
    return qg, kg, vg


def _fused_tiles(
    qg: torch.Tensor,
    kg: torch.Tensor,
    vg: torch.Tensor,
    keep: torch.Tensor,
    dead: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Softmax attention of a group of query tiles with SDPA: (B, H, g, block, Dv).

    qg (B, H, g, block, D); kg, vg (B, H, g, K·block, ·); keep (boolean or additive)
    broadcastable to (B, H, g, block, K·block), dead its rows without a key. SDPA takes 4-d
    inputs, so (B, H) fold into one batch dimension and the tile index g becomes the "heads"
    dimension the mask can broadcast over. A row with no allowed key comes out as 0, as on the
    unfused path.
    """
    bsz, heads, g, block, _ = qg.shape
    fold = lambda x: x.reshape(bsz * heads, g, *x.shape[-2:])  # noqa: E731
    mask = keep.reshape(-1, *keep.shape[-3:]) if keep.dim() > 3 else keep.unsqueeze(0)
    mask = mask.expand(-1, g, block, -1)
    out = F.scaled_dot_product_attention(fold(qg), fold(kg), fold(vg), attn_mask=mask, scale=scale)
    out = out.reshape(bsz, heads, g, block, -1)
    if bool(dead.any()):
        out = out.masked_fill(dead, 0.0)
    return out


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
