"""Forgetting MQAR data with the semantics of Zoology's generator: keys reassigned, the latest
value asked for.

Zoology (``HazyResearch/zoology``, ``zoology/data/forgetting_mqar.py``, the data of
``zoology/experiments/mqar_example_configs/forgetting_configs.py``) extends MQAR
(`attnbench.tasks.recall.mqar_data`) as follows, and so does `forgetting_batch` (our own
vectorised torch code, seeded by a ``torch.Generator``). A sequence of length L has P keys and
U ≤ P reassignments:

* P distinct keys of [1, V/2) and P distinct values of [V/2, V), the first 2P positions holding
  k₁ v₁ … k_P v_P, as in MQAR;
* then 2U positions of reassignments k v′: U distinct keys of the P (in random order), each
  with a new value drawn uniformly from the values other than the one it replaces (not
  necessarily distinct from the other keys' values, as in Zoology);
* then (L − 2(P+U))/2 query slots with MQAR's power-law weights (g+1)^(a−1), P of them drawn by
  successive sampling, the j-th for k_j: every key is queried once, reassigned or not;
* the target at a query is the key's *latest* value (v′ if reassigned, else v); fillers as MQAR's
  (uniform over the vocabulary with ``random_filler``, Zoology's ``random_non_queries``, else 0).

So 4P + 2U ≤ L. A model that recalls every binding but cannot tell which of a key's two values
came last answers a reassigned key right half the time: ``order_blind_accuracy`` = 1 − U/(2P).
Linear attention and softmax attention without positions are such models (both bindings enter
their readout with equal weight); the delta rule's write replaces the value a key held.

Deviation (from Zoology's code, not its intent): Zoology draws the j-th new value different from
the j-th key's original value, while it reassigns a randomly chosen key, so about 1 in V/2 of its
reassignments restate the value they replace (a query whose two bindings agree); here each new
value differs from the value of the key it reassigns, as Zoology's docstring states. With U = 0
the draws, and so the sequences, are exactly `mqar_batch`'s.
"""

from __future__ import annotations

import torch

from attnbench.tasks.recall.mqar_data import IGNORE, _distinct, gap_weights


def forgetting_batch(
    n: int,
    seq_len: int,
    n_kv_pairs: int,
    n_updates: int,
    vocab_size: int,
    gen: torch.Generator,
    *,
    power_a: float = 0.01,
    random_filler: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` forgetting-MQAR sequences (see the module docstring).

    Args:
        n: Number of sequences.
        seq_len: Tokens per sequence L (even, ≥ 4·n_kv_pairs + 2·n_updates).
        n_kv_pairs: Distinct keys per sequence P (each queried once).
        n_updates: Keys reassigned a new value U (0 ≤ U ≤ P).
        vocab_size: V; keys from [1, V/2), values from [V/2, V), fillers from [0, V).
        gen: The random source (same seed, same sequences).
        power_a: Exponent a of the query-slot weights (g+1)^(a−1).
        random_filler: Fillers uniform over the vocabulary (else 0).

    Returns:
        inputs (n, L) and targets (n, L), long; targets are −100 except at the P query positions,
        where they hold the latest value bound to the key there.

    Raises:
        ValueError: sizes no sequence can satisfy.
    """
    p, u, half = n_kv_pairs, n_updates, vocab_size // 2
    n_values = vocab_size - half
    if seq_len % 2 or 4 * p + 2 * u > seq_len or p > half - 1 or p < 1 or not 0 <= u <= p:
        raise ValueError(
            f"no forgetting-MQAR sequence of length {seq_len} with {p} pairs and {u} "
            f"reassignments over a vocabulary of {vocab_size}: need 0 <= reassignments <= pairs, "
            "an even length >= 4·pairs + 2·reassignments and vocab_size >= 2·pairs + 2."
        )
    keys = _distinct(n, half - 1, p, gen) + 1
    values = _distinct(n, n_values, p, gen) + half
    latest = values.clone()
    context = 2 * (p + u)
    inputs = torch.zeros(n, seq_len, dtype=torch.long)
    inputs[:, 0 : 2 * p : 2] = keys
    inputs[:, 1 : 2 * p : 2] = values
    if u:
        which = _distinct(n, p, u, gen)  # the reassigned keys' indices, in random order
        old = values.gather(1, which)
        # uniform over the n_values − 1 values other than the old one
        new = torch.randint(0, n_values - 1, (n, u), generator=gen) + half
        new = new + (new >= old).long()
        latest.scatter_(1, which, new)
        inputs[:, 2 * p : context : 2] = keys.gather(1, which)
        inputs[:, 2 * p + 1 : context : 2] = new
    space = (seq_len - context) // 2
    slots = torch.multinomial(
        gap_weights(space, power_a).expand(n, space), p, replacement=False, generator=gen
    )  # draw order: the j-th draw is the j-th key's slot
    where = context + 2 * slots
    inputs.scatter_(1, where, keys)
    targets = torch.full((n, seq_len), IGNORE, dtype=torch.long)
    targets.scatter_(1, where, latest)
    if random_filler:
        filler = torch.ones(n, seq_len, dtype=torch.bool)
        filler[:, :context] = False
        filler.scatter_(1, where, False)
        noise = torch.randint(0, vocab_size, (n, seq_len), generator=gen)
        inputs = torch.where(filler, noise, inputs)
    return inputs, targets


def reassigned_queries(
    inputs: torch.Tensor, targets: torch.Tensor, n_kv_pairs: int, n_updates: int
) -> torch.Tensor:
    """(n, L) bool: the query positions whose key was reassigned (it is bound twice in the
    first 2(P+U) positions, where no filler lies)."""
    bound = inputs[:, 0 : 2 * (n_kv_pairs + n_updates) : 2]
    times = (inputs.unsqueeze(-1) == bound.unsqueeze(1)).sum(-1)
    return (targets != IGNORE) & (times == 2)


def order_blind_accuracy(n_kv_pairs: int, n_updates: int) -> float:
    """Accuracy of perfect recall that cannot tell which of a key's two values came last (it
    answers either with probability 1/2): 1 − U/(2P)."""
    return 1 - n_updates / (2 * n_kv_pairs)
