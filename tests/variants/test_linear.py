from __future__ import annotations

import pytest
import torch
from conftest import random_qkv
from references import linear_dense, linear_recurrence

from attnbench.variant import build_variant
from attnbench.variants.linear import FEATURE_MAPS

# φ = identity lets the normaliser φ(q)·Σφ(k) come close to 0, where any two correct float32
# summation orders disagree by far more than 1e-5: that map is compared in float64.
DTYPE = {"elu1": torch.float32, "relu": torch.float32, "identity": torch.float64}
TOL = {torch.float32: 1e-5, torch.float64: 1e-9}


@pytest.mark.parametrize("feature_map", sorted(FEATURE_MAPS))
def test_non_causal_equals_dense_reference(feature_map):
    variant = build_variant("linear", {"feature_map": feature_map})
    dtype = DTYPE[feature_map]
    q, k, v = random_qkv(b=2, h=3, n=29, m=41, d=16, dv=8, dtype=dtype)
    phi = FEATURE_MAPS[feature_map]
    ref = linear_dense(phi(q), phi(k), v, variant.params.eps)
    torch.testing.assert_close(variant(q, k, v), ref, rtol=TOL[dtype], atol=TOL[dtype])


# (37, 2) and (300, 8) span several blocks of BLOCK_CHUNKS chunks, the last one partial
@pytest.mark.parametrize(
    "n, chunk", [(1, 64), (37, 8), (64, 16), (50, 64), (130, 32), (37, 2), (300, 8)]
)
@pytest.mark.parametrize("feature_map", sorted(FEATURE_MAPS))
def test_causal_chunked_equals_explicit_recurrence(feature_map, n, chunk):
    variant = build_variant("linear", {"feature_map": feature_map, "chunk_size": chunk})
    dtype = DTYPE[feature_map]
    q, k, v = random_qkv(b=2, h=2, n=n, d=16, dv=8, seed=n, dtype=dtype)
    phi = FEATURE_MAPS[feature_map]
    ref = linear_recurrence(phi(q), phi(k), v, variant.params.eps)
    out = variant(q, k, v, causal=True)
    torch.testing.assert_close(out, ref, rtol=TOL[dtype], atol=TOL[dtype])


def test_chunk_size_does_not_change_the_result():
    q, k, v = random_qkv(b=1, h=2, n=100, d=8)
    outs = [
        build_variant("linear", {"chunk_size": c})(q, k, v, causal=True) for c in (1, 7, 32, 128)
    ]
    for out in outs[1:]:
        torch.testing.assert_close(out, outs[0], rtol=1e-5, atol=1e-5)


def test_unknown_feature_map_is_refused_with_the_valid_ones():
    with pytest.raises(
        ValueError, match="feature_map 'elu' is not known; valid: elu1, identity, relu"
    ):
        build_variant("linear", {"feature_map": "elu"})


def test_a_negative_eps_is_refused():
    """eps is added to the normaliser; a negative one can cancel it (a division by about 0)."""
    with pytest.raises(ValueError, match=r"linear eps must be >= 0, got -0.1"):
        build_variant("linear", {"eps": -0.1})
