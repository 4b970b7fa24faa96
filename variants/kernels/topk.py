"""A compiled CPU kernel for `topk`: each row's k-th score and the softmax over the scores at
or above it, computed while the row sits in cache.

Why compiled: after its two GEMMs (about one dense causal SDPA), topk's torch-op path spent
about as long again selecting each row's k-th score (numpy's introselect), pushing the scores
below it down and taking the softmax, each a pass over all N²/2 scores through memory (measured
at causal 8k, k = 0.2 of the keys: selection 0.7, masking 0.2-0.3, softmax 0.2 of one SDPA).
Here each row, in order:

1. its maximum (vectorised; a NaN anywhere makes the row NaN, as the softmax would);
2. its k-th highest score, exactly, by narrowing a bracket: each level packs the scores inside
   a bracket into a scratch buffer (one vectorised pass that also counts the scores above it)
   and recurses on them with the rank shifted. The first bracket comes from a strided sample of
   64 scores (two order statistics three standard deviations of the sample rank apart), later
   ones from interpolation within the previous bracket (a narrow range is nearly uniform). A
   bracket that missed, as the counts show, is retried from a sample; a sample that missed
   ends in ``std::nth_element`` over the current set. Sets of at most 64 are finished by
   counting, for each entry, how many are greater: branch-free, where ``nth_element`` on a few
   dozen floats mispredicts most of its branches (it took half the kernel's time);
3. exp(scale·(s − max)) for the scores at or above the k-th, 0 below, and the row divided by
   its sum. The exp is at::vec's ``exp_u20`` (within 20 ulp), the one torch's CPU flash
   attention kernel uses.

Measured (causal 8k chunk of 4 heads × 128 rows × 8192 scores, 2 threads): 0.8 ms without
selection (k = all), 1.5-1.9 ms with it, where numpy's selection alone took 1.7 ms and the
torch-op mask and softmax another 2-3 ms.

Causal rows are passed the chunk's first query position: row i of a chunk sees keys
[0, first + i], and the rest of its row is written 0 without being read.

The source is ``topk.cpp`` beside this module (`compiled`), written against ATen's portable
``at::vec::Vectorized<float>`` and compiled on first use for the CPU capability torch dispatches
to (AVX512, AVX2 or DEFAULT: 16, 8 or plain lanes; NEON on ARM), with OpenMP over rows on torch's
thread count. One primitive at::vec lacks is written per ISA: packing the lanes inside a bracket
(AVX-512's compress; on AVX2 a permutation from a table of the 256 lane masks; elsewhere a
branch-free copy lane by lane that skips vectors with none inside). Rows that keep few scores
(at most one in 4·W) skip the exp of vectors with no kept lane. Where it cannot be built (no C++
compiler), one warning says so and `topk` keeps its torch-op path (`compiled_topk_softmax`
returns None): the same keys, slower.

The forward without autograd runs all of it in one op (`compiled_topk_attention`), the structure
of a flash kernel: a thread takes a (head, block of queries), scores it against the keys it may
see into a buffer of its own by BLAS's ``sgemm_`` (which torch exports where it links MKL), turns
each row into its weights as above while it is in cache, and mixes the values either by a second
GEMM (dense) or by adding only the kept value rows (gather: k·Dv a row instead of N·Dv). The
query block and the mix are chosen on the machine at first use of a shape class
(`autotune.choose`, the record's ``fwd_tuned``): the chunked torch path with the compiled softmax
was 1.35–1.70× dense causal SDPA at 8k across hosts, its scores making a trip through memory and
its value GEMM running over every key for k of them.
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch

from attnbench.toolkit.kernel_path import note
from attnbench.variants.kernels import autotune, compiled

SOURCE = Path(__file__).with_name("topk.cpp")  # the kernel's C++ (built by `_load`)


@functools.cache
def _load() -> bool:
    """Build (or find in torch's extension cache) and load the kernel for this machine's CPU
    capability; False, with one warning, when it cannot be built here (`compiled.build`)."""
    return compiled.build(
        "attnbench_topk", SOURCE, compiled.capability(), "topk uses its slower Python path."
    )


def compiled_available() -> bool:
    """Whether the compiled kernel is built and loaded on this machine (builds it if needed)."""
    return _load()


class _TopSoftmax(torch.autograd.Function):
    """softmax over each row's top scores, in place; its gradient is the softmax's restricted to
    the kept scores (the weights are 0 elsewhere, so the usual formula gives 0 there)."""

    @staticmethod
    def forward(ctx, scores, picks, scale, first_query):
        torch.ops.attnbench_topk.topk_softmax_(scores, picks, scale, first_query)
        ctx.mark_dirty(scores)
        ctx.save_for_backward(scores)
        ctx.scale = scale
        return scores

    @staticmethod
    def backward(ctx, grad):
        (weights,) = ctx.saved_tensors
        inner = (grad * weights).sum(dim=-1, keepdim=True)
        return weights * (grad - inner) * ctx.scale, None, None, None


def compiled_topk_softmax(
    scores: torch.Tensor, picks: int, scale: float, first_query: int | None
) -> torch.Tensor | None:
    """softmax(scale·scores) over each row's ``picks`` highest scores, 0 elsewhere, computed in
    place by the compiled kernel; None where it does not apply (not float32 on the CPU, not
    contiguous) or could not be built, so the caller takes its Python path.

    ``first_query``: None for full rows; else the rows are causal, row i of each (rows × M)
    matrix seeing keys [0, first_query + i] only (its other entries are not read).
    """
    if scores.device.type != "cpu" or scores.dtype != torch.float32:
        return None
    if not scores.is_contiguous() or not _load():
        return None
    first = -1 if first_query is None else first_query
    note(f"topk kernel ({compiled.capability()})")
    return _TopSoftmax.apply(scores, picks, scale, first)


QUERY_BLOCKS = (32, 16, 64, 128)  # queries per task of the fused op; the first is the default
PROBE_QUERIES = 512  # a tuning times the op on this many queries from the middle of the call
TUNE_FROM = 4 * 1024 * 1024  # query-key pairs (over heads) from which a call's class is tuned


@functools.cache
def _fused_available() -> bool:
    """Whether the fused op is built and this torch exports ``sgemm_`` (asked once)."""
    return _load() and bool(torch.ops.attnbench_topk.has_gemm())


def _configuration(q3, k3, v3, picks: int, scale: float, causal: bool) -> tuple[int, bool]:
    """(query block, dense mix) for this call's shape class on this machine."""
    n, m = q3.shape[1], k3.shape[1]
    rows = min(n, PROBE_QUERIES)
    shape_class = {
        "causal": causal,
        "d": q3.shape[-1],
        "dv": v3.shape[-1],
        "heads": min(q3.shape[0], 64),
        "keys": 1 << max(0, (m - 1).bit_length()),  # the power of two at or above M
        "keep_log2": max(0, (max(m // picks, 1)).bit_length() - 1),  # log2 of M / k, floored
    }

    start = (n - rows) // 2  # the middle queries: causal, they see about the mean row's keys

    def probe(config):
        qs = q3[:, start : start + rows]
        offset = start if causal else 0
        qb, dense = config["query_block"], config["mix"] == "dense"
        op = torch.ops.attnbench_topk.topk_attention
        return lambda: op(qs, k3, v3, picks, scale, causal, offset, qb, dense)

    candidates = [
        {"query_block": qb, "mix": mix} for mix in ("gather", "dense") for qb in QUERY_BLOCKS
    ]
    worth = q3.shape[0] * n * m >= TUNE_FROM
    config = autotune.choose("topk kernel", shape_class, candidates, probe, worth)
    return int(config["query_block"]), config["mix"] == "dense"


def compiled_topk_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, picks: int, scale: float, causal: bool
) -> torch.Tensor | None:
    """Top-k attention (softmax of scale·q·k over each query's ``picks`` highest keys, key j
    seen by query i when j <= i if ``causal``) by the fused op; None where it does not serve
    the call (autograd, not float32 on the CPU, no ``sgemm_`` here, not built)."""
    if not (compiled.forward_in_float32_cpu(q, k, v) and _fused_available()):
        return None
    q3, k3, v3 = compiled.heads_flat(q, k, v)
    qb, dense = _configuration(q3, k3, v3, picks, scale, causal)
    note(f"topk kernel ({compiled.capability()})")
    out = torch.ops.attnbench_topk.topk_attention(q3, k3, v3, picks, scale, causal, 0, qb, dense)
    return out.view(*q.shape[:-1], v.shape[-1])
