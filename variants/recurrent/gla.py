"""Decayed linear attention with data-dependent decay: `gla` (per key channel) and `mamba2` (per
head), one chunked engine for both.

Both keep, per key/value head, a state S (D×Dv) with

    S_t = diag(a_t)·S_{t−1} + k_t v_tᵀ,        o_t = S_tᵀ q_t,

with no normaliser (unlike `linear`), and differ only in the decay a_t and in what multiplies the
keys:

- `gla` (Yang et al. 2024, "Gated Linear Attention Transformers with Hardware-Efficient
  Training"): a_t ∈ (0, 1)^D, one decay per key channel, log a_t = logsigmoid(raw_t)/τ with the
  gate normaliser τ = 16 (flash-linear-attention's ``gate_logit_normalizer``), queries scaled by
  1/√D as fla's kernels do. Gate ``"alpha"`` of width ``"key"``.
- `mamba2` (Dao & Gu 2024, state-space duality): one scalar decay per head,
  a_t = exp(−exp(A_log)·Δ_t) with the time step Δ_t = softplus(raw_t + dt_bias), and the input
  term scaled by Δ_t: S_t = a_t S_{t−1} + Δ_t B_t x_tᵀ, y_t = S_tᵀ C_t, where C ↔ q, B ↔ k,
  x ↔ v. A_log and dt_bias are per key/value head parameters initialised as Mamba-2 does (A
  uniform in [1, 16]; Δ log-uniform in [0.001, 0.1], floored at 1e-4, dt_bias its inverse
  softplus). No query scale (Mamba-2 has none). Gate ``"dt"`` of width ``"head"``.
  Deviations from the Mamba-2 block, which is more than this core: the D·x skip, the gating by
  z, the short convolution and the projections are not here (the shared layer makes q, k, v;
  its RMSNorm is, below); and Mamba-2 shares B and C across the heads of a group while each
  head has its own x, Δ and A, whereas here keys and values share heads (grouped-query:
  queries own heads), so Δ is per key/value head (the gate contract) and A_log, dt_bias have
  one value per key/value head of the shape (``n_kv_heads``); a variant built without it has
  them per query head, and query heads that share keys then keep a state each (as `decay`
  does).
  With ``negative_eigenvalues`` (off by default) the transition is a_t = 2·exp(−exp(A_log)·Δ_t) − 1
  ∈ (−1, 1] instead of exp(−exp(A_log)·Δ_t) ∈ (0, 1]: Grazzi et al. (ICLR 2025, "Unlocking
  State-Tracking in Linear RNNs Through Negative Eigenvalues") map Mamba's transition α to
  2α − 1 (their code: the discretised exp(Δ·A) times 2 minus 1, the input term Δ·B·x and the
  initialisation unchanged), which lets the state flip sign from one token to the next, as
  parity needs and a transition in [0, 1] cannot. This is theirs, on Mamba-2's scalar per head
  (they modify Mamba-1's per-channel scan; the map is the same elementwise).

Both then divide each head's output by its root mean square over the value channels
(``output_norm``, on by default; `attnbench.variants.recurrent.output_norm`), as the reference
layers normalise it before their output projection (fla's GatedLinearAttention: ``g_norm``, an
RMSNorm per head; mamba_ssm's Mamba2: ``norm``, an RMSNorm over all the heads of a group,
here per head: the same with one head), without the norm's learned weight (the output projection
absorbs it) or the gate multiplied in there (SiLU of a projection of the input). Without it the
output carries the state's scale: in `mamba2` the step Δ both scales the written keys and sets
the decay, so a larger output is bought with faster forgetting. Issue #58 measured `mamba2` at
chance on MQAR (128 tokens, 8 pairs, width 64, one head) without the norm, where it learns with
it (0.91 to 0.94 at 4 seeds, at Mamba-2's initialisation). ``output_norm=False`` gives the bare
recurrence below (the exactness tests' reference). A single value channel is left as it is (its
norm would be its sign; `output_norm`'s docstring).

The chunked parallel form (`decayed_attention`): the sequence is cut into chunks of C positions;
within a chunk b_t = Σ_{r ≤ t} log a_r is the cumulative log-decay (≤ 0, decreasing). The
within-chunk weights Σ_d q_td k_sd e^{b_td − b_sd} (s ≤ t) are one C×C product of q_t e^{b_t}
and k_s e^{−b_s} where that is safe: in a block of chunks whose decays each sum above
−FACTOR_SPAN (= −20), so that e^{−b_s} ≤ e^{20} (standard-normal gates sum to about −3 over 64
positions in gla). The factored product overflows once a chunk's decays sum below about −88 in
float32; a steeper block therefore uses only exps of *differences* b_t − b_s with t ≥ s, never
more than 1. For a per-head decay those weights are one C×C matrix exp(b_t − b_s) (masked before
the exp). For a per-channel decay the factor differs per channel, so (q_t ⊙ e^{b_t − b_s})·k_s
is no product of a C×D and a D×C matrix; `_within_chunk_channel` builds it as a binary tree:
the pairs (t in the right half of a block, s in its left half) are one matrix product with both
factors referred to the last position of the left half, e^{b_t − b_ref} and e^{b_ref − b_s},
each ≤ 1; halving down to single positions covers every pair s < t once (log2 C levels, about
C·D/2 multiply-adds per token, as the masked C×C product would be, but about 3·D elementwise
operations per level besides). The past enters through the state at the chunk's start; the
states are carried by a Python loop over chunks (a multiply-add of D×Dv per chunk), blocks of
``BLOCK_CHUNKS`` chunks computed together so that memory stays bounded.

A signed transition (mamba2's ``negative_eigenvalues``) runs the same engine on log|a_t| with
the sign apart (`signed_transition`): the product of a_r over (s, t] is σ_t σ_s e^{b_t − b_s}
with b the cumulative log|a| and σ_t = Π_{r ≤ t} sign a_r (±1, exact in floating point; σ_s² =
1), so σ_t folds into q_t and σ_s into k_s, and the state carried across a chunk is multiplied by
the chunk's σ. |a_t| can be exactly 0 (a_t = 1 + 2·expm1(g_t) when expm1(g_t) = −½: the state
erased), whose log −∞ would make b_t − b_s = −∞ − (−∞) = NaN for s, t after it; so |a_t| is
floored at ε/2 of the compute dtype (2^{−53} in float64, 2^{−24} in float32). That is exact to
the dtype's round-off: near 0, a_t is computed as 1 + x with x = 2·expm1(g_t) near −1 (or
1 − 2e^{g_t} when negative), whose grid there is ε/2, so the floor moves only a_t = 0 itself to
the next value a_t can take, one rounding step away, and changes the state by ε/2 of its size.

``causal=False`` (as for `linear`): every query reads the state after the last key. Causal with
N ≠ M: query i reads the state after key min(i, M − 1) (no token, no decay).

Packed documents (``cu_seqlens``; ``packing = "native"``): one pass over all of them
(`attnbench.variants.recurrent.documents`). Each document is padded with zero queries, keys,
values and log-decays (signs 1) to whole chunks of C = min(chunk, the longest document rounded
up to a power of two) positions; the chunks are laid side by side, so the within-chunk products
and the block's decay factors run as for one sequence, and the carried state is the zero state
again at each document's first chunk. A padded position is the identity transition with no
write: it changes nothing a real position reads, and its output is dropped. Not causal, each
query reads the state after its own document's last chunk. Exact to rounding against each
document run alone (tests/variants/test_packed_native.py); the cost over one sequence is the
padding, at most C − 1 positions per document.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from attnbench import AttentionVariant, VariantShape, register_variant
from attnbench.incremental import IncrementalAttention, register_incremental
from attnbench.variants.kernels import autotune
from attnbench.variants.recurrent.documents import document_chunks, longest_document
from attnbench.variants.recurrent.mixer import GatedMixer
from attnbench.variants.recurrent.output_norm import normalise_output
from attnbench.variants.recurrent.precision import compute_dtype

# chunk lengths a machine chooses among (`autotune.choose`); the first is the default (the one
# measured best on the AMD EPYC before the tuning), which a call too small to tune runs
DEFAULT_CHUNK = 64
CHUNKS = (DEFAULT_CHUNK, 16, 32, 128)
BLOCK_CHUNKS = 16  # chunks computed together; the state is carried chunk by chunk within
SMALL_BLOCK = 8  # tree levels below this half-width multiply elementwise (tiny matmuls are slow)
# a block of chunks whose log-decays sum above −FACTOR_SPAN in every chunk takes the factored
# product (q e^{b})·(k e^{−b}): factors within [e^{−20}, e^{20}] = [2e-9, 5e8], far from float32's
# overflow (3e38) and underflow (1e-38); a steeper block takes the exact-difference forms
FACTOR_SPAN = 20.0

# dtype names whose inputs are computed in float32 (the decays and the state need the mantissa)


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def signed_transition(log_decay: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(log|λ|, sign λ) of λ = 2·e^{g} − 1 ∈ (−1, 1] for log-decays g ≤ 0 (Grazzi et al.'s map
    of a transition α = e^{g} in (0, 1]), |λ| floored at ε/2 of g's dtype (module docstring: exact
    to its round-off). λ − 1 = 2·expm1(g) and |λ| − 1 = −2e^{g} (λ < 0) go through log1p, so a
    transition near ±1 keeps g's relative precision (log λ ≈ 2g for α near 1); both branches see
    inputs clamped above −1, so neither the values nor the gradients of either can be infinite."""
    above = -1 + torch.finfo(log_decay.dtype).eps / 2  # the floor's log1p argument: |λ| ≥ ε/2
    to_one = 2 * torch.expm1(log_decay)  # λ − 1 ∈ [−2, 0]
    negative = to_one < -1  # λ < 0
    log_pos = torch.log1p(to_one.clamp(min=above))  # log λ where λ ≥ 0
    log_neg = torch.log1p((-2 * torch.exp(log_decay)).clamp(min=above))  # log(−λ) where λ < 0
    sign = torch.where(negative, -1.0, 1.0).to(log_decay.dtype)
    return torch.where(negative, log_neg, log_pos), sign


def _within_chunk_head(q: torch.Tensor, k: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A[t, s] = (q_t·k_s)·exp(b_t − b_s) for s ≤ t, else 0; b (…, C, 1) a per-head cumulative
    log-decay. The exponent is masked to −inf above the diagonal before the exp."""
    c = q.shape[-2]
    diff = b - b.transpose(-1, -2)  # (…, C, C): b_t − b_s, ≤ 0 where s ≤ t
    upper = torch.ones(c, c, dtype=torch.bool, device=q.device).triu(1)
    weights = torch.exp(diff.masked_fill(upper, float("-inf")))
    return (q @ k.transpose(-1, -2)) * weights


def _within_chunk_channel(q: torch.Tensor, k: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A[t, s] = Σ_d q_td k_sd exp(b_td − b_sd) for s ≤ t, else 0, with b (…, C, D) a
    per-channel cumulative log-decay and C a power of two (module docstring: the binary tree).
    Each level writes its blocks in place into A through a strided view of its diagonal."""
    c = q.shape[-2]
    lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2])
    a = q.new_zeros(*lead, c, c)
    torch.diagonal(a, dim1=-2, dim2=-1).copy_((q * k).sum(-1))  # s = t: no decay
    h = 1
    while h < c:  # the pairs (t in the right half, s in the left half) of blocks of 2h
        nb = c // (2 * h)
        qb, kb, bb = (x.unflatten(-2, (nb, 2, h)) for x in (q, k, b))  # (…, nb, 2, h, D)
        ref = bb[..., 0, h - 1 :, :]  # the left half's last position: (…, nb, 1, D)
        right = qb[..., 1, :, :] * torch.exp(bb[..., 1, :, :] - ref)  # e^{b_t − b_ref} ≤ 1
        left = kb[..., 0, :, :] * torch.exp(ref - bb[..., 0, :, :])  # e^{b_ref − b_s} ≤ 1
        if h < SMALL_BLOCK:
            pairs = (right.unsqueeze(-2) * left.unsqueeze(-3)).sum(-1)
        else:
            pairs = right @ left.transpose(-1, -2)  # (…, nb, h, h): t right, s left
        blocks = torch.diagonal(a.unflatten(-1, (nb, 2 * h)).unflatten(-3, (nb, 2 * h)), 0, -4, -2)
        blocks[..., h:, :h, :].copy_(pairs.movedim(-3, -1))  # the diagonal blocks' lower left
        h *= 2
    return a


def decayed_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    log_decay: torch.Tensor,
    chunk: int,
    causal: bool,
    state: torch.Tensor | None = None,
    sign: torch.Tensor | None = None,
    cu_seqlens=None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Outputs and final state of S_t = diag(σ_t e^{g_t}) S_{t−1} + k_t v_tᵀ, o_t = S_tᵀ q_t.

    Args:
        q: Queries (B, H, N, D), already scaled.
        k: Keys (B, H_kv, M, D) (H_kv divides H: query head h reads key/value head h // (H/H_kv)).
        v: Values (B, H_kv, M, Dv).
        log_decay: g_t ≤ 0, (B, H_kv, M, D) per key channel or (B, H_kv, M, 1) per head.
        chunk: Chunk length C (a power of two; shorter sequences use the next power of two).
        causal: Query i reads S_i (with N ≠ M: S_{min(i, M−1)}); else every query reads S_M.
        state: S before the first key, (B, H_kv, D, Dv); None for zeros.
        sign: σ_t = ±1, the transition's sign, shaped as ``log_decay`` (``log_decay`` then its
            log-magnitude, finite: `signed_transition`); None for +1 everywhere.
        cu_seqlens: documents packed along the sequence (N = M; module docstring, "Packed
            documents"): each document's outputs as if it ran alone, from the zero state
            (``state`` must be None); the state returned is the last document's.

    Returns:
        (out (B, H, N, Dv), S after the last key (B, H_kv, D, Dv)).
    """
    bsz, heads, n, d = q.shape
    kv, m, dv = k.shape[1], k.shape[-2], v.shape[-1]
    group = heads // kv
    qg = q.reshape(bsz, kv, group, n, d)  # each key/value head's queries
    k, v, g = k.unsqueeze(2), v.unsqueeze(2), log_decay.unsqueeze(2)
    sg = None if sign is None else sign.unsqueeze(2)
    if cu_seqlens is not None and state is not None:
        raise ValueError("packed documents (cu_seqlens) each start from the zero state; got one.")
    empty = q.new_zeros(bsz, kv, 1, d, dv)  # the state a document starts from
    s = empty if state is None else state.unsqueeze(2).to(q.dtype)
    if not causal and cu_seqlens is None:
        after = g.flip(-2).cumsum(-2).flip(-2) - g  # Σ_{r > s} g_r: decay from s to the end
        through, keyed = torch.exp(g.sum(-2)), k * torch.exp(after)
        if sg is not None:  # the signs over (s, M]: σ_M σ_s (σ_s² = 1)
            turn = sg.prod(-2, keepdim=True)
            through, keyed = through * turn.squeeze(-2), keyed * (turn * sg.cumprod(-2))
        s = s * through.unsqueeze(-1) + keyed.transpose(-1, -2) @ v
        return (qg @ s).reshape(bsz, heads, n, dv), s.squeeze(2)
    layout = None
    if cu_seqlens is None:
        if m > n:  # keys after the last query are never read
            k, v, g = k[..., :n, :], v[..., :n, :], g[..., :n, :]
            sg = None if sg is None else sg[..., :n, :]
        c = min(chunk, _pow2_at_least(n))
        pad = (-n) % c
        padded = n + pad
        # zero keys, values and log-decays after the end change no state (and no output kept)
        if pad:
            qg = F.pad(qg, (0, 0, 0, pad))
        if k.shape[-2] != padded:
            k, v, g = (F.pad(x, (0, 0, 0, padded - x.shape[-2])) for x in (k, v, g))
            sg = None if sg is None else F.pad(sg, (0, 0, 0, padded - sg.shape[-2]), value=1.0)
    else:  # each document padded with zeros (signs 1) to whole chunks, side by side
        c = min(chunk, _pow2_at_least(longest_document(cu_seqlens, n)))
        layout = document_chunks(cu_seqlens, n, c, q.device)
        qg, k, v, g = (layout.spread(x, dim=-2) for x in (qg, k, v, g))
        sg = None if sg is None else layout.spread(sg, dim=-2, fill=1.0)
        padded = layout.length
    resets = layout.starts if layout is not None else (False,) * (padded // c)
    ends = set(layout.ends) if layout is not None else set()
    within = _within_chunk_channel if g.shape[-1] > 1 else _within_chunk_head
    lower = torch.ones(c, c, dtype=q.dtype, device=q.device).tril()
    outs, finals = [], []  # outputs of each block; S after each document (packed)
    for start in range(0, padded, c * BLOCK_CHUNKS):
        qc, kc, vc, gc = (x[..., start : start + c * BLOCK_CHUNKS, :] for x in (qg, k, v, g))
        qc, kc, vc, gc = (x.unflatten(-2, (-1, c)) for x in (qc, kc, vc, gc))  # (…, K, C, ·)
        b = gc.cumsum(-2)  # cumulative log-decay within each chunk, ≤ 0, decreasing
        last = b[..., -1:, :]  # its least value
        carry, turn = torch.exp(last), None  # the transitions' product over the chunk
        if sg is not None:  # σ_t into q_t, σ_s into k_s, the chunk's σ into the carry
            sigma = sg[..., start : start + c * BLOCK_CHUNKS, :].unflatten(-2, (-1, c)).cumprod(-2)
            turn = sigma[..., -1:, :]
            qc, kc, carry = qc * sigma, kc * sigma, carry * turn
        queried = qc * torch.exp(b)  # q_t e^{b_t}: to the chunk's start, ≤ 1
        if bool((last >= -FACTOR_SPAN).all()):
            # every chunk's decays sum above −FACTOR_SPAN: e^{−b_s} ≤ e^{FACTOR_SPAN}, so
            # (q_t e^{b_t})·(k_s e^{−b_s}) is one product with factors that neither overflow
            # nor underflow, its terms those of the exact sum to rounding
            keyed = kc * torch.exp(-b)
            if causal:
                out = ((queried @ keyed.transpose(-1, -2)) * lower) @ vc
            own = (keyed * carry).transpose(-1, -2) @ vc
        else:  # a steeper decay: exponents of differences only (module docstring)
            if causal:
                out = within(qc, kc, b) @ vc
            to_end = torch.exp(last - b) if turn is None else turn * torch.exp(last - b)
            own = (kc * to_end).transpose(-1, -2) @ vc
        through = carry.transpose(-1, -2)  # decay across a chunk: (…, K, D or 1, 1)
        starts = []
        for u in range(qc.shape[-3]):  # each chunk's state at its start, carried
            index = start // c + u
            if resets[index]:
                s = empty  # a document's first chunk: nothing of the one before
            starts.append(s)
            s = s * through[..., u, :, :] + own[..., u, :, :]
            if index in ends:
                finals.append(s)
        if causal:
            out = out + queried @ torch.stack(starts, dim=3)
            outs.append(out.flatten(-3, -2))
    if layout is None:
        out = torch.cat(outs, dim=-2)[..., :n, :]
    elif causal:
        out = layout.gather(torch.cat(outs, dim=-2), dim=-2)
    else:  # packed, not causal: each query reads the state after its document's last key
        read = torch.stack(finals, dim=3).index_select(3, layout.doc)  # (…, 1, K, D, Dv)
        out = layout.gather((qg.unflatten(-2, (-1, c)) @ read).flatten(-3, -2), dim=-2)
    return out.reshape(bsz, heads, n, dv), s.squeeze(2)


def per_key_value_head(param: torch.Tensor, heads: int, like: torch.Tensor) -> torch.Tensor:
    """A per key/value head parameter (H_kv,) as (1, heads, 1, 1) in ``like``'s dtype, repeated
    when the keys come repeated to ``heads`` heads (each copy keeps its head's value)."""
    if heads != param.shape[0]:
        param = param.repeat_interleave(heads // param.shape[0])
    return param.to(like.dtype).view(1, heads, 1, 1)


def _decayed_flops(
    variant: AttentionVariant, b: int, h: int, n: int, m: int, d: int, dv: int, causal: bool
) -> float:
    """The matrix products of `decayed_attention` (what ``torch.utils.flop_counter`` sees).

    Per key/value head: the chunk states kᵀv, 2·M·D·Dv. Per query head: the read-out q·S,
    2·N·D·Dv; causal, the within-chunk weights as one C×C product (q e^{b})(k e^{−b})ᵀ, 2·C·D
    per token, and their product with v, 2·C·Dv per token. That is the work at every block whose
    chunks decay by less than e^{−FACTOR_SPAN} (all of them for standard-normal gates, and for
    the gates of a trained layer short of near-zero decays); a steeper block takes the tree
    (per channel: about C·D/2 in products per token, the rest elementwise) or the masked
    exponent (per head), and runs fewer products than counted here. Not counted: the
    elementwise work (decay factors, the state hand-over, D·Dv per chunk), O(N·D).
    """
    kv = h * variant.shape.kv_heads / variant.shape.n_heads
    if not causal:
        return 2.0 * b * (h * n + kv * m) * d * dv
    c = min(variant.last_chunk, _pow2_at_least(n))
    scores = 2 * c * d
    return b * n * (h * (scores + 2 * c * dv + 2 * d * dv) + kv * 2 * d * dv)


@dataclass
class GLAParams:
    """Hyperparameters of `gla` (defaults: flash-linear-attention's GatedLinearAttention)."""

    gate_normaliser: float = 16.0  # τ in log a = logsigmoid(raw)/τ (fla gate_logit_normalizer)
    # positions per chunk of the parallel form (a power of two); 0: chosen on the machine
    # (`CHUNKS`, `DecayedLinearAttention.chunk`)
    chunk_size: int = 0
    # each head's output divided by its RMS over the value channels, as the reference's norm
    # (module docstring); false: the bare recurrence
    output_norm: bool = True


@dataclass
class Mamba2Params:
    """Hyperparameters of `mamba2` (defaults: mamba_ssm's Mamba2 module)."""

    # positions per chunk of the parallel form (a power of two); 0: chosen on the machine
    # (`CHUNKS`, `DecayedLinearAttention.chunk`)
    chunk_size: int = 0
    # each head's output divided by its RMS over the value channels, as the reference's norm
    # (module docstring); false: the bare recurrence
    output_norm: bool = True
    a_init_min: float = 1.0  # A = exp(A_log) drawn uniformly in [a_init_min, a_init_max]
    a_init_max: float = 16.0
    dt_min: float = 0.001  # the initial time step Δ is log-uniform in [dt_min, dt_max] …
    dt_max: float = 0.1
    dt_init_floor: float = 1e-4  # … and at least this
    # the transition 2·exp(−A·Δ) − 1 in (−1, 1] instead of exp(−A·Δ) in (0, 1] (Grazzi et al.
    # 2025; module docstring); false: Mamba-2's
    negative_eigenvalues: bool = False


class DecayedLinearAttention(GatedMixer):
    """Base of `gla` and `mamba2`: a gate turned into per-token log-decays (`decays`), the shared
    engine `decayed_attention`, the state per key/value head."""

    family = "gated-linear"
    cost = "n"
    supports_causal = True
    grouped_query = True  # one state per key/value head; the gates are per key/value head
    # packed documents in one pass: chunks laid out per document, the state reset at each
    # document's first chunk (module docstring, "Packed documents")
    packing = "native"
    gates_width = "key"
    # measured (tests/variants/test_gated_linear.py::test_error_in_each_dtype_…) over 2048 causal
    # positions, H = 4, D = 64, standard-normal inputs and gates, against the float64 forward,
    # relative to the output's scale: float32 2.7e-7 (gla) and 3.7e-7 (mamba2); float16 5.4e-4
    # and 1.0e-3, bfloat16 3.9e-3 and 9.0e-3 (inputs and parameters rounded, computed in
    # float32). The limits leave 27×, 20× and 5× room
    # (bare recurrences). With the output norm (the default), gla at n = 512 (8 seeds, 1 and 4
    # key/value heads, causal and not) and 2048: worst 7.8e-7, 2.3e-3 and 1.3e-2, within these;
    # mamba2's own are below
    error_tolerance = {"float64": 1e-12, "float32": 1e-5, "float16": 2e-2, "bfloat16": 5e-2}

    def __init__(self, params, shape: VariantShape) -> None:
        super().__init__(params, shape)
        c = params.chunk_size
        if c < 0 or c & (c - 1):
            raise ValueError(
                f"{self.name} chunk_size must be a power of two, or 0 to choose it on the "
                f"machine; got {c}; try 64."
            )
        self.last_chunk = c or DEFAULT_CHUNK  # what the last call ran with (for its FLOPs)

    def chunk(self, q: torch.Tensor, k, v, g, sign, causal: bool) -> int:
        """The chunk length C of this call: the parameter where it is set, else the machine's
        choice for the call's class (`autotune.choose` among `CHUNKS`, timed on the forward
        without autograd over its first positions): the C×C products inside
        chunks grow with C, the loop's hand-overs with N / C, and where they balance depends on
        the machine."""
        if self.params.chunk_size:
            return self.params.chunk_size
        if not causal:  # one product over the whole sequence: no chunks
            return DEFAULT_CHUNK
        end = autotune.CHUNK_PROBE_POSITIONS
        parts = [x[:, :, :end].detach() for x in (q, k, v, g)]
        cut = None if sign is None else sign[:, :, :end].detach()
        return autotune.choose_chunk(
            f"{self.name} chunks",
            q,
            k,
            v,
            CHUNKS,
            lambda c: decayed_attention(*parts, c, True, None, cut),
            channels=g.shape[-1] > 1,  # gla's decay per key channel, mamba2's per head
            signed=sign is not None,
        )

    def decays(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, gates: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(scaled queries, keys as they enter the state, values, log-decays ≤ 0) from the raw
        gates; keys and values with as many heads as the states (`state_heads`)."""
        raise NotImplementedError

    def transitions(self, log_decay: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(log|a_t|, sign a_t or None where every a_t > 0) of the transitions from the
        log-decays of `decays`: here a_t = e^{g_t} itself."""
        return log_decay, None

    def state_heads(self, kv_heads: int) -> int:
        """The states kept for keys of ``kv_heads`` heads: one per key/value head, unless the
        variant's own per-head parameters have more heads (mamba2 built without n_kv_heads, its
        A per query head): then one per parameter head, as `decay` keeps one per query head."""
        return kv_heads

    def scan(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        gates: dict[str, torch.Tensor],
        causal: bool,
        state: torch.Tensor | None = None,
        cu_seqlens: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The engine on the parametrised gates, computed in `compute_dtype`, its output
        RMS-normalised per head where ``output_norm`` is set: (out, state). ``cu_seqlens``:
        documents packed along the sequence, in one pass (module docstring)."""
        dtype = compute_dtype(q.dtype)
        q, k, v = (x.to(dtype) for x in (q, k, v))
        gates = {name: g.to(dtype) for name, g in gates.items()}
        q, k, v, g = self.decays(q, k, v, gates)
        g, sign = self.transitions(g)
        c = self.last_chunk = self.chunk(q, k, v, g, sign, causal)
        out, state = decayed_attention(q, k, v, g, c, causal, state, sign, cu_seqlens)
        return (normalise_output(out) if self.params.output_norm else out), state

    def forward_flops(self, batch, heads, n, m, d, dv, causal) -> float:
        return _decayed_flops(self, batch, heads, n, m, d, dv, causal)


@register_variant("gla")
class GatedLinearAttention(DecayedLinearAttention):
    """Gated linear attention: a per-key-channel decay logsigmoid(raw)/τ, queries scaled by
    1/√D, no normaliser (module docstring)."""

    Params = GLAParams
    gates = {"alpha": "key"}
    gates_width = "key"

    def __init__(self, params: GLAParams, shape: VariantShape) -> None:
        super().__init__(params, shape)
        if not params.gate_normaliser > 0:
            raise ValueError(f"gla gate_normaliser must be > 0, got {params.gate_normaliser}.")

    def decays(self, q, k, v, gates):
        log_decay = F.logsigmoid(gates["alpha"]) / self.params.gate_normaliser
        return q / math.sqrt(q.shape[-1]), k, v, log_decay


@register_variant("mamba2")
class Mamba2(DecayedLinearAttention):
    """Mamba-2's SSD core: a per-head decay exp(−exp(A_log)·Δ) (2·exp(−exp(A_log)·Δ) − 1 with
    ``negative_eigenvalues``), keys scaled by Δ = softplus(raw + dt_bias) (module docstring,
    with the deviations from the block)."""

    Params = Mamba2Params
    gates = {"dt": "head"}
    gates_width = "head"
    # with the output norm (the default), measured as above at n = 512 (16 seeds, 1 and 4
    # key/value heads, causal and not: 64 draws): median 9.0e-7, 2.3e-3 and 1.9e-2 in float32,
    # float16 and bfloat16, but worst 1.4e-4, 0.12 and 0.19 (without the norm: worst 1.0e-6,
    # 1.7e-3, 1.6e-2). The norm divides each row by its own root mean square (up to 1/√ε =
    # 316× where it is below √ε), and mamba2's rows nearly cancel now and then (a strong decay
    # and a small Δ leave one term q·k Δ v, with q·k near 0): there the inputs' rounding is of
    # the row's own size. Limits 2.5× to 3.6× the worst at n = 512 (at 2048 tokens one
    # bfloat16 draw of 16 reached 1.0: a near-zero row whose sign the rounding flipped).
    # With negative_eigenvalues, the same 64 draws at n = 512 (other seeds: off, worst 1.3e-5,
    # 2.9e-2, 0.26): worst 1.7e-5, 3.6e-2 and 0.37 (bare: 3.2e-6, 2.7e-3, 2.4e-2), and at
    # 2048 (the test's draw, 3 more): float32 2.2e-6 to 5.5e-6, float16 1.1e-2 to 1.5e-2,
    # bfloat16 0.095 to 0.21; alternating signs and transitions near 0 cancel rows more often.
    # The same limits hold, float32 30× the worst, bfloat16 only 1.4×
    error_tolerance = {"float64": 1e-12, "float32": 5e-4, "float16": 3e-1, "bfloat16": 5e-1}

    def __init__(self, params: Mamba2Params, shape: VariantShape) -> None:
        super().__init__(params, shape)
        p = params
        if not 0 < p.a_init_min <= p.a_init_max or not 0 < p.dt_min <= p.dt_max:
            raise ValueError(
                f"mamba2 needs 0 < a_init_min <= a_init_max and 0 < dt_min <= dt_max; got "
                f"A in [{p.a_init_min}, {p.a_init_max}], dt in [{p.dt_min}, {p.dt_max}]."
            )
        big = torch.finfo(torch.float32).max  # the parameters are float32
        if not (p.a_init_max <= big and p.dt_max <= big):
            raise ValueError(
                f"mamba2's a_init_max={p.a_init_max} and dt_max={p.dt_max} must fit float32 (its "
                f"parameters' type); give values below {big:.3g}."
            )
        if not 0 <= p.dt_init_floor <= p.dt_max:
            # a floor above dt_max would replace the log-uniform range by one value, a negative
            # one is no floor of a positive step: both say something other than what they seem to
            raise ValueError(
                f"mamba2 needs 0 <= dt_init_floor <= dt_max; got dt_init_floor="
                f"{p.dt_init_floor}, dt_max={p.dt_max}."
            )
        kv = shape.kv_heads
        a = torch.empty(kv).uniform_(p.a_init_min, p.a_init_max)
        self.A_log = nn.Parameter(torch.log(a))
        log_dt = torch.rand(kv) * (math.log(p.dt_max) - math.log(p.dt_min)) + math.log(p.dt_min)
        dt = torch.exp(log_dt).clamp(min=p.dt_init_floor)
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # softplus⁻¹(dt)

    def state_heads(self, kv_heads: int) -> int:
        return max(kv_heads, self.A_log.shape[0])

    def decays(self, q, k, v, gates):
        heads, raw = self.state_heads(k.shape[1]), gates["dt"]
        if heads > k.shape[1]:  # a decay per query head: keys and values repeated to them
            k, v, raw = (x.repeat_interleave(heads // k.shape[1], dim=1) for x in (k, v, raw))
        dt = F.softplus(raw + per_key_value_head(self.dt_bias, heads, k))  # (B, H_kv, M, 1)
        log_decay = -torch.exp(per_key_value_head(self.A_log, heads, k)) * dt
        return q, k * dt, v, log_decay

    def transitions(self, log_decay):
        """e^{g} in (0, 1], or with ``negative_eigenvalues`` 2·e^{g} − 1 in (−1, 1] as its
        log-magnitude and sign (`signed_transition`)."""
        if self.params.negative_eigenvalues:
            return signed_transition(log_decay)
        return log_decay, None


class DecayedIncremental(IncrementalAttention):
    """Decoding `gla` and `mamba2`: the state S (D×Dv) per key/value head, the same size at every
    length; n new tokens run the chunked engine from it (a step: one decay and one rank-one
    update, then q·S)."""

    grouped_query = True

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.state_heads = self.variant.state_heads(self.kv_heads)
        lead = (self.batch, self.state_heads, self.head_dim, self.value_dim)
        self.state = torch.zeros(*lead, device=self.device, dtype=self.dtype)

    def state_size(self, n: int) -> int:
        """D·Dv per state head (`state_heads`: the key/value heads) whatever n: S is all a later
        token reads of the past."""
        return self.state_heads * self.head_dim * self.value_dim

    def state_tensors(self) -> list[torch.Tensor]:
        return [self.state]

    def _extend(self, q, k, v, gates):
        out, state = self.variant.scan(q, k, v, gates, causal=True, state=self.state)
        self.state.copy_(state)
        return out.to(q.dtype)


@register_incremental("gla")
class GLAIncremental(DecayedIncremental):
    """`gla` token by token (`DecayedIncremental`)."""


@register_incremental("mamba2")
class Mamba2Incremental(DecayedIncremental):
    """`mamba2` token by token (`DecayedIncremental`)."""
