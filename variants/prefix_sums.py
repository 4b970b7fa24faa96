"""Chunkwise causal kernel sums: the linear-cost engine of `linear`, `identity` and `decay`.

For per-position features a_i (queries), b_j (keys) and values v_j, and an optional per-head decay
λ ∈ (0, 1], computes for every i

    num_i = Σ_{j ≤ i} λ^{i−j} (a_i · b_j) v_j        den_i = Σ_{j ≤ i} λ^{i−j} (a_i · b_j)

without forming the N×N matrix. The sequence is cut into chunks of C positions: inside a chunk the
masked C×C products are computed directly; the past enters through the state
S_c = Σ_{j before chunk c} λ^{(start of c) − 1 − j} b_j v_jᵀ, which is a plain prefix sum when λ = 1
and a geometrically weighted one (a small (chunks × chunks) matrix product) otherwise. This equals
the explicit recurrence S_t = λ·S_{t−1} + b_t v_tᵀ, num_t = a_t·S_t (checked in the tests).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _chunks(x: torch.Tensor, c: int) -> torch.Tensor:
    """(B, H, N, D) → (B, H, N/c, c, D), zero-padding N up to a multiple of c."""
    b, h, n, d = x.shape
    pad = (-n) % c
    if pad:
        x = F.pad(x, (0, 0, 0, pad))
    return x.reshape(b, h, (n + pad) // c, c, d)


def causal_kernel_sums(
    a: torch.Tensor,
    b: torch.Tensor,
    v: torch.Tensor,
    chunk: int,
    log_decay: torch.Tensor | None = None,
    with_den: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(num, den) of the module docstring; den is None unless ``with_den``.

    Args:
        a: Query features (B, H, N, D).
        b: Key features (B, H, N, D) — as many keys as queries.
        v: Values (B, H, N, Dv).
        chunk: Chunk length C.
        log_decay: log λ per head, shape (H,), all ≤ 0; None for no decay.
        with_den: Also return the normaliser sums (for linear attention).
    """
    bsz, heads, n, _ = a.shape
    if b.shape[-2] != n:
        raise ValueError(f"causal kernel sums need as many keys as queries ({n} vs {b.shape[-2]}).")
    c = max(1, min(chunk, n))
    ac, bc, vc = _chunks(a, c), _chunks(b, c), _chunks(v, c)
    nc = ac.shape[2]
    if with_den:  # a ones column in v carries the normaliser through the same products
        vc = torch.cat([vc, torch.ones_like(vc[..., :1])], dim=-1)

    pos = torch.arange(c, device=a.device)
    lower = pos[:, None] >= pos[None, :]
    if log_decay is None:
        within = (ac @ bc.transpose(-2, -1)).masked_fill(~lower, 0.0)
        chunk_state = bc.transpose(-2, -1) @ vc  # (B, H, nc, D, Dv)
        past = torch.cumsum(chunk_state, dim=2) - chunk_state
        out = within @ vc + ac @ past
    else:
        ld = log_decay.to(a.dtype).view(heads, 1, 1)
        gaps = (pos[:, None] - pos[None, :]).to(a.dtype)
        decay_in = torch.exp(gaps.clamp(min=0) * ld).masked_fill(~lower, 0.0)  # (H, c, c)
        within = (ac @ bc.transpose(-2, -1)) * decay_in.unsqueeze(1)
        to_end = torch.exp((c - 1 - pos).to(a.dtype) * ld)  # λ^{c−1−r}, (H, 1, c)
        chunk_state = (bc * to_end.unsqueeze(-1)).transpose(-2, -1) @ vc
        steps = torch.arange(nc, device=a.device)
        lag = (steps[:, None] - 1 - steps[None, :]).to(a.dtype)  # chunks between c' and c
        carry = torch.exp(lag.clamp(min=0) * c * ld).masked_fill(lag < 0, 0.0)  # (H, nc, nc)
        flat = chunk_state.reshape(bsz, heads, nc, -1)
        past = (carry @ flat).reshape(chunk_state.shape)
        from_start = torch.exp((pos + 1).to(a.dtype) * ld).unsqueeze(-1)  # λ^{r+1}, (H, c, 1)
        out = within @ vc + (ac * from_start) @ past
    out = out.reshape(bsz, heads, nc * c, -1)[:, :, :n]
    if with_den:
        return out[..., :-1], out[..., -1:]
    return out, None
