"""Each built-in variant's float32 gradient error against its float64 gradients: the
measurement behind `AttentionVariant.backward_tolerance`'s default.

    python scripts/gradient-errors.py

Columns: n = 100, H = 3, D = 8 causal; n = 512, H = 4, D = 64 causal; the same not causal. The
error of one input's gradient (q, k, v, each gate) is max |g − g_float64| over
max(1, max |g_float64|) for one standard-normal cotangent; a column shows the largest.
"""

from __future__ import annotations

import torch

import attnbench
from attnbench import VariantShape, build_variant, random_gates
from attnbench.toolkit.timed import gradient_errors
from attnbench.variant import VARIANTS


def worst(name: str, n: int, heads: int, d: int, causal: bool) -> float | None:
    shape = VariantShape(n_heads=heads, head_dim=d, max_len=max(n, 2048))
    torch.manual_seed(0)
    variant = build_variant(name, {}, shape)
    if variant.unavailable("cpu"):
        return None
    gen = torch.Generator().manual_seed(0)
    inputs = {x: torch.randn(1, heads, n, d, generator=gen, dtype=torch.float64) for x in "qkv"}
    gates = random_gates(variant, 1, n, head_dim=d, kv_heads=heads, generator=gen)
    inputs.update({f"gate {g}": t.double() for g, t in gates.items()})
    causal = causal and variant.supports_causal

    def run(xs, dtype):
        on = {g: xs[f"gate {g}"] for g in gates}
        return variant.to(dtype)(xs["q"], xs["k"], xs["v"], causal=causal, gates=on or None)

    errors = gradient_errors(run, inputs, torch.float32, gen)
    return None if "unmeasured" in errors else max(errors.values())


def main() -> None:
    attnbench.load_plugins()
    for name in VARIANTS.names():
        if VARIANTS.get(name).library:
            continue
        cells = [worst(name, 100, 3, 8, True), worst(name, 512, 4, 64, True)]
        cells.append(worst(name, 512, 4, 64, False))
        print(f"{name:22s}", "  ".join("-" if c is None else f"{c:.1e}" for c in cells))


if __name__ == "__main__":
    main()
