from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import random_qkv
from references import naive_softmax

from attnbench.harness.variant_api import VariantShape, build_variant


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("temperature", [0.5, 1.0, 3.0])
def test_equals_naive_softmax(causal, temperature):
    q, k, v = random_qkv(b=2, h=4, n=37, d=16, dv=12)
    out = build_variant("softmax", {"temperature": temperature})(q, k, v, causal=causal)
    torch.testing.assert_close(
        out, naive_softmax(q, k, v, causal, temperature), rtol=1e-5, atol=1e-5
    )


def test_learned_temperature_is_per_head_and_starts_at_the_given_value():
    variant = build_variant(
        "softmax",
        {"temperature": 2.0, "learn_temperature": True},
        VariantShape(n_heads=3, head_dim=8, max_len=64),
    )
    torch.testing.assert_close(variant.temperatures(), torch.full((3,), 2.0))
    with torch.no_grad():
        variant.theta.copy_(torch.tensor([-1.0, 0.0, 2.0]))
    q, k, v = random_qkv(b=1, h=3, n=10, d=8)
    out = variant(q, k, v, causal=True)
    eps = F.softplus(torch.tensor([-1.0, 0.0, 2.0]))
    for h in range(3):
        ref = naive_softmax(q[:, h : h + 1], k[:, h : h + 1], v[:, h : h + 1], True, float(eps[h]))
        torch.testing.assert_close(out[:, h : h + 1], ref, rtol=1e-5, atol=1e-5)


def test_temperature_limits():
    q, k, v = random_qkv(b=1, h=1, n=9, d=8)
    cold = build_variant("softmax", {"temperature": 1e-4}).attention_weights(q, k)
    assert torch.allclose(cold.max(-1).values, torch.ones(1))  # one-hot rows: argmax
    hot = build_variant("softmax", {"temperature": 1e6}).attention_weights(q, k)
    torch.testing.assert_close(hot, torch.full_like(hot, 1 / 9), rtol=1e-4, atol=1e-5)


def test_rejects_non_positive_temperature():
    with pytest.raises(ValueError, match="temperature must be > 0"):
        build_variant("softmax", {"temperature": 0.0})
