"""The banded engine (`variants.kernels.banded`) against dense masked softmax, forward and
gradients."""

from __future__ import annotations

import math

import pytest
import torch
from references import dense_masked_softmax

from attnbench.variants.kernels import banded
from attnbench.variants.kernels.banded import banded_attention


def band(n: int, before: int, after: int) -> torch.Tensor:
    i, j = torch.arange(n).view(-1, 1), torch.arange(n).view(1, -1)
    return (j >= i - before) & (j <= i + after)


CASES = [
    # (n, before, after, block): body with head and tail, no body (n too short), a band wider
    # than the sequence, odd sizes, a band of the query alone
    (97, 15, 0, 8),
    (97, 15, 15, 8),
    (64, 31, 0, 32),
    (20, 40, 0, 8),
    (20, 3, 40, 4),
    (131, 0, 0, 16),
    (130, 9, 4, 0),
]


@pytest.mark.parametrize("n,before,after,block", CASES)
def test_banded_matches_dense_masked_softmax(n, before, after, block):
    gen = torch.Generator().manual_seed(n + before + after)
    q, k, v = (torch.randn(2, 3, n, 16, generator=gen, dtype=torch.float64) for _ in range(3))
    scale = 1 / math.sqrt(16)
    out = banded_attention(q, k, v, before, after, scale, block=block)
    expected = dense_masked_softmax(q, k, v, band(n, before, after))
    torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("n,before,after,block", CASES[:3])
def test_banded_gradients_match_dense(n, before, after, block):
    gen = torch.Generator().manual_seed(1)
    leaves = [torch.randn(1, 2, n, 8, generator=gen, dtype=torch.float64) for _ in range(3)]
    grad_out = torch.randn(1, 2, n, 8, generator=gen, dtype=torch.float64)

    def grads(fn):
        xs = [x.clone().requires_grad_(True) for x in leaves]
        fn(*xs).backward(grad_out)
        return [x.grad for x in xs]

    ours = grads(lambda q, k, v: banded_attention(q, k, v, before, after, 8**-0.5, block=block))
    dense = grads(lambda q, k, v: dense_masked_softmax(q, k, v, band(n, before, after)))
    for a, b in zip(ours, dense, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)


def test_banded_builds_its_masks_once_per_shape():
    """A second call at the same length rebuilds nothing that depends only on the pattern."""
    q = torch.randn(1, 2, 200, 8)
    banded_attention(q, q, q, 20, 0, 1.0, block=16)
    misses = banded._band_mask.cache_info().misses
    banded_attention(q, q, q, 20, 0, 1.0, block=16)
    assert banded._band_mask.cache_info().misses == misses
