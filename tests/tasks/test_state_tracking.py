"""State tracking: the generators against slow obvious computations, the groups' axioms, the
protocol's lengths, one short job end to end.

The references here are written the long way, one sequence and one token at a time, in plain
Python: the running parity by counting, the arithmetic by Python's own evaluator on the
expression's text (``*`` before ``+`` and ``−``; brackets), the word problem by composing the
permutations as functions.
"""

from __future__ import annotations

import itertools
import json
import math

import pytest
import torch

from attnbench.harness.discovery import load_plugins
from attnbench.task import JobContext, build_task
from attnbench.tasks.state_tracking.data import (
    IGNORE,
    SYMBOLS,
    arithmetic_batch,
    arithmetic_vocabulary,
    bracket_batch,
    parity_batch,
    word_problem_batch,
)
from attnbench.tasks.state_tracking.groups import group, is_even

load_plugins()


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _text(tokens: list[int], modulus: int) -> str:
    """The expression of ``tokens`` as text (PAD dropped)."""
    names = {v: k for k, v in arithmetic_vocabulary(modulus).items()}
    return "".join(names[t] for t in tokens if names[t] != "PAD")


# --- the groups ----------------------------------------------------------------------------


@pytest.mark.parametrize("name, order", [("S3", 6), ("A4", 12), ("A5", 60), ("S5", 120)])
def test_each_table_is_a_group_of_its_order(name, order):
    g = group(name)
    t = g.table
    n = g.order
    assert n == order == len(set(g.elements))
    # closure and the Latin square: every row and column a permutation of the elements
    assert all(sorted(row) == list(range(n)) for row in t.tolist())
    assert all(sorted(col) == list(range(n)) for col in t.T.tolist())
    # identity at index 0, and it is the identity permutation
    assert g.elements[0] == tuple(range(len(g.elements[0])))
    assert torch.equal(t[0], torch.arange(n)) and torch.equal(t[:, 0], torch.arange(n))
    # inverses: each row holds the identity once
    assert ((t == 0).sum(1) == 1).all()
    # associativity over every triple: (ab)c = a(bc)
    a, b, c = torch.meshgrid(torch.arange(n), torch.arange(n), torch.arange(n), indexing="ij")
    assert torch.equal(t[t[a, b], c], t[a, t[b, c]])


def test_the_table_composes_permutations_left_to_right():
    """table[i, j] is the permutation 'apply elements[i], then elements[j]', computed here as
    functions on {0, …, 4} for every pair of S5."""
    g = group("S5")
    for i, j in itertools.product(range(g.order), repeat=2):
        p, q = g.elements[i], g.elements[j]
        applied = tuple(q[p[k]] for k in range(5))
        assert g.elements[int(g.table[i, j])] == applied


def test_a5_is_exactly_the_even_permutations_of_s5():
    s5, a5 = group("S5"), group("A5")
    assert len(s5.elements) == 120 and len(a5.elements) == 60
    even = {p for p in itertools.permutations(range(5)) if is_even(p)}
    assert set(a5.elements) == even
    # parity by another road: the sign is (−1)^(n − number of cycles)
    for p in itertools.permutations(range(5)):
        seen, cycles = set(), 0
        for start in range(5):
            if start not in seen:
                cycles += 1
                k = start
                while k not in seen:
                    seen.add(k)
                    k = p[k]
        assert is_even(p) == ((5 - cycles) % 2 == 0)


def test_s3_is_not_commutative_and_a_bad_name_is_one_sentence():
    t = group("S3").table
    assert not torch.equal(t, t.T)
    with pytest.raises(ValueError, match="group 'Z5' is not available"):
        group("Z5")


# --- the generators against the slow references -----------------------------------------------


def test_parity_targets_are_the_running_parity():
    x, y = parity_batch(50, 40, _gen())
    for bits, targets in zip(x.tolist(), y.tolist(), strict=True):
        ones = 0
        for bit, target in zip(bits, targets, strict=True):
            ones += bit
            assert target == ones % 2
    assert set(x.unique().tolist()) == {0, 1}


@pytest.mark.parametrize("name", ["S3", "A5", "S5"])
def test_word_problem_targets_are_the_products_of_the_permutations(name):
    g = group(name)
    x, y = word_problem_batch(20, 30, g, _gen())
    for word, targets in zip(x.tolist(), y.tolist(), strict=True):
        state = tuple(range(len(g.elements[0])))  # the identity: nothing applied yet
        for letter, target in zip(word, targets, strict=True):
            p = g.elements[letter]
            state = tuple(p[state[k]] for k in range(len(state)))  # apply p after the rest
            assert g.elements[target] == state
    assert x.min() >= 0 and x.max() < g.order
    if g.order <= 60:  # 600 uniform draws miss one of 60 elements with probability < 0.003
        assert len(x.unique()) == g.order


@pytest.mark.parametrize("operators", ["+-*", "+-", "*"])
def test_arithmetic_targets_are_python_evaluations_of_each_prefix(operators):
    p = 5
    x, y = arithmetic_batch(40, 21, p, operators, _gen())
    vocab = arithmetic_vocabulary(p)
    for tokens, targets in zip(x.tolist(), y.tolist(), strict=True):
        assert all(t < p for t in tokens[0::2])  # numbers at even positions
        assert {t - p for t in tokens[1::2]} <= {SYMBOLS.index(o) for o in operators}
        for end, target in enumerate(targets):
            if end % 2:
                assert target == IGNORE  # operators are not scored
            else:
                assert target == eval(_text(tokens[: end + 1], p)) % p  # noqa: S307
    assert vocab["PAD"] not in x


@pytest.mark.parametrize("operators", ["+-", "+-*"])
def test_bracket_expressions_have_their_length_and_python_value(operators):
    p = 5
    lengths = torch.arange(1, 41)
    x, y = bracket_batch(40, lengths, 40, p, operators, _gen())
    pad = arithmetic_vocabulary(p)["PAD"]
    for m, tokens, targets in zip(lengths.tolist(), x.tolist(), y.tolist(), strict=True):
        assert all(t != pad for t in tokens[:m]) and all(t == pad for t in tokens[m:])
        text = _text(tokens, p)
        scored = [i for i, t in enumerate(targets) if t != IGNORE]
        assert scored == [m - 1]
        assert targets[m - 1] == eval(text) % p  # noqa: S307
        if m >= 5:
            assert text[0] == "(" and text[-1] == ")"
        assert text.count("(") == text.count(")")


def test_every_generator_repeats_from_its_seed_and_differs_across_seeds():
    draws = {
        "parity": lambda g: parity_batch(8, 16, g),
        "word": lambda g: word_problem_batch(8, 16, group("A5"), g),
        "arithmetic": lambda g: arithmetic_batch(8, 15, 5, "+-*", g),
        "brackets": lambda g: bracket_batch(8, 15, 15, 5, "+-", g),
    }
    for name, draw in draws.items():
        (a, ya), (b, yb), (c, _) = draw(_gen(3)), draw(_gen(3)), draw(_gen(4))
        assert torch.equal(a, b) and torch.equal(ya, yb), name
        assert not torch.equal(a, c), name


# --- the protocol --------------------------------------------------------------------------


TINY = dict(
    train_length=8,
    test_lengths=[8, 16, 33],
    train_size=64,
    test_size=16,
    val_size=16,
    steps=4,
    batch_size=16,
    d_model=8,
    n_heads=1,
)


@pytest.mark.parametrize(
    "task, extra, chance",
    [
        ("parity", {}, 1 / 2),
        ("modular_arithmetic", {"modulus": 7}, 1 / 7),
        ("modular_arithmetic", {"brackets": True, "operators": "+-"}, 1 / 5),
        ("word_problem", {"group": "A5"}, 1 / 60),
    ],
)
def test_a_job_records_accuracy_by_length_past_the_training_length(task, extra, chance):
    ctx = JobContext("softmax", {}, torch.device("cpu"), torch.float32, 0, 1)
    result = build_task(task, dict(TINY, **extra)).measure(ctx)
    points = {(p.metric, p.x_value): p.value for p in result.points}
    curve = {x: v for (m, x), v in points.items() if m == "accuracy_by_length"}
    assert sorted(curve) == [8, 16, 33]  # the test lengths, two of them past training's 8
    assert points[("accuracy", None)] == curve[33]  # the headline: the longest length
    assert points[("accuracy_beyond", None)] == pytest.approx((curve[16] + curve[33]) / 2)
    assert points[("accuracy_trained_lengths", None)] == curve[8]
    assert points[("chance_accuracy", None)] == pytest.approx(chance)
    assert all(0 <= v <= 1 for v in curve.values())
    assert ("learning_curve", 4 * 16) in points  # the validation accuracy after 4 steps of 16
    assert result.details["val_length"] == 33


def test_test_lengths_are_scored_at_their_own_end():
    """Dense tasks score position n−1 of long test sequences: the same as sequences of n tokens
    for a causal model, checked here on a model that outputs the running parity of a prefix
    only if it reads no further (a causal cumulative sum)."""
    task = build_task("parity", dict(TINY, test_lengths=[5, 9, 40]))

    class Oracle(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.one_hot(x.cumsum(1) % 2, 2).float()

    ctx = JobContext("softmax", {}, torch.device("cpu"), torch.float32, 0, 1)
    assert task.accuracy_by_length(Oracle(), ctx) == {5: 1.0, 9: 1.0, 40: 1.0}
    assert task.validation_accuracy(Oracle(), ctx)[0] == 1.0

    # a model that is right only up to 8 tokens (a count that saturates) fails past them
    class Saturating(torch.nn.Module):
        def forward(self, x):
            capped = torch.cat([x[:, :8], torch.zeros_like(x[:, 8:])], 1)
            return torch.nn.functional.one_hot(capped.cumsum(1) % 2, 2).float()

    by_length = task.accuracy_by_length(Saturating(), ctx)
    assert by_length[5] == 1.0 and by_length[40] < 0.8


def test_arithmetic_scores_an_even_length_at_its_last_number():
    task = build_task("modular_arithmetic", TINY)
    assert [task.end_position(n) for n in (7, 8, 9)] == [6, 6, 8]
    assert build_task("modular_arithmetic", dict(TINY, brackets=True)).end_position(8) == 7


@pytest.mark.parametrize(
    "task, params, message",
    [
        ("parity", {"test_lengths": [4, 8]}, "at least one above task.train_length=8"),
        ("parity", {"test_lengths": []}, "at least one above"),
        ("modular_arithmetic", {"operators": "+/"}, "task.operators='\\+/'"),
        ("modular_arithmetic", {"modulus": 1}, "task.modulus=1"),
        ("word_problem", {"group": "S9"}, "group 'S9' is not available"),
        ("parity", {"val_length": -1}, "task.val_length=-1"),
    ],
)
def test_impossible_settings_are_refused_in_one_sentence(task, params, message):
    with pytest.raises(ValueError, match=message):
        build_task(task, dict(TINY, **params))


def test_every_split_repeats_from_data_seed_and_differs_from_the_others():
    task = build_task("word_problem", TINY)
    train = task.batch(16, 8, task.data_generator(1))[0]
    again = build_task("word_problem", TINY).batch(16, 8, task.data_generator(1))[0]
    assert torch.equal(train, again)
    from attnbench.task import TEST_STREAM, VALIDATION_STREAM

    test = task.batch(16, 8, task.data_generator(TEST_STREAM))[0]
    val = task.batch(16, 8, task.data_generator(VALIDATION_STREAM))[0]
    assert not torch.equal(train, test) and not torch.equal(test, val)


def test_the_command_line_job_writes_a_record_with_the_curve(tmp_path):
    """`attnbench task=parity variant=softmax` at tiny sizes: the CLI's config composed by Hydra
    and run by the engine's job (in process), which writes the record with its curve."""
    from hydra import compose, initialize_config_dir

    from attnbench.harness.cli.app import CONF_DIR
    from attnbench.harness.jobs.config import store_configs
    from attnbench.harness.jobs.job import run_job

    store_configs()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose(
            "config",
            overrides=[
                f"results_dir={tmp_path}",
                "device=cpu",
                "variant=softmax",
                "task=parity",
                "task.train_length=8",
                "task.test_lengths=[8,32]",
                "task.train_size=32",
                "task.test_size=8",
                "task.val_size=8",
                "task.steps=2",
                "task.batch_size=8",
                "task.d_model=8",
                "task.n_heads=1",
            ],
        )
    assert run_job(cfg).status == "ok"
    (record,) = [json.loads(p.read_text()) for p in (tmp_path / "runs").glob("*.json")]
    assert record["status"] == "ok", record["error"]
    curve = {
        m["x_value"]: m["value"] for m in record["metrics"] if m["metric"] == "accuracy_by_length"
    }
    assert sorted(curve) == [8, 32] and all(math.isfinite(v) for v in curve.values())
    assert record["task_info"]["headline"] == "accuracy"
