"""Multi-query associative recall data with the semantics of Zoology's MQAR generator.

Zoology (Arora et al. 2023, ``HazyResearch/zoology``, ``zoology/data/multiquery_ar.py``) builds
each sequence of length L with P key-value pairs as follows, and so does `mqar_batch` (our own
vectorised torch code, seeded by a ``torch.Generator``):

* keys are P distinct tokens of [1, V/2), values P distinct tokens of [V/2, V) (both drawn without
  replacement within a sequence); the first 2P positions hold k₁ v₁ k₂ v₂ … k_P v_P;
* the rest is (L − 2P)/2 query slots at even offsets after the prefix; slot g (0 = right after the
  prefix) has weight (g+1)^(a−1) (``power_a`` = a; a = 1 is uniform, Zoology's default 0.01 puts
  most queries close to the prefix, like the power-law gaps between repeated bigrams in text);
  P distinct slots are drawn by successive sampling (each draw ∝ the weights of the slots left,
  as ``numpy.random.choice(replace=False, p=…)``), the j-th draw for the j-th key;
* key k_j is repeated at its slot, and the target there is v_j (−100 elsewhere, not scored): the
  model must output the value when it sees the key again;
* every other position (the odd offsets, unused slots) is a filler token: uniform over the whole
  vocabulary (``random_filler``, Zoology's ``random_non_queries``, default on) or 0.

Random fillers include keys and values of the same sequence, so a model cannot find the queries
by their token alone: they act as distractors. Hence the length constraint 4·P ≤ L (P slots for
P queries) and an even L.
"""

from __future__ import annotations

import torch

IGNORE = -100  # target of unscored positions (PyTorch's cross-entropy ignore_index)
ROWS_PER_DRAW = 2048  # rows of random scores at a time when drawing distinct tokens (memory)


def gap_weights(space: int, power_a: float) -> torch.Tensor:
    """Unnormalised weights of the ``space`` query slots: slot g has (g+1)^(power_a−1)."""
    return torch.arange(1, space + 1, dtype=torch.float64).pow(power_a - 1)


def gap_probabilities(space: int, power_a: float) -> torch.Tensor:
    """The distribution of the first query's slot (and of every slot when P = 1)."""
    w = gap_weights(space, power_a)
    return w / w.sum()


def _distinct(n: int, size: int, k: int, gen: torch.Generator) -> torch.Tensor:
    """(n, k) long: per row, k distinct integers of [0, size), uniformly (top-k of random scores,
    in random order)."""
    out = torch.empty(n, k, dtype=torch.long)
    for start in range(0, n, ROWS_PER_DRAW):
        rows = min(ROWS_PER_DRAW, n - start)
        scores = torch.rand(rows, size, generator=gen)
        out[start : start + rows] = scores.topk(k, dim=1).indices
    return out


def mqar_batch(
    n: int,
    seq_len: int,
    n_kv_pairs: int,
    vocab_size: int,
    gen: torch.Generator,
    *,
    power_a: float = 0.01,
    random_filler: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` MQAR sequences (see the module docstring).

    Args:
        n: Number of sequences.
        seq_len: Tokens per sequence L (even, ≥ 4·n_kv_pairs).
        n_kv_pairs: Key-value pairs per sequence P.
        vocab_size: V; keys from [1, V/2), values from [V/2, V), fillers from [0, V).
        gen: The random source (same seed, same sequences).
        power_a: Exponent a of the query-slot weights (g+1)^(a−1).
        random_filler: Fillers uniform over the vocabulary (else 0).

    Returns:
        inputs (n, L) and targets (n, L), long; targets are −100 except at the P query positions,
        where they hold the value bound to the key there.

    Raises:
        ValueError: sizes no sequence can satisfy (odd L, 4·P > L, too small a vocabulary).
    """
    p, half = n_kv_pairs, vocab_size // 2
    if seq_len % 2 or 4 * p > seq_len or p > half - 1 or p < 1:
        raise ValueError(
            f"no MQAR sequence of length {seq_len} with {p} pairs over a vocabulary of "
            f"{vocab_size}: need an even length >= 4·pairs and vocab_size >= 2·pairs + 2."
        )
    keys = _distinct(n, half - 1, p, gen) + 1
    values = _distinct(n, vocab_size - half, p, gen) + half
    context = 2 * p
    space = (seq_len - context) // 2
    slots = torch.multinomial(
        gap_weights(space, power_a).expand(n, space), p, replacement=False, generator=gen
    )  # draw order: the j-th draw is the j-th key's slot
    where = context + 2 * slots
    inputs = torch.zeros(n, seq_len, dtype=torch.long)
    inputs[:, 0:context:2] = keys
    inputs[:, 1:context:2] = values
    inputs.scatter_(1, where, keys)
    targets = torch.full((n, seq_len), IGNORE, dtype=torch.long)
    targets.scatter_(1, where, values)
    if random_filler:
        filler = torch.ones(n, seq_len, dtype=torch.bool)
        filler[:, :context] = False
        filler.scatter_(1, where, False)
        noise = torch.randint(0, vocab_size, (n, seq_len), generator=gen)
        inputs = torch.where(filler, noise, inputs)
    return inputs, targets


def sequence_accuracy(predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """(n,) float: per sequence, the fraction of its scored positions (target ≠ −100) where the
    prediction is the target. Zoology averages these over sequences (``compute_metrics``)."""
    scored = targets != IGNORE
    hits = ((predictions == targets) & scored).sum(dim=1)
    return hits.double() / scored.sum(dim=1).clamp(min=1)
