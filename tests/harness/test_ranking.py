"""The overview's ranking on a hand-made table with known answers."""

from __future__ import annotations

import pandas as pd
import pytest

from attnbench.harness.leaderboard.overview import overview
from attnbench.harness.leaderboard.ranking import (
    ENTRY,
    SETTING,
    Headline,
    contest_scores,
    standings,
    task_win_rates,
    uncertainty,
    with_machine,
)
from attnbench.harness.leaderboard.steadiness import judge_steadiness
from attnbench.harness.results.collect import COLUMNS
from attnbench.harness.results.metric_points import POINT, point_stats
from attnbench.task_info import TaskInfo

HEADLINES = [
    Headline("t_up", "acc", True, "accuracy"),
    Headline("t_down", "ms", False, "latency"),
    Headline("t_none", "s", None, "a diagnostic"),
]
FAMILIES = {"A": "softmax", "B": "linear", "C": "sparse"}


def _shown(frame, infos=None):
    """``frame`` as the board shows it: with its machine, judged for steadiness by the flags
    ``infos`` (task → `TaskInfo`, default none) declare."""
    return judge_steadiness(with_machine(frame), infos or {})


def _row(task, metric, variant, value, setting="s1", seed=0, device="cpu"):
    row = dict.fromkeys(COLUMNS)
    row.update(
        run_id=f"{task}-{variant}-{setting}-{seed}-{device}",
        status="ok",
        task=task,
        variant=variant,
        variant_params="{}",
        task_params=f'{{"setting": "{setting}"}}',
        seed=seed,
        device=device,
        hardware={"cpu": "Some CPU", "cuda": "Some GPU"}[device],
        threads=2,
        dtype="float32",
        metric=metric,
        value=value,
    )
    return row


FRAME = pd.DataFrame(
    [
        _row("t_up", "acc", "A", 0.85, seed=0),
        _row("t_up", "acc", "A", 0.95, seed=1),  # mean 0.9: ties B
        _row("t_up", "acc", "B", 0.9),
        _row("t_up", "acc", "C", 0.5),
        _row("t_up", "acc", "A", 1.0, setting="s2"),
        _row("t_up", "acc", "B", 0.8, setting="s2"),  # C did not run s2
        _row("t_down", "ms", "A", 10.0),
        _row("t_down", "ms", "B", 5.0),
        _row("t_down", "ms", "C", 20.0),
        _row("t_none", "s", "A", 0.3),
        _row("t_none", "s", "C", 0.7),
        _row("t_up", "acc", "A", 0.1, device="cuda"),  # another device: never compared with cpu
        {**_row("t_up", "acc", "B", 0.0), "status": "failed", "run_id": "x"},  # not counted
    ],
    columns=COLUMNS,
)
FRAME = _shown(FRAME)
CPU, GPU = "Some CPU", "Some GPU"


def test_contest_scores_count_ties_as_half():
    scores = contest_scores(pd.Series([0.9, 0.9, 0.5], index=list("ABC")), True)
    assert scores.to_dict() == {"A": 0.75, "B": 0.75, "C": 0.0}
    assert contest_scores(pd.Series([1.0], index=["A"]), True).empty  # no opponent, no contest
    lower = contest_scores(pd.Series([10.0, 5.0, 20.0], index=list("ABC")), False)
    assert lower.to_dict() == {"A": 0.5, "B": 1.0, "C": 0.0}


def test_task_win_rates_average_over_contests():
    stats = point_stats(FRAME, [*POINT, "threads"])
    points = stats[(stats.task == "t_up") & (stats.device == "cpu")].rename(
        columns={"device": "machine"}
    )
    rates = task_win_rates(points.set_index([*ENTRY, *SETTING])["mean"], True)
    by_variant = {k[0]: v for k, v in rates.items()}
    assert by_variant == pytest.approx({"A": 0.875, "B": 0.375, "C": 0.0})


def _rows(result):
    names = [c.key for c in result.table.columns]
    rows = [dict(zip(names, r, strict=True)) for r in result.table.rows]
    return {(r["variant"].text, r["machine"].text): r for r in rows}


def test_overview_ranks_aggregate_and_ties():
    result = overview(FRAME, HEADLINES, FAMILIES)
    rows = _rows(result)
    a, b, c = rows[("A", CPU)], rows[("B", CPU)], rows[("C", CPU)]
    # aggregate: A (0.875 + 0.5) / 2 = 0.6875 = B (0.375 + 1) / 2: a tie, both rank 1
    assert a["win_rate"].text.startswith("0.688") and b["win_rate"].text.startswith("0.688")
    assert (a["rank"].text, b["rank"].text, c["rank"].text) == ("#1", "#1", "#3")
    assert a["rank"].best and b["rank"].best and not c["rank"].best
    assert a["t_up"].text.endswith("· #1") and b["t_up"].text.endswith("· #2")
    assert b["t_down"].text == "5 · #1" and b["t_down"].best
    assert "±" in a["t_up"].text  # two seeds: a spread
    assert a["t_none"].text == "0.3" and "#" not in a["t_none"].text  # shown, not ranked
    alone = rows[("A", GPU)]  # the only entry on its machine: no opponent, no rank
    assert alone["rank"].text == "–" and alone["t_up"].text == "0.1"
    assert c["family"].text == "sparse"
    assert result.options["machine"] == [CPU, GPU]


def test_overview_without_headline_points_is_none():
    assert overview(FRAME[FRAME.task == "nothing"], HEADLINES, FAMILIES) is None


def test_a_win_must_hold_beyond_the_spread():
    """A: 3 seeds at 0.90 ± 0.07 (se 0.040); B and C one seed each without spread: the
    contest's pooled u is √(0.040²/3) = 0.023, its margin 2·√2·0.023 = 0.066, so B's lead of
    0.05 is a tie, and C at 0.70 is beyond it → loses to both."""
    values = pd.Series([0.90, 0.95, 0.70], index=list("ABC"))
    u = pd.Series([0.07 / 3**0.5, 0.0, 0.0], index=list("ABC"))
    assert contest_scores(values, True, u).to_dict() == {"A": 0.75, "B": 0.75, "C": 0.0}
    # the same values without uncertainty: B beats A
    assert contest_scores(values, True).to_dict() == {"A": 0.5, "B": 1.0, "C": 0.0}
    # the margin is 2·√2 pooled standard errors: just outside it is a win
    tight = pd.Series([0.05 / 2 / 2**0.5 * 0.99] * 2, index=list("AB"))
    assert contest_scores(values[["A", "B"]], True, tight).to_dict() == {"A": 0.0, "B": 1.0}


def test_uncertainty_is_the_seed_standard_error_or_half_the_iqr():
    points = pd.DataFrame({"spread": [0.3, 0.4, float("nan")], "n": [9, 1, 1]})
    assert uncertainty(points).tolist() == pytest.approx([0.1, 0.2, 0.0])


def test_seed_spread_turns_a_small_lead_into_a_tie_in_the_overview():
    rows = [_row("t_up", "acc", "A", v, seed=s) for s, v in enumerate([0.80, 0.90, 1.00])] + [
        _row("t_up", "acc", "B", v, seed=s) for s, v in enumerate([0.85, 0.88, 0.91])
    ]
    frame = pd.DataFrame(rows, columns=COLUMNS)
    frame = _shown(frame)
    computed = standings(frame, [HEADLINES[0]])
    # means 0.90 vs 0.88, standard errors 0.058 and 0.017: a tie, so both rank 1
    assert computed.task_ranks["t_up"].tolist() == [1, 1]
    narrow = frame.assign(value=frame["value"].where(frame["variant"] == "B", 0.95))
    computed = standings(narrow, [HEADLINES[0]])  # A: 0.95 with no seed spread; B 0.88 ± 0.017
    assert computed.task_ranks["t_up"].tolist() == [1, 2]


def test_a_variant_with_several_configurations_is_labelled_by_what_differs():
    rows = [
        {**_row("t_up", "acc", "W", 0.5), "variant_params": '{"block": 0, "window": 0.2}'},
        {
            **_row("t_down", "ms", "W", 1.0),
            "variant_params": '{"block": 0, "window": 256.0}',
        },
        _row("t_up", "acc", "A", 0.9),
    ]
    frame = pd.DataFrame(rows, columns=COLUMNS)
    frame = _shown(frame)
    labels = {row[1].text for row in overview(frame, HEADLINES, FAMILIES).table.rows}
    assert labels == {"A", "W window=0.2", "W window=256"}


# B is the fastest in setting s1, but its timing there was unsteady (flag 0)
TIMED = [
    ("A", "s1", 2.0, 1.0),
    ("B", "s1", 1.0, 0.0),
    ("C", "s1", 3.0, 1.0),
    ("A", "s2", 4.0, 1.0),
    ("B", "s2", 8.0, 1.0),
    ("C", "s2", 6.0, 1.0),
]


# the task's declaration: its run's "steady" metric says whether the timing behind "ms" settled
DECLARED = {"t_down": TaskInfo("t_down", steadiness={"ms": "steady"})}


def _timed(rows=TIMED, flags=True, declared=DECLARED):
    frame = pd.DataFrame(
        [
            {**_row("t_down", metric, v, value, setting=s), "run_id": f"{v}-{s}"}
            for v, s, ms, steady in rows
            for metric, value in [("ms", ms), ("steady", steady)][: 2 if flags else 1]
        ],
        columns=COLUMNS,
    )
    return _shown(frame, declared)


FLAGGED = Headline("t_down", "ms", False, "latency", steady_flag="steady")


def test_an_unsteady_point_enters_no_contest():
    computed = standings(_timed(), [FLAGGED])
    rates = {k[0]: v for k, v in computed.aggregate.items()}  # one task: its win rates
    # s1 is A vs C only (A wins); s2 is all three: A, C, B
    assert rates == pytest.approx({"A": 1.0, "B": 0.0, "C": 0.25})
    assert {k[0]: v for k, v in computed.unsteady["t_down"].items()} == {"B": 1}
    # B's value is its steady one (8 ms at s2), not a mean with the unsteady 1 ms
    assert {k[0]: v for k, v in computed.values["t_down"][0].items()}["B"] == 8.0
    # the same table without the declaration: B's 1 ms at s1 competes and wins there
    plain = standings(_timed(declared={}), [Headline("t_down", "ms", False, "latency")])
    assert {k[0]: v for k, v in plain.aggregate.items()}["B"] == 0.5


def test_an_entry_with_only_unsteady_timings_is_shown_marked_and_unranked():
    rows = [*TIMED, ("D", "s1", 0.5, 0.0)]
    result = overview(_timed(rows), [FLAGGED], {})
    cells = _rows(result)
    d, b = cells[("D", CPU)], cells[("B", CPU)]
    assert d["t_down"].text == "~0.5" and d["rank"].text == "–"
    assert d["t_down"].note.startswith("only 1 unsteady timing here")
    assert b["t_down"].text.startswith("~8") and b["t_down"].note.startswith(
        "1 unsteady timing left out"
    )
    assert cells[("A", CPU)]["t_down"].note == ""


def test_a_table_without_flags_ranks_as_before():
    """Older records have no flag: unknown is not unsteady, and nothing is marked."""
    computed = standings(_timed(flags=False), [FLAGGED])
    assert computed.unsteady == {}
    assert {k[0]: v for k, v in computed.aggregate.items()}["B"] == 0.5
    cells = _rows(overview(_timed(flags=False), [FLAGGED], {}))
    assert not any(c["t_down"].note or "~" in c["t_down"].text for c in cells.values())


# --- like with like (issue #24) ------------------------------------------------------------------

QUALITY = [Headline("q1", "acc", True), Headline("q2", "acc", True)]
COST = Headline("speed", "ratio", False, cost=True)


def _table(rows):
    return _shown(pd.DataFrame([_row(*r) for r in rows], columns=COLUMNS))


def test_a_row_ranked_in_fewer_quality_columns_gets_no_quality_rank():
    """K is timed only (the cheapest) and Q1 ran only q1, where it won: neither may stand in a
    rank beside A and B, which ran every quality task (issue #24: a throughput-only row was #2
    overall). The cost never enters the quality rank."""
    frame = _table(
        [
            ("q1", "acc", "A", 0.9),
            ("q1", "acc", "B", 0.5),
            ("q1", "acc", "Q1", 0.99),
            ("q2", "acc", "A", 0.8),
            ("q2", "acc", "B", 0.6),
            ("speed", "ratio", "A", 1.0),
            ("speed", "ratio", "B", 0.1),  # B is far cheaper: it must not lift its quality rank
            ("speed", "ratio", "K", 0.01),
        ]
    )
    computed = standings(frame, [*QUALITY, COST])
    ranks = {key[0]: r for key, r in computed.overall.items()}
    assert ranks == {"A": 1, "B": 2}
    assert computed.compared[(CPU, "float32")] == ("q1", "q2")
    result = _rows(overview(frame, [*QUALITY, COST], FAMILIES))
    assert result[("K", CPU)]["rank"].text == "–"
    assert "no quality column" in result[("K", CPU)]["rank"].note
    assert result[("Q1", CPU)]["rank"].text == "–" and "q2" in result[("Q1", CPU)]["rank"].note
    assert result[("Q1", CPU)]["win_rate"].text.endswith("(1 of 2)")
    assert result[("K", CPU)]["speed"].text.endswith("#1")  # cost keeps its own rank
    headers = [c.key for c in overview(frame, [*QUALITY, COST], FAMILIES).table.columns]
    assert headers[:6] == ["rank", "variant", "win_rate", "q1", "q2", "speed"]  # headlines first
    assert "never averaged" in overview(frame, [*QUALITY, COST], FAMILIES).rule


def test_the_compared_columns_are_the_set_the_most_results_share():
    """A, B and C ran q1, q2 and q3; D to I ran q1 and q2 only (q3 is for some families, or
    their q3 was still learning). The widest set, {q1, q2, q3}, would rank three of nine rows;
    {q1, q2} rests on 9 × 2 results against 3 × 3, so it is compared and all nine are ranked,
    each on q1 and q2 only: A's win in q3 moves no aggregate. An entry ranked in q3 only stays
    out, "(0 of 2)"."""
    headlines = [*QUALITY, Headline("q3", "acc", True)]
    levels = dict(zip("ABCDEFGHI", [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9], strict=True))
    rows = [("q1", "acc", v, x) for v, x in levels.items()]
    rows += [("q2", "acc", v, x) for v, x in levels.items()]
    rows += [("q3", "acc", v, x) for v, x in (("A", 0.99), ("B", 0.5), ("C", 0.4), ("J", 0.9))]
    frame = _table(rows)
    computed = standings(frame, headlines)
    assert computed.compared[(CPU, "float32")] == ("q1", "q2")
    ranks = {key[0]: r for key, r in computed.overall.items()}
    assert ranks == {v: 9 - i for i, v in enumerate("ABCDEFGHI")}  # I first, q3 counts for none
    aggregate = {key[0]: a for key, a in computed.aggregate.items()}
    assert aggregate["A"] == 0.0 and aggregate["I"] == 1.0
    result = _rows(overview(frame, headlines, FAMILIES))
    assert result[("J", CPU)]["rank"].text == "–"
    assert result[("J", CPU)]["win_rate"].text.endswith("(0 of 2)")
    assert not result[("A", CPU)]["win_rate"].text.endswith(")")  # ranked: q1 and q2 averaged
    assert "quality columns (q1, q2)" in overview(frame, headlines, FAMILIES).rule


def test_a_column_of_values_still_learning_says_why_it_casts_no_vote():
    """Trained column q3: B and C still learning at their cap (flag 0), A converged. No setting
    has two ranked values, so q3 casts no vote, and its reason says how many were still
    learning, not nothing (the regenerated reference's compression: 13 of 14)."""
    trained = Headline("q3", "acc", True, converge_flag="converged", trained=True)
    rows = [("q1", "acc", v, x) for v, x in (("A", 0.2), ("B", 0.5), ("C", 0.9))]
    rows += [("q3", "acc", v, x) for v, x in (("A", 0.3), ("B", 0.5), ("C", 0.6))]
    rows += [("q3", "converged", v, float(v == "A")) for v in "ABC"]
    infos = {"q3": TaskInfo("q3", convergence={"acc": "converged"})}
    frame = _shown(pd.DataFrame([_row(*r) for r in rows], columns=COLUMNS), infos)
    computed = standings(frame, [QUALITY[0], trained])
    assert computed.no_vote == {
        "q3": "no setting with two ranked values: 2 of 3 variants are still learning at their cap"
    }
    assert computed.compared[(CPU, "float32")] == ("q1",)
    alone = [r for r in rows if r[0] == "q3"]  # q3 only: no column votes, and the rule says so
    frame = _shown(pd.DataFrame([_row(*r) for r in alone], columns=COLUMNS), infos)
    rule = overview(frame, [trained], FAMILIES).rule
    assert rule.startswith("No quality column votes (each one's header says why")


def test_a_task_split_into_columns_has_one_vote():
    """Task m shows three columns (modes). A wins q1; B wins every mode of m. Counted per
    column B would lead 3 to 1; counted per task (each has one vote) they tie."""
    modes = [Headline(f"m ({i})", "acc", True, group="m") for i in range(3)]
    rows = [("q1", "acc", "A", 0.9), ("q1", "acc", "B", 0.1)]
    rows += [(f"m ({i})", "acc", v, x) for i in range(3) for v, x in (("A", 0.1), ("B", 0.9))]
    computed = standings(_table(rows), [QUALITY[0], *modes])
    assert computed.aggregate.tolist() == [0.5, 0.5]
    assert computed.overall.tolist() == [1, 1]


def test_a_row_outside_the_ranked_set_moves_no_ranked_row():
    """Two quality tasks ranked for A, B and C; D ran one of them (a plugin's single run), so it
    is outside the compared set. D beats everyone there, yet the ranked rows' aggregates are
    what they were without D (before the fix, A's and B's rates fell by a third of a win)."""
    headlines = [Headline("q1", "acc", True, "accuracy"), Headline("q2", "acc", True, "accuracy")]
    rows = [
        _row(task, "acc", variant, value)
        for task, values in (("q1", (0.9, 0.8, 0.7)), ("q2", (0.6, 0.9, 0.5)))
        for variant, value in zip("ABC", values, strict=True)
    ]
    ranked_only = pd.DataFrame(rows, columns=COLUMNS)
    with_plugin = pd.DataFrame([*rows, _row("q1", "acc", "D", 0.99)], columns=COLUMNS)
    before, after = (standings(_shown(f), headlines) for f in (ranked_only, with_plugin))

    def by_variant(series):
        return {key[0]: value for key, value in series.items()}

    assert by_variant(after.overall) == by_variant(before.overall)  # D has no quality rank
    ranked = {k: v for k, v in by_variant(after.aggregate).items() if k != "D"}
    assert ranked == pytest.approx(by_variant(before.aggregate))
    assert by_variant(before.aggregate) == pytest.approx({"A": 0.75, "B": 0.75, "C": 0.0})
    # the task's own column still ranks D among everyone who ran it
    assert by_variant(after.task_ranks["q1"])["D"] == 1


def test_one_cpu_model_with_two_capabilities_is_two_machines():
    """Hosts that share a CPU model name but dispatch to different vector ISAs are two machines
    (their hardware names the capability): a row per variant on each, ranked within each only.
    Ranked together, A's AVX-512 timing (5) would beat B's AVX2 one (10)."""
    avx2, avx512 = "AMD EPYC (AVX2)", "AMD EPYC (AVX512)"
    timings = [(avx2, "A", 20.0), (avx2, "B", 10.0), (avx512, "A", 5.0), (avx512, "B", 8.0)]
    frame = pd.DataFrame(
        [
            {**_row("t_down", "ms", v, ms), "hardware": hw, "run_id": f"{v}-{hw}"}
            for hw, v, ms in timings
        ],
        columns=COLUMNS,
    )
    frame = _shown(frame)
    result = overview(frame, [HEADLINES[1]], FAMILIES)
    assert result.options["machine"] == [avx2, avx512]
    rows = _rows(result)
    assert sorted(rows) == [("A", avx2), ("A", avx512), ("B", avx2), ("B", avx512)]
    assert [rows[k]["t_down"].text for k in sorted(rows)] == [
        "20 · #2",
        "5 · #1",
        "10 · #1",
        "8 · #2",
    ]
