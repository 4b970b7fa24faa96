"""What a variant hands a task, checked against the contract where the task reads it.

The forward's output is checked on every call (`AttentionVariant`). The attention weights
(`checked_weights`: the concentration task analyses them, throughput compares the forward with
them) and an incremental form's outputs (decode) are checked by the tasks that read them, with
`mismatch`: a plugin returning a matrix a row short, a broadcast row or another dtype fails its
job in one sentence naming what came back, instead of an unrelated shape error or statistics
of another tensor.
"""

from __future__ import annotations

from typing import Any

import torch

from attnbench.task import NonFiniteError


def mismatch(out: Any, expected: tuple[int, ...], like: torch.Tensor) -> str | None:
    """None where ``out`` is a tensor of shape ``expected`` in ``like``'s dtype on its device;
    else what came back, in words: "(1, 2, 32, 31) torch.float32 on cpu", or the type's name."""
    if not isinstance(out, torch.Tensor):
        return type(out).__name__
    if tuple(out.shape) == expected and out.dtype == like.dtype and out.device == like.device:
        return None
    return f"{tuple(out.shape)} {out.dtype} on {out.device}"


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
    got = mismatch(weights, expected, q)
    if got is not None:
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
