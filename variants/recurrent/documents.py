"""Packed documents laid out for a chunked engine: the one-pass form of a packed call
(``cu_seqlens``, `AttentionVariant`'s "Packed sequences") that `gla`, `mamba2`, the delta family,
`kda` and `rwkv7` share.

A chunked engine cuts the sequence into chunks of C positions, computes within each chunk with
matrix products and carries the state from chunk to chunk. Packed documents break that only
where a chunk straddles a boundary. So each document is padded with zero positions up to a
multiple of C and the documents' chunks are laid side by side (`DocumentChunks.spread`): no chunk
holds two documents, the within-chunk work runs batched over all chunks at once, as for one
sequence, and the carried state is replaced by the empty state at each document's first chunk
(`DocumentChunks.starts`). A padded position has a zero key, a zero value, a zero write
strength and a log-decay of 0 (the identity transition): it changes no state, and its output is
dropped (`DocumentChunks.gather`). This is flash-linear-attention's varlen form (its chunk
indices: a document's chunks, the last one partial; its state pass restarts at each document),
with the partial chunks padded rather than masked, which keeps the engines' dense per-chunk
products. What it costs over one sequence: at most C − 1 padded positions per document.

Queries that read the state after the last key (``causal=False``) read their own document's:
the state after its last chunk (`DocumentChunks.ends`), one per chunk by `DocumentChunks.doc`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise

import torch
import torch.nn.functional as F

from attnbench.masks import document_bounds


@dataclass(frozen=True)
class DocumentChunks:
    """Where each document's positions sit once every document is padded to whole chunks.

    Attributes:
        chunk: C, the positions per chunk.
        length: L, the laid-out length (a multiple of C: the documents' padded lengths summed).
        slots: (L,) long: the packed position each laid-out position holds; n (one past the
            end) for a padded one.
        rows: (n,) long: the laid-out position of each packed position.
        starts: per chunk, whether it is a document's first (the state starts afresh there).
        ends: per document, the index of its last chunk.
        doc: (L / C,) long: the document of each chunk.
    """

    chunk: int
    length: int
    slots: torch.Tensor
    rows: torch.Tensor
    starts: tuple[bool, ...]
    ends: tuple[int, ...]
    doc: torch.Tensor

    def spread(self, x: torch.Tensor, dim: int = 2, fill: float = 0.0) -> torch.Tensor:
        """``x`` with its packed positions along ``dim`` laid out chunk-aligned, ``fill`` at
        the padded positions (0: no key, value, write or decay; a sign's padding is 1)."""
        dim = dim % x.dim()
        pad = [0, 0] * (x.dim() - dim - 1) + [0, 1]  # one position of ``fill`` after the end
        return F.pad(x, pad, value=fill).index_select(dim, self.slots)

    def gather(self, x: torch.Tensor, dim: int = 2) -> torch.Tensor:
        """The packed positions of a laid-out ``x`` along ``dim``, padded positions dropped."""
        return x.index_select(dim, self.rows)


def document_chunks(
    cu_seqlens, n: int, chunk: int, device: torch.device | str | None = None
) -> DocumentChunks:
    """The chunk-aligned layout of documents packed in n positions (``cu_seqlens``, checked by
    `attnbench.masks.document_bounds`), C = ``chunk`` positions per chunk (module docstring)."""
    bounds = document_bounds(cu_seqlens, n)
    slots, rows, starts, ends, doc = [], [], [], [], []
    for i, (a, b) in enumerate(pairwise(bounds)):
        chunks = -(-(b - a) // chunk)
        rows.extend(range(len(slots), len(slots) + b - a))
        slots.extend(range(a, b))
        slots.extend([n] * (chunks * chunk - (b - a)))
        starts.extend([True] + [False] * (chunks - 1))
        doc.extend([i] * chunks)
        ends.append(len(starts) - 1)
    return DocumentChunks(
        chunk=chunk,
        length=len(slots),
        slots=torch.tensor(slots, dtype=torch.long, device=device),
        rows=torch.tensor(rows, dtype=torch.long, device=device),
        starts=tuple(starts),
        ends=tuple(ends),
        doc=torch.tensor(doc, dtype=torch.long, device=device),
    )


def longest_document(cu_seqlens, n: int) -> int:
    """The length of the longest document in ``cu_seqlens`` (a chunk need not be longer)."""
    return max(b - a for a, b in pairwise(document_bounds(cu_seqlens, n)))


def chunk_layout(
    m: int, chunk: int, cu_seqlens=None, device: torch.device | str | None = None
) -> tuple[int, int, Callable[[torch.Tensor], torch.Tensor], DocumentChunks | None]:
    """How a chunked engine lays out its M positions: C, the number of chunks, the function that
    lays a (B, H, M, ·) tensor out in them (zero positions appended or, for packed documents,
    inserted), and the documents' layout (None for one sequence). C is ``chunk``, or less
    where no sequence (no document) is that long."""
    if cu_seqlens is None:
        c = max(1, min(chunk, m))
        n_chunks = -(-m // c)

        def spread(x: torch.Tensor) -> torch.Tensor:  # zero positions after the end (dim 2)
            extra = n_chunks * c - x.shape[2]
            return F.pad(x, [0, 0] * (x.dim() - 3) + [0, extra]) if extra else x

        return c, n_chunks, spread, None
    c = max(1, min(chunk, longest_document(cu_seqlens, m)))
    layout = document_chunks(cu_seqlens, m, c, device)
    return c, layout.length // c, layout.spread, layout
