"""The forward the recurrent mixers share (the delta family, `kda`, `rwkv7`, `gla`, `mamba2`,
`mesa`): check the inputs and the gates, run the variant's engine (``scan``, which computes in
`compute_dtype` and returns the output with the final state), and hand the output back in the
inputs' dtype.

Packed documents (``cu_seqlens``) of a mixer with ``packing = "native"``: the engine's one pass
(`documents`: every document padded to whole chunks, side by side, the state reset at each)
saves the calls of many short documents, and costs more than calling a long one alone: its
layout copies every tensor twice and its chunk loop is as long as the documents' together.
Measured forward, float32, one thread, H = 4, D = 64, 2048 tokens in documents of one length,
time of a call per document over time of the one pass (the 2-core AMD EPYC host, AVX512, load
1-2; median of 5 same-process ratios, range): 64 tokens gla 1.20 (0.91-1.27), mamba2 1.30,
delta_net 1.44 (1.39-1.54); 128 tokens 0.89, 0.94, 1.03; 32 tokens delta_net 2.7, kda 1.4;
256 to 1024 tokens 0.54-0.93 (one run each). So documents of at most `ONE_PASS_TOKENS` go
through the one pass together, longer ones each through a call of their own.

A module of its own, as `precision`: a job's code fingerprint covers the modules its variant
imports, so the mixers share this one rather than one importing another's module."""

from __future__ import annotations

from itertools import accumulate, pairwise

import torch

from attnbench import AttentionVariant
from attnbench.masks import document_bounds
from attnbench.variant import check_gates
from attnbench.variants.decoding import RecurrentState
from attnbench.variants.recurrent.output_norm import normalise_output
from attnbench.variants.recurrent.precision import compute_dtype

ONE_PASS_TOKENS = 96  # the longest document a packed call runs in the one pass (docstring)


class GatedMixer(AttentionVariant):
    """An `AttentionVariant` whose ``scan(q, k, v, gates, causal, state=None)`` returns
    ``(out, state)``: its forward is the engine's output."""

    def _scan(self, q, k, v, gates, causal, state=None) -> tuple[torch.Tensor, object]:
        """The engine on inputs and gates already in the working dtype: (out, final state).
        A mixer with ``packing = "native"`` takes ``cu_seqlens`` too (documents packed along
        the sequence, each run from the zero state)."""
        raise NotImplementedError

    def scan(self, q, k, v, gates, causal, state=None, **packed) -> tuple[torch.Tensor, object]:
        """`_scan` on inputs and gates widened to `compute_dtype`, its output through `finish`
        (a mixer whose engine does its own widening overrides this); ``packed``: the
        ``cu_seqlens`` of a native packed call, passed on."""
        work = compute_dtype(q.dtype)
        if gates is not None:
            gates = {name: g.to(work) for name, g in gates.items()}
        out, state = self._scan(q.to(work), k.to(work), v.to(work), gates, causal, state, **packed)
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
        if packed:
            return self._packed_scan(q, k, v, gates, causal, cu_seqlens).to(q.dtype)
        return self.scan(q, k, v, gates, causal)[0].to(q.dtype)

    def _packed_scan(self, q, k, v, gates, causal, cu_seqlens) -> torch.Tensor:
        """Packed documents: the short ones (at most `ONE_PASS_TOKENS`) in one pass of the
        engine, side by side in whole chunks (`documents`), each longer one in a call of its
        own; the outputs put back in the documents' order. Both forms give each document its
        outputs alone; which is faster depends on the length (module docstring)."""
        bounds = document_bounds(cu_seqlens, q.shape[-2])
        docs = list(pairwise(bounds))
        short = [(a, b) for a, b in docs if b - a <= ONE_PASS_TOKENS]
        if len(short) == len(docs):  # all in the one pass, nothing to gather
            return self.scan(q, k, v, gates, causal, cu_seqlens=bounds)[0]
        pieces: dict[int, torch.Tensor] = {}
        if short:
            index = torch.cat([torch.arange(a, b, device=q.device) for a, b in short])
            starts = [0, *accumulate(b - a for a, b in short)]
            cut = [x.index_select(-2, index) for x in (q, k, v)]
            few = {n: g.index_select(-2, index) for n, g in (gates or {}).items()} or None
            out = self.scan(*cut, few, causal, cu_seqlens=starts)[0]
            lengths = [b - a for a, b in short]
            pieces.update(zip([a for a, _ in short], out.split(lengths, dim=-2), strict=True))
        for a, b in docs:
            if b - a > ONE_PASS_TOKENS:
                one = {n: g[..., a:b, :] for n, g in (gates or {}).items()} or None
                pieces[a] = self.scan(q[..., a:b, :], k[..., a:b, :], v[..., a:b, :], one, causal)[
                    0
                ]
        return torch.cat([pieces[a] for a, _ in docs], dim=-2)


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


class RuleIncremental(RecurrentState):
    """A mixer with a D×Dv state token by token (the delta family, `kda`, `rwkv7`): the state S
    alone, one per key/value head, or one per query head where the variant's per-head parameter
    (``head_parameter``, e.g. its decay's ``A_log``) has a head per query head; the same size at
    every length. A prefill runs the chunked engine from the state held (``_scan``); one token,
    the recurrence itself (``_step``), both in `compute_dtype`."""

    head_parameter = ""  # the variant's parameter with a leading head axis ("": none)

    def _state_heads(self) -> int:
        param = getattr(self.variant, self.head_parameter, None) if self.head_parameter else None
        heads = 0 if param is None else param.shape[0]
        return heads if heads > self.kv_heads else self.kv_heads

    def _step(self, q, k, v, gates, state) -> tuple[torch.Tensor, torch.Tensor]:
        """One token's output (before `finish`) and the state after it, in the working dtype."""
        raise NotImplementedError

    def _extend(self, q, k, v, gates=None):
        variant, work = self.variant, compute_dtype(self.dtype)
        q, k, v = q.to(work), k.to(work), v.to(work)
        if gates is not None:
            gates = {name: g.to(work) for name, g in gates.items()}
        state = self.state.to(work)
        if q.shape[-2] > 1:
            out, state = variant._scan(q, k, v, gates, causal=True, state=state)
        else:
            out, state = self._step(q, k, v, gates, state)
        self.state.copy_(state)
        return variant.finish(out).to(self.dtype)
