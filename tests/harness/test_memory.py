from __future__ import annotations

import sys

import pytest
import torch

from harness.memory import peak_memory_mib


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="CPU peak uses /proc (Linux)")
def test_cpu_peak_measures_a_known_allocation():
    def work():
        x = torch.ones(64 * 1024 * 1024 // 4)  # 64 MiB, written
        return float(x[-1])

    peak = peak_memory_mib(work, torch.device("cpu"))
    assert peak is not None
    # page-level accounting: the 64 MiB buffer plus at most a few MiB of interpreter noise
    assert 63 <= peak <= 72, peak
    # freed memory is returned (mmap threshold pinned), so a second run measures the same
    again = peak_memory_mib(work, torch.device("cpu"))
    assert 63 <= again <= 72, again


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_peak_measures_a_known_allocation():
    dev = torch.device("cuda")
    peak = peak_memory_mib(lambda: torch.ones(16 * 1024 * 1024, device=dev), dev)
    assert peak == pytest.approx(64, rel=0.01)
