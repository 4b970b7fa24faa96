"""`peer_local_window`: local-attention's sliding-window softmax (lucidrains/local-attention).

The same maths as our `window` with the same w. local-attention splits the sequence into buckets
of W positions; a query sees its own bucket and ``look_backward = 1`` bucket before (and, not
causal, ``look_forward = 1`` after), so by default between W and 2W − 1 earlier keys depending on
where it sits in its bucket. With ``exact_windowsize=True`` it masks the look-around to
|i − j| ≤ W: causal j ∈ [i − W, i], W + 1 keys, i.e. our `window` with w = W + 1. The adapter
takes our w and uses buckets of W = w − 1, so ``peer_local_window`` and ``window`` with the same
``window`` parameter compute the same operator (tests/peers/test_local_attention.py checks it to
float32 rounding). Rotary embeddings are off (the library adds them only when given ``dim``; we
pass ``use_rotary_pos_emb=False`` as well): our variants see q and k as given, and positions are
the model's business. A relative ``window`` (a fraction in (0, 1), `AttentionVariant.size_at`)
is resolved for each sequence length, as `window` resolves it, and the library's modules (they
hold no parameters) are built per resolved w.

Lengths that are not a multiple of W are zero-padded by the library (``autopad``); not causal,
those padded keys would enter a late query's softmax with score 0, so the adapter passes a key
mask that excludes them (causal, they are in every real query's future and masked anyway).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from attnbench import register_variant
from attnbench.masks import WINDOW, window_pairs
from attnbench.peers.availability import PeerVariant


@dataclass
class LocalWindowParams:
    """Hyperparameters of `peer_local_window`."""

    # w, as in `window`: causal keeps the w latest keys, else |i − j| < w; (0, 1): a fraction
    window: float = WINDOW


@register_variant("peer_local_window")
class LocalWindowPeer(PeerVariant):
    """local-attention's `LocalAttention`, exact window of w keys, no rotary embedding."""

    family = "sparse"
    cost = "n·w"
    supports_causal = True
    requires_equal_lengths = True
    Params = LocalWindowParams
    size_params = ("window",)
    peer_of = "window"
    library = "local-attention"
    module = "local_attention"

    def __init__(self, params: LocalWindowParams, shape) -> None:
        super().__init__(params, shape)
        self.check_size("window")
        if params.window >= 1 and params.window < 2:
            raise ValueError(
                f"peer_local_window window must be >= 2 (buckets of w − 1 positions), got "
                f"{params.window:g}; use window=2 or more."
            )
        self.lib()
        self._modules_by_w: dict[tuple[int, bool], object] = {}

    def window(self, n: int) -> int:
        """w for a sequence of n, as `window` resolves it (not clamped: the library pads)."""
        return self.size_at("window", n)

    def attention(self, w: int, causal: bool):
        """local-attention's module for windows of w >= 2 (buckets of w − 1), causal or not."""
        if (w, causal) not in self._modules_by_w:
            self._modules_by_w[(w, causal)] = self.lib().LocalAttention(
                causal=causal,
                look_forward=0 if causal else 1,
                window_size=w - 1,
                look_backward=1,
                exact_windowsize=True,
                autopad=True,
                use_rotary_pos_emb=False,
            )
        return self._modules_by_w[(w, causal)]

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False
    ) -> torch.Tensor:
        self.check_inputs(q, k, v, causal)
        b, h, n, _ = q.shape
        w = self.window(n)
        if w == 1:  # a fraction of a short sequence: each query sees itself alone, out = v
            return v.clone()
        attention = self.attention(w, causal)
        if causal:
            return attention(q, k, v)
        mask = None
        if n % (w - 1):  # padded keys must not enter the softmax (see above)
            mask = torch.ones(b * h, n, dtype=torch.bool, device=q.device)
        return attention(q, k, v, mask=mask)

    def scored_pairs(self, n: int, m: int, causal: bool) -> float:
        """The pairs of our `window` with the same w (the exact window: padded and look-around
        keys outside it are masked, not part of the operator)."""
        return float(window_pairs(n, min(self.window(n), n), causal))

    def forward_flops(self, batch, heads, n, m, d, dv, causal) -> float:
        """Work the library does: every query scores 2 (causal) or 3 buckets of W keys, over the
        sequence padded to a multiple of W (masked pairs included)."""
        w = max(self.window(n) - 1, 1)
        padded = math.ceil(n / w) * w
        return 2.0 * batch * heads * padded * (2 if causal else 3) * w * (d + dv)
