"""The delta family: `delta_net` (Yang et al. 2024, "Parallelizing Linear Transformers with the
Delta Rule over Sequence Length"), `gated_delta_net` (Yang, Kautz & Hatamizadeh 2025, "Gated
Delta Networks") and `gated_delta_product` (Siems et al. 2025, "DeltaProduct: Improving
State-Tracking in Linear RNNs via Householder Products"), the attention cores, with their
incremental forms. One module: a job's code fingerprint covers the modules its variant imports,
and gated_delta_product is gated_delta_net with more steps per token (its section below).

Both keep a D×Dv state S per key/value head and, at every token, correct what S predicts for the
key towards the value (one online gradient step on ½‖Sᵀk_t − v_t‖² with step β_t, theory.md §7)::

    delta_net:        S_t = S_{t−1} + β_t k_t (v_t − S_{t−1}ᵀ k_t)ᵀ
    gated_delta_net:  S_t = α_t S_{t−1} + β_t k_t (v_t − α_t S_{t−1}ᵀ k_t)ᵀ
    out_t = S_tᵀ q_t

The papers' defaults, as flash-linear-attention's layers (`fla/layers/delta_net.py`,
`fla/layers/gated_deltanet.py`) apply them:

- q and k: SiLU, then L2-normalised per head (``qk_activation="silu"``; "identity": the L2 norm
  alone). SiLU is kept because it is what fla's layers apply before the normalisation (inside
  their short convolution, or after the projection without it) and the DeltaNet paper's ablation
  chose it; the rule itself needs ‖k‖ = 1, which makes I − β k kᵀ non-expansive for
  β ∈ [0, 1] (eigenvalues 1 and 1 − β: a write never amplifies what the state holds) and β the
  step of the gradient step exactly. q is then scaled by 1/√D, fla's default scale.
- β_t = sigmoid(raw β gate), per key/value head and token; with ``negative_eigenvalues``,
  β_t = 2·sigmoid(raw β gate) ∈ (0, 2) (Grazzi et al., ICLR 2025, "Unlocking State-Tracking in
  Linear RNNs Through Negative Eigenvalues"; fla's ``allow_neg_eigval``): the transition
  I − β_t k_t k_tᵀ then has the eigenvalue 1 − β_t ∈ (−1, 1) along k_t, so a write can flip the
  sign of what the state holds along the key (a reflection at β = 2), which a transition with
  eigenvalues in [0, 1] cannot and which parity and group word problems need. Off by default,
  as in the papers' layers. It is still a gradient step on ½‖Sᵀk − v‖², of step up to 2, and
  |1 − β| < 1 keeps the transition non-expansive; the chunked form, the decoder and the state
  (D×Dv per state head, unchanged) need nothing else.
- gated: α_t = exp(g_t) with g_t = −exp(A_log)·softplus(raw α gate + dt_bias) (Mamba-2's
  parametrisation, the gated paper's), A_log and dt_bias learned per head and initialised as
  fla does: A ~ U(0, 16), A_log = log A; dt log-uniform in [0.001, 0.1] (at least 1e-4),
  dt_bias = softplus⁻¹(dt).

The gates come from the layer's input (`AttentionVariant.gates`: one scalar per head and token,
"head"): ``forward(q, k, v, causal, gates={"beta": (B, H_kv, M, 1), "alpha": …})``, with as
many heads as the keys. Without gates a forward uses raw gates of 0 (what a gate projection
gives a zero input: β = ½ and g = −exp(A_log)·softplus(dt_bias)); `attention_weights` needs them.

Each head's output is then divided by its root mean square over the value channels
(``output_norm``, on by default; `attnbench.variants.recurrent.output_norm`), as fla's layers
normalise it (``o_norm``, an RMSNorm per head) before their output projection. Without it the
output carries the state's scale, which the decay sets: issue #58 measured `gated_delta_net` at
chance on MQAR (128 tokens, 8 pairs, width 64, one head; 4 of 4 seeds) at the initialisation
below, where the same seeds learn with the decay switched off (0.53 to 0.87) and with the norm
(0.98 at each); `delta_net` learned later, and not at every seed, without it (0.01 to 0.89;
0.98 with it). ``output_norm=False``
gives the bare rule (the exactness tests' reference, and what `attention_weights` needs: the
norm is no linear map of the values). A single value channel is left as it is (its norm would
be its sign; `output_norm`'s docstring).

**gated_delta_product** applies n_h delta-rule steps per token (``householder_steps``, 2 by
default), each with its own key, value and step size, after the token's decay::

    S ← α_t S
    S ← S + β_{t,j} k_{t,j} (v_{t,j} − Sᵀ k_{t,j})ᵀ      for j = 1 … n_h
    out_t = S_tᵀ q_t

so a token's transition is α_t Π_j (I − β_{t,j} k_{t,j} k_{t,j}ᵀ), a product of n_h generalised
Householder matrices (the paper's point: a transition of rank-n_h freedom rather than rank 1,
and with β up to 2 products of reflections, which track groups one step per token cannot, e.g.
S5 word problems). Everything else is gated_delta_net's: q and each key through the activation
and the L2 norm, β (per step, ``negative_eigenvalues`` as above), the decay once per token, the
output norm. With ``householder_steps=1`` it is gated_delta_net, output for output. Its gates:
"alpha" and "beta" for the first step, whose key and value are the layer's k and v; for each
further step j = 2 … n_h a key "key_j" (width "key"), a value "value_j" (width "value") and a
step size "beta_j" ("head"); an instance declares those of its own n_h, the class those of the
default. It runs the chunked engine on the n_h·M sub-steps interleaved (token t's step j at
t·n_h + j), the decay on each token's first sub-step, the query on its last (0 on the others)
and the outputs read there, as flash-linear-attention's chunk reference for the op
(`fla/ops/gated_delta_product/chunk_ref.py`) does: exactness, precision and grouped-query heads
carry over, and the read-outs at the other sub-steps are computed and dropped (n_h times a
single rule's read-out products; `forward_flops` counts them). Its decoder keeps S alone and
applies a token's n_h steps in turn. Deviations from fla's layer
(`fla/layers/gated_deltaproduct.py`) beyond the family's below: the extra keys and values come
from the shared layer's gate projections (one linear map each, with a bias) rather than a k and
v projection n_h times as wide (without bias), the same linear maps of the input cut in parts;
``negative_eigenvalues`` is off by default where fla's layer defaults to on (the benchmark sets
it: its effect is a switch of its own).

**Deviations from the papers' full layers** (the rest of their layer, not the core): no short
causal convolution on q, k and v, no SiLU on v, an output norm without its learned weight (the
output projection absorbs it) and without the gate Gated DeltaNet multiplies in (SiLU of a
projection of the input). attnbench's shared layer
(`attnbench.toolkit.layer`) does the projections and the output projection for every variant
alike.

``causal=False``: every query reads the state after the last key, S_Mᵀ q (the recurrence is
ordered; there is no bidirectional form in the papers). Causal with N ≠ M follows the causal
convention (query i reads S_min(i, M−1)).

Computed chunk by chunk in the WY/UT form (`delta_chunks`); float32 and float64 natively,
bfloat16 and float16 in float32 (a chain of C×C products and an inverted triangular matrix
per chunk: reduced precision would compound over the chunk and the hand-overs) and rounded
back. Grouped-query heads native: a state per key/value head, except where the gated variant's
learned decay has a head per query head (built without ``n_kv_heads``), whose query heads then
decay differently and keep a state each, as `decay` does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from attnbench import (
    VariantShape,
    per_query_head,
    register_incremental,
    register_variant,
)
from attnbench.masks import document_bounds
from attnbench.variants.kernels import autotune
from attnbench.variants.recurrent.delta_chunks import (
    DEFAULT_CHUNK,
    delta_rule_chunked,
    products_flops,
)
from attnbench.variants.recurrent.mixer import RuleIncremental, ValueLinearMixer

QK_ACTIVATIONS = ("silu", "identity")
NORM_EPS = 1e-6  # the L2 norm divides by max(‖x‖, eps): exact for any key not ~0


@dataclass
class DeltaNetParams:
    """Hyperparameters of `delta_net`."""

    qk_activation: str = "silu"  # before the L2 norm of q and k: silu (the papers') or identity
    # positions per chunk of the WY/UT form; 0: chosen on the machine (`CHUNKS`, `DeltaRule.chunk`)
    chunk_size: int = 0
    # each head's output divided by its RMS over the value channels, as fla's o_norm (module
    # docstring); false: the bare rule
    output_norm: bool = True
    # β = 2·sigmoid(raw β) in (0, 2): the transition I − β k kᵀ gets the eigenvalue 1 − β in
    # (−1, 1) (Grazzi et al. 2025; fla's allow_neg_eigval); false: β = sigmoid(raw β) in (0, 1)
    negative_eigenvalues: bool = False


@dataclass
class GatedDeltaNetParams:
    """Hyperparameters of `gated_delta_net`."""

    qk_activation: str = "silu"  # before the L2 norm of q and k: silu (the papers') or identity
    # positions per chunk of the WY/UT form; 0: chosen on the machine (`CHUNKS`, `DeltaRule.chunk`)
    chunk_size: int = 0
    # each head's output divided by its RMS over the value channels, as fla's o_norm (module
    # docstring); false: the bare rule
    output_norm: bool = True
    # β = 2·sigmoid(raw β) in (0, 2): the transition I − β k kᵀ gets the eigenvalue 1 − β in
    # (−1, 1) (Grazzi et al. 2025; fla's allow_neg_eigval); false: β = sigmoid(raw β) in (0, 1)
    negative_eigenvalues: bool = False


# DeltaProduct's paper trains n_h = 1 to 4; each step adds a key, a value and a β projection
# and a sub-step per token to the rule's sequence, so a larger n_h is a typo, not a model a CPU
# (or the paper) trains, and one of 10⁶ would build 3·10⁶ projections before failing
MAX_HOUSEHOLDER_STEPS = 8


@dataclass
class GatedDeltaProductParams:
    """Hyperparameters of `gated_delta_product`."""

    # n_h: delta-rule (generalised Householder) steps per token, each with its own key, value
    # and β; 1: gated_delta_net
    householder_steps: int = 2
    qk_activation: str = (
        "silu"  # before the L2 norm of q and the keys: silu (the paper's) or identity
    )
    # positions (sub-steps) per chunk of the WY/UT form; 0: chosen on the machine
    chunk_size: int = 0
    # each head's output divided by its RMS over the value channels, as fla's o_norm
    output_norm: bool = True
    # β = 2·sigmoid(raw β) in (0, 2): each step's I − β k kᵀ gets the eigenvalue 1 − β in (−1, 1)
    # (Grazzi et al. 2025; fla's allow_neg_eigval); false: β = sigmoid(raw β) in (0, 1)
    negative_eigenvalues: bool = False


# chunk lengths a machine chooses among (`autotune.choose`); the first is the default (the best
# on the AMD EPYC it was measured on, delta_chunks.DEFAULT_CHUNK), the one a call too small to
# tune runs
CHUNKS = (DEFAULT_CHUNK, 16, 64, 128)


def _gate(gates: dict[str, torch.Tensor] | None, name: str, k: torch.Tensor) -> torch.Tensor:
    """The raw gate ``name`` as (B, H_kv, M) in k's dtype: zeros when no gates are given."""
    b, h, m, _ = k.shape
    if gates is None:
        return k.new_zeros(b, h, m)
    if name not in gates:
        raise ValueError(f"gate '{name}' is missing; got {sorted(gates)}.")
    raw = gates[name]
    if raw.dim() == 4 and raw.shape[-1] == 1:
        raw = raw.squeeze(-1)
    if tuple(raw.shape) != (b, h, m):
        raise ValueError(
            f"gate '{name}' must have shape (B={b}, H_kv={h}, M={m}, 1) like the keys; "
            f"got {tuple(gates[name].shape)}."
        )
    return raw.to(k.dtype)


class DeltaRule(ValueLinearMixer):
    """What the two variants share: features, gates, the chunked forward (module docstring)."""

    family = "delta"
    cost = "n"
    supports_causal = True
    grouped_query = True
    # packed documents in one pass: chunks laid out per document, the state reset at each
    # document's first chunk (`delta_chunks`, "Packed documents")
    packing = "native"
    gates = {"beta": "head"}
    estimator = "online_gd"  # one gradient step per token on ½‖Sᵀk − v‖² (theory.md)
    # measured as the throughput task does (max error over max(1, max |float64 output|)) at
    # n = 512 and 4096, H = 4, D = 64, unit-normal inputs and gates, causal and not, 3 seeds, both
    # variants: worst 1.8e-7 in float32 (3.1e-7 with chunks of 64: the inverse and the chunk
    # hand-overs round like any float32 product chain), 2.5e-4 in float16 and 2.1e-3 in
    # bfloat16 (the inputs' rounding; computed in float32); declared with a factor of about 10
    # for other CPUs' summation orders (tests/variants/test_delta_rule.py checks n = 1000).
    # With the output norm (the default), delta_net at n = 512 (8 seeds, 1 and 4 key/value
    # heads, causal and not) and 1000: worst 4.9e-7, 8.0e-4 and 6.1e-3, within these limits;
    # with negative_eigenvalues (β up to 2: larger entries in the inverse), n = 512 and 1000,
    # 3 seeds, 1 and 4 key/value heads, causal and not: worst 7.4e-7, 1.3e-3 and 1.1e-2, still
    # within them; gated_delta_net's own are below
    error_tolerance = {"float64": 1e-12, "float32": 3e-6, "float16": 3e-3, "bfloat16": 2e-2}

    def __init__(self, params, shape: VariantShape) -> None:
        super().__init__(params, shape)
        if params.qk_activation not in QK_ACTIVATIONS:
            raise ValueError(
                f"{self.name} qk_activation {params.qk_activation!r} is not known; "
                f"valid: {', '.join(QK_ACTIVATIONS)}."
            )
        if params.chunk_size < 0:
            raise ValueError(
                f"{self.name} chunk_size must be >= 1, or 0 to choose it on the machine; got "
                f"{params.chunk_size}."
            )
        self.last_chunk = params.chunk_size or DEFAULT_CHUNK  # what the last call ran with

    def features(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """q and k as the rule reads them: activation, L2 norm per head; q scaled by 1/√D."""
        q = F.silu(q) if self.params.qk_activation == "silu" else q
        q = F.normalize(q, dim=-1, eps=NORM_EPS) / math.sqrt(q.shape[-1])
        return q, self.key_features(k)

    def key_features(self, k: torch.Tensor) -> torch.Tensor:
        """k as the rule reads it: the activation, then the L2 norm per head (‖k‖ = 1)."""
        k = F.silu(k) if self.params.qk_activation == "silu" else k
        return F.normalize(k, dim=-1, eps=NORM_EPS)

    def rule_inputs(
        self, k: torch.Tensor, v: torch.Tensor, gates: dict[str, torch.Tensor] | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """k, v (repeated where the state has more heads than they), β and log α (None: α = 1)
        per state head, (B, H_state, M) each."""
        return k, v, self.step_sizes(_gate(gates, "beta", k)), None

    def step_sizes(self, raw: torch.Tensor) -> torch.Tensor:
        """β from the raw gate: sigmoid(raw) in (0, 1), or 2·sigmoid(raw) in (0, 2) with
        ``negative_eigenvalues`` (module docstring)."""
        beta = torch.sigmoid(raw)
        return 2 * beta if self.params.negative_eigenvalues else beta

    def _scan(self, q, k, v, gates, causal, state=None, cu_seqlens=None):
        """The rule on inputs in the working dtype: outputs (B, H, N, Dv) and the final state;
        ``cu_seqlens``: documents packed along the sequence, in one pass (`delta_chunks`)."""
        fq, fk = self.features(q, k)
        fk, v, beta, log_alpha = self.rule_inputs(fk, v, gates)
        c = self.last_chunk = self.chunk(fq, fk, v, beta, log_alpha)
        n, m = q.shape[-2], k.shape[-2]
        if not causal or n == m or cu_seqlens is not None:
            return delta_rule_chunked(fq, fk, v, beta, log_alpha, c, state, causal, cu_seqlens)
        if n < m:  # query i reads S_i: the keys after the last query are never read
            cut = (fk[:, :, :n], v[:, :, :n], beta[:, :, :n])
            la = None if log_alpha is None else log_alpha[:, :, :n]
            return delta_rule_chunked(fq, *cut, la, c, state, causal)
        head, state = delta_rule_chunked(fq[:, :, :m], fk, v, beta, log_alpha, c, state, causal)
        tail = per_query_head(fq[:, :, m:], state)  # queries past the last key read S_M
        return torch.cat([head, tail], dim=2), state

    def chunk(self, fq, fk, v, beta, log_alpha) -> int:
        """The chunk length C of this call: the parameter where it is set, else the machine's
        choice for the call's class (`autotune.choose` among `CHUNKS`, timed on the forward
        without autograd over its first positions): the products inside
        chunks grow with C, the hand-overs of the loop with N / C, and where they balance
        depends on the machine (32 on the AMD EPYC the default was measured on)."""
        if self.params.chunk_size:
            return self.params.chunk_size
        end = autotune.CHUNK_PROBE_POSITIONS
        # queries as many as the keys: read causally; else (a read of the final state, or
        # a causal call with N ≠ M) every query reads the final state, which any N can
        causal = fq.shape[2] == fk.shape[2]
        parts = [x[:, :, :end].detach() for x in (fq, fk, v, beta)]
        la = None if log_alpha is None else log_alpha[:, :, :end].detach()
        return autotune.choose_chunk(
            f"{self.name} chunks",
            fq,
            fk,
            v,
            CHUNKS,
            lambda c: delta_rule_chunked(*parts, la, c, causal=causal),
            gated=log_alpha is not None,
        )

    def forward_flops(self, batch, heads, n, m, d, dv, causal) -> float:
        """The matrix products of the chunked form at the chunk length of the last call (the
        default before any), the flop counter's count (`products_flops`); the element-wise
        gates, norms, decays and base blocks of the inverse are not counted.
        ``heads`` query heads share key/value heads as the instance's shape does. The backward
        is the default, two products per forward product (autograd; every step is one)."""
        kv = heads * self.shape.kv_heads / self.shape.n_heads
        if causal and n != m:
            m = n = min(n, m)  # later queries read the final state: counted as n = m
        return batch * products_flops(heads, kv, n, m, d, dv, causal, self.last_chunk)


@register_variant("delta_net")
class DeltaNet(DeltaRule):
    """The delta rule (DeltaNet): S_t = S_{t−1} + β_t k_t (v_t − S_{t−1}ᵀ k_t)ᵀ, chunked."""

    Params = DeltaNetParams


@register_variant("gated_delta_net")
class GatedDeltaNet(DeltaRule):
    """The gated delta rule: S_t = α_t S_{t−1} + β_t k_t (v_t − α_t S_{t−1}ᵀ k_t)ᵀ, chunked."""

    Params = GatedDeltaNetParams
    gates = {"alpha": "head", "beta": "head"}
    # with the output norm (the default), measured as `DeltaRule`'s at n = 512 (16 seeds, 1 and
    # 4 key/value heads, causal and not: 64 draws) and 1000: worst 1.3e-6 in float32, 2.3e-3 in
    # float16, 2.2e-2 in bfloat16 (without it: 2.8e-7, 2.4e-4, 2.1e-3). The norm divides each
    # row by its own scale, so a row whose output nearly cancels (a strong decay leaves one
    # or two terms) shows its rounding relative to itself; limits about 4× the worst. With
    # negative_eigenvalues (n = 512 and 1000, 3 seeds, 1 and 4 key/value heads, causal and
    # not): worst 1.7e-6, 4.6e-3 and 3.2e-2, within them (3× for bfloat16)
    error_tolerance = {"float64": 1e-12, "float32": 1e-5, "float16": 1e-2, "bfloat16": 1e-1}

    def __init__(self, params: GatedDeltaNetParams, shape: VariantShape) -> None:
        super().__init__(params, shape)
        heads = shape.kv_heads  # one decay per state (module docstring)
        self.A_log = nn.Parameter(torch.log(torch.empty(heads).uniform_(0, 16)))
        dt_min, dt_max, floor = 0.001, 0.1, 1e-4  # fla's (and Mamba-2's) initialisation
        dt = torch.exp(torch.rand(heads) * (math.log(dt_max) - math.log(dt_min)))
        dt = (dt * dt_min).clamp(min=floor)
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # softplus⁻¹(dt)

    def rule_inputs(self, k, v, gates):
        heads, have = self.A_log.shape[0], k.shape[1]
        a_log, dt_bias = self.A_log.to(k.dtype), self.dt_bias.to(k.dtype)
        raw_beta, raw_alpha = _gate(gates, "beta", k), _gate(gates, "alpha", k)
        if have > heads and have % heads == 0:  # keys repeated past the decay's heads
            a_log = a_log.repeat_interleave(have // heads)
            dt_bias = dt_bias.repeat_interleave(have // heads)
        elif heads > have and heads % have == 0:  # a decay per query head: a state each
            k, v, raw_beta, raw_alpha = (
                x.repeat_interleave(heads // have, dim=1) for x in (k, v, raw_beta, raw_alpha)
            )
        elif heads != have:
            raise ValueError(
                f"{self.name} has a decay for {heads} heads; keys with {have} heads do not "
                "divide or repeat them."
            )
        log_alpha = -a_log.exp().view(-1, 1) * F.softplus(raw_alpha + dt_bias.view(-1, 1))
        return k, v, self.step_sizes(raw_beta), log_alpha


@register_incremental("delta_net")
class DeltaRuleIncremental(RuleIncremental):
    """The (gated) delta rule token by token: the state S alone, D×Dv per state head (per
    key/value head; per query head for a gated variant whose decay has a head per query head),
    the same at every length: nothing else, since the gates of a token enter at that token
    only. A step applies the recurrence; a prefill runs the chunked form from the state held."""

    head_parameter = "A_log"  # the gated rule's decay (the plain rule has none)

    def _step(self, q, k, v, gates, state):
        # the recurrence at each position the rule gives the token (one; n_h sub-steps for a
        # product of Householder steps)
        variant = self.variant
        fq, fk = variant.features(q, k)
        fk, v, beta, log_alpha = variant.rule_inputs(fk, v, gates)
        for j in range(fk.shape[-2]):
            if log_alpha is not None:
                state = state * log_alpha[..., j, None, None].exp()
            key = fk[..., j : j + 1, :]
            write = beta[..., j, None, None] * (v[..., j : j + 1, :] - key @ state)
            state = state + key.transpose(-1, -2) @ write  # + k β (v − Sᵀk)ᵀ
        return per_query_head(fq, state), state


@register_incremental("gated_delta_net")
class GatedDeltaRuleIncremental(DeltaRuleIncremental):
    """`gated_delta_net` token by token: `DeltaRuleIncremental`, decaying S by α_t first."""


def step_gates(steps: int) -> dict[str, str]:
    """The gates of ``steps`` Householder steps per token: the first step's β and the decay,
    then a key, a value and a β for each further step (module docstring)."""
    gates = {"alpha": "head", "beta": "head"}
    for j in range(2, steps + 1):
        gates |= {f"beta_{j}": "head", f"key_{j}": "key", f"value_{j}": "value"}
    return gates


@register_variant("gated_delta_product")
class GatedDeltaProduct(GatedDeltaNet):
    """Gated DeltaProduct: per token, S ← α_t S, then n_h delta-rule steps, chunked over the
    interleaved sub-steps (module docstring)."""

    Params = GatedDeltaProductParams
    gates = step_gates(2)  # the default's; an instance declares those of its own n_h
    # error_tolerance: gated_delta_net's, inherited. Measured as its own (n = 512 and 1000,
    # D = 64, unit-normal inputs, gates ×2, 3 seeds, 1 and 4 key/value heads, causal and not,
    # n_h = 2 and 3, negative eigenvalues on and off): worst 1.5e-6 in float32, 3.0e-3 in
    # float16 and 1.9e-2 in bfloat16, within its limits by 3× or more

    def __init__(self, params: GatedDeltaProductParams, shape: VariantShape) -> None:
        if not 1 <= params.householder_steps <= MAX_HOUSEHOLDER_STEPS:
            raise ValueError(
                f"gated_delta_product householder_steps must be between 1 (gated_delta_net) and "
                f"{MAX_HOUSEHOLDER_STEPS}; got {params.householder_steps}."
            )
        super().__init__(params, shape)
        self.gates = step_gates(params.householder_steps)

    def rule_inputs(self, k, v, gates):
        """The n_h·M sub-steps the rule applies, interleaved (token t's step j at t·n_h + j):
        keys (``k`` as read, the extra keys through `key_features`), values, β of each step and
        the decay's log on each token's first step (0 on the others), per state head."""
        steps = self.params.householder_steps
        keys, values, betas = [], [], []
        for j in range(1, steps + 1):
            kj = k if j == 1 else self.key_features(_wide(gates, f"key_{j}", k, k.shape[-1]))
            vj = v if j == 1 else _wide(gates, f"value_{j}", k, v.shape[-1]).to(v.dtype)
            step = {"beta": _gate(gates, "beta" if j == 1 else f"beta_{j}", k)}
            step["alpha"] = _gate(gates, "alpha", k)
            kj, vj, beta, log_alpha = super().rule_inputs(kj, vj, step)
            keys.append(kj)
            values.append(vj)
            betas.append(beta)
        later = log_alpha.new_zeros(*log_alpha.shape, steps - 1)
        log_alpha = torch.cat([log_alpha.unsqueeze(-1), later], dim=-1)
        return (
            torch.stack(keys, dim=3).flatten(2, 3),
            torch.stack(values, dim=3).flatten(2, 3),
            torch.stack(betas, dim=-1).flatten(2, 3),
            log_alpha.flatten(2, 3),
        )

    def _scan(self, q, k, v, gates, causal, state=None, cu_seqlens=None):
        """The rule over the interleaved sub-steps: outputs (B, H, N, Dv) read at each token's
        last sub-step, and the final state. ``cu_seqlens``: documents packed along the
        sequence, in one pass over the sub-steps (each document's bounds times n_h)."""
        fq, fk = self.features(q, k)
        fk, v, beta, log_alpha = self.rule_inputs(fk, v, gates)
        steps = self.params.householder_steps
        if not causal and cu_seqlens is None:  # every query reads the state after the last step
            c = self.last_chunk = self.chunk(fq, fk, v, beta, log_alpha)
            return delta_rule_chunked(fq, fk, v, beta, log_alpha, c, state, causal=False)
        b, h, n, d = fq.shape
        tokens = min(n, k.shape[-2])  # query i reads the state after token min(i, M − 1)
        cut = tokens * steps
        fk, v, beta, log_alpha = (x[:, :, :cut] for x in (fk, v, beta, log_alpha))
        silent = fq.new_zeros(b, h, tokens, steps - 1, d)  # no read-out before the last step
        reads = torch.cat([silent, fq[:, :, :tokens, None]], dim=3).flatten(2, 3)
        c = self.last_chunk = self.chunk(reads, fk, v, beta, log_alpha)
        if cu_seqlens is not None:  # packed (N = M): the documents' sub-steps, read as causal
            steps_seqlens = [steps * x for x in document_bounds(cu_seqlens, n)]
            out, state = delta_rule_chunked(
                reads, fk, v, beta, log_alpha, c, state, causal, steps_seqlens
            )
            return out[:, :, steps - 1 :: steps], state
        out, state = delta_rule_chunked(reads, fk, v, beta, log_alpha, c, state, causal=True)
        out = out[:, :, steps - 1 :: steps]
        if n > tokens:  # queries past the last key read the final state
            out = torch.cat([out, per_query_head(fq[:, :, tokens:], state)], dim=2)
        return out, state

    def forward_flops(self, batch, heads, n, m, d, dv, causal) -> float:
        """The matrix products of the chunked form over the n_h·M sub-steps (`products_flops`
        at n_h·N read-outs when causal: the dropped ones are computed too), at the chunk length
        of the last call; what the flop counter sees. The backward: the default, two products
        per forward product."""
        kv = heads * self.shape.kv_heads / self.shape.n_heads
        steps = self.params.householder_steps
        if not causal:
            return batch * products_flops(heads, kv, n, m * steps, d, dv, False, self.last_chunk)
        n = m = min(n, m)  # later queries read the final state: counted as n = m
        return batch * products_flops(heads, kv, n * steps, m * steps, d, dv, True, self.last_chunk)


def _wide(gates: dict[str, torch.Tensor] | None, name: str, k: torch.Tensor, width: int):
    """The raw gate ``name`` of ``width`` channels (a key or a value of a later step) as
    (B, H_kv, M, width) in k's dtype: zeros when no gates are given (a step that writes
    nothing)."""
    if gates is None:
        return k.new_zeros(*k.shape[:3], width)
    if name not in gates:
        raise ValueError(f"gate '{name}' is missing; got {sorted(gates)}.")
    return gates[name].to(k.dtype)


@register_incremental("gated_delta_product")
class GatedDeltaProductIncremental(DeltaRuleIncremental):
    """`gated_delta_product` token by token: the state S alone, D×Dv per state head; a step
    decays S and applies the token's n_h delta-rule steps in turn, a prefill runs the chunked
    form from the state held (`DeltaRuleIncremental`)."""
