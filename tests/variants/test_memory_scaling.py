"""No variant materialises an N×N matrix: peak memory at N = 8192 is far below 4·N² bytes.

Measured like the throughput task does (attnbench.toolkit.memory: VmHWM in the memory-probe
process), forward only, B = H = 1, D = 16: an N×N float32 matrix alone would be 256 MiB. The bound
of a quarter of that leaves room for the O(N·w) tiles and chunked score blocks the variants do hold,
and fails for any dense N×N temporary. The sparse variants run at their papers' absolute sizes
(`tasks.throughput.targets.PAPER_SIZES`): their defaults are fractions of the sequence, a pattern
that grows with N by design.
"""

from __future__ import annotations

import sys

import pytest

from attnbench.tasks.throughput import forward_peak_mib
from attnbench.tasks.throughput.targets import PAPER_SIZES
from attnbench.toolkit.memory import isolated_cpu_peak
from attnbench.variant import VARIANTS

N = 8192
DENSE_MIB = 4 * N * N / 2**20


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="CPU peak memory uses /proc")
@pytest.mark.parametrize("name", VARIANTS.names())
def test_no_quadratic_memory(name):
    if reason := VARIANTS.get(name).unavailable("cpu"):
        pytest.skip(reason)
    causal_forms = [False, True] if VARIANTS.get(name).supports_causal else [False]
    for causal in causal_forms:
        params = PAPER_SIZES.get(name, {})
        peak = isolated_cpu_peak(
            forward_peak_mib, name, params, (1, 1, N, 16), "float32", 0, causal
        )
        assert peak is not None
        assert peak < DENSE_MIB / 4, f"{name} causal={causal}: {peak:.1f} MiB at N={N}"
