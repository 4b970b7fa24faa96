"""window, strided, bigbird = dense softmax with the same boolean pattern applied as −∞.

The patterns here are written out independently (plain loops over positions), not taken from the
variants, so a wrong pattern in a variant fails these tests.
"""

from __future__ import annotations

import math

import pytest
import torch
from conftest import random_qkv
from references import dense_masked_softmax

from attnbench.variant import build_variant


def _pattern(n, rule):
    return torch.tensor([[rule(i, j) for j in range(n)] for i in range(n)])


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(
    "n, w, block", [(50, 1, 0), (50, 7, 4), (100, 32, 0), (64, 16, 16), (40, 200, 0)]
)
def test_window(n, w, block, causal, tile_kernel_or_not):
    q, k, v = random_qkv(b=2, h=2, n=n, d=16, seed=n + w)
    if causal:
        pattern = _pattern(n, lambda i, j: i - w < j <= i)
    else:
        pattern = _pattern(n, lambda i, j: abs(i - j) < w)  # w > n: clamped to full attention
    out = build_variant("window", {"window": w, "block": block})(q, k, v, causal=causal)
    torch.testing.assert_close(out, dense_masked_softmax(q, k, v, pattern), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(
    "n, stride, local",
    # without autograd the fused CPU path: the residue classes (N a multiple of the stride or
    # padded to one: (100, 7, 3)) through the tile kernel's block op (causal) or a flash call,
    # or, with at most SHIFTED_MAX_OFFSETS dilated keys a side ((33, 16, 3), (50, 12, 5),
    # (20, 64, 4)), the tile kernel's one pass or shifts; with autograd the block-sparse engine;
    # local above, below and equal to the stride, and a band of one
    [
        (64, 8, 8),
        (96, 8, 12),
        (96, 16, 5),
        (48, 4, 1),
        (70, 5, 12),
        (100, 7, 3),
        (33, 16, 3),
        (50, 12, 5),
        (20, 64, 4),
    ],
)
@pytest.mark.parametrize("grad", [False, True])
def test_strided(n, stride, local, causal, grad, tile_kernel_or_not):
    q, k, v = random_qkv(b=1, h=3, n=n, d=16, seed=stride)
    q.requires_grad_(grad)

    def rule(i, j):
        if causal and j > i:
            return False
        near = (i - j < local) if causal else (abs(i - j) < local)
        return near or (i - j) % stride == 0

    out = build_variant("strided", {"stride": stride, "local": local})(q, k, v, causal=causal)
    ref = dense_masked_softmax(q, k, v, _pattern(n, rule))
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    if grad:  # the engine's path, with gradients through both parts and their merge
        g = torch.randn_like(out)
        ours = torch.autograd.grad(out, q, g)[0]
        expected = torch.autograd.grad(ref, q, g)[0]
        torch.testing.assert_close(ours, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(
    "n, block, window_blocks, n_global, n_random",
    [(96, 8, 1, 1, 2), (100, 16, 0, 2, 1), (64, 8, 2, 0, 3), (30, 8, 1, 1, 0)],
)
def test_bigbird(n, block, window_blocks, n_global, n_random, causal, tile_kernel_or_not):
    params = dict(block=block, window_blocks=window_blocks, n_global=n_global, n_random=n_random)
    variant = build_variant("bigbird", params)
    q, k, v = random_qkv(b=2, h=2, n=n, d=16, seed=n)
    nb = math.ceil(n / block)
    random = variant.random_blocks(nb, causal).tolist()

    def rule(i, j):
        ci, cj = i // block, j // block
        if causal and j > i:
            return False
        near = (0 <= ci - cj <= window_blocks) if causal else abs(ci - cj) <= window_blocks
        return near or ci < n_global or cj < n_global or cj in random[ci]

    out = variant(q, k, v, causal=causal)
    torch.testing.assert_close(
        out, dense_masked_softmax(q, k, v, _pattern(n, rule)), rtol=1e-5, atol=1e-5
    )


def test_bigbird_random_blocks_avoid_window_global_and_future():
    variant = build_variant(
        "bigbird", {"block": 4, "window_blocks": 1, "n_global": 2, "n_random": 3}
    )
    for causal in (False, True):
        table = variant.random_blocks(20, causal)
        assert torch.equal(table, variant.random_blocks(20, causal))  # fixed per length
        for c, row in enumerate(table.tolist()):
            picks = [b for b in row if b >= 0]
            assert len(set(picks)) == len(picks)
            assert all(b >= 2 and abs(b - c) > 1 for b in picks)
            if causal:
                assert all(b < c for b in picks)


def test_window_flop_count_counts_kept_pairs():
    variant = build_variant("window", {"window": 3})
    kept = sum(1 for i in range(10) for j in range(10) if i - 3 < j <= i)
    assert variant.forward_flops(1, 1, 10, 10, 4, 4, causal=True) == 2 * kept * 8
