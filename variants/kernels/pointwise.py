"""A compiled CPU kernel for pointwise attention (`relu2`, `sigmoid`: weights f(a·q·k + b) with
no row normalisation), the forward without autograd of `variants.pointwise`.

Why compiled: with no normalisation there is nothing to carry across key tiles, so the work is
two GEMMs per (query tile, key tile) with one elementwise pass between them, the structure of
torch's CPU flash kernel without its running maximum and rescaling: it should cost no more than
SDPA. Done as torch operators (`pointwise.pointwise_attention`), each tile's scores make extra
trips through memory and the Python loop launches 4 operators per tile: 1.04–1.48× dense causal
SDPA at 8k across two hosts (issue #57). Here a thread takes one (head, query tile) at a time,
scores a key tile into a buffer that stays in cache (BLAS's ``sgemm_``, which torch exports where
it links MKL), applies f in place with at::vec (relu², or σ by ``exp_u20`` as torch's flash
kernel), zeroes the future keys of a tile that crosses the diagonal, and accumulates the tile's
product with the values into the output rows.

The tile sizes (queries × keys per tile) are chosen on the machine at first use of a shape class
(`autotune.choose`, among `TILES`) and named in the record (`fwd_tuned`). Built for the CPU
capability torch dispatches to (`compiled`). Where the kernel does not serve a call (autograd,
another dtype or device, no ``sgemm_`` in this torch, a failed build: one warning),
`compiled_pointwise` returns None and the caller keeps its torch path.
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch

from attnbench.toolkit.kernel_path import note
from attnbench.variants.kernels import autotune, compiled

SOURCE = Path(__file__).with_name("pointwise.cpp")
KINDS = {"relu2": 0, "sigmoid": 1}  # the kernel's f: relu(s)², σ(s)
# (query tile, key tile) candidates; the first is the default (best on the AMD EPYC it was
# written on). A tile of 128 × 512 scores is 256 KiB: L2 on current x86 cores
TILES = ((128, 512), (64, 256), (64, 512), (128, 256), (128, 1024), (256, 256), (256, 512))
PROBE_ROWS = 2048  # a tuning times the kernel on the first this many queries (and keys)
TUNE_FROM = 4 * 1024 * 1024  # query-key pairs (over heads) from which a call's class is tuned


def path() -> str:
    """What a record says ran, e.g. "pointwise kernel (AVX512)"."""
    return f"pointwise kernel ({compiled.capability()})"


@functools.cache
def _load() -> bool:
    built = compiled.build(
        "attnbench_pointwise",
        SOURCE,
        compiled.capability(),
        "relu2 and sigmoid use their slower torch path.",
    )
    return built and bool(torch.ops.attnbench_pointwise.has_gemm())


def _tiles(q3, k3, v3, kind: int, causal: bool) -> tuple[int, int]:
    """The tile sizes for this call's shape class on this machine (`autotune.choose`)."""
    rows = min(q3.shape[1], PROBE_ROWS)
    shape_class = {
        "kind": kind,
        "causal": causal,
        "d": q3.shape[-1],
        "dv": v3.shape[-1],
        "heads": min(q3.shape[0], 64),
        "long": q3.shape[1] >= 2048,
    }

    def probe(config):
        qs, ks, vs = q3[:, :rows], k3[:, :rows], v3[:, :rows]
        qb, kb = config["query_tile"], config["key_tile"]
        op = torch.ops.attnbench_pointwise.pointwise_forward
        return lambda: op(qs, ks, vs, kind, 0.125, 0.0, causal, qb, kb)

    candidates = [{"query_tile": qb, "key_tile": kb} for qb, kb in TILES]
    worth = q3.shape[0] * q3.shape[1] * k3.shape[1] >= TUNE_FROM
    config = autotune.choose("pointwise kernel", shape_class, candidates, probe, worth)
    return int(config["query_tile"]), int(config["key_tile"])


def compiled_pointwise(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    kind: str,
    scale: float,
    shift: float,
    causal: bool,
) -> torch.Tensor | None:
    """Σ_j f(scale·q_i·k_j + shift)·v_j over visible keys (j <= i when ``causal``), f =
    ``kind`` (`KINDS`), by the compiled kernel; None where it does not serve the call."""
    if not (compiled.forward_in_float32_cpu(q, k, v) and _load()):
        return None
    q3, k3, v3 = compiled.heads_flat(q, k, v)
    qb, kb = _tiles(q3, k3, v3, KINDS[kind], causal)
    note(path())
    out = torch.ops.attnbench_pointwise.pointwise_forward(
        q3, k3, v3, KINDS[kind], scale, shift, causal, qb, kb
    )
    return out.view(*q.shape[:-1], v.shape[-1])
