"""Chunkwise causal kernel sums: the linear-cost engine of `linear`, `identity` and `decay`.

For per-position features a_i (queries), b_j (keys) and values v_j, and an optional per-head decay
λ ∈ (0, 1], computes for every i

    num_i = Σ_{j ≤ i} λ^{i−j} (a_i · b_j) v_j        den_i = Σ_{j ≤ i} λ^{i−j} (a_i · b_j)

without forming the N×N matrix. This equals the explicit recurrence S_t = λ·S_{t−1} + b_t v_tᵀ,
num_t = a_t·S_t (checked in the tests).

The sequence is cut into chunks of C positions. Inside a chunk the masked C×C products are
computed directly; the past enters through S at the chunk's start. Chunks are processed a block of
``BLOCK_CHUNKS`` at a time, in order, carrying S (B, H, D, Dv) from block to block: inside a block
the chunk starts' states are one small matrix product W·[S_in; s_0; …; s_{K−1}] with
W[t, u] = λ^{(t−u)·C} for u ≤ t (a prefix sum when λ = 1), where s_u is chunk u's own
contribution. The work per block is fixed, so time and memory grow linearly in N, and a block's
tensors stay small enough to live in cache.

Grouped-query heads: keys and values may have H_kv heads dividing the queries' H (no decay: a
decay is per query head). Queries are then laid out (B, H_kv, G, N, D) and keys and values
(B, H_kv, 1, N, ·), so S is computed once per key/value head and read by its G query heads.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from attnbench.variants.kernels import autotune

BLOCK_CHUNKS = 16  # chunks processed together between two hand-overs of the state
# chunk lengths a machine chooses among for a variant whose `chunk_size` is 0 (`machine_chunk`);
# the first is the default (the one set before the tuning), which a call too small to tune runs
DEFAULT_CHUNK = 64
CHUNKS = (DEFAULT_CHUNK, 16, 32, 128)


def checked_chunk(variant: str, chunk_size: int) -> int:
    """A variant's ``chunk_size`` parameter checked (>= 1, or 0: the machine's choice); the chunk
    its calls run before any has chosen (the default for 0)."""
    if chunk_size < 0:
        raise ValueError(
            f"{variant} chunk_size must be >= 1, or 0 to choose it on the machine; got "
            f"{chunk_size}."
        )
    return chunk_size or DEFAULT_CHUNK


def machine_chunk(
    variant: str,
    a: torch.Tensor,
    b: torch.Tensor,
    v: torch.Tensor,
    log_decay: torch.Tensor | None = None,
    feature_map: Callable[[torch.Tensor], torch.Tensor] | None = None,
    eps: float | None = None,
    scale: float = 1.0,
) -> int:
    """The chunk length this machine runs `causal_kernel_sums` with for the call's class
    (`autotune.choose_chunk` among `CHUNKS`, timed on its first positions):
    the C×C products inside chunks grow with C, the state hand-overs with N / C, and where they
    balance depends on the machine. Arguments as `causal_kernel_sums`'s."""
    end = autotune.CHUNK_PROBE_POSITIONS
    parts = [x[..., :end, :].detach() for x in (a, b, v)]
    return autotune.choose_chunk(
        f"{variant} chunks",
        a,
        b,
        v,
        CHUNKS,
        lambda c: causal_kernel_sums(*parts, c, log_decay, feature_map, eps, scale),
        decay=log_decay is not None,
        normalised=eps is not None,
        feature_map=feature_map is not None,
    )


def _chunks(x: torch.Tensor, c: int) -> torch.Tensor:
    """(B, H, G, N, D) → (B, H, G, N/c, c, D); N must be a multiple of c."""
    *lead, n, d = x.shape
    return x.reshape(*lead, n // c, c, d)


def _state_weights(
    log_decay: torch.Tensor | None, heads: int, c: int, k: int, like: torch.Tensor
) -> torch.Tensor:
    """W of the module docstring, (H, K+1, K+1): row t mixes the incoming state and chunks < t."""
    steps = torch.arange(k + 1, device=like.device)
    lag = (steps[:, None] - steps[None, :]).to(like.dtype)
    if log_decay is None:
        return (lag >= 0).to(like.dtype).expand(heads, k + 1, k + 1)
    ld = log_decay.to(like.dtype).view(heads, 1, 1)
    return torch.exp(lag.clamp(min=0) * c * ld).masked_fill(lag < 0, 0.0)


def causal_kernel_sums(
    a: torch.Tensor,
    b: torch.Tensor,
    v: torch.Tensor,
    chunk: int,
    log_decay: torch.Tensor | None = None,
    feature_map: Callable[[torch.Tensor], torch.Tensor] | None = None,
    eps: float | None = None,
    scale: float = 1.0,
) -> torch.Tensor:
    """num of the module docstring, or num / (den + eps) when ``eps`` is given.

    Args:
        a: Queries (B, H, N, D); features a_i = feature_map(a)_i.
        b: Keys (B, H_kv, N, D) — as many keys as queries; H_kv divides H (module docstring).
        v: Values (B, H_kv, N, Dv).
        chunk: Chunk length C.
        log_decay: log λ per head, shape (H,), all ≤ 0 (then H_kv = H); None for no decay.
        feature_map: Applied to queries and keys block by block (while the block is in cache);
            None for the identity.
        eps: Normalise: return num / (den + eps), linear attention's output.
        scale: Multiplies every a_i · b_j (folded into per-chunk constants, not a pass over a).
    """
    bsz, query_heads, n, d = a.shape
    heads = b.shape[1]  # the key/value heads: S is kept per key/value head
    group = query_heads // heads
    if b.shape[-2] != n:
        raise ValueError(f"causal kernel sums need as many keys as queries ({n} vs {b.shape[-2]}).")
    if group * heads != query_heads or (log_decay is not None and group != 1):
        raise ValueError(
            f"causal kernel sums: {heads} key/value heads for {query_heads} query heads; they "
            "must divide them (and equal them under a per-head decay)."
        )
    c = max(1, min(chunk, n))
    pad = (-n) % c
    if pad:  # zero keys and values at the end add nothing to any earlier position
        a, b, v = (F.pad(x, (0, 0, 0, pad)) for x in (a, b, v))
    a = a.reshape(bsz, heads, group, a.shape[-2], d)  # (B, H_kv, G, N, D): a group per state
    b, v = b.unsqueeze(2), v.unsqueeze(2)  # (B, H_kv, 1, N, ·): shared across the group
    dv = v.shape[-1]
    normalise = eps is not None

    pos = torch.arange(c, device=a.device)
    lower = pos[:, None] >= pos[None, :]
    if log_decay is None:
        decay_in = lower.to(a.dtype) * scale  # (c, c)
        to_end = None
        from_start = (
            None if scale == 1.0 else torch.full((c, 1), scale, dtype=a.dtype, device=a.device)
        )
    else:
        ld = log_decay.to(a.dtype).view(heads, 1, 1, 1, 1)  # broadcasts over (H, G, K, c, ·)
        gaps = (pos[:, None] - pos[None, :]).to(a.dtype)
        decay_in = torch.exp(gaps.clamp(min=0) * ld).masked_fill(~lower, 0.0) * scale
        to_end = torch.exp((c - 1 - pos).to(a.dtype)[:, None] * ld)  # λ^{c−1−r}: (H,1,1,c,1)
        from_start = torch.exp((pos + 1).to(a.dtype)[:, None] * ld) * scale  # λ^{r+1}

    block = c * BLOCK_CHUNKS
    weights = _state_weights(log_decay, heads, c, BLOCK_CHUNKS, a)
    state = a.new_zeros(bsz, heads, 1, 1, d, dv)  # S at the block's start
    key_sum = a.new_zeros(bsz, heads, 1, d)  # Σ λ^{·} b_j, the normaliser's state
    outs = []
    for start in range(0, a.shape[-2], block):
        ac, bc, vc = (_chunks(x[..., start : start + block, :], c) for x in (a, b, v))
        if feature_map is not None:
            ac, bc = feature_map(ac), feature_map(bc)
        k = ac.shape[3]
        w = weights[:, : k + 1, : k + 1]
        within = (ac @ bc.transpose(-2, -1)) * decay_in  # (B, H_kv, G, K, c, c)
        keyed = bc if to_end is None else bc * to_end
        own = keyed.transpose(-2, -1) @ vc  # s_u: (B, H_kv, 1, K, D, Dv)
        stacked = torch.cat([state, own], dim=3).reshape(bsz, heads, k + 1, d * dv)
        starts = (w @ stacked).reshape(bsz, heads, 1, k + 1, d, dv)
        queried = ac if from_start is None else ac * from_start
        out = within @ vc + queried @ starts[:, :, :, :k]
        state = starts[:, :, :, k:]
        if normalise:
            key_starts = w @ torch.cat([key_sum, keyed.sum(dim=-2)[:, :, 0]], dim=2)
            den = within.sum(dim=-1) + (queried * key_starts[:, :, None, :k, None]).sum(dim=-1)
            out = out / (den.unsqueeze(-1) + eps)
            key_sum = key_starts[:, :, k:]  # (B, H_kv, 1, D)
        outs.append(out.reshape(bsz, query_heads, k * c, dv))
    return torch.cat(outs, dim=2)[:, :, :n]
