"""relu2, sigmoid and identity against their dense formulas."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import random_qkv

from attnbench.harness.variant_api import build_variant


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
