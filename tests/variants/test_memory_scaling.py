"""No variant materialises an N×N matrix: peak memory at N = 8192 is far below 4·N² bytes.

Measured (harness.memory: VmHWM on CPU), forward only, B = H = 1, D = 16: an N×N float32 matrix
alone would be 256 MiB. The bound of a quarter of that leaves room for the O(N·w) tiles and
chunked score blocks the variants do hold, and fails for any dense N×N temporary.
"""

from __future__ import annotations

import sys

import pytest
import torch

from harness.memory import peak_memory_mib
from harness.variant_api import VARIANTS, VariantShape, build_variant

N = 8192
DENSE_MIB = 4 * N * N / 2**20


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="CPU peak memory uses /proc")
@pytest.mark.parametrize("name", VARIANTS.names())
def test_no_quadratic_memory(name):
    variant = build_variant(name, {}, VariantShape(n_heads=1, head_dim=16, max_len=N))
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, N, 16, generator=g) for _ in range(3))
    for causal in [False, True] if variant.supports_causal else [False]:

        def forward(causal=causal):
            with torch.no_grad():
                return variant(q, k, v, causal=causal)

        forward()  # first call: one-off allocations (thread pools, caches) are not the variant's
        peak = peak_memory_mib(forward, torch.device("cpu"))
        assert peak is not None
        assert peak < DENSE_MIB / 4, f"{name} causal={causal}: {peak:.1f} MiB at N={N}"
