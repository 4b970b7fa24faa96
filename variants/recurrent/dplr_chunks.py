"""The chunked form of a diagonal-plus-low-rank (DPLR) recurrence with a per-channel decay,
shared by `kda` (Kimi Delta Attention) and `rwkv7` (RWKV-7's attention core), forward and
incremental form alike.

The recurrence, per key/value head, with a state S of D×Dv (keys in, values out)::

    S_t = (I + a_t b_tᵀ) Diag(α_t) S_{t−1} + k_t v_tᵀ        out_t = S_tᵀ q_t

with α_t = exp(g_t) ∈ (0, 1]^D one decay per key channel, a_t, b_t ∈ R^D the rank-one part and
k_t v_tᵀ the write. `kda`: a = −β k, b = k, write key β k (the gated delta rule with a
per-channel decay). `rwkv7`: Diag(w) − (a ⊙ κ̂) κ̂ᵀ = (I − (a ⊙ κ̂)(κ̂ / w)ᵀ) Diag(w), so
a = −a ⊙ κ̂, b = κ̂ / w (bounded: RWKV-7's decay w ≥ e^{−e^{−1/2}} ≈ 0.545). The low-rank part
reads the decayed state, which is what lets both be written with one cumulative log-decay.

Inside a chunk of C positions from the state S₀, let c_r = g_1 + … + g_r (per channel, the
cumulative log-decay, ≤ 0 and decreasing), γ_r = e^{c_r} and u_r = b_rᵀ Diag(α_r) S_{r−1} (a
row of Dv: what the rank-one part reads). Unrolling the recurrence::

    S_r = Diag(γ_r) S₀ + Σ_{i≤r} Diag(γ_r / γ_i) (a_i u_i + k_i v_iᵀ)

and substituting it into u_r gives the unit lower-triangular system
(I − L_ba) U = (B ⊙ Γ) S₀ + L_bk V, with L_xy[r, i] = Σ_d x_rd y_id e^{c_rd − c_id} over i < r.
T = (I − L_ba)⁻¹ (by recursive doubling, `delta_chunks.unit_lower_inverse`) does not depend on
S₀, so every chunk's W = T (B ⊙ Γ) and U' = T L_bk V come from batched products, and only
U = U' + W S₀ and the hand-over S_C = Diag(γ_C) S₀ + (A ⊙ γ_C/γ)ᵀ U + (K ⊙ γ_C/γ)ᵀ V follow
the chunks in order (a Python loop over N / C chunks). The outputs are
O = (Q ⊙ Γ) S₀ + P_qa U + P_qk V with P_xy the same sums over i ≤ r, batched after the loop.

The pairwise sums are per channel, e^{c_rd − c_id} differing by channel. Where a chunk's
log-decays sum above −`FACTOR_SPAN` (= −20) in every channel they are one C×C product per chunk,
(x_r ⊙ e^{c_r}) (y_i ⊙ e^{−c_i})ᵀ masked, with factors within [e^{−20}, e^{20}] (`rwkv7` always
at chunks of up to 32: its log-decay is above −0.61 per token; `kda` where its gates are mild).
A steeper chunk (`kda`'s standard-normal gates at its initialisation: about e^{−40} over a chunk
of 16 in the channels of its fastest heads) leaves that range (e^{−c_i} overflows float32 past
e^{88}): there the sums are built from exps of *differences* c_r − c_i with i ≤ r, each ≤ 1
(masked to −∞ above the diagonal before the exp), exact for any decay (a strongly forgetting
channel underflows to 0, nothing overflows): y_i e^{c_r − c_i} element-wise (a C×C×D tensor per
chunk, in blocks of at most `PAIR_BUDGET` elements), then one product per position with its rows
(b_r and the G queries). That element-wise work, C·D per pair and position, is why the chunks
here are shorter than `delta_chunks`' (a per-head decay needs C×C only). Both paths run the same
products, 2·C·D per row, position and column vector.

Grouped-query heads: q has H = G·H_kv heads; the G query heads of a key/value head read its
state, so the state, the inverse and the hand-over are computed once per key/value head.

Packed documents (``cu_seqlens``; the variants' ``packing = "native"``): one pass over all of
them (`attnbench.variants.recurrent.documents`). Each document is padded with positions of
k = a = b = 0, v = 0 and g = 0 (the identity transition, no write) to whole chunks of
C = min(chunk, longest document) positions and the chunks are laid side by side: the pairwise
sums, the inverses, W and U' are batched over all chunks of all documents as for one sequence,
and the loop sets the state to zero at each document's first chunk. Not causal, each query
reads the state after its own document's last chunk. The padded rows' outputs are dropped.
Exact to rounding against each document run alone (tests/variants/test_packed_native.py).

`dplr_flops` counts the matrix products (what `torch.utils.flop_counter` sees); the pairwise
sums, decays and the base blocks of the inverse are element-wise and not counted.
"""

from __future__ import annotations

import torch

from attnbench.variants.kernels import autotune
from attnbench.variants.recurrent.delta_chunks import inverse_flops, unit_lower_inverse
from attnbench.variants.recurrent.documents import chunk_layout

# positions per chunk: a steep chunk's pairwise sums cost C·D element-wise per position, the
# loop's hand-overs N / C steps; where they balance depends on the machine (`machine_chunk`
# chooses among CHUNKS, the first the default). Not 64: the chunk's inverse loses precision
# with C, and kda's float32 error against float64 at 64 was 2.5e-6 of its 3e-6 tolerance
# (N = 2048, D = 16), at 32 1.2e-6 and at 8 and 16 4–6e-7 (N = 4096)
DEFAULT_CHUNK = 16
CHUNKS = (DEFAULT_CHUNK, 8, 32)
PAIR_BUDGET = 1 << 22  # elements of the C×C×D decay tensor built at once (16 MiB in float32)
# a chunk whose log-decays sum above −FACTOR_SPAN in every channel takes the factored product
# (x e^{c})(y e^{−c})ᵀ: factors within [e^{−20}, e^{20}] = [2e-9, 5e8], far from float32's
# overflow (3e38); a steeper chunk takes exps of differences (module docstring)
FACTOR_SPAN = 20.0


def _exact_pairs(
    x: torch.Tensor, ys: tuple[torch.Tensor, ...], cum: torch.Tensor
) -> list[torch.Tensor]:
    """`decayed_pairs` from exps of differences c_r − c_i ≤ 0 (any decay), in blocks of chunks:
    y_i e^{c_r − c_i} element-wise, then its product with the rows x_r of each position r."""
    b, kv, chunks, rows, c, d = x.shape
    keep = torch.ones(c, c, dtype=torch.bool, device=x.device).tril().unsqueeze(-1)
    block = max(1, PAIR_BUDGET // max(1, b * kv * c * c * d))
    x_cols = x.permute(0, 1, 2, 4, 5, 3)  # (…, K, C_r, D, R)
    outs: list[list[torch.Tensor]] = [[] for _ in ys]
    for s in range(0, chunks, block):
        cb = cum[:, :, s : s + block]
        gaps = cb.unsqueeze(-2) - cb.unsqueeze(-3)  # (…, C_r, C_i, D): c_r − c_i
        decay = gaps.masked_fill_(~keep, float("-inf")).exp_()
        for out, y in zip(outs, ys, strict=True):
            pairs = (decay * y[:, :, s : s + block].unsqueeze(-3)) @ x_cols[:, :, s : s + block]
            out.append(pairs.permute(0, 1, 2, 5, 3, 4))  # (…, K, R, C_r, C_i)
    return [torch.cat(parts, dim=2) for parts in outs]


def _factored_pairs(
    x: torch.Tensor, ys: tuple[torch.Tensor, ...], cum: torch.Tensor
) -> list[torch.Tensor]:
    """`decayed_pairs` as one product per chunk, (x_r e^{c_r}) (y_i e^{−c_i})ᵀ, masked: for
    chunks whose log-decays sum above −`FACTOR_SPAN` (the factors then lie in [e^{−20}, e^{20}],
    each term the exact one to rounding)."""
    c = x.shape[-2]
    above = torch.ones(c, c, dtype=torch.bool, device=x.device).triu(1)
    rows = x * cum.exp().unsqueeze(3)
    return [
        (rows @ (y * (-cum).exp()).transpose(-1, -2).unsqueeze(3)).masked_fill_(above, 0.0)
        for y in ys
    ]


def decayed_pairs(
    x: torch.Tensor, ys: tuple[torch.Tensor, ...], cum: torch.Tensor
) -> list[torch.Tensor]:
    """P[r, i] = Σ_d x_rd y_id e^{c_rd − c_id} for i ≤ r, else 0 (module docstring).

    Args:
        x: (B, H_kv, K, R, C, D) the rows (R per key/value head: b, and the query heads).
        ys: each (B, H_kv, K, C, D), the columns.
        cum: (B, H_kv, K, C, D) the cumulative log-decay c within each of the K chunks.

    Returns:
        One (B, H_kv, K, R, C, C) tensor per y: a chunk whose decay sums above −`FACTOR_SPAN`
        in every channel by one product (`_factored_pairs`), a steeper one from exps of
        differences (`_exact_pairs`). Either way 2·C·D·R multiply-adds per position and y in
        products, which the flop counter sees.
    """
    mild = (cum[..., -1, :] >= -FACTOR_SPAN).all(-1)  # (B, H_kv, K)
    if bool(mild.all()):
        return _factored_pairs(x, ys, cum)
    if not bool(mild.any()):
        return _exact_pairs(x, ys, cum)
    # both kinds: each form on its own chunks, gathered and put back in place
    b, kv, chunks, rows, c, _ = x.shape
    flat = b * kv * chunks
    outs = [x.new_zeros(flat, rows, c, c) for _ in ys]
    for path, chosen in ((_factored_pairs, mild), (_exact_pairs, ~mild)):
        index = chosen.flatten().nonzero().squeeze(-1)

        def pick(t: torch.Tensor, index=index) -> torch.Tensor:
            return t.reshape(flat, *t.shape[3:]).index_select(0, index)[None, None]

        for out, value in zip(
            outs, path(pick(x), tuple(pick(y) for y in ys), pick(cum)), strict=True
        ):
            out.index_copy_(0, index, value[0, 0])
    return [out.view(b, kv, chunks, rows, c, c) for out in outs]


def dplr_chunked(
    q: torch.Tensor | None,
    k: torch.Tensor,
    v: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    log_decay: torch.Tensor,
    chunk: int = DEFAULT_CHUNK,
    state: torch.Tensor | None = None,
    causal: bool = True,
    cu_seqlens=None,
) -> tuple[torch.Tensor | None, torch.Tensor]:
    """S_t = (I + a_t b_tᵀ) Diag(e^{g_t}) S_{t−1} + k_t v_tᵀ over a sequence, chunk by chunk.

    Args:
        q: (B, H, N, D) queries as they are read; with ``causal`` N must equal M. None: only the
            final state is wanted.
        k: (B, H_kv, M, D) write keys.
        v: (B, H_kv, M, Dv) values.
        a, b: (B, H_kv, M, D) the rank-one part of the transition (module docstring).
        log_decay: (B, H_kv, M, D) g_t ≤ 0 per key channel.
        chunk: positions per chunk C.
        state: (B, H_kv, D, Dv) the state before the first token; None: zeros.
        causal: True: out_t = S_tᵀ q_t; False: every query reads the final state S_Mᵀ q.
        cu_seqlens: documents packed along the sequence (N = M; module docstring, "Packed
            documents"): each document's outputs as if it ran alone, from the zero state
            (``state`` must be None); the state returned is the last document's.

    Returns:
        The outputs (B, H, N, Dv) (None when ``q`` is None) and the final state, in the inputs'
        dtype (the variants pass float32 or float64).
    """
    bsz, kv, m, d = k.shape
    dv = v.shape[-1]
    if cu_seqlens is not None and state is not None:
        raise ValueError("packed documents (cu_seqlens) each start from the zero state; got one.")
    empty = k.new_zeros(bsz * kv, d, dv)  # the state a document starts from
    if state is None:
        state = empty.view(bsz, kv, d, dv)
    if m == 0:
        return (None if q is None else q.new_zeros(*q.shape[:-1], dv)), state
    if q is not None and causal and q.shape[2] != m:
        raise ValueError(
            f"the causal recurrence needs as many queries as keys; got {q.shape[2]} and {m}."
        )
    # one sequence padded to whole chunks, or each document so, side by side ("Packed documents")
    c, n_chunks, spread, layout = chunk_layout(m, chunk, cu_seqlens, k.device)
    length = n_chunks * c
    # padded positions: k = a = b = 0, v = 0, g = 0: the identity transition, no write
    kc, ac, bc, gc = (spread(x).reshape(bsz, kv, n_chunks, c, d) for x in (k, a, b, log_decay))
    vc = spread(v).reshape(bsz, kv, n_chunks, c, dv)
    cum = gc.cumsum(-2)  # c_r per channel: (…, C, D)
    gamma = cum.exp()  # γ_r ≤ 1
    to_end = (cum[..., -1:, :] - cum).exp()  # γ_C / γ_i ≤ 1
    through = cum[..., -1, :].exp().unsqueeze(-1)  # γ_C: (…, D, 1)
    h = q.shape[1] if q is not None else kv
    group = h // kv
    rows = bc.unsqueeze(3)
    if q is not None and causal:  # the queries' pairs with the same decays: G more rows
        qc = spread(q).reshape(bsz, kv, group, n_chunks, c, d).transpose(2, 3)
        rows = torch.cat([rows, qc], dim=3)
    p_a, p_k = decayed_pairs(rows, (ac, kc), cum)  # (…, K, 1 (+ G), C, C), i ≤ r
    t = unit_lower_inverse(-p_a[:, :, :, 0].tril(-1))  # (I − L_ba)⁻¹, L strictly lower
    w = t @ (bc * gamma)  # U = U' + W S₀
    u_prime = t @ (p_k[:, :, :, 0].tril(-1) @ vc)
    own = (kc * to_end).transpose(-1, -2) @ vc  # (K ⊙ γ_C/γ)ᵀ V: (…, D, Dv)

    # the loop over (B·H_kv)-flattened chunks, taken apart once (`unbind`: indexing chunk i in
    # the loop would give each index a backward writing a whole-sequence gradient)
    flat = bsz * kv
    s = state.reshape(flat, d, dv)
    u_primes = u_prime.reshape(flat, n_chunks, c, dv).unbind(1)
    ws = w.reshape(flat, n_chunks, c, d).unbind(1)
    reads = (ac * to_end).reshape(flat, n_chunks, c, d).transpose(-1, -2).unbind(1)
    owns = own.reshape(flat, n_chunks, d, dv).unbind(1)
    throughs = through.reshape(flat, n_chunks, d, 1).unbind(1)
    starts, writes, finals = [], [], []  # S₀ and U of each chunk; S after each document
    resets = layout.starts if layout is not None else (False,) * n_chunks
    ends = set(layout.ends) if layout is not None else set()
    for i in range(n_chunks):
        if resets[i]:
            s = empty  # a document's first chunk: nothing of the one before
        u = torch.baddbmm(u_primes[i], ws[i], s)
        if q is not None and causal:
            starts.append(s)
            writes.append(u)
        s = torch.baddbmm(s * throughs[i] + owns[i], reads[i], u)
        if i in ends:
            finals.append(s)
    state = s.view(bsz, kv, d, dv)
    if q is None:
        return None, state
    n = q.shape[2]
    if not causal and layout is None:  # every query reads the state after the last key
        return (q.reshape(bsz, kv, group * n, d) @ state).view(bsz, h, n, dv), state
    if not causal:  # packed: each query reads the state after its document's last key
        read = torch.stack(finals, dim=1).index_select(1, layout.doc)  # (B·H_kv, K, D, Dv)
        qc = spread(q).reshape(bsz, kv, group, n_chunks, c, d).transpose(2, 3)
        out = qc.reshape(bsz * kv, n_chunks, group * c, d) @ read
        out = out.view(bsz, kv, n_chunks, group, c, dv).transpose(2, 3)
        return layout.gather(out.reshape(bsz, h, length, dv)), state
    p_qa, p_qk = p_a[:, :, :, 1:], p_k[:, :, :, 1:]  # (…, K, G, C, C)
    starts = torch.stack(starts, dim=1).view(bsz, kv, n_chunks, 1, d, dv)
    writes = torch.stack(writes, dim=1).view(bsz, kv, n_chunks, 1, c, dv)
    out = (qc * gamma.unsqueeze(3)) @ starts + p_qa @ writes + p_qk @ vc.unsqueeze(3)
    out = out.transpose(2, 3).reshape(bsz, h, length, dv)
    return (out[:, :, :n] if layout is None else layout.gather(out)), state


def dplr_step(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    log_decay: torch.Tensor,
    state: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token of the recurrence (the incremental forms' step): q (B, H, 1, D), k, a, b,
    log_decay (B, H_kv, 1, D), v (B, H_kv, 1, Dv), state (B, H_kv, D, Dv) → (out (B, H, 1, Dv),
    the new state)."""
    decayed = state * log_decay.exp().transpose(-1, -2)  # Diag(α) S
    state = decayed + a.transpose(-1, -2) @ (b @ decayed) + k.transpose(-1, -2) @ v
    bsz, h, _, d = q.shape
    kv = state.shape[1]
    out = q.reshape(bsz, kv, h // kv, d) @ state
    return out.reshape(bsz, h, 1, -1), state


def dplr_flops(
    heads: int, kv_heads: int, n: int, m: int, d: int, dv: int, causal: bool, chunk: int
) -> float:
    """The matrix-product FLOPs of `dplr_chunked` for one sequence (multiply-add = 2), what
    `torch.utils.flop_counter` counts; padding of the last chunk not counted.

    Per key/value head: the pairwise sums' products with b (2·2·M·C·D: y_i e^{c_r − c_i}
    times b_r for y = a and k), each chunk's inverse (`inverse_flops`) and W = T (B ⊙ Γ)
    (2·M·C·D), U' = T (L_bk V) (2·2·M·C·Dv), and the state terms W S₀, the hand-over's
    (A ⊙ γ_C/γ)ᵀ U and (K ⊙ γ_C/γ)ᵀ V (2·M·D·Dv each). Per query head, causal: the pairwise
    sums' products with q (2·2·N·C·D), the read-out (Q ⊙ Γ) S₀ (2·N·D·Dv) and P_qa U, P_qk V
    (2·N·C·Dv each); not causal: the read-out of the final state (2·N·D·Dv). Not counted
    (element-wise): the decays e^{c_r − c_i} and their products with y, the inverse's base
    blocks.
    """
    c = max(1, min(chunk, m))
    chunks = -(-m // c)
    per_kv = chunks * inverse_flops(c) + 2.0 * m * c * (3 * d + 2 * dv) + 6.0 * m * d * dv
    if causal:
        return kv_heads * per_kv + 2.0 * heads * n * (d * dv + 2 * c * (d + dv))
    return kv_heads * per_kv + 2.0 * heads * n * d * dv


def machine_chunk(
    kernel: str, chunk_size: int, inputs: tuple[torch.Tensor, ...], causal: bool
) -> int:
    """The chunk length of a `dplr_chunked` call on ``inputs`` (its q, k, v, a, b, log_decay):
    ``chunk_size`` where set (> 0), else the machine's choice for the call's class
    (`autotune.choose_chunk` among `CHUNKS`, timed on the forward without autograd over the first
    `autotune.CHUNK_PROBE_POSITIONS`)."""
    if chunk_size:
        return chunk_size
    end = autotune.CHUNK_PROBE_POSITIONS
    cut = [x[:, :, :end].detach() for x in inputs]
    q, k, v = inputs[:3]
    return autotune.choose_chunk(
        kernel, q, k, v, CHUNKS, lambda c: dplr_chunked(*cut, c, causal=causal)
    )
