"""The forward the recurrent mixers share (the delta family, `kda`, `rwkv7`, `gla`, `mamba2`,
`mesa`): check the inputs and the gates, run the variant's engine (``run``, which computes in
`compute_dtype` and returns the output with the final state), and hand the output back in the
inputs' dtype.

A module of its own, as `precision`: a job's code fingerprint covers the modules its variant
imports, so the mixers share this one rather than one importing another's module."""

from __future__ import annotations

import torch

from attnbench import AttentionVariant
from attnbench.variant import check_gates
from attnbench.variants.recurrent.output_norm import normalise_output
from attnbench.variants.recurrent.precision import compute_dtype


class GatedMixer(AttentionVariant):
    """An `AttentionVariant` whose ``run(q, k, v, gates, causal, state=None)`` returns
    ``(out, state)``: its forward is the engine's output."""

    def _run(self, q, k, v, gates, causal, state=None) -> tuple[torch.Tensor, object]:
        """The engine on inputs and gates already in the working dtype: (out, final state).
        A mixer with ``packing = "native"`` takes ``cu_seqlens`` too (documents packed along
        the sequence, each run from the zero state)."""
        raise NotImplementedError

    def run(self, q, k, v, gates, causal, state=None, **packed) -> tuple[torch.Tensor, object]:
        """`_run` on inputs and gates widened to `compute_dtype`, its output through `finish`
        (a mixer whose engine does its own widening overrides this); ``packed``: the
        ``cu_seqlens`` of a native packed call, passed on."""
        work = compute_dtype(q.dtype)
        if gates is not None:
            gates = {name: g.to(work) for name, g in gates.items()}
        out, state = self._run(q.to(work), k.to(work), v.to(work), gates, causal, state, **packed)
        return self.finish(out), state

    def finish(self, out: torch.Tensor) -> torch.Tensor:
        """The engine's output as the variant gives it: RMS-normalised per head and position
        where the variant's ``output_norm`` is set (`normalise_output`), else as it is."""
        return normalise_output(out) if getattr(self.params, "output_norm", False) else out

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        causal: bool = False,
        gates: dict[str, torch.Tensor] | None = None,
        cu_seqlens: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The engine's output; ``cu_seqlens`` (documents packed along the sequence) reaches
        only a mixer with ``packing = "native"`` (`AttentionVariant`'s "Packed sequences")."""
        self.check_inputs(q, k, v, causal)
        gates = check_gates(self, gates, k, v)  # also where forward is called directly
        packed = {} if cu_seqlens is None else {"cu_seqlens": cu_seqlens}
        if packed and self.packing != "native":
            raise ValueError(
                f"variant '{self.name}' runs packed documents one at a time (packing = "
                f"{self.packing!r}); pass cu_seqlens to the variant's call, not to forward."
            )
        return self.run(q, k, v, gates, causal, **packed)[0].to(q.dtype)


class ValueLinearMixer(GatedMixer):
    """A mixer whose output, before its output norm, is linear in the values for given q, k and
    gates (the delta family, kda, rwkv7): its attention weights are its forward of the
    identity as values."""

    def attention_weights(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        causal: bool = False,
        gates: dict[str, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """The (B, H, N, M) matrix A with forward(q, k, v) = A v: the forward of the identity as
        values (each key's value a unit vector). The weights depend on the gates: without them,
        refused; so is a variant with ``output_norm``, whose output is no linear map of the
        values."""
        if gates is None:
            raise NotImplementedError(
                f"variant '{self.name}' weighs keys by its gates: its attention weights need them."
            )
        if self.params.output_norm:
            raise NotImplementedError(
                f"variant '{self.name}' normalises its output per position (output_norm), which "
                "no matrix of weights applied to the values reproduces; output_norm=false gives "
                "the rule's weights."
            )
        b, kv, m, _ = k.shape
        eye = torch.eye(m, dtype=k.dtype, device=k.device).expand(b, kv, m, m)
        return self.forward(q, k, eye, causal=causal, gates=gates)
