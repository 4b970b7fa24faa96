"""The incremental (token-by-token) forms of the built-in causal variants, and what each keeps.

Every form equals its variant's causal forward over the ``max_len`` sequence at every position
(`attnbench.incremental`; checked over the registry in the contract tests). What each keeps:

- a **KV cache** of every key and value (softmax, relu², sigmoid, strided, bigbird,
  learned_pattern, topk): a later query may weigh any earlier key, so none can be dropped; the
  cache is allocated for ``max_len`` tokens once and the n tokens in use are the state;
- a **ring of the w latest** keys and values (window): older keys are never seen again;
- a **D×Dv matrix** per head, plus a D-vector normaliser for linear (linear, identity, decay):
  the sum over past tokens of φ(k)vᵀ (decayed by λ per token for decay), the same size at
  every length.

Every form here shares keys and values across query heads (``kv_heads`` < H, grouped-query):
a cache, ring or state per key/value head, so the state shrinks by the group factor, except
decay's, whose decay rate is per query head, so heads that share keys and values still
accumulate different states (one per query head, as without grouping).

A step computes only what the pattern scores: the w ring entries (window), the local and dilated
keys (strided), the listed key blocks (bigbird, learned_pattern), every key's score then the k
picked values (topk: finding them scores all). A prefill from the start runs the variant's own
kernel where the pattern of a prefix is the prefix of the full pattern (window, strided: sizes
resolved at ``max_len`` and pinned as absolute counts); bigbird draws its random blocks per
sequence length, and learned_pattern selects per head, so theirs go query block by query block
over the ``max_len`` pattern.
"""

from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn.functional as F

from attnbench.incremental import IncrementalAttention, register_incremental
from attnbench.variants.kernels.prefix_sums import causal_kernel_sums

SCORE_TILE_BYTES = 16 * 1024 * 1024  # rows of scores materialised at once by the dense paths


def _row_chunk(n_keys: int, like: torch.Tensor) -> int:
    """Query rows per tile so that a (B, H, rows, n_keys) score tile stays within the budget."""
    per_row = like.shape[0] * like.shape[1] * n_keys * like.element_size()
    return max(1, SCORE_TILE_BYTES // max(per_row, 1))


def _visible(rows: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """(len(rows), len(keys)) bool: key position j is visible to query position i iff j <= i."""
    return keys[None, :] <= rows[:, None]


def _pinned(variant, **sizes):
    """A twin of ``variant`` with pattern sizes pinned as absolute counts (and its parameters,
    learned ones included, shared): its kernel on a prefix computes the full pattern's prefix."""
    twin = type(variant).__new__(type(variant))
    twin.__dict__ = dict(variant.__dict__)  # shares the submodules and parameters
    twin.params = dataclasses.replace(variant.params, **sizes)
    return twin


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


def _masked_sdpa(q, t, keys, values, scale):
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


@register_incremental("softmax")
class SoftmaxIncremental(KeyValueCache):
    """Softmax with a KV cache: a step is one SDPA call of one query over the cache."""

    def _attend(self, q, t, keys, values):
        q, scale = self.variant._scaled_queries(q)
        return _masked_sdpa(q, t, keys, values, scale)


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
                outs.append(_masked_sdpa(rows, s, keys[:, :, :e], values[:, :, :e], scale))
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


class RecurrentState(IncrementalAttention):
    """Base of the linear-cost forms: a (B, kv_heads, D, Dv) matrix S, the same size at every
    length (one per key/value head: the query heads of a group read the same S)."""

    grouped_query = True
    state_heads_are_query_heads = False  # decay: a state per query head (module docstring)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.state_heads = self.heads if self.state_heads_are_query_heads else self.kv_heads
        self.state = torch.zeros(
            self.batch,
            self.state_heads,
            self.head_dim,
            self.value_dim,
            device=self.device,
            dtype=self.dtype,
        )

    def state_size(self, n: int) -> int:
        return self.state_heads * self.head_dim * self.value_dim

    def state_tensors(self) -> list[torch.Tensor]:
        return [self.state]


@register_incremental("identity")
class IdentityIncremental(RecurrentState):
    """S = Σ k vᵀ; out = q·S / (√D·M) with M = ``max_len`` (identity's causal normaliser)."""

    def _extend(self, q, k, v):
        scale = 1 / (math.sqrt(q.shape[-1]) * self.max_len)
        if q.shape[-2] == 1:  # a step: fold the token in, then read S_t
            self.state.add_(k.transpose(-2, -1) @ v)
            return self.per_query_head(q, self.state).mul_(scale)
        out = self.per_query_head(q, self.state) * scale
        chunk = self.variant.params.chunk_size
        out = out + causal_kernel_sums(q, self.repeat_kv(k), self.repeat_kv(v), chunk, scale=scale)
        self.state += k.transpose(-2, -1) @ v
        return out


@register_incremental("decay")
class DecayIncremental(RecurrentState):
    """S_t = λ·S_{t−1} + k_t v_tᵀ, out_t = q_t·S_t / √D, with λ per head: one S per query head,
    also with grouped keys and values (heads with different λ accumulate different states)."""

    state_heads_are_query_heads = True

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        log_decay = self.variant.log_decay.to(device=self.device, dtype=self.dtype)
        self.log_decay = log_decay.view(-1, 1, 1)  # (H, 1, 1)
        self.decay = torch.exp(self.log_decay)

    def _extend(self, q, k, v):
        n, scale = q.shape[-2], 1 / math.sqrt(q.shape[-1])
        k, v = self.repeat_kv(k), self.repeat_kv(v)
        if n == 1:  # a step: S_t = λ·S_{t−1} + k vᵀ, then read it
            self.state.mul_(self.decay).add_(k.transpose(-2, -1) @ v)
            return (q @ self.state).mul_(scale)
        steps = torch.arange(n, device=q.device, dtype=q.dtype).view(1, -1, 1)
        # the earlier tokens reach position t + i decayed by λ^{i+1}
        out = (q @ self.state) * torch.exp((steps + 1) * self.log_decay) * scale
        out = out + causal_kernel_sums(
            q, k, v, self.variant.params.chunk_size, self.variant.log_decay, scale=scale
        )
        to_end = torch.exp((n - 1 - steps) * self.log_decay)  # λ^{n−1−i}: (H, n, 1)
        self.state.mul_(torch.exp(n * self.log_decay)).add_((k * to_end).transpose(-2, -1) @ v)
        return out


@register_incremental("linear")
class LinearIncremental(RecurrentState):
    """S = Σ φ(k)vᵀ and z = Σ φ(k); out = φ(q)·S / (φ(q)·z + eps)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.key_sum = torch.zeros(
            self.batch, self.kv_heads, self.head_dim, 1, device=self.device, dtype=self.dtype
        )

    def state_size(self, n: int) -> int:
        return self.kv_heads * self.head_dim * (self.value_dim + 1)

    def state_tensors(self) -> list[torch.Tensor]:
        return [self.state, self.key_sum]

    def _extend(self, q, k, v):
        phi, eps = self.variant.phi, self.variant.params.eps
        fq, fk = phi(q), phi(k)
        if q.shape[-2] == 1:  # a step: fold the token in, then read
            self.state.add_(fk.transpose(-2, -1) @ v)
            self.key_sum.add_(fk.transpose(-2, -1))
            num = self.per_query_head(fq, self.state)
            return num / (self.per_query_head(fq, self.key_sum) + eps)
        num = self.per_query_head(fq, self.state)
        den = self.per_query_head(fq, self.key_sum)
        # the new tokens among themselves: values with a column of ones give the normaliser
        ones = v.new_ones(*v.shape[:-1], 1)
        values = self.repeat_kv(torch.cat([v, ones], dim=-1))
        inner = causal_kernel_sums(fq, self.repeat_kv(fk), values, self.variant.params.chunk_size)
        num, den = num + inner[..., :-1], den + inner[..., -1:]
        self.state += fk.transpose(-2, -1) @ v
        self.key_sum += fk.sum(dim=-2, keepdim=True).transpose(-2, -1)
        return num / (den + eps)
