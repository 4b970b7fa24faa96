"""Sparse patterns that are learned (`learned_pattern`) or made from Q and K (`topk`).

`learned_pattern`: per head, a learnable logit P over (query block, key block) pairs. Each query
block computes only its ``keep`` best key blocks by P (its own block always among them; earlier
blocks only when causal) and adds the gate log σ(P) to their logits, so σ(P) → 0 fades a block
out smoothly and gradients reach P through the kept blocks. Skipped blocks are not computed.

Sizes (``block``, ``k``) follow `AttentionVariant.size_at`: a value in (0, 1) is a fraction of the
sequence seen, >= 1 an absolute count. `learned_pattern` with a relative block sizes its logit
table for the most blocks any length up to ``max_len`` can have (at most ⌈1/block⌉), so block c of
its table is the c-th such fraction of whatever length is seen: one pattern over relative
positions, shared by a training mixture of lengths.

`topk`: each query keeps its k highest-scoring keys (−∞ elsewhere) and takes the softmax over
those. Scores are computed for all keys (cost n²), in query chunks of about `TOPK_CHUNK_BYTES`
of scores so that memory stays O(chunk·M); causal chunks score only the keys up to their last
query. Each chunk's scores become its softmax weights in place (`topk_kernel` on the CPU in
float32, `top_softmax` elsewhere), and one matmul mixes the values of the keys it sees.

Incremental forms: both keep a KV cache of every key (`variants.decoding`), since a later query
may pick or list any earlier one. A `topk` step scores every cached key (finding the k largest
needs them all), then mixes the k picked values. `learned_pattern` selects per head, so its
prefill goes query block by query block over the ``max_len`` pattern, each gathering the keys of
its selected blocks only.
"""

from __future__ import annotations

import functools
import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from attnbench import AttentionVariant, VariantShape, register_incremental, register_variant
from attnbench.masks import apply_pattern, causal_pattern, future_keys
from attnbench.variants.decoding import BlockPatternIncremental, KeyValueCache
from attnbench.variants.kernels.blocksparse import block_sparse_attention, listed_pairs
from attnbench.variants.kernels.topk import compiled_topk_attention, compiled_topk_softmax


@dataclass
class LearnedPatternParams:
    """Hyperparameters of `learned_pattern`."""

    block: float = 1 / 32  # positions per block; (0, 1): a fraction of the sequence
    keep: int = 4  # key blocks computed per query block (its own included)
    locality: float = (
        1.0  # initial P = 3 − locality·|c − c'|: a local prior, σ(3) ≈ 0.95 on the diagonal
    )


@register_variant("learned_pattern")
class LearnedPatternAttention(AttentionVariant):
    """Block-sparse softmax attention with a learnable gate σ(P) on a block pattern."""

    family = "sparse"
    cost = "n·w"
    supports_causal = True
    requires_equal_lengths = True
    Params = LearnedPatternParams
    size_params = ("block",)

    def __init__(self, params: LearnedPatternParams, shape: VariantShape) -> None:
        super().__init__(params, shape)
        self.check_size("block")
        if params.keep < 1:
            raise ValueError(f"learned_pattern keep must be >= 1, got {params.keep}.")
        nb = self.table_blocks(shape.max_len)
        c = torch.arange(nb, dtype=torch.float32)
        prior = 3.0 - params.locality * (c[:, None] - c[None, :]).abs()
        self.pattern_logits = nn.Parameter(prior.expand(shape.n_heads, nb, nb).clone())

    def table_blocks(self, max_len: int) -> int:
        """Blocks of the logit table: the most that any length up to ``max_len`` is cut into.

        Absolute block b: ⌈max_len / b⌉. Relative block f: ⌈n / ⌈f·n⌉⌉ <= ⌈1/f⌉ for every n, and
        never more than n, so min(max_len, ⌈1/f⌉) (the count at max_len itself can be fewer).
        """
        if self.params.block >= 1:
            return math.ceil(max_len / self.size_at("block", max_len))
        return min(max_len, math.ceil(1 / self.params.block))

    def block(self, n: int) -> int:
        """Positions per block for a sequence of n (`AttentionVariant.size_at`)."""
        return self.size_at("block", n)

    def selected_blocks(self, nb: int, causal: bool) -> torch.Tensor:
        """(H, nb, K) key blocks each query block computes (−1 where fewer are allowed)."""
        if nb > self.pattern_logits.shape[-1]:
            raise ValueError(
                f"learned_pattern was built for max_len={self.shape.max_len} "
                f"({self.pattern_logits.shape[-1]} blocks); this sequence needs {nb} blocks."
            )
        with torch.no_grad():
            score = self.pattern_logits[:, :nb, :nb].clone()
            eye = torch.eye(nb, dtype=torch.bool, device=score.device)
            score = score.masked_fill(eye, float("inf"))  # a query block always sees itself
            if causal:
                score = apply_pattern(score, causal_pattern(nb, nb, score.device))
            # a stable sort, not topk: among equal logits (all of them at initialisation) the
            # lowest block indices win on every device; topk's choice among ties is its
            # kernel's (CUDA picked other blocks than the CPU: another pattern, found on an H200)
            values, indices = score.sort(dim=-1, descending=True, stable=True)
            keep = min(self.params.keep, nb)
            return indices[..., :keep].masked_fill(values[..., :keep] == float("-inf"), -1)

    def forward(self, q, k, v, causal=False):
        self.check_inputs(q, k, v, causal)
        b = self.block(q.shape[-2])
        nb = math.ceil(q.shape[-2] / b)
        if nb == 1:  # one block: its gate shifts every logit of a row equally, softmax ignores it
            scale = 1 / math.sqrt(q.shape[-1])
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
        blocks = self.selected_blocks(nb, causal)
        gates = F.logsigmoid(self.pattern_logits[:, :nb, :nb]).gather(-1, blocks.clamp(min=0))
        return block_sparse_attention(
            q,
            k,
            v,
            blocks.unsqueeze(0),
            b,
            scale=1 / math.sqrt(q.shape[-1]),
            causal=causal,
            block_bias=gates.unsqueeze(0).to(q.dtype),
            with_lse=False,
            # the selection names the pattern: its token masks are built once per selection
            plan_key=("learned_pattern", b, causal, blocks.cpu().numpy().tobytes()),
        )[0]

    def attention_weights(self, q, k, causal=False):
        n = q.shape[-2]
        b = self.block(n)
        nb = math.ceil(n / b)
        blocks = self.selected_blocks(nb, causal)
        # −1 (no block) goes to a spare column, dropped: scattering it onto block 0 as False
        # could overwrite that block's True
        kept = torch.zeros(blocks.shape[0], nb, nb + 1, dtype=torch.bool, device=q.device)
        kept.scatter_(-1, blocks.masked_fill(blocks < 0, nb).to(q.device), True)
        kept = kept[..., :nb]
        pos = torch.arange(n, device=q.device) // b
        pattern = kept[:, pos][:, :, pos]  # (H, N, N)
        bias = F.logsigmoid(self.pattern_logits[:, :nb, :nb])[:, pos][:, :, pos]
        logits = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) + bias.to(q.dtype)
        if causal:
            pattern = pattern & causal_pattern(n, n, q.device)
        return apply_pattern(logits, pattern).softmax(dim=-1)

    def scored_pairs(self, n: int, m: int, causal: bool) -> float:
        """Pairs of the blocks each head selects now (causal at token level), mean over heads.

        The selection follows the learned logits, so a trained instance may differ slightly
        from a fresh one (a partial last block, or the causal diagonal, selected or not)."""
        b = self.block(n)
        nb = math.ceil(n / b)
        if nb == 1:  # one block: dense (see forward)
            return super().scored_pairs(n, m, causal)
        pairs = listed_pairs(self.selected_blocks(nb, causal), n, b, causal)  # (H, nb)
        return float(pairs.sum(dim=-1).mean())

    def forward_flops(self, batch, heads, n, m, d, dv, causal) -> float:
        return 2.0 * batch * heads * self.scored_pairs(n, m, causal) * (d + dv)


TOPK_CHUNK_BYTES = 16 * 1024 * 1024  # topk: scores of one query chunk (best of 1-64 MiB, 2 cores)
DENSE_MIX_MAX_KEYS = 1024  # topk's incremental form: up to this many keys, a scattered dense mix


@dataclass
class TopKParams:
    """Hyperparameters of `topk`."""

    # keys kept per query (all keys when k >= M); (0, 1): a fraction of the keys
    k: float = 0.2


@register_variant("topk")
class TopKAttention(AttentionVariant):
    """Dynamic sparsity: softmax over each query's k highest-scoring keys.

    Every score is computed (finding the k highest needs them all), by chunks of queries of
    about TOPK_CHUNK_BYTES of scores; each chunk's scores become the softmax over each row's k
    highest (0 elsewhere), and one matmul mixes the values of the keys the chunk sees. The
    middle step is one pass per row in cache on the CPU in float32 (`topk_kernel`, compiled on
    first use); elsewhere, or where it cannot be built, `top_softmax` does it in torch ops.

    One path for every k, so that the cost has no cliff along k: the two GEMMs cost about one
    dense causal SDPA between them, the compiled selection and softmax a quarter to a third of
    one more (the timings, and the paths this replaced: docs/design-notes.md).

    Ties at the k-th score keep every tied key (what `attention_weights` computes); with
    continuous scores there are none.
    """

    family = "sparse"
    cost = "n²"
    supports_causal = True
    Params = TopKParams
    size_params = ("k",)

    def __init__(self, params: TopKParams, shape: VariantShape) -> None:
        super().__init__(params, shape)
        self.check_size("k")

    def keep(self, m: int) -> int:
        """Keys kept per query among m keys (`AttentionVariant.size_at`, at most m)."""
        return min(self.size_at("k", m), m)

    def forward(self, q, k, v, causal=False):
        self.check_inputs(q, k, v, causal)
        n, m = q.shape[-2], k.shape[-2]
        keep = self.keep(m)
        # the picks do not depend on a positive scale, so the scale is applied after picking
        scale = 1 / math.sqrt(q.shape[-1])
        fused = compiled_topk_attention(q, k, v, keep, scale, causal)
        if fused is not None:
            return fused
        # scores and softmax in float32 from half-precision inputs (as flash kernels keep them):
        # rounded to 8 bits of mantissa, scores tie at the k-th and the picks become arbitrary
        work = torch.promote_types(q.dtype, torch.float32)
        kt = k.transpose(-2, -1).to(work).contiguous()  # Kᵀ once: each chunk reads its prefix
        q = q.to(work)
        chunk = max(1, TOPK_CHUNK_BYTES // (q.shape[0] * q.shape[1] * m * q.element_size()))
        outs = []
        for s in range(0, n, chunk):
            e = min(n, s + chunk)
            seen = e if causal else m  # keys after the chunk's last query are never seen
            scores = q[:, :, s:e] @ kt[..., :seen]
            weights = softmax_of_top(scores, min(keep, seen), scale, s if causal else None)
            outs.append(weights.to(v.dtype) @ v[..., :seen, :])
        return torch.cat(outs, dim=2)

    @staticmethod
    def _mix(weights: torch.Tensor, idx: torch.Tensor, v: torch.Tensor, m: int) -> torch.Tensor:
        """Σ over the k picked keys (``idx`` of the first m) of weight·value, for the incremental
        form (`TopKIncremental`), where a step is one query row: up to
        DENSE_MIX_MAX_KEYS keys, the weights are scattered into a row of all the keys and mixed
        by one matmul; beyond, only the picked value rows are fetched, O(k·Dv) a row."""
        if m <= DENSE_MIX_MAX_KEYS:
            dense = torch.zeros(*weights.shape[:-1], m, dtype=weights.dtype, device=weights.device)
            return dense.scatter(-1, idx, weights) @ v
        bsz, heads, rows, keep = idx.shape
        dv = v.shape[-1]
        # whole value rows by index_select on (B·H·M, Dv): a row copy per pick, not an
        # element-wise gather through an expanded index (3-4x slower at N = 8192)
        base = torch.arange(bsz * heads, device=idx.device).view(bsz, heads, 1, 1) * m
        picked = v.reshape(bsz * heads * m, dv).index_select(0, (idx + base).flatten())
        picked = picked.view(bsz, heads, rows, keep, dv)
        return (weights.unsqueeze(-1) * picked).sum(dim=-2)

    def attention_weights(self, q, k, causal=False):
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if causal:
            scores = apply_pattern(scores, causal_pattern(q.shape[-2], k.shape[-2], q.device))
        keep = self.keep(k.shape[-2])
        threshold = scores.topk(keep, dim=-1).values[..., -1:]
        return scores.masked_fill(scores < threshold, float("-inf")).softmax(dim=-1)

    def scored_pairs(self, n: int, m: int, causal: bool) -> float:
        """Pairs in the softmax: per query min(k, its allowed keys). (Finding them scores every
        pair, and the mix runs over every visible key, so topk's cost stays n² and its
        `forward_flops` is dense attention's.)"""
        keep = self.keep(m)
        if not causal:
            return float(n * keep)
        i = np.arange(n)
        return float(np.minimum(np.minimum(i + 1, m), keep).sum())


def softmax_of_top(
    scores: torch.Tensor, picks: int, scale: float, first_query: int | None
) -> torch.Tensor:
    """softmax(scale · scores) over each row's ``picks`` highest scores, 0 elsewhere, written
    over the scores: by the compiled kernel where it serves them (`compiled_topk_softmax`),
    else in torch ops (`top_softmax`). ``first_query``: None for full rows; else row i of each
    (rows × M) matrix sees keys [0, first_query + i] only."""
    weights = compiled_topk_softmax(scores, picks, scale, first_query)
    return top_softmax(scores, picks, scale, first_query) if weights is None else weights


def top_softmax(
    scores: torch.Tensor, picks: int, scale: float, first_query: int | None
) -> torch.Tensor:
    """softmax(scale · scores) over each row's ``picks`` highest scores, 0 elsewhere, in torch
    ops (the scores are overwritten): what `topk_kernel` computes in one pass, for the devices
    and dtypes it does not serve. ``first_query``: as in `compiled_topk_softmax` (causal rows
    of a chunk whose first query sits at that position; None for full rows).

    The scores below the k-th are pushed to the dtype's lowest value arithmetically: the
    comparison written as 0/1 in the scores' dtype, subtracted times finfo.max, several times
    faster on CPU than ``masked_fill_`` or a boolean mask (docs/design-notes.md)."""
    if first_query is not None:
        rows = scores.shape[-2]
        future = future_keys(rows, rows, 0, str(scores.device))
        scores[..., first_query : first_query + rows].masked_fill_(future, float("-inf"))
        scores[..., first_query + rows :] = float("-inf")  # none in `TopKAttention`'s chunks
    if picks < scores.shape[-1]:
        below = torch.lt(scores, kth_highest(scores, picks), out=torch.empty_like(scores))
        scores.sub_(below, alpha=torch.finfo(scores.dtype).max)
    return scores.mul_(scale).softmax(dim=-1)


def kth_highest(scores: torch.Tensor, picks: int) -> torch.Tensor:
    """(..., 1): each row's ``picks``-th highest score (NaN counts as highest, as in `topk`).

    On CPU, numpy's introselect (``np.partition``) over row ranges split between torch's
    threads, an order of magnitude faster there than ``torch.topk`` or ``torch.kthvalue``
    (docs/design-notes.md). Elsewhere (and for dtypes numpy lacks: bfloat16), ``torch.topk``.
    The threshold is a constant for autograd: it only selects.
    """
    m = scores.shape[-1]
    if scores.device.type != "cpu" or scores.dtype not in _NUMPY_DTYPES:
        return scores.topk(picks, dim=-1, sorted=False).values.amin(dim=-1, keepdim=True)
    rows = scores.detach().reshape(-1, m).numpy()
    kth = m - picks  # ascending order: the picks-th highest sits at index m − picks

    def select(part: np.ndarray) -> np.ndarray:
        return np.partition(part, kth, axis=-1)[:, kth]

    threads = min(torch.get_num_threads(), max(1, rows.shape[0] // SELECT_ROWS_PER_THREAD))
    if threads == 1:
        found = select(rows)
    else:
        found = np.concatenate(
            list(_selection_pool(threads).map(select, np.array_split(rows, threads)))
        )
    return torch.from_numpy(found).view(*scores.shape[:-1], 1)


_NUMPY_DTYPES = (torch.float16, torch.float32, torch.float64)
SELECT_ROWS_PER_THREAD = 64  # fewer rows than this per thread: one thread selects


@functools.cache
def _selection_pool(threads: int) -> ThreadPoolExecutor:
    """Threads for `kth_highest` (numpy releases the GIL while it partitions)."""
    return ThreadPoolExecutor(threads, thread_name_prefix="attnbench-topk")


@register_incremental("topk")
class TopKIncremental(KeyValueCache):
    """Top-k with a KV cache: a step scores every cached key (finding the k largest needs them
    all), then mixes the k picked values; k is resolved at ``max_len`` keys, as in the forward."""

    def _attend(self, q, t, keys, values):
        keep = self.variant.keep(self.max_len)
        scale = 1 / math.sqrt(q.shape[-1])
        outs = []
        for scores, future, e in self.score_tiles(q, t, keys):
            if future is not None:
                scores = scores.masked_fill(future, float("-inf"))
            top, idx = scores.topk(min(keep, t + e), dim=-1)  # (B, kv_heads, group, rows, k)
            weights = (top * scale).softmax(dim=-1)
            b, kv, g, r, k = idx.shape  # each key/value head's group of rows, mixed together
            mixed = self.variant._mix(
                weights.reshape(b, kv, g * r, k),
                idx.reshape(b, kv, g * r, k),
                values[:, :, : t + e],
                t + e,
            )
            outs.append(self.ungrouped(mixed.reshape(b, kv, g, r, -1)))
        return torch.cat(outs, dim=2)


@register_incremental("learned_pattern")
class LearnedPatternIncremental(BlockPatternIncremental):
    """The blocks each head selects in the ``max_len`` pattern, with their gate log σ(P) as a
    logit bias; one block in all is dense softmax (the gate cancels), as in the forward."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.block = self.variant.block(self.max_len)
        self.n_blocks = math.ceil(self.max_len / self.block)
        if self.n_blocks > 1:
            blocks = self.variant.selected_blocks(self.n_blocks, causal=True)
            gates = F.logsigmoid(self.variant.pattern_logits[:, : self.n_blocks, : self.n_blocks])
            self.blocks = blocks.to(self.device)
            self.gates = gates.detach().gather(-1, blocks.clamp(min=0)).to(self.device)

    def listed(self, c):
        if self.n_blocks == 1:
            return None
        return self.blocks[:, c], self.gates[:, c]
