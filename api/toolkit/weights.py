"""The attention-weights contract, checked where a task consumes the weights.

`AttentionVariant.attention_weights` promises the (B, H, N, M) matrix ``A`` with
``forward(q, k, v) == A @ v``. The forward's output is checked on every call (the variant
contract); the weights are checked here, by the tasks that analyse them (concentration) or compare
the forward with them (throughput's correctness check), so that a plugin returning a matrix a row
short, a broadcast row or another dtype fails its job in one sentence naming what came back,
instead of an unrelated shape error or statistics of another matrix.
"""

from __future__ import annotations

from typing import Any

import torch

from attnbench.task import NonFiniteError


def checked_weights(variant: Any, weights: Any, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """``weights`` if they are what `AttentionVariant.attention_weights` promises for queries
    ``q`` (B, H, N, D) and keys ``k`` (B, ·, M, D): a finite (B, H, N, M) tensor of q's dtype on
    q's device. Otherwise one sentence naming what came back and what was expected, so that the
    job fails instead of analysing another matrix (a row short of its keys, a broadcast row).

    Raises:
        ValueError: not a tensor of that shape, dtype and device.
        NonFiniteError: NaN or infinite weights.
    """
    expected = (*q.shape[:3], k.shape[-2])
    if (
        not isinstance(weights, torch.Tensor)
        or tuple(weights.shape) != expected
        or weights.dtype != q.dtype
        or weights.device != q.device
    ):
        got = (
            f"{tuple(weights.shape)} {weights.dtype} on {weights.device}"
            if isinstance(weights, torch.Tensor)
            else type(weights).__name__
        )
        raise ValueError(
            f"variant '{variant.name}' returned attention weights {got}; the contract is "
            f"(B, H, N, M) = {expected} {q.dtype} on {q.device}, as its queries and keys give."
        )
    if not bool(torch.isfinite(weights).all()):
        raise NonFiniteError(
            f"variant '{variant.name}' returned attention weights {expected} with NaN or "
            "infinite entries; the contract is a finite matrix A with forward(q, k, v) == A @ v."
        )
    return weights
