"""The baselines a reader calibrates a language model's bits per byte against.

* **order 0** (`unigram_bpb`): the training split's byte frequencies, add-one smoothed over the
  256 bytes (so a byte unseen in training costs a finite amount), evaluated on held-out bytes:
  the cross-entropy −mean log₂ p(x), not the held-out split's own entropy (which would be fitted
  on the data it scores).
* **order 3** (`KneserNey`): a trigram model (two bytes of context) with interpolated
  Kneser–Ney smoothing (Chen & Goodman 1998, eq. for interpolated KN), one absolute discount per
  order D = n₁ / (n₁ + 2 n₂) (Ney et al. 1994; n₁, n₂: the counts of that order's n-grams seen
  once and twice), the lowest order interpolated with the uniform distribution over 256 bytes:

      P₃(c | a b) = max(c(abc) − D₃, 0) / c(ab·) + D₃ N₁₊(ab·) / c(ab·) · P₂(c | b)
      P₂(c | b)   = max(N₁₊(·bc) − D₂, 0) / N₁₊(·b·) + D₂ N₁₊(b·) / N₁₊(·b·) · P₁(c)
      P₁(c)       = max(N₁₊(·c) − D₁, 0) / N₁₊(··) + D₁ N₁₊(·)/ N₁₊(··) · 1/256

  with c(·) counts, N₁₊(·bc) the number of distinct a before bc (continuation counts),
  N₁₊(b·) the distinct bytes after a context; a context never seen falls back to the next
  order whole. Each level sums to 1 over the 256 bytes when the one below does.

The held-out stream is scored as one sequence: its first two bytes with the contexts they have
(order 1, then 2), every later byte with its two predecessors.
"""

from __future__ import annotations

import numpy as np

V = 256
CHUNK = 1 << 22  # bytes counted at a time (bounds the index arrays' memory)


def unigram_bits(train: np.ndarray, held_out: np.ndarray) -> np.ndarray:
    """Bits of each byte of ``held_out`` under the training split's add-one unigram."""
    counts = np.bincount(train, minlength=V).astype(np.float64) + 1.0
    return -np.log2(counts / counts.sum())[held_out]


def unigram_bpb(train: np.ndarray, held_out: np.ndarray) -> float:
    """Bits per byte of ``held_out`` under the training split's add-one unigram."""
    return float(unigram_bits(train, held_out).mean())


def _ngram_counts(data: np.ndarray, order: int) -> np.ndarray:
    """Counts of every ``order``-gram of ``data`` as an array of V**order entries."""
    out = np.zeros(V**order, dtype=np.int64)
    for start in range(0, max(0, len(data) - order + 1), CHUNK):
        stop = min(len(data) - order + 1, start + CHUNK)
        code = np.zeros(stop - start, dtype=np.int64)
        for i in range(order):
            code = code * V + data[start + i : stop + i]
        out += np.bincount(code, minlength=V**order)
    return out.reshape((V,) * order)


def _discount(counts: np.ndarray) -> float:
    """Ney's absolute discount n₁ / (n₁ + 2 n₂), 0.5 where no n-gram is seen once or twice."""
    n1, n2 = int((counts == 1).sum()), int((counts == 2).sum())
    return n1 / (n1 + 2 * n2) if n1 + n2 else 0.5


class KneserNey:
    """Order-3 interpolated Kneser–Ney over bytes, fitted on ``train`` (module docstring)."""

    def __init__(self, train: np.ndarray) -> None:
        c3 = _ngram_counts(train, 3)  # (a, b, c)
        seen3 = c3 > 0
        cont2 = seen3.sum(0)  # N₁₊(·bc), (b, c)
        cont1 = (_ngram_counts(train, 2) > 0).sum(0)  # N₁₊(·c), (c,)
        self.d3, self.d2, self.d1 = _discount(c3), _discount(cont2), _discount(cont1)
        total1 = cont1.sum()
        self.p1 = np.maximum(cont1 - self.d1, 0) / total1 + self.d1 * (cont1 > 0).sum() / (
            total1 * V
        )
        # P₂ as a (b, c) table: 65536 entries
        ctx2 = cont2.sum(1, keepdims=True)  # N₁₊(·b·)
        types2 = (cont2 > 0).sum(1, keepdims=True)  # N₁₊(b·) among continuations
        safe2 = np.maximum(ctx2, 1)
        p2 = np.maximum(cont2 - self.d2, 0) / safe2 + self.d2 * types2 / safe2 * self.p1
        self.p2 = np.where(ctx2 > 0, p2, self.p1[None, :])
        self.c3 = c3
        self.ctx3 = c3.sum(2)  # c(ab·), (a, b)
        self.types3 = seen3.sum(2)  # N₁₊(ab·), (a, b)

    def p3(self, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
        """P₃(c | a b) for index arrays of one shape."""
        ctx = self.ctx3[a, b].astype(np.float64)
        safe = np.maximum(ctx, 1.0)
        low = self.p2[b, c]
        top = np.maximum(self.c3[a, b, c] - self.d3, 0) / safe
        mixed = top + self.d3 * self.types3[a, b] / safe * low
        return np.where(ctx > 0, mixed, low)

    def distribution(self, a: int, b: int) -> np.ndarray:
        """P₃(· | a b) over the 256 bytes."""
        c = np.arange(V)
        return self.p3(np.full(V, a), np.full(V, b), c)

    def bits(self, held_out: np.ndarray) -> np.ndarray:
        """Bits of each byte of ``held_out``, scored as one stream (module docstring)."""
        x = held_out.astype(np.int64)
        out = np.empty(len(x))
        out[:1] = -np.log2(self.p1[x[:1]])
        out[1:2] = -np.log2(self.p2[x[:1], x[1:2]])
        for start in range(2, len(x), CHUNK):
            stop = min(len(x), start + CHUNK)
            p = self.p3(x[start - 2 : stop - 2], x[start - 1 : stop - 1], x[start:stop])
            out[start:stop] = -np.log2(p)
        return out

    def bpb(self, held_out: np.ndarray) -> float:
        """Bits per byte of ``held_out`` scored as one stream."""
        return float(self.bits(held_out).mean())
