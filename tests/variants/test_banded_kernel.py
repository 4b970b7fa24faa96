"""The banded engine's compiled kernel (`variants.banded_kernel`) against the definition: softmax
of query i over keys [i − before, i + after], evaluated in float64 by dense SDPA with the band as
a boolean mask. Tolerance 1e-5 relative: float32 sums over at most a few hundred keys and
``exp_u20`` (within 20 ulp, 2.4e-6 relative)."""

from __future__ import annotations

import shutil

import pytest
import torch
import torch.nn.functional as F

from attnbench.variants import banded_kernel
from attnbench.variants.banded import banded_attention

SERVED = bool(shutil.which("c++") or shutil.which("g++")) and (
    torch.backends.cpu.get_cpu_capability() == "AVX512"
)
needs_kernel = pytest.mark.skipif(not SERVED, reason="no C++ compiler or no AVX-512 dispatch")


def reference(q, k, v, before, after, scale):
    n = q.shape[-2]
    i = torch.arange(n)
    band = (i[None, :] >= i[:, None] - before) & (i[None, :] <= i[:, None] + after)
    logits = (q.double() @ k.double().transpose(-2, -1)) * scale
    logits = logits.masked_fill(~band, float("-inf"))
    return F.softmax(logits, dim=-1) @ v.double(), torch.logsumexp(logits, dim=-1)


@needs_kernel
def test_kernel_builds_where_it_is_served():
    assert banded_kernel._load()


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
    got = banded_kernel.compiled_banded(q, k, v, before, after, scale)
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
        one = banded_kernel.compiled_banded(q, k, v, 40, 0, 0.125)
        torch.set_num_threads(threads)
        many = banded_kernel.compiled_banded(q, k, v, 40, 0, 0.125)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(one[0], many[0]) and torch.equal(one[1], many[1])


def test_kernel_declines_what_it_does_not_serve():
    """Autograd recording, float64, a value dimension off 16: None, and the engine's SDPA path."""
    q, k, v = (torch.randn(1, 1, 40, 16) for _ in range(3))
    assert banded_kernel.compiled_banded(q.requires_grad_(), k, v, 3, 0, 0.25) is None
    assert banded_kernel.compiled_banded(q.double(), k.double(), v.double(), 3, 0, 0.25) is None
    assert banded_kernel.compiled_banded(q.detach(), k, v[..., :10], 3, 0, 0.25) is None
