"""The contract every registered variant meets. Parametrized over the registry: a new variant is
tested here the moment it is registered."""

from __future__ import annotations

import pytest
import torch
from conftest import random_qkv

from attnbench.harness.variant_api import VARIANTS, UnsupportedError, VariantShape, build_variant

NAMES = VARIANTS.names()
H, D = 3, 8


def make(name, max_len=2048, **params):
    return build_variant(name, params, VariantShape(n_heads=H, head_dim=D, max_len=max_len))


@pytest.mark.parametrize("name", NAMES)
def test_declares_its_contract(name):
    cls = VARIANTS.get(name)
    assert cls.family and cls.cost in ("n²", "n·w", "n")
    assert isinstance(cls.supports_causal, bool)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", NAMES)
def test_shapes_and_value_dim(name, causal):
    variant = make(name)
    if causal and not variant.supports_causal:
        pytest.skip("non-causal variant")
    q, k, v = random_qkv(b=2, h=H, n=17, d=D, dv=5)
    out = variant(q, k, v, causal=causal)
    assert out.shape == (2, H, 17, 5) and out.dtype == torch.float32


@pytest.mark.parametrize("name", NAMES)
def test_cross_attention_lengths(name):
    variant = make(name)
    q, k, v = random_qkv(b=1, h=H, n=7, m=19, d=D)
    if variant.requires_equal_lengths:  # positional patterns refuse, with a reason
        with pytest.raises(UnsupportedError, match="needs as many keys as queries"):
            variant(q, k, v)
        return
    assert variant(q, k, v).shape == (1, H, 7, D)


@pytest.mark.parametrize("name", NAMES)
def test_batch_independence(name):
    variant = make(name)
    q, k, v = random_qkv(b=3, h=H, n=20, d=D)
    causal = variant.supports_causal
    full = variant(q, k, v, causal=causal)
    for b in range(3):
        alone = variant(q[b : b + 1], k[b : b + 1], v[b : b + 1], causal=causal)
        torch.testing.assert_close(full[b : b + 1], alone, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n", [1, 2, 63, 2048])
@pytest.mark.parametrize("name", NAMES)
def test_finite_for_random_inputs(name, n):
    variant = make(name)
    q, k, v = random_qkv(b=1, h=H, n=n, d=D, seed=n)
    for causal in [False, True] if variant.supports_causal else [False]:
        assert torch.isfinite(variant(q, k, v, causal=causal)).all()


@pytest.mark.parametrize("name", NAMES)
def test_gradients_flow_to_inputs_and_parameters(name):
    variant = make(name)
    # long enough for block patterns to have several blocks, so their parameters matter
    q, k, v = (t.requires_grad_(True) for t in random_qkv(b=1, h=H, n=200, d=D))
    variant(q, k, v, causal=variant.supports_causal).square().sum().backward()
    for t in (q, k, v, *variant.parameters()):
        assert t.grad is not None and torch.isfinite(t.grad).all() and t.grad.abs().sum() > 0


@pytest.mark.parametrize("name", NAMES)
def test_causality_is_a_leak_test(name):
    """Output at t must not change when any position > t changes (not a mask inspection)."""
    variant = make(name)
    q, k, v = random_qkv(b=1, h=H, n=24, d=D, seed=3)
    if not variant.supports_causal:
        with pytest.raises(UnsupportedError):
            variant(q, k, v, causal=True)
        return
    base = variant(q, k, v, causal=True)
    for t in (0, 5, 11, 22):
        q2, k2, v2 = q.clone(), k.clone(), v.clone()
        g = torch.Generator().manual_seed(t)
        for x in (q2, k2, v2):
            x[:, :, t + 1 :] = 10 * torch.randn(x[:, :, t + 1 :].shape, generator=g)
        out = variant(q2, k2, v2, causal=True)
        torch.testing.assert_close(out[:, :, : t + 1], base[:, :, : t + 1], rtol=1e-5, atol=1e-6)
        # and the future did change (the test can fail: the perturbation reaches the output)
        assert not torch.allclose(out[:, :, t + 1 :], base[:, :, t + 1 :])


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", NAMES)
def test_attention_weights_reproduce_forward(name, causal):
    variant = make(name)
    if causal and not variant.supports_causal:
        pytest.skip("non-causal variant")
    q, k, v = random_qkv(b=2, h=H, n=33, d=D)
    try:
        weights = variant.attention_weights(q, k, causal=causal)
    except NotImplementedError:
        pytest.skip(f"{name} cannot materialise its weights")
    assert weights.shape == (2, H, 33, 33)
    torch.testing.assert_close(weights @ v, variant(q, k, v, causal=causal), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", NAMES)
def test_bfloat16_runs(name):
    variant = make(name).to(torch.bfloat16)
    q, k, v = random_qkv(b=1, h=H, n=32, d=D, dtype=torch.bfloat16)
    out = variant(q, k, v, causal=variant.supports_causal)
    assert out.dtype == torch.bfloat16 and torch.isfinite(out).all()
    ref = make(name)(*(t.float() for t in (q, k, v)), causal=variant.supports_causal)
    # bf16 has an 8-bit mantissa: agreement to a few percent of the output scale
    assert (out.float() - ref).abs().max() <= 0.05 * ref.abs().max() + 0.05
