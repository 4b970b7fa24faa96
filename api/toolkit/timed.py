"""What the timed tasks (throughput, decode) share: one timing against its reference kernel
under the task's steadiness settings, what a record keeps of how that timing went, and the error
of the timed kernel beside it.

Both tasks time a kernel in alternating rounds with a reference on the same inputs
(`attnbench.toolkit.timing.time_call`) and take the same settings (``min_samples``,
``min_run_time``, ``steady_rtol``, ``steady_max_rel_iqr``, ``max_timing_s``), so that a timing means
the same thing in both; `timing_metrics` names what a timing gives the same way in both, per call
or, for decode, per generated token.

A job of either measures in the same steps: it draws its inputs (`timed_inputs`), calls the
kernel once, checked finite, noting which kernels ran (`first_call`), records the kernel's error
against float64 (`kernel_errors`, `error_metrics`), times it against its reference (`time_against`)
and records each timing and the values it derives into one `Measurement`, whose points are the
job's result. What each task times, and what it derives from a timing, is its own.

**A timed call replayed as a CUDA graph** (`graphed`, throughput's ``cuda_graph``): its kernel
launches recorded once, replayed as one. A chunked mixer's forward loops over its chunks in
Python, a few small kernels per chunk (256 chunks of 32 at 8k positions), so on a GPU its eager
time is mostly the host launching kernels, not the GPU running them, and it moves with the
host's speed and load (docs/speed.md, "On CUDA", measures both). A GPU user deploys such a loop
captured in a graph (`torch.compile`'s "reduce-overhead" mode captures one too); what a replay
costs is the kernels' own time. The reference is replayed the same way in the same job, so the
ratio compares replay with replay.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from attnbench.metrics import MetricPoint, TaskResult
from attnbench.task import JobContext, Task, check_finite
from attnbench.toolkit import kernel_path
from attnbench.toolkit.timing import FEWEST_SAMPLES, PROBE_SIZE, Timing, time_call
from attnbench.variant import UnsupportedError, random_gates

OUTLIER_RATE, OUTLIER_STD = 1e-3, 10.0  # FlashAttention-3's outliers: N(0, 100) at 0.1 %


def outlier_inputs(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """``x`` plus FlashAttention-3's outliers: N(0, 100) added at a random 0.1 % of the entries
    (their paper's test of low-precision attention on inputs with large, rare values)."""
    spikes = torch.randn(x.shape, generator=generator, dtype=x.dtype) * OUTLIER_STD
    hit = torch.rand(x.shape, generator=generator, dtype=x.dtype) < OUTLIER_RATE
    return x + (spikes * hit).to(x.device)  # drawn on the generator's device (the CPU)


def kernel_errors(
    run: Callable[[list[torch.Tensor], torch.dtype], torch.Tensor],
    inputs: list[torch.Tensor],
    dtype: torch.dtype,
    generator: torch.Generator,
) -> dict[str, float]:
    """The error of ``run`` in the timed ``dtype`` against ``run`` in float64, on the float64
    ``inputs`` (unit normal) and on the same plus FlashAttention-3's outliers.

    ``run(inputs, dtype)`` computes the outputs from inputs cast to ``dtype``. Returns
    ``max_abs_error`` and ``rms_error`` (normal inputs), ``outlier_max_abs_error``, and
    ``scale`` = max(1, max |reference|) on the normal inputs, by which a variant's declared
    tolerance is relative (`AttentionVariant.within_tolerance`). An error that is not finite
    (the timed dtype overflowed where float64 did not) is inf: within no tolerance. A kernel
    that refuses float64 (a library's half-precision-only kernel) has no reference here: the
    result is ``{"unmeasured": reason}``, and the job records no error and no flag.
    """
    results: dict[str, float] = {}
    for name, xs in (("", inputs), ("outlier_", [outlier_inputs(x, generator) for x in inputs])):
        with torch.no_grad():
            try:
                reference = run(xs, torch.float64)
            except (UnsupportedError, RuntimeError, NotImplementedError) as exc:
                return {"unmeasured": f"no float64 reference: {exc}"}
            error = (run(xs, dtype).double() - reference).abs()
        worst = float(error.max())
        results[f"{name}max_abs_error"] = worst if math.isfinite(worst) else math.inf
        if not name:
            rms = float(error.square().mean().sqrt())
            results["rms_error"] = rms if math.isfinite(rms) else math.inf
            results["scale"] = max(1.0, float(reference.abs().max()))
    return results


def gradient_errors(
    run: Callable[[dict[str, torch.Tensor], torch.dtype], torch.Tensor],
    inputs: dict[str, torch.Tensor],
    dtype: torch.dtype,
    generator: torch.Generator,
) -> dict[str, float]:
    """The error of the gradients of ``run`` in the timed ``dtype`` against float64's, for each
    of the named float64 ``inputs`` (q, k, v, the gates): ``run(leaves, dtype)`` computes the
    output from the inputs cast to ``dtype`` (leaves that require gradients), and the backward
    takes one standard-normal cotangent, the same in both dtypes.

    Returns name → max |g − g_float64| / max(1, max |g_float64|) (the scale of
    `AttentionVariant.backward_tolerance`); inf where the timed dtype's gradient is not finite
    and float64's is. A kernel that refuses float64 gives ``{"unmeasured": reason}``, as in
    `kernel_errors`. An input that does not reach the output has a zero gradient.
    """
    grads: dict[torch.dtype, dict[str, torch.Tensor]] = {}
    cotangent = None
    for dt in (torch.float64, dtype):
        leaves = {name: x.detach().to(dt).requires_grad_(True) for name, x in inputs.items()}
        try:
            out = run(leaves, dt)
        except (UnsupportedError, RuntimeError, NotImplementedError) as exc:
            if dt != torch.float64:
                raise
            return {"unmeasured": f"no float64 reference: {exc}"}
        if cotangent is None:
            cotangent = torch.randn(out.shape, generator=generator, dtype=torch.float64)
        out.backward(cotangent.to(device=out.device, dtype=dt))
        grads[dt] = {
            name: torch.zeros_like(leaf, dtype=torch.float64)
            if leaf.grad is None
            else leaf.grad.double()
            for name, leaf in leaves.items()
        }
    errors = {}
    for name, reference in grads[torch.float64].items():
        error = float((grads[dtype][name] - reference).abs().max())
        scale = max(1.0, float(reference.abs().max()))
        errors[name] = error / scale if math.isfinite(error) else math.inf
    return errors


def error_metrics(
    errors: dict, variant, dtype: torch.dtype, flag: str
) -> tuple[dict[str, float], dict[str, object]]:
    """The error metrics and accuracy flag ``flag`` of `kernel_errors`' result, and what the
    record's details keep: an infinite error is recorded as no value, with the reason; the
    flag is 0 for it; without a reference, neither metrics nor flag."""
    errors = dict(errors)
    if "unmeasured" in errors:
        return {}, {"kernel_error": errors["unmeasured"]}
    scale = errors.pop("scale")
    name = str(dtype).removeprefix("torch.")
    details: dict[str, object] = {
        "error_scale": scale,
        "error_tolerance": variant.error_tolerance.get(name),
    }
    overflowed = sorted(k for k, v in errors.items() if not math.isfinite(v))
    if overflowed:
        details["kernel_error"] = (
            f"{', '.join(overflowed)}: not finite in {name} where float64 is (an overflow)"
        )
    values = {k: v for k, v in errors.items() if math.isfinite(v)}
    within = variant.within_tolerance(errors["max_abs_error"] / scale, dtype)
    values[flag] = 1.0 if within else 0.0
    return values, details


# bytes the bandwidth calibration reads: far beyond any last-level cache (a CPU's is tens of
# MiB; an H100's L2 50 MiB), so that every byte comes from memory
BANDWIDTH_BYTES = {"cpu": 256 * 2**20, "cuda": 2**30}


def read_bandwidth_gbs(device: torch.device, repeats: int = 5) -> float:
    """The machine's memory read rate in GB/s (10⁹ bytes/s), measured now in this process: the
    fastest of ``repeats`` sums over a float32 buffer of `BANDWIDTH_BYTES` (written once
    first, so its pages are resident), each reading every byte once and writing one number.

    Why a sum: a decoding step reads its state (a KV cache, a D×Dv matrix) and writes little,
    so a read is the operation whose rate bounds it; a copy would count writes too (and
    write-allocate traffic that the STREAM convention leaves uncounted). Like the calibration
    GEMM, it runs beside the timing with the same threads, so a load that slows the step
    slows it too and their ratio survives."""
    elements = BANDWIDTH_BYTES.get(device.type, BANDWIDTH_BYTES["cpu"]) // 4
    buffer = torch.ones(elements, device=device)
    best = math.inf
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        buffer.sum()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        best = min(best, time.perf_counter() - start)
    del buffer
    return elements * 4 / best / 1e9


def gemm_gflops(device: torch.device, probe_ms: float) -> float:
    """GFLOP/s of the calibration GEMM (`attnbench.toolkit.timing.calibration_probe`: square,
    PROBE_SIZE of the device type) that took ``probe_ms``: 2·n³ products and sums."""
    n = PROBE_SIZE.get(device.type, PROBE_SIZE["cpu"])
    return 2.0 * n**3 / (probe_ms * 1e-3) / 1e9


@dataclass
class TimingParams:
    """The timing settings of a task that times kernels (throughput, decode), read by
    `check_timing_settings` and `time_against`: a task's params dataclass extends it."""

    # the smallest window of timing samples judged (>= 4; attnbench.toolkit.timing)
    min_samples: int = 10
    min_run_time: float = 0.2  # seconds of steady-state timing per autorange round
    steady_rtol: float = 0.05  # a steady window's halves have medians within this fraction
    steady_max_rel_iqr: float = 0.25  # and an IQR of at most this fraction of its median
    max_timing_s: float = 10.0  # seconds a timing samples before it is reported unsteady


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


WARM_CALLS = 3  # calls before the capture (torch's documentation warms with three)


def graphed(what: str, call: Callable[[], object], device: torch.device) -> Callable[[], None]:
    """``call`` captured once in a CUDA graph on ``device``; the returned function replays it.

    Warmed first on a side stream (`WARM_CALLS` calls, as torch's documentation does it:
    autotuners, lazy initialisation and the caching allocator settle outside the capture). The
    replay recomputes into the tensors the captured call allocated (the graph's private memory
    pool), so a caller that reads results reads them there; a timed call reads none. A call that
    needs the host at each run (a value read back with ``.item()``, a synchronisation) cannot be
    captured: `UnsupportedError` naming ``what`` (e.g. "the forward") and torch's reason, which a
    job records; off CUDA, where there are no graphs, `UnsupportedError` too."""
    if device.type != "cuda":
        raise UnsupportedError(
            f"{what} can be replayed as a CUDA graph on CUDA only, not {device}."
        )
    with torch.cuda.device(device):  # the capture is on the current device: make it the job's
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for _ in range(WARM_CALLS):
                call()
        torch.cuda.current_stream(device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                call()
        except (torch.OutOfMemoryError, UnsupportedError):
            raise  # out of memory is the job's `oom`; a refusal is the call's own
        except RuntimeError as err:  # torch's capture errors (AcceleratorError is one too)
            reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise UnsupportedError(f"{what} cannot be captured in a CUDA graph: {reason}") from err
        torch.cuda.synchronize(device)
    return graph.replay


def timing_metrics(
    prefix: str,
    timing: Timing,
    *,
    per: int = 1,
    median: str = "ms",
    spread: tuple[str, str] = ("ms_iqr", "ms_rel_iqr"),
) -> dict[str, float]:
    """The metrics of one timing, each named ``<prefix>_<name>``, its times divided by ``per``
    (decode: the tokens of a timed block, for per-token times).

    * ``median`` (default ``ms``): the median time;
    * ``spread`` (default ``ms_iqr``, ``ms_rel_iqr``): its IQR and IQR / median;
    * ``samples``: the samples behind them; ``steady``: the steadiness verdict (1.0 / 0.0);
    * ``ratio``, ``ref_ms``: the time over the reference's, and the reference's median time;
    * ``probe_drift``, ``foreign_cpu``: the busy-machine readings (`attnbench.toolkit.timing`).

    The names are parameters because they are public record metrics: throughput's forward is
    ``fwd_ms`` / ``fwd_ms_iqr``, decode's per-token time ``decode_ms_per_token`` / ``decode_iqr``.
    """
    iqr, rel_iqr = spread
    return {
        f"{prefix}_{median}": timing.median_ms / per,
        f"{prefix}_{iqr}": timing.iqr_ms / per,
        f"{prefix}_{rel_iqr}": timing.rel_iqr,
        f"{prefix}_samples": timing.n_samples,
        f"{prefix}_steady": 1.0 if timing.steady else 0.0,
        f"{prefix}_ratio": timing.ratio,
        f"{prefix}_ref_ms": timing.reference_ms / per,
        f"{prefix}_probe_drift": timing.probe_drift,
        f"{prefix}_foreign_cpu": timing.foreign_cpu,
    }


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


def timed_inputs(
    variant,
    ctx: JobContext,
    batch: int,
    heads: int,
    kv_heads: int,
    length: int,
    head_dim: int,
    generator: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """What a timed kernel runs on: standard-normal q of shape (batch, heads, length, head_dim),
    k and v of (batch, kv_heads, length, head_dim), and the variant's raw gates, standard normal
    too (`attnbench.variant.random_gates`; {} for an ungated variant).

    Drawn in that order from ``generator`` on the CPU, so a job's seed gives the same inputs on
    every device, then moved to the job's device and dtype, outside any timed region.
    """
    q, k, v = (
        torch.randn(batch, h, length, head_dim, generator=generator).to(
            device=ctx.device, dtype=ctx.dtype
        )
        for h in (heads, kv_heads, kv_heads)
    )
    gates = random_gates(
        variant, batch, length, head_dim=head_dim, kv_heads=kv_heads, generator=generator
    )
    return q, k, v, {name: g.to(device=ctx.device, dtype=ctx.dtype) for name, g in gates.items()}


def first_call(what: str, call: Callable[[], torch.Tensor]) -> kernel_path.Ran:
    """Call ``call`` once, without gradients, before it is timed: an output that is not finite
    fails the job (`attnbench.task.check_finite`, naming the output ``what``) instead of posting a
    speed. Returns the kernels the call ran (`attnbench.toolkit.kernel_path.recording`), which a
    record names beside its timing."""
    with torch.no_grad(), kernel_path.recording() as paths:
        check_finite(what, call())
    return paths


@dataclass
class Measurement:
    """The record of a timed job, filled as the job measures: its metric values, all at the point
    ``at`` of the task's axis ``axis``, and the details the record keeps.

    A value of None or NaN is one the job could not read (a memory probe that missed, a busy-machine
    reading the platform does not give): the record leaves it out rather than posting a number.
    """

    axis: str
    at: float
    values: dict[str, float | None] = field(default_factory=dict)
    details: dict[str, object] = field(default_factory=dict)

    def add_timing(
        self, prefix: str, timing: Timing, *, samples: str | None = None, **names: Any
    ) -> None:
        """Record one timing: its metrics (`timing_metrics` with ``prefix`` and ``names``: ``per``,
        ``median``, ``spread``), how it went under the details' ``<prefix>_timing``
        (`timing_details`) and, where ``samples`` names a details key, its samples there."""
        self.values.update(timing_metrics(prefix, timing, **names))
        self.details[f"{prefix}_timing"] = timing_details(timing)
        if samples is not None:
            self.details[samples] = list(timing.samples_ms)

    def result(self) -> TaskResult:
        """The job's result: one point per value read, along the task's axis, and the details."""
        points = [
            MetricPoint(name, float(value), self.axis, self.at)
            for name, value in self.values.items()
            if value is not None and not math.isnan(value)
        ]
        return TaskResult(points=points, details=self.details)
