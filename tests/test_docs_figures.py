"""The figures the docs quote from the reference board are the committed table's, as the board
computes them now: the quality rank paragraph of docs/leaderboard.md and MAD's table in
docs/mad.md. A figure quoted to two decimals must be within half a unit of its last place of
the value the board's own code gives (`harness.leaderboard.ranking.standings` on the committed
records, every run current: `reference_as_current`), so a change of rule or of records that
moves a quoted figure fails here until the docs say what the board says."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
HALF_UNIT = 0.005 + 1e-9  # a figure printed to two decimals


@pytest.fixture(scope="module")
def reference_standings(reference_as_current):
    from attnbench.harness.leaderboard.columns import overview_columns
    from attnbench.harness.leaderboard.peers import labelled
    from attnbench.harness.leaderboard.ranking import standings, with_machine
    from attnbench.harness.leaderboard.steadiness import judge_steadiness
    from attnbench.harness.leaderboard.tuning import select_tuned
    from attnbench.harness.results.collect import read_table

    table, infos = read_table(reference_as_current / "results.parquet")
    shown = judge_steadiness(with_machine(table[table["current"]]), infos)
    shown = labelled(select_tuned(shown, infos)[0])
    columns = overview_columns(shown, infos)
    return standings(columns.frame, columns.headlines)


def _by_variant(series: pd.Series) -> dict[str, float]:
    return series.groupby(level="variant").first().to_dict()


def _paragraph(path: Path, start: str) -> str:
    text = path.read_text()
    begin = text.index(start)
    end = text.find("\n- **", begin + 1)
    return text[begin : end if end > 0 else None]


def test_the_quality_rank_paragraph_quotes_the_board(reference_standings):
    rank = _paragraph(ROOT / "docs" / "leaderboard.md", "- **Quality rank**")
    quoted = dict(re.findall(r"\b([a-z][a-z0-9_]*) \((0\.\d\d)\)", rank))
    aggregate = _by_variant(reference_standings.aggregate[reference_standings.overall.index])
    assert len(quoted) >= 10, quoted
    for variant, figure in quoted.items():
        assert abs(float(figure) - aggregate[variant]) <= HALF_UNIT, (variant, aggregate)
    # the order quoted is the rank's order
    assert list(quoted) == sorted(quoted, key=lambda v: -aggregate[v])
    low, high = re.search(r"sparse patterns \((0\.\d\d)–(0\.\d\d)\)", rank).groups()
    sparse = [aggregate[v] for v in ("window", "strided", "bigbird", "learned_pattern")]
    assert (
        abs(float(low) - min(sparse)) <= HALF_UNIT and abs(float(high) - max(sparse)) <= HALF_UNIT
    )
    # the columns said to cast no vote are the ones that do not
    said = re.search(r"(\w+) columns cast no vote", rank).group(1)
    words = {"Four": 4, "Five": 5, "Six": 6, "No": 0}
    assert words[said] == len(reference_standings.no_vote)


def test_the_rank_of_how_ranks_are_made_agrees():
    text = (ROOT / "docs" / "leaderboard.md").read_text()
    lead = re.search(
        r"leads the quality rank \(win\nrate (0\.\d\d)\), then softmax \((0\.\d\d)\)", text
    )
    rank = _paragraph(ROOT / "docs" / "leaderboard.md", "- **Quality rank**")
    assert lead is not None
    assert f"topk ({lead.group(1)})" in rank and f"softmax ({lead.group(2)})" in rank


def test_mads_table_quotes_the_board(reference_standings):
    lines = (ROOT / "docs" / "mad.md").read_text().splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| variant | memorization"))
    tasks = ["memorization", "noisy_recall", "fuzzy_recall", "compression"]
    values = {t: _by_variant(reference_standings.values[t][0]) for t in tasks}
    rows = 0
    for line in lines[header + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        variant = cells[0].replace("²", "2")
        for task, cell in zip(tasks, cells[1:5], strict=True):
            assert abs(float(cell) - values[task][variant]) <= HALF_UNIT, (variant, task)
        rows += 1
    assert rows == len(values["memorization"])
