"""Boolean attention patterns shared by variants and their references.

A pattern is a (N, M) boolean tensor, True where query i may attend to key j. Excluded positions
get a −∞ logit (or are not computed at all); a logit is never multiplied by 0, which would keep
the position with weight e⁰.
"""

from __future__ import annotations

import functools
from itertools import pairwise

import numpy as np
import torch

# The default window of `window` and of its peers (one value, so they stay the same operator):
# a fraction of the sequence (`AttentionVariant.size_at`)
WINDOW = 0.2


def causal_pattern(n: int, m: int, device: torch.device | str | None = None) -> torch.Tensor:
    """True where key j is visible to query i under the causal convention j <= i."""
    i = torch.arange(n, device=device).unsqueeze(1)
    j = torch.arange(m, device=device).unsqueeze(0)
    return j <= i


@functools.lru_cache(maxsize=128)
def future_keys(rows: int, cols: int, offset: int, device: str = "cpu") -> torch.Tensor:
    """(rows, cols) bool, True where a tile's key is after its query (j > i): the tile's first
    query is at position r0 and its first key at c0, with ``offset`` = r0 − c0. Cached, because
    a tiled causal kernel masks the same diagonal tiles on every call."""
    i = torch.arange(rows, device=device).view(-1, 1)
    return torch.arange(cols, device=device).view(1, -1) - i > offset


def apply_pattern(logits: torch.Tensor, pattern: torch.Tensor) -> torch.Tensor:
    """Logits with excluded positions set to −∞ (``pattern`` broadcasts over leading dims)."""
    return logits.masked_fill(~pattern, float("-inf"))


def window_pairs(n: int, window: int, causal: bool) -> int:
    """Number of (query, key) pairs a window of ``window`` keeps for a sequence of n: causal the
    ``window`` latest keys (itself included), else keys with |i − j| < window."""
    i = np.arange(n)
    before = np.minimum(i, window - 1)
    if causal:
        return int((before + 1).sum())
    return int((before + np.minimum(n - 1 - i, window - 1) + 1).sum())


def _whole(x: object) -> bool:
    """Whether ``x`` is a whole number (an int, or an integral float or 0-d tensor), not a bool."""
    if isinstance(x, torch.Tensor):
        x = x.item() if x.dim() == 0 else None
    if isinstance(x, bool) or not isinstance(x, int | float):
        return False
    return float(x).is_integer()


def document_bounds(cu_seqlens, n: int) -> list[int]:
    """The cumulative document lengths ``cu_seqlens`` ([0, l₁, l₁ + l₂, …, n], as FlashAttention's
    varlen functions, PyTorch's and flash-linear-attention's ``cu_seqlens`` name them) as a list
    of ints, checked against a packed sequence of n tokens: one sentence naming the value and the
    fix otherwise."""
    if isinstance(cu_seqlens, torch.Tensor):
        if cu_seqlens.dim() != 1 or cu_seqlens.is_floating_point():
            raise ValueError(
                f"cu_seqlens must be a 1-D integer tensor of cumulative document lengths; got "
                f"shape {tuple(cu_seqlens.shape)}, dtype {cu_seqlens.dtype}."
            )
        bounds = [int(x) for x in cu_seqlens.tolist()]
    else:
        values = list(cu_seqlens) if not isinstance(cu_seqlens, str | bytes) else None
        if values is None or not all(_whole(x) for x in values):
            raise ValueError(
                f"cu_seqlens={cu_seqlens!r} must be whole cumulative document lengths (a list "
                "of ints or a 1-D integer tensor, e.g. [0, 512, 1536] for documents of 512 and "
                "1024)."
            )
        bounds = [int(x) for x in values]
    if (
        len(bounds) < 2
        or bounds[0] != 0
        or bounds[-1] != n
        or any(b <= a for a, b in pairwise(bounds))
    ):
        raise ValueError(
            f"cu_seqlens={bounds} must rise strictly from 0 to the packed length {n} "
            "(cumulative document lengths, e.g. [0, 512, 1536] for documents of 512 and 1024)."
        )
    return bounds


def document_pattern(
    cu_seqlens, n: int, causal: bool, device: torch.device | str | None = None
) -> torch.Tensor:
    """(n, n) bool: True where query i and key j lie in the same document of the packed
    sequence (and j <= i when ``causal``): the document mask of a packed batch, for references
    and dense paths. Building it costs n² booleans, which is why the throughput task times it
    apart from the kernel."""
    bounds = document_bounds(cu_seqlens, n)
    lengths = torch.tensor([b - a for a, b in pairwise(bounds)], device=device)
    doc = torch.repeat_interleave(torch.arange(len(lengths), device=device), lengths)
    same = doc.unsqueeze(1) == doc.unsqueeze(0)
    return same & causal_pattern(n, n, device) if causal else same
