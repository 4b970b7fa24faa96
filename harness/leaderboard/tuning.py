"""Tuning axes on the board: per variant and setting, the value that won on validation.

A task may declare tuning axes (`TaskInfo.tuning`, e.g. ``lr`` picked by ``val_accuracy``). A
preset that sweeps several values gives several runs per variant and setting. Comparing every
variant at one shared value favours the variants that happen to suit it (published comparisons,
e.g. Zoology's MQAR, sweep the learning rate per mixer and report the best), so the board keeps,
per variant and setting, only the runs of the value whose **seed-averaged validation metric** is
best (`harness.results.tuning_choice`: averaged over the seeds every value has, so a value tuned
at one seed and then run at more is compared on the tuning seed), and shows which value won and
what the others scored. The test metrics of the kept runs are
then an unbiased estimate for that choice: the choice never saw the test split.

The kept runs lose their tuning axes from ``task_params`` (the axes move to the ``tuned`` column),
so that variants tuned to different values still meet in one contest of the overview.

Rules, in order:
- a candidate (one combination of axis values) is scored by the mean of ``select_by`` over its
  ok runs at the seeds every scored candidate has; one without a score (failed, or from code
  before the task measured it) cannot win;
- ties go to the candidate whose values sort first (deterministic, never by run order);
- a group where no candidate has a score keeps all its runs unchanged, so their failures show.
The same rule picks the value a preset's ``seeds_at_best`` grid runs its further seeds at.

**A winner at the grid's edge is flagged** (`Choice.at_edge`): where the winning value of a
numeric axis is the lowest or the highest value tried, the optimum may lie outside the grid, and
the variant's number may be its grid's, not its own. The tuning table says so per variant; the
preset's grid should be extended until no winner sits there. Not flagged, but named as level
(`Choice.level_at_edge`): an edge winner whose lead over its inner neighbour is within one
standard deviation of its own seeds' scores (two seeds or more), or instead, where the
neighbour ran at several seeds too, whose mean leads the neighbour's by no more than the ranks'
tie margin (the two compared as the ranks compare two rows; a winner behind its neighbour is
level); a plateau such as a task every value solves or none learns, where one seed's order is
noise and a wider grid would move the edge without telling anything.

Torch-free, like the rest of the leaderboard.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field

import pandas as pd

from attnbench.harness.leaderboard.ranking import MACHINE, contest_scores
from attnbench.harness.leaderboard.tables import (
    Cell,
    Column,
    Table,
    differing_keys,
    format_value,
    map_distinct,
)
from attnbench.harness.results.tuning_choice import score_candidates, value_label, winner
from attnbench.task_info import TaskInfo

TUNED = "tuned"  # column of the kept rows: the winning values, e.g. "lr=0.003"
GROUP = ["task", "variant", "variant_params", MACHINE, "dtype", "setting"]


@dataclass
class Candidate:
    """One combination of tuning-axis values of a group, with its validation score."""

    values: dict
    score: float  # mean of select_by over the compared seeds; NaN when it has none
    n_seeds: int  # the seeds that score averages
    shown: list[str] = field(default_factory=list)  # the axes the label names (empty: all)
    # its score at each seed it ran (more than n_seeds: run on at the winner)
    seed_scores: tuple[float, ...] = ()

    @property
    def seeds(self) -> str:
        """How many seeds the score averages, and of how many run where more ran: "1 of 3"."""
        run = len(self.seed_scores)
        return f"{self.n_seeds} of {run}" if run > self.n_seeds else str(self.n_seeds)

    @property
    def label(self) -> str:
        names = self.shown or sorted(self.values)
        return ", ".join(f"{k}={self.values.get(k)}" for k in names)


@dataclass
class Choice:
    """The candidates of one (task, variant, setting) group and the one that won."""

    task: str
    variant: str
    variant_params: str
    machine: str
    dtype: str
    setting: str  # task parameters without the tuning axes (canonical JSON)
    select_by: str
    higher_is_better: bool
    candidates: list[Candidate] = field(default_factory=list)
    winner: int | None = None  # index into candidates; None: no candidate has a score

    def at_edge(self) -> list[str]:
        """The numeric axes whose winning value is the lowest or highest of two or more values
        tried, as "lr at the highest tried (0.01)", leaving out the level ones
        (`level_at_edge`); empty where none (or no winner)."""
        return [text for text, level in self._edges() if not level]

    def level_at_edge(self) -> list[str]:
        """The edge winners level with their inner neighbour (`_level`: within one standard
        deviation of their seeds' scores, or, where the neighbour ran several seeds too, within
        the ranks' tie margin of its mean), as "lr at the lowest tried (0.001), level with
        lr=0.003"."""
        return [text for text, level in self._edges() if level]

    def _edges(self) -> list[tuple[str, bool]]:
        if self.winner is None:
            return []
        best = self.candidates[self.winner]
        won, out = best.values, []
        for axis in sorted(won):
            value = won[axis]
            # the candidates that differ from the winner in this axis only
            line = [
                c
                for c in self.candidates
                if isinstance(c.values.get(axis), int | float)
                and all(c.values.get(a) == v for a, v in won.items() if a != axis)
            ]
            tried = sorted({c.values[axis] for c in line})
            if len(tried) < 2 or not isinstance(value, int | float):
                continue
            if value == tried[-1]:
                text, inner = f"{axis} at the highest tried ({value:g})", tried[-2]
            elif value == tried[0]:
                text, inner = f"{axis} at the lowest tried ({value:g})", tried[1]
            else:
                continue
            neighbour = next(c for c in line if c.values[axis] == inner)
            level = _level(best, neighbour, self.higher_is_better)
            out.append((f"{text}, level with {axis}={inner:g}" if level else text, level))
        return out


def _level(best: Candidate, neighbour: Candidate, higher_is_better: bool) -> bool:
    """Whether an edge winner is level with its inner neighbour (module docstring). Where both
    ran at two seeds or more (a winner that moved after its seeds ran, say), their means over
    their own seeds are compared as the ranks compare two rows (`contest_scores`, standard
    errors of the means): level unless the winner's mean wins, i.e. leads by more than the tie
    margin (a winner behind its neighbour over their seeds is level: a wider grid would not
    help it). Else the winner's lead on the tuning seed against one standard deviation of its
    own seeds' scores."""
    mine = [x for x in best.seed_scores if not math.isnan(x)]
    theirs = [x for x in neighbour.seed_scores if not math.isnan(x)]
    if len(mine) >= 2 and len(theirs) >= 2:
        means = pd.Series([statistics.fmean(mine), statistics.fmean(theirs)])
        errors = pd.Series([statistics.stdev(s) / math.sqrt(len(s)) for s in (mine, theirs)])
        return contest_scores(means, higher_is_better, errors).iloc[0] <= 0.5  # tie or behind
    return (
        len(mine) >= 2
        and not math.isnan(neighbour.score)
        and abs(best.score - neighbour.score) <= statistics.stdev(mine)
    )


def _split(text: str, axes: list[str]) -> tuple[str, str]:
    """(setting: task params without the axes, axis values present), both canonical JSON."""
    params = json.loads(text)
    setting = {k: v for k, v in params.items() if k not in axes}
    return json.dumps(setting, sort_keys=True), value_label(params, axes)


def select_tuned(
    frame: pd.DataFrame, infos: dict[str, TaskInfo]
) -> tuple[pd.DataFrame, list[Choice]]:
    """``frame`` (run rows with a ``machine`` column) with, for every task that declares tuning
    axes, only the winning candidate's rows per variant and setting (see the module docstring);
    and every group's choice. Other tasks' rows pass unchanged; ``tuned`` is "" on them."""
    frame = frame.assign(**{TUNED: ""})
    kept, choices = [frame[~frame["task"].isin(_tuned_tasks(infos))]], []
    for task in _tuned_tasks(infos):
        tuning = infos[task].tuning
        assert tuning is not None
        metric = infos[task].metric(tuning.select_by)
        higher = bool(metric.higher_is_better) if metric else True
        rows = frame[frame["task"] == task]
        if rows.empty:
            continue
        split = map_distinct(rows["task_params"], lambda t, axes=tuning.params: _split(t, axes))
        rows = rows.assign(setting=split.str[0], axis_values=split.str[1])
        for key, group in rows.groupby(GROUP, sort=True, dropna=False):
            choice = Choice(*key, select_by=tuning.select_by, higher_is_better=higher)
            picked = group[(group["status"] == "ok") & (group["metric"] == tuning.select_by)]
            per_seed = picked.groupby(["axis_values", "seed"])["value"].mean()
            labels = sorted(group["axis_values"].unique())
            by_label: dict[str, dict[int, float]] = {t: {} for t in labels}
            for (label, seed), value in per_seed.items():
                by_label[label][int(seed)] = float(value)
            scored = score_candidates(by_label)
            values = [json.loads(v) for v in labels]
            # name only the axes this group varies (icl_regression's prompt mode tunes lr; its
            # layer_lr is the unused default), all of them where nothing varies
            shown = differing_keys(values)
            choice.candidates = [
                Candidate(
                    v,
                    scored[t].score,
                    scored[t].n_seeds,
                    shown,
                    tuple(by_label[t][seed] for seed in sorted(by_label[t])),
                )
                for v, t in zip(values, labels, strict=True)
            ]
            best = winner(scored, higher)
            choice.winner = None if best is None else labels.index(best)
            choices.append(choice)
            if choice.winner is None:
                kept.append(group.drop(columns=["setting", "axis_values"]))
                continue
            won = choice.candidates[choice.winner]
            rows_won = group[group["axis_values"] == labels[choice.winner]]
            kept.append(
                rows_won.assign(task_params=rows_won["setting"], **{TUNED: won.label}).drop(
                    columns=["setting", "axis_values"]
                )
            )
    return pd.concat(kept).sort_index(), choices


def _tuned_tasks(infos: dict[str, TaskInfo]) -> list[str]:
    return sorted(t for t, info in infos.items() if info.tuning and info.tuning.params)


def tuning_table(choices: list[Choice], task: str) -> Table | None:
    """The choices of ``task`` with more than one candidate: variant, setting, the winning
    values, and every candidate's validation score (seeds in brackets); None if none."""
    mine = [c for c in choices if c.task == task and len(c.candidates) > 1]
    if not mine:
        return None
    settings = sorted({c.setting for c in mine})
    differing = differing_keys([json.loads(s) for s in settings])
    columns = [
        Column("variant", "variant"),
        Column("setting", "setting", "Task parameters that differ between settings"),
        Column(
            "chosen",
            "chosen",
            f"Best seed-averaged {mine[0].select_by} (validation split, over the seeds every "
            "value has); ⚠: at the grid's edge, so the best value may lie outside the grid; "
            "level: at the edge, but within one standard deviation of its seeds' scores of "
            "the value next to it (a plateau)",
        ),
        Column(
            "candidates",
            f"{mine[0].select_by} per value (seeds)",
            'Every value tried, over the seeds compared ("1 of 3": the winner ran two more)',
        ),
    ]
    rows = []
    for c in mine:
        setting = json.loads(c.setting)
        label = ", ".join(f"{k}={setting.get(k)}" for k in differing)
        chosen = c.candidates[c.winner].label if c.winner is not None else "none (no scores)"
        varied = c.candidates[0].shown or list(c.candidates[0].values)
        edges = [e for e in c.at_edge() if e.split(" ", 1)[0] in varied]
        if edges:
            chosen += " ⚠ grid edge: " + "; ".join(edges)
        level = [e for e in c.level_at_edge() if e.split(" ", 1)[0] in varied]
        if level:
            chosen += " (" + "; ".join(level) + ")"
        tried = "; ".join(
            f"{cand.label}: {format_value(cand.score)} ({cand.seeds})" for cand in c.candidates
        )
        rows.append(
            [Cell(c.variant, c.variant), Cell(label, label), Cell(chosen, chosen), Cell(tried, "")]
        )
    return Table(columns, rows)
