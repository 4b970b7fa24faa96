"""What a peer's adapter declares about its library's kernel, checked without the library.

Its FLOP count is the work the kernel does, not the dense default: a linear-cost peer counted
as n² pairs reports a throughput above the GPU's matrix-product peak (found on an H200:
`peer_fla_decay` at 151 % of it). The dtypes the kernel refuses are refused first, with the
reason. Runs without the libraries: building an adapter only checks that its library imports,
which these tests let pass."""

from __future__ import annotations

import pytest
import torch

from attnbench import VariantShape, build_variant
from attnbench.peers import availability
from attnbench.peers.fla import FLA_CHUNK
from attnbench.variant import VARIANTS

SHAPE = VariantShape(4, 64, 8192)
PEERS = [n for n in VARIANTS.names("peer_*") if VARIANTS.get(n).peer_of]


@pytest.fixture(autouse=True)
def _libraries_import(monkeypatch):
    monkeypatch.setattr(availability, "import_problem", lambda *args: "")


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("name", PEERS)
def test_a_peer_counts_the_work_of_our_variant_of_the_same_maths(name, causal):
    """Within 4× of our variant's count at its defaults, at 8k where a dense count and a
    linear-cost one differ more than 100-fold, so the dense default fails by far. Not closer:
    the kernels do different work for the same maths (FLA's non-causal output is composed of
    two causal passes, 4× our linear's direct KᵀV at chunk 64; natten's and local-attention's
    windows count the tiles they compute, up to 2.8× our window's pairs)."""
    try:
        peer = build_variant(name, {}, SHAPE)
    except ModuleNotFoundError as exc:  # an adapter that sets its library up when built
        pytest.skip(f"{name} needs {exc.name} to be built")
    ours = build_variant(peer.peer_of, {}, SHAPE)
    size = (2, 4, 8192, 8192, 64, 64, causal)
    ratio = peer.forward_flops(*size) / ours.forward_flops(*size)
    assert 0.25 <= ratio <= 4.0, f"{name}: {ratio:.3g}× {peer.peer_of}'s count"


@pytest.mark.parametrize("name", [n for n in PEERS if n.startswith("peer_fla_")])
def test_an_fla_peer_counts_our_chunked_form_at_fla_s_chunk_length(name):
    peer = build_variant(name, {}, SHAPE)
    ours = build_variant(peer.peer_of, {"chunk_size": FLA_CHUNK}, SHAPE)
    size = (2, 4, 4096, 4096, 64, 64)
    assert peer.forward_flops(*size, True) == ours.forward_flops(*size, True)
    # not causal: the adapter's composition of the causal kernel, more than one causal pass
    assert peer.forward_flops(*size, False) > peer.forward_flops(*size, True)


@pytest.mark.parametrize(
    ("name", "dtype", "refused"),
    [
        ("peer_fla_delta_net", torch.float32, True),
        ("peer_fla_delta_net", torch.float64, True),
        ("peer_fla_delta_net", torch.bfloat16, False),
        ("peer_fla_gated_delta_net", torch.float32, False),
        ("peer_fla_gla", torch.float64, True),
    ],
)
def test_a_dtype_the_fla_kernel_refuses_is_unsupported_with_its_reason(name, dtype, refused):
    """FLA's kernels refuse some dtypes with their own errors (an assert, a Triton
    CompilationError): the adapter refuses them first with `UnsupportedError`, naming the
    dtype's reason, so a job records it and a test skips it, and lets the others through."""
    from attnbench.variant import UnsupportedError

    peer = build_variant(name, {}, VariantShape(2, 8, 16))
    q = torch.randn(1, 2, 16, 8, dtype=dtype)
    words = f"refuses {str(dtype).removeprefix('torch.')}"
    if refused:
        with pytest.raises(UnsupportedError, match=words):
            peer.check_inputs(q, q, q, True)
        return
    try:
        peer.check_inputs(q, q, q, True)
    except UnsupportedError as err:  # off a GPU the device is refused, never the dtype
        assert words not in str(err)
