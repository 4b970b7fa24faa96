"""The tuning rule shared by the board and the sweep: compare values on the seeds they share."""

from __future__ import annotations

import math

from attnbench.harness.results.tuning_choice import compared_seeds, score_candidates, winner


def test_the_seeds_every_scored_value_has_are_compared():
    scores = {"a": {0: 0.5, 1: 0.7}, "b": {0: 0.6, 1: 0.2, 2: 0.9}, "c": {}}
    assert compared_seeds(scores) == {0, 1}  # c has no score: it does not narrow the seeds
    scored = score_candidates(scores)
    assert (scored["a"].score, scored["a"].n_seeds) == (0.6, 2)
    assert math.isclose(scored["b"].score, 0.4) and scored["b"].n_seeds == 2
    assert math.isnan(scored["c"].score)
    assert winner(scored, higher_is_better=True) == "a"
    assert winner(scored, higher_is_better=False) == "b"


def test_values_without_a_shared_seed_are_each_scored_on_their_own():
    scored = score_candidates({"a": {0: 0.5}, "b": {1: 0.7}})
    assert winner(scored, True) == "b" and scored["a"].n_seeds == 1


def test_ties_go_to_the_label_that_sorts_first_and_no_score_no_winner():
    assert winner(score_candidates({"z": {0: 1.0}, "a": {0: 1.0}}), True) == "a"
    assert winner(score_candidates({"a": {}, "b": {}}), True) is None
    assert winner(score_candidates({"a": {0: math.nan}}), True) is None


def test_a_diverged_seed_counts_as_a_failed_one():
    """A NaN score (the run diverged) and a failed run (no score) are the same to the choice:
    the seed leaves the compared set for every value. With the NaN counted as a seed, "a" won
    on its one good seed against "b"'s mean over two (0.9 > 0.725); without seed 1 at all
    (failed), "b" won on seed 0 (0.95 > 0.9): the two now agree."""
    diverged = {"a": {0: 0.9, 1: math.nan}, "b": {0: 0.95, 1: 0.5}}
    failed = {"a": {0: 0.9}, "b": {0: 0.95, 1: 0.5}}
    assert compared_seeds(diverged) == compared_seeds(failed) == {0}
    assert winner(score_candidates(diverged), True) == winner(score_candidates(failed), True)
    assert winner(score_candidates(diverged), True) == "b"


def test_one_value_spelled_two_ways_is_one_candidate():
    from attnbench.harness.results.tuning_choice import value_label

    axes = ["lr"]
    assert value_label({"lr": "0.01"}, axes) == value_label({"lr": 0.01}, axes)
    assert value_label({"lr": 1.0}, axes) == value_label({"lr": 1}, axes)
    assert value_label({"lr": "adam"}, axes) == '{"lr": "adam"}'
