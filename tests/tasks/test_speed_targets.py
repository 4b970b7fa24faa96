"""The throughput task's speed targets as data: what each case calls, what each target computes,
and which sizes they time (the command that measures them: tests/harness/test_speed.py)."""

from __future__ import annotations

from attnbench.tasks.throughput import targets as speed_targets
from attnbench.tasks.throughput.targets import Case, Target


def test_marginal_cost_and_factor():
    """(numerator − minus) / denominator × factor."""
    a, b, c = Case("softmax", 64, False), Case("softmax", 128, False), Case("softmax", 256, False)
    marginal = Target("step", c, a, None, False, minus=b)
    assert marginal.value({a: 2.0, b: 3.0, c: 7.0}) == 2.0
    scaled = Target("ideal", a, b, 0.5, True, factor=0.25)
    assert scaled.value({a: 8.0, b: 1.0}) == 2.0
    assert Target("peak", a, None, 10.0, False, "memory").value({a: 3.0}) == 3.0


def test_cases_differ_by_every_parameter_and_by_backward():
    """Sinkhorn at n_iters 2 and 3 are two calls; so are a forward and a forward+backward."""
    two, three = (Case("sinkhorn", 64, False, {"n_iters": i}) for i in (2, 3))
    assert two != three and len({two, three}) == 2
    assert Case("window", 64, True) != Case("window", 64, True, backward=True)
    assert Case("window", 64, True, {"window": 8}) == Case("window", 64, True, {"window": 8})


def test_forward_backward_case_runs_its_call():
    call = Case("linear", 256, True, {}, backward=True).timed_call()
    call()  # runs forward and backward, leaves no gradient behind


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
