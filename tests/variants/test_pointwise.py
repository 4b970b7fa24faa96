"""relu2, sigmoid and identity against their dense formulas."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import random_qkv
from scipy import stats

from attnbench.variant import build_variant


def _scores(q, k):
    return q.double() @ k.double().transpose(-2, -1) / math.sqrt(q.shape[-1])


def _causal(n, m):
    return torch.ones(n, m, dtype=torch.bool).tril()


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("bias", [0.0, -0.5])
def test_relu2(bias, causal):
    q, k, v = random_qkv(b=2, h=2, n=33, d=16)
    w = torch.relu(_scores(q, k) + bias) ** 2 / 33
    if causal:
        w = w * _causal(33, 33)
    out = build_variant("relu2", {"bias": bias})(q, k, v, causal=causal)
    torch.testing.assert_close(out, (w @ v.double()).float(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("bias", [None, 1.0])
def test_sigmoid(bias, causal):
    q, k, v = random_qkv(b=2, h=2, n=29, d=16)
    b = -math.log(29) if bias is None else bias
    w = torch.sigmoid(_scores(q, k) + b)
    if causal:
        w = w * _causal(29, 29)
    out = build_variant("sigmoid", {"bias": bias})(q, k, v, causal=causal)
    torch.testing.assert_close(out, (w @ v.double()).float(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n, m", [(37, 37), (20, 45)])
def test_identity_is_unnormalised_qk_v_over_n(n, m, causal):
    if causal and n != m:
        pytest.skip("causal needs N = M")
    q, k, v = random_qkv(b=2, h=2, n=n, m=m, d=16, dv=8)
    w = _scores(q, k) / m
    if causal:
        w = w * _causal(n, m)
    out = build_variant("identity", {"chunk_size": 8})(q, k, v, causal=causal)
    torch.testing.assert_close(out, (w @ v.double()).float(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bias", [-1.0, 0.0, 0.5])
def test_relu2_weights_vanish_exactly_where_s_plus_b_is_not_positive(bias):
    """relu(s + b)² is exactly 0 iff s + b ≤ 0, so with Gaussian logits N(0, 1) a weight
    vanishes with probability Φ(−b), and a whole row of n keys with Φ(−b)^n ≤ 2^−n for b ≥ 0:
    rows can only empty out with a negative bias (theory.md §2). 4000 independent query–key
    pairs (batch dimension): binomial SD ≤ 0.008, tolerance 4 SDs."""
    b, d = 4000, 16
    g = torch.Generator().manual_seed(1)
    q = torch.randn(b, 1, 1, d, generator=g, dtype=torch.float64)
    q = q / q.norm(dim=-1, keepdim=True) * math.sqrt(d)  # s = q·k/√d ~ N(0, 1)
    k = torch.randn(b, 1, 1, d, generator=g, dtype=torch.float64)
    w = build_variant("relu2", {"bias": bias}).attention_weights(q, k)
    s = _scores(q, k)
    assert torch.equal(w == 0, s + bias <= 0)
    p = stats.norm.cdf(-bias)
    sd = math.sqrt(p * (1 - p) / b)
    assert float((w == 0).double().mean()) == pytest.approx(p, abs=4 * sd)


@pytest.mark.parametrize("name", ["relu2", "sigmoid"])
@pytest.mark.parametrize("causal, n, m", [(True, 61, 61), (False, 61, 61), (False, 23, 50)])
@pytest.mark.parametrize("tiles", [(8, 16), (16, 8), (7, 5)])
def test_pointwise_tiles_match_dense_forward_and_gradients(name, causal, n, m, tiles):
    """Small tiles so that every case crosses many tile edges and (causal) the diagonal."""
    from attnbench.variants.pointwise import pointwise_attention

    variant = build_variant(name, {})
    gen = torch.Generator().manual_seed(n * m)
    q, k, v = (torch.randn(2, 2, size, 8, generator=gen, dtype=torch.float64) for size in (n, m, m))
    mask = _causal(n, m) if causal else torch.ones(n, m, dtype=torch.bool)
    expected = (variant.weight(_scores(q, k), m) * mask) @ v

    def run(*xs):
        return pointwise_attention(
            *xs, lambda s: variant.weight(s, m), lambda s: variant.weight_(s, m), causal, tiles
        )

    with torch.no_grad():  # the in-place kernel
        torch.testing.assert_close(run(q, k, v), expected, rtol=1e-10, atol=1e-12)
    leaves = [x.clone().requires_grad_(True) for x in (q, k, v)]
    out = run(*leaves)  # the autograd kernel
    torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-12)
    grad = torch.randn_like(out)
    ours = torch.autograd.grad(out, leaves, grad)
    dense_leaves = [x.clone().requires_grad_(True) for x in (q, k, v)]
    dq, dk, dv = dense_leaves
    dense = (variant.weight(dq @ dk.transpose(-2, -1) / math.sqrt(8), m) * mask) @ dv
    for a, b in zip(ours, torch.autograd.grad(dense, dense_leaves, grad), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize(
    ("name", "params"),
    [("relu2", {}), ("relu2", {"bias": -0.3}), ("sigmoid", {}), ("sigmoid", {"bias": 0.7})],
)
@pytest.mark.parametrize("causal", [True, False])
def test_forward_with_the_affine_folded_into_the_gemm_equals_the_definition(name, params, causal):
    """`forward` folds a scale into Q and a shift into the score GEMM (`affine`: relu²'s 1/√M
    and b/√M, sigmoid's b) and applies `fused` after: the same weights as `weight` on q·k/√d,
    in place (no grad) and through autograd."""
    variant = build_variant(name, params)
    gen = torch.Generator().manual_seed(len(name) + causal)
    q, k, v = (torch.randn(1, 2, 300, 8, generator=gen, dtype=torch.float64) for _ in range(3))
    mask = _causal(300, 300) if causal else torch.ones(300, 300, dtype=torch.bool)
    expected = (variant.weight(_scores(q, k), 300) * mask) @ v
    with torch.no_grad():
        torch.testing.assert_close(
            variant(q, k, v, causal=causal), expected, rtol=1e-10, atol=1e-12
        )
    leaves = [x.clone().requires_grad_(True) for x in (q, k, v)]
    torch.testing.assert_close(variant(*leaves, causal=causal), expected, rtol=1e-10, atol=1e-12)
