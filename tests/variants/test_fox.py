"""`fox` (attnbench.variants.fox) against a slow, obviously correct float64 reference: each
logit q_i·k_j/√D plus the explicit sum of log forget gates Σ_{l=j+1..i} log sigmoid(raw_l),
one (query, key) pair at a time, then a masked softmax. No code shared with the variant (no
cumulative sums). Also its reduction to `softmax`, its decoding (zero drift), its tolerances.
"""

from __future__ import annotations

import math
import shutil

import pytest
import torch
import torch.nn.functional as F

from attnbench import VariantShape, build_variant, incremental_form
from attnbench.harness.discovery import load_plugins
from attnbench.variants import fox as fox_module
from attnbench.variants.kernels.tile import compiled_forget

load_plugins()

# the compiled tile kernel needs a C++ compiler (tests/variants/test_tile_kernel.py: the same)
needs_kernel = pytest.mark.skipif(
    not (shutil.which("c++") or shutil.which("g++")), reason="no C++ compiler on PATH"
)


def reference(q, k, v, raw, causal=True):
    """Forgetting attention in float64, pair by pair: query i (i >= M reads as M − 1) and key j
    get the bias Σ_{l=j+1..r} log f_l with r = min(i, M − 1) causal, r = M − 1 otherwise (the
    variant's non-causal convention); causal keys j > i are masked."""
    q, k, v = q.double(), k.double(), v.double()
    log_f = F.logsigmoid(raw.double()[..., 0])  # (B, H, M)
    b, h, n, d = q.shape
    m = k.shape[-2]
    logits = torch.full((b, h, n, m), float("-inf"), dtype=torch.float64)
    for i in range(n):
        r = min(i, m - 1) if causal else m - 1
        for j in range(m):
            if causal and j > i:
                continue
            bias = log_f[..., j + 1 : r + 1].sum(-1) if j < r else 0.0
            logits[:, :, i, j] = (q[:, :, i] * k[:, :, j]).sum(-1) / math.sqrt(d) + bias
    return torch.softmax(logits, dim=-1) @ v


def inputs(b=2, h=3, n=40, m=None, d=8, dv=5, seed=0, gate_scale=1.0):
    m = n if m is None else m
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, n, d, generator=g, dtype=torch.float64)
    k = torch.randn(b, h, m, d, generator=g, dtype=torch.float64)
    v = torch.randn(b, h, m, dv, generator=g, dtype=torch.float64)
    raw = gate_scale * torch.randn(b, h, m, 1, generator=g, dtype=torch.float64)
    return q, k, v, {"forget": raw}


def make(heads=3, kv_heads=None):
    return build_variant("fox", {}, VariantShape(heads, 8, 4096, n_kv_heads=kv_heads))


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("lengths", [(24, 24), (13, 24), (24, 13)], ids=["n=m", "n<m", "n>m"])
def test_forward_equals_the_pairwise_reference(causal, lengths):
    """Float64 to 1e-12 (measured ≤ 4e-16: the forms differ in summation order only), with N
    equal to, below and above M; raw gates ×3 so that some keys are nearly forgotten."""
    q, k, v, gates = inputs(n=lengths[0], m=lengths[1], gate_scale=3.0)
    out = make()(q, k, v, causal=causal, gates=gates)
    expected = reference(q, k, v, gates["forget"], causal)
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)
    weights = make().attention_weights(q, k, causal=causal, gates=gates)
    torch.testing.assert_close(weights @ v, expected, rtol=1e-12, atol=1e-12)


def test_forward_in_row_tiles_equals_one_tile(monkeypatch):
    """The causal forward cut into tiles of 7 rows (no divisor of 40) gives the same outputs as
    one tile: each tile's rows, keys and bias references are its own."""
    q, k, v, gates = inputs(n=40)
    whole = make()(q, k, v, causal=True, gates=gates)
    monkeypatch.setattr(fox_module, "BIAS_TILE_BYTES", 8 * 2 * 3 * 40 * 7)
    torch.testing.assert_close(make()(q, k, v, causal=True, gates=gates), whole, rtol=0, atol=1e-14)


def test_with_every_forget_gate_at_one_it_is_softmax():
    """Raw gates of 40: f = sigmoid(40), log f = −4.2e-18 per token, so the bias over 64 tokens
    is below 3e-16 and fox equals causal `softmax` to float64 round-off (1e-12)."""
    q, k, v, gates = inputs(n=64)
    gates = {"forget": torch.full_like(gates["forget"], 40.0)}
    softmax = build_variant("softmax", {}, VariantShape(3, 8, 4096))
    torch.testing.assert_close(
        make()(q, k, v, causal=True, gates=gates), softmax(q, k, v, causal=True), rtol=0, atol=1e-12
    )


def test_a_closed_gate_forgets_everything_before_it():
    """A gate of −60 at position 10 (f ≈ e^{−60}): every later query weighs the keys before 10
    by less than e^{−50}, so its output is attention over keys 10 … i alone."""
    q, k, v, gates = inputs(b=1, n=30)
    gates["forget"][..., 10, 0] = -60.0
    out = make()(q, k, v, causal=True, gates=gates)
    tail = make()(
        q[:, :, 10:],
        k[:, :, 10:],
        v[:, :, 10:],
        causal=True,
        gates={"forget": gates["forget"][:, :, 10:]},
    )
    torch.testing.assert_close(out[:, :, 10:], tail, rtol=0, atol=1e-12)


@pytest.mark.parametrize("kv_heads", [None, 1], ids=["heads", "multi-query"])
def test_decoding_after_a_prefill_has_zero_drift(kv_heads):
    """Prefill 37 tokens, then decode 60 one by one: every output equals the full causal forward
    in float64 to 1e-12 (same bias sums; measured ≤ 4e-16)."""
    variant = make(heads=4, kv_heads=kv_heads)
    q, _, _, _ = inputs(h=4, n=97, seed=3)
    _, k, v, gates = inputs(h=kv_heads or 4, n=97, seed=4, gate_scale=2.0)
    decoder = incremental_form(variant, 2, 97, 8, 5, dtype=torch.float64, kv_heads=kv_heads)
    outs = [
        decoder.prefill(
            q[:, :, :37], k[:, :, :37], v[:, :, :37], {"forget": gates["forget"][:, :, :37]}
        )
    ]
    for t in range(37, 97):
        s = slice(t, t + 1)
        outs.append(
            decoder.step(q[:, :, s], k[:, :, s], v[:, :, s], {"forget": gates["forget"][:, :, s]})
        )
    expected = variant(q, k, v, causal=True, gates=gates)
    torch.testing.assert_close(torch.cat(outs, dim=2), expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
def test_error_within_the_declared_tolerance(causal):
    """float32, float16 and bfloat16 against the float64 forward at n = 512 (H = 4, D = 64,
    unit-normal raw gates): within `error_tolerance`, the throughput task's measure."""
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(1, 4, 512, 64, generator=g, dtype=torch.float64) for _ in range(3))
    gates = {"forget": torch.randn(1, 4, 512, 1, generator=g, dtype=torch.float64)}
    variant = build_variant("fox", {}, VariantShape(4, 64, 512))
    exact = variant(q, k, v, causal=causal, gates=gates)
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        low = {"forget": gates["forget"].to(dtype)}
        out = variant(q.to(dtype), k.to(dtype), v.to(dtype), causal=causal, gates=low)
        error = float((out.double() - exact).abs().max() / max(1.0, float(exact.abs().max())))
        assert variant.within_tolerance(error, dtype), f"{dtype}: {error:.2e}"


@needs_kernel
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("lengths", [(40, 40), (23, 40), (40, 23)], ids=["n=m", "n<m", "n>m"])
def test_the_tile_kernel_equals_the_float64_forward(causal, lengths):
    """The compiled path (float32, Dv a multiple of 16, no autograd) against fox in float64
    (itself checked pair by pair above): within 2e-6 (measured ≤ 5e-7), gates ×3."""
    q, k, v, gates = inputs(n=lengths[0], m=lengths[1], dv=16, gate_scale=3.0)
    exact = make()(q, k, v, causal=causal, gates=gates)
    raw32 = gates["forget"].float()  # the variant's float32 path reads these, rounded
    c = F.logsigmoid(raw32[..., 0].double()).cumsum(-1)
    out = compiled_forget(q.float(), k.float(), v.float(), c, causal, 8**-0.5)
    assert out is not None
    torch.testing.assert_close(out.double(), exact, rtol=0, atol=2e-6)
    with torch.no_grad():  # and the variant takes this path in float32
        low = make()(q.float(), k.float(), v.float(), causal=causal, gates={"forget": raw32})
    torch.testing.assert_close(low, out, rtol=0, atol=0)


@needs_kernel
def test_the_tile_kernel_keeps_each_pairs_bias_exact_far_along():
    """1500 tokens with log gates of −1.4 per token on average (c falls to −2163): the kernel's
    per-lane and per-key float-float halves keep every bias exact to its own size. Measured
    1.3e-7 against float64; one float32 shift per key referred to the tile's last row (the
    lanes' constants, up to 16 log gates, dropped) erred 2.2e-6 here: the bound 1e-6 tells
    them apart."""
    q, k, v, gates = inputs(b=1, h=1, n=1500, d=16, dv=16, seed=9, gate_scale=3.0)
    exact = make(heads=1)(q, k, v, causal=True, gates=gates)
    c = F.logsigmoid(gates["forget"][..., 0]).cumsum(-1)
    out = compiled_forget(q.float(), k.float(), v.float(), c, True, 16**-0.5)
    error = float((out.double() - exact).abs().max()) / max(1.0, float(exact.abs().max()))
    assert error < 1e-6, error
