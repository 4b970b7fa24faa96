"""Boolean attention patterns shared by variants and their references.

A pattern is a (N, M) boolean tensor, True where query i may attend to key j. Excluded positions
get a −∞ logit (or are not computed at all); a logit is never multiplied by 0, which would keep
the position with weight e⁰.
"""

from __future__ import annotations

import torch


def causal_pattern(n: int, m: int, device: torch.device | str | None = None) -> torch.Tensor:
    """True where key j is visible to query i under the causal convention j <= i."""
    i = torch.arange(n, device=device).unsqueeze(1)
    j = torch.arange(m, device=device).unsqueeze(0)
    return j <= i


def apply_pattern(logits: torch.Tensor, pattern: torch.Tensor) -> torch.Tensor:
    """Logits with excluded positions set to −∞ (``pattern`` broadcasts over leading dims)."""
    return logits.masked_fill(~pattern, float("-inf"))
