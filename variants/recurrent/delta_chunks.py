"""The chunked (WY / UT) form of the delta rule and the gated delta rule, shared by the forward
and the incremental form of `delta_net` and `gated_delta_net`.

The recurrence, per key/value head, with a state S of D×Dv (keys in, values out)::

    S_t = α_t S_{t−1} + β_t k_t (v_t − α_t S_{t−1}ᵀ k_t)ᵀ        out_t = S_tᵀ q_t

(α_t = 1: the delta rule, Yang et al. 2024; α_t = exp(g_t) ≤ 1: the gated delta rule, Yang,
Kautz & Hatamizadeh 2025). A token-by-token loop is exact but serial; this module computes the
same outputs a chunk of C positions at a time, with matrix products inside the chunk and a
Python loop over chunks only (N / C iterations: 256 at 8k tokens with C = 32).

Inside a chunk starting from state S₀, write u_r = β_r (v_r − α_r S_{r−1}ᵀ k_r) for what token r
writes, γ_r = α_1 ⋯ α_r (log γ: the cumulative log-decay within the chunk) and
Γ[r, i] = γ_r / γ_i for i ≤ r. Unrolling the recurrence gives
S_r = γ_r S₀ + Σ_{i≤r} Γ[r, i] k_i u_iᵀ, and substituting S_{r−1} into u_r gives the triangular
system (I + strictly-lower(diag(β) (Γ ⊙ K Kᵀ))) U = diag(β) (V − diag(γ) K S₀): with
T = (I + strictly-lower(diag(β) (Γ ⊙ K Kᵀ)))⁻¹ diag(β), U = T V − (T diag(γ) K) S₀ = U' − W S₀
(the UT transform of the WY representation, as in flash-linear-attention's chunk algorithm). T
does not depend on S₀, so U' and W of every chunk come from one batched inverse (a triangular
matrix inverted by recursive doubling in batched products, `unit_lower_inverse`); only
U = U' − W S₀ and the hand-over S_C = γ_C S₀ + (diag(γ_C / γ) K)ᵀ U follow the chunks in order.
The outputs are O = diag(γ) Q S₀ + (tril(Q Kᵀ) ⊙ Γ) U, batched over chunks after the loop from
the states each chunk started from.

Decays are applied as differences of cumulative log-decays (exp(log γ_r − log γ_i) ≤ 1, never
γ_i⁻¹ alone), so a strongly forgetting head underflows to 0 rather than overflowing to ∞.

Grouped-query heads: q has H = G·H_kv heads; k, v, β and the decay have H_kv. The G query heads
of a group are stacked as G·C rows of their chunk, so the state, the inverse and the hand-over
are computed once per key/value head.

Packed documents (``cu_seqlens``; the variants' ``packing = "native"``): one pass over all of
them (`attnbench.variants.recurrent.documents`). Each document is padded with positions of
k = 0, v = 0, β = 0 and α = 1 (no write, no decay: they change no state) to whole chunks of
C = min(chunk, longest document) positions and the chunks are laid side by side: the Gram
matrices, the inverses, W and U' are batched over all chunks of all documents as for one
sequence, and the loop sets the state to zero at each document's first chunk (so no gradient
crosses a boundary either). Not causal, each query reads the state after its own document's
last chunk. The padded rows' outputs are dropped. Exact to rounding against each document run
alone (tests/variants/test_packed_native.py).

Every step but the element-wise ones (gates, decays, the 4×4 base blocks of the inverse) is a
matrix product, which `torch.utils.flop_counter` counts; `products_flops` is that count.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from attnbench.variants.recurrent.documents import chunk_layout

# positions per chunk. flash-linear-attention uses 64 (its BT, a GPU tile); on the CPU 32 is
# faster: the products inside chunks scale with C, the loop's hand-overs with N/C (8k tokens,
# H = 4, D = 64, float32, one thread, CPU seconds per causal forward, delta_net / gated: C = 16:
# 51 / 58 ms, 32: 49 / 55 ms, 64: 59 / 69 ms, 128: 81 / 121 ms, under load 14 on 2 cores)
DEFAULT_CHUNK = 32
BASE_BLOCK = (
    4  # diagonal blocks inverted by substitution before the doubling (`unit_lower_inverse`)
)


def unit_lower_inverse(strict: torch.Tensor) -> torch.Tensor:
    """(I + A)⁻¹ for strictly lower-triangular A (…, C, C), by recursive doubling.

    Why not `torch.linalg.solve_triangular`: on the CPU it solves a batch of small systems one
    LAPACK call at a time, 30× slower here than a batched product of the same size (measured
    at 8k tokens, 4 heads: 0.75 s against 25 ms). The doubling is all batched products: the
    inverses of the diagonal blocks of size 4 by forward substitution (3 steps, element-wise),
    then blocks of size s merge into 2s by [[P, 0], [Q, R]]⁻¹ = [[P⁻¹, 0], [−R⁻¹ Q P⁻¹, R⁻¹]]
    (LAPACK's recursive trtri), log₂(C/4) levels. C that is not a power of two is padded with
    identity rows (A zero there), which leaves the leading C×C block of the inverse exact.
    """
    c = strict.shape[-1]
    size = 1 << (c - 1).bit_length()
    lead = strict.shape[:-2]
    if size != c:
        strict = F.pad(strict, (0, size - c, 0, size - c))
    s = min(BASE_BLOCK, size)

    def diagonal_blocks(width: int) -> torch.Tensor:
        """The diagonal width×width blocks of A: (…, size / width, width, width)."""
        count = size // width
        tiles = strict.reshape(*lead, count, width, count, width)
        return tiles.diagonal(dim1=-4, dim2=-2).movedim(-1, -3)

    base = diagonal_blocks(s)
    eye = torch.eye(s, dtype=strict.dtype, device=strict.device).expand(*base.shape)
    rows = [eye[..., 0, :]]
    for r in range(1, s):  # row r of the inverse: e_r − Σ_{i<r} A[r, i] · (row i)
        rows.append(eye[..., r, :] - sum(base[..., r, i, None] * rows[i] for i in range(r)))
    blocks = torch.stack(rows, dim=-2)
    while s < size:
        lower_left = diagonal_blocks(2 * s)[..., s:, :s]
        first, second = blocks[..., 0::2, :, :], blocks[..., 1::2, :, :]
        mixed = -(second @ lower_left) @ first
        top = torch.cat([first, torch.zeros_like(first)], dim=-1)
        blocks = torch.cat([top, torch.cat([mixed, second], dim=-1)], dim=-2)
        s *= 2
    return blocks[..., 0, :c, :c]


def inverse_flops(c: int) -> float:
    """The products of `unit_lower_inverse` for one C×C matrix: 2·P·s² at each merge of blocks
    of s into 2s (P = C rounded up to a power of two); the base blocks' substitution is
    element-wise and not counted (3·P·16 multiply-adds)."""
    size = 1 << (c - 1).bit_length()
    s, total = BASE_BLOCK, 0.0
    while s < size:
        total += 2.0 * size * s * s
        s *= 2
    return total


def delta_rule_chunked(
    q: torch.Tensor | None,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    log_alpha: torch.Tensor | None = None,
    chunk: int = DEFAULT_CHUNK,
    state: torch.Tensor | None = None,
    causal: bool = True,
    cu_seqlens=None,
) -> tuple[torch.Tensor | None, torch.Tensor]:
    """The (gated) delta rule over a sequence, chunk by chunk (module docstring).

    Args:
        q: (B, H, N, D) queries, as they are read (normalised and scaled by the caller); with
            ``causal`` N must equal M. None: only the final state is wanted.
        k: (B, H_kv, M, D) keys (normalised by the caller: the rule assumes ‖k‖ ≈ 1).
        v: (B, H_kv, M, Dv) values.
        beta: (B, H_kv, M) write strengths β_t in [0, 2] (above 1: a negative eigenvalue).
        log_alpha: (B, H_kv, M) log-decays g_t = log α_t ≤ 0; None: α = 1 (the delta rule).
        chunk: positions per chunk C.
        state: (B, H_kv, D, Dv) the state before the first token; None: zeros.
        causal: True: out_t = S_tᵀ q_t; False: every query reads the final state S_Mᵀ q.
        cu_seqlens: documents packed along the sequence (N = M; "Packed documents" in the
            module docstring): each document's outputs as if it ran alone, from the zero state
            (``state`` must be None); the state returned is the last document's.

    Returns:
        The outputs (B, H, N, Dv) (None when ``q`` is None) and the final state (B, H_kv, D, Dv).
        Computed in the dtype of the inputs (the variants pass float32 or float64).
    """
    b, kv, m, d = k.shape
    dv = v.shape[-1]
    if cu_seqlens is not None and state is not None:
        raise ValueError("packed documents (cu_seqlens) each start from the zero state; got one.")
    empty = k.new_zeros(b * kv, d, dv)  # the state a document starts from
    if state is None:
        state = empty.view(b, kv, d, dv)
    if m == 0:
        out = None if q is None else q.new_zeros(*q.shape[:-1], dv)
        return out, state
    # one sequence padded to whole chunks, or each document so, side by side ("Packed documents")
    c, n_chunks, spread, layout = chunk_layout(m, chunk, cu_seqlens, k.device)
    length = n_chunks * c
    # padded positions have k = 0, v = 0, β = 0 and α = 1: they write nothing and forget nothing
    kc = spread(k).reshape(b, kv, n_chunks, c, d)
    vc = spread(v).reshape(b, kv, n_chunks, c, dv)
    bc = spread(beta).reshape(b, kv, n_chunks, c, 1)
    lower = torch.ones(c, c, dtype=torch.bool, device=k.device).tril()  # i <= r
    if log_alpha is not None:
        cum = spread(log_alpha).reshape(b, kv, n_chunks, c).cumsum(-1)  # log γ_r
        # Γ[r, i] = γ_r / γ_i for i <= r, 0 above the diagonal (masked before exp: no overflow)
        gaps = (cum.unsqueeze(-1) - cum.unsqueeze(-2)).masked_fill(~lower, float("-inf"))
        decay_pairs = gaps.exp()
        gamma = cum.exp().unsqueeze(-1)  # γ_r: (…, C, 1)
        gamma_last = cum[..., -1:].exp()  # γ_C: (…, 1)
        to_end = (cum[..., -1:] - cum).exp().unsqueeze(-1)  # γ_C / γ_i: (…, C, 1)
    gram = kc @ kc.transpose(-1, -2)  # (B, H_kv, n_chunks, C, C)
    if log_alpha is not None:
        gram = gram * decay_pairs
    # A = strictly-lower(diag(β) (Γ ⊙ K Kᵀ)); T = (I + A)⁻¹ diag(β): β scales T's columns;
    # W = T diag(γ) K and U' = T V, two products (no concatenated right-hand side to copy)
    t = unit_lower_inverse(gram.tril(-1) * bc) * bc.transpose(-1, -2)
    w = t @ (kc * gamma if log_alpha is not None else kc)
    u_prime = t @ vc
    keys_out = kc * to_end if log_alpha is not None else kc  # diag(γ_C / γ) K

    # the loop, with (B, H_kv) flattened: one fused product-and-add (baddbmm) per hand-over,
    # so 2 operations per chunk carry the state (fewer tiny operations for the threads to sync)
    # The chunks are taken apart once (`unbind`): indexing chunk i in the loop would give each
    # index a backward that writes a whole-sequence gradient, quadratic in the chunks (a
    # forward+backward at 8k spent 3/4 of its time there)
    bk = b * kv
    state = state.reshape(bk, d, dv)
    u_primes = u_prime.reshape(bk, n_chunks, c, dv).unbind(1)
    ws = w.reshape(bk, n_chunks, c, d).unbind(1)
    outs_keys = keys_out.reshape(bk, n_chunks, c, d).transpose(-1, -2).unbind(1)
    lasts = gamma_last.reshape(bk, n_chunks, 1, 1).unbind(1) if log_alpha is not None else None
    starts, writes, finals = [], [], []  # S₀ and U of each chunk; S after each document
    resets = layout.starts if layout is not None else (False,) * n_chunks
    ends = set(layout.ends) if layout is not None else set()
    for i in range(n_chunks):
        if resets[i]:
            state = empty  # a document's first chunk: nothing of the one before
        u = torch.baddbmm(u_primes[i], ws[i], state, alpha=-1)
        if q is not None and causal:
            starts.append(state)
            writes.append(u)
        if lasts is not None:
            state = state * lasts[i]
        state = torch.baddbmm(state, outs_keys[i], u)
        if i in ends:
            finals.append(state)
    state = state.view(b, kv, d, dv)

    if q is None:
        return None, state
    h, n = q.shape[1], q.shape[2]
    group = h // kv
    if not causal and layout is None:  # every query reads the state after the last key
        out = q.reshape(b, kv, group * n, d) @ state
        return out.view(b, h, n, dv), state
    if n != m:
        raise ValueError(f"the causal delta rule needs as many queries as keys; got {n} and {m}.")
    # queries of a key/value head's G query heads stacked as G·C rows of each chunk
    qc = spread(q).reshape(b, kv, group, n_chunks, c, d).transpose(2, 3)
    if not causal:  # packed: each query reads the state after its document's last key
        read = torch.stack(finals, dim=1).index_select(1, layout.doc)  # (B·H_kv, K, D, Dv)
        out = qc.reshape(b * kv, n_chunks, group * c, d) @ read
        out = out.view(b, kv, n_chunks, group, c, dv).transpose(2, 3).reshape(b, h, length, dv)
        return layout.gather(out), state
    scores = qc.reshape(b, kv, n_chunks, group * c, d) @ kc.transpose(-1, -2)
    scores = scores.view(b, kv, n_chunks, group, c, c)  # (…, G, C, C): one mask for the group
    if log_alpha is not None:
        scores = scores * decay_pairs.unsqueeze(3)
        qc = qc * gamma.unsqueeze(3)
    else:
        scores = scores.masked_fill(~lower, 0.0)
    rows = (b, kv, n_chunks, group * c)
    starts = torch.stack(starts, dim=1).view(b, kv, n_chunks, d, dv)
    writes = torch.stack(writes, dim=1).view(b, kv, n_chunks, c, dv)
    out = qc.reshape(*rows, d) @ starts + scores.view(*rows, c) @ writes
    out = out.view(b, kv, n_chunks, group, c, dv).transpose(2, 3).reshape(b, h, length, dv)
    return (out[:, :, :n] if layout is None else layout.gather(out)), state


def products_flops(
    heads: int, kv_heads: int, n: int, m: int, d: int, dv: int, causal: bool, chunk: int
) -> float:
    """The matrix-product FLOPs of `delta_rule_chunked` for one sequence (multiply-add = 2),
    what `torch.utils.flop_counter` counts; padding of the last chunk not counted.

    Per key/value head: the chunks' Gram matrices K Kᵀ (2·M·C·D), the inverse of each chunk's
    triangular matrix (`inverse_flops`) and its product with [K | V] (2·M·C·(D + Dv)), W S₀ and
    Kᵀ U (2·M·D·Dv each). Per query head, causal: the scores Q Kᵀ (2·N·C·D), the read-out Q S₀
    (2·N·D·Dv) and the scores times U (2·N·C·Dv); not causal: the read-out of the final state
    (2·N·D·Dv). Not counted (element-wise): the base blocks of the inverse, gates, decays.
    """
    c = max(1, min(chunk, m))
    chunks = -(-m // c)
    triangular = chunks * inverse_flops(c) + 2.0 * m * c * (d + dv)
    state = kv_heads * (2.0 * m * (c * d + 2 * d * dv) + triangular)
    if causal:
        return state + 2.0 * heads * n * (c * (d + dv) + d * dv)
    return state + 2.0 * heads * n * d * dv
