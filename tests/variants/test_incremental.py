"""The built-in variants' incremental forms (each in its variant's module) beyond the
contract suite: every causal built-in has one, non-default hyperparameters and trained-looking
parameters decode exactly, and a window's state stops growing at w.

Float64 and tolerance 1e-9 as in `attnbench.testing` (rounding ~1e-13; a wrong weight ~1e-3).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

from attnbench import VariantShape, build_variant, incremental_form, why_no_incremental_form
from attnbench.testing import random_qkv
from attnbench.variant import VARIANTS

H, D, DV = 3, 8, 5


def test_a_variant_built_without_loading_plugins_has_its_incremental_form():
    """Each form registers in its variant's module, so `incremental_form` needs no plugins
    loaded: a fresh process that imports only softmax's module and builds the variant directly
    gets its form, and the engine's plugin discovery is never imported."""
    code = textwrap.dedent("""
        import sys
        from attnbench.incremental import incremental_form
        from attnbench.variant import VariantShape
        from attnbench.variants.softmax import SoftmaxAttention, SoftmaxIncremental, SoftmaxParams
        shape = VariantShape(n_heads=2, head_dim=4, max_len=8)
        decoder = incremental_form(SoftmaxAttention(SoftmaxParams(), shape), 1, 8, 4)
        assert type(decoder) is SoftmaxIncremental, type(decoder)
        assert "attnbench.harness.discovery" not in sys.modules
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_every_causal_built_in_variant_has_an_incremental_form():
    """Ours (no library) must not fall back to "unsupported" on the decode task."""
    missing = [
        name
        for name in VARIANTS.names()
        if not VARIANTS.get(name).library
        and VARIANTS.get(name).supports_causal
        and why_no_incremental_form(VARIANTS.get(name))
    ]
    assert missing == []


CASES = [
    ("softmax", {"temperature": 0.7}),
    ("softmax", {"learn_temperature": True}),
    ("relu2", {"bias": -0.2}),
    ("sigmoid", {"bias": 0.5}),
    ("linear", {"feature_map": "relu", "chunk_size": 16}),
    ("linear", {"feature_map": "identity", "eps": 0.5}),
    ("identity", {"chunk_size": 16}),
    ("decay", {"decay": 0.9, "chunk_size": 8}),
    ("window", {"window": 16}),
    ("window", {"window": 200}),  # longer than the sequence: dense
    ("strided", {"local": 5, "stride": 7}),
    ("bigbird", {"block": 8, "n_global": 2, "n_random": 2, "window_blocks": 1, "seed": 3}),
    ("learned_pattern", {"block": 8, "keep": 3}),
    ("topk", {"k": 5}),
]


@pytest.mark.parametrize(("name", "params"), CASES, ids=[f"{n}-{p}" for n, p in CASES])
def test_incremental_form_decodes_non_default_settings_exactly(name, params):
    """Steps, prefills that continue a sequence, and parameters moved off their initial values
    (a learned temperature per head, learned block gates that differ per head)."""
    n = 101
    torch.manual_seed(0)
    variant = build_variant(name, params, VariantShape(H, D, n)).double()
    with torch.no_grad():
        for p in variant.parameters():  # as after training: per-head values all different
            p.add_(torch.randn_like(p))
    q, k, v = random_qkv(b=2, h=H, n=n, d=D, dv=DV, seed=5, dtype=torch.float64)
    decoder = incremental_form(variant, 2, n, D, DV, dtype=torch.float64)
    with torch.no_grad():
        expected = variant(q, k, v, causal=True)
        outs, t = [], 0
        for size in (40, 1, 1, 17, 1, 41):
            part = [x[:, :, t : t + size] for x in (q, k, v)]
            outs.append(decoder.prefill(*part))
            t += size
    torch.testing.assert_close(torch.cat(outs, dim=2), expected, rtol=1e-9, atol=1e-9)


def test_window_state_stops_growing_at_the_window():
    """A ring of w keys and values: the state after 64, 512 and 4096 tokens is the same, w
    tokens' worth, for an absolute window of 32."""
    sizes = []
    for n in (64, 512, 4096):
        variant = build_variant("window", {"window": 32}, VariantShape(H, D, n))
        decoder = incremental_form(variant, 1, n, D, DV)
        with torch.no_grad():
            decoder.prefill(*random_qkv(b=1, h=H, n=n, d=D, dv=DV))
        sizes.append(decoder.state_bytes())
    assert sizes == [32 * H * (D + DV) * 4] * 3


def test_a_step_takes_one_token_and_shapes_are_checked():
    variant = build_variant("softmax", {}, VariantShape(H, D, 16))
    decoder = incremental_form(variant, 2, 16, D, DV)
    q, k, v = random_qkv(b=2, h=H, n=4, d=D, dv=DV)
    with pytest.raises(ValueError, match="step takes one token"):
        decoder.step(q, k, v)
    with pytest.raises(ValueError, match=r"expects q of shape \(B=2, H=3"):
        decoder.prefill(q[:1], k[:1], v[:1])
    assert decoder.position == 0


def test_strided_forward_with_a_value_dim_other_than_the_key_dim():
    """The fused path (n divisible by the stride) uses torch's CPU flash op, which refuses
    values of another head size than the keys; those inputs take the explicit path."""
    variant = build_variant("strided", {}, VariantShape(H, D, 150))
    q, k, v = random_qkv(b=1, h=H, n=150, d=D, dv=DV)
    assert variant(q, k, v, causal=True).shape == (1, H, 150, DV)


def test_state_at_64k_tokens_is_the_analytic_size_and_what_is_held():
    """Issue #26's numbers at a 64k context, B=1, H=4, D=64, float32: linear holds a D×D matrix
    and a D-vector per head, identity and decay a D×D matrix, softmax 2·n·D per key/value head,
    a window of 256 2·w·D; the same for 2 key/value heads under grouped-query heads, except
    decay's per-query-head state. Sized on the meta device (nothing allocated); then the O(1)
    and ring states are prefilled for real at 64k (H=2, D=16) and hold exactly that."""
    n, h, d = 65536, 4, 64
    analytic = {
        ("linear", 4): h * d * (d + 1),
        ("identity", 4): h * d * d,
        ("decay", 4): h * d * d,
        ("softmax", 4): 2 * n * d * h,
        ("window", 4): 2 * 256 * d * h,
        ("linear", 2): 2 * d * (d + 1),
        ("softmax", 2): 2 * n * d * 2,
        ("window", 2): 2 * 256 * d * 2,
        ("decay", 2): h * d * d,  # λ differs per query head: a state per query head
    }
    for (name, kv), elements in analytic.items():
        params = {"window": 256} if name == "window" else {}
        variant = build_variant(name, params, VariantShape(h, d, n))
        decoder = incremental_form(variant, 1, n, d, device="meta", kv_heads=kv)
        assert decoder.state_size(n) == elements, (name, kv)
        if name != "softmax":  # the others do not grow with the context past 4k tokens
            assert decoder.state_size(n // 16) == elements, (name, kv)
    for name in ("linear", "identity", "decay", "window"):
        params = {"window": 256} if name == "window" else {}
        variant = build_variant(name, params, VariantShape(2, 16, n))
        decoder = incremental_form(variant, 1, n, 16)
        with torch.no_grad():
            decoder.prefill(*random_qkv(b=1, h=2, n=n, d=16, dv=16))
        expected = {"linear": 2 * 16 * 17, "window": 2 * 256 * 16 * 2}.get(name, 2 * 16 * 16)
        assert decoder.state_bytes() == expected * 4, name
