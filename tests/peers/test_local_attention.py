"""`peer_local_window` (local-attention 1.11.2) computes our `window`'s operator, and meets the
variant contract. Skipped, with one sentence, where local-attention is not installed."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip(
    "local_attention", reason="local-attention is not installed (the [peers] extra)"
)

from attnbench import VariantShape, build_variant  # noqa: E402
from attnbench.testing import VariantContractTests, random_qkv  # noqa: E402


class TestLocalWindowContract(VariantContractTests):
    variant = "peer_local_window"


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("n", [1, 17, 64, 300])
@pytest.mark.parametrize("w", [2, 5, 16, 256])
def test_same_operator_as_window(n, w, causal):
    """Equal to `window` with the same w, lengths that are and are not multiples of the bucket
    (w − 1), windows shorter and longer than the sequence. Tolerance 1e-5: both are float32
    softmaxes over the same keys, summed in a different order (measured: ≤ 1e-6)."""
    shape = VariantShape(n_heads=3, head_dim=8, max_len=512)
    q, k, v = random_qkv(b=2, n=n, seed=n + w)
    ours = build_variant("window", {"window": w}, shape)(q, k, v, causal=causal)
    peer = build_variant("peer_local_window", {"window": w}, shape)(q, k, v, causal=causal)
    torch.testing.assert_close(peer, ours, rtol=1e-5, atol=1e-5)


def test_no_rotary_embedding_and_exact_window():
    peer = build_variant("peer_local_window", {"window": 9})
    for attention in (peer.attention(9, causal=False), peer.attention(9, causal=True)):
        assert attention.rel_pos is None  # q and k are used as given
        assert attention.exact_windowsize and attention.window_size == 8


def test_bad_window_is_refused():
    with pytest.raises(ValueError, match="window must be >= 2"):
        build_variant("peer_local_window", {"window": 1})


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("n", [3, 17, 64, 300])
def test_relative_window_is_windows_operator_and_density(n, causal):
    """A fraction of the sequence resolves to the same w as `window`'s (one rule), so the two
    stay peers at the relative default; their densities agree too."""
    shape = VariantShape(n_heads=2, head_dim=8, max_len=512)
    q, k, v = random_qkv(b=1, n=n, seed=n)
    ours = build_variant("window", {"window": 0.25}, shape)
    peer = build_variant("peer_local_window", {"window": 0.25}, shape)
    torch.testing.assert_close(peer(q, k, v, causal=causal), ours(q, k, v, causal=causal))
    assert peer.density(n, n, causal) == ours.density(n, n, causal) < 1
