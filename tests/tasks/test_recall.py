"""MQAR: the generator's statistics against Zoology's semantics, the protocol, the metrics.

Statistical checks draw from fixed seeds, so each either passes or fails deterministically; the
thresholds are chosen so that a correct generator passes for all but ~1e-3 of seeds and a
generator with the old flaws (uniform gaps, constant fillers, values with replacement) fails by
many orders of magnitude (each test also checks that the wrong law is rejected by the same data).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from attnbench import UnsupportedError, incremental_form, random_gates, why_no_incremental_form
from attnbench.harness.discovery import load_plugins
from attnbench.task import TEST_STREAM, VALIDATION_STREAM, JobContext, build_task
from attnbench.tasks.recall import RecallParams, evaluation_ladder, state_bytes, training_mixture
from attnbench.tasks.recall.mqar_data import (
    IGNORE,
    gap_probabilities,
    mqar_batch,
    sequence_accuracy,
)
from attnbench.toolkit.training import MS_PER_STEP
from attnbench.variant import VARIANTS


def _ctx(variant="softmax", seed=0):
    return JobContext(variant, {}, torch.device("cpu"), torch.float32, seed, 2)


def _batch(n, seq_len, pairs, vocab, seed=0, **kw):
    return mqar_batch(n, seq_len, pairs, vocab, torch.Generator().manual_seed(seed), **kw)


def _slots(x, y, pairs):
    """(n, pairs): the query slot of each key, in prefix order (slot g sits at 2·pairs + 2g)."""
    keys = x[:, 0 : 2 * pairs : 2]
    slots = torch.empty_like(keys)
    for j in range(pairs):
        hit = (x == keys[:, j : j + 1]) & (y != IGNORE)
        slots[:, j] = (hit.long().argmax(1) - 2 * pairs) // 2
    return slots


def test_keys_and_values_are_distinct_within_a_sequence_and_split_the_vocabulary():
    # 16 values out of 32: drawn with replacement, a row repeats one with probability
    # 1 − 32!/(16!·32^16) > 0.99, so 2000 rows would show thousands of repeats
    x, _ = _batch(2000, 64, 16, 64)
    keys, values = x[:, 0:32:2], x[:, 1:32:2]
    assert all(len(set(row)) == 16 for row in keys.tolist())
    assert all(len(set(row)) == 16 for row in values.tolist())
    assert keys.min() >= 1 and keys.max() < 32
    assert values.min() >= 32 and values.max() < 64
    # every key and value is used: uniform over its half (32 000 draws, ~1000 per token)
    for tokens, low, high in ((keys, 1, 32), (values, 32, 64)):
        counts = torch.bincount(tokens.flatten() - low, minlength=high - low).numpy()
        assert stats.chisquare(counts).pvalue > 1e-3


def test_labels_sit_exactly_at_the_queries_and_hold_the_bound_value():
    pairs, length = 6, 48
    x, y = _batch(500, length, pairs, 40)
    for row_x, row_y in zip(x.tolist(), y.tolist(), strict=True):
        binding = dict(zip(row_x[0 : 2 * pairs : 2], row_x[1 : 2 * pairs : 2], strict=True))
        scored = [i for i, t in enumerate(row_y) if t != IGNORE]
        assert len(scored) == pairs
        assert all(i >= 2 * pairs and (i - 2 * pairs) % 2 == 0 for i in scored)  # query slots
        assert sorted(row_x[i] for i in scored) == sorted(binding)  # each key queried once
        assert all(row_y[i] == binding[row_x[i]] for i in scored)


def test_first_query_gap_follows_the_power_law():
    """The first key's slot is the first successive draw: exactly ∝ (g+1)^(a−1)."""
    pairs, space, n = 4, 64, 20000
    x, y = _batch(n, 2 * pairs + 2 * space, pairs, 64)
    first = torch.bincount(_slots(x, y, pairs)[:, 0], minlength=space).numpy()
    law = gap_probabilities(space, 0.01).numpy()
    assert law[-1] * n > 5  # chi-square needs expected counts of at least ~5 per cell
    assert stats.chisquare(first, law * n).pvalue > 1e-3
    assert stats.chisquare(first).pvalue < 1e-12  # and it is far from uniform
    # power_a = 1 is uniform (Zoology's docstring)
    x, y = _batch(n, 2 * pairs + 2 * space, pairs, 64, power_a=1.0)
    uniform = torch.bincount(_slots(x, y, pairs)[:, 0], minlength=space).numpy()
    assert stats.chisquare(uniform).pvalue > 1e-3


def test_all_query_slots_match_successive_sampling_without_replacement():
    """Each key's slot, compared with numpy's choice(replace=False, p=…) (Zoology's sampler):
    a two-sample chi-square per draw position (first, middle and last key)."""
    pairs, space, n = 8, 24, 20000
    x, y = _batch(n, 2 * pairs + 2 * space, pairs, 64, seed=3)
    ours = _slots(x, y, pairs).numpy()
    rng = np.random.default_rng(0)
    law = gap_probabilities(space, 0.01).numpy()
    ref = np.stack([rng.choice(space, size=pairs, replace=False, p=law) for _ in range(n)])
    for j in (0, pairs // 2, pairs - 1):
        table = np.stack(
            [np.bincount(ours[:, j], minlength=space), np.bincount(ref[:, j], minlength=space)]
        )
        table = table[:, table.sum(0) > 0]
        assert stats.chi2_contingency(table).pvalue > 1e-3, j
    # later keys' slots spread further than the first's (the draw order matters)
    assert ours[:, -1].mean() > ours[:, 0].mean() + 1


def test_fillers_are_random_tokens_over_the_whole_vocabulary():
    pairs, length, vocab = 4, 64, 32
    x, y = _batch(4000, length, pairs, vocab)
    filler = torch.ones_like(x, dtype=torch.bool)
    filler[:, : 2 * pairs] = False
    filler &= y == IGNORE
    tokens = x[filler]
    counts = torch.bincount(tokens, minlength=vocab).numpy()  # ~7000 per token
    assert stats.chisquare(counts).pvalue > 1e-3  # uniform over all V tokens, keys included
    # Zoology's random_non_queries=False: token 0 everywhere else
    x0, y0 = _batch(100, length, pairs, vocab, random_filler=False)
    assert torch.all(x0[:, 2 * pairs :][y0[:, 2 * pairs :] == IGNORE] == 0)


def test_without_fillers_answers_never_lie_at_or_after_their_query():
    """Why causal=false is fair: after a query there are fillers only, drawn independently of
    the values (random) or constant (here), so looking ahead reveals nothing."""
    x, y = _batch(300, 48, 8, 40, random_filler=False)
    for row_x, row_y in zip(x.tolist(), y.tolist(), strict=True):
        for p, target in enumerate(row_y):
            if target != IGNORE:
                assert target not in row_x[p:]


def test_the_ladder_reproduces_zoologys_mixture():
    p = RecallParams(
        seq_len=256, n_kv_pairs=64, min_kv_pairs=4, tokens_per_pair=16, test_doublings=2
    )
    assert training_mixture(p) == [(64, 4), (128, 8), (256, 16), (256, 32), (256, 64)]
    assert evaluation_ladder(p) == [
        (64, 4),
        (64, 8),
        (64, 16),
        (128, 32),
        (256, 64),
        (512, 128),
        (1024, 256),
    ]


def test_a_floor_above_the_pairs_trains_on_one_size():
    p = RecallParams(seq_len=24, n_kv_pairs=3, min_kv_pairs=4, test_doublings=1)
    assert training_mixture(p) == [(24, 3)]
    assert evaluation_ladder(p) == [(24, 3), (24, 6)]


def test_sequence_accuracy_on_a_hand_made_example():
    targets = torch.tensor([[IGNORE, 5, IGNORE, 6], [7, IGNORE, 8, 9]])
    preds = torch.tensor([[1, 5, 2, 0], [7, 0, 0, 9]])  # row 0: 1 of 2; row 1: 2 of 3
    torch.testing.assert_close(
        sequence_accuracy(preds, targets), torch.tensor([0.5, 2 / 3], dtype=torch.float64)
    )


@pytest.mark.parametrize(
    "params, message",
    [
        ({"seq_len": 60, "n_kv_pairs": 16}, "need seq_len >= 4·n_kv_pairs = 64"),
        ({"seq_len": 127}, "task.seq_len=127 must be even"),
        ({"vocab_size": 60}, "need vocab_size >= 66"),
        ({"tokens_per_pair": 3}, "task.tokens_per_pair=3 must be even and >= 4"),
        ({"power_a": 0.0}, "task.power_a must be a finite number > 0"),
        ({"steps": 0}, "task.steps must be >= 1, got 0"),
    ],
)
def test_impossible_configurations_are_refused(params, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("·", ".")):
        build_task("recall", params).check()


def test_the_generator_refuses_what_no_sequence_can_satisfy():
    with pytest.raises(ValueError, match="need an even length >= 4·pairs"):
        _batch(2, 30, 8, 64)


SMALL = dict(  # the quick preset's grid of 0.3 (sweep=recall_state's size is larger): a few seconds
    seq_len=64,
    n_kv_pairs=8,
    min_kv_pairs=2,
    tokens_per_pair=8,
    test_doublings=1,
    vocab_size=128,
    train_size=2000,
    test_size=200,
    steps=600,
    batch_size=32,
    d_model=32,
)


def test_softmax_learns_recall_far_above_chance():
    points = {
        (p.metric, p.x_value): p.value for p in build_task("recall", SMALL).measure(_ctx()).points
    }
    by_pairs = {x: v for (m, x), v in points.items() if m == "accuracy_by_pairs"}
    assert sorted(by_pairs) == [2, 4, 8, 16]  # train 2, 4, 8 pairs, test also 16
    assert points[("chance_accuracy", None)] == pytest.approx(1 / 64)
    assert points[("accuracy", None)] == pytest.approx(sum(by_pairs.values()) / 4)
    assert points[("accuracy_by_d_model", 32)] == points[("accuracy", None)]
    assert points[("accuracy_beyond", None)] == by_pairs[16]
    # far above chance (1/64) and guessing one of the sequence's values (at most 1/2); seeded,
    # this run reaches 0.999 on 200 sequences per size, so 0.9 leaves room for other CPUs' math
    assert points[("accuracy", None)] > 0.9
    # the validation split (another 200 sequences per size) measures the same skill: a model at
    # 0.999 on one split is above 0.9 on the other unless the split is broken
    assert points[("val_accuracy", None)] > 0.9


def test_validation_and_test_splits_share_no_sequence():
    task = build_task("recall", SMALL)
    config = (32, 8)
    test = task.data(100, config, task.data_generator(TEST_STREAM + 8))[0]
    val = task.data(100, config, task.data_generator(VALIDATION_STREAM + 8))[0]
    assert not (test.unsqueeze(1) == val.unsqueeze(0)).all(-1).any()


def _sequences_seen(params: dict, seed: int) -> list[torch.Tensor]:
    """Every batch of sequences a recall job draws (training sets, then test and validation)."""
    task = build_task("recall", params)
    seen = []
    draw = task.data

    def recording(n, config, gen):
        x, y = draw(n, config, gen)
        seen.append(x)
        return x, y

    task.data = recording
    task.measure(_ctx(seed=seed))
    return seen


def test_every_seed_trains_and_is_scored_on_the_same_sequences_as_zoology():
    """Zoology's data seed: the job seed varies the initialisation and batch order only, so two
    variants (or seeds) are compared on identical test sequences; another data_seed draws others."""
    params = dict(SMALL, train_size=64, test_size=20, val_size=20, steps=2)
    seed0, seed1 = _sequences_seen(params, 0), _sequences_seen(params, 1)
    assert len(seed0) == len(seed1) > 0
    assert all(torch.equal(a, b) for a, b in zip(seed0, seed1, strict=True))
    other = _sequences_seen(dict(params, data_seed=1), 0)
    assert not any(torch.equal(a, b) for a, b in zip(seed0, other, strict=True))


def test_same_config_and_seed_give_the_same_metrics():
    """Everything but the step time (a wall-clock figure) repeats exactly."""
    params = dict(SMALL, train_size=200, test_size=50, steps=10)

    def measured(seed: int = 0) -> list:
        points = build_task("recall", params).measure(_ctx(seed=seed)).points
        return [(p.metric, p.x_value, p.value) for p in points if p.metric != MS_PER_STEP]

    runs = [measured() for _ in range(2)]
    assert runs[0] == runs[1]
    other_seed = measured(seed=1)
    assert other_seed != runs[0]


def test_non_causal_recall_runs_for_a_variant_that_cannot_be_causal():
    params = dict(SMALL, train_size=200, test_size=50, steps=5, causal=False)
    result = build_task("recall", params).measure(_ctx("sinkhorn"))
    points = {p.metric for p in result.points}
    assert "accuracy" in points
    # no state to decode with: no point, and the record says why
    assert "state_bytes" not in points and "accuracy_by_state_bytes" not in points
    assert "bidirectional" in result.details["state_bytes"]


def _state_model(variant: str, width: int, length: int, layers: int = 2):
    """The recall model of a job with this variant, width and longest test length."""
    params = dict(SMALL, d_model=width, n_layers=layers, seq_len=length, n_kv_pairs=length // 4)
    params.update(tokens_per_pair=8, min_kv_pairs=length // 4, test_doublings=0)
    task = build_task("recall", params)
    assert max(n for n, _ in evaluation_ladder(task.params)) == length
    return task.build_model(_ctx(variant))


@pytest.mark.parametrize("variant", ["softmax", "window", "linear", "identity", "decay"])
def test_state_bytes_is_the_analytic_state_of_each_layer(variant):
    """Zoology's axis, by formula (one head of width d, float32, 2 layers, L = 64 test tokens):
    a KV cache keeps 2·L·d, a ring of w keeps 2·w·d, linear a d×d matrix and a d-vector
    normaliser, identity and decay a d×d matrix."""
    d, length, layers = 16, 64, 2
    window = round(0.2 * length)  # window's default: a fifth of the sequence
    elements = {
        "softmax": 2 * length * d,
        "window": 2 * window * d,
        "linear": d * d + d,
        "identity": d * d,
        "decay": d * d,
    }[variant]
    model = _state_model(variant, d, length, layers)
    assert state_bytes(model, length, torch.float32) == layers * elements * 4
    assert state_bytes(model, length, torch.bfloat16) == layers * elements * 2


def test_state_bytes_equals_what_every_registered_decoder_holds():
    """Over the registry: what the recall task reports is the bytes a real decoder of each layer
    holds after prefilling the longest test length (the same forms the decode task times)."""
    load_plugins()
    length, d = 32, 8
    checked = []
    for name in VARIANTS.names():
        if VARIANTS.get(name).unavailable(torch.device("cpu")):
            continue  # a library's kernel that cannot run here (recorded unsupported by a job)
        model = _state_model(name, d, length, layers=1)
        try:
            reported = state_bytes(model, length, torch.float32)
        except UnsupportedError:
            assert why_no_incremental_form(model.attention_layers()[0].attention)
            continue
        layer = model.attention_layers()[0]
        decoder = incremental_form(layer.attention, 2, length, layer.head_dim)
        gen = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(2, 1, length, d, generator=gen) for _ in range(3))
        gates = random_gates(layer.attention, 2, length, head_dim=d, kv_heads=1, generator=gen)
        with torch.no_grad():
            decoder.prefill(q, k, v, gates or None)  # a gated mixer's form takes its gates
        assert decoder.state_bytes() == reported, name
        checked.append(name)
    assert {"softmax", "linear", "decay", "window"} <= set(checked)


def test_a_job_reports_accuracy_against_its_state_size():
    params = dict(SMALL, train_size=200, test_size=50, steps=5)
    points = {(p.metric, p.x_name): p for p in build_task("recall", params).measure(_ctx()).points}
    state = points[("state_bytes", None)].value
    assert state == 2 * 64 * 32 * 4  # softmax's K and V of 64 test tokens at width 32, float32
    along = points[("accuracy_by_state_bytes", "state_bytes")]
    assert along.x_value == state and along.value == points[("accuracy", None)].value
