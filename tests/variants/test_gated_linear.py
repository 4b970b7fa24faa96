"""`gla` and `mamba2` (attnbench.variants.recurrent.gla) against a slow per-token recurrence in
float64, kept here as the reference: S_t = diag(a_t) S_{t−1} + k_t v_tᵀ, o_t = S_tᵀ q_t.

The contract suite (tests/variants/test_contract.py) covers both the moment they register: shapes,
causality, batch independence, the incremental form equal to the forward in float64, grouped-query
heads. Here: the maths of each paper's parametrisation, the chunked form's stability, the declared
FLOPs, the declared error per dtype, and the theory claims with their planted mutants."""

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


def recurrence(q, k, v, log_decay, causal=True, keys_scale=None):
    """The per-token loop, float64: q (B, H, N, D) already scaled; k, v, log_decay
    (B, H_kv, M, ·) with log_decay of width D or 1; keys_scale (B, H_kv, M, 1) multiplies each
    key as it is written (Mamba-2's Δ). Query i reads S after key min(i, M−1) (causal) or S_M."""
    q, k, v, g = (x.double() for x in (q, k, v, log_decay))
    if keys_scale is not None:
        k = k * keys_scale.double()
    heads, kv = q.shape[1], k.shape[1]
    k, v, g = (x.repeat_interleave(heads // kv, dim=1) for x in (k, v, g))
    b, h, n, d = q.shape
    m = k.shape[2]
    state = torch.zeros(b, h, d, v.shape[-1], dtype=torch.float64)
    states = []
    for t in range(m):
        decay = torch.exp(g[:, :, t]).expand(b, h, d)  # (B, H, D)
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
    return normalised(variant, recurrence(q / math.sqrt(q.shape[-1]), k, v, log_decay, causal))


def mamba2_reference(variant, q, k, v, gates, causal):
    kv = k.shape[1]
    a = torch.exp(variant.A_log.double()).view(1, kv, 1, 1)
    dt = F.softplus(gates["dt"].double() + variant.dt_bias.double().view(1, kv, 1, 1))
    return normalised(variant, recurrence(q, k, v, -a * dt, causal, keys_scale=dt))


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


@pytest.mark.parametrize("name", ["gla", "mamba2"])
def test_error_in_each_dtype_is_within_the_declared_tolerance(name):
    """The declared `error_tolerance` holds with room where the throughput task judges it: 2048
    causal positions, H = 4, D = 64, unit-normal inputs and gates, against the float64 forward
    (itself checked against the recurrence above); the measured worst is printed."""
    variant = build(name, d=64)
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
