"""Decode: what a variant costs at inference, one token at a time after a context of n tokens.

A job builds the variant's incremental form (`attnbench.IncrementalAttention`), prefills a
context of ``seq_len`` random tokens (the time to the first token, ``prefill_ms``), then
generates ``new_tokens`` more, one ``step`` each: the per-token latency ``decode_ms_per_token``,
the state one sequence holds after the context (``state_bytes``, counted from the tensors it
holds), and the peak memory of serving one batch of sequences of that length
(``decode_peak_mib``; a reading below the state the batch holds, which is known exactly, is not
recorded: the memory probe misses memory its process reuses, seen at small sizes). A variant
with no incremental form, or one that is not causal, is an ``unsupported`` record with the
reason.

Before anything is timed, the incremental form is checked against the variant's own causal
forward at a small size (prefill, then steps), in float32 on the job's device: a form that
computes something else fails the job instead of posting a speed, and so does one whose prefill
or step returns anything but (B, H, n, Dv) in the queries' dtype and device (`checked_output`,
on every decoded output there and on the first prefill and step of the timed batch). Its error
in the timed dtype against the same prefill and steps in float64 is recorded as in throughput
(``max_abs_error``, ``rms_error``, ``outlier_max_abs_error``;
`attnbench.toolkit.timed.kernel_errors`), and ``decode_accurate`` says whether it is within the
variant's declared tolerance: every timed metric is judged by it (`accuracy`), so the time of a
form that errs enters no contest.

**Against the machine's memory bandwidth.** Decoding is memory-bound: each step reads the state
the batch holds. ``step_bytes`` counts it exactly (the state's elements after each generated
token, from `IncrementalAttention.state_size`, × the element size × B, averaged over the block;
weights, the new token's q, k, v and the output are not counted: per step they are O(B·H·D),
the state O(B·H·n·D) for a cache). ``achieved_gbs`` is those bytes over the per-token latency,
``peak_gbs`` the machine's read rate measured beside the timing in the same process (a sum over
a buffer far beyond the caches, `attnbench.toolkit.timed.read_bandwidth_gbs`, the faster of the
readings before and after the samples), and ``bandwidth_fraction`` their ratio: near 1 the
step is bound by memory, far below it its time goes elsewhere (launches, Python, arithmetic);
above 1 the state is small enough to be served from the caches, not from memory.

**Ranked by a ratio, not by a time** (as throughput): every block of ``new_tokens`` steps
alternates, in the same process, with a block of bare SDPA calls of one query over the first
n + i keys of the same cache (what softmax decoding must compute, with no harness around it):
``decode_ratio`` is the variant's time over that, and is the headline. Softmax's own ratio is
therefore the overhead of its decoder (writing the cache, the call), and a linear-cost variant's
ratio falls as the context grows. The prefill alternates with dense causal SDPA over the same
n tokens (``prefill_ratio``).

**Each timed block starts from the same context**: the decoder's position is set back to n
before every block, so every sample generates the tokens n … n + m − 1. A KV cache overwrites
the same slots; a recurrent state keeps folding tokens in, which costs the same; the outputs of
timed blocks are not used. The prefill is timed only up to ``prefill_max_len`` tokens: beyond,
one prefill of a quadratic variant on a CPU takes seconds to minutes per sample, and the
throughput task times the same causal kernel.

Timing and steadiness: `attnbench.toolkit.timing`, as in the throughput task (``decode_steady`` and
``prefill_steady`` cover the metrics `steadiness` lists). The task declares a scaling fit of the
per-token latency along the context (exponent ≈ 0 for a state that does not grow, ≈ 1 for a KV
cache) with softmax as the reference: the crossover is the context from which a variant is
cheaper per token than softmax with a KV cache.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from attnbench import (
    JobContext,
    Metric,
    ScalingFit,
    Task,
    TaskResult,
    VariantShape,
    incremental_form,
    random_gates,
    register_task,
)
from attnbench.metrics import DENSITY
from attnbench.toolkit import kernel_path
from attnbench.toolkit.contract import mismatch
from attnbench.toolkit.memory import isolated_cpu_peak, peak_memory_mib
from attnbench.toolkit.timed import (
    Measurement,
    TimingParams,
    check_timing_settings,
    error_metrics,
    first_call,
    kernel_errors,
    read_bandwidth_gbs,
    time_against,
    timed_inputs,
)
from attnbench.variant import build_variant  # the registry's (in a probe: `at_probe_start`)

CHECK_LEN = 96  # tokens of the correctness check: several chunks, blocks and window lengths
CHECK_STEPS = 8  # of which the last ones come one step at a time


@dataclass
class DecodeParams(TimingParams):
    """Hyperparameters of the `decode` task."""

    seq_len: int = 1024  # n: tokens of context before the generated ones
    new_tokens: int = 16  # m: tokens generated per timed block (latency per token = block / m)
    batch_size: int = 1  # B: sequences decoded together
    n_heads: int = 4  # H (query heads)
    # key/value heads (grouped-query: each serves n_heads / n_kv_heads query heads, and the state
    # shrinks by that factor where the form shares them); None: n_heads. Must divide n_heads
    n_kv_heads: int | None = None
    head_dim: int = 64  # D = Dv
    prefill_max_len: int = 8192  # the prefill is timed up to this context (module docstring)


@register_task("decode")
class Decode(Task):
    """Per-token latency, prefill time, state size and peak memory of token-by-token decoding."""

    Params = DecodeParams
    description = "Inference: one token at a time after a context (latency, state, memory)."
    headline = "decode_ratio"
    label = "Decoding"
    axes = (
        Metric("seq_len", None, "Context length", "tokens", label="context length"),
        Metric("n_kv_heads", None, "Key-value heads (grouped-query)", label="key-value heads"),
        Metric(
            "decode_kernel_path", None, "Which kernel the decoding ran", label="decode kernel path"
        ),
        Metric(
            "prefill_kernel_path", None, "Which kernel the prefill ran", label="prefill kernel path"
        ),
    )
    cost_metric = "decode_ratio"
    # what a reader budgets when choosing for long-context decoding (the board's chooser)
    budgets = ("decode_ms_per_token", "state_bytes")
    # which kernels each timing ran (the run's details), beside its values on the board
    annotations = {
        "decode_ms_per_token": "decode_kernel_path",
        "decode_ratio": "decode_kernel_path",
        "prefill_ms": "prefill_kernel_path",
    }
    charts = ("decode_ms_per_token", "decode_ratio", "state_bytes", "decode_peak_mib", "prefill_ms")
    scaling_fits = (ScalingFit("decode_ms_per_token", "seq_len", reference_variant="softmax"),)
    steadiness = {
        "decode_ms_per_token": "decode_steady",
        "decode_ratio": "decode_steady",
        "tokens_per_s": "decode_steady",
        "achieved_gbs": "decode_steady",
        "bandwidth_fraction": "decode_steady",
        "prefill_ms": "prefill_steady",
        "prefill_ratio": "prefill_steady",
    }
    # each timed metric → the 0/1 metric saying the decoded outputs were within tolerance
    accuracy = {metric: "decode_accurate" for metric in steadiness}
    metrics = (
        Metric(
            "decode_ratio",
            False,
            "Per-token decode time / one bare SDPA call of one query over the same cache, "
            "timed in alternating blocks in the same process (median); a load slows both alike",
            "× SDPA",
            label="per-token time relative to one SDPA call",
        ),
        Metric(
            "decode_ms_per_token",
            False,
            "Latency of one generated token after seq_len tokens of context (median of blocks "
            "of new_tokens steps, divided by new_tokens)",
            "ms",
            label="per-token latency",
        ),
        Metric(
            "decode_iqr",
            None,
            "Interquartile range of the per-token latency",
            "ms",
            label="per-token latency, interquartile range",
        ),
        Metric(
            "decode_ref_ms",
            None,
            "The bare SDPA call per token in the same rounds",
            "ms",
            label="one SDPA call per token",
        ),
        Metric(
            "tokens_per_s",
            True,
            "Generated tokens per second (B / per-token latency)",
            label="generated tokens per second",
        ),
        Metric(
            "step_bytes",
            None,
            "Bytes one decoding step must read: the state the batch holds (KV cache or fixed "
            "state, counted from its tensors), averaged over the generated tokens; weights, "
            "queries and outputs excluded",
            "bytes",
            label="state read per step",
        ),
        Metric(
            "achieved_gbs",
            True,
            "step_bytes over the per-token latency: the rate at which the step reads its state",
            "GB/s",
            label="achieved state read rate",
        ),
        Metric(
            "peak_gbs",
            None,
            "The machine's memory read rate beside the timing: the fastest sum over a buffer far "
            "beyond the caches (256 MiB on CPU, 1 GiB on CUDA), before or after the samples",
            "GB/s",
            label="machine's memory read rate",
        ),
        Metric(
            "bandwidth_fraction",
            True,
            "achieved_gbs / peak_gbs: the share of the machine's read rate the step reaches "
            "(memory-bound decoding near 1; one far below it spends its time elsewhere)",
            label="share of the machine's read rate",
        ),
        Metric(
            "prefill_ms",
            False,
            "Time to prefill the context (to the first token)",
            "ms",
            label="prefill time",
        ),
        Metric(
            "prefill_ratio",
            False,
            "Prefill time / dense causal SDPA's, alternating",
            "×",
            label="prefill time relative to dense SDPA",
        ),
        Metric(
            "prefill_ref_ms",
            None,
            "Dense causal SDPA over the context, same rounds",
            "ms",
            label="dense SDPA prefill time",
        ),
        Metric(
            "prefill_iqr",
            None,
            "Interquartile range of the prefill samples",
            "ms",
            label="prefill time, interquartile range",
        ),
        Metric(
            "state_bytes",
            False,
            "Bytes of state one sequence holds after the context (KV cache, ring or matrix)",
            "B",
            label="state per sequence",
        ),
        Metric(
            "decode_peak_mib",
            False,
            "Peak memory of serving the batch: the state, the prefill and the generated tokens",
            "MiB",
            label="peak memory while decoding",
        ),
        Metric(
            "decode_steady",
            None,
            "1: the decode samples settled and the machine was quiet",
            label="decode timing steady?",
        ),
        Metric(
            "max_abs_error",
            None,  # judged by the accuracy flag, not compared
            "Largest |error| of prefill + steps in the timed dtype against float64, unit-normal "
            "inputs, 96 tokens",
            label="largest error against float64",
        ),
        Metric(
            "rms_error",
            None,
            "Root-mean-square error of the same against float64",
            label="RMS error against float64",
        ),
        Metric(
            "outlier_max_abs_error",
            None,  # judged by the accuracy flag, not compared
            "Largest |error| against float64 on FlashAttention-3's outlier inputs",
            label="largest error on outlier inputs",
        ),
        Metric(
            "decode_accurate",
            None,
            "1: max_abs_error / max(1, max |reference|) is within the variant's declared "
            "tolerance for the dtype; 0: not (its timings are marked and enter no contest)",
            label="decoding within tolerance?",
        ),
        Metric(
            "prefill_steady",
            None,
            "1: the prefill samples settled and the machine was quiet",
            label="prefill timing steady?",
        ),
        Metric(
            "decode_samples", None, "Timed blocks behind the median", label="decode timing blocks"
        ),
        Metric(
            "decode_rel_iqr",
            None,
            "IQR / median of the decode blocks",
            label="decode timing spread (IQR / median)",
        ),
        Metric(
            "decode_probe_drift",
            None,
            "Calibration GEMM drift over the decode timing",
            label="calibration drift over the decode timing",
        ),
        Metric(
            "decode_foreign_cpu",
            None,
            "Other processes' CPU share during the decode timing",
            label="other processes' CPU share while decoding",
        ),
        Metric(
            "prefill_samples",
            None,
            "Prefill samples behind the median",
            label="prefill timing samples",
        ),
        Metric(
            "prefill_rel_iqr",
            None,
            "IQR / median of the prefill samples",
            label="prefill timing spread (IQR / median)",
        ),
        Metric(
            "prefill_probe_drift",
            None,
            "Calibration GEMM drift over the prefill timing",
            label="calibration drift over the prefill timing",
        ),
        Metric(
            "prefill_foreign_cpu",
            None,
            "Other processes' CPU share during the prefill",
            label="other processes' CPU share while prefilling",
        ),
        Metric(
            "load_avg",
            None,
            "1-minute load average when the decode timing ended",
            label="load average (1 minute)",
        ),
        DENSITY,
    )

    def check(self) -> None:
        self.require_positive("seq_len", "new_tokens", "batch_size", "n_heads", "head_dim")
        self.require_positive("prefill_max_len")
        if self.params.n_kv_heads is not None:
            self.require_positive("n_kv_heads")
            self.require_divides("n_kv_heads", "n_heads")
        check_timing_settings(self)

    def density_size(self) -> tuple[int, int, bool]:
        """The attention a decoded sequence has seen: seq_len queries and keys, causal."""
        return self.params.seq_len, self.params.seq_len, True

    def measure(self, ctx: JobContext) -> TaskResult:
        p = self.params
        n, m, b, h, d = p.seq_len, p.new_tokens, p.batch_size, p.n_heads, p.head_dim
        kv = p.n_kv_heads or h
        variant = ctx.build_variant(VariantShape(h, d, n + m, p.n_kv_heads))
        correctness = check_incremental(variant, ctx, h, d, kv)
        accuracy, accuracy_details = error_metrics(
            decode_errors(variant, ctx, h, d, kv), variant, ctx.dtype, "decode_accurate"
        )
        decoder = incremental_form(variant, b, n + m, d, d, ctx.device, ctx.dtype, kv)
        q, k, v, gates = timed_inputs(variant, ctx, b, h, kv, n + m, d, ctx.generator())
        gqa = kv != h  # SDPA's grouped-query path in the references
        context = [*(x[:, :, :n] for x in (q, k, v)), _cut(gates, 0, n)]
        record = Measurement("seq_len", n, values=dict(accuracy))
        values, details = record.values, record.details
        details.update({"correctness_check": correctness, **accuracy_details})

        def prefill() -> None:
            decoder.position = 0  # every sample prefills the same context from the start
            with torch.no_grad():
                decoder.prefill(*context)

        prefill_paths = first_call(
            "prefill output", lambda: checked_output(decoder, "prefill", *context)
        )
        details["prefill_kernel_path"] = kernel_path.described(prefill_paths)
        details["prefill_tuned"] = dict(prefill_paths.tuned)
        if n <= p.prefill_max_len:
            timing = time_against(
                prefill,
                lambda: F.scaled_dot_product_attention(
                    *context[:3], is_causal=True, enable_gqa=gqa
                ),
                ctx,
                p,
            )
            record.add_timing("prefill", timing, spread=("iqr", "rel_iqr"))
        else:
            details["prefill_timing"] = f"not timed: seq_len {n} > prefill_max_len"
        decoder.position = n
        values["state_bytes"] = float(decoder.state_bytes())
        details["state_elements"] = decoder.state_size(n)
        details["kv_heads"] = kv
        new = [
            [*(x[:, :, i : i + 1] for x in (q, k, v)), _cut(gates, i, i + 1)]
            for i in range(n, n + m)
        ]

        def generate() -> None:
            decoder.position = n  # every block generates the same m tokens (module docstring)
            with torch.no_grad():
                for token in new:
                    decoder.step(*token)

        def bare_sdpa() -> None:  # softmax decoding's attention alone, over the same cache
            with torch.no_grad():
                for i in range(m):
                    F.scaled_dot_product_attention(
                        new[i][0], k[:, :, : n + i + 1], v[:, :, : n + i + 1], enable_gqa=gqa
                    )

        decoder.position = n
        step_paths = first_call("decoded output", lambda: checked_output(decoder, "step", *new[0]))
        details["decode_kernel_path"] = kernel_path.described(step_paths)
        bandwidth = read_bandwidth_gbs(ctx.device)
        timing = time_against(generate, bare_sdpa, ctx, p)
        bandwidth = max(bandwidth, read_bandwidth_gbs(ctx.device))  # the faster: less load
        record.add_timing(
            "decode",
            timing,
            samples="decode_block_samples_ms",
            per=m,
            median="ms_per_token",
            spread=("iqr", "rel_iqr"),
        )
        values["tokens_per_s"] = b / (timing.median_ms / m * 1e-3)
        # the state each step reads: after step i the batch holds n + i + 1 tokens' state
        element = torch.empty((), dtype=ctx.dtype).element_size()
        values["step_bytes"] = (
            b * element * sum(decoder.state_size(n + i + 1) for i in range(m)) / m
        )
        values["achieved_gbs"] = values["step_bytes"] / (timing.median_ms / m * 1e-3) / 1e9
        values["peak_gbs"] = bandwidth
        values["bandwidth_fraction"] = values["achieved_gbs"] / bandwidth
        values["load_avg"] = timing.load_avg
        if ctx.device.type == "cuda":
            del decoder
            values["decode_peak_mib"] = peak_memory_mib(
                lambda: _serve(variant, q, k, v, n, ctx.device, ctx.dtype, kv, gates), ctx.device
            )
        else:  # a fresh variant and inputs in the memory-probe process (attnbench.toolkit.memory)
            values["decode_peak_mib"] = isolated_cpu_peak(
                decode_peak_mib,
                ctx.variant_name,
                ctx.variant_params,
                (b, h, n, d),
                kv,
                m,
                str(ctx.dtype).removeprefix("torch."),
                ctx.seed,
            )
        held_mib = values["state_bytes"] * b / 2**20
        peak = values["decode_peak_mib"]
        if peak is not None and peak < held_mib:  # below a size known exactly: not a reading
            values["decode_peak_mib"] = None
            details["decode_peak"] = (
                f"not recorded: the probe read {peak:.2f} MiB, less than the {held_mib:.2f} MiB "
                "of state the batch holds (memory reused inside the probe goes unseen)"
            )
        values["density"] = variant.density(*self.density_size())
        return record.result()


def _serve(variant, q, k, v, n: int, device, dtype, kv_heads: int, gates: dict) -> None:
    """Serve one batch: build the state, prefill n tokens, generate the rest one at a time."""
    b, h, total, d = q.shape
    decoder = incremental_form(variant, b, total, d, d, device, dtype, kv_heads)
    with torch.no_grad():
        decoder.prefill(q[:, :, :n], k[:, :, :n], v[:, :, :n], _cut(gates, 0, n))
        for i in range(n, total):
            token = (x[:, :, i : i + 1] for x in (q, k, v))
            decoder.step(*token, _cut(gates, i, i + 1))


def _gates(variant, b: int, length: int, d: int, kv: int, gen, device, dtype) -> dict:
    """`random_gates` for ``length`` tokens (drawn from ``gen`` on the CPU), moved."""
    gates = random_gates(variant, b, length, head_dim=d, kv_heads=kv, generator=gen)
    return {name: g.to(device=device, dtype=dtype) for name, g in gates.items()}


def _cut(gates: dict[str, torch.Tensor], start: int, stop: int) -> dict[str, torch.Tensor]:
    """The gates of tokens start … stop − 1 (as the tokens' q, k, v are sliced)."""
    return {name: g[:, :, start:stop] for name, g in gates.items()}


def decode_peak_mib(
    variant: str,
    variant_params: dict,
    shape: tuple[int, int, int, int],
    kv_heads: int,
    new_tokens: int,
    dtype: str,
    seed: int,
) -> float | None:
    """Peak memory of `_serve` on CPU, run in the memory-probe process (inputs built outside
    the measured region)."""
    b, h, n, d = shape
    dt = getattr(torch, dtype)
    shape_of_variant = VariantShape(h, d, n + new_tokens, kv_heads)
    module = build_variant(variant, variant_params, shape_of_variant).to(dt)
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (
        torch.randn(b, heads, n + new_tokens, d, generator=gen).to(dt)
        for heads in (h, kv_heads, kv_heads)
    )
    cpu = torch.device("cpu")
    gates = _gates(module, b, n + new_tokens, d, kv_heads, gen, cpu, dt)
    return peak_memory_mib(lambda: _serve(module, q, k, v, n, cpu, dt, kv_heads, gates), cpu)


def check_incremental(variant, ctx: JobContext, heads: int, head_dim: int, kv_heads: int) -> str:
    """Before a speed is recorded: the incremental form (a prefill, then steps) against the
    variant's causal forward over the same CHECK_LEN tokens (keys and values repeated to every
    query head where they are grouped), in float32 on the job's device.

    Returns what was checked; raises `ValueError` if they disagree, so the job fails instead of
    reporting the speed of a wrong result (`UnsupportedError` where there is no form).
    """
    n = min(CHECK_LEN, variant.shape.max_len)
    gen = ctx.generator(7)
    q, k, v = (
        torch.randn(1, h, n, head_dim, generator=gen).to(ctx.device)
        for h in (heads, kv_heads, kv_heads)
    )
    reference = variant.float()
    group = heads // kv_heads
    gates = _gates(variant, 1, n, head_dim, kv_heads, gen, ctx.device, torch.float32)
    try:
        decoder = incremental_form(
            reference, 1, n, head_dim, head_dim, ctx.device, torch.float32, kv_heads
        )
        split = max(1, n - CHECK_STEPS)
        with torch.no_grad():
            k_all, v_all = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
            every = {name: g.repeat_interleave(group, 1) for name, g in gates.items()}
            expected = reference(q, k_all, v_all, causal=True, gates=every)
            outs = _decode(decoder, q, k, v, gates, split)
    finally:
        variant.to(ctx.dtype)
    error = float((torch.cat(outs, dim=2) - expected).abs().max())
    if not error <= 1e-4 * max(1.0, float(expected.abs().max())):
        raise ValueError(
            f"the incremental form disagrees with the causal forward at n={n}: max error "
            f"{error:.3g}; not timing a wrong result."
        )
    steps = n - split
    return f"prefill {split} + {steps} steps == causal forward at n={n} (max error {error:.2g})"


def decode_errors(variant, ctx: JobContext, heads: int, head_dim: int, kv_heads: int) -> dict:
    """`attnbench.toolkit.timed.kernel_errors` of the incremental form (a prefill, then CHECK_STEPS
    steps, over CHECK_LEN tokens) in the timed dtype against the same in float64."""
    n = min(CHECK_LEN, variant.shape.max_len)
    split = max(1, n - CHECK_STEPS)
    gen = ctx.generator(11)
    inputs = [
        torch.randn(1, h, n, head_dim, generator=gen, dtype=torch.float64).to(ctx.device)
        for h in (heads, kv_heads, kv_heads)
    ]

    # the gates stay unit normal (no outliers): they pick decays and step sizes, not scores
    gates = _gates(variant, 1, n, head_dim, kv_heads, gen, ctx.device, torch.float64)

    def run(xs: list[torch.Tensor], dtype: torch.dtype) -> torch.Tensor:
        q, k, v = (x.to(dtype) for x in xs)
        decoder = incremental_form(
            variant.to(dtype), 1, n, head_dim, head_dim, ctx.device, dtype, kv_heads
        )
        on = {name: g.to(dtype) for name, g in gates.items()}
        return torch.cat(_decode(decoder, q, k, v, on, split), dim=2)

    try:
        return kernel_errors(run, inputs, ctx.dtype, gen)
    finally:
        variant.to(ctx.dtype)


def _decode(decoder, q, k, v, gates: dict, split: int) -> list[torch.Tensor]:
    """Outputs of a prefill of ``split`` tokens, then one step per token to the end (each
    `checked_output`)."""
    context = (x[:, :, :split] for x in (q, k, v))
    outs = [checked_output(decoder, "prefill", *context, _cut(gates, 0, split))]
    for i in range(split, q.shape[-2]):
        token = (x[:, :, i : i + 1] for x in (q, k, v))
        outs.append(checked_output(decoder, "step", *token, _cut(gates, i, i + 1)))
    return outs


def checked_output(decoder, call: str, q, k, v, gates: dict) -> torch.Tensor:
    """``decoder.prefill`` or ``decoder.step`` (``call``) of these tokens, if its output is what
    `attnbench.IncrementalAttention` promises: (B, H, n, Dv) for the n tokens given, in q's dtype
    on q's device. Otherwise one sentence naming what came back and what was expected, so that
    the job fails instead of comparing, timing or scoring another tensor (a channel short, the
    last position alone, float64 in a float32 job)."""
    out = getattr(decoder, call)(q, k, v, gates)
    expected = (*q.shape[:3], v.shape[-1])
    got = mismatch(out, expected, q)
    if got is not None:
        raise ValueError(
            f"the incremental form of variant '{decoder.variant.name}' returned {got} from "
            f"{call}; the contract is (B, H, n, Dv) = {expected} {q.dtype} on {q.device}, as "
            "its queries and values give."
        )
    return out
