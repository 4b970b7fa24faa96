"""Tests of the example plugin: attnbench's shipped contract suite, plus the plugin's own maths.

Run from this folder with the plugin installed: ``pip install -e '.[test]' && python -m pytest``.
Only the public API is used (`attnbench`, `attnbench.testing`); the variant is found through the
plugin's entry point, as the benchmark finds it.
"""

from __future__ import annotations

import pytest
import torch

from attnbench import VariantShape, build_variant, load_plugins
from attnbench.testing import VariantContractTests, random_qkv


class TestCosineSoftmax(VariantContractTests):
    """Shapes, causality, gradients, bfloat16, …: what every attnbench variant must meet."""

    variant = "cosine_softmax"


def reference_cosine_softmax(q, k, v, scale, causal):
    """softmax(scale·cos(q_i, k_j)) · V, one query at a time in float64, written out.

    Slow and plain on purpose: cosine by its definition (dot product over the product of
    norms), the causal mask as "key j is visible to query i iff j ≤ i", and the softmax as
    exponentials over their sum, so it shares no code or shortcut with the variant.
    """
    q, k, v = q.double(), k.double(), v.double()
    b, h, n, _ = q.shape
    m = k.shape[-2]
    out = torch.zeros(b, h, n, v.shape[-1], dtype=torch.float64)
    for bi in range(b):
        for hi in range(h):
            for i in range(n):
                visible = [j for j in range(m) if not causal or j <= i]
                logits = torch.stack(
                    [
                        scale
                        * (q[bi, hi, i] @ k[bi, hi, j])
                        / (q[bi, hi, i].norm() * k[bi, hi, j].norm())
                        for j in visible
                    ]
                )
                weights = torch.exp(logits - logits.max())
                weights = weights / weights.sum()
                for w, j in zip(weights, visible, strict=True):
                    out[bi, hi, i] += w * v[bi, hi, j]
    return out


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_matches_a_slow_reference(causal):
    """The variant computes softmax(τ·cos)·V, with τ = ``scale`` honoured and the causal mask
    top-left aligned; non-causal also with more keys than queries (cross-attention).

    Two scales: the default 10 (peaked weights) and 0.5 (nearly uniform weights), so a
    variant that ignored ``scale`` or normalised only one of q and k would fail at one of them.
    Tolerance 1e-5: float32 against a float64 reference on short rows.
    """
    load_plugins()
    m = 9 if causal else 13  # causal: N = M, the usual autoregressive mask
    q, k, v = random_qkv(b=2, h=3, n=9, m=m, d=8, dv=5, seed=1)
    for scale in (10.0, 0.5):
        variant = build_variant(
            "cosine_softmax", {"scale": scale}, VariantShape(n_heads=3, head_dim=8, max_len=16)
        )
        expected = reference_cosine_softmax(q, k, v, scale, causal)
        torch.testing.assert_close(
            variant(q, k, v, causal=causal).double(), expected, rtol=1e-5, atol=1e-5
        )
