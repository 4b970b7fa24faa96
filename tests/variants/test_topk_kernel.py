"""topk's compiled CPU kernel (`variants.kernels.topk`) against the definition it computes: the
softmax over each row's k highest scores, evaluated in float64 from the same float32 scores.

The weights compare with rtol 1e-5: the kernel's exp is torch's ``exp_u20`` (within 20 ulp,
2.4e-6 relative), its sum and division in float32 add a few ulp more. The set of kept keys must
match exactly: the scores are scaled so that no kept weight underflows, so a weight is 0 exactly
where the key was dropped.
"""

from __future__ import annotations

import shutil

import pytest
import torch
from conftest import failed_build, random_qkv
from references import dense_masked_softmax

from attnbench.variant import build_variant
from attnbench.variants import sparse_adaptive
from attnbench.variants.kernels import topk as topk_kernel

HAS_COMPILER = bool(shutil.which("c++") or shutil.which("g++"))
needs_kernel = pytest.mark.skipif(not HAS_COMPILER, reason="no C++ compiler on PATH")


def reference_weights(scores: torch.Tensor, picks: int, scale: float, first: int | None):
    """The definition in float64: rows see all keys, or row i of each matrix keys [0, first+i]."""
    x = scores.double()
    if first is not None:
        rows, m = x.shape[-2:]
        seen = torch.arange(rows).unsqueeze(-1) + first + 1
        x = x.masked_fill(torch.arange(m) >= seen, float("-inf"))
    kth = x.topk(picks, dim=-1).values[..., -1:]
    return (x.masked_fill(x < kth, float("-inf")) * scale).softmax(dim=-1)


@needs_kernel
def test_kernel_builds_where_a_compiler_is():
    """A machine with a C++ compiler times the compiled kernel, not the fallback."""
    assert topk_kernel.compiled_available()


@needs_kernel
@pytest.mark.parametrize(
    ("shape", "picks", "first"),
    [
        ((2, 3, 40, 3000), 600, None),  # many picks, long rows: bracketing recursion
        ((1, 2, 30, 5000), 17, None),  # few picks
        ((1, 1, 9, 4097), 1, None),  # the maximum; a length no vector width divides
        ((1, 2, 16, 2048), 2048, None),  # every key: the plain softmax
        ((2, 2, 50, 700), 50, 400),  # causal rows of a chunk starting at query 400
        ((1, 2, 64, 64), 40, 0),  # the first chunk: early rows see fewer keys than picks
        ((1, 1, 5, 63), 7, None),  # shorter than one sample: selection by counting
    ],
)
def test_kernel_equals_the_definition(shape, picks, first):
    gen = torch.Generator().manual_seed(sum(shape) + picks)
    scores = torch.randn(shape, generator=gen) * 3
    expected = reference_weights(scores, picks, 0.3, first)
    got = topk_kernel.compiled_topk_softmax(scores.clone(), picks, 0.3, first)
    assert got is not None
    assert torch.equal(got > 0, expected > 0)  # the same keys, exactly
    torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=1e-9)


@needs_kernel
def test_kernel_is_exact_where_its_sample_misleads():
    """A row whose strided sample holds only its largest scores: the bracket the sample gives
    misses the k-th, the counts show it, and the row is selected whole, still exactly."""
    n, picks = 5000, 1000
    scores = torch.randn(1, 1, 2, n, generator=torch.Generator().manual_seed(5))
    step = n // 64  # the kernel's first sample: every step-th score
    scores[..., ::step] = 50 + torch.arange(len(range(0, n, step)), dtype=torch.float32)
    got = topk_kernel.compiled_topk_softmax(scores.clone(), picks, 0.01, None)
    expected = reference_weights(scores, picks, 0.01, None)
    assert torch.equal(got > 0, expected > 0)
    torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=1e-9)


@needs_kernel
def test_kernel_keeps_every_tie_and_propagates_nan():
    """Ties at the k-th score are all kept (as `TopKAttention.attention_weights`), a row of equal
    scores keeps all, and a NaN score makes its row NaN (as the softmax would)."""
    gen = torch.Generator().manual_seed(6)
    scores = torch.randint(-20, 20, (1, 1, 8, 3000), generator=gen).float()
    scores[0, 0, 1] = 2.5  # every score equal
    scores[0, 0, 2, 77] = float("nan")
    got = topk_kernel.compiled_topk_softmax(scores.clone(), 300, 0.1, None)
    expected = reference_weights(scores, 300, 0.1, None)
    assert torch.isnan(got[0, 0, 2]).all()
    keep = [0, 1, 3, 4, 5, 6, 7]
    assert torch.equal(got[0, 0, keep] > 0, expected[0, 0, keep] > 0)
    assert (got[0, 0, 0] > 0).sum() >= 300  # the tied k-th scores all kept
    torch.testing.assert_close(
        got[0, 0, 1].double(), torch.full((3000,), 1 / 3000.0, dtype=torch.float64)
    )
    torch.testing.assert_close(got[0, 0, keep].double(), expected[0, 0, keep], rtol=1e-5, atol=1e-9)


@needs_kernel
@pytest.mark.parametrize("threads", [1, 3])
def test_kernel_does_not_depend_on_the_thread_count(threads):
    scores = torch.randn(2, 2, 70, 1500, generator=torch.Generator().manual_seed(7))
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = topk_kernel.compiled_topk_softmax(scores.clone(), 200, 0.2, 30)
        torch.set_num_threads(threads)
        many = topk_kernel.compiled_topk_softmax(scores.clone(), 200, 0.2, 30)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(one, many)


def test_kernel_declines_what_it_does_not_serve():
    """Not float32, or not contiguous: None, and the caller takes `top_softmax`."""
    scores = torch.randn(1, 1, 4, 300)
    assert topk_kernel.compiled_topk_softmax(scores.double(), 5, 1.0, None) is None
    assert topk_kernel.compiled_topk_softmax(scores.bfloat16(), 5, 1.0, None) is None
    assert topk_kernel.compiled_topk_softmax(scores.transpose(-2, -1), 2, 1.0, None) is None


@pytest.mark.parametrize("first", [None, 10])
def test_python_path_equals_the_definition(first):
    """`top_softmax`, the path of other devices and dtypes and of machines without a compiler."""
    scores = torch.randn(
        2, 2, 30, 1200, generator=torch.Generator().manual_seed(8), dtype=torch.float64
    )
    expected = reference_weights(scores, 100, 0.4, first)
    got = sparse_adaptive.top_softmax(scores.clone(), 100, 0.4, first)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-15)


@needs_kernel
@pytest.mark.parametrize("causal", [False, True])
def test_topk_gradients_through_the_kernel_equal_the_dense_reference(causal):
    """The kernel's backward (the softmax's, restricted to the kept keys) gives the gradients of
    q, k and v of the dense masked softmax over the same keys (float64 reference; float32 run)."""
    n, keep = 300, 40
    q, k, v = random_qkv(b=1, h=2, n=n, d=16, seed=11)
    g = torch.randn(1, 2, n, 16, generator=torch.Generator().manual_seed(12))
    leaves32 = [t.clone().requires_grad_() for t in (q, k, v)]
    variant = build_variant("topk", {"k": keep})
    (variant(*leaves32, causal=causal) * g).sum().backward()
    leaves64 = [t.double().requires_grad_() for t in (q, k, v)]
    scores = leaves64[0] @ leaves64[1].transpose(-2, -1)
    if causal:
        scores = scores.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
    kth = scores.detach().topk(keep, dim=-1).values[..., -1:]
    pattern = (scores.detach() >= kth) & (scores.detach() > float("-inf"))
    reference = dense_masked_softmax(*leaves64, pattern)
    (reference * g.double()).sum().backward()
    for got, want in zip(leaves32, leaves64, strict=True):
        torch.testing.assert_close(got.grad.double(), want.grad, rtol=1e-4, atol=1e-5)


def test_a_failed_build_warns_once_and_topk_keeps_working(monkeypatch):
    """No compiler (here: a build that raises): one warning, the Python path, the same output."""
    q, k, v = random_qkv(b=1, h=2, n=200, d=16, seed=13)
    variant = build_variant("topk", {"k": 30})
    expected = variant(q, k, v, causal=True)
    with failed_build(monkeypatch, topk_kernel._load):
        got = variant(q, k, v, causal=True)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
