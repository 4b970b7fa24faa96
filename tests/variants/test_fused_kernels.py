"""The fused CPU kernels of `relu2`/`sigmoid` (`variants.kernels.pointwise`) and `topk`
(`variants.kernels.topk.compiled_topk_attention`) against float64 definitions, in every
configuration the tuner may choose, so that a machine's choice never changes what is computed."""

from __future__ import annotations

import math

import pytest
import torch

from attnbench.variants.kernels import pointwise, topk

pytestmark = pytest.mark.skipif(
    not (pointwise._load() and topk._fused_available()),
    reason="the fused kernels need a C++ compiler and a torch that exports sgemm_",
)


def _qkv(n, m, d=16, dv=32, bh=3, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return tuple(
        torch.randn(bh, size, width, generator=gen) for size, width in ((n, d), (m, d), (m, dv))
    )


def _pointwise_reference(q, k, v, kind, scale, shift, causal):
    s = (q.double() @ k.double().transpose(-1, -2)) * scale + shift
    w = torch.relu(s).square() if kind == "relu2" else torch.sigmoid(s)
    if causal:
        w = w * torch.ones(q.shape[1], k.shape[1], dtype=torch.double).tril()
    return w @ v.double()


@pytest.mark.parametrize("kind", sorted(pointwise.KINDS))
@pytest.mark.parametrize("tiles", [*pointwise.TILES, (1, 1), (7, 13)])
@pytest.mark.parametrize(
    ("n", "m", "causal"), [(200, 200, True), (131, 131, True), (90, 257, False)]
)
def test_pointwise_kernel_equals_its_definition_in_every_tile_configuration(
    kind, tiles, n, m, causal
):
    q, k, v = _qkv(n, m)
    scale, shift = 0.3, -0.2
    out = torch.ops.attnbench_pointwise.pointwise_forward(
        q, k, v, pointwise.KINDS[kind], scale, shift, causal, *tiles
    )
    expected = _pointwise_reference(q, k, v, kind, scale, shift, causal)
    # float32 sums of up to 257 products of O(1) terms: relative error a few 1e-7 per term
    assert torch.allclose(
        out.double(), expected, rtol=1e-5, atol=1e-5 * expected.abs().max().item()
    )


def _topk_reference(q, k, v, picks, scale, causal, offset=0):
    s = (q.double() @ k.double().transpose(-1, -2)) * scale
    n, m = s.shape[-2:]
    if causal:
        rows = torch.arange(n).unsqueeze(-1) + offset
        s = s.masked_fill(torch.arange(m) > rows, float("-inf"))
    kth = s.topk(min(picks, m), dim=-1).values[..., -1:]
    w = s.masked_fill(s < kth, float("-inf")).softmax(dim=-1)
    return w @ v.double()


@pytest.mark.parametrize("dense", [False, True])
@pytest.mark.parametrize("block", [*topk.QUERY_BLOCKS, 1, 5])
@pytest.mark.parametrize("picks", [1, 7, 100, 1000])
@pytest.mark.parametrize("causal", [True, False])
def test_topk_kernel_equals_its_definition_in_every_configuration(dense, block, picks, causal):
    q, k, v = _qkv(150, 150)
    scale = 1 / math.sqrt(q.shape[-1])
    out = torch.ops.attnbench_topk.topk_attention(q, k, v, picks, scale, causal, 0, block, dense)
    expected = _topk_reference(q, k, v, picks, scale, causal)
    assert torch.allclose(out.double(), expected, atol=2e-6)


@pytest.mark.parametrize("dense", [False, True])
def test_topk_kernel_with_a_query_offset_is_the_tail_of_the_whole(dense):
    """The tuner times the last queries alone: row 0 of the slice is position ``offset``."""
    q, k, v = _qkv(120, 120)
    whole = torch.ops.attnbench_topk.topk_attention(q, k, v, 9, 0.25, True, 0, 16, dense)
    tail = torch.ops.attnbench_topk.topk_attention(q[:, 80:], k, v, 9, 0.25, True, 80, 16, dense)
    assert torch.allclose(tail, whole[:, 80:], atol=1e-6)
    assert torch.allclose(
        tail.double(), _topk_reference(q[:, 80:], k, v, 9, 0.25, True, 80), atol=2e-6
    )


def test_topk_kernel_a_row_with_nan_is_nan_and_others_are_untouched():
    q, k, v = _qkv(40, 40, bh=1)
    q[0, 5, 0] = float("nan")
    for dense in (False, True):
        out = torch.ops.attnbench_topk.topk_attention(q, k, v, 4, 0.25, False, 0, 16, dense)
        assert torch.isnan(out[0, 5]).all()
        rest = torch.cat([out[0, :5], out[0, 6:]])
        assert torch.isfinite(rest).all()


@pytest.mark.parametrize("name", ["relu2", "sigmoid", "topk"])
def test_the_variants_fused_forward_equals_their_torch_path(name):
    """Without autograd the variant runs the fused kernel, with it the torch path: the same
    attention (the contract suite checks both against float64 too)."""
    from attnbench import VariantShape, build_variant, load_plugins

    load_plugins()
    q, k, v = (x.view(1, 3, *x.shape[1:]) for x in _qkv(96, 96))
    variant = build_variant(name, {"k": 11} if name == "topk" else {}, VariantShape(3, 16, 96))
    for causal in (True, False):
        with torch.no_grad():
            fused = variant(q, k, v, causal=causal)
        torch_path = variant(q.requires_grad_(), k, v, causal=causal).detach()
        q.requires_grad_(False)
        assert torch.allclose(fused, torch_path, atol=2e-5)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize(("n", "local", "stride"), [(300, 16, 8), (257, 10, 7), (129, 40, 33)])
def test_strided_band_then_dilated_merge_equals_its_definition(causal, n, local, stride):
    """`strided` with many dilated keys: the band by the tile kernel, then its residue classes
    merged into it in place (`tile.compiled_dilated_merge_`), against float64 softmax over the
    pattern (band |i − j| < local, or (i − j) a multiple of the stride beyond it)."""
    from attnbench.variants.kernels import tile

    if not tile._load():
        pytest.skip("the tile kernel cannot be built here")
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 2, n, 16, generator=gen) for _ in range(3))
    after = 0 if causal else local - 1
    gap = -(-local // stride)
    out, lse = tile.compiled_banded(q, k, v, local - 1, after, 0.25, causal=causal)
    assert tile.compiled_dilated_merge_(out, lse, q, k, v, stride, gap, causal, 0.25)
    i, j = torch.arange(n).unsqueeze(-1), torch.arange(n)
    allowed = ((i - j).abs() < local) | (((i - j) % stride == 0) & ((i - j).abs() >= gap * stride))
    if causal:
        allowed &= j <= i
    s = (q.double() @ k.double().transpose(-1, -2) * 0.25).masked_fill(~allowed, float("-inf"))
    assert torch.allclose(out.double(), s.softmax(-1) @ v.double(), atol=2e-6)
    assert torch.allclose(lse.double(), s.logsumexp(-1), atol=2e-5)
