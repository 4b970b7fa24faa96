"""`delta_net` and `gated_delta_net` (attnbench.variants.recurrent.delta) against a slow,
obviously correct float64 recurrence, one token at a time; their incremental forms, FLOPs and
error tolerances; and the theory claims of theory.md §7, each with a planted mutant it rejects.

The reference below re-derives everything from the papers' definitions (SiLU, L2 norm, 1/√D,
β = sigmoid(raw), g = −exp(A_log)·softplus(raw + dt_bias), the per-token update), so the chunked
WY/UT form is checked against maths that shares no code with it. Tolerances: 1e-10 in float64
(measured ≤ 4.5e-15 at 150 tokens, 1.0e-15 at 1000 with q and k normalised: the two forms differ
only in summation order) and the variants' declared float32 tolerance (3e-6 over
max(1, max |out|); measured ≤ 1.8e-7 at 512 and 4096 tokens).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from attnbench import VariantShape, build_variant, incremental_form, random_gates
from attnbench.harness.discovery import load_plugins
from attnbench.variants.recurrent.delta_chunks import (
    delta_rule_chunked,
    inverse_flops,
    products_flops,
    unit_lower_inverse,
)

load_plugins()
NAMES = ["delta_net", "gated_delta_net"]


# ---------------------------------------------------------------- the slow reference


def reference(variant, q, k, v, gates, causal=True):
    """The (gated) delta rule token by token in float64, from the variant's raw inputs:
    features, gates and update written out from the papers (no code shared with the variant).
    Query head h reads key/value head h // (H / H_kv); with causal=False every query reads the
    final state; causal with N ≠ M: query i reads S_min(i, M−1). The output RMS-normalised per
    head and position where the variant's ``output_norm`` is set (its default)."""
    q, k, v = (x.double() for x in (q, k, v))
    if variant.params.qk_activation == "silu":
        q, k = q * torch.sigmoid(q), k * torch.sigmoid(k)
    q = q / q.norm(dim=-1, keepdim=True).clamp_min(1e-6) / math.sqrt(q.shape[-1])
    k = k / k.norm(dim=-1, keepdim=True).clamp_min(1e-6)
    b, h, n, d = q.shape
    kv, m, dv = k.shape[1], k.shape[2], v.shape[-1]
    beta = torch.sigmoid(gates["beta"].double()[..., 0])  # (B, H_kv, M)
    if variant.params.negative_eigenvalues:  # β ∈ (0, 2): I − β k kᵀ has eigenvalue 1 − β < 0
        beta = 2 * beta
    if "alpha" in gates:
        a_log = variant.A_log.detach().double()
        dt_bias = variant.dt_bias.detach().double()
        if a_log.numel() > kv:  # a decay per query head: a state per query head
            r = a_log.numel() // kv
            k, v, beta = (x.repeat_interleave(r, 1) for x in (k, v, beta))
            raw_alpha = gates["alpha"].double()[..., 0].repeat_interleave(r, 1)
            kv = a_log.numel()
        else:
            a_log = a_log.repeat_interleave(kv // a_log.numel())
            dt_bias = dt_bias.repeat_interleave(kv // dt_bias.numel())
            raw_alpha = gates["alpha"].double()[..., 0]
        softplus = torch.log1p(torch.exp(raw_alpha + dt_bias.view(-1, 1)))
        alpha = torch.exp(-torch.exp(a_log).view(-1, 1) * softplus)
    else:
        alpha = torch.ones(b, kv, m, dtype=torch.float64)
    group = h // kv
    state = torch.zeros(b, kv, d, dv, dtype=torch.float64)
    states = []
    for t in range(m):
        for bb in range(b):
            for j in range(kv):
                s = alpha[bb, j, t] * state[bb, j]
                kt = k[bb, j, t]
                correction = v[bb, j, t] - s.T @ kt
                state[bb, j] = s + beta[bb, j, t] * torch.outer(kt, correction)
        states.append(state.clone())
    out = torch.zeros(b, h, n, dv, dtype=torch.float64)
    for i in range(n):
        s = states[min(i, m - 1)] if causal else states[-1]
        for hh in range(h):
            out[:, hh, i] = torch.einsum("bd,bde->be", q[:, hh, i], s[:, hh // group])
    return rms_normalised(out) if variant.params.output_norm and dv > 1 else out


def rms_normalised(out):
    """Each head's output at each position over the root mean square of its value channels
    (plus ε = 1e-5, fla's RMSNorm ε): the variants' ``output_norm``, written out (which leaves
    a single value channel as it is)."""
    return out / torch.sqrt((out * out).mean(dim=-1, keepdim=True) + 1e-5)


def make(name, heads=4, kv_heads=None, d=8, max_len=4096, seed=0, **params):
    """The variant, float64, its parameters drawn from ``seed``."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        shape = VariantShape(heads, d, max_len, n_kv_heads=kv_heads)
        return build_variant(name, params, shape).double()


def inputs(heads, kv, n, m=None, d=8, dv=5, seed=0, dtype=torch.float64, variant=None):
    """Unit-normal q, k, v and the variant's unit-normal raw gates (shifted per gate so that β
    and α spread over (0, 1) rather than sitting near ½)."""
    m = n if m is None else m
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, heads, n, d, generator=g, dtype=dtype)
    k = torch.randn(2, kv, m, d, generator=g, dtype=dtype)
    v = torch.randn(2, kv, m, dv, generator=g, dtype=dtype)
    gates = random_gates(variant, 2, m, head_dim=d, kv_heads=kv, generator=g, dtype=dtype)
    return q, k, v, {name: 2 * x for name, x in gates.items()}


# ---------------------------------------------------------------- the forward


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(
    "n, chunk, kv, activation",
    [
        (1, 64, 4, "silu"),
        (2, 64, 2, "silu"),
        (63, 16, 1, "silu"),
        (64, 16, 4, "identity"),
        (65, 64, 2, "silu"),
        (200, 64, 4, "silu"),
        (200, 7, 2, "identity"),
    ],
)
def test_causal_forward_equals_the_recurrence_in_float64(name, n, chunk, kv, activation):
    """Lengths that are, are not, and are one past a multiple of the chunk; chunk sizes that
    do and do not divide them; 4 query heads on 4, 2 and 1 key/value heads."""
    variant = make(name, kv_heads=kv, chunk_size=chunk, qk_activation=activation)
    q, k, v, gates = inputs(4, kv, n, seed=n, variant=variant)
    with torch.no_grad():
        out = variant(q, k, v, causal=True, gates=gates)
    torch.testing.assert_close(out, reference(variant, q, k, v, gates), rtol=0, atol=1e-10)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(
    "n, m, causal", [(37, 37, False), (7, 19, False), (7, 19, True), (19, 7, True)]
)
def test_other_lengths_and_the_non_causal_read_of_the_final_state(name, n, m, causal):
    """causal=False: every query reads the state after the last key; causal with fewer or more
    queries than keys: query i reads S_min(i, M−1) (the causal convention)."""
    variant = make(name, kv_heads=2)
    q, k, v, gates = inputs(4, 2, n, m, seed=n + m, variant=variant)
    with torch.no_grad():
        out = variant(q, k, v, causal=causal, gates=gates)
    expected = reference(variant, q, k, v, gates, causal=causal)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-10)


@pytest.mark.parametrize("name", NAMES)
def test_views_as_the_shared_layer_makes_them_and_gradients_by_finite_differences(name):
    """q, k, v as non-contiguous views (the shared layer's split of one projection) give the
    contiguous inputs' outputs; and the gradients with respect to q, k, v, the raw gates and
    the decay's parameters are autograd's of the chunked form, checked against finite
    differences (`torch.autograd.gradcheck`, float64) at 11 tokens in chunks of 4."""
    variant = make(name, kv_heads=2, d=4, chunk_size=4)
    q, k, v, gates = inputs(4, 2, 21, d=4, dv=3, seed=2, variant=variant)
    packed = torch.cat([k, v, k], dim=-1)  # k, v as views into one tensor, like the layer's
    kk, vv = packed[..., :4], packed[..., 4:7]
    assert not kk.is_contiguous() and not vv.is_contiguous()
    with torch.no_grad():
        torch.testing.assert_close(
            variant(q, kk, vv, causal=True, gates=gates),
            variant(q, k, v, causal=True, gates=gates),
            rtol=0,
            atol=1e-14,  # the products may take another kernel path for strided operands
        )
    names = sorted(gates)

    def run(q, k, v, *raw):
        return variant(q, k, v, causal=True, gates=dict(zip(names, raw, strict=True)))

    # one sequence, 11 tokens in chunks of 4, gradcheck's fast mode (random directions): seconds
    small = (x[:1, :, :11] for x in (q, k, v, *(gates[n] for n in names)))
    leaves = [x.clone().requires_grad_(True) for x in small]
    assert torch.autograd.gradcheck(run, leaves, fast_mode=True)
    if name == "gated_delta_net":  # the decay's learned parameters too
        out = run(*leaves)
        grads = torch.autograd.grad(out.square().sum(), [variant.A_log, variant.dt_bias])
        assert all(torch.isfinite(g).all() and g.abs().sum() > 0 for g in grads)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
def test_attention_weights_given_the_gates_reproduce_the_forward(name, causal):
    """The output is linear in the values for given q, k and gates, so the weights are the
    forward of unit-vector values: weights @ v equals the forward (float64, 1e-12), zero above
    the diagonal when causal; without gates the weights are refused (they depend on them), and
    so are they with the output norm (no linear map of the values): the rule's own here."""
    with pytest.raises(NotImplementedError, match="output_norm"):
        normalised = make(name, kv_heads=2)
        q, k, _, gates = inputs(4, 2, 5, variant=normalised)
        normalised.attention_weights(q, k, causal=causal, gates=gates)
    variant = make(name, kv_heads=2, output_norm=False)
    q, k, v, gates = inputs(4, 2, 45, seed=4, variant=variant)
    with torch.no_grad():
        weights = variant.attention_weights(q, k, causal=causal, gates=gates)
        out = variant(q, k, v, causal=causal, gates=gates)
    assert weights.shape == (2, 4, 45, 45)
    torch.testing.assert_close(weights @ v.repeat_interleave(2, 1), out, rtol=0, atol=1e-12)
    if causal:
        assert torch.all(weights.triu(1) == 0)
    with pytest.raises(NotImplementedError, match="gates"):
        variant.attention_weights(q, k, causal=causal)


@pytest.mark.parametrize("name", NAMES)
def test_a_decay_per_query_head_keeps_a_state_per_query_head(name):
    """Built without ``n_kv_heads`` (a decay per query head) and called with 1 key/value head:
    gated_delta_net's query heads forget at their own rates, so each keeps a state; the
    forward and the decoder agree with the reference, the decoder holding H states."""
    variant = make(name)  # 4 heads of decay for the gated one
    q, k, v, gates = inputs(4, 1, 90, seed=5, variant=variant)
    with torch.no_grad():
        out = variant(q, k, v, causal=True, gates=gates)
        decoder = incremental_form(variant, 2, 90, 8, 5, dtype=torch.float64, kv_heads=1)
        outs = [
            decoder.prefill(q[:, :, :50], k[:, :, :50], v[:, :, :50], _cut(gates, 0, 50)),
            *(
                decoder.step(
                    q[:, :, t : t + 1],
                    k[:, :, t : t + 1],
                    v[:, :, t : t + 1],
                    _cut(gates, t, t + 1),
                )
                for t in range(50, 90)
            ),
        ]
    expected = reference(variant, q, k, v, gates)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-10)
    torch.testing.assert_close(torch.cat(outs, dim=2), expected, rtol=0, atol=1e-10)
    states = 4 if name == "gated_delta_net" else 1
    assert decoder.state_size(90) == states * 8 * 5


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(
    "n, chunk, kv, causal",
    [(1, 64, 4, True), (63, 16, 1, True), (65, 64, 2, True), (70, 7, 2, True), (37, 8, 2, False)],
)
def test_negative_eigenvalues_chunked_equals_the_recurrence(name, n, chunk, kv, causal):
    """``negative_eigenvalues``: β = 2·sigmoid(raw) ∈ (0, 2), the chunked form against the
    token loop (float64, 1e-10: measured 8.6e-15, summation order only) over chunk sizes that
    do and do not divide the length, grouped heads, causal and not. The raw β gates are spread
    (×2 in `inputs`) so that β > 1, a negative eigenvalue 1 − β, occurs at most tokens; the
    same variant with the flag off gives other outputs (the flag reaches the rule)."""
    variant = make(name, kv_heads=kv, chunk_size=chunk, negative_eigenvalues=True)
    q, k, v, gates = inputs(4, kv, n, seed=n + 1, variant=variant)
    off = make(name, kv_heads=kv, chunk_size=chunk)
    with torch.no_grad():
        out = variant(q, k, v, causal=causal, gates=gates)
        plain = off(q, k, v, causal=causal, gates=gates)
    expected = reference(variant, q, k, v, gates, causal=causal)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-10)
    assert (gates["beta"] > 0).float().mean() > 0.3  # β = 2·sigmoid(raw) > 1 at those
    assert float((out - plain).abs().max()) > 1e-3


@pytest.mark.parametrize("name", NAMES)
def test_negative_eigenvalues_decoding_after_a_context_equals_the_forward(name):
    """``negative_eigenvalues``: a prefill of 50 tokens then 30 steps, and a prefill of 80 in
    two parts, equal the causal forward over the 80 (float64, 1e-12: the steps apply the
    recurrence, the prefills replay the chunked form; measured 3.5e-15), and the state is
    still D×Dv per key/value head."""
    variant = make(name, kv_heads=2, chunk_size=16, negative_eigenvalues=True)
    q, k, v, gates = inputs(4, 2, 80, seed=6, variant=variant)
    with torch.no_grad():
        expected = variant(q, k, v, causal=True, gates=gates)
        for cuts in ((50, *range(51, 81)), (33, 80)):
            decoder = incremental_form(variant, 2, 80, 8, 5, dtype=torch.float64, kv_heads=2)
            outs, start = [], 0
            for end in cuts:
                part = (x[:, :, start:end] for x in (q, k, v))
                gate = _cut(gates, start, end)
                step = decoder.step if end - start == 1 else decoder.prefill
                outs.append(step(*part, gate))
                start = end
            torch.testing.assert_close(torch.cat(outs, 2), expected, rtol=0, atol=1e-12)
    assert decoder.state_size(80) == 2 * 8 * 5


def _cut(gates, start, end):
    return {name: g[:, :, start:end] for name, g in gates.items()}


@pytest.mark.parametrize("name", NAMES)
def test_float32_is_within_the_declared_tolerance_and_bfloat16_runs_in_float32(name):
    """The declared `error_tolerance` holds what was measured: at n = 1000 (H = 4, D = 64,
    unit-normal inputs and gates, causal and not) float32 against the float64 forward, and
    bfloat16 (computed in float32 inside) within its own."""
    ref_variant = make(name, d=64)
    q, k, v, gates = inputs(4, 4, 1000, d=64, dv=64, seed=3, variant=ref_variant)
    for causal in (True, False):
        with torch.no_grad():
            expected = ref_variant(q, k, v, causal=causal, gates=gates)
            scale = max(1.0, float(expected.abs().max()))
            for dtype in (torch.float32, torch.bfloat16):
                low = make(name, d=64).to(dtype)
                out = low(
                    *(x.to(dtype) for x in (q, k, v)),
                    causal=causal,
                    gates={a: g.to(dtype) for a, g in gates.items()},
                )
                assert out.dtype == dtype
                error = float((out.double() - expected).abs().max()) / scale
                assert low.within_tolerance(error, dtype), (dtype, causal, error)


def test_gates_follow_the_papers_parametrisation_and_initialisation():
    """A_log = log A with A in (0, 16]; softplus(dt_bias) log-uniform in [1e-3, 0.1] (fla's and
    Mamba-2's initialisation); a raw α gate of −∞ gives α = 1 exactly (g = 0), +∞ gives 0."""
    variant = make("gated_delta_net", heads=64, d=8, seed=1)
    a = variant.A_log.detach().exp()
    dt = F.softplus(variant.dt_bias.detach())
    assert a.min() > 0 and a.max() <= 16 and a.mean() == pytest.approx(8, abs=2)
    assert dt.min() >= 1e-3 * (1 - 1e-9) and dt.max() <= 0.1 * (1 + 1e-9)
    assert set(variant.gates) == {"alpha", "beta"} and make("delta_net").gates == {"beta": "head"}
    k = torch.randn(1, 64, 1, 8, dtype=torch.float64)
    raw = {"beta": torch.zeros(1, 64, 1, 1, dtype=torch.float64)}
    for value, alpha in ((-math.inf, 1.0), (math.inf, 0.0)):
        raw["alpha"] = torch.full((1, 64, 1, 1), value, dtype=torch.float64)
        _, _, beta, log_alpha = variant.rule_inputs(k, k, raw)
        assert torch.all(log_alpha.exp() == alpha) and torch.all(beta == 0.5)


@pytest.mark.parametrize("c", [1, 2, 3, 4, 7, 16, 33, 64])
def test_the_triangular_inverse_by_doubling_is_the_inverse(c):
    """`unit_lower_inverse` (the 4×4 base blocks by substitution, merged by doubling, sizes not
    a power of two padded) against `torch.linalg.solve_triangular` in float64 to 1e-12 of the
    largest entry, with entries as large as the chunks' (|β k·k'| up to 1); its products as
    `inverse_flops` says."""
    g = torch.Generator().manual_seed(c)
    strict = (2 * torch.rand(3, c, c, generator=g, dtype=torch.float64) - 1).tril(-1)
    eye = torch.eye(c, dtype=torch.float64).expand(3, c, c)
    expected = torch.linalg.solve_triangular(strict + eye, eye, upper=False)
    with FlopCounterMode(display=False) as count:
        inverse = unit_lower_inverse(strict)
    error = float((inverse - expected).abs().max() / expected.abs().max())
    assert error < 1e-12, error  # relative to the largest entry: they reach 10² at C = 64
    assert count.get_total_flops() == 3 * inverse_flops(c)


# ---------------------------------------------------------------- decode and state


@pytest.mark.parametrize("name", NAMES)
def test_the_decoder_holds_d_by_dv_per_key_value_head_and_nothing_else(name):
    """At 64k tokens, B = 1, H = 4, D = 64 on 2 key/value heads (the variant built with them):
    2·64·64 elements, the same at 1k; sized on the meta device."""
    variant = build_variant(name, {}, VariantShape(4, 64, 65536, n_kv_heads=2))
    decoder = incremental_form(variant, 1, 65536, 64, device="meta", kv_heads=2)
    assert decoder.state_size(65536) == decoder.state_size(1024) == 2 * 64 * 64
    assert [tuple(t.shape) for t in decoder.state_tensors()] == [(1, 2, 64, 64)]


# ---------------------------------------------------------------- FLOPs


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("kv", [4, 1])
def test_declared_flops_are_the_products_the_counter_sees(name, causal, kv):
    """`forward_flops` against `FlopCounterMode` on the chunked forward at N = 1024 (32
    chunks), H = 4, D = 32: exactly the products, the triangular inverses' included (what the
    counter does not see, and is not declared: the element-wise gates, norms, decays and the
    inverses' 4×4 base blocks, about 0.1 % of the work)."""
    n, d = 1024, 32
    variant = build_variant(name, {}, VariantShape(4, d, n, n_kv_heads=kv))
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, 4, n, d, generator=gen)
    k, v = (torch.randn(1, kv, n, d, generator=gen) for _ in range(2))
    gates = random_gates(variant, 1, n, head_dim=d, kv_heads=kv, generator=gen)
    with FlopCounterMode(display=False) as count:
        variant(q, k, v, causal=causal, gates=gates)
    declared = variant.forward_flops(1, 4, n, n, d, d, causal)
    assert declared == pytest.approx(count.get_total_flops(), rel=1e-9)
    assert declared == products_flops(4, kv, n, n, d, d, causal, variant.last_chunk)


# ---------------------------------------------------------------- theory.md §7


def _online_gradient_descent(state, k, v, beta):
    """S_t = S_{t−1} − β_t ∇_S ½‖Sᵀk_t − v_t‖² at S_{t−1}, the gradient by autograd, token by
    token: the states after each token (T, D, Dv)."""
    states = []
    for t in range(k.shape[0]):
        s = state.clone().requires_grad_(True)
        (0.5 * (s.T @ k[t] - v[t]).square().sum()).backward()
        state = (s - beta[t] * s.grad).detach()
        states.append(state)
    return torch.stack(states)


def _chunked_states(state, k, v, beta, step=1.0):
    """The chunked form's state after each token (its final state on every prefix), with a
    step of ``step``·β (1: the implementation; 1.01: a mutant)."""
    lead = (1, 1)
    return torch.stack(
        [
            delta_rule_chunked(
                None,
                k[: t + 1].view(*lead, t + 1, -1),
                v[: t + 1].view(*lead, t + 1, -1),
                (step * beta[: t + 1]).view(*lead, t + 1),
                chunk=16,
                state=state.view(*lead, *state.shape),
            )[1][0, 0]
            for t in range(k.shape[0])
        ]
    )


def _hebbian_states(state, k, v, beta):
    """The mutant without the correction −Sᵀk: S_t = S_{t−1} + β_t k_t v_tᵀ (linear attention)."""
    return state + torch.cumsum(beta[:, None, None] * k[:, :, None] * v[:, None, :], dim=0)


@pytest.mark.parametrize(
    "rule, is_gd",
    [
        (lambda s, k, v, b: _chunked_states(s, k, v, b), True),
        (lambda s, k, v, b: _chunked_states(s, k, v, b, step=1.01), False),
        (_hebbian_states, False),
    ],
    ids=["delta-rule", "mutant-step-1.01-beta", "mutant-no-correction"],
)
def test_the_delta_rule_is_online_gradient_descent_on_the_squared_error(rule, is_gd):
    """theory.md §7 (a): each delta-rule step is one gradient step with step size β on
    ½‖Sᵀk_t − v_t‖², from a random nonzero S₀, over 40 tokens across chunks of 16 (float64,
    1e-12); a step of 1.01β and the update without its correction are not."""
    g = torch.Generator().manual_seed(0)
    d, dv, t = 8, 5, 40
    state = torch.randn(d, dv, generator=g, dtype=torch.float64)
    k = F.normalize(torch.randn(t, d, generator=g, dtype=torch.float64), dim=-1)
    v = torch.randn(t, dv, generator=g, dtype=torch.float64)
    beta = torch.rand(t, generator=g, dtype=torch.float64)
    gap = (rule(state, k, v, beta) - _online_gradient_descent(state, k, v, beta)).abs().max()
    assert (gap < 1e-12) == is_gd, float(gap)


def _orthonormal_writes(seed=0, d=8, n=150):
    """n writes of values to d orthonormal keys (key of write t: a random one of the d, so each
    is written many times) and n reads of random keys: the last value written to the key read
    by the time of the read (0 if none yet), and the sum of all values written to it."""
    g = torch.Generator().manual_seed(seed)
    basis, _ = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=torch.float64))
    written = torch.randint(0, d, (n,), generator=g)
    read = torch.randint(0, d, (n,), generator=g)
    k, q = basis.T[written], basis.T[read]  # rows: orthonormal keys
    v = torch.randn(n, 5, generator=g, dtype=torch.float64)
    last, total, rewritten = torch.zeros_like(v), torch.zeros_like(v), []
    for t in range(n):
        mine = v[: t + 1][written[: t + 1] == read[t]]
        if len(mine):
            last[t], total[t] = mine[-1], mine.sum(0)
        rewritten.append(len(mine) > 1)
    return q, k, v, last, total, torch.tensor(rewritten)


@pytest.mark.parametrize("mutant", [None, "step-1.01-beta", "no-correction"])
def test_unit_steps_on_orthonormal_keys_recall_the_last_value_where_linear_attention_sums(mutant):
    """theory.md §7 (b): with β = 1 and orthonormal keys, reading key a returns exactly the
    last value written to a (the write replaces it), through `delta_net` itself (qk_activation
    identity, raw β = +∞, query = a key, output ×√D), to 1e-12 over 150 writes and reads of 8
    keys across chunks of 32;
    linear attention (attnbench's `identity`, ×√D·M) returns the sum of every value written to
    a. Mutants: the chunked form with a step of 1.01 (β = 1.01) and the rule without its
    correction (that is `identity`): neither returns the last value."""
    q, k, v, last, total, rewritten = _orthonormal_writes()
    n, d = k.shape
    q4, k4, v4 = (x.view(1, 1, n, -1) for x in (q, k, v))
    variant = make("delta_net", heads=1, d=d, qk_activation="identity", output_norm=False)
    with torch.no_grad():
        if mutant is None:
            gates = {"beta": torch.full((1, 1, n, 1), math.inf, dtype=torch.float64)}
            read = variant(q4, k4, v4, causal=True, gates=gates)[0, 0] * math.sqrt(d)
        elif mutant == "step-1.01-beta":
            beta = torch.full((1, 1, n), 1.01, dtype=torch.float64)
            read = delta_rule_chunked(q4, k4, v4, beta, chunk=64)[0][0, 0]
        else:
            identity = make("identity", heads=1, d=d)
            read = identity(q4, k4, v4, causal=True)[0, 0] * math.sqrt(d) * n
    assert rewritten.sum() > 100  # most reads follow an overwrite: the claim is tested there
    exact = float((read - last).abs().max()) < 1e-12
    assert exact == (mutant is None)
    if mutant == "no-correction":  # linear attention superposes exactly what was written
        torch.testing.assert_close(read, total, rtol=0, atol=1e-12)
        assert float((read - last)[rewritten].abs().max()) > 0.5


@pytest.mark.parametrize("mutant", [None, "alpha-1e-3-below-1"])
def test_the_gated_delta_rule_with_unit_decay_is_the_delta_rule(mutant):
    """theory.md §7 (c): `gated_delta_net` with a raw α gate of −∞ (g = −exp(A_log)·softplus(−∞)
    = 0, α = 1) gives `delta_net`'s outputs on the same q, k, v and β (float64, 1e-12, 200
    tokens, grouped heads); the mutant α = 1 − 10⁻³ (raw gate solved for it) does not."""
    gated, plain = make("gated_delta_net", kv_heads=2), make("delta_net", kv_heads=2)
    q, k, v, gates = inputs(4, 2, 200, seed=9, variant=gated)
    if mutant is None:
        raw = torch.full_like(gates["alpha"], -math.inf)
    else:  # softplus(raw + dt_bias) = −log(1 − 1e-3) / exp(A_log), per head
        target = -math.log(1 - 1e-3) / gated.A_log.detach().exp()
        raw = (torch.log(torch.expm1(target)) - gated.dt_bias.detach()).view(1, 2, 1, 1)
        raw = raw.expand_as(gates["alpha"])
    with torch.no_grad():
        out = gated(q, k, v, causal=True, gates={"alpha": raw, "beta": gates["beta"]})
        expected = plain(q, k, v, causal=True, gates={"beta": gates["beta"]})
    gap = float((out - expected).abs().max())
    assert (gap < 1e-12) == (mutant is None), gap


def test_gated_delta_net_initialises_its_decay_rate_as_fla_does():
    """A = exp(A_log) ~ U(0, 16) per head (fla's GatedDeltaNet layer): over 512 heads every A
    lies in (0, 16), some below 1 (under U(1, 16) none would: P = 0 here; under U(0, 16) all of
    512 above 1 has probability (15/16)^512 < 1e-14), and their mean is 8 within four standard
    errors (16/√12/√512 = 0.20 each)."""
    from attnbench import VariantShape, build_variant

    torch.manual_seed(0)
    a = build_variant("gated_delta_net", shape=VariantShape(512, 8, 64)).A_log.detach().exp()
    assert 0 < a.min() < 1 and a.max() < 16
    assert abs(a.mean().item() - 8) < 4 * 16 / 12**0.5 / 512**0.5
