"""Fixed sparse patterns: `window`, `strided` and `bigbird`.

Each is softmax attention restricted to a pattern that depends only on positions. Pattern sizes
(``window``, ``local``, ``stride``, ``block``) follow `AttentionVariant.size_at`: a value in (0, 1)
is a fraction of the sequence length actually seen (rounded up), a value >= 1 an absolute count. The
defaults are fractions, so the patterns stay sparse at every length a task uses (density <= 0.5:
docs/variants.md, "Sparse variants at matched density"); the throughput presets pin the papers'
absolute sizes. None of them builds an N×N matrix: `window` on CPU runs on the banded engine
(`variants.kernels.banded`: overlapping views of K and V, one SDPA call), `strided` on CPU without
autograd on the banded engine and one flash call over its residue classes, the others (and each
under autograd or on CUDA) on the block-sparse engine (`variants.kernels.blocksparse`), which
gathers and scores only the key blocks a query block can see. The dense boolean pattern applied as
−∞ is their reference (in the tests), not their implementation.

Conventions (i = query position, j = key position):
- window w, causal: i − w < j ≤ i (the w most recent keys, itself included); non-causal:
  |i − j| < w. A window longer than the sequence is clamped to it (full attention).
- strided (Sparse Transformer, Child et al. 2019): local part as window w = ``local``, plus every
  key at a multiple of ``stride`` away: (i − j) mod stride = 0 (and j ≤ i when causal).
- bigbird (Zaheer et al. 2020), on blocks of ``block`` positions: each query block sees the
  ``window_blocks`` neighbouring blocks on each side (only earlier ones when causal), the first
  ``n_global`` blocks, and ``n_random`` random blocks drawn once from ``seed``; the global blocks'
  queries see every key. Causal adds j ≤ i at token level.

Incremental forms: `window` keeps a ring of the w latest keys and values (older keys are never
seen again); `strided` and `bigbird` keep a KV cache of every key (`variants.decoding`): a later
query may still see any earlier key (every residue class modulo the stride; any earlier block
through bigbird's random blocks). A step computes only what the pattern scores: the w ring
entries (window), the local and dilated keys (strided), the listed key blocks (bigbird). A prefill
from the start runs the variant's own kernel where the pattern of a prefix is the prefix of the
full pattern (window, strided: sizes resolved at ``max_len`` and pinned as absolute counts,
`_pinned`); bigbird draws its random blocks per sequence length, so its prefill goes query block
by query block over the ``max_len`` pattern.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace

import numpy as np
import torch
import torch.nn.functional as F

from attnbench import (
    AttentionVariant,
    IncrementalAttention,
    VariantShape,
    register_incremental,
    register_variant,
)
from attnbench.masks import WINDOW, apply_pattern, window_pairs
from attnbench.variants.decoding import BlockPatternIncremental, KeyValueCache
from attnbench.variants.kernels.banded import attention_with_lse, banded_attention, lse_available
from attnbench.variants.kernels.blocksparse import (
    block_sparse_attention,
    dedupe_blocks,
    listed_pairs,
    local_key_blocks,
    merge_partials,
)
from attnbench.variants.kernels.tile import (
    compiled_banded,
    compiled_blocks,
    compiled_dilated_merge_,
)

# Default sizes, as fractions of the sequence: each keeps the pattern at density <= 0.5 at every
# length from 8 to 100k, causal and not (bigbird from 11 / 14 tokens: below, its window, global
# and random blocks of one token each are already half the keys); checked in
# tests/variants/test_density.py, tabulated in docs/variants.md ("Sparse variants at matched
# density").
# window: WINDOW (attnbench.masks, shared with the window peers), a fifth of the sequence,
# density 2f − f² ≈ 0.36 (at most 0.46)
STRIDED_LOCAL = 0.1  # strided's local window: a tenth of the sequence
STRIDED_STRIDE = 1 / 3  # strided's stride: two or three dilated keys per query
BIGBIRD_BLOCK = 1 / 32  # bigbird's block: 32 blocks per sequence (one token each below 33)


def dense_weights(q: torch.Tensor, k: torch.Tensor, pattern: torch.Tensor) -> torch.Tensor:
    """softmax over a dense boolean pattern: diagnostics at small n only, never the forward."""
    logits = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return apply_pattern(logits, pattern).softmax(dim=-1)


def _grid(n: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    pos = torch.arange(n, device=device)
    return pos.view(-1, 1), pos.view(1, -1)


def window_predicate(window: int, causal: bool):
    """Token-level window rule as a predicate on (query, key) positions."""
    if causal:
        return lambda i, j: (i >= j) & (i - j < window)
    return lambda i, j: (i - j).abs() < window


def dense_attention(q, k, v, causal: bool, scale: float) -> torch.Tensor:
    """Full (causal) softmax attention: what a pattern that covers every pair reduces to."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)


def local_attention(
    q, k, v, window: int, causal: bool, block: int, scale: float, with_lse: bool = True
):
    """(out, lse) of softmax attention within ``window``; lse is None unless ``with_lse``."""
    n, m = q.shape[-2], k.shape[-2]
    blocks = local_key_blocks(
        math.ceil(n / block), math.ceil(m / block), block, window, causal, q.device
    )
    return block_sparse_attention(
        q,
        k,
        v,
        blocks,
        block,
        scale=scale,
        allowed=window_predicate(window, causal),
        with_lse=with_lse,
    )


@dataclass
class WindowParams:
    """Hyperparameters of `window`."""

    # w: causal keeps the w latest keys, non-causal keys with |i − j| < w; a value in (0, 1) is
    # a fraction of the sequence (0.2: density 2f − f² ≈ 0.36), >= 1 a count (the paper's 256)
    window: float = WINDOW
    # queries per tile: 0 = automatic (CPU: `variants.kernels.banded`'s choice; CUDA: w rounded
    # up to a power of two, 32 to 128)
    block: int = 0


@register_variant("window")
class WindowAttention(AttentionVariant):
    """Sliding-window softmax attention, O(N·w) work and memory."""

    family = "sparse"
    cost = "n·w"
    supports_causal = True
    requires_equal_lengths = True
    Params = WindowParams
    size_params = ("window",)

    def __init__(self, params: WindowParams, shape: VariantShape) -> None:
        super().__init__(params, shape)
        self.check_size("window")
        if params.block < 0:
            raise ValueError(f"window block must be >= 0 (0 = automatic), got {params.block}.")

    def _window(self, n: int) -> int:
        return min(self.size_at("window", n), n)

    def forward(self, q, k, v, causal=False):
        self.check_inputs(q, k, v, causal)
        n, scale = q.shape[-2], 1 / math.sqrt(q.shape[-1])
        w = self._window(n)
        if w >= n:  # the window covers the whole sequence: dense attention, exactly
            return dense_attention(q, k, v, causal, scale)
        if q.is_cuda:  # flex_attention over the window's key blocks
            # a power of two from 32 to 128: whole tiles of flex's kernel (`flex_tile`)
            block = self.params.block or min(128, max(32, 1 << (w - 1).bit_length()))
            return local_attention(q, k, v, w, causal, block, scale, with_lse=False)[0]
        after = 0 if causal else w - 1
        return banded_attention(q, k, v, w - 1, after, scale, block=self.params.block)

    def attention_weights(self, q, k, causal=False):
        i, j = _grid(q.shape[-2], q.device)
        return dense_weights(q, k, window_predicate(self._window(q.shape[-2]), causal)(i, j))

    def scored_pairs(self, n: int, m: int, causal: bool) -> float:
        return float(window_pairs(n, self._window(n), causal))

    def forward_flops(self, batch, heads, n, m, d, dv, causal) -> float:
        return 2.0 * batch * heads * self.scored_pairs(n, m, causal) * (d + dv)


@dataclass
class StridedParams:
    """Hyperparameters of `strided`."""

    # keys at multiples of the stride away are kept; (0, 1): a fraction of the sequence
    stride: float = STRIDED_STRIDE
    local: float = STRIDED_LOCAL  # local window, as in `window` (a fraction or a count)


@register_variant("strided")
class StridedAttention(AttentionVariant):
    """Sparse Transformer's strided pattern: a local window plus a dilated one.

    The dilated part is block-diagonal once positions are regrouped by residue modulo the stride,
    so it runs on the block-sparse engine with one block per residue class; the two parts cover
    disjoint keys and are merged exactly through their log-sum-exps.
    """

    family = "sparse"
    cost = "n·w"
    supports_causal = True
    requires_equal_lengths = True
    Params = StridedParams
    size_params = ("local", "stride")

    def __init__(self, params: StridedParams, shape: VariantShape) -> None:
        super().__init__(params, shape)
        self.check_size("stride")
        self.check_size("local")

    def sizes(self, n: int) -> tuple[int, int]:
        """(local window, stride) resolved for a sequence of n (`AttentionVariant.size_at`)."""
        return min(self.size_at("local", n), n), self.size_at("stride", n)

    def forward(self, q, k, v, causal=False):
        self.check_inputs(q, k, v, causal)
        n = q.shape[-2]
        local, s = self.sizes(n)
        scale = 1 / math.sqrt(q.shape[-1])
        if local >= n or s == 1:  # every pair is in the pattern: dense attention, exactly
            return dense_attention(q, k, v, causal, scale)
        if lse_available(q, k, v):
            return _strided_fused(q, k, v, local, s, causal, scale)
        local_part = local_attention(q, k, v, local, causal, min(local, 128), scale)

        rows = math.ceil(n / s)  # positions a·s + r, regrouped as r·rows + a

        def regroup(x):
            x = F.pad(x, (0, 0, 0, rows * s - n)) if rows * s != n else x
            return x.reshape(*x.shape[:2], rows, s, x.shape[-1]).transpose(2, 3).flatten(2, 3)

        def original(p):  # position in the sequence of regrouped index p
            return (p % rows) * s + p // rows

        def dilated_only(i, j):
            oi, oj = original(i), original(j)
            keep = (oj < n) & (((oi - oj) >= local) if causal else ((oi - oj).abs() >= local))
            return keep & (oj <= oi) if causal else keep

        diagonal = torch.arange(s, device=q.device).view(-1, 1)
        out, lse = block_sparse_attention(
            regroup(q),
            regroup(k),
            regroup(v),
            diagonal,
            rows,
            scale=scale,
            allowed=dilated_only,
            plan_key=("strided dilated", local, s, n, causal),
        )

        def ungroup(x):
            x = x.reshape(*x.shape[:2], s, rows, *x.shape[3:]).transpose(2, 3).flatten(2, 3)
            return x[:, :, :n]

        dilated = (ungroup(out), ungroup(lse.unsqueeze(-1)).squeeze(-1))
        return merge_partials([local_part, dilated])[0]

    def pattern(self, n: int, causal: bool, device=None) -> torch.Tensor:
        """The dense (n, n) boolean pattern (for diagnostics at small n)."""
        i, j = _grid(n, device)
        local, stride = self.sizes(n)
        local = window_predicate(local, causal)(i, j)
        dilated = (i - j) % stride == 0
        return local | (dilated & (j <= i) if causal else dilated)

    def attention_weights(self, q, k, causal=False):
        return dense_weights(q, k, self.pattern(q.shape[-2], causal, q.device))

    def scored_pairs(self, n: int, m: int, causal: bool) -> float:
        """The local window's pairs plus the dilated keys outside it, counted per query."""
        local, s = self.sizes(n)
        i = np.arange(n)
        if causal:
            dilated = i // s - np.minimum(i, local - 1) // s
        else:
            after = n - 1 - i
            total = i // s + after // s
            near = np.minimum(i, local - 1) // s + np.minimum(after, local - 1) // s
            dilated = total - near
        return float(window_pairs(n, local, causal) + int(dilated.sum()))

    def forward_flops(self, batch, heads, n, m, d, dv, causal) -> float:
        return 2.0 * batch * heads * self.scored_pairs(n, m, causal) * (d + dv)


@functools.lru_cache(maxsize=32)
def _dilated_pattern(
    rows: int, gap: int, causal: bool, s: int, n: int, device: str
) -> torch.Tensor:
    """Bool pattern over one residue class of stride ``s``: row a sees row a′ at least ``gap``
    rows away (earlier only, when causal), the dilated keys outside the local window.

    (rows, rows), shared by every class, unless non-causal attention over a sequence padded to
    rows·s > n: then (1, s, rows, rows), each class r without its padded key row (a′·s + r ≥ n)
    (the flash op takes 2-d or 4-d masks).
    (Causal queries never see a padded key: it comes after every real position.)"""
    a = torch.arange(rows, device=device)
    apart = a.view(-1, 1) - a.view(1, -1)
    if causal:
        return apart >= gap
    pattern = apart.abs() >= gap
    if rows * s == n:
        return pattern
    real_key = (a.view(1, -1) * s + torch.arange(s, device=device).view(-1, 1)) < n  # (s, rows)
    return (pattern & real_key.unsqueeze(1)).unsqueeze(0)


def _strided_fused(q, k, v, local: int, s: int, causal: bool, scale: float) -> torch.Tensor:
    """`strided` without autograd on CPU: its local and dilated parts, each with its
    log-sum-exp, merged exactly.

    Where a query has at most SHIFTED_MAX_OFFSETS dilated keys a side, in float32 on any
    CPU, the whole pattern is one pass of the compiled tile kernel (`tile_kernel.compiled_banded`
    with a stride: the band and one diagonal span per dilated offset, no merge); with more,
    where the kernel serves the call, the band by the kernel and then its residue classes merged
    into it in place (`tile_kernel.compiled_dilated_merge_`: tiles of one class read in place,
    no regrouping copy and no merge pass; 0.45 of its ideal at 8k became 0.6+). Otherwise the
    local part is the banded engine's, and the dilated part, with few offsets,
    `_dilated_by_shifts`; with many, it regroups positions a·s + r by residue r as strided views
    ((B, H, s, ⌈N/s⌉, D); a copy only where N is no multiple of s and the sequence is padded),
    where it is one pattern shared by every class, keys at least ⌈local/s⌉ rows away: causal, the
    tile kernel's block op (each class one block, row a over rows up to a − gap); else one flash
    call. Padding keeps a stride that does not divide N on this path, off the slower explicit
    block-sparse one (docs/design-notes.md).
    """
    bsz, heads, n, d = q.shape
    rows = -(-n // s)
    pad = rows * s - n
    gap = -(-local // s)
    after = 0 if causal else local - 1
    if rows - gap <= SHIFTED_MAX_OFFSETS:
        one_pass = compiled_banded(
            q, k, v, local - 1, after, scale, stride=s, first=gap, causal=causal
        )
        if one_pass is not None:
            return one_pass[0]
    # many dilated keys: the band, then the residue classes merged into it in place
    band = compiled_banded(q, k, v, local - 1, after, scale, causal=causal)
    if band is not None and compiled_dilated_merge_(*band, q, k, v, s, gap, causal, scale):
        return band[0]
    local_out, local_lse = banded_attention(q, k, v, local - 1, after, scale, with_lse=True)
    if rows - gap <= SHIFTED_MAX_OFFSETS:
        far = _dilated_by_shifts(q, k, v, s, gap, causal, scale)
        return merge_partials([(local_out, local_lse), far])[0].to(q.dtype)
    by_residue = [
        (F.pad(x, (0, 0, 0, pad)) if pad else x)
        .view(bsz, heads, rows, s, x.shape[-1])
        .transpose(2, 3)
        .reshape(bsz * heads, s, rows, -1)
        for x in (q, k, v)
    ]
    # causal: each class one block, row a over rows a′ <= a − gap (`tile_kernel`; a padded
    # key row comes after every real query of its class, so none sees it)
    whole_class = torch.zeros(1, 1, dtype=torch.long)
    far = compiled_blocks(*by_residue, whole_class, rows, scale, hi=-gap) if causal else None
    if far is not None:
        far_out, far_lse = far
    else:
        pattern = _dilated_pattern(rows, gap, causal, s, n, str(q.device))
        far_out, far_lse = attention_with_lse(*by_residue, pattern, scale)
    # back to positions: (B·H, s, rows, ·) → (B, H, rows, s, ·), a view
    far_out = far_out.view(bsz, heads, s, rows, -1).transpose(2, 3)
    far_lse = far_lse.view(bsz, heads, s, rows).transpose(2, 3)
    if pad:  # to the n real positions (a copy), where the local part already is
        far = (
            far_out.reshape(bsz, heads, rows * s, -1)[:, :, :n],
            far_lse.reshape(bsz, heads, -1)[:, :, :n],
        )
        return merge_partials([(local_out, local_lse), far])[0].to(q.dtype)
    local = (local_out.view(bsz, heads, rows, s, -1), local_lse.view(bsz, heads, rows, s))
    # (the log-sum-exps are float32 whatever the inputs: the merge is cast back)
    return merge_partials([local, (far_out, far_lse)])[0].reshape(bsz, heads, n, -1).to(q.dtype)


# dilated keys per query (per side) up to which `_dilated_by_shifts` replaces the flash call over
# residue classes: with few rows per class that call is s tiny attentions, as slow as far fewer
# large ones (docs/design-notes.md)
SHIFTED_MAX_OFFSETS = 4


def _dilated_by_shifts(q, k, v, s: int, gap: int, causal: bool, scale: float):
    """(out, lse) of softmax attention over the dilated keys i ± t·s, t >= ``gap`` (only −
    when causal), one shift of the whole sequence per offset: O(N·D) per offset, no tiles.
    A query without such a key gets out 0 and lse −∞."""
    n = q.shape[-2]
    offsets = [t * s for t in range(gap, -(-n // s)) if t * s < n]
    offsets += [] if causal else [-o for o in offsets]
    acc = torch.promote_types(q.dtype, torch.float32)  # float32 at least, as the flash op's lse
    logits = q.new_full((*q.shape[:-1], len(offsets)), float("-inf"), dtype=acc)
    for c, o in enumerate(offsets):  # query i meets key i − o
        qs, ks = (q[:, :, o:], k[:, :, : n - o]) if o > 0 else (q[:, :, : n + o], k[:, :, -o:])
        rows = slice(o, None) if o > 0 else slice(None, n + o)
        logits[:, :, rows, c] = torch.linalg.vecdot(qs, ks).to(acc) * scale
    lse = logits.logsumexp(dim=-1)
    weights = torch.exp(logits - lse.unsqueeze(-1).clamp(min=torch.finfo(acc).min))
    out = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=acc, device=q.device)
    for c, o in enumerate(offsets):
        rows = slice(o, None) if o > 0 else slice(None, n + o)
        vs = v[:, :, : n - o] if o > 0 else v[:, :, -o:]
        out[:, :, rows] += weights[:, :, rows, c : c + 1] * vs
    return out, lse


@dataclass
class BigBirdParams:
    """Hyperparameters of `bigbird`."""

    block: float = BIGBIRD_BLOCK  # positions per block; (0, 1): a fraction of the sequence
    window_blocks: int = 1  # neighbouring blocks seen on each side
    n_global: int = 1  # leading blocks that see and are seen by every position
    n_random: int = 1  # random key blocks per query block (throughput presets: 2)
    seed: int = 0  # seed of the random blocks (fixed per sequence length)


@register_variant("bigbird")
class BigBirdAttention(AttentionVariant):
    """BigBird: window + global + random blocks, block-sparse."""

    family = "sparse"
    cost = "n·w"
    supports_causal = True
    requires_equal_lengths = True
    Params = BigBirdParams
    size_params = ("block",)

    def __init__(self, params: BigBirdParams, shape: VariantShape) -> None:
        super().__init__(params, shape)
        self.check_size("block")
        for name in ("window_blocks", "n_global", "n_random"):
            if getattr(params, name) < 0:
                raise ValueError(f"bigbird {name} must be >= 0, got {getattr(params, name)}.")
        self._random: dict[tuple[int, bool], torch.Tensor] = {}
        self._lists: dict[tuple[int, bool], tuple[torch.Tensor, bool]] = {}

    def random_blocks(self, nb: int, causal: bool) -> torch.Tensor:
        """(nb, n_random) random key blocks per query block, −1 where too few candidates.

        Candidates exclude the window and global blocks (and, causal, later blocks). The draw
        depends only on (seed, nb, causal), so a given sequence length always sees one pattern.
        """
        key = (nb, causal)
        if key not in self._random:
            p = self.params
            gen = torch.Generator().manual_seed(p.seed * 7919 + nb * 2 + int(causal))
            table = torch.full((nb, p.n_random), -1, dtype=torch.long)
            for c in range(nb):
                hi = c - p.window_blocks if causal else nb
                cand = [b for b in range(p.n_global, max(hi, 0)) if abs(b - c) > p.window_blocks]
                if cand and p.n_random:
                    pick = torch.randperm(len(cand), generator=gen)[: p.n_random]
                    table[c, : len(pick)] = torch.tensor(cand)[pick]
            self._random[key] = table
        return self._random[key]

    def key_blocks(self, nb: int, causal: bool, device=None) -> torch.Tensor:
        """(nb, K) key blocks of each query block (window, global, random), deduplicated."""
        p = self.params
        c = torch.arange(nb).view(-1, 1)
        hi = 0 if causal else p.window_blocks
        window = c + torch.arange(-p.window_blocks, hi + 1).view(1, -1)
        glob = torch.arange(min(p.n_global, nb)).view(1, -1).expand(nb, -1)
        blocks = torch.cat([window, glob, self.random_blocks(nb, causal)], dim=1)
        invalid = (blocks < 0) | (blocks >= nb) | ((blocks > c) if causal else False)
        return dedupe_blocks(blocks.masked_fill(invalid, -1)).to(device)

    def block(self, n: int) -> int:
        """Positions per block for a sequence of n (`AttentionVariant.size_at`)."""
        return self.size_at("block", n)

    def forward(self, q, k, v, causal=False):
        self.check_inputs(q, k, v, causal)
        n = q.shape[-2]
        b = self.block(n)
        scale = 1 / math.sqrt(q.shape[-1])
        nb = math.ceil(n / b)
        if (nb, causal) not in self._lists:  # the pattern of a length: built once
            blocks = self.key_blocks(nb, causal)
            self._lists[nb, causal] = blocks, self._covers_all(blocks, nb, causal)
        blocks, covers_all = self._lists[nb, causal]
        if covers_all:  # dense attention, exactly
            return dense_attention(q, k, v, causal, scale)
        p = self.params
        out, _ = block_sparse_attention(
            q,
            k,
            v,
            blocks.to(q.device),
            b,
            scale=scale,
            causal=causal,
            with_lse=False,
            plan_key=("bigbird", b, nb, causal, p.window_blocks, p.n_global, p.n_random, p.seed),
        )
        n_glob = min(self.params.n_global * b, n)
        if n_glob == 0:
            return out
        glob = F.scaled_dot_product_attention(q[:, :, :n_glob], k, v, is_causal=causal, scale=scale)
        return torch.cat([glob, out[:, :, n_glob:]], dim=2)

    def _covers_all(self, blocks: torch.Tensor, nb: int, causal: bool) -> bool:
        """Whether every (query block, allowed key block) pair is listed."""
        counts = (blocks >= 0).sum(dim=1).tolist()
        return all(
            c < self.params.n_global or counts[c] == (c + 1 if causal else nb) for c in range(nb)
        )

    def pattern(self, n: int, causal: bool, device=None) -> torch.Tensor:
        """The dense (n, n) boolean pattern (for diagnostics at small n)."""
        b = self.block(n)
        nb = math.ceil(n / b)
        blocks = self.key_blocks(nb, causal)
        kept = torch.zeros(nb, nb + 1, dtype=torch.bool)
        kept.scatter_(1, blocks.masked_fill(blocks < 0, nb), True)
        kept = kept[:, :nb]
        kept[: self.params.n_global] = True
        i, j = _grid(n, None)
        pattern = kept[i // b, j // b]
        return (pattern & (j <= i) if causal else pattern).to(device)

    def attention_weights(self, q, k, causal=False):
        return dense_weights(q, k, self.pattern(q.shape[-2], causal, q.device))

    def scored_pairs(self, n: int, m: int, causal: bool) -> float:
        """Exact pairs of the pattern: the listed blocks of the other query blocks (causal at
        token level), and every allowed key of the global blocks' queries."""
        b = self.block(n)
        nb = math.ceil(n / b)
        n_glob_blocks = min(self.params.n_global, nb)
        listed = listed_pairs(self.key_blocks(nb, causal), n, b, causal)
        n_glob = min(n_glob_blocks * b, n)
        glob = n_glob * (n_glob + 1) / 2 if causal else n_glob * n
        return float(listed[n_glob_blocks:].sum()) + glob

    def forward_flops(self, batch, heads, n, m, d, dv, causal) -> float:
        """The pairs of `scored_pairs` (masked pairs of a computed tile are not counted, as
        FlashAttention's convention halves causal attention)."""
        return 2.0 * batch * heads * self.scored_pairs(n, m, causal) * (d + dv)


def _pinned(variant, **sizes):
    """A twin of ``variant`` with pattern sizes pinned as absolute counts (and its parameters,
    learned ones included, shared): its kernel on a prefix computes the full pattern's prefix."""
    twin = type(variant).__new__(type(variant))
    twin.__dict__ = dict(variant.__dict__)  # shares the submodules and parameters
    twin.params = replace(variant.params, **sizes)
    return twin


@register_incremental("strided")
class StridedIncremental(KeyValueCache):
    """Strided with a KV cache: every residue class modulo the stride is visited by some later
    query, so no key can be dropped; a step gathers its local and dilated keys only."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.local, self.stride = self.variant.sizes(self.max_len)
        self.twin = _pinned(self.variant, local=self.local, stride=self.stride)

    def _attend(self, q, t, keys, values):
        scale = 1 / math.sqrt(q.shape[-1])
        n = q.shape[-2]
        if n == 1:
            i = t
            local = torch.arange(max(0, i - self.local + 1), i + 1, device=q.device)
            # keys a multiple of the stride back, beyond the local window
            first = i - self.stride * math.ceil(self.local / self.stride)
            dilated = torch.arange(max(first, -1), -1, -self.stride, device=q.device)
            idx = torch.cat([dilated, local])
            return F.scaled_dot_product_attention(
                q,
                keys.index_select(2, idx),
                values.index_select(2, idx),
                scale=scale,
                enable_gqa=self.group > 1,
            )
        # queries of the earlier positions are not kept: zeros in their place, outputs dropped
        padded = torch.cat([q.new_zeros(*q.shape[:2], t, q.shape[-1]), q], dim=2)
        keys, values = self.repeat_kv(keys), self.repeat_kv(values)
        return self.twin(padded, keys, values, causal=True)[:, :, t:]


@register_incremental("window")
class WindowIncremental(IncrementalAttention):
    """Sliding window with a ring of the w latest keys and values (slot = position mod w): a key
    leaves every later query's window once w newer ones arrived. w is resolved at ``max_len``."""

    grouped_query = True

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.window = self.variant._window(self.max_len)
        self.twin = _pinned(self.variant, window=self.window)
        lead = (self.batch, self.kv_heads, self.window)
        self.keys = torch.empty(*lead, self.head_dim, device=self.device, dtype=self.dtype)
        self.values = torch.empty(*lead, self.value_dim, device=self.device, dtype=self.dtype)

    def state_size(self, n: int) -> int:
        return min(n, self.window) * self.kv_heads * (self.head_dim + self.value_dim)

    def state_tensors(self) -> list[torch.Tensor]:
        held = min(self.position, self.window)
        return [self.keys[:, :, :held], self.values[:, :, :held]]

    def _extend(self, q, k, v):
        t, n, w = self.position, q.shape[-2], self.window
        scale = 1 / math.sqrt(q.shape[-1])
        if n == 1:  # the ring holds exactly the window (softmax does not care about order)
            self.keys[:, :, t % w] = k[:, :, 0]
            self.values[:, :, t % w] = v[:, :, 0]
            held = min(t + 1, w)
            return F.scaled_dot_product_attention(
                q,
                self.keys[:, :, :held],
                self.values[:, :, :held],
                scale=scale,
                enable_gqa=self.group > 1,
            )
        # the w − 1 keys before the new tokens, in order, then the new ones: the window's kernel
        earlier = torch.arange(max(0, t - w + 1), t, device=q.device) % w
        keys = torch.cat([self.keys.index_select(2, earlier), k], dim=2)
        values = torch.cat([self.values.index_select(2, earlier), v], dim=2)
        c = len(earlier)
        padded = torch.cat([q.new_zeros(*q.shape[:2], c, q.shape[-1]), q], dim=2)
        out = self.twin(padded, self.repeat_kv(keys), self.repeat_kv(values), causal=True)
        out = out[:, :, c:]
        kept = torch.arange(max(t, t + n - w), t + n, device=q.device)
        self.keys[:, :, kept % w] = keys[:, :, c + kept - t]
        self.values[:, :, kept % w] = values[:, :, c + kept - t]
        return out


@register_incremental("bigbird")
class BigBirdIncremental(BlockPatternIncremental):
    """BigBird's window, global and random blocks of the ``max_len`` pattern; the queries of the
    global blocks see every earlier key."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.block = self.variant.block(self.max_len)
        nb = math.ceil(self.max_len / self.block)
        self.blocks = self.variant.key_blocks(nb, causal=True, device=self.device)  # (nb, K)

    def listed(self, c):
        if c < self.variant.params.n_global:
            return None
        blocks = self.blocks[c].expand(self.heads, -1)
        return blocks, torch.zeros(blocks.shape, device=self.device)
