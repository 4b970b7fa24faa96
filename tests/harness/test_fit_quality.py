"""Scaling fits over steady points only, and the mark of an unreliable exponent (issue #24)."""

from __future__ import annotations

import pytest
from conftest import make_record

from attnbench.harness.jobs.records import write_record
from attnbench.harness.results.collect import collect, read_table
from attnbench.harness.results.fit_quality import FLAT_SLOPE, MAX_HALF_WIDTH, reliable
from attnbench.task_info import ScalingFit, TaskInfo

DECLARED = TaskInfo(
    name="speedtask",
    headline="cost_ms",
    scaling_fits=[ScalingFit("cost_ms", "length")],
    steadiness={"cost_ms": "cost_steady"},
)
LENGTHS = (256, 512, 1024, 2048, 4096)


def _write(tmp_path, variant, length, ms, steady=1.0, info=DECLARED):
    metrics = [
        {"metric": "cost_ms", "value": ms, "x_name": "length", "x_value": length},
        {"metric": "cost_steady", "value": steady, "x_name": "length", "x_value": length},
    ]
    write_record(
        tmp_path,
        make_record(
            f"{variant}-{length}",
            status="ok",
            task="speedtask",
            variant=variant,
            task_params={"length": length},
            task_info=info.to_dict(),
            variant_params={},
            seed=0,
            device="cpu",
            dtype="float32",
            env={},
            metrics=[{**m, "higher_is_better": False} for m in metrics],
        ),
    )


def _fit(table, variant):
    rows = table[table["derived"] & (table["variant"] == variant)]
    return dict(zip(rows["metric"], rows["value"], strict=True))


def test_an_unsteady_point_is_left_out_of_the_fit(tmp_path):
    """A quadratic cost with one point 30× too slow (a loaded machine, flagged): the fit must
    be the quadratic one. With the point in, the exponent would be far from 2."""
    for n in LENGTHS:
        loaded = n == 1024
        _write(tmp_path, "dense", n, 1e-6 * n**2 * (30 if loaded else 1), 0.0 if loaded else 1.0)
    fit = _fit(read_table(collect(tmp_path).path)[0], "dense")
    assert fit["scaling_exponent"] == pytest.approx(2.0, abs=1e-6)
    assert fit["scaling_exponent_reliable"] == 1.0


def test_a_negative_exponent_or_a_wide_interval_is_marked_unreliable(tmp_path):
    """The busy machine of issue #24 (decay ∝ n^-2.30): costs that fall with the length are
    no attention kernel's, and a curve too ragged for ±0.5 cannot name a cost class."""
    for n, ms in zip(LENGTHS, (100.0, 30.0, 10.0, 3.0, 1.0), strict=True):
        _write(tmp_path, "falling", n, ms)
    for n, ms in zip(LENGTHS, (1.0, 9.0, 2.0, 40.0, 6.0), strict=True):
        _write(tmp_path, "ragged", n, ms)
    for n in LENGTHS:
        _write(tmp_path, "linear", n, 1e-3 * n)
    table = read_table(collect(tmp_path).path)[0]
    assert _fit(table, "falling")["scaling_exponent"] < 0
    assert _fit(table, "falling")["scaling_exponent_reliable"] == 0.0
    ragged = _fit(table, "ragged")
    assert (ragged["scaling_exponent_ci_high"] - ragged["scaling_exponent_ci_low"]) / 2 > 0.5
    assert ragged["scaling_exponent_reliable"] == 0.0
    assert _fit(table, "linear")["scaling_exponent_reliable"] == 1.0


def test_the_reliability_rule_at_its_edges():
    assert reliable(2.0, 2.0 - MAX_HALF_WIDTH, 2.0 + MAX_HALF_WIDTH)
    assert not reliable(2.0, 1.0, 3.01)  # half-width 1.005
    # the interval is held against [0, 3]: a flat cost fits a slope a hair below 0 (a decoder's
    # fixed state) and is believable; an interval entirely below 0 or above 3 is not
    assert reliable(0.0, -0.1, 0.1) and reliable(-0.01, -0.1, 0.08)
    assert not reliable(-0.2, -0.3, -0.01) and not reliable(3.2, 3.01, 3.3)
    # a flat cost measured tightly: its interval may end just below 0 (linear's decoding over
    # 1k-64k), while a slope past ±FLAT_SLOPE with an interval below 0 is a falling cost
    assert reliable(-0.012, -0.022, -0.002) and reliable(FLAT_SLOPE, 0.04, 0.06)
    assert not reliable(-FLAT_SLOPE - 0.01, -0.07, -0.05)
    assert reliable(3.0, 2.9, 3.1) and reliable(3.01, 2.9, 3.1)
    assert not reliable(2.0, float("nan"), float("nan"))  # two points: no interval


def test_the_board_states_no_unreliable_exponent(tmp_path):
    """The falling curve's legend says its fit is unreliable instead of ∝ length^-1.71; the
    linear one keeps its exponent."""
    import json
    import re

    from attnbench.harness.leaderboard import build_site

    for n, ms in zip(LENGTHS, (100.0, 30.0, 10.0, 3.0, 1.0), strict=True):
        _write(tmp_path, "falling", n, ms)
    for n in LENGTHS:
        _write(tmp_path, "linear", n, 1e-3 * n)
    collect(tmp_path)
    html = build_site(tmp_path).read_text()
    figures = re.findall(r'data-chart="[^"]+">(.*?)</script>', html, re.S)
    names = [t.get("name", "") for text in figures for t in json.loads(text)["data"]]
    assert any("falling" in n and "fit unreliable" in n for n in names), names
    assert any("linear" in n and "∝ length^1.00" in n for n in names), names
    assert not any("falling" in n and "∝" in n for n in names), names


def test_a_crossover_is_stated_only_between_two_reliable_fits(tmp_path):
    """linear meets the quadratic reference at 1000 (1e-3·n = 1e-6·n²); the ragged curve's
    crossover, from a fit marked unreliable, is not stated at all."""
    declared = TaskInfo(
        name="speedtask",
        headline="cost_ms",
        scaling_fits=[ScalingFit("cost_ms", "length", reference_variant="dense")],
        steadiness={"cost_ms": "cost_steady"},
    )
    for n in LENGTHS:
        _write(tmp_path, "dense", n, 1e-6 * n**2, info=declared)
        _write(tmp_path, "linear", n, 1e-3 * n, info=declared)
    for n, ms in zip(LENGTHS, (1.0, 9.0, 0.2, 40.0, 0.6), strict=True):
        _write(tmp_path, "ragged", n, ms, info=declared)
    table = read_table(collect(tmp_path).path)[0]
    assert _fit(table, "linear")["crossover_length"] == pytest.approx(1000.0, rel=1e-6)
    assert _fit(table, "ragged")["scaling_exponent_reliable"] == 0.0
    assert "crossover_length" not in _fit(table, "ragged")
    # with an unreliable reference, no variant gets a crossover against it
    other = tmp_path / "ragged_reference"
    for n, ms in zip(LENGTHS, (1.0, 90.0, 2.0, 400.0, 6.0), strict=True):
        _write(other, "dense", n, ms, info=declared)
        _write(other, "linear", n, 1e-3 * n, info=declared)
    table = read_table(collect(other).path)[0]
    assert _fit(table, "dense")["scaling_exponent_reliable"] == 0.0
    assert "crossover_length" not in _fit(table, "linear")
