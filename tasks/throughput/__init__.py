"""Throughput: forward (and forward+backward) latency and peak memory of one variant at one size.

Before anything is timed, the forward is checked against the variant's own materialised weights
(out == A·V) at n = min(seq_len, 512): a variant that computes the wrong thing fails the job
rather than posting a speed.

The variant core alone is timed on random q of shape (B, H, N, D) and k, v of (B, H_kv, N, D),
built outside the timed region. ``n_kv_heads`` < H times grouped-query (multi-query at 1)
attention: a variant that shares keys and values natively (``grouped_query``) gets them so, any
other has them repeated to H heads when called (`attnbench.variant`), and dense SDPA, the
reference of the ratio, takes its grouped-query path. FLOPs do not change with H_kv (every
query head still scores its keys); memory and key/value traffic do.

Timing method: `attnbench.toolkit.timing`; memory method: `attnbench.toolkit.memory`. FLOPs follow
each variant's `forward_flops` (the FlashAttention convention for dense attention); a backward pass
is counted as 2.5× the forward, as in the FlashAttention benchmarks.

**Ranked by a ratio, not by a time.** Every timing alternates rounds of the variant with rounds
of dense `F.scaled_dot_product_attention` on the same q, k, v (same shape, dtype, device and
causal flag), in the same process (`attnbench.toolkit.timing`, step 7): ``fwd_ratio`` (and
``fwd_bwd_ratio``) is the variant's time over dense SDPA's, and is the task's headline. A busy
machine slows both alike, so the ratio survives it where an absolute time does not; the absolute
median (``fwd_ms``) is recorded and shown beside it, and feeds the scaling fits of one machine.

**Accuracy beside every timing.** Before timing, the forward runs at n = min(seq_len, 512) with the
same parameters in the timed dtype and in float64 (the reference): ``max_abs_error`` and
``rms_error`` on unit-normal inputs, ``outlier_max_abs_error`` on FlashAttention-3's outlier
inputs (N(0, 1) plus N(0, 100) at a random 0.1 % of the entries). ``fwd_accurate`` says whether
the normal-input error, over max(1, max |reference|), is within the variant's declared tolerance
for the dtype (`AttentionVariant.error_tolerance`); the task declares it for every timed metric
(`accuracy`), so a fast wrong kernel is marked on the board and enters no contest.

**Gradients checked like outputs.** With ``backward`` (the default), the q, k, v and gate
gradients of one random cotangent are computed in the timed dtype and in float64 at the same
size: ``grad_error`` is the largest, each over max(1, max |its float64 gradient|), and
``fwd_bwd_accurate`` says whether the forward and every gradient are within the variant's
declared tolerances (`AttentionVariant.backward_tolerance`); the forward+backward timings are
judged by it (`accuracy`), so a fast wrong backward is marked and enters no contest.

**FLOPs and the machine's peak.** ``gflops_fwd`` is the variant's declared forward FLOPs
(`AttentionVariant.forward_flops`: the pairs it scores, the FlashAttention convention for dense
attention) over the median time. ``peak_gflops`` is the machine's matmul rate measured in the same
process beside the timing: the calibration GEMM of `attnbench.toolkit.timing` (1024² float32 on CPU,
4096² bfloat16 on CUDA), its fastest call before or after the forward samples; a busy machine slows
it as it slows the variant, so ``peak_fraction`` = gflops_fwd / peak_gflops survives the load as the
ratio does.

**A busy machine is flagged.** Each timing is bracketed by the calibration GEMM and by the CPU
time other processes used meanwhile (`attnbench.toolkit.timing`, step 6): ``fwd_probe_drift``,
``fwd_foreign_cpu`` and ``load_avg`` are recorded, and a reading over its threshold sets the
timing's steadiness flag to 0 with the reason in the record's details.

**CUDA graphs.** With ``cuda_graph`` (CUDA only) both timed calls, the variant's and dense SDPA's,
are captured once and replayed (`attnbench.toolkit.timed.graphed`): a chunked mixer's Python loop
launches small kernels whose launching, not running, an eager GPU timing measures.

Each timing samples until its samples are steady or ``max_timing_s`` has passed (the rule and its
defaults: `attnbench.toolkit.timing`). ``fwd_steady`` / ``fwd_bwd_steady`` record the verdict (1.0
or 0.0), ``*_ms_rel_iqr`` the spread, ``*_samples`` the samples behind the median; the record's
details keep, per timing, the samples taken in all and the seconds spent. The task declares which
metrics each flag covers (`steadiness`): the leaderboard marks those values and leaves them out of
its ranks when the flag is 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F

from attnbench import (
    JobContext,
    Metric,
    ScalingFit,
    Task,
    TaskResult,
    UnsupportedError,
    VariantShape,
    random_gates,
    register_task,
    repeat_kv_heads,
)
from attnbench.metrics import DENSITY
from attnbench.tasks.throughput.packed import drawn_lengths, packed_timing
from attnbench.toolkit import kernel_path
from attnbench.toolkit.contract import checked_weights
from attnbench.toolkit.memory import isolated_cpu_peak, peak_memory_mib
from attnbench.toolkit.timed import (
    Measurement,
    TimingParams,
    check_timing_settings,
    error_metrics,
    first_call,
    gemm_gflops,
    gradient_errors,
    graphed,
    kernel_errors,
    time_against,
    timed_inputs,
)
from attnbench.variant import build_variant  # the registry's (in a probe: `at_probe_start`)


@dataclass
class ThroughputParams(TimingParams):
    """Hyperparameters of the `throughput` task."""

    seq_len: int = 512  # N = M, tokens per sequence
    batch_size: int = 1  # B
    n_heads: int = 4  # H (query heads)
    # key/value heads (grouped-query; 1: multi-query), dividing n_heads; None: n_heads
    n_kv_heads: int | None = None
    head_dim: int = 64  # D = Dv
    causal: bool = False  # time the causal form
    # also time forward+backward (w.r.t. q, k, v and the variant's parameters)
    backward: bool = True
    # documents packed into one causal sequence of their sum, timed against the padded batch
    # (tasks/throughput/packed.py); None: one sequence of seq_len. seq_len then is their sum
    doc_lengths: list[int] | None = None
    # or documents of log-normal lengths (median doc_median tokens, log-spread doc_sigma) drawn
    # from the job's seed and packed into seq_len, the last cut to fit (packed.drawn_lengths)
    doc_median: int | None = None
    doc_sigma: float = 1.0
    # on CUDA, time each call (the variant's and dense SDPA's) replayed as a CUDA graph, the host's
    # kernel launches taken out (attnbench.toolkit.timed.graphed); elsewhere the job is unsupported
    cuda_graph: bool = False


@register_task("throughput")
class Throughput(Task):
    """Latency, achieved FLOP/s, tokens/s and peak memory of the attention core."""

    Params = ThroughputParams
    description = "Speed and memory of the attention core at one size."
    label = "Throughput (attention core)"
    axes = (
        Metric("seq_len", None, "Sequence length", "tokens", label="sequence length"),
        Metric("fwd_kernel_path", None, "Which kernel the forward timing ran", label="kernel path"),
        Metric("n_kv_heads", None, "Key-value heads (grouped-query)", label="key-value heads"),
    )
    headline = "fwd_ratio"  # ranked by the interleaved ratio to dense SDPA (module docstring)
    charts = ("fwd_ratio", "fwd_ms", "peak_mem_mib", "fwd_bwd_ms")
    # the leaderboard draws every task's quality against this cost: a ratio measured in one
    # process compares across runs and machines, an absolute time does not
    cost_metric = "fwd_ratio"
    # how latency grows with length, and where each variant overtakes dense softmax
    scaling_fits = (ScalingFit("fwd_ms", "seq_len", reference_variant="softmax"),)
    # each timed metric (and those computed from it) → the 0/1 metric saying its timing was steady
    steadiness = {
        "fwd_ms": "fwd_steady",
        "fwd_ratio": "fwd_steady",
        "gflops_fwd": "fwd_steady",
        "peak_fraction": "fwd_steady",
        "tokens_per_s": "fwd_steady",
        "fwd_bwd_ms": "fwd_bwd_steady",
        "fwd_bwd_ratio": "fwd_bwd_steady",
        "packed_ms": "packed_steady",
        "packed_ratio": "packed_steady",
    }
    # each timed metric → the 0/1 metric saying the timed kernel computed within its tolerance
    # (a forward+backward timing: forward and gradients within their tolerances)
    # (a packed timing has no flag: a packed call that leaks fails its job, packed.py)
    accuracy = {
        metric: "fwd_accurate" if flag == "fwd_steady" else "fwd_bwd_accurate"
        for metric, flag in steadiness.items()
        if flag != "packed_steady"
    }
    # which kernel each forward timing ran, beside its values on the board
    annotations = {
        metric: "fwd_kernel_path" for metric, flag in steadiness.items() if flag == "fwd_steady"
    }
    metrics = (
        Metric(
            "fwd_ratio",
            False,
            "Forward time / dense SDPA's at the same shape, timed in alternating rounds in the "
            "same process (median over the samples); a load slows both alike",
            "× SDPA",
            label="forward time relative to dense SDPA",
        ),
        Metric(
            "fwd_ref_ms",
            None,
            "Dense SDPA's forward time in the same rounds, median",
            "ms",
            label="dense SDPA forward time",
        ),
        Metric(
            "fwd_ms",
            False,
            "Forward latency per call, median of the samples",
            "ms",
            label="forward latency",
        ),
        Metric(
            "fwd_ms_iqr",
            None,
            "Interquartile range of the forward latency samples",
            "ms",
            label="forward latency, interquartile range",
        ),
        Metric(
            "fwd_bwd_ms",
            False,
            "Forward+backward latency per call, median",
            "ms",
            label="forward+backward latency",
        ),
        Metric(
            "fwd_bwd_ratio",
            False,
            "Forward+backward time / dense SDPA's forward+backward, alternating rounds",
            "× SDPA",
            label="forward+backward time relative to dense SDPA",
        ),
        Metric(
            "fwd_bwd_ref_ms",
            None,
            "Dense SDPA's forward+backward time, median",
            "ms",
            label="dense SDPA forward+backward time",
        ),
        Metric(
            "fwd_bwd_ms_iqr",
            None,
            "IQR of the forward+backward latency samples",
            "ms",
            label="forward+backward latency, interquartile range",
        ),
        Metric(
            "peak_mem_mib",
            False,
            "Peak extra memory of one forward call",
            "MiB",
            label="peak extra memory",
        ),
        Metric(
            "gflops_fwd",
            True,
            "Achieved forward GFLOP/s: the variant's declared forward FLOPs (the pairs it scores) "
            "over the median time",
            "GFLOP/s",
            label="achieved forward rate",
        ),
        Metric(
            "peak_gflops",
            None,
            "The machine's matmul rate beside the timing: the calibration GEMM's fastest call "
            "(1024² float32 on CPU, 4096² bfloat16 on CUDA)",
            "GFLOP/s",
            label="machine's matmul rate",
        ),
        Metric(
            "peak_fraction",
            True,
            "gflops_fwd / peak_gflops: the share of the machine's matmul rate the kernel reaches",
            label="share of the machine's matmul rate",
        ),
        Metric(
            "max_abs_error",
            None,  # judged by the accuracy flag, not compared
            "Largest |error| of the forward in the timed dtype against float64, unit-normal "
            "inputs, n = min(seq_len, 512)",
            label="largest error against float64",
        ),
        Metric(
            "rms_error",
            None,
            "Root-mean-square error of the same forward against float64",
            label="RMS error against float64",
        ),
        Metric(
            "outlier_max_abs_error",
            None,  # judged by the accuracy flag, not compared
            "Largest |error| against float64 on FlashAttention-3's outlier inputs (N(0, 1) plus "
            "N(0, 100) at 0.1 % of the entries)",
            label="largest error on outlier inputs",
        ),
        Metric(
            "fwd_accurate",
            None,
            "1: max_abs_error / max(1, max |reference|) is within the variant's declared "
            "tolerance for the dtype; 0: not (its timings are marked and enter no contest)",
            label="forward within tolerance?",
        ),
        Metric(
            "grad_error",
            None,  # judged by the accuracy flag, not compared
            "Largest error of the q, k, v and gate gradients in the timed dtype against float64 "
            "(each over max(1, max |its float64 gradient|)), one random cotangent, n = "
            "min(seq_len, 512)",
            label="largest gradient error against float64",
        ),
        Metric(
            "fwd_bwd_accurate",
            None,
            "1: the forward and every gradient within the variant's declared tolerances for the "
            "dtype; 0: not (its forward+backward timings are marked and enter no contest)",
            label="forward and gradients within tolerance?",
        ),
        Metric(
            "tokens_per_s",
            True,
            "Forward tokens per second (B·N / latency)",
            "tokens/s",
            label="forward tokens per second",
        ),
        Metric(
            "first_call_ms",
            False,
            "Latency of the very first call (init, compile)",
            "ms",
            label="first call latency",
        ),
        Metric(
            "fwd_samples",
            None,
            "Number of forward timing samples behind the median",
            label="forward timing samples",
        ),
        Metric(
            "fwd_ms_rel_iqr",
            None,
            "IQR / median of the forward samples behind the median",
            label="forward timing spread (IQR / median)",
        ),
        Metric(
            "fwd_steady",
            None,
            "1: the forward samples settled and the machine was quiet (attnbench.toolkit.timing); "
            "0: not (the record's details say why)",
            label="forward timing steady?",
        ),
        Metric(
            "fwd_probe_drift",
            None,
            "Relative change of the calibration GEMM from before to after the forward timing",
            label="calibration drift over the forward timing",
        ),
        Metric(
            "fwd_foreign_cpu",
            None,
            "Share of the job's CPUs used by other processes during the forward timing",
            label="other processes' CPU share, forward timing",
        ),
        Metric(
            "load_avg",
            None,
            "1-minute load average when the forward timing ended",
            label="load average (1 minute)",
        ),
        Metric(
            "fwd_bwd_samples",
            None,
            "Number of forward+backward samples behind the median",
            label="forward+backward timing samples",
        ),
        Metric(
            "fwd_bwd_ms_rel_iqr",
            None,
            "IQR / median of the forward+backward samples",
            label="forward+backward timing spread (IQR / median)",
        ),
        Metric(
            "fwd_bwd_steady",
            None,
            "1: the forward+backward samples settled and the machine was quiet; 0: not",
            label="forward+backward timing steady?",
        ),
        Metric(
            "fwd_bwd_probe_drift",
            None,
            "Calibration GEMM drift over the fwd+bwd timing",
            label="calibration drift over the forward+backward timing",
        ),
        Metric(
            "fwd_bwd_foreign_cpu",
            None,
            "Other processes' CPU share during the fwd+bwd timing",
            label="other processes' CPU share, forward+backward timing",
        ),
        *(
            Metric(name, better, what, unit or "", label=label)
            for name, better, what, unit, label in (
                (
                    "packed_ms",
                    False,
                    "Packed call's time, median (task.doc_lengths)",
                    "ms",
                    "packed documents' time",
                ),
                (
                    "packed_ratio",
                    False,
                    "Packed time / the padded batch's, alternating rounds",
                    "× padded",
                    "packed time relative to the padded batch",
                ),
                (
                    "packed_ref_ms",
                    None,
                    "The padded batch's time in the same rounds, median",
                    "ms",
                    "padded batch's time",
                ),
                (
                    "packed_ms_iqr",
                    None,
                    "IQR of the packed samples",
                    "ms",
                    "packed time, interquartile range",
                ),
                (
                    "packed_ms_rel_iqr",
                    None,
                    "IQR / median of the packed samples",
                    None,
                    "packed timing spread (IQR / median)",
                ),
                ("packed_samples", None, "Packed timing samples", None, "packed timing samples"),
                (
                    "packed_steady",
                    None,
                    "1: the packed samples settled, the machine quiet",
                    None,
                    "packed timing steady?",
                ),
                (
                    "packed_probe_drift",
                    None,
                    "Calibration drift over the packed timing",
                    None,
                    "calibration drift over the packed timing",
                ),
                (
                    "packed_foreign_cpu",
                    None,
                    "Other processes' CPU share, packed timing",
                    None,
                    "other processes' CPU share, packed timing",
                ),
                (
                    "packed_error",
                    None,
                    "Packed outputs against each document alone, over "
                    "max(1, max |alone|), in the timed dtype",
                    None,
                    "packed against documents alone, largest error",
                ),
                (
                    "padded_fraction",
                    None,
                    "Share of the padded batch that is padding",
                    None,
                    "padding share of the padded batch",
                ),
                (
                    "boundaries_ms",
                    None,
                    "Time to check the lengths and build cu_seqlens, what every packed call builds",
                    "ms",
                    "document boundaries' build time",
                ),
                (
                    "document_mask_ms",
                    None,
                    "Time to build the dense N×N document mask a masked dense kernel would need",
                    "ms",
                    "dense document mask's build time",
                ),
            )
        ),
        DENSITY,
    )

    def check(self) -> None:
        """Refuse sizes below 1 and timing settings the steadiness rule cannot use, each with
        one sentence."""
        self.require_positive("seq_len", "batch_size", "n_heads", "head_dim")
        if self.params.n_kv_heads is not None:
            self.require_positive("n_kv_heads")
            self.require_divides("n_kv_heads", "n_heads")
        check_timing_settings(self)
        if self.params.doc_lengths is not None:
            self._check_documents()
        if self.params.cuda_graph and (
            self.params.doc_lengths is not None or self.params.doc_median is not None
        ):
            raise ValueError(
                "task.cuda_graph=true replays one sequence's calls, not the packed documents' "
                "(task.doc_lengths / task.doc_median): drop one of them."
            )
        if self.params.doc_median is not None:
            self._check_drawn_documents()
        elif self.params.doc_sigma != 1.0:
            raise ValueError(
                f"task.doc_sigma={self.params.doc_sigma} spreads drawn documents, but none are "
                "drawn: add task.doc_median (e.g. task.doc_median=256) or drop task.doc_sigma."
            )

    def _check_documents(self) -> None:
        """Packed documents: whole lengths >= 1 and a seq_len that is their sum (or left at its
        default, which then means their sum)."""
        p = self.params
        lengths = list(p.doc_lengths)
        if not lengths or any(int(x) != x or x < 1 for x in lengths):
            raise ValueError(
                f"task.doc_lengths={lengths} must list whole document lengths >= 1, e.g. "
                "task.doc_lengths=[512,1024,2560]."
            )
        total = int(sum(lengths))
        default = next(f.default for f in fields(ThroughputParams) if f.name == "seq_len")
        if p.seq_len not in (total, default):
            raise ValueError(
                f"task.doc_lengths sum to {total} tokens but task.seq_len={p.seq_len}: drop "
                f"task.seq_len (it becomes the sum) or set it to {total}."
            )
        p.doc_lengths = [int(x) for x in lengths]
        p.seq_len = total

    def _check_drawn_documents(self) -> None:
        """Drawn documents: a whole median >= 1, a finite spread >= 0, no list beside them."""
        p = self.params
        if p.doc_lengths is not None:
            raise ValueError(
                "task.doc_lengths and task.doc_median both set: list the documents or draw "
                "them, not both."
            )
        if int(p.doc_median) != p.doc_median or p.doc_median < 1:
            raise ValueError(
                f"task.doc_median={p.doc_median} must be a whole number of tokens >= 1, e.g. "
                "task.doc_median=256."
            )
        if not math.isfinite(p.doc_sigma) or p.doc_sigma < 0:
            raise ValueError(
                f"task.doc_sigma={p.doc_sigma} must be a finite number >= 0 (the spread of the "
                "lengths' logarithm; 0: every document doc_median long), e.g. task.doc_sigma=1."
            )

    def density_size(self) -> tuple[int, int, bool]:
        """The timed attention: seq_len queries and keys."""
        return self.params.seq_len, self.params.seq_len, self.params.causal

    def measure(self, ctx: JobContext) -> TaskResult:
        p = self.params
        if p.cuda_graph and ctx.device.type != "cuda":  # before anything is built or checked
            raise UnsupportedError(
                f"task.cuda_graph=true replays the timed calls as CUDA graphs, which needs "
                f"device=cuda (this job runs on {ctx.device.type}): drop task.cuda_graph off a GPU."
            )
        variant = ctx.build_variant(VariantShape(p.n_heads, p.head_dim, p.seq_len, p.n_kv_heads))
        if p.doc_lengths is not None or p.doc_median is not None:  # packed against padded only
            lengths = p.doc_lengths or drawn_lengths(
                p.seq_len, p.doc_median, p.doc_sigma, ctx.generator(23)
            )
            values, details = packed_timing(variant, p, lengths, ctx)
            # a reading the platform does not give (NaN) is left out, as in every timed record
            return Measurement("seq_len", p.seq_len, values, details).result()
        kv = variant.shape.kv_heads
        gen = ctx.generator()
        shape = (p.batch_size, p.n_heads, p.seq_len, p.head_dim)
        q, k, v, gates = timed_inputs(
            variant, ctx, p.batch_size, p.n_heads, kv, p.seq_len, p.head_dim, gen
        )
        gqa = kv != p.n_heads  # dense SDPA's grouped-query path

        def forward() -> torch.Tensor:
            with torch.no_grad():
                return variant(q, k, v, causal=p.causal, gates=gates)

        def dense_forward() -> torch.Tensor:
            with torch.no_grad():
                return F.scaled_dot_product_attention(q, k, v, is_causal=p.causal, enable_gqa=gqa)

        paths = first_call("forward output", forward)  # which kernels the timed call runs
        correctness = check_against_weights(variant, p, ctx)
        accuracy, accuracy_details = error_metrics(
            forward_errors(variant, p, ctx), variant, ctx.dtype, "fwd_accurate"
        )
        fwd = time_against(*self._timed(forward, dense_forward, "the forward", ctx), ctx, p)
        if ctx.device.type == "cuda":
            peak = peak_memory_mib(forward, ctx.device)
        else:  # a fresh variant and inputs in the memory-probe process (attnbench.toolkit.memory)
            peak = isolated_cpu_peak(
                forward_peak_mib,
                ctx.variant_name,
                ctx.variant_params,
                shape,
                str(ctx.dtype).removeprefix("torch."),
                ctx.seed,
                p.causal,
                False,  # forward only
                kv,
            )
        flops = variant.forward_flops(
            p.batch_size, p.n_heads, p.seq_len, p.seq_len, p.head_dim, p.head_dim, p.causal
        )
        achieved = flops / (fwd.median_ms * 1e-3) / 1e9
        fastest_probe_ms = min(fwd.probe_before_ms, fwd.probe_after_ms)
        machine_peak = gemm_gflops(ctx.device, fastest_probe_ms)
        record = Measurement("seq_len", p.seq_len)
        record.add_timing("fwd", fwd, samples="fwd_samples_ms")
        record.values.update(
            {
                **accuracy,
                "peak_mem_mib": peak,
                "gflops_fwd": achieved,
                "peak_gflops": machine_peak,
                "peak_fraction": achieved / machine_peak,
                "tokens_per_s": p.batch_size * p.seq_len / (fwd.median_ms * 1e-3),
                "first_call_ms": fwd.first_call_ms,
                "density": variant.density(*self.density_size()),
                "load_avg": fwd.load_avg,
            }
        )
        record.details.update(
            {
                "fwd_kernel_path": kernel_path.described(paths)
                + (", replayed as a CUDA graph" if p.cuda_graph else ""),
                "fwd_tuned": dict(paths.tuned),  # the configurations chosen on this machine
                "forward_flops": flops,
                "backward_flops": variant.backward_flops(
                    p.batch_size, p.n_heads, p.seq_len, p.seq_len, p.head_dim, p.head_dim, p.causal
                ),
                **accuracy_details,
                "correctness_check": correctness,
                "kv_heads": kv,
            }
        )
        if p.backward:
            backward, backward_details = backward_accuracy(variant, p, ctx, accuracy)
            record.values.update(backward)
            record.details.update(backward_details)
            qg, kg, vg = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
            grad = torch.randn(shape, generator=gen).to(device=ctx.device, dtype=ctx.dtype)

            def forward_backward() -> None:
                out = variant(qg, kg, vg, causal=p.causal, gates=gates)
                out.backward(grad)
                for t in (qg, kg, vg, *variant.parameters()):
                    t.grad = None

            def dense_forward_backward() -> None:
                F.scaled_dot_product_attention(
                    qg, kg, vg, is_causal=p.causal, enable_gqa=gqa
                ).backward(grad)
                for t in (qg, kg, vg):
                    t.grad = None

            timed = self._timed(forward_backward, dense_forward_backward, "the fwd+bwd", ctx)
            bwd = time_against(*timed, ctx, p)
            record.add_timing("fwd_bwd", bwd, samples="fwd_bwd_samples_ms")
        return record.result()

    def _timed(
        self, call: Callable[[], object], dense: Callable[[], object], what: str, ctx: JobContext
    ) -> tuple[Callable[[], object], Callable[[], object]]:
        """The two calls to time: as they are, or with ``cuda_graph`` each captured once and
        replayed (`attnbench.toolkit.timed.graphed`), so the ratio compares replay with replay.
        (`measure` refuses it off CUDA before anything runs.)"""
        if not self.params.cuda_graph:
            return call, dense
        return graphed(what, call, ctx.device), graphed("dense SDPA", dense, ctx.device)


def forward_peak_mib(
    variant: str,
    variant_params: dict,
    shape: tuple[int, int, int, int],
    dtype: str,
    seed: int,
    causal: bool,
    backward: bool = False,
    kv_heads: int | None = None,
) -> float | None:
    """Peak memory of one forward call of ``variant`` on CPU inputs of ``shape`` (B, H, N, D)
    (keys and values with ``kv_heads`` heads, default H), or with ``backward`` of one
    forward+backward call (what training at this length holds: activations and gradients).

    Runs in the memory-probe process: the variant and inputs are built there, outside the
    measured region.
    """
    b, h, n, d = shape
    dt = getattr(torch, dtype)
    kv = kv_heads or h
    module = build_variant(variant, variant_params, VariantShape(h, d, n, kv_heads)).to(dt)
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (
        torch.randn(b, heads, n, d, generator=gen).to(dt).requires_grad_(backward)
        for heads in (h, kv, kv)
    )
    gates = {
        name: g.to(dt) for name, g in random_gates(module, b, n, head_dim=d, kv_heads=kv).items()
    }
    grad = torch.randn(shape, generator=gen).to(dt) if backward else None

    def call() -> None:
        if not backward:
            with torch.no_grad():
                module(q, k, v, causal=causal, gates=gates)
            return
        module(q, k, v, causal=causal, gates=gates).backward(grad)
        for t in (q, k, v, *module.parameters()):
            t.grad = None

    call()  # one-off allocations (thread pools, caches) are not the variant's
    return peak_memory_mib(call, torch.device("cpu"))


CHECK_LEN = 512  # sequence length of the correctness check (long enough for sparse paths)


def check_against_weights(variant, p: ThroughputParams, ctx: JobContext) -> str:
    """Before a speed is recorded, check the forward against the variant's own materialised
    weights (out == A·V) at a small size, in float32 on the job's device.

    Returns what was checked; raises `ValueError` if they disagree, so the job fails instead of
    reporting the speed of a wrong result.
    """
    n = min(p.seq_len, CHECK_LEN)
    gen = ctx.generator(7)
    kv = variant.shape.kv_heads
    q, k, v = (
        torch.randn(1, heads, n, p.head_dim, generator=gen).to(ctx.device)
        for heads in (p.n_heads, kv, kv)
    )
    reference = variant.float()
    try:
        with torch.no_grad():  # the weights first: a variant without them skips the check
            repeated = repeat_kv_heads(k, p.n_heads)
            weights = checked_weights(
                variant, reference.attention_weights(q, repeated, causal=p.causal), q, repeated
            )
            gates = _on(random_gates(variant, 1, n, **_gate_shape(p, kv, gen)), ctx)
            out = reference(q, k, v, causal=p.causal, gates=gates)  # grouped, as timed
            v = repeat_kv_heads(v, p.n_heads)
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


def forward_errors(variant, p: ThroughputParams, ctx: JobContext) -> dict[str, float]:
    """`attnbench.toolkit.timed.kernel_errors` of the forward at n = min(seq_len, CHECK_LEN), with
    the job's shape and causal flag. The variant is converted to each dtype and back to the timed
    one (exact both ways: float64 holds every value of a narrower float)."""
    n = min(p.seq_len, CHECK_LEN)
    gen = ctx.generator(11)
    kv = variant.shape.kv_heads
    inputs = [
        torch.randn(1, heads, n, p.head_dim, generator=gen, dtype=torch.float64).to(ctx.device)
        for heads in (p.n_heads, kv, kv)
    ]

    # the gates stay unit normal (no outliers): they pick decays and step sizes, not scores
    gates = random_gates(variant, 1, n, **_gate_shape(p, kv, gen), dtype=torch.float64)

    def run(xs: list[torch.Tensor], dtype: torch.dtype) -> torch.Tensor:
        q, k, v = (x.to(ctx.device, dtype) for x in xs)
        on = {name: g.to(ctx.device, dtype) for name, g in gates.items()}
        return variant.to(dtype)(q, k, v, causal=p.causal, gates=on)

    try:
        return kernel_errors(run, inputs, ctx.dtype, gen)
    finally:
        variant.to(ctx.dtype)


def backward_accuracy(
    variant, p: ThroughputParams, ctx: JobContext, forward: dict[str, float]
) -> tuple[dict[str, float], dict[str, object]]:
    """The gradients' error beside a forward+backward timing (`attnbench.toolkit.timed.
    gradient_errors` at n = min(seq_len, CHECK_LEN), the job's shape and causal flag): the
    largest, ``grad_error``, and ``fwd_bwd_accurate`` = the forward (``forward``'s flag) and
    every gradient within the variant's declared tolerances. No reference in float64: neither."""
    n = min(p.seq_len, CHECK_LEN)
    gen = ctx.generator(13)
    kv = variant.shape.kv_heads
    inputs = {
        name: torch.randn(1, heads, n, p.head_dim, generator=gen, dtype=torch.float64)
        for name, heads in (("q", p.n_heads), ("k", kv), ("v", kv))
    }
    gates = random_gates(variant, 1, n, **_gate_shape(p, kv, gen), dtype=torch.float64)
    inputs.update({f"gate {name}": g for name, g in gates.items()})

    def run(xs: dict[str, torch.Tensor], dtype: torch.dtype) -> torch.Tensor:
        q, k, v = (xs[name].to(ctx.device) for name in ("q", "k", "v"))
        on = {name: xs[f"gate {name}"].to(ctx.device) for name in gates}
        return variant.to(dtype)(q, k, v, causal=p.causal, gates=on)

    try:
        errors = gradient_errors(run, inputs, ctx.dtype, gen)
    finally:
        variant.to(ctx.dtype)
        for parameter in variant.parameters():
            parameter.grad = None
    if "unmeasured" in errors:
        return {}, {"gradient_error": errors["unmeasured"]}
    worst = max(errors.values())
    within = variant.within_tolerance(worst, ctx.dtype, backward=True)
    values = {"fwd_bwd_accurate": float(within and forward.get("fwd_accurate", 1.0) == 1.0)}
    if math.isfinite(worst):
        values["grad_error"] = worst
    name = str(ctx.dtype).removeprefix("torch.")
    details = {
        "gradient_errors": errors,
        "backward_tolerance": variant.backward_tolerance.get(name),
    }
    return values, details


def _gate_shape(p: ThroughputParams, kv: int, gen: torch.Generator) -> dict:
    """`random_gates`' keywords for this job's heads (drawn from ``gen``, on the CPU)."""
    return {"head_dim": p.head_dim, "kv_heads": kv, "generator": gen}


def _on(gates: dict[str, torch.Tensor], ctx: JobContext) -> dict[str, torch.Tensor]:
    """Gates moved to the job's device and dtype."""
    return {name: g.to(device=ctx.device, dtype=ctx.dtype) for name, g in gates.items()}
