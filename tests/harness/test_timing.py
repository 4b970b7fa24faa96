from __future__ import annotations

import time

import torch

from attnbench.harness.timing import time_call


def test_first_call_is_reported_apart_from_steady_state():
    calls = []

    def work():
        if not calls:
            time.sleep(0.05)  # one-off initialisation
        calls.append(1)

    t = time_call(work, device=torch.device("cpu"), num_threads=1, min_samples=7, min_run_time=0.01)
    assert t.first_call_ms >= 50
    assert t.median_ms < 5  # steady-state calls do no sleeping
    assert t.n_samples >= 7 and len(t.samples_ms) == t.n_samples
    assert min(t.samples_ms) <= t.median_ms <= max(t.samples_ms)
    assert 0 <= t.iqr_ms <= max(t.samples_ms) - min(t.samples_ms)
