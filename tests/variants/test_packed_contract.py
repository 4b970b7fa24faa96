"""The packed-sequence contract (``cu_seqlens``): the base class's paths and the contract check
that every registered variant meets, shown failing for a variant that leaks across documents."""

from __future__ import annotations

import pytest
import torch

from attnbench import AttentionVariant, UnsupportedError, VariantShape, build_variant
from attnbench.masks import document_bounds, document_pattern
from attnbench.testing import packed_error, random_qkv

SHAPE = VariantShape(n_heads=3, head_dim=8, max_len=256)


class _Softmax(AttentionVariant):
    """Plain causal softmax over whatever sequence it is given: correct alone, and leaking when
    it claims a one-pass packed form it does not have."""

    name = "planted_leak"
    family = "softmax"

    def forward(self, q, k, v, causal=False, cu_seqlens=None):
        scores = (q @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5
        if causal:
            n, m = scores.shape[-2:]
            scores = scores.masked_fill(torch.ones(n, m, dtype=torch.bool).triu(1), float("-inf"))
        return scores.softmax(-1) @ v


class _Leaky(_Softmax):
    packing = "native"  # claims to honour cu_seqlens, ignores it


class _Refusing(_Softmax):
    packing = "none"


def test_a_variant_that_ignores_document_boundaries_fails_the_contract_check():
    """The contract suite's measure of a leak: zero for the base class's split path, of order
    one for a variant that attends across documents. Its limit (1e-9 in float64) sits between."""
    assert packed_error(_Softmax(None, SHAPE).double()) < 1e-12
    assert packed_error(_Leaky(None, SHAPE).double()) > 1e-2
    assert packed_error(_Leaky(None, SHAPE).double(), causal=False) > 1e-2


def test_a_variant_that_cannot_pack_refuses_in_one_sentence():
    with pytest.raises(UnsupportedError, match="cannot honour document boundaries"):
        packed_error(_Refusing(None, SHAPE))


def test_split_packing_equals_a_dense_document_mask():
    """The split path against the definition: softmax under the block-diagonal document mask
    (float64, 1e-12)."""
    q, k, v = random_qkv(b=1, n=50, dtype=torch.float64)
    bounds = [0, 7, 31, 50]
    for causal in (False, True):
        out = build_variant("softmax", shape=SHAPE).double()(q, k, v, causal, cu_seqlens=bounds)
        scores = (q @ k.transpose(-1, -2)) / 8**0.5
        allowed = document_pattern(bounds, 50, causal)
        expected = scores.masked_fill(~allowed, float("-inf")).softmax(-1) @ v
        torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "bounds, fix",
    [
        ([0, 10, 5, 20], "rise strictly"),
        ([1, 20], "from 0"),
        ([0, 19], "packed length 20"),
        ([0], "rise strictly"),
        (torch.tensor([[0, 20]]), "1-D integer tensor"),
        (torch.tensor([0.0, 20.0]), "1-D integer tensor"),
        ([0, 10.5, 20], "whole cumulative document lengths"),  # was cut to 10, silently
        ("0,20", "whole cumulative document lengths"),  # was int()'s own message
        ([0, True, 20], "whole cumulative document lengths"),
    ],
)
def test_bad_document_boundaries_are_refused_in_one_sentence(bounds, fix):
    with pytest.raises(ValueError, match=fix):
        document_bounds(bounds, 20)


def test_packing_needs_one_sequence_of_keys():
    q, k, v = random_qkv(b=1, n=10, m=12)
    with pytest.raises(ValueError, match="as many keys as queries"):
        build_variant("softmax", shape=SHAPE)(q, k, v, cu_seqlens=[0, 10])
