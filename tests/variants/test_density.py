"""`AttentionVariant.density`: exact from the pattern, 1 for dense variants, and the sparse
defaults (fractions of the sequence) at density <= 0.5 at every length a task uses.

The reference count is what the variant's own `attention_weights` keeps: the pairs with a nonzero
weight, on float64 inputs small enough that no kept weight underflows. It covers any registered
sparse variant that can materialise its weights, with no per-variant code.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from conftest import random_qkv

from attnbench.variant import (
    VARIANTS,
    VariantShape,
    allowed_pairs,
    build_variant,
)

SHAPE = VariantShape(n_heads=3, head_dim=8, max_len=512)


def _sparse(available_only: bool = True) -> list[str]:
    """Every registered variant of family "sparse" (peers included) usable on this CPU."""
    return [
        name
        for name in VARIANTS.names()
        if VARIANTS.get(name).family == "sparse"
        and not (available_only and VARIANTS.get(name).unavailable("cpu"))
    ]


def counted_density(variant, n: int, causal: bool) -> float:
    """Pairs with a nonzero weight in ``attention_weights`` over the allowed pairs, averaged
    over the heads (and the batch)."""
    q, k, _ = random_qkv(b=1, h=SHAPE.n_heads, n=n, d=SHAPE.head_dim, seed=n, dtype=torch.float64)
    with torch.no_grad():
        weights = variant.double().attention_weights(0.1 * q, 0.1 * k, causal=causal)
    return (
        float((weights > 0).sum())
        / weights.shape[0]
        / weights.shape[1]
        / (allowed_pairs(n, n, causal))
    )


# (variant, params): absolute sizes (as the papers give them) and fractions, with lengths that
# are and are not multiples of the blocks
CASES = [
    ("window", {"window": 1}),
    ("window", {"window": 7}),
    ("window", {"window": 256}),
    ("window", {"window": 0.2}),
    ("window", {"window": 0.5}),
    ("strided", {"local": 4, "stride": 5}),
    ("strided", {"local": 0.1, "stride": 1 / 3}),
    ("strided", {"local": 3, "stride": 0.25}),
    ("bigbird", {"block": 4}),
    ("bigbird", {"block": 8, "n_random": 2, "n_global": 2}),
    ("bigbird", {"block": 1 / 32}),
    ("bigbird", {"block": 0.1, "window_blocks": 2}),
    ("learned_pattern", {"block": 4}),
    ("learned_pattern", {"block": 5, "keep": 2}),
    ("learned_pattern", {"block": 1 / 32}),
    ("learned_pattern", {"block": 0.15, "keep": 3}),
    ("topk", {"k": 1}),
    ("topk", {"k": 5}),
    ("topk", {"k": 0.2}),
]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("n", [1, 8, 13, 37, 64, 100])
@pytest.mark.parametrize("name, params", CASES, ids=lambda c: str(c))
def test_density_is_exact_from_the_pattern(name, params, n, causal):
    variant = build_variant(name, params, SHAPE)
    assert variant.density(n, n, causal) == pytest.approx(counted_density(variant, n, causal))


def test_learned_pattern_density_follows_the_trained_selection():
    """Per head: a head whose logits favour a far (partial) block scores fewer pairs; the
    density is the mean over heads of what each selects now."""
    variant = build_variant("learned_pattern", {"block": 4, "keep": 2}, SHAPE)
    before = variant.density(10, 10, False)  # blocks of 4, 4, 2: each picks its neighbour
    with torch.no_grad():
        variant.pattern_logits[0, 0, 2] = 10.0  # head 0, block 0 now picks the 2-token block
    assert variant.density(10, 10, False) < before
    assert variant.density(10, 10, False) == pytest.approx(counted_density(variant, 10, False))


@pytest.mark.parametrize("name", sorted(set(VARIANTS.names()) - set(_sparse(False))))
def test_every_other_variant_scores_every_allowed_pair(name):
    """Dense and linear-cost variants: density 1 (their weights may vanish, as relu2's do, but
    every pair is scored)."""
    cls = VARIANTS.get(name)
    assert cls.scored_pairs is VARIANTS.get("softmax").scored_pairs or cls.family == "sparse"
    variant = build_variant(name, {}, SHAPE) if not cls.unavailable("cpu") else None
    if variant is not None:
        assert variant.density(37, 37, True) == variant.density(20, 20, False) == 1.0


def test_allowed_pairs_follow_the_causal_convention():
    """Top-left aligned j <= i: a query sees min(i + 1, m) keys."""
    for n, m in [(5, 5), (5, 3), (3, 5), (1, 1)]:
        expected = sum(min(i + 1, m) for i in range(n))
        assert allowed_pairs(n, m, True) == expected
        assert allowed_pairs(n, m, False) == n * m


LENGTHS = [*range(8, 300), 333, 511, 1000, 1025, 4097, 10_000, 65_537, 100_000]
# below these lengths a default pattern's fixed part (bigbird: its neighbour, global and random
# blocks of one token each; learned_pattern, causal: its 4 kept blocks of one token) is more than
# half the keys, whatever the block; every quality task attends over more (README)
FROM = {("bigbird", False): 11, ("bigbird", True): 14, ("learned_pattern", True): 14}


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("name", _sparse())
def test_sparse_defaults_are_at_most_half_dense_at_every_length(name, causal):
    variant = build_variant(name, {}, VariantShape(1, 8, 100_000))
    start = FROM.get((name, causal), 8)
    worst = max((variant.density(n, n, causal), n) for n in LENGTHS if n >= start)
    assert worst[0] <= 0.5, f"{name} at n={worst[1]}: density {worst[0]:.3f}"


@pytest.mark.parametrize(
    "name, params, at_64",
    [
        ("window", {"window": 256}, 1.0),
        ("strided", {"local": 64, "stride": 64}, 1.0),
        ("bigbird", {"block": 64, "n_random": 2}, 1.0),
        ("learned_pattern", {"block": 64}, 1.0),
        ("topk", {"k": 32}, (32 * 33 / 2 + 32 * 32) / (64 * 65 / 2)),
    ],
)
def test_absolute_sizes_work_as_before(name, params, at_64):
    """A value >= 1 is a count of positions: at 64 tokens the papers' sizes cover every pair
    (density 1, the problem the fractions fix; topk keeps 32 keys), at 4096 they are sparse."""
    variant = build_variant(name, params, VariantShape(1, 8, 4096))
    assert variant.density(64, 64, True) == pytest.approx(at_64)
    assert variant.density(4096, 4096, False) < 0.25


def test_window_density_in_closed_form():
    """Window w = ⌈f·n⌉ keeps 2w − 1 keys a row less the w(w − 1) cut at the ends: 2f − f²."""
    variant = build_variant("window", {"window": 0.2}, SHAPE)
    n = 1000
    w = math.ceil(0.2 * n)
    assert variant.density(n, n, False) == (n * (2 * w - 1) - w * (w - 1)) / n**2
    assert variant.density(n, n, True) == pytest.approx(
        (w * (w + 1) / 2 + (n - w) * w) / (n * (n + 1) / 2)
    )
    assert variant.density(n, n, False) == pytest.approx(2 * 0.2 - 0.2**2, abs=2e-3)


@pytest.mark.parametrize("value", [0, -1, 1.5, float("nan"), 256.5])
@pytest.mark.parametrize("name, key", [("window", "window"), ("bigbird", "block"), ("topk", "k")])
def test_sizes_that_are_neither_fraction_nor_count_are_refused(name, key, value):
    with pytest.raises(ValueError, match=f"{key} must be a fraction of the sequence in"):
        build_variant(name, {key: value}, SHAPE)


@pytest.mark.parametrize("value, n, expected", [(0.2, 10, 2), (0.2, 11, 3), (0.01, 8, 1)])
def test_a_fraction_rounds_up_to_at_least_one(value, n, expected):
    variant = build_variant("window", {"window": value}, SHAPE)
    assert variant.size_at("window", n) == expected
    assert build_variant("window", {"window": 256.0}, SHAPE).size_at("window", n) == 256


def test_relative_learned_pattern_table_fits_every_length_up_to_max_len():
    """⌈n / ⌈f·n⌉⌉ blocks never exceed the table, even where max_len itself has fewer."""
    for max_len in (17, 40, 100):
        variant = build_variant("learned_pattern", {"block": 1 / 16}, VariantShape(1, 8, max_len))
        table = variant.pattern_logits.shape[-1]
        assert table == max(math.ceil(n / variant.block(n)) for n in range(1, max_len + 1))
        q, k, v = random_qkv(b=1, h=1, n=16, d=8)
        assert torch.isfinite(variant(q, k, v, causal=True)).all()


def test_forward_flops_count_the_scored_pairs():
    """For the n·w patterns the FLOPs are the scored pairs' (4·D per pair here)."""
    for name, params in CASES:
        if VARIANTS.get(name).cost != "n·w":
            continue
        variant = build_variant(name, params, SHAPE)
        for causal in (False, True):
            pairs = variant.scored_pairs(100, 100, causal)
            assert variant.forward_flops(1, 1, 100, 100, 8, 8, causal) == 2.0 * pairs * 16
    assert np.isclose(build_variant("softmax").forward_flops(1, 1, 10, 10, 8, 8, False), 3200)
