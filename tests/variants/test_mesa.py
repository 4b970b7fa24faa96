"""`mesa` (attnbench.variants.recurrent.mesa) against a slow per-token reference in float64 kept
here: H_t = γ_t H_{t−1} + β_t k_t k_tᵀ, G_t = γ_t G_{t−1} + β_t k_t v_tᵀ, o_t = G_tᵀ (H_t + Λ)⁻¹ q_t
with a direct solve at every token (``torch.linalg.solve``).

The contract suite covers the rest the moment it registers. Here: the conjugate-gradient solve's
exactness, the decoder, the declared FLOPs and error, the gradients (implicit differentiation
against autograd through a direct solve), and the ridge-regression claim of theory.md with its
planted mutant."""

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
from attnbench.testing import _call
from attnbench.variant import VariantShape, build_variant, random_gates

load_plugins()


def reference(variant, q, k, v, gates, causal=True):
    """The per-token loop with a direct solve, float64; query i uses the state after key
    min(i, M−1) (causal) or after the last key."""
    q, k, v = (x.double() for x in (q, k, v))
    if variant.params.normalise_qk:
        q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
    heads, kv = q.shape[1], k.shape[1]
    gamma = torch.sigmoid(gates["gamma"].double())
    beta = torch.sigmoid(gates["beta"].double())
    k, v, gamma, beta = (x.repeat_interleave(heads // kv, dim=1) for x in (k, v, gamma, beta))
    lam = (F.softplus(variant.lambda_params.double()) + variant.params.lambda_min).view(
        1, heads, -1
    )
    b, h, n, d = q.shape
    m, dv = k.shape[2], v.shape[-1]
    hs = torch.zeros(b, h, d, d, dtype=torch.float64)
    gs = torch.zeros(b, h, d, dv, dtype=torch.float64)
    states = []
    for t in range(m):
        kt, vt = k[:, :, t], v[:, :, t]
        g, bt = gamma[:, :, t, :, None], beta[:, :, t, :, None]
        hs = g * hs + bt * kt[..., :, None] * kt[..., None, :]
        gs = g * gs + bt * kt[..., :, None] * vt[..., None, :]
        states.append((hs, gs))
    out = torch.empty(b, h, n, dv, dtype=torch.float64)
    for i in range(n):
        hs, gs = states[min(i, m - 1)] if causal else states[-1]
        x = torch.linalg.solve(hs + torch.diag_embed(lam), q[:, :, i, :, None])
        out[:, :, i] = (gs.transpose(-1, -2) @ x)[..., 0]
    return out


def build(heads=4, kv=4, d=16, **params):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(3)
        variant = build_variant("mesa", params, VariantShape(heads, d, 4096, n_kv_heads=kv))
    with torch.no_grad():  # λ different per head and channel, so a mix-up shows
        gen = torch.Generator().manual_seed(4)
        variant.lambda_params.add_(0.5 * torch.randn(variant.lambda_params.shape, generator=gen))
    return variant.double()


def inputs(n=150, heads=4, kv=4, d=16, dv=8, m=None, seed=0, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    m = m or n
    q = torch.randn(2, heads, n, d, generator=gen, dtype=dtype)
    k = torch.randn(2, kv, m, d, generator=gen, dtype=dtype)
    v = torch.randn(2, kv, m, dv, generator=gen, dtype=dtype)
    return q, k, v, gen


def gates_for(variant, m, kv, gen, d=16, dtype=torch.float64):
    return random_gates(variant, 2, m, head_dim=d, kv_heads=kv, dtype=dtype, generator=gen)


@pytest.mark.parametrize("path", ["direct", "conjugate gradient"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("kv", [4, 2, 1])
def test_forward_equals_a_direct_solve_at_every_token_in_float64(kv, causal, path, monkeypatch):
    """150 positions (no multiple of the chunk), 1, 2 or 4 key/value heads for 4 query heads,
    λ different per query head and channel, the default 30 CG steps: to 1e-10 of the direct
    float64 solve (CG is exact after D = 16 steps up to rounding), by either causal path (the
    batched solve where its systems fit, `DIRECT_MAX_ENTRIES`, else CG)."""
    from attnbench.variants.recurrent import mesa

    if path != "direct":
        monkeypatch.setattr(mesa, "DIRECT_MAX_ENTRIES", 0)
    q, k, v, gen = inputs(kv=kv)
    variant = build(kv=kv)
    gates = gates_for(variant, 150, kv, gen)
    out = variant(q, k, v, causal=causal, gates=gates)
    torch.testing.assert_close(
        out, reference(variant, q, k, v, gates, causal), rtol=1e-10, atol=1e-10
    )


def test_queries_and_keys_of_different_lengths():
    for n, m in ((40, 70), (70, 40)):
        q, k, v, gen = inputs(n=n, m=m)
        variant = build(chunk_size=16)
        gates = gates_for(variant, m, 4, gen)
        for causal in (True, False):
            out = variant(q, k, v, causal=causal, gates=gates)
            expected = reference(variant, q, k, v, gates, causal)
            torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-10)


def test_conjugate_gradient_is_exact_given_its_steps_and_not_before():
    """A hard case: γ = β = 1 and keys not normalised (H_t = Σ k kᵀ, condition number in the
    hundreds over 300 positions, D = 16). 48 steps: exact to 1e-9 relative; 4 steps: visibly
    not (error above 1e-3) — the step count is what makes the solve exact. With cg_tol = 1e-12
    the early stop keeps the same accuracy."""
    q, k, v, gen = inputs(n=300)
    ones = {"gamma": torch.full((2, 4, 300, 1), 1e4, dtype=torch.float64)}
    ones["beta"] = ones["gamma"].clone()
    errors = {}
    for steps, tol in ((48, 0.0), (4, 0.0), (48, 1e-12)):
        variant = build(cg_steps=steps, cg_tol=tol, normalise_qk=False)
        expected = reference(variant, q, k, v, ones)
        out = variant(q, k, v, causal=True, gates=ones)
        errors[steps, tol] = ((out - expected).abs().max() / expected.abs().max()).item()
    assert errors[48, 0.0] < 1e-9 and errors[48, 1e-12] < 1e-9, errors
    assert errors[4, 0.0] > 1e-3, errors


def test_decoding_holds_h_and_g_per_key_value_head_and_equals_the_forward():
    """Prefill 70, 5 steps (each a direct Cholesky solve), prefill 53, on 2 key/value heads for
    4 query heads: equal to the causal forward (CG) in float64 to 1e-10; the state is
    kv·(D² + D·Dv) elements whatever the length."""
    q, k, v, gen = inputs(n=128, kv=2)
    variant = build(kv=2)
    gates = gates_for(variant, 128, 2, gen)
    expected = variant(q, k, v, causal=True, gates=gates)
    decoder = incremental_form(variant, 2, 128, 16, 8, dtype=torch.float64, kv_heads=2)
    outs, t = [], 0
    for size in (70, 1, 1, 1, 1, 1, 53):
        part = (x[:, :, t : t + size] for x in (q, k, v))
        g = {key: x[:, :, t : t + size] for key, x in gates.items()}
        outs.append(decoder.prefill(*part, gates=g) if size > 1 else decoder.step(*part, g))
        t += size
        held = sum(x[0].numel() for x in decoder.state_tensors())
        assert decoder.state_size(t) == 2 * (16 * 16 + 16 * 8) == held
    torch.testing.assert_close(torch.cat(outs, dim=2), expected, rtol=1e-10, atol=1e-10)


def test_gradients_are_those_of_the_exact_solve():
    """The backward (implicit differentiation: one CG solve with the same system) against
    autograd through the per-token direct solve, float64, for q, k, v, both gates and λ: to
    1e-8."""
    q, k, v, gen = inputs(n=70, kv=2)
    variant = build(kv=2, chunk_size=16)
    gates = gates_for(variant, 70, 2, gen)
    leaves = [q, k, v, gates["gamma"], gates["beta"]]
    for x in leaves:
        x.requires_grad_(True)
    weight = torch.randn(2, 4, 70, 8, generator=gen, dtype=torch.float64)
    params = [*leaves, variant.lambda_params]
    grads = [
        torch.autograd.grad((out * weight).sum(), params)
        for out in (
            variant(q, k, v, causal=True, gates=gates),
            reference(variant, q, k, v, gates, causal=True),
        )
    ]
    for ours, exact in zip(*grads, strict=True):
        torch.testing.assert_close(ours, exact, rtol=1e-8, atol=1e-8)


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
def test_declared_flops_are_the_counted_products(causal):
    """`forward_flops` against ``FlopCounterMode`` at 1024 positions, H = 4, D = 64 (no
    gradients: the implicit-gradient residual is one more pass): never above the products run
    and within 3 % of them (not counted: the Cholesky factorisation, D³ per head; the CG's dot
    products; the decay weights)."""
    variant = build(d=64).float()
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 4, 1024, 64, generator=gen) for _ in range(3))
    gates = random_gates(variant, 1, 1024, head_dim=64, kv_heads=4, generator=gen)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        variant(q, k, v, causal=causal, gates=gates)
    counted = counter.get_total_flops()
    declared = variant.forward_flops(1, 4, 1024, 1024, 64, 64, causal)
    assert declared <= counted * (1 + 1e-9)
    assert counted <= 1.03 * declared, f"runs {counted / declared:.3f}× what it declares"


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
def test_declared_backward_flops_are_the_counted_products(causal):
    """`backward_flops` against ``FlopCounterMode`` over the backward at 1024 positions, H = 4,
    D = 64: causal within 3 % (the implicit gradient: one CG solve and the residual pass, about
    half of twice the forward that the default would declare); non-causal within 5 %, as the
    registry's test (the backward of the Cholesky inverse runs D×D products, counted there and
    not declared: 4 % here)."""
    variant = build(d=64).float()
    _, counted = counted_flops(variant, causal, backward=True, d=64, seed=1)
    declared = variant.backward_flops(1, 4, 1024, 1024, 64, 64, causal)
    assert declared == pytest.approx(counted, rel=0.03 if causal else 0.05)


def test_error_in_each_dtype_is_within_the_declared_tolerance():
    """The declared `error_tolerance` holds where the throughput task judges it: 1024 causal
    positions, H = 4, D = 64, unit-normal inputs and gates, default parameters (λ = 1), against
    the float64 direct solve; the measured worst is printed."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        variant = build_variant("mesa", {}, VariantShape(4, 64, 4096)).double()
    gen = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(1, 4, 1024, 64, generator=gen, dtype=torch.float64) for _ in range(3))
    gates = random_gates(
        variant, 1, 1024, head_dim=64, kv_heads=4, dtype=torch.float64, generator=gen
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
        print(f"mesa {dtype}: {error:.2e}")
        assert out.dtype == dtype and low.within_tolerance(error, dtype)


# ---- theory: the mesa layer is ridge regression on the prefix (docs/theory-tests.md) ----------


def ridge_predictions(q, k, v, lam):
    """For every t: W_t = argmin_W Σ_{s ≤ t} ‖Wᵀk_s − v_s‖² + λ‖W‖²_F, read at q_t, computed as
    the least-squares solution of the augmented system [K_{≤t}; √λ I] W = [V_{≤t}; 0] (a QR
    route, not the normal equations the layer uses)."""
    b, h, n, d = q.shape
    out = torch.empty(b, h, n, v.shape[-1], dtype=torch.float64)
    root = math.sqrt(lam) * torch.eye(d, dtype=torch.float64).expand(b, h, d, d)
    for t in range(n):
        design = torch.cat([k[:, :, : t + 1], root], dim=2)
        target = torch.cat([v[:, :, : t + 1], v.new_zeros(b, h, d, v.shape[-1])], dim=2)
        w = torch.linalg.lstsq(design, target).solution  # (B, H, D, Dv)
        out[:, :, t] = (q[:, :, t, None, :] @ w)[:, :, 0]
    return out


def test_the_mesa_layer_is_the_ridge_prediction_from_the_prefix_and_a_perturbed_lambda_is_not():
    """Theory: with γ = β = 1 (raw gates 1e4: sigmoid = 1 in float64), Λ = λI (λ = 0.7) and no
    normalisation, the layer's output at t is the ridge regression of the values on the keys
    s ≤ t, applied to q_t: to 1e-9 (float64, 64 CG steps for D = 8). In-suite mutant: the layer
    with λ·1.01 differs from the ridge prediction by more than 1e-6, so it fails the check."""
    q, k, v, _ = inputs(n=90, d=8, dv=5)
    ones = {"gamma": torch.full((2, 4, 90, 1), 1e4, dtype=torch.float64)}
    ones["beta"] = ones["gamma"].clone()
    lam = 0.7
    expected = ridge_predictions(q, k, v, lam)

    def layer(lam_used):
        variant = build(d=8, normalise_qk=False, cg_steps=64)
        with torch.no_grad():  # softplus(p) + 0.25 = λ
            variant.lambda_params.fill_(math.log(math.expm1(lam_used - 0.25)))
        return variant(q, k, v, causal=True, gates=ones)

    torch.testing.assert_close(layer(lam), expected, rtol=1e-9, atol=1e-9)
    mutant = layer(lam * 1.01)
    assert not torch.allclose(mutant, expected, rtol=1e-9, atol=1e-9)
    assert (mutant - expected).abs().max() > 1e-6


@pytest.mark.parametrize("lambda_init", [0.25 + 1e-6, 1.0, 30.0, 720.0, 1e30])
def test_lambda_starts_at_lambda_init_for_every_value(lambda_init):
    """Λ = softplus(p) + λ_min starts at λ₀, also where e^(λ₀ − λ_min) overflows a float (from
    about 710: softplus⁻¹ written as log(expm1(y)) failed the job there) and where softplus⁻¹ of a
    tiny y is large and negative. Relative tolerance: float32's rounding of p, amplified by
    softplus's slope y/(λ₀) ≤ 1, a few ulps."""
    variant = build_variant("mesa", {"lambda_init": lambda_init}, VariantShape(2, 8, 64))
    lam = F.softplus(variant.lambda_params.double()) + variant.params.lambda_min
    assert torch.allclose(lam, torch.full_like(lam, lambda_init), rtol=1e-6, atol=0)


@pytest.mark.parametrize("lambda_init", [8.6e37, 1e38, 3.4e38, 1e39])
def test_a_lambda_init_whose_inverse_is_subnormal_is_refused(lambda_init):
    """From 1/float32.tiny up, a job that flushes denormals would read non-finite values (the
    solve's first step is 1/λ): such a value is refused before anything runs."""
    with pytest.raises(ValueError, match=r"is too large: .* give lambda_init below 8.51e\+37"):
        build_variant("mesa", {"lambda_init": lambda_init}, VariantShape(2, 8, 64))


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
def test_the_largest_lambda_init_accepted_gives_a_finite_output(causal):
    """Just under the bound, with denormals flushed to zero as in a job: finite outputs (the
    same inputs at 8.6e37 gave a non-finite causal read)."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 32, 16) for _ in range(3))
    variant = build_variant("mesa", {"lambda_init": 8.4e37}, VariantShape(2, 16, 32))
    was_flushing = bool((torch.tensor([1e-40]) * 1.0 == 0).all())  # torch has no getter
    flushing = torch.set_flush_denormal(True)
    try:
        with torch.no_grad():
            out = _call(variant, q, k, v, causal)
    finally:
        torch.set_flush_denormal(was_flushing)
    assert flushing and torch.isfinite(out).all()


def test_the_direct_and_the_conjugate_gradient_paths_have_the_same_gradients(monkeypatch):
    """Training takes the direct path at short lengths and CG at long ones: their gradients
    (CG's by implicit differentiation) agree in float64 to 1e-8 relative."""
    from attnbench.variants.recurrent import mesa

    grads = []
    for entries in (mesa.DIRECT_MAX_ENTRIES, 0):
        monkeypatch.setattr(mesa, "DIRECT_MAX_ENTRIES", entries)
        q, k, v, gen = inputs(kv=2)
        variant = build(kv=2)
        gates = gates_for(variant, 150, 2, gen)
        leaves = [q.requires_grad_(), k.requires_grad_(), v.requires_grad_(), *gates.values()]
        for t in gates.values():
            t.requires_grad_()
        out = variant(q, k, v, causal=True, gates=gates)
        grads.append(torch.autograd.grad(out.sin().sum(), [*leaves, *variant.parameters()]))
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-8 * float(b.abs().max()))


def test_declared_flops_of_the_direct_path_are_the_counted_products():
    """At 96 positions, H = 4, D = 16 (a training size) the causal forward is the direct solve:
    its declared products against ``FlopCounterMode``, within 3 % and never above (not counted:
    the Cholesky solves, O(N·D³) per head)."""
    variant = build(d=16).float()
    from attnbench.variants.recurrent import mesa

    assert mesa._solves_directly(variant.params, None, (1, 4, 1, 96, 16), 96)
    counted, _ = counted_flops(variant, True, backward=False, d=16, n=96, seed=1)
    declared = variant.forward_flops(1, 4, 96, 96, 16, 16, True)
    assert declared <= counted * (1 + 1e-9)
    assert counted <= 1.03 * declared, f"runs {counted / declared:.3f}× what it declares"
