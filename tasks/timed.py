"""What the timed tasks (throughput, decode) share: one timing against its reference kernel
under the task's steadiness settings, and what a record keeps of how that timing went.

Both tasks time a kernel in alternating rounds with a reference on the same inputs
(`harness.timing.time_call`) and take the same settings (``min_samples``, ``min_run_time``,
``steady_rtol``, ``steady_max_rel_iqr``, ``max_timing_s``), so that a timing means the same
thing in both; their metrics differ (a forward call, a generated token) and stay with them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from attnbench import JobContext, Task
from attnbench.harness.timing import FEWEST_SAMPLES, Timing, time_call


def check_timing_settings(task: Task) -> None:
    """Refuse timing settings the steadiness rule cannot use, each in one sentence."""
    if task.params.min_samples < FEWEST_SAMPLES:
        raise ValueError(
            f"task.min_samples must be >= {FEWEST_SAMPLES} (the steadiness rule compares two "
            f"halves of at least two samples), got {task.params.min_samples}."
        )
    task.require_finite("min_run_time", "steady_rtol", "steady_max_rel_iqr", above=0)
    task.require_finite("max_timing_s", at_least=0)


def time_against(
    fn: Callable[[], object], reference: Callable[[], object], ctx: JobContext, params: Any
) -> Timing:
    """Time ``fn`` against ``reference`` in alternating rounds, with the machine check and the
    steadiness settings of the task's ``params``."""
    return time_call(
        fn,
        reference=reference,
        device=ctx.device,
        num_threads=ctx.threads,
        min_samples=params.min_samples,
        min_run_time=params.min_run_time,
        rtol=params.steady_rtol,
        max_rel_iqr=params.steady_max_rel_iqr,
        max_time_s=params.max_timing_s,
    )


def timing_details(timing: Timing) -> dict[str, object]:
    """What the record keeps of how a timing went (its samples are kept apart); an unknown
    reading is null."""
    details = {
        "steady": timing.steady,
        "samples_judged": timing.n_samples,
        "samples_taken": timing.n_taken,
        "sampling_s": round(timing.sampling_s, 4),
        "halves_gap": timing.halves_gap,
        "rel_iqr": timing.rel_iqr,
        "unsteady_reasons": list(timing.reasons),
        "probe_before_ms": timing.probe_before_ms,
        "probe_after_ms": timing.probe_after_ms,
        "load_avg": timing.load_avg,
    }
    return {
        k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in details.items()
    }
