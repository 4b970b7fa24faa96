from __future__ import annotations

import pytest
import torch
from conftest import random_qkv
from references import decay_recurrence

from attnbench.variant import VariantShape, build_variant


def _make(h, **params):
    return build_variant("decay", params, VariantShape(n_heads=h, head_dim=16, max_len=512))


def test_default_schedule_is_retnet_per_head():
    lam = _make(4).decays()
    expected = 1 - 2.0 ** (-5 - torch.arange(4, dtype=torch.float64))
    torch.testing.assert_close(lam.double(), expected, rtol=1e-6, atol=0)


# (37, 2) and (300, 8) span several blocks of BLOCK_CHUNKS chunks, the last one partial
@pytest.mark.parametrize("n, chunk", [(1, 64), (37, 8), (64, 16), (150, 32), (37, 2), (300, 8)])
@pytest.mark.parametrize("decay", [None, 0.9, 0.5])
def test_chunked_equals_recurrence(decay, n, chunk):
    variant = _make(3, decay=decay, chunk_size=chunk)
    q, k, v = random_qkv(b=2, h=3, n=n, d=16, dv=8, seed=n)
    ref = decay_recurrence(q, k, v, variant.decays())
    torch.testing.assert_close(variant(q, k, v, causal=True), ref, rtol=1e-5, atol=1e-5)


def test_non_causal_is_bidirectional_decay():
    variant = _make(2, decay=0.8, chunk_size=8)
    q, k, v = random_qkv(b=1, h=2, n=30, d=16)
    i = torch.arange(30)
    weights = 0.8 ** (i[:, None] - i[None, :]).abs().double()
    ref = (weights * (q.double() @ k.double().transpose(-2, -1)) / 4.0) @ v.double()
    torch.testing.assert_close(variant(q, k, v), ref.float(), rtol=1e-5, atol=1e-5)


def test_long_sequences_do_not_underflow_and_stay_exact():
    """λ = 0.5 over 4096 positions: λ^t underflows float32 after ~150 steps, which a naive
    chunkwise form turns into 0/0. Checked against the definition out_t = Σ_{j≤t} λ^{t−j}
    (q_t·k_j)/√d v_j at the last 64 positions and the first 64, truncated to the 128 keys
    before t (the rest weigh ≤ 0.5^128 relative)."""
    variant = _make(1, decay=0.5, chunk_size=16)
    n = 4096
    q, k, v = random_qkv(b=1, h=1, n=n, d=16)
    out = variant(q, k, v, causal=True)
    for t in [*range(64), *range(n - 64, n)]:
        j = torch.arange(max(0, t - 127), t + 1)
        w = 0.5 ** (t - j).double() * (k[0, 0, j].double() @ q[0, 0, t].double()) / 4.0
        torch.testing.assert_close(
            out[0, 0, t].double(), w @ v[0, 0, j].double(), rtol=1e-5, atol=1e-5
        )


def test_rejects_decay_out_of_range():
    with pytest.raises(ValueError, match=r"decay must be in \(0, 1\], got 1.5"):
        _make(1, decay=1.5)
