"""The block-sparse engine's three kernels agree with a dense masked softmax.

The dense pattern is built here from the key-block lists and the token predicate with plain
loops, so a kernel that visits the wrong tiles or drops the predicate fails.
"""

from __future__ import annotations

import math

import pytest
import torch
from conftest import random_qkv
from references import dense_masked_softmax

from attnbench.variants.kernels.blocksparse import (
    block_sparse_attention,
    dedupe_blocks,
    flex_block_sparse_attention,
    local_key_blocks,
)


def _causal(i, j):
    return j <= i


def _dense_pattern(key_blocks, block, n, m, allowed):
    """(…, n, m) boolean pattern of the listed blocks refined by ``allowed``, by loops."""
    lists = key_blocks.reshape(-1, key_blocks.shape[-2], key_blocks.shape[-1])
    patterns = torch.zeros(lists.shape[0], n, m, dtype=torch.bool)
    for p, rows in enumerate(lists):
        for i in range(n):
            for kb in rows[i // block].tolist():
                for j in range(max(kb, 0) * block, min((kb + 1) * block, m) if kb >= 0 else 0):
                    patterns[p, i, j] = allowed is None or bool(
                        allowed(torch.tensor(i), torch.tensor(j))
                    )
    return patterns.reshape(*key_blocks.shape[:-2], n, m)


def _cases():
    n, block = 70, 16  # n not a multiple of the block
    nb = math.ceil(n / block)
    g = torch.Generator().manual_seed(3)
    per_head = dedupe_blocks(torch.randint(-1, nb, (2, 3, nb, 3), generator=g))
    return [
        ("local causal", n, block, local_key_blocks(nb, nb, block, 20, True), _causal),
        ("local both ways", n, block, local_key_blocks(nb, nb, block, 20, False), None),
        ("random per head", n, block, per_head, None),  # some query blocks list no key block
    ]


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
@pytest.mark.parametrize("case", _cases(), ids=lambda c: c[0])
@pytest.mark.parametrize("kernel", ["explicit", "sdpa tiles", "flex eager"])
def test_kernels_match_dense_masked_softmax(case, kernel):
    _, n, block, key_blocks, allowed = case
    q, k, v = random_qkv(b=2, h=3, n=n, d=8, seed=1)
    pattern = _dense_pattern(key_blocks, block, n, n, allowed)
    expected = dense_masked_softmax(q, k, v, pattern)
    expected = expected.masked_fill(~pattern.any(dim=-1, keepdim=True), 0.0)  # no key: 0
    scale = 1 / math.sqrt(q.shape[-1])
    if kernel == "flex eager":
        out = flex_block_sparse_attention(
            q, k, v, key_blocks, block, scale, allowed, compiled=False
        )
    else:
        with_lse = kernel == "explicit"
        out, lse = block_sparse_attention(
            q, k, v, key_blocks, block, scale=scale, allowed=allowed, with_lse=with_lse
        )
        assert (lse is None) == (not with_lse)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


def test_fused_tiles_have_the_explicit_gradients():
    q, k, v = (t.requires_grad_(True) for t in random_qkv(b=1, h=2, n=90, d=8, seed=2))
    blocks = local_key_blocks(6, 6, 16, 24, True)
    grads = []
    for with_lse in (True, False):
        out, _ = block_sparse_attention(
            q, k, v, blocks, 16, scale=0.3, allowed=_causal, with_lse=with_lse
        )
        grads.append(torch.autograd.grad(out.square().sum(), (q, k, v)))
    for explicit, fused in zip(*grads, strict=True):
        torch.testing.assert_close(fused, explicit, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_compiled_flex_matches_the_tiles():
    """The kernel CUDA runs, compiled here for the CPU (needs a C++ compiler)."""
    q, k, v = random_qkv(b=1, h=2, n=300, d=16, seed=4)
    blocks = local_key_blocks(10, 10, 32, 50, True)
    tiles, _ = block_sparse_attention(q, k, v, blocks, 32, scale=0.25, allowed=_causal)
    try:
        flex = flex_block_sparse_attention(q, k, v, blocks, 32, 0.25, _causal)
    except Exception as exc:  # noqa: BLE001 - no toolchain for inductor here
        pytest.skip(f"torch.compile cannot build flex_attention on this machine: {exc}")
    torch.testing.assert_close(flex, tiles, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("name", ["window", "bigbird"])
def test_cuda_block_sparse_variants_match_cpu(name):
    from attnbench.variant import VariantShape, build_variant

    q, k, v = random_qkv(b=1, h=4, n=1024, d=64, seed=5)
    variant = build_variant(name, {}, VariantShape(4, 64, 1024))
    cpu = variant(q, k, v, causal=True)
    gpu = variant.cuda()(q.cuda(), k.cuda(), v.cuda(), causal=True)
    torch.testing.assert_close(gpu.cpu(), cpu, rtol=2e-3, atol=2e-3)


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
@pytest.mark.parametrize("case", _cases(), ids=lambda c: c[0])
def test_flex_in_bfloat16_is_within_the_declared_tolerance(case):
    """The CUDA path's BlockMask and mask_mod in the dtype a GPU runs them in: flex_attention on
    bfloat16 inputs against dense masked softmax in float64, within the bfloat16 tolerance the
    variants declare (10⁻¹ of the output's scale). Eager flex on the CPU is its unfused math
    fallback, not the Triton kernel a GPU compiles: this checks the pattern and the dtype's
    handling, not that kernel's numerics (it measures a few 10⁻³, bfloat16's 2⁻⁸ per rounding)."""
    from attnbench.variant import AttentionVariant

    _, n, block, key_blocks, allowed = case
    q, k, v = random_qkv(b=2, h=3, n=n, d=8, seed=5, dtype=torch.float64)
    pattern = _dense_pattern(key_blocks, block, n, n, allowed)
    expected = dense_masked_softmax(q, k, v, pattern)
    expected = expected.masked_fill(~pattern.any(dim=-1, keepdim=True), 0.0)
    scale = 1 / math.sqrt(q.shape[-1])
    low = [x.bfloat16() for x in (q, k, v)]
    out = flex_block_sparse_attention(*low, key_blocks, block, scale, allowed, compiled=False)
    assert out.dtype == torch.bfloat16
    error = float((out.double() - expected).abs().max()) / max(1.0, float(expected.abs().max()))
    assert error <= AttentionVariant.error_tolerance["bfloat16"]
    assert error > 0  # it did run in bfloat16


def test_flex_takes_only_blocks_of_whole_tiles():
    """flex_attention's compiled kernel needs a BlockMask's blocks to be whole multiples of its
    tile (a window's block of 103 failed to compile on an H200): the tile is the largest of
    128, 64, 32, 16 dividing the block, and a block with none goes the SDPA way."""
    from attnbench.variants.kernels.blocksparse import flex_tile

    assert [flex_tile(b) for b in (128, 256, 64, 96, 48, 16, 103, 8)] == [
        128,
        128,
        64,
        32,
        16,
        16,
        None,
        None,
    ]
