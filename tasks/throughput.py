"""Throughput: forward (and forward+backward) latency and peak memory of one variant at one size.

Before anything is timed, the forward is checked against the variant's own materialised weights
(out == A·V) at n = min(seq_len, 512): a variant that computes the wrong thing fails the job
rather than posting a speed.

The variant core alone is timed on random q, k, v of shape (B, H, N, D), built outside the timed
region. Timing method: `harness.timing`; memory method: `harness.memory`. FLOPs follow each
variant's `forward_flops` (the FlashAttention convention for dense attention); a backward pass is
counted as 2.5× the forward, as in the FlashAttention benchmarks.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attnbench import (
    JobContext,
    Metric,
    MetricPoint,
    ScalingFit,
    Task,
    TaskResult,
    VariantShape,
    build_variant,
    check_finite,
    register_task,
)
from attnbench.harness.discovery import load_plugins
from attnbench.harness.memory import isolated_cpu_peak, peak_memory_mib
from attnbench.harness.metrics import DENSITY
from attnbench.harness.timing import time_call


@dataclass
class ThroughputParams:
    """Hyperparameters of the `throughput` task."""

    seq_len: int = 512  # N = M, tokens per sequence
    batch_size: int = 1  # B
    n_heads: int = 4  # H
    head_dim: int = 64  # D = Dv
    causal: bool = False  # time the causal form
    backward: bool = (
        True  # also time forward+backward (w.r.t. q, k, v and the variant's parameters)
    )
    min_samples: int = 5  # at least this many timing samples
    min_run_time: float = 0.2  # seconds of steady-state timing per autorange round


@register_task("throughput")
class Throughput(Task):
    """Latency, achieved FLOP/s, tokens/s and peak memory of the attention core."""

    Params = ThroughputParams
    description = "Speed and memory of the attention core at one size."
    headline = "fwd_ms"
    charts = ("fwd_ms", "peak_mem_mib", "fwd_bwd_ms")
    cost_metric = "fwd_ms"  # the leaderboard draws every task's quality against forward latency
    # how latency grows with length, and where each variant overtakes dense softmax
    scaling_fits = (ScalingFit("fwd_ms", "seq_len", reference_variant="softmax"),)
    metrics = (
        Metric("fwd_ms", False, "Forward latency per call, median of the samples", "ms"),
        Metric("fwd_ms_iqr", None, "Interquartile range of the forward latency samples", "ms"),
        Metric("fwd_bwd_ms", False, "Forward+backward latency per call, median", "ms"),
        Metric("fwd_bwd_ms_iqr", None, "IQR of the forward+backward latency samples", "ms"),
        Metric("peak_mem_mib", False, "Peak extra memory of one forward call", "MiB"),
        Metric("gflops", True, "Achieved forward GFLOP/s (variant's own FLOP count)", "GFLOP/s"),
        Metric("tokens_per_s", True, "Forward tokens per second (B·N / latency)", "tokens/s"),
        Metric("first_call_ms", False, "Latency of the very first call (init, compile)", "ms"),
        Metric("fwd_samples", None, "Number of forward timing samples behind the median"),
        DENSITY,
    )

    def check(self) -> None:
        """Refuse sizes below 1 with one sentence."""
        self.require_positive("seq_len", "batch_size", "n_heads", "head_dim", "min_samples")
        self.require_finite("min_run_time", above=0)

    def density_size(self) -> tuple[int, int, bool]:
        """The timed attention: seq_len queries and keys."""
        return self.params.seq_len, self.params.seq_len, self.params.causal

    def run(self, ctx: JobContext) -> TaskResult:
        p = self.params
        variant = ctx.build_variant(VariantShape(p.n_heads, p.head_dim, p.seq_len))
        gen = ctx.generator()
        shape = (p.batch_size, p.n_heads, p.seq_len, p.head_dim)
        q, k, v = (
            torch.randn(shape, generator=gen).to(device=ctx.device, dtype=ctx.dtype)
            for _ in range(3)
        )

        def forward() -> torch.Tensor:
            with torch.no_grad():
                return variant(q, k, v, causal=p.causal)

        check_finite("forward output", forward())
        correctness = check_against_weights(variant, p, ctx)
        fwd = time_call(
            forward,
            device=ctx.device,
            num_threads=ctx.threads,
            min_samples=p.min_samples,
            min_run_time=p.min_run_time,
        )
        if ctx.device.type == "cuda":
            peak = peak_memory_mib(forward, ctx.device)
        else:  # a fresh variant and inputs in the memory-probe process (harness.memory)
            peak = isolated_cpu_peak(
                forward_peak_mib,
                ctx.variant_name,
                ctx.variant_params,
                shape,
                str(ctx.dtype).removeprefix("torch."),
                ctx.seed,
                p.causal,
            )
        flops = variant.forward_flops(
            p.batch_size, p.n_heads, p.seq_len, p.seq_len, p.head_dim, p.head_dim, p.causal
        )
        values: dict[str, float | None] = {
            "fwd_ms": fwd.median_ms,
            "fwd_ms_iqr": fwd.iqr_ms,
            "peak_mem_mib": peak,
            "gflops": flops / (fwd.median_ms * 1e-3) / 1e9,
            "tokens_per_s": p.batch_size * p.seq_len / (fwd.median_ms * 1e-3),
            "first_call_ms": fwd.first_call_ms,
            "density": variant.density(*self.density_size()),
        }
        values["fwd_samples"] = fwd.n_samples
        details = {
            "fwd_samples_ms": list(fwd.samples_ms),
            "forward_flops": flops,
            "correctness_check": correctness,
        }
        if p.backward:
            qg, kg, vg = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
            grad = torch.randn(shape, generator=gen).to(device=ctx.device, dtype=ctx.dtype)

            def forward_backward() -> None:
                out = variant(qg, kg, vg, causal=p.causal)
                out.backward(grad)
                for t in (qg, kg, vg, *variant.parameters()):
                    t.grad = None

            bwd = time_call(
                forward_backward,
                device=ctx.device,
                num_threads=ctx.threads,
                min_samples=p.min_samples,
                min_run_time=p.min_run_time,
            )
            values["fwd_bwd_ms"] = bwd.median_ms
            values["fwd_bwd_ms_iqr"] = bwd.iqr_ms
            details["fwd_bwd_samples_ms"] = list(bwd.samples_ms)
        points = [
            MetricPoint(name, value, "seq_len", p.seq_len)
            for name, value in values.items()
            if value is not None
        ]
        return TaskResult(points=points, details=details)


def forward_peak_mib(
    variant: str,
    variant_params: dict,
    shape: tuple[int, int, int, int],
    dtype: str,
    seed: int,
    causal: bool,
) -> float | None:
    """Peak memory of one forward call of ``variant`` on CPU inputs of ``shape`` (B, H, N, D).

    Runs in the memory-probe process: the variant and inputs are built there, outside the
    measured region.
    """
    load_plugins()
    b, h, n, d = shape
    module = build_variant(variant, variant_params, VariantShape(h, d, n)).to(getattr(torch, dtype))
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(shape, generator=gen).to(getattr(torch, dtype)) for _ in range(3))

    def forward() -> torch.Tensor:
        with torch.no_grad():
            return module(q, k, v, causal=causal)

    forward()  # one-off allocations (thread pools, caches) are not the variant's
    return peak_memory_mib(forward, torch.device("cpu"))


CHECK_LEN = 512  # sequence length of the correctness check (long enough for sparse paths)


def check_against_weights(variant, p: ThroughputParams, ctx: JobContext) -> str:
    """Before a speed is recorded, check the forward against the variant's own materialised
    weights (out == A·V) at a small size, in float32 on the job's device.

    Returns what was checked; raises `ValueError` if they disagree, so the job fails instead of
    reporting the speed of a wrong result.
    """
    n = min(p.seq_len, CHECK_LEN)
    gen = ctx.generator(7)
    q, k, v = (
        torch.randn(1, p.n_heads, n, p.head_dim, generator=gen).to(ctx.device) for _ in range(3)
    )
    reference = variant.float()
    try:
        with torch.no_grad():
            weights = reference.attention_weights(q, k, causal=p.causal)
            out = reference(q, k, v, causal=p.causal)
    except NotImplementedError:
        return "skipped: the variant cannot materialise its weights"
    finally:
        variant.to(ctx.dtype)
    error = float((out - weights @ v).abs().max())
    if not error <= 1e-4 * max(1.0, float(out.abs().max())):
        raise ValueError(
            f"forward disagrees with its attention weights at n={n}: "
            f"max error {error:.3g}; not timing a wrong result."
        )
    return f"forward == weights·V at n={n} (max error {error:.2g})"
