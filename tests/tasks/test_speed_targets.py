"""The speed report's plumbing: ratios per round, memory targets, bounds both ways, exit code."""

from __future__ import annotations

from attnbench.tasks.throughput import targets as speed_targets
from attnbench.tasks.throughput.targets import Case, SpeedVerdict, Target, format_table, measure


def test_bounds_in_both_directions():
    case = Case("softmax", 64, False)
    at_least = Target("x", case, case, 4.0, True)
    at_most = Target("y", case, case, 4.0, False)
    assert SpeedVerdict(at_least, 5.0, 4.5, 6.0).met and not SpeedVerdict(at_least, 3.9, 3, 5).met
    assert SpeedVerdict(at_most, 3.9, 3, 5).met and not SpeedVerdict(at_most, 4.1, 4, 5).met
    assert not SpeedVerdict(at_most, None, None, None).met  # unknown is never a pass


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


def test_marginal_cost_factor_and_reported_rows():
    """(numerator − minus) / denominator × factor; a row without a bound is reported, not judged."""
    a, b, c = Case("softmax", 64, False), Case("softmax", 128, False), Case("softmax", 256, False)
    marginal = Target("step", c, a, None, False, minus=b)
    assert marginal.value({a: 2.0, b: 3.0, c: 7.0}) == 2.0
    assert SpeedVerdict(marginal, 9.0, 9.0, 9.0).met
    scaled = Target("ideal", a, b, 0.5, True, factor=0.25)
    assert scaled.value({a: 8.0, b: 1.0}) == 2.0
    assert "(reported)" in format_table([SpeedVerdict(marginal, 2.0, 1.0, 3.0)], {}, 1)


def test_cases_differ_by_every_parameter_and_by_backward():
    """Sinkhorn at n_iters 2 and 3 are two calls; so are a forward and a forward+backward."""
    two, three = (Case("sinkhorn", 64, False, {"n_iters": i}) for i in (2, 3))
    assert two != three and len({two, three}) == 2
    assert Case("window", 64, True) != Case("window", 64, True, backward=True)
    assert Case("window", 64, True, {"window": 8}) == Case("window", 64, True, {"window": 8})


def test_forward_backward_case_times_gradients_and_its_peak_is_measured():
    case = Case("linear", 256, True, {}, backward=True)
    targets = [Target("bwd peak", case, None, None, False, "memory")]
    (peak,), _ = measure(targets, rounds=1, threads=1, min_run_time=0.01)
    assert peak.median is None or peak.median > 0
    call = speed_targets._call(case)
    call()  # runs forward and backward, leaves no gradient behind


def test_main_exits_non_zero_when_a_target_is_missed(monkeypatch, capsys):
    case = Case("softmax", 64, False)
    missed = SpeedVerdict(Target("too slow", case, case, 1.0, True), 0.5, 0.4, 0.6)
    monkeypatch.setattr(speed_targets, "measure", lambda **_: ([missed], {case.key: 1.0}))
    assert speed_targets.main(["--rounds", "1"]) == 1
    assert "| too slow | 0.4 | 0.5 | 0.6 | ≥ 1 | NO |" in capsys.readouterr().out


def test_ctrl_c_is_one_line_and_exit_130(monkeypatch, capsys):
    """It printed a traceback; the other commands say one line and exit with status 130."""

    def interrupted(**_):
        raise KeyboardInterrupt

    monkeypatch.setattr(speed_targets, "measure", interrupted)
    assert speed_targets.main(["--rounds", "1"]) == 130
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert line.startswith("attnbench-speed: interrupted by Ctrl-C") and not captured.out


def test_sparse_targets_time_the_papers_absolute_sizes():
    """The sparse defaults are fractions of the sequence (a pattern that grows with n); the
    speed targets time the O(n·w) algorithms at the papers' absolute sizes, given explicitly."""
    from attnbench.variant import VARIANTS

    swept = set(speed_targets.cliff_targets())  # the density sweep: fractions on purpose
    sparse = [
        c
        for t in speed_targets.all_targets()
        if t not in swept
        for c in t.cases()
        if c.variant != "sdpa" and VARIANTS.get(c.variant).family == "sparse"
    ]
    assert {c.variant for c in sparse} == {"window", "strided", "bigbird", "topk"}
    for case in sparse:
        assert case.params == speed_targets.PAPER_SIZES[case.variant]
        assert all(value >= 1 for value in case.params.values()), case


def test_every_sparse_variant_is_swept_over_its_size_for_cliffs():
    """Issue #27's "no cliffs": each of our sparse variants at several values of its size
    parameter, counts and fractions, causal 8k, bounded by 1.5× dense causal SDPA; each
    setting at density <= 0.1 also bounded below by half its ideal speed-up."""
    from attnbench.variant import VARIANTS

    ours = {
        n
        for n in VARIANTS.names()
        if VARIANTS.get(n).family == "sparse" and not VARIANTS.get(n).library
    }
    targets = speed_targets.cliff_targets()
    assert {t.numerator.variant for t in targets if t.numerator.variant != "sdpa"} == ours
    for name, (_, values) in speed_targets.DENSITY_SWEEPS.items():
        assert any(v < 1 for v in values) and any(v >= 1 for v in values), name
    cliffs = [t for t in targets if "no cliff" in t.label]
    assert all(
        t.bound == 1.5 and not t.at_least and t.denominator.variant == "sdpa" for t in cliffs
    )
    ideal = [t for t in targets if "ideal" in t.label]
    assert ideal and all(0 < t.factor <= 0.1 and t.at_least for t in ideal)
    # judged for every variant whose work follows its pattern; reported for the n² ones (top-k
    # scores every pair to choose its k: 1/density is no ideal of it)
    for t in ideal:
        n_squared = VARIANTS.get(t.denominator.variant).cost == "n²"
        assert t.bound == (None if n_squared else 0.5), t.label
    assert any(t.bound is None for t in ideal) and any(t.bound == 0.5 for t in ideal)


def test_more_threads_than_cores_is_refused_before_timing(monkeypatch, capsys):
    """Oversubscribed threads time the scheduler, not the kernels (the adversarial round's
    ``--threads 1000`` ran for minutes); refused in argparse's way, exit 2, nothing measured."""
    import pytest

    monkeypatch.setattr(speed_targets, "usable_cores", lambda: 2)
    monkeypatch.setattr(speed_targets, "measure", lambda **_: pytest.fail("measured"))
    with pytest.raises(SystemExit) as exit_:
        speed_targets.main(["--threads", "3"])
    assert exit_.value.code == 2
    assert "--threads 3 is more than the 2 CPU cores usable here" in capsys.readouterr().err
