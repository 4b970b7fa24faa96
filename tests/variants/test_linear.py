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


@pytest.mark.parametrize("name", ["linear", "identity", "decay"])
def test_the_chunk_length_is_chosen_on_the_machine_and_named(name, tmp_path, monkeypatch):
    """chunk_size 0 (the default): a causal call large enough to tune runs the machine's choice
    among `prefix_sums.CHUNKS`, says which (the record's ``fwd_tuned``) and remembers it for its
    FLOPs and its incremental form; the output is the same whatever the chunk (float32, to the
    declared tolerance); an explicit chunk is honoured, a negative one refused."""
    from attnbench import VariantShape, build_variant
    from attnbench.toolkit import kernel_path
    from attnbench.variants.kernels import autotune, prefix_sums

    monkeypatch.setenv(autotune.CACHE_ENV, str(tmp_path))
    autotune.forget()
    n, d = 4096, 16
    variant = build_variant(name, {}, VariantShape(4, d, n))
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 4, n, d, generator=gen) for _ in range(3))
    with torch.no_grad(), kernel_path.recording() as ran:
        out = variant(q, k, v, causal=True)
    (how,) = ran.tuned.values()
    chosen = variant.last_chunk
    assert how == f"chunk={chosen} (tuned)" and chosen in prefix_sums.CHUNKS
    fixed = build_variant(name, {"chunk_size": 16}, VariantShape(4, d, n))
    with torch.no_grad():
        other = fixed(q, k, v, causal=True)
    assert fixed.last_chunk == 16
    flops = variant.forward_flops(1, 4, n, n, d, d, True)
    assert (fixed.forward_flops(1, 4, n, n, d, d, True) < flops) == (chosen > 16)
    scale = max(1.0, float(other.abs().max()))
    assert float((out - other).abs().max()) <= variant.error_tolerance["float32"] * scale
    with pytest.raises(ValueError, match="chunk_size must be >= 1, or 0"):
        build_variant(name, {"chunk_size": -1}, VariantShape(4, d, n))
    autotune.forget()
