"""Forgetting MQAR: the generator against a slow obvious reading of each sequence, the ladder, the
refusals, and one cheap job whose split metrics add up to its headline."""

from __future__ import annotations

import pytest
import torch

from attnbench.task import JobContext, build_task
from attnbench.tasks.recall.forgetting_data import (
    forgetting_batch,
    order_blind_accuracy,
    reassigned_queries,
)
from attnbench.tasks.recall.mqar_data import IGNORE, mqar_batch


def _batch(n, seq_len, pairs, updates, vocab, seed=0, **kw):
    return forgetting_batch(
        n, seq_len, pairs, updates, vocab, torch.Generator().manual_seed(seed), **kw
    )


def _read(row_x: list[int], pairs: int, updates: int) -> tuple[dict[int, int], list[int]]:
    """The latest binding of each key, walking the context token by token, and the keys bound
    more than once."""
    latest: dict[int, int] = {}
    seen: dict[int, int] = {}
    for i in range(0, 2 * (pairs + updates), 2):
        key, value = row_x[i], row_x[i + 1]
        latest[key] = value
        seen[key] = seen.get(key, 0) + 1
    return latest, [k for k, times in seen.items() if times > 1]


@pytest.mark.parametrize("filler", [True, False])
def test_each_label_is_the_latest_value_of_the_queried_key(filler):
    pairs, updates, length = 6, 3, 48
    x, y = _batch(300, length, pairs, updates, 40, random_filler=filler)
    for row_x, row_y in zip(x.tolist(), y.tolist(), strict=True):
        latest, _ = _read(row_x, pairs, updates)
        scored = [i for i, t in enumerate(row_y) if t != IGNORE]
        context = 2 * (pairs + updates)
        assert all(i >= context and (i - context) % 2 == 0 for i in scored)  # query slots
        assert sorted(row_x[i] for i in scored) == sorted(latest)  # each key queried once
        assert all(row_y[i] == latest[row_x[i]] for i in scored)  # never a key not assigned


def test_exactly_n_updates_distinct_keys_are_reassigned_to_another_value():
    # 6 values: a new value drawn from all of them would restate the old one 1 time in 6, so
    # 600 reassignments would show ~100 restatements
    pairs, updates, length = 4, 3, 32
    x, y = _batch(200, length, pairs, updates, 12)
    for row_x in x.tolist():
        first = dict(zip(row_x[0 : 2 * pairs : 2], row_x[1 : 2 * pairs : 2], strict=True))
        assert len(first) == pairs  # the first bindings have distinct keys
        latest, twice = _read(row_x, pairs, updates)
        assert len(twice) == updates and set(twice) <= set(first)
        assert all(latest[k] != first[k] for k in twice)
        assert all(6 <= v < 12 for v in latest.values())
    mask = reassigned_queries(x, y, pairs, updates)
    assert (mask.sum(1) == updates).all()


def test_the_reassigned_mask_matches_the_slow_reading():
    pairs, updates = 5, 2
    x, y = _batch(200, 40, pairs, updates, 64)
    mask = reassigned_queries(x, y, pairs, updates).tolist()
    for row_x, row_y, row_m in zip(x.tolist(), y.tolist(), mask, strict=True):
        _, twice = _read(row_x, pairs, updates)
        expected = [t != IGNORE and row_x[i] in twice for i, t in enumerate(row_y)]
        assert row_m == expected


def test_a_seed_draws_the_same_sequences_and_another_seed_others():
    a, b, c = (_batch(50, 64, 8, 4, 128, seed=s) for s in (7, 7, 8))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], c[0])


def test_without_reassignments_the_sequences_are_mqars():
    a = _batch(50, 64, 8, 0, 128, seed=3)
    b = mqar_batch(50, 64, 8, 128, torch.Generator().manual_seed(3))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_impossible_sequences_are_refused():
    with pytest.raises(ValueError, match="4·pairs \\+ 2·reassignments"):
        _batch(2, 38, 8, 4, 128)
    with pytest.raises(ValueError, match="reassignments <= pairs"):
        _batch(2, 64, 4, 5, 128)


def test_the_ladder_makes_room_for_the_reassignments():
    task = build_task("forgetting_recall", dict(seq_len=64, n_kv_pairs=8, min_kv_pairs=4))
    assert task.training_configs() == [(64, 4), (64, 8)]
    assert task.test_configs() == [(64, 4), (64, 8), (72, 16)]  # 4·16 + 2·4 = 72
    assert order_blind_accuracy(8, 4) == 0.75


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (dict(seq_len=64, n_kv_pairs=16), "need seq_len >= 4·n_kv_pairs \\+ 2·n_updates = 72"),
        (dict(n_updates=5), "exceeds the 4 pairs of the smallest"),
        (dict(n_updates=-1), "must be >= 0"),
    ],
)
def test_impossible_settings_are_refused(params, message):
    with pytest.raises(ValueError, match=message):
        build_task("forgetting_recall", params)


@pytest.mark.parametrize(
    ("params", "hints"),
    [
        (dict(n_updates=20), 1),  # only n_updates is wrong: 64 tokens hold any allowed value
        (dict(n_updates=20, seq_len=72), 1),
        (dict(n_updates=6, n_kv_pairs=16, min_kv_pairs=8), 1),  # only the room: seq_len
        (dict(n_updates=9, n_kv_pairs=16, min_kv_pairs=8), 2),  # both: one hint each
        (dict(n_kv_pairs=32), 1),  # recall's own room (128) would be asked for, then 136
    ],
)
def test_a_refusal_s_advice_followed_is_accepted(params, hints):
    """Each refusal names one value to use; where one value is wrong, following the first
    refusal is enough (0.3's asked for n_updates=20 a seq_len of 72, which the pairs bound then
    refused: the user was sent to change a value that was never the problem), and no value is
    asked for twice."""
    import re

    refusals = []
    while len(refusals) <= hints:
        try:
            build_task("forgetting_recall", params)
            break
        except ValueError as error:
            text = str(error)
        refusals.append(text)
        if (need := re.search(r"need seq_len >= .* = (\d+)", text)) is not None:
            params = {**params, "seq_len": int(need.group(1))}
        elif (use := re.search(r"use n_updates <= (\d+)", text)) is not None:
            params = {**params, "n_updates": int(use.group(1))}
        else:
            raise AssertionError(f"a refusal without a value to use: {text}")
    assert len(refusals) == hints, refusals


def test_a_job_splits_its_headline_into_reassigned_and_kept_keys():
    """One configuration (8 pairs, 4 reassigned): every sequence has 4 queries of each kind, so
    the headline is exactly the mean of the two split accuracies. About 1 s of CPU (profiled;
    the first optimiser of a process adds a one-time import of torch's compiler, ~2 s)."""
    params = dict(
        seq_len=48,
        n_kv_pairs=8,
        min_kv_pairs=8,
        test_doublings=0,
        vocab_size=64,
        train_size=64,
        test_size=50,
        val_size=50,
        steps=2,
        batch_size=32,
        d_model=16,
    )
    ctx = JobContext("softmax", {}, torch.device("cpu"), torch.float32, 0, 1)
    points = {
        (p.metric, p.x_value): p.value
        for p in build_task("forgetting_recall", params).measure(ctx).points
    }
    reassigned, kept = points[("accuracy_reassigned", None)], points[("accuracy_kept", None)]
    assert points[("accuracy", None)] == pytest.approx((reassigned + kept) / 2, abs=1e-12)
    assert points[("accuracy_reassigned_by_pairs", 8)] == reassigned
    assert points[("order_blind_by_pairs", 8)] == 0.75
    assert points[("chance_accuracy", None)] == 1 / 32
