from __future__ import annotations

import signal
import sys
import warnings

import pytest
import torch

from attnbench.tasks.throughput import forward_peak_mib
from attnbench.toolkit.memory import isolated_cpu_peak, peak_memory_mib, release_probe


def _known_allocation() -> float:
    x = torch.ones(64 * 1024 * 1024 // 4)  # 64 MiB, written
    return float(x[-1])


def _known_allocation_peak() -> float | None:
    return peak_memory_mib(_known_allocation, torch.device("cpu"))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="CPU peak uses /proc (Linux)")
def test_cpu_peak_measures_a_known_allocation():
    """Measured where the product measures (the probe process, whose freed memory goes back to
    the kernel): in the test's own process glibc may hold a freed 64 MiB chunk from an earlier
    test in its heap and reuse those resident pages, which raises no high-water mark (0 MiB was
    read there, the caveat `attnbench.toolkit.memory` names)."""
    peak = isolated_cpu_peak(_known_allocation_peak)
    assert peak is not None
    # page-level accounting: the 64 MiB buffer plus at most a few MiB of interpreter noise
    assert 63 <= peak <= 72, peak
    # freed memory is returned (mmap threshold pinned), so a second run measures the same
    again = isolated_cpu_peak(_known_allocation_peak)
    assert 63 <= again <= 72, again


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_peak_measures_a_known_allocation():
    dev = torch.device("cuda")
    peak = peak_memory_mib(lambda: torch.ones(16 * 1024 * 1024, device=dev), dev)
    assert peak == pytest.approx(64, rel=0.01)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="CPU peak uses /proc (Linux)")
def test_probe_process_gives_the_same_reading_whatever_ran_before():
    """In a long-lived process glibc's heap hides reused pages (readings of 0 MiB were seen in
    sweeps); the probe process must read the same peak however much work preceded it."""
    args = ("window", {"window": 256}, (1, 4, 8192, 64), "float32", 0, True)
    first = isolated_cpu_peak(forward_peak_mib, *args)
    for _ in range(3):  # churn the probe's heap with other variants and sizes
        isolated_cpu_peak(forward_peak_mib, "softmax", {}, (1, 4, 4096, 64), "float32", 0, True)
        isolated_cpu_peak(forward_peak_mib, "decay", {}, (2, 4, 8192, 64), "float32", 0, True)
    again = isolated_cpu_peak(forward_peak_mib, *args)
    assert first is not None and first > 5  # tiles of the block-sparse engine are really there
    assert again == pytest.approx(first, abs=2.0)


def test_probe_process_ignores_ctrl_c():
    """A terminal's Ctrl-C reaches the probe too; the job's process decides what it means
    (harness.sweep.stop), so the probe must not die of it."""
    release_probe()  # a fresh probe, spawned by this call
    # Python's own handler here, whatever this process inherited (a runner started with nohup
    # or `&` from a script ignores SIGINT), so that "ours is back" means something
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        assert isolated_cpu_peak(signal.getsignal, signal.SIGINT) == signal.SIG_IGN
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # ours is back
    finally:
        release_probe()
        signal.signal(signal.SIGINT, inherited)


def test_probe_process_prints_no_warning(capfd):
    """The probe repeats what the job's process did and showed once (a plugin's warning, an
    invalid ATEN_CPU_CAPABILITY): a warning raised in it reaches no terminal."""
    release_probe()  # a fresh probe: its initializer runs again
    try:
        isolated_cpu_peak(warnings.warn, "a warning raised in the memory probe")
    finally:
        release_probe()
    assert "a warning raised in the memory probe" not in capfd.readouterr().err
