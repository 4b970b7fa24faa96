"""Boolean attention patterns shared by variants and their references.

A pattern is a (N, M) boolean tensor, True where query i may attend to key j. Excluded positions
get a −∞ logit (or are not computed at all); a logit is never multiplied by 0, which would keep
the position with weight e⁰.
"""

from __future__ import annotations

import functools

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
