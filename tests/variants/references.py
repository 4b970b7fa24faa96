"""Slow, obviously correct reference implementations that the variants are checked against."""

from __future__ import annotations

import math

import torch


def naive_softmax(q, k, v, causal=False, temperature=1.0):
    """softmax(QKᵀ/(√d·ε))·V with the causal mask j <= i applied as −∞, computed densely."""
    logits = q @ k.transpose(-2, -1) / (math.sqrt(q.shape[-1]) * temperature)
    if causal:
        n, m = logits.shape[-2:]
        visible = torch.tensor([[j <= i for j in range(m)] for i in range(n)])
        logits = logits.masked_fill(~visible, float("-inf"))
    return torch.softmax(logits, dim=-1) @ v


def linear_recurrence(fq, fk, v, eps):
    """Causal linear attention by the explicit recurrence, one position at a time.

    S_t = S_{t−1} + φ(k_t) v_tᵀ, z_t = z_{t−1} + φ(k_t), out_t = φ(q_t)S_t / (φ(q_t)·z_t + eps).
    """
    b, h, n, d = fq.shape
    state = torch.zeros(b, h, d, v.shape[-1], dtype=torch.float64)
    norm = torch.zeros(b, h, d, dtype=torch.float64)
    outs = []
    for t in range(n):
        state = state + fk[:, :, t, :, None].double() * v[:, :, t, None, :].double()
        norm = norm + fk[:, :, t].double()
        num = torch.einsum("bhd,bhde->bhe", fq[:, :, t].double(), state)
        den = torch.einsum("bhd,bhd->bh", fq[:, :, t].double(), norm)[..., None] + eps
        outs.append(num / den)
    return torch.stack(outs, dim=2).to(v.dtype)


def linear_dense(fq, fk, v, eps):
    """Non-causal linear attention as one dense (N, M) product, normalised per row."""
    scores = fq.double() @ fk.double().transpose(-2, -1)
    return (scores @ v.double() / (scores.sum(-1, keepdim=True) + eps)).to(v.dtype)
