"""Packed documents against a padded batch: what training on documents of mixed lengths costs.

Training packs documents into one sequence and tells the kernel where each ends (``cu_seqlens``,
`attnbench.variant`: "Packed sequences"); the alternative is a batch with every document padded
to the longest. With ``task.doc_lengths`` a throughput job times the two in alternating rounds in
one process, the same variant on the same tokens, with the job's causal flag (with
``task.doc_median`` the lengths are drawn instead, `drawn_lengths`, and recorded in the details):

* **packed**: one call on the documents laid end to end (B = 1, N = their sum), with their
  boundaries; each document's outputs are those of the document alone (checked first, below);
* **padded**: one call on a batch of B = number of documents, each padded with zeros after its
  end to the longest. Causal, a document's outputs ignore the padding after it; not causal, the
  variant contract takes no key mask, so the padded rows also attend to their padding: the
  same work as a masked call (a mask removes no pair of a dense kernel), other outputs.

``packed_ratio`` is packed time over padded time (below 1: packing saves the padding's work, or
a one-pass form beats a batch; above: the per-document calls of a ``split`` variant cost more
than the padding). The boundaries a packed call builds are timed apart from the kernel
(``boundaries_ms``: checking the lengths and the ``cu_seqlens`` tensor, what every packed call
pays), and so is the dense N×N document mask a masked dense kernel would need
(``document_mask_ms``, `attnbench.masks.document_pattern`), which no built-in variant builds.

Before timing, the packed outputs are checked against each document run alone in the timed
dtype (``packed_error``, relative as `AttentionVariant.error_tolerance`): a packed form that
leaks across documents fails the job instead of posting a speed.
"""

from __future__ import annotations

import math
from itertools import accumulate

import torch
import torch.utils.benchmark as benchmark

from attnbench import JobContext, random_gates
from attnbench.masks import document_bounds, document_pattern
from attnbench.toolkit.timed import time_against, timing_details, timing_metrics

MASK_TIMING_S = 0.05  # torch.utils.benchmark's min_run_time for the mask timings


def packed_inputs(variant, lengths: list[int], heads: int, kv: int, d: int, gen, ctx: JobContext):
    """q, k, v and gates of the packed sequence (1, ·, sum, D) and of the padded batch
    (len(lengths), ·, max, D): the same tokens, zeros after each padded document."""
    n, longest = sum(lengths), max(lengths)
    starts = [0, *accumulate(lengths)]
    packed = {
        name: torch.randn(1, h, n, d, generator=gen)
        for name, h in (("q", heads), ("k", kv), ("v", kv))
    }
    packed.update(
        {
            f"gate {name}": g
            for name, g in random_gates(
                variant, 1, n, head_dim=d, kv_heads=kv, generator=gen
            ).items()
        }
    )
    padded = {}
    for name, x in packed.items():
        rows = x.new_zeros(len(lengths), x.shape[1], longest, x.shape[-1])
        for i, (a, b) in enumerate(zip(starts, starts[1:], strict=False)):
            rows[i, :, : b - a] = x[0, :, a:b]
        padded[name] = rows

    def on(xs):
        return {k: x.to(device=ctx.device, dtype=ctx.dtype) for k, x in xs.items()}

    return on(packed), on(padded), starts


def _call(variant, xs: dict, causal: bool, cu_seqlens=None) -> torch.Tensor:
    gates = {k.removeprefix("gate "): x for k, x in xs.items() if k.startswith("gate ")}
    with torch.no_grad():
        return variant(
            xs["q"], xs["k"], xs["v"], causal=causal, gates=gates or None, cu_seqlens=cu_seqlens
        )


def drawn_lengths(total: int, median: float, sigma: float, gen: torch.Generator) -> list[int]:
    """Document lengths packed into ``total`` tokens as training packs a corpus: documents
    drawn one after another, each round(median · exp(sigma · z)) tokens (at least 1), z standard
    normal from ``gen``, until ``total`` is reached; the last is cut to fit. Log-normal: the
    heavy right tail of real corpora's document lengths (many short documents, a few long).
    The length is capped in log space, before ``exp``, so that any finite ``sigma`` draws (a
    wide one, 1e6, overflowed ``exp``)."""
    lengths: list[int] = []
    filled = 0
    while filled < total:
        z = float(torch.randn((), generator=gen, dtype=torch.float64))
        room = total - filled
        log_length = min(math.log(median) + sigma * z, math.log(room))
        length = min(max(1, round(math.exp(log_length))), room)
        lengths.append(length)
        filled += length
    return lengths


def packed_timing(
    variant, p, lengths: list[int], ctx: JobContext
) -> tuple[dict[str, float], dict[str, object]]:
    """The packed-against-padded metrics and details of a throughput job (module docstring),
    documents of ``lengths``."""
    lengths = list(lengths)
    kv = variant.shape.kv_heads
    packed, padded, starts = packed_inputs(
        variant, lengths, p.n_heads, kv, p.head_dim, ctx.generator(17), ctx
    )
    out = _call(variant, packed, p.causal, starts)
    alone = torch.cat(
        [
            _call(variant, {k: x[..., a:b, :] for k, x in packed.items()}, p.causal)
            for a, b in zip(starts, starts[1:], strict=False)
        ],
        dim=-2,
    )
    error = float((out - alone).abs().max()) / max(1.0, float(alone.abs().max()))
    limit = 2 * variant.error_tolerance.get(str(ctx.dtype).removeprefix("torch."), math.inf)
    if not error <= limit:
        raise ValueError(
            f"variant '{variant.name}': its packed call differs from its documents run alone by "
            f"{error:.2e} (limit {limit:.0e}, twice its declared tolerance): it leaks across "
            "documents, so its packed time is not recorded."
        )
    timing = time_against(
        lambda: _call(variant, packed, p.causal, starts),
        lambda: _call(variant, padded, p.causal),
        ctx,
        p,
    )
    n = sum(lengths)

    def boundaries() -> torch.Tensor:  # what every packed call builds (AttentionVariant._packed)
        return torch.tensor(document_bounds(starts, n), dtype=torch.long, device=ctx.device)

    def mask_ms(fn) -> float:
        timer = benchmark.Timer(stmt="fn()", globals={"fn": fn}, num_threads=ctx.threads)
        return timer.blocked_autorange(min_run_time=MASK_TIMING_S).median * 1e3

    values = {
        **timing_metrics("packed", timing),
        "packed_error": error,
        "padded_fraction": 1 - n / (len(lengths) * max(lengths)),
        "boundaries_ms": mask_ms(boundaries),
        "document_mask_ms": mask_ms(lambda: document_pattern(starts, n, p.causal, ctx.device)),
    }
    details = {
        "doc_lengths": lengths,
        "packing": variant.packing,
        "packed_timing": timing_details(timing),
    }
    return values, details
