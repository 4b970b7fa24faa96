"""A compiled CPU kernel for softmax attention over short spans of keys: the forward without
autograd of the banded engine (`banded.banded_attention`: `window`, `strided`'s local part) and
of the block-sparse engine (`blocksparse.block_sparse_attention`: `bigbird`, `learned_pattern`;
`strided`'s dilated part), and `fox`'s dense forward with its per-pair forget bias.

Why compiled: torch's CPU flash kernel runs short key spans (a block of queries and its 64-256
keys) at about half its long-span rate, so window 64 reached 0.3 and bigbird block 32 0.4 of
their ideal speed-ups at causal 8k (issue #27 asks for 0.5). Here a tile of 16 queries holds one
lane per query, so a key's 16 scores are one AVX-512 vector or two AVX2 (four NEON) vectors: they
accumulate by FMAs over the head dimension with the key's entry broadcast (four keys per load of
the queries), a lane mask per key keeps the pairs the pattern allows (none where every lane sees
the key, as inside a band), the softmax runs across keys with one exp per score (at::vec's
``exp_u20``, as torch's CPU flash kernel), and the values are mixed four query rows at a time
into register accumulators (64 columns a pass on AVX-512, 16 on AVX2 and NEON). Measured at
causal 8k (B = 1, H = 4, D = 64, 2 threads, AVX-512): window 64 in 3.0 ms, 1.0 of the ideal,
where the SDPA path took 10 ms.

Written once against ATen's portable vector type ``at::vec::Vectorized<float>`` and compiled for
the capability torch dispatches to (`compiled.capability`: AVX512, AVX2, or DEFAULT, whose
Vectorized is a plain array the compiler vectorises for the baseline ISA; NEON on ARM), so
``ATEN_CPU_CAPABILITY=avx2`` on an AVX-512 host builds and runs the AVX2 kernel, in a build
folder of its own. A record names the build that ran ("tile kernel (AVX2)", `path`).

One routine serves both engines: a tile sees a list of key spans [start, start + length), each
with an additive bias (a learned gate) and its own lane rule: key p is seen by query i when
lo <= p − i <= hi. The banded op's tile has its band (lo = −before, hi = after) and, for
strided with few dilated keys, one span per dilated offset whose rule is a single diagonal; the
block op's spans are the key blocks its query block lists (hi = 0: causal). Both return the row
log-sum-exp too, for exact merges (strided); a row without a key gets 0 and −∞.

The Forgetting Transformer's bias (`compiled_forget`, for `fox`) is one per (query, key) pair,
c_i − c_p from cumulative log forget gates: a tile's span carries c_ref − c_p per key and its
lanes c_i − c_ref (ref: the tile's last row), each a float-float pair (the float32 rounding of
the float64 value and what the rounding lost) added half by half, so a pair's bias is exact to
the float32 rounding of its own size however far c has fallen, at four vector adds per key.

The C++ is ``tile.cpp`` beside this module (`compiled`), built on first use; it serves float32,
head dimension at most 256 and a value dimension a multiple of 16. Elsewhere, or where it cannot
be built (one warning), `compiled_banded` and `compiled_blocks` return None and the callers keep
their SDPA paths (autograd, other dtypes and devices too).
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch

from attnbench.toolkit.kernel_path import note
from attnbench.variants.kernels import compiled

SOURCE = Path(__file__).with_name("tile.cpp")  # the kernel's C++ (built by `_load`)

NO_LIMIT = 1 << 30  # |lo|, |hi| at least this: no limit on p − i (the kernel's FAR)


def path() -> str:
    """What a record says ran (`attnbench.toolkit.kernel_path`): the kernel and the capability
    it was built for, e.g. "tile kernel (AVX2)"."""
    return f"tile kernel ({compiled.capability()})"


@functools.cache
def _load() -> bool:
    """Build (or find in torch's extension cache) and load the kernel for the CPU capability
    torch dispatches to; False where the build fails (one warning, `compiled.build`)."""
    return compiled.build(
        "attnbench_tiles",
        SOURCE,
        compiled.capability(),
        "window, strided, bigbird, learned_pattern and fox use their slower SDPA paths.",
    )


def _served(*tensors: torch.Tensor) -> bool:
    """Whether the kernel serves these inputs (q, k, v first, then a bias): float32 on the CPU,
    no autograd to record, D <= 256, Dv a multiple of 16, and the kernel built here."""
    if any(t.device.type != "cpu" or t.dtype != torch.float32 for t in tensors[:3]):
        return False
    if any(t.device.type != "cpu" for t in tensors):
        return False
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return False
    q, v = tensors[0], tensors[2]
    return q.shape[-1] <= 256 and v.shape[-1] % 16 == 0 and _load()


def compiled_banded(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    before: int,
    after: int,
    scale: float,
    *,
    stride: int = 0,
    first: int = 1,
    causal: bool = True,
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(out (B, H, N, Dv), row log-sum-exp (B, H, N)) of query i over keys [i − before,
    i + after], by the compiled kernel; None where it does not serve the call (`_served`).

    With ``stride`` > 0, also the dilated keys i − t·stride (and i + t·stride unless
    ``causal``) for t >= ``first``: Sparse Transformer's strided pattern in one pass. Each
    dilated offset is a span of up to 16 keys of which each query lane sees one, so the work
    grows by 16 keys per tile and offset: meant for a few dilated keys per query (strided at a
    stride of a third of the sequence), not for many (then the residue-class layout)."""
    if k.shape != q.shape or not _served(q, k, v):
        return None
    bsz, heads, n, d = q.shape
    dv = v.shape[-1]
    note(path())
    out, lse = torch.ops.attnbench_tiles.banded_forward(
        q.reshape(bsz * heads, n, d),
        k.reshape(bsz * heads, n, d),
        v.reshape(bsz * heads, n, dv),
        before,
        after,
        stride,
        first,
        causal,
        scale,
    )
    return out.view(bsz, heads, n, dv), lse.view(bsz, heads, n)


def compiled_blocks(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    key_blocks: torch.Tensor,
    block: int,
    scale: float,
    *,
    bias: torch.Tensor | None = None,
    lo: int = -NO_LIMIT,
    hi: int = NO_LIMIT,
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(out (B, H, N, Dv), row log-sum-exp (B, H, N)) of block-sparse softmax attention by the
    compiled kernel; None where it does not serve the call (`_served`).

    Query block c (positions [c·block, (c+1)·block)) sees the key blocks ``key_blocks[..., c, :]``
    (−1: none; unique per row), each key's logit shifted by ``bias[..., c, j]``, and within them
    query i sees key p when lo <= p − i <= hi (hi = 0: causal). ``key_blocks`` and ``bias`` are
    (nbq, K) shared by every batch and head, or (1, H, nbq, K) per head. A row without a key
    gets 0 and −∞.
    """
    if not _served(q, k, v, *([] if bias is None else [bias])):
        return None
    bsz, heads, n, d = q.shape
    m, dv = k.shape[-2], v.shape[-1]
    shape = (
        key_blocks.shape if bias is None else torch.broadcast_shapes(key_blocks.shape, bias.shape)
    )
    lead = shape[:-2]  # () or (1, H) or (1, 1): the kernel indexes one list per head at most
    if any(size != 1 for size in lead[:-1]) or (lead and lead[-1] not in (1, heads)):
        return None
    if shape[-2] != -(-n // block):  # one list per query block
        return None
    lists = key_blocks.expand(shape).reshape(-1, *shape[-2:])
    shifts = torch.empty(0)
    if bias is not None:
        shifts = bias.to(torch.float32).expand(shape).reshape(lists.shape)
    note(path())
    out, lse = torch.ops.attnbench_tiles.blocks_forward(
        q.reshape(bsz * heads, n, d),
        k.reshape(bsz * heads, m, d),
        v.reshape(bsz * heads, m, dv),
        lists.to(dtype=torch.long),
        shifts,
        block,
        max(lo, -NO_LIMIT),
        min(hi, NO_LIMIT),
        scale,
    )
    return out.view(bsz, heads, n, dv), lse.view(bsz, heads, n)


def compiled_forget(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cum: torch.Tensor,
    causal: bool,
    scale: float,
) -> torch.Tensor | None:
    """Forgetting attention (B, H, N, Dv) by the compiled kernel: query i sees key p with the
    logit shifted by c_i − c_p, ``cum`` (B, H, M) the keys' cumulative log forget gates c (any
    dtype; summed in float64 is what keeps c_i − c_p exact); causal: keys p <= min(i, M − 1)
    with c_{min(i, M−1)}, else every key with c_{M−1} for every query. None where the kernel
    does not serve the call (`_served`; q, k, v with the same heads)."""
    if k.shape[:2] != q.shape[:2] or not _served(q, k, v):
        return None
    bsz, heads, n, d = q.shape
    m, dv = k.shape[-2], v.shape[-1]
    note(path())
    out = torch.ops.attnbench_tiles.forget_forward(
        q.reshape(bsz * heads, n, d),
        k.reshape(bsz * heads, m, d),
        v.reshape(bsz * heads, m, dv),
        cum.to(torch.float64).reshape(bsz * heads, m),
        causal,
        scale,
    )
    return out.view(bsz, heads, n, dv)


def compiled_dilated_merge_(
    out: torch.Tensor,
    lse: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    stride: int,
    gap: int,
    causal: bool,
    scale: float,
) -> bool:
    """Merge Sparse Transformer's dilated keys into ``out`` (B, H, N, Dv) and ``lse`` (B, H, N),
    softmax attention over other keys with its row log-sum-exp (`compiled_banded`'s result), in
    place: query i also sees keys i − t·``stride`` for t >= ``gap`` (and i + t·stride unless
    ``causal``). Each tile is 16 queries of one residue class, read in place (no regrouping
    copy), merged by log-sum-exps as it is computed. False (nothing done) where the kernel does
    not serve the call."""
    if k.shape != q.shape or not _served(q, k, v) or v.shape[-1] > 256:
        return False
    if not (out.is_contiguous() and lse.is_contiguous() and out.dtype == torch.float32):
        return False
    bsz, heads, n, d = q.shape
    note(path())
    torch.ops.attnbench_tiles.dilated_merge_(
        out.view(bsz * heads, n, -1),
        lse.view(bsz * heads, n),
        q.reshape(bsz * heads, n, d),
        k.reshape(bsz * heads, n, d),
        v.reshape(bsz * heads, n, v.shape[-1]),
        stride,
        gap,
        causal,
        scale,
    )
    return True
