"""The contract every attention variant meets, and the variant registry.

A variant mixes per-head tensors: ``forward(q, k, v, causal=False) -> out`` with
q: (B, H, N, D), k: (B, H, M, D), v: (B, H, M, Dv) and out: (B, H, N, Dv). Projections, heads and
the output projection live in `attnbench.toolkit.layer`, not in the variant.

Grouped-query heads: k and v may have fewer heads than q (``VariantShape.n_kv_heads``, dividing H;
query head h reads key/value head h // (H / H_kv), as ``repeat_interleave`` lays them out). A
variant that shares each key/value head across its group natively sets ``grouped_query = True``
(softmax through SDPA's grouped-query path; linear-cost states computed once per key/value head);
for any other variant, calling it repeats k and v to H heads first (`AttentionVariant.__call__`),
so every variant accepts grouped inputs and gives the outputs of the repeated heads, and only the
native ones save the work.

Causal convention (all variants): query i may see key j iff j <= i (top-left aligned; with N == M
this is the usual autoregressive mask).

Density: ``scored_pairs(n, m, causal)`` is how many (query, key) pairs the variant scores for n
queries and m keys (default: every allowed pair); ``density`` divides it by the allowed pairs, so
it is 1 for dense and linear-cost variants and below 1 for a sparse pattern. Every task records it
at the lengths its variant sees. Sizes of a pattern (a window, a block, k) may be given relative
to the sequence: `AttentionVariant.size_at` is the one rule (a value in (0, 1) is a fraction of
the length, rounded up; a value >= 1 an absolute count).

Gates (data-dependent mixers: the delta rule, gated linear attention, Mamba-2, the mesa layer).
In those papers a per-token gate (a step size β, a decay α, a time step Δ) comes from the layer's
input, like q, k and v. A variant declares what it needs as data, ``gates = {"beta": "head"}``: a
width ``"head"`` is one value per key/value head and token, ``"key"`` one per key channel (D
values), ``"value"`` one per value channel (Dv values: an extra value per token, as Gated
DeltaProduct writes several per token). The shared layer (`attnbench.toolkit.layer`) projects
each declared gate from its input with one linear map, and ``forward(q, k, v, causal, gates)``
receives a dict name → tensor of *raw* (pre-activation) values, (B, H_kv, M, 1), (B, H_kv, M, D)
or (B, H_kv, M, Dv) for M keys. The variant applies its paper's parametrisation
(β = sigmoid(raw), log α = logsigmoid(raw)/τ, Δ = softplus(raw + bias)) and owns the parameters
that go with it. Why this form: the projection is the same for every
variant (so they are compared with identical layers, as q, k and v are), while the maths of a gate
stays in one place, the variant; a plugin gets the same facility by declaring ``gates``. Why per
key/value head: a gate governs how the state is written and forgotten, and the state is per
key/value head. Timed tasks feed standard-normal raw gates (`random_gates`). A gated recurrent
mixer called with ``causal=False`` reads, at every query, the state after the last key (as
linear attention's q·(KᵀV)).

Packed sequences (``cu_seqlens``): training packs documents into one sequence and serving batches
requests of different lengths. ``variant(q, k, v, causal, gates, cu_seqlens=[0, l₁, l₁ + l₂, …,
N])`` takes documents packed along the sequence axis (the cumulative lengths FlashAttention's,
PyTorch's and flash-linear-attention's varlen functions call ``cu_seqlens``; every batch row
packed alike, usually B = 1) and returns, for each document, exactly the outputs of that document
run alone: no key of another document is seen, a recurrent state starts afresh at each boundary,
a positional pattern restarts its positions. ``packing`` says how: ``"split"`` (the default, so a
plugin is correct without a line of code) runs ``forward`` once per document and concatenates;
``"native"`` passes ``cu_seqlens`` (a 1-D int64 tensor on q's device) to ``forward(…,
cu_seqlens=…)``, which honours it in one pass (a chunked engine that resets its state at each
document's first chunk); ``"none"`` refuses with `UnsupportedError`. The contract suite checks,
for every variant, that a packed call equals its documents run alone.

Adding a variant::

    @dataclass
    class MyParams:
        alpha: float = 1.0  # what alpha does

    @register_variant("mine")
    class Mine(AttentionVariant):
        family = "softmax"
        cost = "n²"
        supports_causal = True
        Params = MyParams

        def forward(self, q, k, v, causal=False): ...
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import math
from dataclasses import dataclass
from itertools import pairwise
from typing import Any, ClassVar

import torch
from torch import nn

from attnbench.masks import document_bounds
from attnbench.registry import Registry

COST_CLASSES = ("n²", "n·w", "n")
# one value per key/value head and token; one per key channel; one per value channel
GATE_WIDTHS = ("head", "key", "value")
# the in-context estimators a variant may claim to implement (`AttentionVariant.estimator`)
ESTIMATORS = ("least_squares", "ridge", "online_gd", "gd_step")
# how a variant serves documents packed into one sequence (`AttentionVariant.packing`)
PACKINGS = ("native", "split", "none")


def allowed_pairs(n: int, m: int, causal: bool) -> int:
    """The (query, key) pairs a dense variant scores: n·m, or under the causal convention
    (key j visible to query i iff j <= i) the sum over queries of min(i + 1, m)."""
    if not causal:
        return n * m
    full = min(n, m)  # queries 0 … full − 1 see i + 1 keys, the rest all m
    return full * (full + 1) // 2 + (n - full) * m


def per_query_head(q: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """``q @ m`` for q (B, H, N, X) and m (B, H_kv, X, Y) with H_kv dividing H: each query head
    times its key/value head's matrix (module docstring), without repeating m: (B, H, N, Y)."""
    b, h, n, x = q.shape
    kv = m.shape[1]
    if kv == h:
        return q @ m
    out = q.reshape(b, kv, h // kv, n, x) @ m.unsqueeze(2)
    return out.reshape(b, h, n, m.shape[-1])


class UnsupportedError(RuntimeError):
    """A variant was asked for something it cannot do (e.g. causal masking)."""


@dataclass(frozen=True)
class VariantShape:
    """The shape a variant instance will see.

    Attributes:
        n_heads: Number of (query) heads H (per-head parameters are sized by it).
        head_dim: Query/key head dimension D.
        max_len: Longest sequence the instance will be called with (for fixed patterns).
        n_kv_heads: Key/value heads H_kv, dividing H (None: H). Grouped-query attention when
            1 < H_kv < H, multi-query when H_kv = 1 (module docstring).
    """

    n_heads: int
    head_dim: int
    max_len: int
    n_kv_heads: int | None = None

    def __post_init__(self) -> None:
        if self.n_kv_heads is not None:
            check_kv_heads(self.n_heads, self.n_kv_heads)

    @property
    def kv_heads(self) -> int:
        """H_kv: ``n_kv_heads``, or H when it is not set."""
        return self.n_kv_heads or self.n_heads


def check_kv_heads(heads: int, kv_heads: int) -> None:
    """Refuse key/value heads that do not divide the query heads, in one sentence."""
    if kv_heads < 1 or heads % kv_heads:
        divisors = ", ".join(str(d) for d in range(1, heads + 1) if heads % d == 0)
        raise ValueError(
            f"n_kv_heads={kv_heads} must divide the {heads} query heads; valid: {divisors}."
        )


def repeat_kv_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """Keys or values (B, H_kv, M, ·) repeated to (B, heads, M, ·), each key/value head once per
    query head of its group (a copy; ``x`` itself when H_kv = heads)."""
    kv = x.shape[1]
    if kv == heads:
        return x
    check_kv_heads(heads, kv)
    return x.repeat_interleave(heads // kv, dim=1)


@dataclass
class NoParams:
    """Hyperparameters of a variant that has none."""


class AttentionVariant(nn.Module):
    """Base class of every attention variant (see the module docstring for the contract).

    Class attributes a subclass sets:
        family: Family name for grouping on the leaderboard (e.g. "softmax", "linear", "sparse").
        cost: Cost class in sequence length: "n²", "n·w" or "n".
        supports_causal: Whether ``causal=True`` is implemented.
        requires_equal_lengths: Whether queries and keys must be the same sequence (positional
            patterns such as windows and decays); other lengths raise `UnsupportedError`.
        Params: Hyperparameter dataclass (every field has a default).
        peer_of: For a variant that wraps another project's implementation (a "peer"), the
            registered name of our variant computing the same maths ("" for none, and for our
            own variants). The board sets the two side by side.
        library: The PyPI distribution providing the implementation ("" for our own code); the
            records name it with its installed version.
        backward_tolerance: dtype name → the largest error its gradients (of q, k, v and the
            gates) may make, relative as ``error_tolerance``; the throughput task records the
            gradients' error beside every forward+backward timing and marks one outside it.
        error_tolerance: dtype name → the largest error the kernel may make in that dtype,
            relative to the output's scale (`within_tolerance`). The defaults hold the built-in
            kernels with room: at n = 512, H = 4, D = 64 the worst seen was 9·10⁻⁷ in float32,
            5·10⁻³ in float16 (2.6·10⁻² for top-k, whose rounded scores can pick another key)
            and 3.6·10⁻² in bfloat16. The throughput task records the error and marks a timing
            whose kernel exceeds it: that time enters no contest.
        grouped_query: Whether ``forward`` takes keys and values with fewer heads than queries
            and shares each across its group (module docstring); False: calling the variant
            repeats them to H heads first, so ``forward`` always sees H.
        gates: The per-token gates ``forward`` needs, name → width ("head" or "key"), projected
            from the layer's input and passed raw (module docstring); {} for none.
        packing: How a packed call (``cu_seqlens``) is served: "split" (default: forward per
            document), "native" (forward takes ``cu_seqlens``), "none" (refused); module
            docstring.
        estimator: The regression a layer of this variant solves in context when keys are the
            inputs and values the outputs (Wang et al. 2025, "test-time regression"): one of
            `ESTIMATORS` ("least_squares" for attention without normalisation, theory §3;
            "online_gd" for the delta rule, one gradient step per token; "ridge" for the mesa
            layer), or "" where no such claim is made. The in-context regression task sets the
            trained model's error beside that estimator's on the same prompts.

    A variant whose library or device may be missing overrides `unavailable`; building or
    running it where it is unavailable raises `UnsupportedError` with that sentence, so a job
    becomes an ``unsupported`` record rather than a failure.
    """

    name: ClassVar[str] = ""
    family: ClassVar[str] = ""
    cost: ClassVar[str] = "n²"
    supports_causal: ClassVar[bool] = True
    requires_equal_lengths: ClassVar[bool] = False  # positional patterns: N must equal M
    Params: ClassVar[type] = NoParams
    peer_of: ClassVar[str] = ""  # our variant with the same maths, for a wrapped library's
    library: ClassVar[str] = ""  # PyPI distribution of the implementation; "" = attnbench
    grouped_query: ClassVar[bool] = False  # forward shares k, v across query heads natively
    gates: ClassVar[dict[str, str]] = {}  # gate name → width, "head" or "key" (module docstring)
    # how a packed call (``cu_seqlens``) is served: one of PACKINGS (module docstring)
    packing: ClassVar[str] = "split"
    # the parameters that are pattern sizes (`size_at`, `check_size`): a record names them, so
    # that the board writes a fraction of the sequence as one ("window 0.2n", "stride n/3")
    size_params: ClassVar[tuple[str, ...]] = ()
    # the classical estimator the mixer computes with inputs as keys and outputs as values
    # (one of ESTIMATORS, "" for none claimed): the regression task's "regression view"
    estimator: ClassVar[str] = ""
    # the largest error the kernel may make, by dtype: max |out − out_float64| over
    # max(1, max |out_float64|) on unit-normal inputs (`within_tolerance`)
    error_tolerance: ClassVar[dict[str, float]] = {
        "float64": 1e-12,
        "float32": 1e-5,
        "float16": 5e-2,
        "bfloat16": 1e-1,
    }
    # the largest error its gradients may make, by dtype: for each of the q, k, v and gate
    # gradients of a fixed random cotangent, max |g − g_float64| over max(1, max |g_float64|) on
    # unit-normal inputs. float32: the built-in variants' worst was 1.3·10⁻⁶ (n = 100, H = 3,
    # D = 8 and n = 512, H = 4, D = 64, causal and not: gated_delta_product), so 10⁻⁵ leaves
    # 7× room and still catches a backward off by 0.1 % (scripts/gradient-errors.py); the half
    # dtypes take the forward's
    backward_tolerance: ClassVar[dict[str, float]] = {
        "float64": 1e-12,
        "float32": 1e-5,
        "float16": 5e-2,
        "bfloat16": 1e-1,
    }

    @classmethod
    def unavailable(cls, device: str) -> str:
        """Why this variant cannot run on ``device`` (a device type: "cpu", "cuda") here.

        Returns "" when it can; else one sentence naming what is missing and the fix (e.g.
        "flash-attn needs a CUDA device; this job runs on cpu."). The listing shows it, the
        harness records a job on such a device as ``unsupported`` with it, and the contract tests
        skip with it. Our own variants run everywhere: the default is "".
        """
        return ""

    def __init__(self, params: Any, shape: VariantShape) -> None:
        super().__init__()
        self.params = params
        self.shape = shape

    def __call__(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        causal: bool = False,
        gates: dict[str, torch.Tensor] | None = None,
        cu_seqlens: torch.Tensor | list[int] | None = None,
    ) -> torch.Tensor:
        """``forward``, with keys and values of fewer heads than the queries repeated to one per
        query head first unless the variant shares them itself (``grouped_query``): so a
        plugin that never heard of grouped-query heads still gives the right outputs. A gated
        variant (``gates``) gets its gates, checked and repeated with the keys; an ungated one is
        called as before, without them.

        ``cu_seqlens``: documents packed along the sequence (module docstring, "Packed
        sequences"); each document's outputs are those of the document run alone."""
        if self.gates:
            gates = check_gates(self, gates, k, v)
        elif gates:
            raise ValueError(
                f"variant '{self.name}' takes no gates; got {', '.join(sorted(gates))}."
            )
        if cu_seqlens is not None:
            return self._packed(q, k, v, causal, gates, cu_seqlens)
        if not self.grouped_query and k.dim() == 4 and q.dim() == 4:
            heads = q.shape[1]
            k, v = repeat_kv_heads(k, heads), repeat_kv_heads(v, heads)
            gates = {name: repeat_kv_heads(g, heads) for name, g in (gates or {}).items()}
        if not self.gates:
            out = super().__call__(q, k, v, causal=causal)
        else:
            out = super().__call__(q, k, v, causal=causal, gates=gates)
        return self._checked_output(out, q, v)

    def _checked_output(self, out: Any, q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """``out`` if it has the contract's shape (B, H, N, Dv) and q's dtype and device; else
        one sentence naming what came back, so that a task fails the job instead of timing or
        scoring a tensor of the wrong size (a slice of the output is fast and wrong)."""
        if q.dim() != 4 or v.dim() != 4:
            return out  # check_inputs refuses such inputs in forward, with its own sentence
        expected = (*q.shape[:3], v.shape[-1])
        if (
            not isinstance(out, torch.Tensor)
            or tuple(out.shape) != expected
            or out.dtype != q.dtype
            or out.device != q.device
        ):
            got = (
                f"{tuple(out.shape)} {out.dtype} on {out.device}"
                if isinstance(out, torch.Tensor)
                else type(out).__name__
            )
            raise ValueError(
                f"variant '{self.name}' returned {got}; the contract is (B, H, N, Dv) = "
                f"{expected} {q.dtype} on {q.device}, as its queries and values give."
            )
        return out

    def _packed(self, q, k, v, causal, gates, cu_seqlens) -> torch.Tensor:
        """The packed call: refused, split into documents, or the variant's own one-pass form
        (`packing`)."""
        if self.packing not in PACKINGS:
            raise TypeError(
                f"variant '{self.name}': packing {self.packing!r} is not one of {PACKINGS}."
            )
        if self.packing == "none":
            raise UnsupportedError(
                f"variant '{self.name}' cannot honour document boundaries (packing = 'none'): "
                "run each document as its own sequence, or pad them into a batch."
            )
        if q.dim() != 4 or q.shape[-2] != k.shape[-2]:
            raise ValueError(
                f"variant '{self.name}': packed documents need as many keys as queries (one "
                f"packed sequence); got q {tuple(q.shape)}, k {tuple(k.shape)}."
            )
        bounds = document_bounds(cu_seqlens, q.shape[-2])
        if self.packing == "split":
            outs = []
            for a, b in pairwise(bounds):
                doc_gates = {n: g[..., a:b, :] for n, g in (gates or {}).items()}
                cut = [t[..., a:b, :] for t in (q, k, v)]
                outs.append(self(*cut, causal=causal, gates=doc_gates or None))
            return torch.cat(outs, dim=-2)
        if not self.grouped_query:
            heads = q.shape[1]
            k, v = repeat_kv_heads(k, heads), repeat_kv_heads(v, heads)
            gates = {name: repeat_kv_heads(g, heads) for name, g in (gates or {}).items()}
        cu = torch.tensor(bounds, dtype=torch.long, device=q.device)
        if not self.gates:
            out = super().__call__(q, k, v, causal=causal, cu_seqlens=cu)
        else:
            out = super().__call__(q, k, v, causal=causal, gates=gates, cu_seqlens=cu)
        return self._checked_output(out, q, v)

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False
    ) -> torch.Tensor:
        """Mix values ``v`` by the attention of queries ``q`` on keys ``k``. A gated variant
        takes ``gates`` too (module docstring): ``forward(q, k, v, causal=False, gates=None)``."""
        raise NotImplementedError

    def attention_weights(
        self, q: torch.Tensor, k: torch.Tensor, causal: bool = False
    ) -> torch.Tensor:
        """The (B, H, N, M) matrix ``A`` with ``forward(q, k, v) == A @ v`` (small N only).

        Raises:
            NotImplementedError: the variant cannot materialise its weights.
        """
        raise NotImplementedError(f"variant '{self.name}' cannot materialise attention weights")

    def within_tolerance(self, error: float, dtype: torch.dtype, backward: bool = False) -> bool:
        """Whether a relative error ``error`` (max |out − reference| / max(1, max |reference|),
        the reference in float64) is within the declared `error_tolerance` for ``dtype`` (with
        ``backward``, a gradient's error within `backward_tolerance`). A dtype without a
        declared tolerance is not judged (True); NaN never is within."""
        name = str(dtype).removeprefix("torch.")
        limits = self.backward_tolerance if backward else self.error_tolerance
        limit = limits.get(name)
        return not math.isnan(error) and (limit is None or error <= limit)

    def forward_flops(
        self, batch: int, heads: int, n: int, m: int, d: int, dv: int, causal: bool
    ) -> float:
        """Floating-point operations of one forward call.

        Default: the FlashAttention convention for dense attention, 2·B·H·N·M·(D + Dv)
        (= 4·B·H·N²·D when M = N and Dv = D), halved when causal. Variants that compute fewer
        pairs, or no pairs at all, override this with their own count.
        """
        flops = 2.0 * batch * heads * n * m * (d + dv)
        return flops / 2 if causal else flops

    def backward_flops(
        self, batch: int, heads: int, n: int, m: int, d: int, dv: int, causal: bool
    ) -> float:
        """Floating-point operations of one backward call (gradients of q, k and v).

        Default: twice `forward_flops`: each forward matrix product C = A·B has two of the same
        size in the backward (dA = dC·Bᵀ, dB = Aᵀ·dC), and autograd keeps the forward's
        results instead of recomputing them. A kernel that recomputes its scores in the
        backward (the flash kernels behind SDPA) does one score product more, which
        FlashAttention's benchmarks count as 2.5× the forward; such a variant overrides this.
        """
        return 2.0 * self.forward_flops(batch, heads, n, m, d, dv, causal)

    def scored_pairs(self, n: int, m: int, causal: bool) -> float:
        """How many (query, key) pairs the variant scores for n queries and m keys.

        Default: every allowed pair (`allowed_pairs`): dense and linear-cost variants mix every
        visible key. A sparse variant overrides this with the exact count of its pattern at this
        length (no N×M tensor: arithmetic on its positions or block lists).
        """
        return float(allowed_pairs(n, m, causal))

    def density(self, n: int, m: int, causal: bool) -> float:
        """The fraction of allowed (causal) query–key pairs the variant scores: `scored_pairs`
        over `allowed_pairs` (1.0 for dense and linear-cost variants). Not to be overridden:
        override `scored_pairs`, so a variant's density and its pair count never disagree."""
        allowed = allowed_pairs(n, m, causal)
        return self.scored_pairs(n, m, causal) / allowed if allowed else 1.0

    def size_at(self, key: str, n: int) -> int:
        """The hyperparameter ``key`` (a window, a block, k) resolved for a sequence of n.

        The rule of every pattern size: a value in (0, 1) is a fraction of the sequence length,
        ceil(value·n) and at least 1, so the pattern stays as sparse at every length; a value
        >= 1 is an absolute count of positions (a paper's size, such as a window of 256).
        `check_size` refuses anything else when the variant is built.
        """
        value = float(getattr(self.params, key))
        return max(1, math.ceil(value * n)) if value < 1 else int(value)

    def check_size(self, key: str) -> None:
        """Refuse a pattern size that is neither a fraction in (0, 1) nor a whole count >= 1,
        with one sentence naming the value and the fix."""
        value = float(getattr(self.params, key))
        if not (math.isfinite(value) and value > 0 and (value < 1 or value.is_integer())):
            raise ValueError(
                f"{key} must be a fraction of the sequence in (0, 1) or a whole number of "
                f"positions >= 1, got {value:g}."
            )

    def check_inputs(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> None:
        """Validate shapes and causal support; call at the top of ``forward``."""
        if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
            raise ValueError(
                f"variant '{self.name}' expects q, k, v of shape (B, H, N, D); got "
                f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}."
            )
        if q.shape[0] != k.shape[0] or k.shape[:3] != v.shape[:3] or q.shape[-1] != k.shape[-1]:
            raise ValueError(
                f"variant '{self.name}': inconsistent shapes q {tuple(q.shape)}, "
                f"k {tuple(k.shape)}, v {tuple(v.shape)}."
            )
        if q.shape[1] != k.shape[1] and (not self.grouped_query or q.shape[1] % k.shape[1]):
            raise ValueError(
                f"variant '{self.name}': {k.shape[1]} key/value heads for {q.shape[1]} query "
                "heads; key/value heads must equal the query heads, or divide them (call the "
                "variant, not its forward, to have them repeated)."
            )
        if self.requires_equal_lengths and q.shape[-2] != k.shape[-2]:
            raise UnsupportedError(
                f"variant '{self.name}' is positional and needs as many keys as queries; got "
                f"N={q.shape[-2]} queries and M={k.shape[-2]} keys."
            )
        if causal and not self.supports_causal:
            raise UnsupportedError(f"variant '{self.name}' does not support causal masking.")


def gate_width(width: str, head_dim: int, value_dim: int | None = None) -> int:
    """Values per key/value head and token of a gate of ``width`` ("head": 1, "key": D,
    "value": Dv, which is D where ``value_dim`` is not given, as in the shared layer)."""
    if width == "head":
        return 1
    if width == "value" and value_dim is not None:
        return value_dim
    return head_dim


def check_gates(
    variant: AttentionVariant,
    gates: dict[str, torch.Tensor] | None,
    k: torch.Tensor,
    v: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """The gates ``variant`` declares, each of shape (B, H_kv, M, width) beside keys ``k``
    (B, H_kv, M, D) and values ``v`` (B, H_kv, M, Dv; None: Dv = D); one sentence naming what
    is missing or misshapen otherwise."""
    gates = dict(gates or {})
    missing = sorted(set(variant.gates) - set(gates))
    extra = sorted(set(gates) - set(variant.gates))
    if missing or extra:
        raise ValueError(
            f"variant '{variant.name}' needs the gates {', '.join(sorted(variant.gates))} "
            f"(missing: {', '.join(missing) or 'none'}; unknown: {', '.join(extra) or 'none'}); "
            "the shared layer projects them (attnbench.toolkit.layer), a timing feeds "
            "attnbench.variant.random_gates."
        )
    value_dim = None if v is None else v.shape[-1]
    for name, width in variant.gates.items():
        expected = (*k.shape[:3], gate_width(width, k.shape[-1], value_dim))
        if tuple(gates[name].shape) != expected:
            last = {"head": "1", "key": "D", "value": "Dv"}[width]
            raise ValueError(
                f"variant '{variant.name}': gate '{name}' must have shape {expected} (B, H_kv, "
                f"M, {last}) beside keys {tuple(k.shape)}; got "
                f"{tuple(gates[name].shape)}."
            )
    return gates


def random_gates(
    variant: AttentionVariant | type[AttentionVariant],
    batch: int,
    length: int,
    *,
    head_dim: int,
    kv_heads: int,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    generator: torch.Generator | None = None,
    value_dim: int | None = None,
) -> dict[str, torch.Tensor]:
    """Standard-normal raw gates of the shapes ``variant`` declares, for ``batch`` sequences of
    ``length`` keys on ``kv_heads`` heads (values of ``value_dim`` channels; None: ``head_dim``):
    what a timing feeds a gated variant, as it feeds standard-normal q, k and v ({} for an
    ungated variant)."""
    return {
        name: torch.randn(
            batch,
            kv_heads,
            length,
            gate_width(width, head_dim, value_dim),
            generator=generator,
            device=device,
            dtype=dtype,
        )
        for name, width in variant.gates.items()
    }


VARIANTS: Registry[type[AttentionVariant]] = Registry("variant", base=AttentionVariant)


def register_variant(name: str):
    """Class decorator: register an `AttentionVariant` subclass under ``name``.

    Raises:
        DuplicateNameError: the name is taken.
        TypeError: the class does not meet the contract (wrong base, Params not a dataclass with
            defaults, unknown cost class).
    """

    def decorate(cls: type[AttentionVariant]) -> type[AttentionVariant]:
        if isinstance(cls, type) and issubclass(cls, AttentionVariant):
            _check_contract(name, cls)
            cls.name = name
        return VARIANTS.register(name, cls)

    return decorate


def _check_contract(name: str, cls: type[AttentionVariant]) -> None:
    if not dataclasses.is_dataclass(cls.Params):
        raise TypeError(f"variant '{name}': Params must be a dataclass, got {cls.Params!r}.")
    for f in dataclasses.fields(cls.Params):
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise TypeError(f"variant '{name}': hyperparameter '{f.name}' needs a default.")
        if f.name == "name":
            raise TypeError(f"variant '{name}': 'name' is reserved and cannot be a hyperparameter.")
    if cls.cost not in COST_CLASSES:
        raise TypeError(f"variant '{name}': cost {cls.cost!r} is not one of {COST_CLASSES}.")
    if not cls.family:
        raise TypeError(f"variant '{name}': set the class attribute 'family'.")
    if not isinstance(cls.gates, dict) or any(
        not isinstance(g, str) or w not in GATE_WIDTHS for g, w in cls.gates.items()
    ):
        raise TypeError(
            f"variant '{name}': gates must map gate names to a width in {GATE_WIDTHS}, "
            f"got {cls.gates!r}."
        )
    if cls.packing not in PACKINGS:
        raise TypeError(f"variant '{name}': packing {cls.packing!r} is not one of {PACKINGS}.")
    if cls.estimator not in ("", *ESTIMATORS):
        raise TypeError(
            f"variant '{name}': estimator {cls.estimator!r} is not one of {ESTIMATORS} (or '')."
        )
    for attr in ("peer_of", "library"):
        if not isinstance(getattr(cls, attr), str):
            raise TypeError(f"variant '{name}': '{attr}' must be a string ('' for none).")
    for attr in ("error_tolerance", "backward_tolerance"):
        limits = getattr(cls, attr)
        if not isinstance(limits, dict) or not all(
            isinstance(k, str)
            and isinstance(x, int | float)
            and not isinstance(x, bool)
            and math.isfinite(x)
            and x > 0
            for k, x in limits.items()
        ):
            raise TypeError(
                f"variant '{name}': {attr} must map dtype names to positive finite numbers "
                f"(e.g. {{'float32': 1e-5}}), got {limits!r}."
            )


def mean_density(variants: list[AttentionVariant], n: int, m: int, causal: bool) -> float:
    """The mean `AttentionVariant.density` of ``variants`` (e.g. a model's attention layers,
    each with its own learned pattern) for n queries, m keys; 1.0 for none."""
    if not variants:
        return 1.0
    return sum(v.density(n, m, causal) for v in variants) / len(variants)


def build_variant(
    name: str, params: dict[str, Any] | None = None, shape: VariantShape | None = None
) -> AttentionVariant:
    """Instantiate the variant ``name`` with hyperparameters ``params`` (defaults for the rest).

    Raises:
        UnknownNameError: no such variant.
        ValueError: a hyperparameter is not one the variant has.
    """
    cls = VARIANTS.get(name)
    params = dict(params or {})
    params.pop("name", None)
    known = {f.name for f in dataclasses.fields(cls.Params)}
    unknown = sorted(set(params) - known)
    if unknown:
        raise ValueError(
            f"variant '{name}' has no hyperparameter {', '.join(map(repr, unknown))}; "
            f"valid: {', '.join(sorted(known)) or '(none)'}."
        )
    shape = shape or VariantShape(n_heads=1, head_dim=64, max_len=4096)
    return cls(cls.Params(**params), shape)


def library_version(distribution: str) -> str:
    """ "<distribution> <version>" of a variant's library, "" for our own variants.

    The version installed in this process, so a record says which release it measured; a
    distribution that is not installed reads "<distribution> (not installed)" (its job was
    then recorded as unsupported).
    """
    if not distribution:
        return ""
    try:
        return f"{distribution} {importlib.metadata.version(distribution)}"
    except importlib.metadata.PackageNotFoundError:
        return f"{distribution} (not installed)"
