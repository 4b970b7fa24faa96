"""Each variant's declared FLOPs (`forward_flops`, `backward_flops`) against what
`torch.utils.flop_counter` counts its kernel doing, over the registry.

The counter sees matrix products (mm, bmm, baddbmm, einsum's products, SDPA's math path), not
torch's CPU flash kernel: the forward is counted with SDPA on its math backend (the same
products); a backward that runs in the flash kernel (which recomputes the scores) is skipped,
saying so.
The counter runs on the autograd path (inputs that require gradients), whose products are all
out of place; a no-autograd path that accumulates into an output (``bmm(out=)``) is partly
invisible to it.

Two claims, so that an achieved GFLOP/s is never inflated by the count behind it:
- the declared count never exceeds the products the kernel runs (a sparse kernel may run more,
  masked, than the pairs it scores: that waste is not credited);
- for a variant that scores every pair (density 1) without a causal mask, the two agree within
  5% (the O(N·D) extras: normalisers, chunk-state hand-overs).
Peers are left out: their kernels are their libraries' (performer's causal state is a cumulative
sum, which the counter does not see).
"""

from __future__ import annotations

import pytest
import torch
from conftest import counted_flops

from attnbench.harness.discovery import load_plugins
from attnbench.variant import VARIANTS, VariantShape, build_variant

load_plugins()
OURS = sorted(name for name in VARIANTS.names() if not VARIANTS.get(name).library)
B, H, N, D = 1, 4, 1024, 32  # several tiles and chunks (topk mixes densely up to 1024 keys)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("name", OURS)
def test_declared_forward_flops_are_the_products_the_kernel_runs(name, causal):
    variant = build_variant(name, {}, VariantShape(H, D, N))
    if causal and not variant.supports_causal:
        pytest.skip(f"variant '{name}' is not causal")
    counted, _ = counted_flops(variant, causal, backward=False)
    if counted == 0:
        pytest.skip(f"variant '{name}' runs its products in torch's CPU flash kernel (uncounted)")
    declared = variant.forward_flops(B, H, N, N, D, D, causal)
    assert declared <= counted * (1 + 1e-9), f"declares {declared / counted:.3f}× its products"
    if not causal and variant.density(N, N, False) == 1.0:
        assert counted <= 1.05 * declared, f"runs {counted / declared:.3f}× what it declares"


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("name", [n for n in OURS if VARIANTS.get(n).grouped_query])
def test_grouped_query_heads_are_counted_as_computed(name, causal):
    """4 query heads on 1 key/value head, for the variants that take them natively (a state per
    key/value head): the count follows, never above the products run and, without a mask,
    within 5% of them. A linear-cost variant's state is what the group shares, so its count is
    below that of one state per query head (which over-counted 1.6× at 4 on 1); softmax's
    products are per query head either way."""
    grouped = build_variant(name, {}, VariantShape(H, D, N, n_kv_heads=1))
    counted, _ = counted_flops(grouped, causal, backward=False, kv_heads=1)
    declared = grouped.forward_flops(B, H, N, N, D, D, causal)
    assert declared <= counted * (1 + 1e-9), f"declares {declared / counted:.3f}× its products"
    if not causal:
        assert counted <= 1.05 * declared, f"runs {counted / declared:.3f}× what it declares"
    if grouped.cost == "n":
        per_query_head = build_variant(name, {}, VariantShape(H, D, N))
        assert declared < per_query_head.forward_flops(B, H, N, N, D, D, causal)


@pytest.mark.parametrize("name", OURS)
def test_declared_backward_flops_are_the_products_autograd_runs(name):
    """Non-causal, where the forward's products are all counted: the backward's products are
    within 5% of `backward_flops` (autograd: two per forward product)."""
    variant = build_variant(name, {}, VariantShape(H, D, N))
    if variant.density(N, N, False) < 1.0:
        pytest.skip(f"variant '{name}' is sparse: its kernels run masked parts of tiles")
    if counted_flops(variant, False, backward=True, math=False)[1] == 0:
        pytest.skip(
            f"variant '{name}' runs its backward in torch's flash kernel, which recomputes the "
            "scores (declared 2.5×) and which the counter does not see; the math backend's "
            "autograd is not what it runs"
        )
    forward, backward = counted_flops(variant, False, backward=True)
    declared = variant.backward_flops(B, H, N, N, D, D, False)
    assert declared == pytest.approx(backward, rel=0.05)


def test_within_tolerance_judges_by_the_declared_error_of_the_dtype():
    variant = build_variant("softmax", {}, VariantShape(H, D, N))
    assert variant.within_tolerance(9e-6, torch.float32)
    assert not variant.within_tolerance(2e-5, torch.float32)
    assert variant.within_tolerance(4e-2, torch.bfloat16)
    assert not variant.within_tolerance(float("nan"), torch.float32)
    assert variant.within_tolerance(1.0, torch.int8)  # no declared tolerance: not judged
