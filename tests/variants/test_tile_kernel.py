"""The compiled tile kernel (`variants.kernels.tile`) against the definitions it computes,
evaluated in float64 with the pattern as a boolean mask: the banded op (query i over keys
[i − before, i + after]) and the block op (listed key blocks, a per-block bias, lo <= p − i <= hi).
Tolerance 1e-5 relative: float32 sums over at most a few hundred keys and ``exp_u20`` (within
20 ulp, 2.4e-6 relative)."""

from __future__ import annotations

import shutil

import pytest
import torch
import torch.nn.functional as F
from conftest import failed_build

from attnbench.variants.kernels import tile as tile_kernel
from attnbench.variants.kernels.banded import banded_attention

SERVED = bool(shutil.which("c++") or shutil.which("g++"))
needs_kernel = pytest.mark.skipif(not SERVED, reason="no C++ compiler on PATH")


def reference(q, k, v, before, after, scale):
    n = q.shape[-2]
    i = torch.arange(n)
    band = (i[None, :] >= i[:, None] - before) & (i[None, :] <= i[:, None] + after)
    logits = (q.double() @ k.double().transpose(-2, -1)) * scale
    logits = logits.masked_fill(~band, float("-inf"))
    return F.softmax(logits, dim=-1) @ v.double(), torch.logsumexp(logits, dim=-1)


@needs_kernel
def test_kernel_builds_where_it_is_served():
    assert tile_kernel._load()


@needs_kernel
@pytest.mark.parametrize(
    ("n", "before", "after", "d", "dv"),
    [
        (300, 63, 0, 64, 64),  # a causal window of 64
        (257, 7, 0, 64, 64),  # a window shorter than a block, N no multiple of 16
        (200, 20, 20, 32, 48),  # a symmetric band; Dv of three 16-column groups
        (130, 255, 0, 96, 128),  # a window longer than the sequence; Dv of two 64-column passes
        (17, 3, 5, 8, 16),  # one full block and one row
    ],
)
def test_kernel_equals_the_definition(n, before, after, d, dv):
    gen = torch.Generator().manual_seed(n + before)
    q, k = (torch.randn(2, 3, n, d, generator=gen) for _ in range(2))
    v = torch.randn(2, 3, n, dv, generator=gen)
    scale = d**-0.5
    got = tile_kernel.compiled_banded(q, k, v, before, after, scale)
    assert got is not None
    out, lse = reference(q, k, v, before, after, scale)
    torch.testing.assert_close(got[0].double(), out, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got[1].double(), lse, rtol=1e-5, atol=1e-5)
    # and through the engine, as `window` and `strided` call it
    via_engine, engine_lse = banded_attention(q, k, v, before, after, scale, with_lse=True)
    assert torch.equal(via_engine, got[0]) and torch.equal(engine_lse, got[1])


@needs_kernel
@pytest.mark.parametrize("threads", [1, 3])
def test_kernel_does_not_depend_on_the_thread_count(threads):
    q, k, v = (
        torch.randn(1, 2, 500, 64, generator=torch.Generator().manual_seed(3)) for _ in range(3)
    )
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = tile_kernel.compiled_banded(q, k, v, 40, 0, 0.125)
        torch.set_num_threads(threads)
        many = tile_kernel.compiled_banded(q, k, v, 40, 0, 0.125)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(one[0], many[0]) and torch.equal(one[1], many[1])


def test_kernel_declines_what_it_does_not_serve():
    """Autograd recording, float64, a value dimension off 16: None, and the engine's SDPA path."""
    q, k, v = (torch.randn(1, 1, 40, 16) for _ in range(3))
    assert tile_kernel.compiled_banded(q.requires_grad_(), k, v, 3, 0, 0.25) is None
    assert tile_kernel.compiled_banded(q.double(), k.double(), v.double(), 3, 0, 0.25) is None
    assert tile_kernel.compiled_banded(q.detach(), k, v[..., :10], 3, 0, 0.25) is None


def block_reference(q, k, v, key_blocks, block, scale, bias=None, lo=-(1 << 30), hi=1 << 30):
    """Float64 softmax over the pattern the block op is given, as dense (N, M) masks; rows
    without a key: 0 and −∞."""
    n, m = q.shape[-2], k.shape[-2]
    lists = key_blocks if key_blocks.dim() == 4 else key_blocks.view(1, 1, *key_blocks.shape)
    heads = lists.shape[1]
    listed = torch.zeros(heads, lists.shape[2], -(-m // block) + 1, dtype=torch.bool)
    column = lists[0].masked_fill(lists[0] < 0, listed.shape[-1] - 1)  # −1: a spare column
    listed.scatter_(-1, column, True)
    shift = torch.zeros(heads, lists.shape[2], listed.shape[-1], dtype=torch.float64)
    if bias is not None:
        shift.scatter_(-1, column, bias.reshape(lists[0].shape).double())
    i, j = torch.arange(n).view(-1, 1), torch.arange(m).view(1, -1)
    keep = listed[:, i // block, j // block] & (j - i >= lo) & (j - i <= hi)  # (heads, N, M)
    logits = (q.double() @ k.double().transpose(-2, -1)) * scale + shift[:, i // block, j // block]
    logits = logits.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(logits, dim=-1)
    weights = torch.exp(logits - lse.unsqueeze(-1)).nan_to_num(0.0)
    return weights @ v.double(), lse


@needs_kernel
@pytest.mark.parametrize(
    ("n", "block", "lists", "causal", "biased", "dv"),
    [
        (256, 32, "shared", True, False, 64),  # bigbird's shape: causal, one list for all heads
        (250, 32, "shared", False, False, 32),  # N no multiple of the block, non-causal
        (300, 40, "per_head", True, True, 64),  # learned_pattern's: per head, gated, 40 = 16+16+8
        (96, 96, "per_head", True, True, 128),  # one block: every key block is the diagonal
        (77, 20, "shared", True, True, 16),  # a short last block, a one-column value group
    ],
)
def test_block_op_equals_the_definition(n, block, lists, causal, biased, dv):
    gen = torch.Generator().manual_seed(n + block)
    heads, d = 3, 64
    q, k = (torch.randn(2, heads, n, d, generator=gen) for _ in range(2))
    v = torch.randn(2, heads, n, dv, generator=gen)
    nb = -(-n // block)
    rows = heads if lists == "per_head" else 1
    # each query block lists itself, one to three others (some later: causal drops them) and −1s
    table = torch.full((rows, nb, 4), -1, dtype=torch.long)
    for h in range(rows):
        for c in range(nb):
            others = torch.randperm(nb, generator=gen)[:3].tolist()
            picked = list(dict.fromkeys([c, *others]))[: 1 + (c + h) % 3]
            table[h, c, : len(picked)] = torch.tensor(picked)
    key_blocks = table[0] if lists == "shared" else table.unsqueeze(0)
    bias = -torch.rand(key_blocks.shape, generator=gen) * 3 if biased else None
    scale = d**-0.5
    hi = 0 if causal else 1 << 30
    got = tile_kernel.compiled_blocks(q, k, v, key_blocks, block, scale, bias=bias, hi=hi)
    assert got is not None
    out, lse = block_reference(q, k, v, key_blocks, block, scale, bias, hi=hi)
    torch.testing.assert_close(got[0].double(), out, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got[1].double(), lse, rtol=1e-5, atol=1e-5)


@needs_kernel
def test_block_op_rows_without_a_key_and_a_far_limit():
    """strided's dilated part: one block, query a sees keys a′ <= a − gap. The first gap rows see
    nothing (0, −∞); keys past the sequence of a block are not read."""
    gen = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(1, 2, 70, 32, generator=gen) for _ in range(3))
    lists = torch.zeros(1, 1, dtype=torch.long)
    got = tile_kernel.compiled_blocks(q, k, v, lists, 70, 0.2, hi=-9)
    out, lse = block_reference(q, k, v, lists, 70, 0.2, hi=-9)
    assert torch.equal(got[0][..., :9, :], torch.zeros(1, 2, 9, 32))
    assert torch.isneginf(got[1][..., :9]).all()
    torch.testing.assert_close(got[0].double(), out, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got[1].double(), lse, rtol=1e-5, atol=1e-5)
    # and a lower limit: keys at least 5 ahead only
    got = tile_kernel.compiled_blocks(q, k, v, lists, 70, 0.2, lo=5)
    out, lse = block_reference(q, k, v, lists, 70, 0.2, lo=5)
    torch.testing.assert_close(got[0].double(), out, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got[1].double(), lse, rtol=1e-5, atol=1e-5)


@needs_kernel
@pytest.mark.parametrize("threads", [1, 3])
def test_block_op_does_not_depend_on_the_thread_count(threads):
    gen = torch.Generator().manual_seed(8)
    q, k, v = (torch.randn(1, 2, 512, 64, generator=gen) for _ in range(3))
    lists = torch.stack([torch.arange(16), (torch.arange(16) - 3).clamp(min=-1)], dim=1)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = tile_kernel.compiled_blocks(q, k, v, lists, 32, 0.125, hi=0)
        torch.set_num_threads(threads)
        many = tile_kernel.compiled_blocks(q, k, v, lists, 32, 0.125, hi=0)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(one[0], many[0]) and torch.equal(one[1], many[1])


@needs_kernel
@pytest.mark.parametrize(
    ("n", "before", "after", "stride", "first", "causal"),
    [
        (300, 15, 0, 100, 1, True),  # strided at a stride of a third: local 16, two offsets
        (300, 15, 15, 100, 1, False),  # both sides
        (200, 9, 0, 7, 2, True),  # many offsets (the kernel serves them, only slower)
        (45, 3, 3, 40, 1, False),  # an offset past all but the last rows
    ],
)
def test_banded_op_with_a_stride_equals_the_definition(n, before, after, stride, first, causal):
    gen = torch.Generator().manual_seed(n + stride)
    q, k = (torch.randn(1, 2, n, 32, generator=gen) for _ in range(2))
    v = torch.randn(1, 2, n, 48, generator=gen)
    i, j = torch.arange(n).view(-1, 1), torch.arange(n).view(1, -1)
    band = (j >= i - before) & (j <= i + after)
    apart = i - j if causal else (i - j).abs()
    dilated = (apart >= first * stride) & (apart % stride == 0)
    logits = (q.double() @ k.double().transpose(-2, -1)) * 0.2
    expected = F.softmax(logits.masked_fill(~(band | dilated), float("-inf")), dim=-1) @ v.double()
    got = tile_kernel.compiled_banded(
        q, k, v, before, after, 0.2, stride=stride, first=first, causal=causal
    )
    torch.testing.assert_close(got[0].double(), expected, rtol=1e-5, atol=1e-6)


@needs_kernel
def test_a_failed_build_warns_once_and_the_engines_keep_working(monkeypatch):
    """No compiler (here: a build that raises): one warning, the SDPA paths, the same output."""
    from attnbench.variant import build_variant

    q, k, v = (
        torch.randn(1, 2, 200, 16, generator=torch.Generator().manual_seed(1)) for _ in "qkv"
    )
    variants = [build_variant(name, {}) for name in ("window", "bigbird", "strided")]
    expected = [variant(q, k, v, causal=True) for variant in variants]
    with failed_build(monkeypatch, tile_kernel._load):
        got = [variant(q, k, v, causal=True) for variant in variants]
    for a, b in zip(got, expected, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
