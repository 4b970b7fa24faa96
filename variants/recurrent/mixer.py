"""The forward the recurrent mixers share (`delta_net`, `gated_delta_net`, `gla`, `mamba2`,
`mesa`): check the inputs and the gates, run the variant's engine (``run``, which computes in
`compute_dtype` and returns the output with the final state), and hand the output back in the
inputs' dtype.

A module of its own, as `precision`: a job's code fingerprint covers the modules its variant
imports, so the mixers share this one rather than one importing another's module."""

from __future__ import annotations

import torch

from attnbench import AttentionVariant
from attnbench.variant import check_gates


class GatedMixer(AttentionVariant):
    """An `AttentionVariant` whose ``run(q, k, v, gates, causal, state=None)`` returns
    ``(out, state)``: its forward is the engine's output."""

    def run(self, q, k, v, gates, causal, state=None) -> tuple[torch.Tensor, object]:
        raise NotImplementedError

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        causal: bool = False,
        gates: dict[str, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        self.check_inputs(q, k, v, causal)
        gates = check_gates(self, gates, k, v)  # also where forward is called directly
        return self.run(q, k, v, gates, causal)[0].to(q.dtype)
