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
    """Every variant with a quality rank, in the rank's order, with its win rate; the columns
    the rank compares; how many columns cast no vote."""
    rank = _paragraph(ROOT / "docs" / "leaderboard.md", "- **Quality rank**")
    quoted = dict(re.findall(r"\b([a-z][a-z0-9_]*) \((0\.\d\d)\)", rank))
    aggregate = _by_variant(reference_standings.aggregate[reference_standings.overall.index])
    assert sorted(quoted) == sorted(aggregate), (quoted, aggregate)
    for variant, figure in quoted.items():
        assert abs(float(figure) - aggregate[variant]) <= HALF_UNIT, (variant, aggregate)
    assert list(quoted) == sorted(quoted, key=lambda v: -aggregate[v])  # the rank's order
    (compared,) = set(reference_standings.compared.values())
    words = {"copy": "selective copying", "icl_regression": "in-context regression"}
    for column in compared:  # named in words: a task and its mode share the task's name
        task = column.split(" (")[0]
        assert words.get(task, task.replace("_", " ")) in rank, column
    said = re.search(r"(\w+) columns? casts? no vote", rank).group(1)
    counts = {"One": 1, "Two": 2, "Three": 3, "Four": 4, "Five": 5, "Six": 6, "No": 0}
    assert counts[said] == len(reference_standings.no_vote)


def test_the_rank_of_how_ranks_are_made_agrees(reference_standings):
    text = (ROOT / "docs" / "leaderboard.md").read_text()
    lead = re.search(
        r"On the reference board, (\w+) leads the quality rank \(win\s+rate (0\.\d\d)\)", text
    )
    rank = _paragraph(ROOT / "docs" / "leaderboard.md", "- **Quality rank**")
    assert lead is not None
    first = re.search(r"\b([a-z][a-z0-9_]*) \((0\.\d\d)\)", rank)
    assert first is not None and first.groups() == lead.groups()


def test_mads_table_quotes_the_board(reference_standings):
    """docs/mad.md's reference table: noisy recall, compression and selective copying as the
    board shows them, to two decimals, ``~`` where every seed was still learning at its cap;
    every variant the board shows in the first column is a row."""
    header = "| variant | noisy recall | compression | selective copying |"
    (rows,) = _tables(ROOT / "docs" / "mad.md", header)
    tasks = ["noisy_recall", "compression", "copy"]
    values = {t: _by_variant(reference_standings.values[t][0]) for t in tasks}
    steady = {
        t: _by_variant(reference_standings.steady_values.get(t, pd.Series(dtype=float)))
        for t in tasks
    }
    for cells in rows:
        variant = cells[0].replace("²", "2")
        for task, cell in zip(tasks, cells[1:], strict=True):
            if cell == "–":
                assert variant not in values[task], (variant, task)
                continue
            ranked = steady[task].get(variant, 0) > 0  # NaN: no value left to rank
            learning = task in reference_standings.steady_values and not ranked
            assert cell.startswith("~") == learning, (variant, task, cell)
            assert abs(float(cell.lstrip("~")) - values[task][variant]) <= HALF_UNIT, (
                variant,
                task,
            )
    assert sorted(c[0].replace("²", "2") for c in rows) == sorted(values["noisy_recall"])


def _tables(path: Path, header: str) -> list[list[list[str]]]:
    """The rows (cells) of every table of ``path`` whose header line is ``header``."""
    lines = path.read_text().splitlines()
    tables = []
    for i, line in enumerate(lines):
        if line == header:
            rows = []
            for row in lines[i + 2 :]:
                if not row.startswith("|"):
                    break
                rows.append([c.strip() for c in row.strip("|").split("|")])
            tables.append(rows)
    return tables


@pytest.mark.parametrize("index, task", [(0, "recall"), (1, "forgetting_recall")])
def test_recalls_tables_quote_the_board(reference_standings, index, task):
    """docs/recall.md's reference-board tables (MQAR, then forgetting MQAR): each variant's
    value as the board shows it (to three decimals, ``~`` where every seed was still learning),
    how many of its three seeds the value rests on, and its rank in the column; every variant
    the board shows in the column is in the table."""
    header = "| variant | accuracy | seeds ranked | rank in the column |"
    rows = _tables(ROOT / "docs" / "recall.md", header)[index]
    values = _by_variant(reference_standings.values[task][0])
    steady = _by_variant(reference_standings.steady_values[task].astype(float))
    ranks = _by_variant(reference_standings.task_ranks[task])
    assert sorted(cells[0] for cells in rows) == sorted(values)
    for name, value, seeds, rank in rows:
        learning = value.startswith("~")
        assert abs(float(value.lstrip("~")) - values[name]) <= 0.0005 + 1e-9, (name, value)
        ranked = int(steady.get(name, 0)) if steady.get(name, 0) > 0 else 0  # NaN: none
        assert seeds == f"{ranked} of 3" and learning == (ranked == 0), (name, seeds)
        assert rank == ("–" if name not in ranks else f"#{int(ranks[name])}"), (name, rank)
