from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import random_qkv
from references import dense_masked_softmax, naive_softmax

from attnbench.variant import VariantShape, build_variant
from attnbench.variants import sparse_adaptive
from attnbench.variants.sparse_adaptive import TOPK_CHUNK_BYTES


def _learned(h=2, max_len=64, **params):
    return build_variant(
        "learned_pattern", params, VariantShape(n_heads=h, head_dim=16, max_len=max_len)
    )


@pytest.mark.parametrize("causal", [False, True])
def test_learned_pattern_equals_dense_gated_softmax(causal, tile_kernel_or_not):
    variant = _learned(block=8, keep=3)
    with torch.no_grad():  # an arbitrary learned state, different per head
        variant.pattern_logits.copy_(
            torch.randn(variant.pattern_logits.shape, generator=torch.Generator().manual_seed(0))
        )
    n, b = 60, 8
    q, k, v = random_qkv(b=2, h=2, n=n, d=16)
    nb = math.ceil(n / b)
    P = variant.pattern_logits[:, :nb, :nb].detach()
    pattern = torch.zeros(2, n, n, dtype=torch.bool)
    for h in range(2):
        for c in range(nb):  # own block, then the best others by P (earlier only, causal)
            others = [x for x in range(nb) if x != c and (x < c or not causal)]
            best = sorted(others, key=lambda x: -P[h, c, x].item())[:2]
            for x in [c, *best]:
                pattern[h, c * b : (c + 1) * b, x * b : (x + 1) * b] = True
    if causal:
        pattern &= torch.ones(n, n, dtype=torch.bool).tril()
    pos = torch.arange(n) // b
    bias = F.logsigmoid(P)[:, pos][:, :, pos]
    ref = dense_masked_softmax(q, k, v, pattern, bias)
    with torch.no_grad():  # as timed: without autograd (the compiled kernel where it is built)
        out = variant(q, k, v, causal=causal)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_learned_pattern_gradients_equal_the_dense_gated_softmax(causal):
    """The gates ride through the fused SDPA call as one more head dimension: the gradients of
    the logit table, q, k and v equal those of the dense gated softmax (float64), causal and
    not, with a partial last block."""
    variant = _learned(block=8, keep=3).double()
    with torch.no_grad():
        variant.pattern_logits.copy_(
            torch.randn(variant.pattern_logits.shape, generator=torch.Generator().manual_seed(1))
        )
    n, b = 60, 8
    q, k, v = (t.requires_grad_() for t in random_qkv(b=2, h=2, n=n, d=16, dtype=torch.float64))
    nb = math.ceil(n / b)
    kept = torch.zeros(2, nb, nb + 1, dtype=torch.bool)
    blocks = variant.selected_blocks(nb, causal)
    kept.scatter_(-1, blocks.masked_fill(blocks < 0, nb), True)
    pos = torch.arange(n) // b
    pattern = kept[:, :, :nb][:, pos][:, :, pos]
    if causal:
        pattern &= torch.ones(n, n, dtype=torch.bool).tril()
    g = torch.randn(2, 2, n, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    leaves = [q, k, v, variant.pattern_logits]
    ours = torch.autograd.grad((variant(q, k, v, causal=causal) * g).sum(), leaves)
    bias = F.logsigmoid(variant.pattern_logits[:, :nb, :nb])[:, pos][:, :, pos]
    ref = dense_masked_softmax(q, k, v, pattern, bias)
    expected = torch.autograd.grad((ref * g).sum(), leaves)
    for got, want in zip(ours, expected, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-10)


def test_learned_pattern_gate_gets_gradients_only_where_computed():
    variant = _learned(h=1, block=8, keep=2)
    q, k, v = random_qkv(b=1, h=1, n=32, d=16)
    variant(q, k, v).sum().backward()
    grad = variant.pattern_logits.grad[0, :4, :4]
    kept = torch.zeros(4, 4, dtype=torch.bool)
    kept.scatter_(1, variant.selected_blocks(4, False)[0], True)
    assert (grad[kept] != 0).all()  # gates of computed blocks learn
    assert (grad[~kept] == 0).all()  # skipped blocks: no work, no gradient


def test_learned_pattern_closed_gate_fades_its_block_out():
    variant = _learned(h=1, block=8, keep=2)  # 2 blocks of 8: both always computed
    q, k, v = random_qkv(b=1, h=1, n=16, d=16)
    with torch.no_grad():
        variant.pattern_logits[0, 0, 1] = -60.0  # σ ≈ e⁻⁶⁰: block 1 closed for query block 0
    own_block_only = naive_softmax(q[:, :, :8], k[:, :, :8], v[:, :, :8])
    torch.testing.assert_close(variant(q, k, v)[:, :, :8], own_block_only, rtol=1e-5, atol=1e-5)


def test_learned_pattern_refuses_longer_than_built_for():
    with pytest.raises(ValueError, match="built for max_len=64"):
        _learned(max_len=64, block=8)(*random_qkv(b=1, h=2, n=80, d=16))


@pytest.mark.parametrize("causal", [False, True])
def test_topk_with_k_at_least_n_is_softmax(causal):
    q, k, v = random_qkv(b=2, h=2, n=40, d=16)
    out = build_variant("topk", {"k": 40})(q, k, v, causal=causal)
    torch.testing.assert_close(out, naive_softmax(q, k, v, causal), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("n", "keep"), [(50, 5), (1100, 5), (1100, 300)])
def test_topk_equals_dense_reference(causal, n, keep):
    q, k, v = random_qkv(b=1, h=2, n=n, d=16, seed=9)
    scores = q @ k.transpose(-2, -1)
    if causal:
        scores = scores.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
    pattern = torch.zeros_like(scores, dtype=torch.bool)
    for idx in np.ndindex(*scores.shape[:3]):
        row = scores[idx].tolist()
        order = sorted(range(n), key=lambda j: -row[j])[:keep]
        pattern[idx][[j for j in order if row[j] > float("-inf")]] = True
    out = build_variant("topk", {"k": keep})(q, k, v, causal=causal)
    torch.testing.assert_close(out, dense_masked_softmax(q, k, v, pattern), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_topk_chunks_agree_with_one_chunk(monkeypatch, causal):
    """Chunks of queries (the last one partial) give the outputs of one chunk over all queries:
    each causal chunk sees the keys up to its last query and no further."""
    q, k, v = random_qkv(b=1, h=2, n=203, d=16, seed=4)
    variant = build_variant("topk", {"k": 0.3})
    whole = variant(q, k, v, causal=causal)
    monkeypatch.setattr(sparse_adaptive, "TOPK_CHUNK_BYTES", 2 * 203 * 4 * 37)  # 37 rows a chunk
    assert TOPK_CHUNK_BYTES != sparse_adaptive.TOPK_CHUNK_BYTES
    torch.testing.assert_close(variant(q, k, v, causal=causal), whole, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_kth_highest_equals_torch_topk(monkeypatch, dtype, threads):
    """numpy's introselect on row ranges split between threads (bfloat16: `torch.topk`) finds
    the same k-th highest score as `torch.topk`, with −∞ entries (the causal diagonal) and rows
    where fewer than k scores are finite; ties and repeated values included (fp16 rounding)."""
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads)
    gen = torch.Generator().manual_seed(threads)
    scores = torch.randn(2, 3, 97, 130, generator=gen).to(dtype)  # 582 rows: threads split them
    scores[..., 100:] = float("-inf")
    scores[0, 0, :5, 3:] = float("-inf")  # 3 finite scores a row, fewer than k
    for picks in (1, 7, 64, 130):
        expected = scores.topk(picks, dim=-1).values[..., -1:]
        found = sparse_adaptive.kth_highest(scores, picks)
        assert found.dtype == dtype and found.shape == expected.shape
        assert torch.equal(found, expected), picks


@pytest.mark.parametrize("causal", [False, True])
def test_learned_pattern_breaks_ties_by_the_lowest_block_on_every_device(causal):
    """At initialisation the pattern logits are the locality prior 3 − locality·|i − j|, equal
    for blocks at the same distance: the selection is then decided by ties, and must not be
    left to a kernel's topk (on an H200 CUDA's topk chose other blocks than the CPU's: the same
    variant computed another pattern on the GPU). Each query block keeps itself, then the
    allowed blocks by logit, the lower-numbered first among equals, `keep` in all."""
    variant = build_variant("learned_pattern", {"block": 8}, VariantShape(2, 8, 80))
    nb, keep = 10, variant.params.keep
    logits = variant.pattern_logits[0].detach()
    blocks = variant.selected_blocks(nb, causal)
    for row in range(nb):
        allowed = [j for j in range(nb) if j != row and (not causal or j <= row)]
        allowed.sort(key=lambda j, row=row: (-float(logits[row, j]), j))
        expected = sorted([row, *allowed[: keep - 1]])
        got = sorted(j for j in blocks[0, row].tolist() if j >= 0)
        assert got == expected, (row, got, expected)
