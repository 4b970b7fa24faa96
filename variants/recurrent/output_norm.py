"""The output normalisation of the recurrent mixers (`delta_net`, `gated_delta_net`, `gla`,
`mamba2`): each head's output at each position divided by its root mean square over the value
channels, o_t / √(mean_e o_te² + ε), as the reference layers do before their output
projection (flash-linear-attention's ``o_norm``/``g_norm``, an RMSNorm per head; mamba_ssm's
Mamba2 ``norm``, an RMSNorm over the heads of a group, per head with one head).

Without it these mixers' outputs carry the scale of their state, which their gates set: a
decayed state reads out small, and in `mamba2` the step Δ that scales the written keys is also
the one that sets the decay, so an optimiser that wants a larger output grows Δ and forgets
faster. The norm takes the scale out of the forward, as in the references (issue #58: with it,
`gated_delta_net` and `mamba2` at the reference initialisation learn MQAR; without it they
stayed at chance).

A single value channel (Dv = 1) is left as it is: its RMS norm would be its sign, which no
reference layer computes (their heads have 64 channels and more) and which would discard the
magnitude a scalar-valued use reads (icl_regression's attention system, ŷ = h(·)·(w_v y) with
Dv = 1: with the sign, `delta_net`'s loss ratio to least squares went from 0.0 to 138).

Not here, as in the references: the norm's learned per-channel weight (the shared layer's
output projection follows and absorbs it) and the gate the references multiply in (a further
projection of the layer input: SiLU(g) in fla, SiLU(z) in Mamba-2), which the shared layer
does not make.

A module of its own, as `precision`: a job's code fingerprint covers the modules its variant
imports, and `mesa` (which does not normalise its output here) does not import this one."""

from __future__ import annotations

import torch

# the references' RMSNorm ε (fla's norm_eps default and mamba_ssm's Mamba2: 1e-5); the mean
# square is that of the output as the mixer computes it (float32 or float64, `compute_dtype`)
OUTPUT_NORM_EPS = 1e-5


def normalise_output(out: torch.Tensor) -> torch.Tensor:
    """out (…, Dv) divided by its root mean square over the last axis (plus ε), per position
    and head: causal (a position's norm reads that position only), so the token-by-token forms
    apply it to each new output alike. Dv = 1: out as it is (module docstring)."""
    if out.shape[-1] == 1:
        return out
    return out * torch.rsqrt(out.pow(2).mean(-1, keepdim=True) + OUTPUT_NORM_EPS)
