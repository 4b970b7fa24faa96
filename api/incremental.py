"""The incremental form of an attention variant: generating one token at a time, and its state.

A variant's ``forward`` computes attention over a whole sequence at once. Inference generates
one token at a time, and what it costs there is the *state* each sequence holds between tokens (a
cache of every key and value, a ring of the w latest, or a fixed D×Dv matrix) and the work per
new token. `IncrementalAttention` is that form, for one variant instance and one batch of
sequences::

    decoder = incremental_form(variant, batch=1, max_len=4096, head_dim=64)
    out = decoder.prefill(q, k, v)        # (B, H, n, Dv): the causal outputs of the first n tokens
    out_t = decoder.step(q_t, k_t, v_t)   # (B, H, 1, Dv): the output of the next token
    decoder.state_bytes()                 # bytes held per sequence now (= state_size(position))

Grouped-query heads (``kv_heads`` < H, dividing it): keys and values come with ``kv_heads``
heads, query head h reads key/value head h // (H / kv_heads) (as ``repeat_interleave`` lays
them out), and a form that shares them (`IncrementalAttention.grouped_query`) keeps one cache or
state per key/value head, so its state shrinks by the group factor; its outputs equal the
variant's causal forward on keys and values repeated to H heads.

The contract (`attnbench.testing.VariantContractTests` checks it for every registered variant):
after any mix of ``prefill`` and ``step`` calls, the outputs are the variant's causal ``forward``
over the whole ``max_len`` sequence, position by position; the tensors the decoder holds
(`state_tensors`) have exactly ``state_size(position)`` elements per sequence.

Why ``max_len``: several variants are defined for a sequence length, not a prefix: weights that
divide by the number of keys (identity, relu², sigmoid's −log M bias) and pattern sizes given as
fractions of the sequence. A decoder is built for the length its sequence will reach, as a
serving engine reserves a sequence's cache; a KV cache is allocated for ``max_len`` tokens once,
and ``state_size(n)`` counts the n tokens in use (what a paged cache would hold), not the
reservation.

Why a class of its own, registered under the variant's name, rather than methods of
`AttentionVariant`: it holds per-sequence state the variant (a module of the model) does not,
and a plugin adds it without touching its variant, so none of the variant's measurements change.
A variant without one (or one that is not causal) is `UnsupportedError` with one sentence:
tasks record it as ``unsupported``, never as a failure.
"""

from __future__ import annotations

from itertools import pairwise
from typing import ClassVar

import torch

from attnbench.masks import document_bounds
from attnbench.registry import Registry
from attnbench.variant import (
    AttentionVariant,
    UnsupportedError,
    check_gates,
    check_kv_heads,
    per_query_head,
)


class IncrementalAttention:
    """The token-by-token form of a variant instance for ``batch`` sequences of ≤ ``max_len``.

    Subclasses set `state_size` and implement `_extend` (the n next tokens, for any n ≥ 1 and
    any position); `prefill` and `step` are both `_extend`, checked. ``self.position`` is the
    number of tokens seen so far; ``self.variant`` the instance whose parameters it reads.

    Args:
        variant: The variant instance (its parameters, learned ones included, are read, not
            copied: a decoder of a trained model decodes with the trained values).
        batch: Number of sequences B.
        max_len: The length the sequences will reach (module docstring: why it is needed).
        head_dim: Query and key head dimension D.
        value_dim: Value head dimension Dv (default: D).
        device, dtype: Where and in what precision the state is held ("meta" sizes it only).
        kv_heads: Key/value heads (default: H); must divide H (module docstring).
    """

    variant_name: ClassVar[str] = ""  # set by `register_incremental`
    # whether the form takes fewer key/value heads than query heads (module docstring)
    grouped_query: ClassVar[bool] = False

    def __init__(
        self,
        variant: AttentionVariant,
        batch: int,
        max_len: int,
        head_dim: int,
        value_dim: int | None = None,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
        kv_heads: int | None = None,
    ) -> None:
        if batch < 1 or max_len < 1 or head_dim < 1:
            raise ValueError(
                f"an incremental form needs batch, max_len and head_dim >= 1; got batch={batch}, "
                f"max_len={max_len}, head_dim={head_dim}."
            )
        self.variant = variant
        self.batch, self.max_len = batch, max_len
        self.heads = variant.shape.n_heads
        self.kv_heads = kv_heads or self.heads
        check_kv_heads(self.heads, self.kv_heads)
        self.group = self.heads // self.kv_heads  # query heads per key/value head
        self.head_dim, self.value_dim = head_dim, value_dim or head_dim
        self.device, self.dtype = torch.device(device), dtype
        self.position = 0
        self._built_with = (variant, batch, max_len, head_dim, value_dim, device, dtype, kv_heads)

    def reset(self) -> None:
        """Forget every token: the state of a decoder just built (position 0), as a serving
        engine does when a slot takes its next request, and as a packed prefill does at each
        document boundary. Built again from the constructor's arguments, so a form needs no code
        of its own for it."""
        type(self).__init__(self, *self._built_with)

    def state_size(self, n: int) -> int:
        """Elements of state one sequence holds after n tokens (n ≤ max_len): exactly what
        `state_tensors` holds then, per sequence. Say in the docstring why it must keep that."""
        raise NotImplementedError

    def state_tensors(self) -> list[torch.Tensor]:
        """The state held now (the parts in use; tensors with a leading batch dimension)."""
        raise NotImplementedError

    def _extend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Outputs of the n tokens at positions position … position + n − 1, then keep them.
        The form of a gated variant (`AttentionVariant.gates`) is called ``_extend(q, k, v,
        gates)`` with the n tokens' raw gates, name → (B, kv_heads, n, width)."""
        raise NotImplementedError

    def state_bytes(self) -> int:
        """Bytes of state one sequence holds now (`state_tensors`, divided by the batch)."""
        total = sum(t.numel() * t.element_size() for t in self.state_tensors())
        return total // self.batch

    def prefill(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        gates: dict[str, torch.Tensor] | None = None,
        cu_seqlens: torch.Tensor | list[int] | None = None,
    ) -> torch.Tensor:
        """The n tokens of (B, H, n, ·) ``q, k, v`` at once: their causal outputs (B, H, n, Dv).
        A gated variant's form takes the n tokens' raw ``gates`` too (name → (B, kv_heads, n,
        width), as the variant's forward takes them).

        ``cu_seqlens`` (cumulative document lengths, as `AttentionVariant`'s packed call takes
        them): the n tokens are documents packed one after another; the state is `reset` at
        each boundary, so every document's outputs are those of the document decoded alone and
        the decoder ends holding the last document's state (a fresh decoder is needed: the first
        document starts at position 0)."""
        if cu_seqlens is not None:
            if self.position:
                raise ValueError(
                    f"incremental '{self.variant_name}': a packed prefill starts a fresh "
                    f"sequence, but {self.position} tokens were seen; call reset() first."
                )
            bounds = document_bounds(cu_seqlens, q.shape[-2] if q.dim() == 4 else 0)
            outs = []
            for a, b in pairwise(bounds):
                self.reset()
                cut = {n: g[..., a:b, :] for n, g in (gates or {}).items()}
                outs.append(
                    self.prefill(q[..., a:b, :], k[..., a:b, :], v[..., a:b, :], cut or None)
                )
            return torch.cat(outs, dim=-2)
        self._check(q, k, v)
        if self.variant.gates:
            out = self._extend(q, k, v, check_gates(self.variant, gates, k, v))
        elif gates:
            raise ValueError(f"variant '{self.variant_name}' takes no gates.")
        else:
            out = self._extend(q, k, v)
        self.position += q.shape[-2]
        return out

    def step(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        gates: dict[str, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """One token, (B, H, 1, ·) each (and its gates, for a gated variant): its output
        (B, H, 1, Dv)."""
        if q.dim() == 4 and q.shape[-2] != 1:
            raise ValueError(f"step takes one token; got {q.shape[-2]}: use prefill.")
        return self.prefill(q, k, v, gates)

    def repeat_kv(self, x: torch.Tensor) -> torch.Tensor:
        """Keys or values of the key/value heads repeated to one per query head (a copy)."""
        return x.repeat_interleave(self.group, dim=1) if self.group > 1 else x

    def per_query_head(self, q: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        """``q @ m`` for q (B, H, n, X) and m (B, kv_heads, X, Y), each query head with its
        key/value head's matrix, without repeating m: (B, H, n, Y)."""
        return per_query_head(q, m)

    def _check(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        b, h, d, dv = self.batch, self.heads, self.head_dim, self.value_dim
        kv = self.kv_heads
        n = q.shape[-2] if q.dim() == 4 else 0
        expected = [(b, h, n, d), (b, kv, n, d), (b, kv, n, dv)]
        if n < 1 or [tuple(t.shape) for t in (q, k, v)] != expected:
            raise ValueError(
                f"incremental '{self.variant_name}' expects q of shape (B={b}, H={h}, n, D={d}), "
                f"k (B, {kv}, n, D) and v (B, {kv}, n, Dv={dv}) with n >= 1; got "
                f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}."
            )
        if self.position + n > self.max_len:
            raise ValueError(
                f"incremental '{self.variant_name}' was built for max_len={self.max_len} tokens; "
                f"{self.position} seen, {n} more asked: build it with a larger max_len."
            )


INCREMENTAL: Registry[type[IncrementalAttention]] = Registry(
    "incremental form", base=IncrementalAttention
)


def register_incremental(variant_name: str):
    """Class decorator: register the `IncrementalAttention` subclass of variant ``variant_name``.

    Example (beside the variant, in the plugin's module)::

        @register_incremental("mine")
        class MineIncremental(IncrementalAttention): ...
    """

    def decorate(cls: type[IncrementalAttention]) -> type[IncrementalAttention]:
        if isinstance(cls, type) and issubclass(cls, IncrementalAttention):
            cls.variant_name = variant_name
        return INCREMENTAL.register(variant_name, cls)

    return decorate


def why_no_incremental_form(variant: AttentionVariant | type[AttentionVariant]) -> str:
    """One sentence on why the variant cannot generate token by token; "" when it can."""
    if not variant.supports_causal:
        return (
            f"variant '{variant.name}' is not causal (a token's output depends on later tokens), "
            "so it cannot generate one token at a time."
        )
    if variant.name not in INCREMENTAL:
        return (
            f"variant '{variant.name}' has no incremental form: its plugin registers none "
            "(attnbench.register_incremental), so it cannot be decoded token by token."
        )
    return ""


def incremental_form(
    variant: AttentionVariant,
    batch: int,
    max_len: int,
    head_dim: int,
    value_dim: int | None = None,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    kv_heads: int | None = None,
) -> IncrementalAttention:
    """The incremental form registered under ``variant``'s name, built.

    A form registers where its variant is defined (the variant's module, or one it imports), so
    a variant instance implies that its form, if it has one, is registered: the lookup reads the
    registry as it is and loads no plugins.

    Raises:
        UnsupportedError: the variant has none (`why_no_incremental_form`), or fewer key/value
            heads than query heads were asked of a form that does not share them.
        ValueError: ``kv_heads`` does not divide the variant's heads.
    """
    reason = why_no_incremental_form(variant)
    if reason:
        raise UnsupportedError(reason)
    cls = INCREMENTAL.get(variant.name)
    heads = variant.shape.n_heads
    if kv_heads is not None:
        check_kv_heads(heads, kv_heads)
    if kv_heads not in (None, heads) and not cls.grouped_query:
        raise UnsupportedError(
            f"the incremental form of '{variant.name}' does not share keys and values across "
            f"query heads (grouped_query = False): run it with as many key/value heads as "
            f"query heads ({variant.shape.n_heads})."
        )
    return cls(variant, batch, max_len, head_dim, value_dim, device, dtype, kv_heads)
