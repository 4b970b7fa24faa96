"""`kda` (attnbench.variants.recurrent.kda) against a slow, obviously correct float64
recurrence, one token at a time; its reduction to `gated_delta_net` with the decay tied across
channels; its incremental form; its error tolerance.

The reference re-derives everything from fla's `naive_recurrent_kda` and the Kimi Linear
layer's definitions (SiLU, L2 norm, 1/√D, β = sigmoid or 2·sigmoid, g = −exp(A_log)·
softplus(raw + dt_bias) per channel, S ← e^{g} ⊙ S then S ← S + β k (v − Sᵀk)ᵀ): no code shared
with the chunked form. Tolerance 1e-12 in float64: the forms differ only in summation order
(measured ≤ 2.6e-15 at 40–90 tokens).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from attnbench import VariantShape, build_variant, incremental_form
from attnbench.harness.discovery import load_plugins
from attnbench.variants.recurrent import dplr_chunks

load_plugins()


def reference(variant, q, k, v, gates, causal=True):
    """KDA token by token in float64 from the raw inputs, gates and the variant's A_log and
    dt_bias (one state per key/value head; query head h reads head h // G)."""
    q, k, v = q.double(), k.double(), v.double()
    d = q.shape[-1]
    fq = F.normalize(F.silu(q), dim=-1) / math.sqrt(d)
    fk = F.normalize(F.silu(k), dim=-1)
    beta = torch.sigmoid(gates["beta"].double())[..., 0]
    if variant.params.negative_eigenvalues:
        beta = 2 * beta
    a = variant.A_log.detach().double().exp().view(1, -1, 1, 1)
    g = -a * F.softplus(gates["alpha"].double() + variant.dt_bias.detach().double()[None, :, None])
    b, kv, m, _ = k.shape
    heads, n = q.shape[1], q.shape[2]
    state = torch.zeros(b, kv, d, v.shape[-1], dtype=torch.float64)
    states = []
    for t in range(m):
        state = state * g[:, :, t].exp().unsqueeze(-1)
        kt = fk[:, :, t]
        error = v[:, :, t] - torch.einsum("bhd,bhde->bhe", kt, state)
        state = state + beta[:, :, t, None, None] * kt.unsqueeze(-1) * error.unsqueeze(-2)
        states.append(state)
    out = torch.empty(b, heads, n, v.shape[-1], dtype=torch.float64)
    for h in range(heads):
        for i in range(n):
            s = states[min(i, m - 1) if causal else m - 1][:, h // (heads // kv)]
            out[:, h, i] = torch.einsum("bd,bde->be", fq[:, h, i], s)
    return out


def make(heads=4, kv_heads=None, d=8, seed=0, **params):
    """`kda` in float64, its parameters drawn from ``seed``."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build_variant(
            "kda", params, VariantShape(heads, d, 4096, n_kv_heads=kv_heads)
        ).double()


def inputs(heads, kv, n, m=None, d=8, dv=5, seed=0, steep=False, dtype=torch.float64):
    """Unit-normal q, k, v; raw gates: β spread over (0, 1), the α gate shifted by −4 so that
    decays of about e^{−0.05}…e^{−0.8} per token carry the state across chunks (``steep``:
    unshifted ×3, decays down to e^{−100}: underflow, never overflow)."""
    m = n if m is None else m
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, heads, n, d, generator=g, dtype=dtype)
    k = torch.randn(2, kv, m, d, generator=g, dtype=dtype)
    v = torch.randn(2, kv, m, dv, generator=g, dtype=dtype)
    alpha = torch.randn(2, kv, m, d, generator=g, dtype=dtype)
    alpha = 3 * alpha if steep else alpha - 4
    beta = 2 * torch.randn(2, kv, m, 1, generator=g, dtype=dtype)
    return q, k, v, {"alpha": alpha, "beta": beta}


@pytest.mark.parametrize(
    "n, chunk, kv, causal, negative",
    [
        (1, 16, 4, True, False),
        (40, 1, 2, True, False),
        (40, 7, 1, False, True),
        (64, 16, 4, True, True),
        (90, 16, 2, True, False),
        (90, 32, 1, True, True),
        (90, 16, 2, False, False),
    ],
)
def test_chunked_forward_equals_the_recurrence_in_float64(n, chunk, kv, causal, negative):
    variant = make(kv_heads=kv, chunk_size=chunk, output_norm=False, negative_eigenvalues=negative)
    q, k, v, gates = inputs(4, kv, n, seed=n + chunk)
    with torch.no_grad():
        out = variant(q, k, v, causal=causal, gates=gates)
    torch.testing.assert_close(out, reference(variant, q, k, v, gates, causal), rtol=0, atol=1e-12)


@pytest.mark.parametrize("n, m", [(30, 50), (50, 30)])
def test_other_lengths_and_steep_decays(n, m):
    """Causal with N ≠ M (query i reads S_min(i, M−1)); gates whose decays underflow (down to
    e^{−100} per token) stay finite and exact, in float64 and float32."""
    variant = make(kv_heads=2, output_norm=False)
    q, k, v, gates = inputs(4, 2, n, m, seed=1, steep=True)
    expected = reference(variant, q, k, v, gates)
    with torch.no_grad():
        out = variant(q, k, v, causal=True, gates=gates)
        low = variant.float()(
            *(x.float() for x in (q, k, v)), True, {a: g.float() for a, g in gates.items()}
        )
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)
    assert torch.isfinite(low).all()
    assert float((low.double() - expected).abs().max()) < 1e-5  # float32 rounding only


@pytest.mark.parametrize("mix", ["mild", "steep", "both"])
def test_mild_and_steep_chunks_take_their_paths_and_both_equal_the_recurrence(mix, monkeypatch):
    """A chunk whose decays sum above −FACTOR_SPAN takes the factored product, a steeper one
    the exps of differences, a sequence with both kinds both (each path called as planned);
    every case equals the recurrence in float64 (1e-12)."""
    calls = []
    for path in ("_exact_pairs", "_factored_pairs"):
        original = getattr(dplr_chunks, path)

        def spy(*args, _original=original, _path=path):
            calls.append(_path)
            return _original(*args)

        monkeypatch.setattr(dplr_chunks, path, spy)
    variant = make(kv_heads=2, chunk_size=8, output_norm=False)
    q, k, v, gates = inputs(4, 2, 48, seed=4)
    with torch.no_grad():
        variant.A_log.fill_(math.log(8.0))
    if mix != "mild":  # raw gates of +8 from position 24 (or all): e^{−64} per token
        start = 24 if mix == "both" else 0
        gates["alpha"][:, :, start:] = 8.0
    with torch.no_grad():
        out = variant(q, k, v, causal=True, gates=gates)
    torch.testing.assert_close(out, reference(variant, q, k, v, gates), rtol=0, atol=1e-12)
    expected = {"mild": {"_factored_pairs"}, "steep": {"_exact_pairs"}}
    assert set(calls) == expected.get(mix, {"_factored_pairs", "_exact_pairs"})


@pytest.mark.parametrize("negative", [False, True])
def test_with_the_decay_tied_across_channels_it_is_gated_delta_net(negative):
    """The same A_log, dt_bias in every channel equal to gated_delta_net's per-head one and the
    same raw α gate in every channel: kda is gated_delta_net, output norm on (float64, 1e-12;
    measured 3.8e-15). A mutant with one channel's dt_bias moved is not (planted)."""
    kda = make(kv_heads=2, chunk_size=16, negative_eigenvalues=negative)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        shape = VariantShape(4, 8, 4096, n_kv_heads=2)
        params = {"chunk_size": 16, "negative_eigenvalues": negative}
        gdn = build_variant("gated_delta_net", params, shape).double()
    with torch.no_grad():
        kda.A_log.copy_(gdn.A_log)
        kda.dt_bias.copy_(gdn.dt_bias[:, None].expand_as(kda.dt_bias))
    q, k, v, gates = inputs(4, 2, 70, seed=5)
    tied = {"alpha": gates["alpha"][..., :1], "beta": gates["beta"]}
    with torch.no_grad():
        expected = gdn(q, k, v, causal=True, gates=tied)
        out = kda(
            q, k, v, causal=True, gates={**tied, "alpha": tied["alpha"].expand(-1, -1, -1, 8)}
        )
        torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)
        kda.dt_bias[0, 3] += 1.0  # one channel untied
        moved = kda(
            q, k, v, causal=True, gates={**tied, "alpha": tied["alpha"].expand(-1, -1, -1, 8)}
        )
    assert float((moved - expected).abs().max()) > 1e-3


def _cut(gates, start, end):
    return {name: g[:, :, start:end] for name, g in gates.items()}


@pytest.mark.parametrize("negative", [False, True])
def test_decoding_after_a_context_equals_the_forward(negative):
    """A prefill of 40 tokens then 25 steps, and a prefill of 65 in two parts, equal the causal
    forward over the 65 (float64, output norm on, 1e-12: the steps apply the recurrence, the
    prefills replay the chunked form; measured 3.1e-15); the state is D×Dv per key/value head."""
    variant = make(kv_heads=2, chunk_size=16, negative_eigenvalues=negative)
    q, k, v, gates = inputs(4, 2, 65, seed=6)
    with torch.no_grad():
        expected = variant(q, k, v, causal=True, gates=gates)
        for cuts in ((40, *range(41, 66)), (27, 65)):
            decoder = incremental_form(variant, 2, 65, 8, 5, dtype=torch.float64, kv_heads=2)
            outs, start = [], 0
            for end in cuts:
                part = (x[:, :, start:end] for x in (q, k, v))
                step = decoder.step if end - start == 1 else decoder.prefill
                outs.append(step(*part, _cut(gates, start, end)))
                start = end
            torch.testing.assert_close(torch.cat(outs, 2), expected, rtol=0, atol=1e-12)
    assert decoder.state_size(65) == 2 * 8 * 5
    assert decoder.state_bytes() == 2 * 8 * 5 * 8


def test_attention_weights_given_the_gates_reproduce_the_forward():
    variant = make(kv_heads=2, output_norm=False)
    q, k, v, gates = inputs(4, 2, 20, seed=2)
    with torch.no_grad():
        weights = variant.attention_weights(q, k, causal=True, gates=gates)
        expected = variant(q, k, v, causal=True, gates=gates)
    assert weights.shape == (2, 4, 20, 20)
    assert float(weights.triu(1).abs().max()) == 0.0  # causal
    torch.testing.assert_close(
        weights @ v.repeat_interleave(2, dim=1), expected, rtol=0, atol=1e-12
    )


def test_float32_and_bfloat16_are_within_the_declared_tolerance():
    """At n = 256 (H = 4, D = 64, unit-normal inputs and gates, causal and not) float32 and
    bfloat16 (computed in float32) against the float64 forward, within `error_tolerance`."""
    variant = make(d=64)
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 4, 256, 64, generator=g, dtype=torch.float64) for _ in range(3))
    gates = {
        "alpha": torch.randn(1, 4, 256, 64, generator=g, dtype=torch.float64),
        "beta": torch.randn(1, 4, 256, 1, generator=g, dtype=torch.float64),
    }
    for causal in (True, False):
        with torch.no_grad():
            expected = variant(q, k, v, causal=causal, gates=gates)
            scale = max(1.0, float(expected.abs().max()))
            for dtype in (torch.float32, torch.bfloat16):
                low = make(d=64).to(dtype)
                out = low(
                    *(x.to(dtype) for x in (q, k, v)),
                    causal,
                    {a: x.to(dtype) for a, x in gates.items()},
                )
                assert out.dtype == dtype
                error = float((out.double() - expected).abs().max()) / scale
                assert low.within_tolerance(error, dtype), (dtype, causal, error)


def test_gates_follow_fla_parametrisation_and_initialisation():
    """A ~ U(1, 16) per key/value head, softplus(dt_bias) in [1e-4, 0.1] per head and channel,
    raw gates of 0 without gates; bad hyperparameters: one sentence."""
    variant = make(heads=64, kv_heads=16, d=8, seed=1)
    a = variant.A_log.detach().exp()
    assert variant.A_log.shape == (16,) and variant.dt_bias.shape == (16, 8)
    assert float(a.min()) >= 1.0 and float(a.max()) <= 16.0
    dt = F.softplus(variant.dt_bias.detach())
    assert float(dt.min()) >= 1e-4 - 1e-12 and float(dt.max()) <= 0.1 + 1e-12
    with pytest.raises(ValueError, match="qk_activation"):
        make(qk_activation="relu")
    with pytest.raises(ValueError, match="chunk_size"):
        make(chunk_size=-1)
