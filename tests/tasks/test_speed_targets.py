"""The speed report's plumbing: ratios per round, memory targets, bounds both ways, exit code."""

from __future__ import annotations

from attnbench.tasks import speed_targets
from attnbench.tasks.speed_targets import Case, Outcome, Target, format_table, measure


def test_bounds_in_both_directions():
    case = Case("softmax", 64, False)
    at_least = Target("x", case, case, 4.0, True)
    at_most = Target("y", case, case, 4.0, False)
    assert Outcome(at_least, 5.0, 4.5, 6.0).met and not Outcome(at_least, 3.9, 3, 5).met
    assert Outcome(at_most, 3.9, 3, 5).met and not Outcome(at_most, 4.1, 4, 5).met
    assert not Outcome(at_most, None, None, None).met  # unknown is never a pass


def test_measure_gives_one_ratio_per_round_and_a_memory_reading():
    small, large = (
        Case("window", 256, True, {"window": 32}),
        Case("window", 512, True, {"window": 32}),
    )
    targets = [
        Target("time ratio", large, small, 100.0, False),
        Target("peak", large, None, 1000.0, False, "memory"),
    ]
    outcomes, medians = measure(targets, rounds=3, threads=1, min_run_time=0.01)
    ratio, peak = outcomes
    assert ratio.low <= ratio.median <= ratio.high and ratio.median > 0
    assert peak.median is None or 0 <= peak.median < 1000
    assert set(medians) == {small.key, large.key}
    table = format_table(outcomes, medians, 3)
    assert "| time ratio |" in table and "of 3 rounds" in table


def test_main_exits_non_zero_when_a_target_is_missed(monkeypatch, capsys):
    case = Case("softmax", 64, False)
    missed = Outcome(Target("too slow", case, case, 1.0, True), 0.5, 0.4, 0.6)
    monkeypatch.setattr(speed_targets, "measure", lambda **_: ([missed], {case.key: 1.0}))
    assert speed_targets.main(["--rounds", "1"]) == 1
    assert "| too slow | 0.5 [0.4, 0.6] | ≥ 1 | NO |" in capsys.readouterr().out


def test_sparse_targets_time_the_papers_absolute_sizes():
    """The sparse defaults are fractions of the sequence (a pattern that grows with n); the
    speed targets time the O(n·w) algorithms at the papers' absolute sizes, given explicitly."""
    from attnbench.harness.variant_api import VARIANTS

    sparse = [
        c
        for t in speed_targets.TARGETS
        for c in t.cases()
        if c.variant != "sdpa" and VARIANTS.get(c.variant).family == "sparse"
    ]
    assert {c.variant for c in sparse} == {"window", "strided", "bigbird"}
    for case in sparse:
        assert case.params == speed_targets.PAPER_SIZES[case.variant]
        assert all(value >= 1 for value in case.params.values()), case
