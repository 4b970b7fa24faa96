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
