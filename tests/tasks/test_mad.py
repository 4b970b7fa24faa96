"""MAD's fuzzy recall, noisy recall, memorization and compression against slow references.

Each generator is checked by a plain-Python reader that parses every sequence token by token (what
is a key, a value, noise, a pad) and works out from the rules alone (docs/mad.md) which tokens are
scored and what they must be; the vectorised generator's test targets must equal the reader's.
Distributions are checked against their expectation with a tolerance of 5 standard deviations of
the sample (named at each check), so a correct generator fails about once in 10⁶ runs.
"""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch

from attnbench.harness.discovery import load_plugins
from attnbench.task import JobContext, build_task
from attnbench.tasks.mad.autoencoder import AutoEncoder, sinusoidal_positions
from attnbench.tasks.mad.data import (
    IGNORE,
    compression_batch,
    fuzzy_recall_batch,
    memorization_batch,
    memorization_map,
    noisy_recall_batch,
)
from attnbench.toolkit.model import ModelConfig

load_plugins()


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _whole(inputs: torch.Tensor, train_targets: torch.Tensor) -> list[list[int]]:
    """The sequences before MAD's shift: the first input token, then the next-token targets."""
    assert torch.equal(inputs[:, 1:], train_targets[:, :-1])  # training is next-token prediction
    return torch.cat([inputs[:, :1], train_targets], dim=1).tolist()


def _within(observed: float, expected: float, sd: float) -> None:
    assert abs(observed - expected) <= 5 * sd, (observed, expected, sd)


# noisy recall ------------------------------------------------------------------------------------


def noisy_reference(seq: list[int], n_keys: int, n_values: int) -> tuple[list[int], int]:
    """The scored tokens of one whole noisy recall sequence (−100 elsewhere), read slot by slot:
    a noise slot is two noise tokens; a pair's value is scored iff its key came before, and then
    it must be that key's value; the last slot must repeat a key with its value. Also returns the
    number of noise slots."""
    bound: dict[int, int] = {}
    labels, noise = [], 0
    slots = [seq[i : i + 2] for i in range(0, len(seq), 2)]
    for index, (a, b) in enumerate(slots):
        last = index == len(slots) - 1
        if a >= n_keys + n_values:  # noise
            assert b >= n_keys + n_values and not last
            labels += [IGNORE, IGNORE]
            noise += 1
            continue
        assert a < n_keys <= b < n_keys + n_values  # a key, then a value
        if a in bound:
            assert b == bound[a]
        assert a in bound or not last  # the probe repeats a key the sequence presented
        labels += [IGNORE, b if a in bound else IGNORE]
        bound[a] = b
    return labels, noise


def test_noisy_recall_scores_exactly_the_values_of_repeated_keys():
    n, length, vocab, noise_vocab, frac = 2000, 32, 24, 8, 0.3
    x, y, test = noisy_recall_batch(n, length, vocab, noise_vocab, frac, _gen())
    assert x.shape == y.shape == test.shape == (n, length - 1)
    total_noise = 0
    for seq, scored in zip(_whole(x, y), test.tolist(), strict=True):
        labels, noise = noisy_reference(seq, 8, 8)
        assert scored == labels[1:]
        assert noise <= length // 2 - 2  # one slot is never noise, nor the probe
        total_noise += noise
    # each of the 15 slots before the probe is noise with probability 0.3, but the one kept slot
    slots = n * (length // 2 - 1)
    p = frac * (length // 2 - 2) / (length // 2 - 1)
    _within(total_noise / slots, p, math.sqrt(frac * (1 - frac) / slots))


def test_noisy_recall_draws_keys_uniformly_and_the_probe_among_the_distinct_keys():
    n, length = 4000, 16
    x, y, _ = noisy_recall_batch(n, length, 16, 0, 0.0, _gen(1))
    whole = torch.tensor(_whole(x, y))
    keys = whole[:, 0:-2:2].flatten()  # keys of the slots before the probe: uniform over 8
    counts = torch.bincount(keys, minlength=8).double() / len(keys)
    _within(float(counts.max()), 1 / 8, math.sqrt(1 / 8 * 7 / 8 / len(keys)))
    _within(float(counts.min()), 1 / 8, math.sqrt(1 / 8 * 7 / 8 / len(keys)))
    # the probe is uniform over the distinct keys presented (not over their occurrences): it is
    # the first slot's key with probability 1/distinct in each sequence
    first = whole[:, 0] == whole[:, -2]
    p = torch.tensor([1 / len(set(row[0:-2:2].tolist())) for row in whole], dtype=torch.float64)
    _within(float(first.double().sum()), float(p.sum()), float((p * (1 - p)).sum().sqrt()))


# fuzzy recall ------------------------------------------------------------------------------------


def fuzzy_reference(
    seq: list[int], n_keys: int, pad: int, k_motif: int, v_motif: int, training: bool
) -> list[int]:
    """The scored tokens of one whole fuzzy recall sequence, read as pads then alternating runs
    of key tokens and of value tokens: a value is scored iff its key came before (then it must be
    the same value); the last pair is the probe, always scored."""
    body = seq[next(i for i, t in enumerate(seq) if t != pad) :]
    assert pad not in body and len(seq) - len(body) >= 1
    runs: list[list[int]] = []
    for t in body:
        kind = t < n_keys
        if runs and (runs[-1][0] < n_keys) == kind:
            runs[-1].append(t)
        else:
            runs.append([t])
    assert len(runs) % 2 == 0 and runs[0][0] < n_keys  # key, value, key, value, …
    bound: dict[tuple, tuple] = {}
    labels = [IGNORE] * (len(seq) - len(body))
    for i in range(0, len(runs), 2):
        key, value = tuple(runs[i]), tuple(runs[i + 1])
        assert len(set(key)) == len(key) and len(set(value)) == len(value)  # motifs: distinct
        assert 1 <= len(value) <= v_motif
        assert (1 <= len(key) <= k_motif) if training else len(key) == k_motif
        if key in bound:
            assert value == bound[key]
        probe = i == len(runs) - 2
        labels += [IGNORE] * len(key) + (
            list(value) if key in bound or probe else [IGNORE] * len(value)
        )
        bound[key] = value
    return labels


@pytest.mark.parametrize("training", [True, False])
def test_fuzzy_recall_scores_exactly_the_values_of_repeated_keys(training):
    n, length, vocab = 1000, 48, 15  # keys 0-6, values 7-13, pad 14
    x, y, test = fuzzy_recall_batch(n, length, vocab, 3, 3, training, _gen(2))
    assert x.shape == y.shape == test.shape == (n, length)
    probe_seen = 0
    for seq, scored in zip(_whole(x, y), test.tolist(), strict=True):
        assert len(seq) == length + 1
        assert scored == fuzzy_reference(seq, 7, 14, 3, 3, training)[1:]
        probe_seen += sum(t != IGNORE for t in scored) > 0
    assert probe_seen == n


def test_fuzzy_recall_motif_lengths_are_uniform():
    x, y, _ = fuzzy_recall_batch(1000, 48, 15, 3, 3, True, _gen(3))
    lengths: Counter = Counter()
    for seq in _whole(x, y):
        run = 0
        for t, nxt in zip(seq, [*seq[1:], None], strict=True):
            if t < 7:
                run += 1
                if nxt is None or nxt >= 7:
                    lengths[run] += 1
                    run = 0
    total = sum(lengths.values())
    for size in (1, 2, 3):  # each key length 1/3 (the probe's too)
        _within(lengths[size] / total, 1 / 3, math.sqrt(2 / 9 / total))


def test_fuzzy_recall_splits_draw_from_one_rng_per_batch():
    a = fuzzy_recall_batch(20, 48, 15, 3, 3, True, _gen(4))
    b = fuzzy_recall_batch(20, 48, 15, 3, 3, True, _gen(4))
    c = fuzzy_recall_batch(20, 48, 15, 3, 3, True, _gen(5))
    assert all(torch.equal(u, v) for u, v in zip(a, b, strict=True))
    assert not torch.equal(a[0], c[0])


# memorization ------------------------------------------------------------------------------------


def test_memorization_map_is_one_fixed_injection_of_keys_into_values():
    table = memorization_map(64, _gen(0)).tolist()  # K = 63: keys 0-30, values 31-62
    assert len(table) == 31 and len(set(table)) == 31 and all(31 <= v < 63 for v in table)
    assert table == memorization_map(64, _gen(0)).tolist()
    assert table != memorization_map(64, _gen(1)).tolist()


def test_memorization_targets_are_the_map_at_every_insert_token():
    table = memorization_map(64, _gen(0))
    reference = {k: v for k, v in enumerate(table.tolist())}
    x, y, test = memorization_batch(500, 16, 64, table, _gen(7))
    assert torch.equal(y, test)
    for row, target in zip(x.tolist(), y.tolist(), strict=True):
        for i in range(0, 16, 2):
            assert row[i] in reference and row[i + 1] == 63  # key, insert token
            assert target[i] == IGNORE and target[i + 1] == reference[row[i]]
    counts = torch.bincount(x[:, 0::2].flatten(), minlength=31).double() / (500 * 8)
    sd = math.sqrt(1 / 31 * 30 / 31 / (500 * 8))
    _within(float(counts.max()), 1 / 31, sd)
    _within(float(counts.min()), 1 / 31, sd)


def test_memorization_uses_one_map_for_every_split():
    task = build_task("memorization", dict(vocab_size=64, seq_len=8))
    train = task.batch(50, task.data_generator(1), training=True)
    test = task.batch(50, task.data_generator(100), training=False)
    pairs = {
        (k, v)
        for x, y, _ in (train, test)
        for k, v in zip(x[:, 0::2].flatten().tolist(), y[:, 1::2].flatten().tolist(), strict=True)
    }
    assert len({k for k, _ in pairs}) == len(pairs)  # one value per key across the splits


# compression -------------------------------------------------------------------------------------


def test_compression_targets_are_the_sequence_ending_in_the_compression_token():
    x, y, test = compression_batch(3000, 12, 10, _gen(8))
    assert torch.equal(x, y) and torch.equal(y, test)
    assert bool((x[:, -1] == 9).all()) and bool((x[:, :-1] < 9).all())
    counts = torch.bincount(x[:, :-1].flatten(), minlength=9).double() / x[:, :-1].numel()
    sd = math.sqrt(1 / 9 * 8 / 9 / x[:, :-1].numel())
    _within(float(counts.max()), 1 / 9, sd)
    _within(float(counts.min()), 1 / 9, sd)


def test_sinusoidal_positions_written_out():
    table = sinusoidal_positions(5, 6)  # ω = 1, 10000^(-1/2), 10000^(-1)
    for t in range(5):
        for i, w in enumerate([1.0, 0.01, 1e-4]):
            assert table[t, i] == pytest.approx(math.sin(t * w), abs=1e-6)
            assert table[t, 3 + i] == pytest.approx(math.cos(t * w), abs=1e-6)


def test_the_autoencoder_decodes_from_the_last_position_alone():
    torch.manual_seed(0)
    cfg = ModelConfig(d_model=16, n_layers=1, n_heads=2, max_len=10, vocab_size=8, output_dim=8)
    model = AutoEncoder(cfg, "softmax", {}).eval()
    x = torch.randint(0, 8, (4, 10))
    before = model(x)
    # scramble every encoder state but the last: the output must not change
    hook = model.encoder.norm.register_forward_hook(
        lambda _m, _i, out: torch.cat([torch.randn_like(out[:, :-1]), out[:, -1:]], dim=1)
    )
    assert torch.allclose(model(x), before)
    hook.remove()
    assert before.shape == (4, 10, 8)
    assert not torch.allclose(before[:, 0], before[:, 1])  # positions decode differently


# the tasks ---------------------------------------------------------------------------------------


def _run(task: str, params: dict, variant: str = "softmax", seed: int = 0) -> dict[str, float]:
    ctx = JobContext(variant, {}, torch.device("cpu"), torch.float32, seed, 1)
    return {p.metric: p.value for p in build_task(task, params).measure(ctx).points}


def test_softmax_memorizes_the_map():
    points = _run(
        "memorization",
        dict(
            vocab_size=64,
            seq_len=16,
            train_size=64,
            steps=200,
            batch_size=16,
            d_model=32,
            n_heads=2,
            lr=3e-3,
            test_size=100,
            val_size=100,
        ),
    )
    # 800 scored tokens: a binomial sd of at most 0.018; chance is 1/32, softmax reached 0.97
    assert points["chance_accuracy"] == pytest.approx(1 / 32)
    assert points["accuracy"] > 0.8 and points["val_accuracy"] > 0.8


def test_softmax_recalls_noisy_pairs_above_chance():
    points = _run(
        "noisy_recall",
        dict(
            seq_len=32,
            vocab_size=24,
            noise_vocab_size=8,
            train_size=500,
            steps=200,
            batch_size=16,
            d_model=32,
            n_heads=2,
            lr=3e-3,
            test_size=200,
            val_size=100,
        ),
    )
    # ~1500 scored tokens (7-8 a sequence): sd <= 0.013 (correlated within a sequence: at most
    # √8 times that, 0.036); chance 1/8, softmax reached 0.36
    assert points["chance_accuracy"] == pytest.approx(1 / 8)
    assert points["accuracy"] > 1 / 8 + 0.1


def test_every_seed_trains_and_is_scored_on_the_same_data():
    task = build_task("compression", dict(seq_len=8))
    a = task.batch(10, task.data_generator(1), training=True)[0]
    assert torch.equal(
        a,
        build_task("compression", dict(seq_len=8)).batch(10, task.data_generator(1), training=True)[
            0
        ],
    )
    assert not torch.equal(a, task.batch(10, task.data_generator(100), training=False)[0])


@pytest.mark.parametrize(
    "task, params, message",
    [
        ("fuzzy_recall", dict(vocab_size=6), "too few tokens"),
        ("fuzzy_recall", dict(seq_len=12), "no room"),
        ("noisy_recall", dict(seq_len=31), "even"),
        ("noisy_recall", dict(frac_noise=1.0), "frac_noise"),
        ("noisy_recall", dict(noise_vocab_size=0), "frac_noise"),
        ("memorization", dict(seq_len=7), "even"),
        ("compression", dict(vocab_size=2), "vocab_size"),
        ("compression", dict(weight_decay=-0.1), "weight_decay"),
        ("compression", dict(n_heads=3), "n_heads"),
    ],
)
def test_impossible_settings_are_refused_with_one_sentence(task, params, message):
    with pytest.raises(ValueError, match=message):
        build_task(task, params)


@pytest.mark.parametrize(
    "params, wrong, valid",
    [
        (dict(seq_len=1), "task.seq_len=1", "vocab_size"),
        (dict(vocab_size=2), "task.vocab_size=2", "seq_len"),
    ],
)
def test_compression_refusal_names_only_the_value_that_is_wrong(params, wrong, valid):
    """Each value is refused alone, with its own bound and reason: a vocabulary of 2 is not
    told about the valid ``task.seq_len=32`` beside it, nor a length of 1 about the vocabulary."""
    with pytest.raises(ValueError) as refusal:
        build_task("compression", params)
    message = str(refusal.value)
    assert message.startswith(wrong) and "must be >= " in message and valid not in message


def test_the_four_tasks_are_in_the_mad_battery_with_recall_and_copy():
    from attnbench.task import TASKS

    members = {n for n in TASKS.names() if TASKS.get(n).describe().battery == "mad"}
    assert members == {
        "recall",
        "copy",
        "fuzzy_recall",
        "noisy_recall",
        "memorization",
        "compression",
    }


def test_a_fuzzy_recall_set_too_large_for_memory_fails_at_once():
    """10¹² sequences of 129 tokens are ~1 PB as int64, beyond any address space whatever the
    kernel's overcommit policy: the batch's tensor is allocated before any sequence is drawn, so
    the job ends in an out-of-memory error (an `oom` record, the harness's reading of "can't
    allocate memory") instead of a list that grows for hours."""
    with pytest.raises(RuntimeError, match="can't allocate memory"):
        fuzzy_recall_batch(10**12, 128, 16, 3, 3, True, _gen(0))
