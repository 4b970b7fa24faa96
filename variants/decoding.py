"""What the built-in variants' incremental (token-by-token) forms share: the state they keep.

Each form is registered in the module that defines its variant (`variants.softmax`,
`variants.sparse_fixed`, …), so a variant's class never exists without its form; this module holds
what forms of several modules use, and imports none of them.
Every form equals its variant's causal forward over the ``max_len`` sequence at every position
(`attnbench.incremental`; checked over the registry in the contract tests). The bases:

- `KeyValueCache` keeps **every key and value** (softmax, relu², sigmoid, strided, bigbird,
  learned_pattern, topk): a later query may weigh any earlier key, so none can be dropped; the
  cache is allocated for ``max_len`` tokens once and the n tokens in use are the state;
- `BlockPatternIncremental`, a KV cache for the block patterns (bigbird, learned_pattern): a
  query block gathers the keys of its listed blocks only;
- `RecurrentState` keeps a **D×Dv matrix** per head (linear, identity, decay), the same size at
  every length.

Both kinds share keys and values across query heads (``kv_heads`` < H, grouped-query): a cache or
state per key/value head, so the state shrinks by the group factor, unless a form keeps one per
query head (`RecurrentState.state_heads_are_query_heads`). Dense scores are materialised by tiles
of rows within `SCORE_TILE_BYTES`; `masked_sdpa` is causal softmax over a cache, by such tiles.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from attnbench.incremental import IncrementalAttention

SCORE_TILE_BYTES = 16 * 1024 * 1024  # rows of scores materialised at once by the dense paths


def _row_chunk(n_keys: int, like: torch.Tensor) -> int:
    """Query rows per tile so that a (B, H, rows, n_keys) score tile stays within the budget."""
    per_row = like.shape[0] * like.shape[1] * n_keys * like.element_size()
    return max(1, SCORE_TILE_BYTES // max(per_row, 1))


def _visible(rows: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """(len(rows), len(keys)) bool: key position j is visible to query position i iff j <= i."""
    return keys[None, :] <= rows[:, None]


class KeyValueCache(IncrementalAttention):
    """Base of the forms that keep every key and value (module docstring: why).

    The cache, (B, H, max_len, D) and (B, H, max_len, Dv), is allocated once; ``_attend`` gives
    the outputs of the n newest queries over the keys in use.
    """

    grouped_query = True

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        lead = (self.batch, self.kv_heads, self.max_len)
        # zeros, not empty: a pattern may gather a slot not yet written (masked to −∞, weight
        # exactly 0), and uninitialised memory could hold NaN, which no mask removes
        self.keys = torch.zeros(*lead, self.head_dim, device=self.device, dtype=self.dtype)
        self.values = torch.zeros(*lead, self.value_dim, device=self.device, dtype=self.dtype)

    def state_size(self, n: int) -> int:
        return n * self.kv_heads * (self.head_dim + self.value_dim)

    def state_tensors(self) -> list[torch.Tensor]:
        p = self.position
        return [self.keys[:, :, :p], self.values[:, :, :p]]

    def grouped_rows(self, q: torch.Tensor) -> torch.Tensor:
        """(B, H, n, D) queries as (B, kv_heads, group, n, D): each key/value head's queries."""
        b, _, n, d = q.shape
        return q.reshape(b, self.kv_heads, self.group, n, d)

    def ungrouped(self, out: torch.Tensor) -> torch.Tensor:
        """(B, kv_heads, group, n, Dv) back to (B, H, n, Dv)."""
        return out.reshape(out.shape[0], self.heads, *out.shape[3:])

    def score_tiles(self, q: torch.Tensor, t: int, keys: torch.Tensor):
        """Unscaled scores q·k of the queries at positions t … t + n − 1 over keys [0, t + n),
        by tiles of rows within SCORE_TILE_BYTES: yields (scores (B, kv_heads, group, rows,
        t + end), the (rows, t + end) mask of keys after each row's position or None for one
        row, end) per tile."""
        n, total = q.shape[-2], keys.shape[-2]
        rows = _row_chunk(total, q)
        cols = torch.arange(total, device=q.device)
        grouped = self.grouped_rows(q)
        for s in range(0, n, rows):
            e = min(n, s + rows)
            scores = grouped[..., s:e, :] @ keys[:, :, None, : t + e].transpose(-2, -1)
            future = None
            if e - s > 1:
                positions = torch.arange(t + s, t + e, device=q.device)
                future = ~_visible(positions, cols[: t + e])
            yield scores, future, e

    def _extend(self, q, k, v):
        t, n = self.position, q.shape[-2]
        self.keys[:, :, t : t + n] = k
        self.values[:, :, t : t + n] = v
        return self._attend(q, t, self.keys[:, :, : t + n], self.values[:, :, : t + n])

    def _attend(self, q, t, keys, values):
        """Outputs of queries at positions t … t + n − 1 over ``keys``/``values`` [0, t + n)."""
        raise NotImplementedError


def masked_sdpa(q, t, keys, values, scale):
    """Softmax of queries at positions t, t+1, … over keys [0, t + n), causal, by row tiles
    (keys and values may have fewer heads than q: SDPA's grouped-query path)."""
    n, total = q.shape[-2], keys.shape[-2]
    gqa = keys.shape[1] != q.shape[1]
    if n == 1:  # the newest query sees every key: no mask
        return F.scaled_dot_product_attention(q, keys, values, scale=scale, enable_gqa=gqa)
    if t == 0:  # a prefill from the start: torch's causal kernels
        return F.scaled_dot_product_attention(
            q, keys, values, is_causal=True, scale=scale, enable_gqa=gqa
        )
    outs, rows = [], _row_chunk(total, q)
    cols = torch.arange(total, device=q.device)
    for s in range(0, n, rows):
        e = min(n, s + rows)
        positions = torch.arange(t + s, t + e, device=q.device)
        mask = _visible(positions, cols[: t + e])
        outs.append(
            F.scaled_dot_product_attention(
                q[:, :, s:e],
                keys[:, :, : t + e],
                values[:, :, : t + e],
                attn_mask=mask,
                scale=scale,
                enable_gqa=gqa,
            )
        )
    return torch.cat(outs, dim=2)


class BlockPatternIncremental(KeyValueCache):
    """Base of the block patterns (bigbird, learned_pattern) with a KV cache: a later query block
    may list any earlier block (bigbird's random blocks, a learned selection), so every key is
    kept. Queries go by query block: each gathers the keys of its listed blocks only.

    Subclasses set ``self.block`` (positions per block, resolved at ``max_len``) and implement
    `listed(c)`: the (H, K) key blocks of query block c (−1: none) and their (H, K) logit bias,
    or None for "every earlier key" (a global block's queries).
    """

    block: int

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._plans: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None] = {}

    def listed(self, c: int) -> tuple[torch.Tensor, torch.Tensor] | None:
        raise NotImplementedError

    def _plan(self, c: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """Query block c's keys, computed once: (positions (H, K·b), their rows in the flattened
        cache, the logit bias with −inf for absent blocks), or None (every key)."""
        if c not in self._plans:
            pattern = self.listed(c)
            if pattern is None:
                self._plans[c] = None
            else:
                blocks, bias = pattern
                b = self.block
                offsets = torch.arange(b, device=self.device)
                idx = (blocks.clamp(min=0)[..., None] * b + offsets).flatten(1)  # (H, K·b)
                present = (blocks >= 0)[..., None].expand(-1, -1, b).flatten(1)
                bias = bias[..., None].expand(-1, -1, b).flatten(1).to(self.dtype)
                base = bias.masked_fill(~present, float("-inf"))
                # rows of the (B·H·max_len, D) cache: whole rows by index_select, much faster
                # than an element-wise gather through an expanded index
                inside = idx.clamp(max=self.max_len - 1)
                # query head h reads key/value head h // group of its sequence
                batch = torch.arange(self.batch, device=self.device).view(-1, 1) * self.kv_heads
                head = torch.arange(self.heads, device=self.device).view(1, -1) // self.group
                rows = (batch + head).unsqueeze(-1) * self.max_len + inside  # (B, H, K·b)
                self._plans[c] = idx, rows.flatten(), base
        return self._plans[c]

    def _attend(self, q, t, keys, values):
        b, n, scale = self.block, q.shape[-2], 1 / math.sqrt(q.shape[-1])
        outs = []
        for c in range(t // b, (t + n - 1) // b + 1):
            s, e = max(t, c * b), min(t + n, (c + 1) * b)  # positions of block c among the new
            rows = q[:, :, s - t : e - t]
            plan = self._plan(c)
            if plan is None:
                outs.append(masked_sdpa(rows, s, keys[:, :, :e], values[:, :, :e], scale))
                continue
            idx, rows_of_keys, base = plan
            positions = torch.arange(s, e, device=q.device)
            # keys after a row's position (later blocks' slots hold zeros or older tokens) −∞
            later = idx[:, None, :] > positions[:, None]  # (H, rows, K·b)
            mask = torch.where(later, float("-inf"), base[:, None, :])
            lead = (self.batch, self.heads, idx.shape[-1])
            k_sel = self.keys.view(-1, self.head_dim).index_select(0, rows_of_keys).view(*lead, -1)
            v_sel = self.values.view(-1, self.value_dim).index_select(0, rows_of_keys)
            v_sel = v_sel.view(*lead, -1)
            outs.append(
                F.scaled_dot_product_attention(rows, k_sel, v_sel, attn_mask=mask, scale=scale)
            )
        return torch.cat(outs, dim=2)


class RecurrentState(IncrementalAttention):
    """Base of the linear-cost forms: a (B, kv_heads, D, Dv) matrix S, the same size at every
    length (one per key/value head: the query heads of a group read the same S)."""

    grouped_query = True
    # one S per query head instead (decay: its rate is per query head, `variants.decay`)
    state_heads_are_query_heads = False

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.state_heads = self._state_heads()
        self.state = torch.zeros(
            self.batch,
            self.state_heads,
            self.head_dim,
            self.value_dim,
            device=self.device,
            dtype=self.dtype,
        )

    def _state_heads(self) -> int:
        """How many S the form keeps: one per key/value head, or per query head."""
        return self.heads if self.state_heads_are_query_heads else self.kv_heads

    def state_size(self, n: int) -> int:
        return self.state_heads * self.head_dim * self.value_dim

    def state_tensors(self) -> list[torch.Tensor]:
        return [self.state]
