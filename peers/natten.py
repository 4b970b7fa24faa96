"""`peer_natten_window`: NATTEN's 1-D neighbourhood attention (Hassani et al.), CUDA.

`natten.functional.na1d` with kernel size k. Causal, a query sees the k most recent keys
(itself included; fewer at the start): exactly our causal `window` with w = k. Not causal, a
neighbourhood keeps k keys centred on the query and *shifts* at the borders to keep k of them,
whereas our window keeps |i − j| < w and so sees fewer keys near the ends: with k = 2w − 1 the
two agree for every query at least w − 1 positions from both ends and differ on the first and
last w − 1 queries. NATTEN needs k ≤ N; the adapter clamps k to N (a window that covers the
sequence).

Install: NATTEN 0.21 ships source only and builds against the installed torch (its setup
imports torch): ``pip install natten==0.21.7 --no-build-isolation`` (with CUDA 12+ and
``NATTEN_CUDA_ARCH`` set, or a visible GPU, for its fused kernels).
"""

from __future__ import annotations

from dataclasses import dataclass

from attnbench import register_variant
from attnbench.masks import WINDOW
from attnbench.peers.availability import PeerVariant


@dataclass
class NattenWindowParams:
    """Hyperparameters of `peer_natten_window`."""

    # w, as in `window` (a fraction of the sequence in (0, 1), or a count): kernel k = w causal,
    # 2w − 1 not causal
    window: float = WINDOW


@register_variant("peer_natten_window")
class NattenWindowPeer(PeerVariant):
    """NATTEN `na1d`: neighbourhood attention, causal = our sliding window."""

    family = "sparse"
    cost = "n·w"
    supports_causal = True
    requires_equal_lengths = True
    Params = NattenWindowParams
    size_params = ("window",)
    peer_of = "window"
    library = "natten"
    module = "natten.functional"
    install = "pip install natten==0.21.7 --no-build-isolation (CUDA 12+, builds against torch)"
    devices = ("cuda",)

    def __init__(self, params: NattenWindowParams, shape) -> None:
        super().__init__(params, shape)
        self.check_size("window")

    def kernel(self, n: int, causal: bool) -> int:
        """NATTEN's kernel size for a sequence of n: w causal, 2w − 1 not, clamped to n."""
        w = self.size_at("window", n)
        return min(w if causal else 2 * w - 1, n)

    def scored_pairs(self, n: int, m: int, causal: bool) -> float:
        """Causal: the k latest keys (fewer at the start); not causal: k keys for every query
        (the neighbourhood shifts at the borders)."""
        k = self.kernel(n, causal)
        if not causal:
            return float(n * k)
        return float(sum(min(i + 1, k) for i in range(n)))

    def forward(self, q, k, v, causal=False):
        self.check_inputs(q, k, v, causal)
        kernel = self.kernel(q.shape[-2], causal)
        out = self.lib().na1d(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), kernel, is_causal=causal
        )
        return out.transpose(1, 2)
