"""`rwkv7` (attnbench.variants.recurrent.rwkv7) against a slow, obviously correct float64
recurrence written in RWKV's own convention (a Dv×D state of value rows, right-multiplied by the
transition: S_t = S_{t−1} (Diag(w_t) − κ̂_tᵀ (a_t ⊙ κ̂_t)) + v_tᵀ k̃_t, out_t = S_t r_t), one token
at a time; its incremental form; its error tolerance; its initialisation.

The reference shares no code with the chunked form (which works on the transposed state and
writes the transition as (I + a bᵀ) Diag(w)). Tolerance 1e-12 in float64: the forms differ only
in summation order (measured ≤ 1.8e-14 at 40–90 tokens, absolute: k is not normalised, so the
unnormalised outputs are larger than the delta rule's).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from attnbench import VariantShape, build_variant, incremental_form
from attnbench.harness.discovery import load_plugins

load_plugins()


def reference(variant, r, k, v, gates, causal=True):
    """RWKV-7's WKV token by token in float64 from the raw inputs and gates and the variant's
    w_bias, a_bias, k_k, k_a (a state per key/value head; query head h reads head h // G)."""
    r, k, v = r.double(), k.double(), v.double()
    p = {
        n: getattr(variant, n).detach().double()[None, :, None]
        for n in ("w_bias", "a_bias", "k_k", "k_a")
    }
    w = torch.exp(-math.exp(-0.5) * torch.sigmoid(gates["w"].double() + p["w_bias"]))
    a = torch.sigmoid(gates["a"].double() + p["a_bias"])
    kk = F.normalize(k * p["k_k"], dim=-1)
    k_new = k * (1 + (a - 1) * p["k_a"])
    b, kv, m, d = k.shape
    heads, n = r.shape[1], r.shape[2]
    state = torch.zeros(b, kv, v.shape[-1], d, dtype=torch.float64)  # value rows
    states = []
    for t in range(m):
        transition = (
            torch.diag_embed(w[:, :, t]) - kk[:, :, t, :, None] * (a * kk)[:, :, t, None, :]
        )
        state = state @ transition + v[:, :, t, :, None] * k_new[:, :, t, None, :]
        states.append(state)
    out = torch.empty(b, heads, n, v.shape[-1], dtype=torch.float64)
    for h in range(heads):
        for i in range(n):
            s = states[min(i, m - 1) if causal else m - 1][:, h // (heads // kv)]
            out[:, h, i] = torch.einsum("bed,bd->be", s, r[:, h, i])
    return out


def make(heads=4, kv_heads=None, d=8, seed=0, **params):
    """`rwkv7` in float64, its parameters fla's initialisation plus noise drawn from ``seed``
    (so that heads and channels differ)."""
    variant = build_variant(
        "rwkv7", params, VariantShape(heads, d, 4096, n_kv_heads=kv_heads)
    ).double()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name in ("w_bias", "a_bias", "k_k", "k_a"):
            param = getattr(variant, name)
            param.add_(0.3 * torch.randn(param.shape, generator=g, dtype=torch.float64))
    return variant


def inputs(heads, kv, n, m=None, d=8, dv=5, seed=0, dtype=torch.float64):
    """Unit-normal receptances, keys, values and raw gates (×2: w and a spread over their
    ranges)."""
    m = n if m is None else m
    g = torch.Generator().manual_seed(seed)
    r = torch.randn(2, heads, n, d, generator=g, dtype=dtype)
    k = torch.randn(2, kv, m, d, generator=g, dtype=dtype)
    v = torch.randn(2, kv, m, dv, generator=g, dtype=dtype)
    gates = {x: 2 * torch.randn(2, kv, m, d, generator=g, dtype=dtype) for x in ("w", "a")}
    return r, k, v, gates


@pytest.mark.parametrize(
    "n, chunk, kv, causal",
    [
        (1, 16, 4, True),
        (40, 1, 2, True),
        (40, 7, 1, False),
        (64, 16, 4, True),
        (90, 32, 2, True),
        (90, 16, 1, False),
    ],
)
def test_chunked_forward_equals_the_recurrence_in_float64(n, chunk, kv, causal):
    variant = make(kv_heads=kv, chunk_size=chunk, output_norm=False)
    r, k, v, gates = inputs(4, kv, n, seed=n + chunk)
    with torch.no_grad():
        out = variant(r, k, v, causal=causal, gates=gates)
    torch.testing.assert_close(out, reference(variant, r, k, v, gates, causal), rtol=0, atol=1e-12)


@pytest.mark.parametrize("n, m", [(30, 50), (50, 30)])
def test_other_lengths_follow_the_causal_convention(n, m):
    variant = make(kv_heads=2, output_norm=False)
    r, k, v, gates = inputs(4, 2, n, m, seed=1)
    with torch.no_grad():
        out = variant(r, k, v, causal=True, gates=gates)
    torch.testing.assert_close(out, reference(variant, r, k, v, gates), rtol=0, atol=1e-12)


def test_decoding_after_a_context_equals_the_forward():
    """A prefill of 40 tokens then 25 steps, and a prefill of 65 in two parts, equal the causal
    forward (float64, output norm on, 1e-12; measured 2.4e-15); the state is D×Dv per
    key/value head."""
    variant = make(kv_heads=2, chunk_size=16)
    r, k, v, gates = inputs(4, 2, 65, seed=6)
    with torch.no_grad():
        expected = variant(r, k, v, causal=True, gates=gates)
        for cuts in ((40, *range(41, 66)), (27, 65)):
            decoder = incremental_form(variant, 2, 65, 8, 5, dtype=torch.float64, kv_heads=2)
            outs, start = [], 0
            for end in cuts:
                part = (x[:, :, start:end] for x in (r, k, v))
                gate = {name: x[:, :, start:end] for name, x in gates.items()}
                step = decoder.step if end - start == 1 else decoder.prefill
                outs.append(step(*part, gate))
                start = end
            torch.testing.assert_close(torch.cat(outs, 2), expected, rtol=0, atol=1e-12)
    assert decoder.state_size(65) == 2 * 8 * 5


def test_attention_weights_given_the_gates_reproduce_the_forward():
    variant = make(kv_heads=2, output_norm=False)
    r, k, v, gates = inputs(4, 2, 20, seed=2)
    with torch.no_grad():
        weights = variant.attention_weights(r, k, causal=True, gates=gates)
        expected = variant(r, k, v, causal=True, gates=gates)
    assert float(weights.triu(1).abs().max()) == 0.0  # causal
    torch.testing.assert_close(
        weights @ v.repeat_interleave(2, dim=1), expected, rtol=0, atol=1e-12
    )


def test_float32_and_bfloat16_are_within_the_declared_tolerance():
    """At n = 256 (H = 4, D = 64, unit-normal inputs and gates, causal and not) float32 and
    bfloat16 (computed in float32) against the float64 forward, within `error_tolerance`."""
    variant = build_variant("rwkv7", {}, VariantShape(4, 64, 4096)).double()
    r, k, v, gates = inputs(4, 4, 256, d=64, dv=64, seed=3)
    gates = {name: x[:1] / 2 for name, x in gates.items()}
    r, k, v = r[:1], k[:1], v[:1]
    for causal in (True, False):
        with torch.no_grad():
            expected = variant(r, k, v, causal=causal, gates=gates)
            scale = max(1.0, float(expected.abs().max()))
            for dtype in (torch.float32, torch.bfloat16):
                low = build_variant("rwkv7", {}, VariantShape(4, 64, 4096)).to(dtype)
                out = low(
                    *(x.to(dtype) for x in (r, k, v)),
                    causal,
                    {a: x.to(dtype) for a, x in gates.items()},
                )
                assert out.dtype == dtype
                error = float((out.double() - expected).abs().max()) / scale
                assert low.within_tolerance(error, dtype), (dtype, causal, error)


def test_decay_range_and_fla_initialisation():
    """w ∈ (e^{−e^{−1/2}}, 1) for any raw gate; the initial biases and key parameters are fla's
    first layer's (module docstring) at D = 64."""
    variant = (
        build_variant("rwkv7", {}, VariantShape(2, 64, 128, n_kv_heads=1))
        .double()
        .requires_grad_(False)
    )
    k = torch.randn(1, 1, 3, 64, dtype=torch.float64)
    raw = torch.tensor([-1e4, 0.0, 1e4], dtype=torch.float64).view(1, 1, 3, 1).expand(1, 1, 3, 64)
    with torch.no_grad():
        *_, log_w = variant.rule_inputs(k, k, {"w": raw, "a": raw})
    assert float(log_w.min()) >= -math.exp(-0.5) and float(log_w.max()) <= 0.0
    assert variant.k_a.shape == (1, 64) and torch.allclose(
        variant.k_a, torch.full((1, 64), 1.02, dtype=torch.float64)
    )
    assert abs(float(variant.w_bias[0, 0]) - (-6 + 0.5 - 2.5)) < 1e-6  # www, zigzag −1
    assert abs(float(variant.w_bias[0, -1]) - (0.0 + 0.5 + 2.5)) < 1e-6
    assert (
        abs(float(variant.k_k[0, 0]) - 0.76) < 1e-6
        and abs(float(variant.a_bias[0, -1]) - 0.31) < 1e-6
    )
    with pytest.raises(ValueError, match="chunk_size"):
        build_variant("rwkv7", {"chunk_size": -1}, VariantShape(2, 8, 16))
