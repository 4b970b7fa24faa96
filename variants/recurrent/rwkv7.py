"""`rwkv7`: RWKV-7 "Goose" (Peng et al. 2025, "RWKV-7 "Goose" with Expressive Dynamic State
Evolution"), the attention core (the WKV recurrence), with its incremental form.

A D×Dv state per key/value head with a diagonal-plus-low-rank transition. In RWKV's convention
(state Dv×D, value rows) S_t = S_{t−1} (Diag(w_t) − κ̂_tᵀ (a_t ⊙ κ̂_t)) + v_tᵀ k̃_t, out_t = S_t r_t;
here, as every recurrent mixer of attnbench, the transposed state (keys in, values out)::

    S_t = (Diag(w_t) − (a_t ⊙ κ̂_t) κ̂_tᵀ) S_{t−1} + k̃_t v_tᵀ        out_t = S_tᵀ r_t

(flash-linear-attention's `fla/ops/rwkv7/fused_recurrent.py`: h ← e^{w} h + (κ̂ ⊙ a)(−κ̂ᵀ h)
+ k vᵀ, read with scale 1), with, as `fla/layers/rwkv7.py` computes them from the keys and the
layer's input:

- the receptance r is the query, no activation and no scale (fla: ``scale=1.``);
- the decay w_t = exp(−e^{−1/2}·sigmoid(raw w gate + w_bias)) ∈ (0.545, 1), per key channel
  (gate ``"w"``, width ``"key"``);
- the in-context learning rate a_t = sigmoid(raw a gate + a_bias) ∈ (0, 1)^D (gate ``"a"``,
  width ``"key"``);
- the removal key κ̂_t = normalise(k_t ⊙ k_k) (L2 per head) and the replacement key
  k̃_t = k_t ⊙ (1 + (a_t − 1) ⊙ k_a), k the key as the shared layer projects it.

w_bias, a_bias, k_k and k_a are learned per key/value head and channel, initialised as fla's
first layer (layer ratio 0, channel n of D, l = n/(D−1) − ½, z the zigzag
((n − (D−1)/2)/((D−1)/2))·|…|): w_bias = −6 + 6·n/(D−1) + ½ + 2.5·z, a_bias = −0.19 + 0.3·z
+ 0.4·l, k_k = 0.71 − 0.1·l, k_a = 1.02 (fla spreads l over the whole width; here over a head).
Each head's output is then divided by its RMS over the value channels (``output_norm``, on by
default, `output_norm`).

**Deviations from the RWKV-7 time-mix block**, which is more than this core, each for the reason
given:

- no token shift (the lerp of each projection's input with the previous token's, x_r … x_g):
  part of the layer's input mixing, like the short convolutions the delta family leaves out;
- the gates a projection of the layer's input by the shared layer's one linear map plus the
  learned biases above, where RWKV-7 uses low-rank (LoRA) maps with a tanh inside w's: the
  shared layer makes every variant's gates alike;
- no value residual (v mixed with the first layer's values, ``v_first``): it spans layers;
- the bonus term (r_t ⊙ k̃_t ⊙ r_k summed, times v_t), added after the norm: a same-token skip
  path outside the WKV operator in the paper's code and fla's (``gate_output_correction``),
  like Mamba-2's D·x skip, which `mamba2` leaves out too; it reads no state;
- the output norm an RMS norm per head without learned weight or bias, where RWKV-7 has a
  GroupNorm per head (a LayerNorm: mean subtracted, ε = 64e-5, learned weight and bias), and no
  output gate g: the mixers of this folder share one norm, and the output projection absorbs a
  weight;
- grouped-query heads (RWKV-7 has none): keys, values, w and a per key/value head, the
  receptance per query head; the learned parameters per key/value head of the shape
  (``n_kv_heads``; built without it, per query head, whose heads then keep a state each).

``causal=False``: every query reads the state after the last key. Causal with N ≠ M: query i
reads S_min(i, M−1).

Computed chunk by chunk (`dplr_chunks`, with a = −a ⊙ κ̂, b = κ̂ / w, write key k̃: the
transition written (I − (a ⊙ κ̂)(κ̂/w)ᵀ) Diag(w), with 1/w < 1.84 since w's log is bounded
below by −e^{−1/2}), in float32 or float64, half precision in float32 and rounded back.
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
from attnbench.variants.recurrent.dplr_chunks import (
    DEFAULT_CHUNK,
    dplr_chunked,
    dplr_flops,
    dplr_step,
    machine_chunk,
)
from attnbench.variants.recurrent.mixer import RuleIncremental, ValueLinearMixer

DECAY_SPAN = math.exp(-0.5)  # log w ∈ (−e^{−1/2}, 0): fla's 0.6065306597126334
NORM_EPS = 1e-12  # κ̂'s L2 norm divides by max(‖k ⊙ k_k‖, eps) (torch's default)


@dataclass
class RWKV7Params:
    """Hyperparameters of `rwkv7`."""

    # positions per chunk of the chunked form (`dplr_chunks`); 0: chosen on the machine
    chunk_size: int = 0
    # each head's output divided by its RMS over the value channels (module docstring);
    # false: the bare recurrence
    output_norm: bool = True


def _first_layer_init(d: int) -> dict[str, torch.Tensor]:
    """fla's initial w_bias, a_bias, k_k and k_a over a head's D channels (module docstring)."""
    n = torch.arange(d, dtype=torch.float64)
    linear = n / max(d - 1, 1) - 0.5
    zig = (n - (d - 1) / 2) / max((d - 1) / 2, 1e-9)
    zig = zig * zig.abs()
    return {
        "w_bias": -6 + 6 * n / max(d - 1, 1) + 0.5 + 2.5 * zig,
        "a_bias": -0.19 + 0.3 * zig + 0.4 * linear,
        "k_k": 0.71 - 0.1 * linear,
        "k_a": torch.full((d,), 1.02, dtype=torch.float64),
    }


@register_variant("rwkv7")
class RWKV7(ValueLinearMixer):
    """RWKV-7's WKV recurrence: a per-channel decay plus a rank-one removal, chunked."""

    Params = RWKV7Params
    family = "rwkv"
    cost = "n"
    supports_causal = True
    grouped_query = True
    # packed documents in one pass: chunks laid out per document, the state reset at each
    # document's first chunk (`dplr_chunks`, "Packed documents")
    packing = "native"
    gates = {"w": "key", "a": "key"}
    # measured as the throughput task does (max error over max(1, max |float64 output|)) with
    # the default output norm and fla's initialisation, unit-normal inputs and gates, n = 512
    # and 1000, H = 4, D = 64, 1 and 4 key/value heads, causal and not, 3 seeds: worst 5.8e-7
    # in float32, 1.8e-3 in float16, 1.4e-2 in bfloat16 (computed in float32: the inputs' and
    # parameters' rounding); limits 4–6× those, for other CPUs' summation orders
    error_tolerance = {"float64": 1e-12, "float32": 3e-6, "float16": 8e-3, "bfloat16": 6e-2}

    def __init__(self, params: RWKV7Params, shape: VariantShape) -> None:
        super().__init__(params, shape)
        if params.chunk_size < 0:
            raise ValueError(
                f"rwkv7 chunk_size must be >= 1, or 0 to choose it on the machine; got "
                f"{params.chunk_size}."
            )
        self.last_chunk = params.chunk_size or DEFAULT_CHUNK  # what the last call ran with
        heads = shape.kv_heads
        for name, value in _first_layer_init(shape.head_dim).items():
            setattr(self, name, nn.Parameter(value.float().repeat(heads, 1)))

    def rule_inputs(self, k, v, gates):
        """k̃, v, −a ⊙ κ̂, κ̂ / w and log w per state head, (B, H_s, M, ·) each: per key/value
        head, or per query head where the parameters have a head per query head (built without
        ``n_kv_heads``; k, v and the gates are then repeated, and each query head keeps a state,
        as `gated_delta_net` does)."""
        heads, have = self.w_bias.shape[0], k.shape[1]
        params = [getattr(self, n).to(k.dtype) for n in ("w_bias", "a_bias", "k_k", "k_a")]
        raw_w = gates["w"].to(k.dtype) if gates is not None else torch.zeros_like(k)
        raw_a = gates["a"].to(k.dtype) if gates is not None else torch.zeros_like(k)
        if have > heads and have % heads == 0:  # keys repeated past the parameters' heads
            params = [p.repeat_interleave(have // heads, dim=0) for p in params]
        elif heads > have and heads % have == 0:  # parameters per query head: a state each
            k, v, raw_w, raw_a = (
                x.repeat_interleave(heads // have, dim=1) for x in (k, v, raw_w, raw_a)
            )
        elif heads != have:
            raise ValueError(
                f"rwkv7 has parameters for {heads} heads; keys with {have} heads do not divide "
                "or repeat them."
            )
        w_bias, a_bias, k_k, k_a = (p.unsqueeze(1) for p in params)  # (H_s, 1, D)
        log_w = -DECAY_SPAN * torch.sigmoid(raw_w + w_bias)
        rate = torch.sigmoid(raw_a + a_bias)
        removal = F.normalize(k * k_k, dim=-1, eps=NORM_EPS)
        replacement = k * (1 + (rate - 1) * k_a)
        return replacement, v, -rate * removal, removal * (-log_w).exp(), log_w

    def _scan(self, q, k, v, gates, causal, state=None, cu_seqlens=None):
        """The recurrence on inputs in the working dtype: outputs (B, H, N, Dv), final state;
        ``cu_seqlens``: documents packed along the sequence, in one pass (`dplr_chunks`)."""
        parts = self.rule_inputs(k, v, gates)
        n, m = q.shape[-2], k.shape[-2]
        if causal and n < m:  # query i reads S_i: the keys after the last query are never read
            parts = tuple(x[:, :, :n] for x in parts)
        head = q[:, :, :m] if causal and n > m else q
        c = self.last_chunk = machine_chunk(
            f"{self.name} chunks", self.params.chunk_size, (head, *parts), causal
        )
        out, state = dplr_chunked(head, *parts, c, state, causal, cu_seqlens)
        if causal and n > m:  # queries past the last key read S_M
            out = torch.cat([out, per_query_head(q[:, :, m:], state)], dim=2)
        return out, state

    def forward_flops(self, batch, heads, n, m, d, dv, causal) -> float:
        """The matrix products of the chunked form at the last call's chunk (`dplr_flops`); the
        element-wise pairwise
        sums, gates, norms and decays are not counted. The backward is the default."""
        kv = heads * self.shape.kv_heads / self.shape.n_heads
        if causal and n != m:
            m = n = min(n, m)  # later queries read the final state: counted as n = m
        return batch * dplr_flops(heads, kv, n, m, d, dv, causal, self.last_chunk)


@register_incremental("rwkv7")
class RWKV7Incremental(RuleIncremental):
    """`rwkv7` token by token: the state S alone, D×Dv per state head (per key/value head, or
    per query head where the parameters have a head per query head), the same at every length:
    all a sequence keeps (a token's gates and keys enter at that token only). A step applies
    the recurrence; a prefill runs the chunked form from the state."""

    head_parameter = "w_bias"

    def _step(self, q, k, v, gates, state):
        return dplr_step(q, *self.variant.rule_inputs(k, v, gates), state)
