"""`gated_delta_product` (attnbench.variants.recurrent.delta) against a slow, obviously
correct float64 recurrence that applies each token's decay and then its Householder steps one
by one; its reduction to gated_delta_net at one step; its incremental form, FLOPs and state.

The reference re-derives everything from the paper's definitions (SiLU, L2 norm of q and of
every key, 1/√D, β = sigmoid(raw) or 2·sigmoid(raw), the decay
α = exp(−exp(A_log)·softplus(raw + dt_bias)) once per token, n_h delta-rule steps), sharing no
code with the chunked form over interleaved sub-steps. Tolerance 1e-10 in float64: the two
differ only in summation order (measured 4.2e-15 over the cases below).
"""

from __future__ import annotations

import math

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from attnbench import VariantShape, build_variant, incremental_form, random_gates
from attnbench.harness.discovery import load_plugins
from attnbench.variants.recurrent.delta_chunks import products_flops

load_plugins()


def reference(variant, q, k, v, gates, causal=True):
    """Gated DeltaProduct token by token in float64 from the raw inputs: per token, S ← α S,
    then for each step j, S ← S + β_j k_j (v_j − Sᵀk_j)ᵀ; out = Sᵀq (query head h reads state
    h // group; causal=False: the final state; causal with N ≠ M: S_min(i, M−1)); RMS-normalised
    per head and position where ``output_norm`` is set. The decay has one head per key/value
    head here (the tests build the variant with ``n_kv_heads``)."""
    p = variant.params
    steps = p.householder_steps

    def activated(x):
        x = x.double()
        return x * torch.sigmoid(x) if p.qk_activation == "silu" else x

    def unit(x):
        return x / x.norm(dim=-1, keepdim=True).clamp_min(1e-6)

    q = unit(activated(q)) / math.sqrt(q.shape[-1])
    keys = [unit(activated(k))] + [unit(activated(gates[f"key_{j}"])) for j in range(2, steps + 1)]
    values = [v.double()] + [gates[f"value_{j}"].double() for j in range(2, steps + 1)]
    raw_betas = [gates["beta"]] + [gates[f"beta_{j}"] for j in range(2, steps + 1)]
    scale = 2.0 if p.negative_eigenvalues else 1.0
    betas = [scale * torch.sigmoid(r.double()[..., 0]) for r in raw_betas]
    b, h, n, d = q.shape
    kv, m, dv = k.shape[1], k.shape[2], v.shape[-1]
    a_log, dt_bias = variant.A_log.detach().double(), variant.dt_bias.detach().double()
    assert a_log.numel() == kv
    softplus = torch.log1p(torch.exp(gates["alpha"].double()[..., 0] + dt_bias.view(-1, 1)))
    alpha = torch.exp(-torch.exp(a_log).view(-1, 1) * softplus)  # (B, H_kv, M)
    state = torch.zeros(b, kv, d, dv, dtype=torch.float64)
    states = []
    for t in range(m):
        for bb in range(b):
            for head in range(kv):
                s = alpha[bb, head, t] * state[bb, head]
                for key, value, beta in zip(keys, values, betas, strict=True):
                    kt = key[bb, head, t]
                    s = s + beta[bb, head, t] * torch.outer(kt, value[bb, head, t] - s.T @ kt)
                state[bb, head] = s
        states.append(state.clone())
    out = torch.zeros(b, h, n, dv, dtype=torch.float64)
    group = h // kv
    for i in range(n):
        s = states[min(i, m - 1)] if causal else states[-1]
        for hh in range(h):
            out[:, hh, i] = torch.einsum("bd,bde->be", q[:, hh, i], s[:, hh // group])
    if p.output_norm and dv > 1:
        return out / torch.sqrt((out * out).mean(dim=-1, keepdim=True) + 1e-5)
    return out


def make(name="gated_delta_product", heads=4, kv_heads=None, d=8, seed=0, **params):
    """The variant, float64, its parameters drawn from ``seed``."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        shape = VariantShape(heads, d, 4096, n_kv_heads=kv_heads)
        return build_variant(name, params, shape).double()


def inputs(variant, heads, kv, n, m=None, d=8, dv=5, seed=0):
    """Unit-normal q, k, v and the variant's raw gates: β and α gates ×2 (so β and α spread
    over their range rather than sitting near the middle), the extra keys and values
    unit-normal."""
    m = n if m is None else m
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, heads, n, d, generator=g, dtype=torch.float64)
    k = torch.randn(2, kv, m, d, generator=g, dtype=torch.float64)
    v = torch.randn(2, kv, m, dv, generator=g, dtype=torch.float64)
    raw = random_gates(
        variant, 2, m, head_dim=d, kv_heads=kv, generator=g, dtype=torch.float64, value_dim=dv
    )
    spread = {"head": 2.0, "key": 1.0, "value": 1.0}
    return q, k, v, {a: spread[variant.gates[a]] * x for a, x in raw.items()}


def _cut(gates, start, end):
    return {name: g[:, :, start:end] for name, g in gates.items()}


@pytest.mark.parametrize(
    "n, m, chunk, kv, steps, negative, causal",
    [
        (1, 1, 64, 4, 2, True, True),
        (31, 31, 16, 2, 2, False, True),  # 62 sub-steps across chunks of 16
        (40, 40, 7, 1, 3, True, True),  # a chunk that divides neither tokens nor sub-steps
        (25, 25, 8, 2, 2, True, False),
        (7, 19, 8, 2, 2, True, True),  # fewer queries than keys: query i reads S_i
        (19, 7, 8, 2, 3, False, True),  # more: the later queries read the final state
    ],
)
def test_chunked_form_equals_the_householder_recurrence_in_float64(
    n, m, chunk, kv, steps, negative, causal
):
    """Chunk sizes that do and do not divide the sub-steps, 1 to 3 steps per token, negative
    eigenvalues on and off, 4 query heads on 4, 2 and 1 key/value heads, causal and not."""
    variant = make(
        kv_heads=kv, chunk_size=chunk, householder_steps=steps, negative_eigenvalues=negative
    )
    q, k, v, gates = inputs(variant, 4, kv, n, m, seed=n + m + steps)
    with torch.no_grad():
        out = variant(q, k, v, causal=causal, gates=gates)
    expected = reference(variant, q, k, v, gates, causal=causal)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-10)


@pytest.mark.parametrize("negative", [False, True])
def test_one_householder_step_is_gated_delta_net(negative):
    """householder_steps=1 gives gated_delta_net's outputs on the same q, k, v, gates and
    parameters, causal and not (float64, 1e-14: the same engine on the same inputs, measured
    exactly equal); with two steps whose second key is 0 (it writes nothing) too (1e-12: the
    chunks then split the sub-steps elsewhere, measured 4.4e-15); with a second key that is
    not 0, not (the test can fail)."""
    gated = make("gated_delta_net", kv_heads=2, negative_eigenvalues=negative)
    one = make(kv_heads=2, householder_steps=1, negative_eigenvalues=negative)
    two = make(kv_heads=2, householder_steps=2, negative_eigenvalues=negative)
    for product in (one, two):
        product.load_state_dict(gated.state_dict())
    assert set(one.gates) == {"alpha", "beta"}
    q, k, v, gates = inputs(two, 4, 2, 70, seed=3)
    silent = dict(gates, key_2=torch.zeros_like(gates["key_2"]))
    with torch.no_grad():
        for causal in (True, False):
            base = {"alpha": gates["alpha"], "beta": gates["beta"]}
            expected = gated(q, k, v, causal=causal, gates=base)
            torch.testing.assert_close(
                one(q, k, v, causal=causal, gates=base), expected, rtol=0, atol=1e-14
            )
            torch.testing.assert_close(
                two(q, k, v, causal=causal, gates=silent), expected, rtol=0, atol=1e-12
            )
            gap = float((two(q, k, v, causal=causal, gates=gates) - expected).abs().max())
            assert gap > 1e-3


def test_decoding_after_a_context_equals_the_forward_in_float64():
    """Three steps per token, negative eigenvalues: a prefill of 45 tokens then 25 steps, and
    prefills of 20 and 50, equal the causal forward over the 70 tokens (float64, 1e-12: a step
    applies the recurrence sub-step by sub-step, a prefill replays the chunked form); the
    decoder holds S alone, D×Dv per key/value head."""
    variant = make(kv_heads=2, chunk_size=16, householder_steps=3, negative_eigenvalues=True)
    q, k, v, gates = inputs(variant, 4, 2, 70, seed=8)
    with torch.no_grad():
        expected = variant(q, k, v, causal=True, gates=gates)
        for cuts in ((45, *range(46, 71)), (20, 70)):
            decoder = incremental_form(variant, 2, 70, 8, 5, dtype=torch.float64, kv_heads=2)
            outs, start = [], 0
            for end in cuts:
                part = (x[:, :, start:end] for x in (q, k, v))
                feed = decoder.step if end - start == 1 else decoder.prefill
                outs.append(feed(*part, _cut(gates, start, end)))
                start = end
            torch.testing.assert_close(torch.cat(outs, 2), expected, rtol=0, atol=1e-12)
    assert decoder.state_size(70) == decoder.state_size(1) == 2 * 8 * 5
    assert [tuple(t.shape) for t in decoder.state_tensors()] == [(2, 2, 8, 5)]


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
def test_declared_flops_are_the_products_the_counter_sees(causal):
    """`forward_flops` against `FlopCounterMode` on the forward at N = 128, two steps (256
    sub-steps, 8 chunks), H = 4 on 2 key/value heads, D = 16: exactly the products, the dropped
    read-outs included, and twice gated_delta_net's state products."""
    n, d = 128, 16
    variant = build_variant(
        "gated_delta_product", {"chunk_size": 32}, VariantShape(4, d, n, n_kv_heads=2)
    )
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, 4, n, d, generator=gen)
    k, v = (torch.randn(1, 2, n, d, generator=gen) for _ in range(2))
    gates = random_gates(variant, 1, n, head_dim=d, kv_heads=2, generator=gen)
    with FlopCounterMode(display=False) as count:
        variant(q, k, v, causal=causal, gates=gates)
    declared = variant.forward_flops(1, 4, n, n, d, d, causal)
    assert declared == pytest.approx(count.get_total_flops(), rel=1e-9)
    reads = 2 * n if causal else n
    assert declared == products_flops(4, 2, reads, 2 * n, d, d, causal, 32)


def test_steps_are_checked_and_each_instance_declares_its_gates():
    """householder_steps outside 1..8 is refused in one sentence (10⁶ once built 3·10⁶
    projections and ignored a stop for minutes); an instance declares the gates of its own
    steps, the class those of the default (2)."""
    for bad in (0, 9, 1_000_000):
        with pytest.raises(ValueError, match=f"between 1 .* and 8; got {bad}\\."):
            make(householder_steps=bad)
    make(householder_steps=8)
    three = make(householder_steps=3)
    assert three.gates == {
        "alpha": "head",
        "beta": "head",
        "beta_2": "head",
        "key_2": "key",
        "value_2": "value",
        "beta_3": "head",
        "key_3": "key",
        "value_3": "value",
    }
    assert set(type(three).gates) == {"alpha", "beta", "beta_2", "key_2", "value_2"}


def test_float32_is_within_the_declared_tolerance():
    """The declared `error_tolerance` holds at n = 256 (H = 4, D = 64, two steps, negative
    eigenvalues, unit-normal inputs, gates ×2): float32 and bfloat16 (computed in float32
    inside) against the float64 forward, causal and not."""
    ref_variant = make(d=64, negative_eigenvalues=True)
    q, k, v, gates = inputs(ref_variant, 4, 4, 256, d=64, dv=64, seed=3)
    for causal in (True, False):
        with torch.no_grad():
            expected = ref_variant(q, k, v, causal=causal, gates=gates)
            scale = max(1.0, float(expected.abs().max()))
            for dtype in (torch.float32, torch.bfloat16):
                low = make(d=64, negative_eigenvalues=True).to(dtype)
                out = low(
                    *(x.to(dtype) for x in (q, k, v)),
                    causal=causal,
                    gates={a: g.to(dtype) for a, g in gates.items()},
                )
                error = float((out.double() - expected).abs().max()) / scale
                assert low.within_tolerance(error, dtype), (dtype, causal, error)
