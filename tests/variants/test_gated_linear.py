"""`gla` and `mamba2` (attnbench.variants.recurrent.gla) against a slow per-token recurrence in
float64, kept here as the reference: S_t = diag(a_t) S_{t−1} + k_t v_tᵀ, o_t = S_tᵀ q_t.

The contract suite (tests/variants/test_contract.py) covers both the moment they register: shapes,
causality, batch independence, the incremental form equal to the forward in float64, grouped-query
heads. Here: the maths of each paper's parametrisation, the chunked form's stability, the declared
FLOPs, the declared error per dtype, mamba2's negative eigenvalues (Grazzi et al. 2025: the
transition 2·exp(−A·Δ) − 1, with exact zeros and near ±1, chunked, non-causal and decoding
against the same recurrence), and the theory claims with their planted mutants."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from conftest import counted_flops
from torch.utils.flop_counter import FlopCounterMode

from attnbench.harness.discovery import load_plugins
from attnbench.incremental import incremental_form
from attnbench.variant import VariantShape, build_variant, random_gates
from attnbench.variants.recurrent import gla as gla_module

load_plugins()


def recurrence(q, k, v, transition, causal=True, keys_scale=None):
    """The per-token loop, float64: q (B, H, N, D) already scaled; k, v, transition
    (B, H_kv, M, ·) with the transition a_t (the factor on the state, not its log) of width D or
    1; keys_scale (B, H_kv, M, 1) multiplies each key as it is written (Mamba-2's Δ). Query i
    reads S after key min(i, M−1) (causal) or S_M."""
    q, k, v, a = (x.double() for x in (q, k, v, transition))
    if keys_scale is not None:
        k = k * keys_scale.double()
    heads, kv = q.shape[1], k.shape[1]
    k, v, a = (x.repeat_interleave(heads // kv, dim=1) for x in (k, v, a))
    b, h, n, d = q.shape
    m = k.shape[2]
    state = torch.zeros(b, h, d, v.shape[-1], dtype=torch.float64)
    states = []
    for t in range(m):
        decay = a[:, :, t].expand(b, h, d)  # (B, H, D)
        state = decay.unsqueeze(-1) * state + k[:, :, t, :, None] * v[:, :, t, None, :]
        states.append(state)
    out = torch.empty(b, h, n, v.shape[-1], dtype=torch.float64)
    for i in range(n):
        s = states[min(i, m - 1)] if causal else states[-1]
        out[:, :, i] = torch.einsum("bhd,bhde->bhe", q[:, :, i], s)
    return out


def inputs(n=150, heads=4, kv=4, d=16, dv=8, m=None, seed=0, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    m = m or n
    q = torch.randn(2, heads, n, d, generator=gen, dtype=dtype)
    k = torch.randn(2, kv, m, d, generator=gen, dtype=dtype)
    v = torch.randn(2, kv, m, dv, generator=gen, dtype=dtype)
    return q, k, v, gen


def build(name, heads=4, kv=4, d=16, **params):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(3)
        return build_variant(name, params, VariantShape(heads, d, 4096, n_kv_heads=kv)).double()


def normalised(variant, out):
    """The output as the variant gives it: where its ``output_norm`` is set (the default), each
    head's output at each position over the root mean square of its value channels (plus
    ε = 1e-5, the references' RMSNorm ε), written out; a single value channel as it is."""
    if not variant.params.output_norm or out.shape[-1] == 1:
        return out
    return out / torch.sqrt((out * out).mean(dim=-1, keepdim=True) + 1e-5)


def gla_reference(variant, q, k, v, gates, causal):
    log_decay = F.logsigmoid(gates["alpha"].double()) / variant.params.gate_normaliser
    decay = torch.exp(log_decay)
    return normalised(variant, recurrence(q / math.sqrt(q.shape[-1]), k, v, decay, causal))


def mamba2_reference(variant, q, k, v, gates, causal):
    kv = k.shape[1]
    a = torch.exp(variant.A_log.double()).view(1, kv, 1, 1)
    dt = F.softplus(gates["dt"].double() + variant.dt_bias.double().view(1, kv, 1, 1))
    decay = torch.exp(-a * dt)
    if variant.params.negative_eigenvalues:  # Grazzi et al.: α → 2α − 1, in (−1, 1]
        decay = 2 * decay - 1
    return normalised(variant, recurrence(q, k, v, decay, causal, keys_scale=dt))


REFERENCES = {"gla": gla_reference, "mamba2": mamba2_reference}


@pytest.mark.parametrize("span", [gla_module.FACTOR_SPAN, -1.0], ids=["factored", "differences"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("kv", [4, 2, 1])
@pytest.mark.parametrize("name", ["gla", "mamba2"])
def test_forward_equals_the_per_token_recurrence_in_float64(name, kv, causal, span, monkeypatch):
    """150 positions (no multiple of the 64-position chunk), chunk 16 and 64, 1, 2 or 4
    key/value heads for 4 query heads: to 1e-10 (float64 rounding over the sums is ~1e-14).
    Both within-chunk forms: the factored product (these gates' chunks decay by less than
    e^{−20}) and, with the threshold moved below 0, the exact-difference forms (the tree for
    gla's channels, the masked exponent for mamba2's heads)."""
    monkeypatch.setattr(gla_module, "FACTOR_SPAN", span)
    q, k, v, gen = inputs(kv=kv)
    for chunk in (16, 64):
        variant = build(name, kv=kv, chunk_size=chunk)
        gates = random_gates(
            variant, 2, 150, head_dim=16, kv_heads=kv, dtype=torch.float64, generator=gen
        )
        out = variant(q, k, v, causal=causal, gates=gates)
        expected = REFERENCES[name](variant, q, k, v, gates, causal)
        torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("name", ["gla", "mamba2"])
def test_queries_and_keys_of_different_lengths(name):
    """Causal with N ≠ M: query i reads the state after key min(i, M−1); non-causal: the state
    after the last key, for 40 queries on 70 keys and 70 on 40."""
    for n, m in ((40, 70), (70, 40)):
        q, k, v, gen = inputs(n=n, m=m)
        variant = build(name, chunk_size=16)
        gates = random_gates(
            variant, 2, m, head_dim=16, kv_heads=4, dtype=torch.float64, generator=gen
        )
        for causal in (True, False):
            out = variant(q, k, v, causal=causal, gates=gates)
            expected = REFERENCES[name](variant, q, k, v, gates, causal)
            torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("name", ["gla", "mamba2"])
def test_extreme_decays_stay_finite_and_exact(name):
    """Gates at −60: gla's per-step log-decay is logsigmoid(−60)/16 = −3.75, a 64-position chunk
    sums to −240, whose exp(+240) a factorised q e^{b} · k e^{−b} would overflow even in float64
    after a few chunks of float32 (e^{88}); every factor here is an exp of a difference ≤ 0. In
    float32 the outputs are finite and match the float64 recurrence (the bare one: the output
    norm divides each position by its own scale, where float32's cancellation in a row that
    sums to near zero shows as that row's relative error, ~2e-5 here; it stays finite)."""
    q, k, v, gen = inputs(n=256, d=16)
    variant = build(name, output_norm=False)
    gates = random_gates(
        variant, 2, 256, head_dim=16, kv_heads=4, dtype=torch.float64, generator=gen
    )
    gates = {
        key: g * 20 - 60 * (torch.rand(g.shape, generator=gen) > 0.5) for key, g in gates.items()
    }
    expected = REFERENCES[name](variant, q, k, v, gates, True)
    out = variant.float()(
        *(x.float() for x in (q, k, v)),
        causal=True,
        gates={key: g.float() for key, g in gates.items()},
    )
    assert torch.isfinite(out).all()
    scale = max(1.0, expected.abs().max().item())
    assert (out.double() - expected).abs().max().item() / scale < 1e-5
    normalised = build(name).float()(
        *(x.float() for x in (q, k, v)),
        causal=True,
        gates={key: g.float() for key, g in gates.items()},
    )
    assert torch.isfinite(normalised).all()


@pytest.mark.parametrize("name", ["gla", "mamba2"])
def test_mamba2_and_gla_parameters_follow_their_papers(name):
    """gla: no parameter of its own (τ = 16); mamba2: A_log and dt_bias per key/value head, A in
    [1, 16] and softplus(dt_bias) in [1e-3, 0.1] at initialisation, as mamba_ssm's Mamba2."""
    variant = build(name, heads=8, kv=2)
    params = dict(variant.named_parameters())
    if name == "gla":
        assert params == {} and variant.params.gate_normaliser == 16
        return
    assert set(params) == {"A_log", "dt_bias"}
    assert variant.A_log.shape == variant.dt_bias.shape == (2,)
    a, dt = torch.exp(variant.A_log), F.softplus(variant.dt_bias)
    assert ((a >= 1) & (a <= 16)).all() and ((dt >= 1e-3 - 1e-12) & (dt <= 0.1 + 1e-12)).all()


@pytest.mark.parametrize("name", ["gla", "mamba2"])
def test_decoding_holds_one_state_per_key_value_head_and_equals_the_forward(name):
    """Prefill 70, 5 steps, prefill 53 on 2 key/value heads for 4 query heads: equal to the
    causal forward in float64 (1e-10); the state is kv·D·Dv elements whatever the length."""
    q, k, v, gen = inputs(n=128, kv=2)
    variant = build(name, kv=2)
    gates = random_gates(
        variant, 2, 128, head_dim=16, kv_heads=2, dtype=torch.float64, generator=gen
    )
    expected = variant(q, k, v, causal=True, gates=gates)
    decoder = incremental_form(variant, 2, 128, 16, 8, dtype=torch.float64, kv_heads=2)
    outs, t = [], 0
    for size in (70, 1, 1, 1, 1, 1, 53):
        part = (x[:, :, t : t + size] for x in (q, k, v))
        g = {key: x[:, :, t : t + size] for key, x in gates.items()}
        outs.append(decoder.prefill(*part, gates=g) if size > 1 else decoder.step(*part, g))
        t += size
        assert (
            decoder.state_size(t)
            == 2 * 16 * 8
            == sum(x[0].numel() for x in decoder.state_tensors())
        )
    torch.testing.assert_close(torch.cat(outs, dim=2), expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("name", ["gla", "mamba2"])
def test_declared_flops_are_the_counted_products(name, causal):
    """`forward_flops` against ``FlopCounterMode`` at 1024 positions, H = 4, D = 64: never above
    the products run, and within 3 % of them (what is not counted is elementwise: decay factors,
    the tree's levels below 8, the chunk-to-chunk hand-over)."""
    variant = build(name, d=64).float()
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 4, 1024, 64, generator=gen) for _ in range(3))
    gates = random_gates(variant, 1, 1024, head_dim=64, kv_heads=4, generator=gen)
    with FlopCounterMode(display=False) as counter:
        variant(q, k, v, causal=causal, gates=gates)
    counted = counter.get_total_flops()
    declared = variant.forward_flops(1, 4, 1024, 1024, 64, 64, causal)
    assert declared <= counted * (1 + 1e-9)
    assert counted <= 1.03 * declared, f"runs {counted / declared:.3f}× what it declares"


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("name", ["gla", "mamba2"])
def test_declared_backward_flops_are_the_counted_products(name, causal):
    """`backward_flops` (twice the forward: autograd's two products per product) against
    ``FlopCounterMode`` over the backward at 1024 positions, H = 4, D = 64: within 3 %, causal
    too (the registry's test checks the non-causal backward only)."""
    variant = build(name, d=64).float()
    _, counted = counted_flops(variant, causal, backward=True, d=64, seed=1)
    declared = variant.backward_flops(1, 4, 1024, 1024, 64, 64, causal)
    assert declared == pytest.approx(counted, rel=0.03)


@pytest.mark.parametrize(
    "name, params",
    [
        pytest.param("gla", {}, id="gla"),
        pytest.param("mamba2", {}, id="mamba2"),
        pytest.param(  # 2.6 s on the loaded 2-core host
            "mamba2",
            {"negative_eigenvalues": True},
            id="mamba2-negative_eigenvalues",
            marks=pytest.mark.slow,
        ),
    ],
)
def test_error_in_each_dtype_is_within_the_declared_tolerance(name, params):
    """The declared `error_tolerance` holds with room where the throughput task judges it: 2048
    causal positions, H = 4, D = 64, unit-normal inputs and gates, against the float64 forward
    (itself checked against the recurrence above); the measured worst is printed."""
    variant = build(name, d=64, **params)
    gen = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(1, 4, 2048, 64, generator=gen, dtype=torch.float64) for _ in range(3))
    gates = random_gates(
        variant, 1, 2048, head_dim=64, kv_heads=4, dtype=torch.float64, generator=gen
    )
    expected = variant(q, k, v, causal=True, gates=gates)
    scale = max(1.0, expected.abs().max().item())
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        low = copy.deepcopy(variant).to(dtype)  # its parameters rounded to dtype, as a job has
        out = low(
            *(x.to(dtype) for x in (q, k, v)),
            causal=True,
            gates={key: g.to(dtype) for key, g in gates.items()},
        )
        error = (out.double() - expected).abs().max().item() / scale
        print(f"{name} {dtype}: {error:.2e}")
        assert out.dtype == dtype and low.within_tolerance(error, dtype)


# ---- mamba2 with negative eigenvalues: the transition 2·exp(−A·Δ) − 1 in (−1, 1] -------------


def signed_case(kv=4, n=150, seed=0, **params):
    """mamba2 with ``negative_eigenvalues`` and A = 1, dt_bias = 0 on every head, and raw gates
    that give every kind of transition λ = 2·exp(−softplus(raw)) − 1: raw = 0 gives exactly 0
    (softplus(0) = ln 2 and 1 + 2·expm1(−ln 2) = 0 in float64: the state erased), ±1e-9 about
    ±1e-9 (near 0), +40 about −1 + 1e-17 (−1 in float64), −30 about 1 − 2e-13, the rest
    2·N(0, 1) (spread over (−1, 1)); (variant, q, k, v, gates)."""
    q, k, v, gen = inputs(n=n, kv=kv, seed=seed)
    variant = build("mamba2", kv=kv, negative_eigenvalues=True, **params)
    with torch.no_grad():
        variant.A_log.zero_()
        variant.dt_bias.zero_()
    pick = torch.randint(0, 10, (2, kv, n, 1), generator=gen)
    spread = 2 * torch.randn(2, kv, n, 1, generator=gen, dtype=torch.float64)
    kinds = torch.tensor([0.0, 1e-9, -1e-9, 40.0, -30.0], dtype=torch.float64)
    raw = torch.where(pick < 5, kinds[pick.clamp(max=4)], spread)
    return variant, q, k, v, {"dt": raw}


def test_signed_transition_is_two_alpha_minus_one_with_zero_floored():
    """`signed_transition` gives log|2e^{g} − 1| and its sign to float64 round-off, and at the
    exact zero (g = −ln 2) the floor log(2^{−53}) with the sign +1, finite, its gradient too."""
    g = torch.tensor([0.0, -1e-12, -0.3, -math.log(2), -0.7, -3.0, -50.0], dtype=torch.float64)
    g.requires_grad_(True)
    magnitude, sign = gla_module.signed_transition(g)
    lam = 2 * torch.exp(g.detach()) - 1
    assert lam[3] == 0 and magnitude[3] == math.log(2.0**-53) and sign[3] == 1
    others = [0, 1, 2, 4, 5, 6]
    torch.testing.assert_close(sign[others], torch.sign(lam[others]), rtol=0, atol=0)
    torch.testing.assert_close(
        magnitude[others], torch.log(lam[others].abs()), rtol=1e-12, atol=1e-15
    )
    assert magnitude[1].item() == pytest.approx(-2e-12, rel=1e-9)  # log1p: g's digits kept
    magnitude.sum().backward()
    assert torch.isfinite(g.grad).all()


@pytest.mark.parametrize("span", [300.0, -1.0], ids=["factored", "differences"])
@pytest.mark.parametrize("kv", [4, 1])
def test_mamba2_negative_eigenvalues_equal_the_recurrence_in_float64(kv, span, monkeypatch):
    """With ``negative_eigenvalues``, transitions exactly 0, near 0, near ±1 and spread
    (`signed_case`), 150 positions, chunks 8, 16 and 64, causal and not, 4 or 1 key/value heads
    for 4 query heads, and 40 queries on 70 keys: to 1e-10 against the recurrence with
    λ = 2·exp(−A·Δ) − 1 multiplied in (the floor at exact zeros contributes 2^{−53} of the
    state, below that). Both within-chunk forms: every block factored (span 300: e^{−b} up to
    e^{300}, finite in float64) and every block by exponents of differences."""
    monkeypatch.setattr(gla_module, "FACTOR_SPAN", span)
    variant, q, k, v, gates = signed_case(kv=kv)
    expected = {c: mamba2_reference(variant, q, k, v, gates, c) for c in (True, False)}
    for chunk in (8, 16, 64):
        variant.params.chunk_size = chunk  # the same A and dt_bias: one reference for all
        for causal in (True, False):
            out = variant(q, k, v, causal=causal, gates=gates)
            torch.testing.assert_close(out, expected[causal], rtol=1e-10, atol=1e-10)
    variant, q, k, v, gates = signed_case(kv=kv, n=70, chunk_size=16)
    for causal in (True, False):
        out = variant(q[:, :, :40], k, v, causal=causal, gates=gates)
        expected = mamba2_reference(variant, q[:, :, :40], k, v, gates, causal)
        torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-10)


def test_signed_engine_carries_a_given_state():
    """`decayed_attention` with signs from a given state S_0: 75 positions (chunks 8, 16, 64
    pad 5, 5, 53: the padding must change no sign), transitions exactly 0 and near ±1, 2
    key/value heads for 4 query heads: the outputs and the final state, causal and not (every
    query reading S_M), equal the loop S_t = λ_t S_{t−1} + k_t v_tᵀ to 1e-10."""
    gen = torch.Generator().manual_seed(7)
    n = 75
    q = torch.randn(2, 4, n, 16, generator=gen, dtype=torch.float64)
    k = torch.randn(2, 2, n, 16, generator=gen, dtype=torch.float64)
    v = torch.randn(2, 2, n, 8, generator=gen, dtype=torch.float64)
    start = torch.randn(2, 2, 16, 8, generator=gen, dtype=torch.float64)
    # head 0: λ spread over (−1, 1) and exactly 0; head 1: λ in (0.8, 1) and near −1 (11
    # of them: an odd sign over the whole), so S_0 reaches S_M at about e^{−5} of its size, negated
    g = -torch.rand(2, 2, n, 1, generator=gen, dtype=torch.float64)
    g = g * torch.tensor([3.0, 0.1], dtype=torch.float64).view(2, 1, 1)
    g[:, 0, ::9] = -math.log(2)  # λ = 0 exactly
    g[:, :, 4::7] = -60.0  # λ = −1 + 2e^{−60}
    g[:, :, 2::7] = -1e-13  # λ = 1 − 2e^{−13}
    magnitude, sign = gla_module.signed_transition(g)
    lam = 2 * torch.exp(g) - 1
    state, outs = start, []
    for t in range(n):
        state = lam[:, :, t, :, None] * state + k[:, :, t, :, None] * v[:, :, t, None, :]
        outs.append(torch.einsum("bhd,bhde->bhe", q[:, :, t], state.repeat_interleave(2, 1)))
    expected = torch.stack(outs, dim=2)
    for chunk in (8, 16, 64):
        for causal in (True, False):
            out, final = gla_module.decayed_attention(
                q, k, v, magnitude, chunk, causal, start, sign
            )
            torch.testing.assert_close(final, state, rtol=1e-10, atol=1e-10)
            every = torch.einsum("bhnd,bhde->bhne", q, state.repeat_interleave(2, 1))
            read = expected if causal else every  # non-causal: every query reads S_M
            torch.testing.assert_close(out, read, rtol=1e-10, atol=1e-10)


def test_mamba2_negative_eigenvalues_decoding_equals_the_forward():
    """Prefill 70, 5 steps, prefill 53 with ``negative_eigenvalues`` (`signed_case`'s
    transitions: exact zeros, near ±1) on 2 key/value heads for 4 query heads: equal to the
    causal forward in float64 (1e-10)."""
    variant, q, k, v, gates = signed_case(kv=2, n=128)
    expected = variant(q, k, v, causal=True, gates=gates)
    decoder = incremental_form(variant, 2, 128, 16, 8, dtype=torch.float64, kv_heads=2)
    outs, t = [], 0
    for size in (70, 1, 1, 1, 1, 1, 53):
        part = (x[:, :, t : t + size] for x in (q, k, v))
        g = {key: x[:, :, t : t + size] for key, x in gates.items()}
        outs.append(decoder.prefill(*part, gates=g) if size > 1 else decoder.step(*part, g))
        t += size
    torch.testing.assert_close(torch.cat(outs, dim=2), expected, rtol=1e-10, atol=1e-10)


def _alternating_claim(out, q, k, v, dt):
    """Whether mamba2's causal output is Δ·Σ_{s ≤ t} (−1)^{t−s} (q_t·k_s) v_s, to 1e-9."""
    n = q.shape[-2]
    t = torch.arange(n)
    signs = (1 - 2 * ((t[:, None] - t[None, :]) % 2)).to(q.dtype)
    scores = (q @ k.transpose(-1, -2)).tril() * signs
    return torch.allclose(out, dt * (scores @ v), rtol=1e-9, atol=1e-9)


def test_mamba2_with_every_transition_at_minus_one_alternates_the_sign():
    """Theory (Grazzi et al.: the parity a negative transition can count): with A·Δ → ∞
    (A_log = 60: α = exp(−e^{60}·Δ) = 0 in float64) and ``negative_eigenvalues`` every
    transition is −1, the state S_t = −S_{t−1} + Δ k_t v_tᵀ, the output an alternating sum over
    the past, here across chunks of 16 (an odd chunk count: the carried sign matters).
    In-suite mutant: the same model without the flag (α = 0: only Δ (q_t·k_t) v_t) fails it."""
    q, k, v, _ = inputs(n=150, dv=16)
    dt = 0.37
    raw = torch.full((2, 4, 150, 1), math.log(math.expm1(dt)), dtype=torch.float64)
    outs = {}
    for flag in (True, False):
        variant = build("mamba2", output_norm=False, chunk_size=16, negative_eigenvalues=flag)
        with torch.no_grad():
            variant.A_log.fill_(60.0)
            variant.dt_bias.zero_()
        outs[flag] = variant(q, k, v, causal=True, gates={"dt": raw})
    assert _alternating_claim(outs[True], q, k, v, dt)
    assert not _alternating_claim(outs[False], q, k, v, dt)


# ---- theory claims (docs/theory-tests.md), each with a planted mutant that must fail ----------


def _zero_decay_claim(out_gla, q, k, v, causal):
    """Whether gla's output equals Σ_{s ≤ t} (q_t·k_s/√D) v_s (unnormalised linear attention),
    also as identity's output × M (identity divides by the number of keys M), to 1e-10."""
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        scores = scores.tril()
    direct = scores @ v
    identity = build_variant("identity", {}, VariantShape(4, 16, 4096))
    via_identity = identity(q, k, v, causal=causal) * k.shape[-2]
    return torch.allclose(out_gla, direct, rtol=1e-10, atol=1e-10) and torch.allclose(
        out_gla, via_identity, rtol=1e-10, atol=1e-10
    )


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
def test_gla_with_zero_log_decay_is_unnormalised_linear_attention(causal):
    """Theory: with log a = 0 (raw gate +∞: logsigmoid(1e4) = −e^{−1e4} = 0 in float64) gla's
    state is Σ k vᵀ and its output the unnormalised linear attention (q·k/√D) v. In-suite
    mutant: a log-decay of −1e-3 per position (a decay off by 1e-3) fails the same check."""
    q, k, v, _ = inputs(n=150)
    variant = build("gla", output_norm=False)  # the claim is the bare recurrence's
    gates = {"alpha": torch.full((2, 4, 150, 16), 1e4, dtype=torch.float64)}
    assert _zero_decay_claim(variant(q, k, v, causal=causal, gates=gates), q, k, v, causal)
    # the mutant: logsigmoid(raw)/16 = −1e-3, i.e. a = 0.999 instead of 1
    raw = math.log(math.expm1(16e-3))  # logsigmoid(−raw')… solve logsigmoid(x) = −0.016
    mutant_gates = {"alpha": torch.full((2, 4, 150, 16), -raw, dtype=torch.float64)}
    mutant_decay = F.logsigmoid(mutant_gates["alpha"][0, 0, 0, 0]) / 16
    assert abs(mutant_decay.item() + 1e-3) < 1e-12
    mutant = variant(q, k, v, causal=causal, gates=mutant_gates)
    assert not _zero_decay_claim(mutant, q, k, v, causal)


def _fixed_step_claim(out, q, k, v, dt, causal):
    """Whether mamba2's output equals Δ·Σ_{s ≤ t} (q_t·k_s) v_s (linear attention scaled by the
    time step, no 1/√D), to 1e-9."""
    scores = q @ k.transpose(-1, -2)
    if causal:
        scores = scores.tril()
    return torch.allclose(out, dt * (scores @ v), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
def test_mamba2_with_a_fixed_step_and_no_decay_is_linear_attention_scaled_by_the_step(causal):
    """Theory: with Δ fixed (raw gate + dt_bias = softplus⁻¹(Δ)) and A → 0 (A_log = −60: the
    per-step log-decay is −e^{−60}·Δ ≈ −1e-27, exactly 1 after exp in float64), the state is
    Δ·Σ k vᵀ: linear attention without normaliser, scaled by Δ. In-suite mutants: A_log = −7
    (a decay of about 1 − 1e-3·Δ/… per step: exp(−7) ≈ 9e-4) and a transposed state (values
    read by the keys' side: Σ (q·v) k with Dv = D) both fail the same check."""
    q, k, v, _ = inputs(n=150, dv=16)
    variant = build("mamba2", output_norm=False)  # the claim is the bare recurrence's
    dt = 0.37
    with torch.no_grad():
        variant.A_log.fill_(-60.0)
        variant.dt_bias.zero_()
    raw = torch.full((2, 4, 150, 1), math.log(math.expm1(dt)), dtype=torch.float64)
    out = variant(q, k, v, causal=causal, gates={"dt": raw})
    assert _fixed_step_claim(out, q, k, v, dt, causal)
    with torch.no_grad():
        variant.A_log.fill_(-7.0)
    decayed = variant(q, k, v, causal=causal, gates={"dt": raw})
    assert not _fixed_step_claim(decayed, q, k, v, dt, causal)
    with torch.no_grad():
        variant.A_log.fill_(-60.0)
    transposed = variant(q, v, k, causal=causal, gates={"dt": raw})  # keys and values swapped
    assert not _fixed_step_claim(transposed, q, k, v, dt, causal)
