"""The sequences of MAD's four tasks that attnbench had not: our own code, following the semantics
of mad-lab's generators (Poli et al. 2024, ``athms/mad-lab``, ``mad/data/instances.py``) in the
setting MAD's benchmark runs them (``multi_query=True``, no noise outside noisy recall).

Every generator returns ``(inputs, train_targets, test_targets)``, (n, N) long tensors. As in MAD,
the recall tasks train as language models (``train_targets`` is the next token everywhere) and are
scored only where the next token is a value the context has already bound to its key
(``test_targets``: −100 elsewhere); memorization and compression train and score the same
positions. docs/mad.md lists every difference from mad-lab's code.

* `noisy_recall_batch`: the sequence is seq_len/2 two-token slots. Keys come from the first half of
  the non-noise vocabulary, values from the second half, noise tokens from the top
  ``noise_vocab_size`` tokens. Each slot but the last is, with probability ``frac_noise``, two noise
  tokens (one slot, drawn uniformly, is never noise), else a key drawn uniformly with its value:
  the value the sequence bound to that key before, or a fresh uniform value (two keys may share a
  value). The last slot repeats a key the sequence presented (uniform over the distinct keys) with
  its value. A value is scored where its key appeared before in the sequence. At
  ``frac_noise=0`` this is MAD's in-context recall.
* `fuzzy_recall_batch`: keys and values are *motifs*, runs of 1 to ``k_motif``/``v_motif``
  distinct tokens (uniform length, then uniform over the ordered motifs of that length; at test
  keys are always ``k_motif`` long). A probe pair is drawn first and inserted at a uniform
  position; pairs are appended while the sequence is shorter than seq_len − probe − (k_motif +
  v_motif), then the probe pair closes it, and pad tokens fill the front up to seq_len + 1.
* `memorization_batch`: seq_len/2 slots (key, insert token); the target at the insert token is the
  key's value under one fixed map (keys [0, K/2), values [K/2, K), K = vocab_size − 1, a random
  bijection onto a random subset of the values), the same for every sequence and every split.
* `compression_batch`: seq_len − 1 uniform tokens and the compression token; the target is the
  whole sequence (the model reconstructs it from the last position's state alone).

Inputs and targets of the recall tasks are MAD's ``inputs[:-1]`` and ``targets[1:]``: a sequence of
seq_len + 1 tokens (fuzzy) or seq_len tokens (noisy) shifted by one.
"""

from __future__ import annotations

import random

import torch

IGNORE = -100  # target of unscored positions (PyTorch's cross-entropy ignore_index)


def noisy_recall_vocabulary(vocab_size: int, noise_vocab_size: int) -> tuple[int, int]:
    """(keys, values): the number of key tokens [0, keys) and value tokens [keys, keys + values);
    the noise tokens are [keys + values, vocab_size)."""
    clean = vocab_size - noise_vocab_size
    return clean // 2, clean - clean // 2


def noisy_recall_batch(
    n: int,
    seq_len: int,
    vocab_size: int,
    noise_vocab_size: int,
    frac_noise: float,
    gen: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``n`` noisy in-context recall sequences (module docstring), inputs of seq_len − 1 tokens."""
    n_keys, n_values = noisy_recall_vocabulary(vocab_size, noise_vocab_size)
    slots = seq_len // 2
    rows = torch.arange(n)
    bound = torch.full((n, n_keys), -1, dtype=torch.long)  # value bound to each key, −1: none
    tokens = torch.empty(n, 2 * slots, dtype=torch.long)
    scored = torch.zeros(n, 2 * slots, dtype=torch.bool)
    kept = torch.randint(0, slots - 1, (n,), generator=gen)  # the slot that is never noise
    for s in range(slots - 1):
        noise = torch.rand(n, generator=gen) < frac_noise
        noise &= kept != s
        key = torch.randint(0, n_keys, (n,), generator=gen)
        fresh = torch.randint(0, n_values, (n,), generator=gen) + n_keys
        junk = (
            torch.randint(n_keys + n_values, vocab_size, (n, 2), generator=gen)
            if vocab_size > n_keys + n_values
            else torch.zeros(n, 2, dtype=torch.long)  # no noise tokens: never placed
        )
        before = bound[rows, key]
        value = torch.where(before >= 0, before, fresh)
        tokens[:, 2 * s] = torch.where(noise, junk[:, 0], key)
        tokens[:, 2 * s + 1] = torch.where(noise, junk[:, 1], value)
        scored[:, 2 * s + 1] = ~noise & (before >= 0)
        bound[rows, key] = torch.where(noise, before, value)
    presented = (bound >= 0).double()
    key = torch.multinomial(presented, 1, generator=gen).squeeze(1)
    tokens[:, -2], tokens[:, -1] = key, bound[rows, key]
    scored[:, -1] = True
    test = torch.where(scored, tokens, IGNORE)
    return tokens[:, :-1], tokens[:, 1:], test[:, 1:]


def fuzzy_recall_vocabulary(vocab_size: int) -> tuple[int, int, int]:
    """(keys, values, pad): key tokens [0, keys), value tokens [keys, keys + values), the pad."""
    clean = vocab_size - 1
    return clean // 2, clean - clean // 2, vocab_size - 1


def fuzzy_recall_sequence(
    seq_len: int, vocab_size: int, k_motif: int, v_motif: int, training: bool, rng: random.Random
) -> tuple[list[int], list[int]]:
    """One fuzzy recall sequence of seq_len + 1 tokens and its scored tokens (−100 elsewhere)."""
    n_keys, n_values, pad = fuzzy_recall_vocabulary(vocab_size)
    key_tokens, value_tokens = range(n_keys), range(n_keys, n_keys + n_values)

    def key_size() -> int:
        return rng.randint(1, k_motif) if training else k_motif

    def motif(tokens: range, size: int) -> tuple[int, ...]:
        return tuple(rng.sample(tokens, size))  # uniform over the ordered motifs of that size

    probe_key = motif(key_tokens, key_size())
    probe_value = motif(value_tokens, rng.randint(1, v_motif))
    probe = len(probe_key) + len(probe_value)
    probe_at = rng.randrange(seq_len - 2 * probe)
    probe_in = False
    bound: dict[tuple[int, ...], tuple[int, ...]] = {}
    tokens: list[int] = []
    scored: list[int] = []
    while len(tokens) < seq_len - probe - (k_motif + v_motif):
        k_size, v_size = key_size(), rng.randint(1, v_motif)
        if len(tokens) >= probe_at and not probe_in:
            tokens += [*probe_key, *probe_value]
            scored += [IGNORE] * probe
            bound[probe_key] = probe_value
            probe_in = True
            continue
        key = motif(key_tokens, k_size)
        if key == probe_key:
            value, probe_in = probe_value, True
        else:
            value = bound.get(key) or motif(value_tokens, v_size)
        tokens += [*key, *value]
        scored += [IGNORE] * len(key) + (list(value) if key in bound else [IGNORE] * len(value))
        bound[key] = value
    tokens += [*probe_key, *probe_value]
    scored += [IGNORE] * len(probe_key) + list(probe_value)
    fill = seq_len + 1 - len(tokens)
    return [pad] * fill + tokens, [IGNORE] * fill + scored


def fuzzy_recall_batch(
    n: int,
    seq_len: int,
    vocab_size: int,
    k_motif: int,
    v_motif: int,
    training: bool,
    gen: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``n`` fuzzy recall sequences (module docstring), inputs of seq_len tokens; ``training``:
    keys of every motif size, else of ``k_motif`` tokens only (MAD's test split)."""
    rng = random.Random(int(torch.randint(0, 2**62, (1,), generator=gen)))
    # the batch's tensors first, filled row by row: a set too large for memory fails at once (an
    # `oom` record), where a growing list of Python sequences would take hours to reach the limit
    tokens = torch.empty(n, seq_len + 1, dtype=torch.long)
    test = torch.empty(n, seq_len + 1, dtype=torch.long)
    for row in range(n):
        drawn, scored = fuzzy_recall_sequence(seq_len, vocab_size, k_motif, v_motif, training, rng)
        tokens[row] = torch.tensor(drawn)
        test[row] = torch.tensor(scored)
    return tokens[:, :-1], tokens[:, 1:], test[:, 1:]


def memorization_map(vocab_size: int, gen: torch.Generator) -> torch.Tensor:
    """The fixed key → value map: entry k is key k's value. Keys are [0, K/2) and values
    [K/2, K) with K = vocab_size − 1 (the insert token is the last): a random permutation of the
    keys paired with one of the values, as MAD zips its shuffled keys and values."""
    clean = vocab_size - 1
    keys, values = clean // 2, clean - clean // 2
    order = torch.randperm(keys, generator=gen)
    chosen = torch.randperm(values, generator=gen)[:keys] + keys
    table = torch.empty(keys, dtype=torch.long)
    table[order] = chosen
    return table


def memorization_batch(
    n: int, seq_len: int, vocab_size: int, table: torch.Tensor, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``n`` memorization sequences of seq_len tokens: seq_len/2 uniform keys, each followed by
    the insert token, whose target is the key's value under ``table``."""
    keys = torch.randint(0, len(table), (n, seq_len // 2), generator=gen)
    inputs = torch.full((n, seq_len), vocab_size - 1, dtype=torch.long)
    inputs[:, 0::2] = keys
    targets = torch.full((n, seq_len), IGNORE, dtype=torch.long)
    targets[:, 1::2] = table[keys]
    return inputs, targets, targets


def compression_batch(
    n: int, seq_len: int, vocab_size: int, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``n`` compression sequences: seq_len − 1 uniform tokens of [0, vocab_size − 1), then the
    compression token vocab_size − 1; the targets are the inputs."""
    tokens = torch.randint(0, vocab_size - 1, (n, seq_len), generator=gen)
    tokens[:, -1] = vocab_size - 1
    return tokens, tokens.clone(), tokens.clone()
