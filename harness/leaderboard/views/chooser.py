""" "Which attention for my case": the reader picks a machine, a cost to budget, a position on its
curve axis (e.g. the context length), a limit and a quality column; the page lists the variants
within the limit, best quality first, marks those on the quality–cost frontier (no other listed
variant is at least as good for at most the cost), and names every variant it does not list,
with the reason.

Built here as data (`chooser_data`), drawn by the page's static JavaScript: no server, works from
``file://``. Every value comes from the rows the rest of the page shows and the tasks'
declarations:

- **budgets** (`budget_metrics`): the metrics a task declares a reader may budget
  (`TaskInfo.budgets`: decode's time per generated token and the state a sequence holds); a task
  that declares none offers its timings: the lower-is-better metrics it declares timed
  (`TaskInfo.steadiness`) in milliseconds, along its curve axis (throughput's forward and
  forward+backward time per call: a throughput and a training budget at a sequence length);
- **cost**: per budget, configuration (variant and its parameters), machine and curve position,
  the median over runs of the budget metric. Values its task flags unsteady or inaccurate
  (`harness.leaderboard.steadiness`) are left out, as in every contest, but not forgotten: a
  position or a budget whose every timing was unsteady is still offered, and the panel says that
  a busy machine removed them;
- **quality** (`views.chooser_quality`): per ranked quality column, each configuration's mean
  over the column's common settings, which the panel states beside the column; it opens on the
  column that lists the most variants (`default_column`);
- **left out** (`views.chooser_reasons`): why each variant it does not list is not listed.

A configuration is listed only where both were measured *for that configuration* (the same
variant parameters): a quality of one setting is never paired with the cost of another under one
name.
"""

from __future__ import annotations

import json

import pandas as pd

from attnbench.harness.leaderboard.columns import Columns
from attnbench.harness.leaderboard.ranking import MACHINE
from attnbench.harness.leaderboard.steadiness import untrusted
from attnbench.harness.leaderboard.tables import (
    Words,
    config_labels,
    differing_keys,
    map_distinct,
    setting_label,
    size_params_of,
)
from attnbench.harness.leaderboard.views.chooser_quality import (
    QualityColumn,
    default_column,
    quality_columns,
)
from attnbench.harness.leaderboard.views.chooser_reasons import OK, BudgetWords, left_out
from attnbench.harness.results.metric_points import steadiness_flags
from attnbench.task_info import TaskInfo

CONFIG = ["variant", "variant_params"]
POINT = [*CONFIG, MACHINE, "x_value"]
TIME_UNIT = "ms"  # the unit a timing must have to be offered as a budget (the page reads s, µs)


def budget_metrics(info: TaskInfo) -> list[str]:
    """The metrics of ``info`` a reader may budget: those it declares (`TaskInfo.budgets`), else
    its timings: the lower-is-better metrics it declares timed (keys of `TaskInfo.steadiness`)
    in milliseconds, in its declared order. A time relative to another kernel's is no budget: it
    says nothing of how long a call takes on the reader's machine."""
    if info.budgets:
        return list(info.budgets)
    return [
        m.name
        for m in info.metrics
        if m.name in info.steadiness and m.higher_is_better is False and m.unit == TIME_UNIT
    ]


def _ok(frame: pd.DataFrame) -> pd.DataFrame:
    done = (frame["status"] == "ok") & ~frame["derived"].astype(bool)
    return frame[done & frame["metric"].notna() & frame["value"].notna()]


def _verdicts(mine: pd.DataFrame, task: str, info: TaskInfo) -> pd.Series:
    """Per row of ``mine`` (one task's ok rows), `OK`, ``"unsteady"`` (its timing's steadiness
    flag is 0: the machine was busy) or ``"inaccurate"`` (else untrusted: its kernel erred)."""
    bad = untrusted(mine)
    verdict = pd.Series(OK, index=mine.index, dtype=object)
    if not bad.any():
        return verdict
    pairs = [(task, metric, flag) for metric, flag in info.steadiness.items()]
    busy = steadiness_flags(mine, pairs) == 0.0
    verdict[bad] = "inaccurate"
    verdict[bad & busy] = "unsteady"
    return verdict


def cost_points(frame: pd.DataFrame, infos: dict[str, TaskInfo]):
    """The budgets of ``frame``'s finished rows, how reasons name them, and their points
    (`_budget_points`); also what `views.length_ranks` ranks."""
    return _budget_points(_ok(frame), infos)


def _budget_points(ok: pd.DataFrame, infos: dict[str, TaskInfo]):
    """The budgets with rows ({label, unit, axis, position, busy}), how reasons name them, and
    their points: one row per budget, configuration, machine and curve position, with ``value``
    the median of its trusted values (NaN: none) and ``verdict`` (`OK`, else why none is)."""
    budgets, words, points = [], [], []
    for task, info in sorted(infos.items()):
        mine = ok[ok["task"] == task]
        if mine.empty:
            continue
        verdicts = _verdicts(mine, task, info)
        for metric in budget_metrics(info):
            rows = mine[(mine["metric"] == metric) & mine["x_value"].notna()]
            if rows.empty:
                continue
            x_name = rows["x_name"].iloc[0]
            rows = rows[rows["x_name"] == x_name].assign(verdict=verdicts)
            axis = next((a for a in info.axes if a.name == x_name), None)
            for setting, part in _settings(rows, x_name, Words(info)):
                budgets.append(_budget(info, metric, x_name, setting))
                title = info.metric_title(metric) + (f" ({setting})" if setting else "")
                words.append(BudgetWords(title, axis.unit if axis else ""))
                points.append(_points(part).assign(budget=len(budgets) - 1))
    frame = pd.concat(points, ignore_index=True) if points else pd.DataFrame()
    for b, budget in enumerate(budgets):
        budget["busy"] = _busy(frame.loc[frame["budget"] == b, "verdict"])
    return budgets, words, frame


def _settings(rows: pd.DataFrame, x_name: str, words: Words) -> list[tuple[str, pd.DataFrame]]:
    """``rows`` (one budget metric's) split by their task settings apart from the curve axis
    ``x_name``, each with its label in words ("batch size 64"; "" where there is one setting):
    a time per call at batch 64 and one at batch 1 are two budgets, never one median."""
    settings = map_distinct(rows["task_params"], lambda t: _without(t, x_name))
    texts = sorted(settings.unique())
    if len(texts) == 1:
        return [("", rows)]
    params = {t: json.loads(t) for t in texts}
    names = differing_keys(list(params.values()))
    return [(setting_label(params[t], names, words), rows[settings == t]) for t in texts]


def _without(params: object, key: str) -> str:
    """The task parameters' JSON text without ``key`` (the curve axis), keys sorted."""
    values = json.loads(params) if isinstance(params, str) and params else {}
    values.pop(key, None)
    return json.dumps(values, sort_keys=True)


def _budget(info: TaskInfo, metric: str, x_name: str, setting: str = "") -> dict:
    declared = info.metric(metric)
    axis = next((a for a in info.axes if a.name == x_name), None)
    at = f" ({setting})" if setting else ""
    return {
        "label": f"{info.title}: {info.metric_title(metric)}{at}",
        "unit": declared.unit if declared else "",
        "axis": info.axis_title(x_name),
        "position": [axis.title, axis.unit] if axis else [x_name, ""],
    }


def _points(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per `POINT` of ``rows`` (one budget's): the median of its trusted values, and its
    verdict: `OK` where it has one, else unsteady where any of its timings was, else
    inaccurate."""
    trusted = rows[rows["verdict"] == OK].groupby(POINT)["value"].median()
    worst = rows.groupby(POINT)["verdict"].agg(
        lambda v: OK if (v == OK).any() else ("unsteady" if (v == "unsteady").any() else v.iloc[0])
    )
    return pd.DataFrame({"value": trusted, "verdict": worst}).reset_index()


def chooser_data(frame: pd.DataFrame, columns: Columns, infos: dict[str, TaskInfo]) -> dict | None:
    """The panel's data (see the module docstring); None where no budget metric or no quality
    column has a value."""
    if frame.empty:
        return None
    budgets, words, points = cost_points(frame, infos)
    qualities = quality_columns(columns, infos)
    if points.empty or not qualities:
        return None
    configs = _configs(points, qualities)
    labels = config_labels(pd.DataFrame(configs, columns=CONFIG), size_params_of(frame))
    index = {c: i for i, c in enumerate(configs)}
    costs = points[points["verdict"] == OK]
    costed = set(map(tuple, costs[CONFIG].values))
    # the costs the page can list: of configurations with a quality (the others' variants are
    # named with their reason), which the summary's cheapest and dearest are chosen among too
    rated = {c for q in qualities for c in q.values}
    costs = costs[[tuple(c) in rated for c in costs[CONFIG].values]]
    return {
        "budgets": budgets,
        "qualities": [q.entry() for q in qualities],
        "default_quality": default_column(qualities, costed),
        "configs": [labels[c] for c in configs],
        "quality": [{str(index[c]): v for c, v in q.values.items()} for q in qualities],
        "machines": sorted(points[MACHINE].astype(str).unique().tolist()),
        "positions": _positions(points),
        "cost": [
            [
                int(r.budget),
                str(getattr(r, MACHINE)),
                float(r.x_value),
                index[(r.variant, r.variant_params)],
                float(r.value),
            ]
            for r in costs.itertuples(index=False)
        ],
        "left_out": left_out(points, qualities, words, labels),
    }


def _configs(points: pd.DataFrame, qualities: list[QualityColumn]) -> list[tuple[str, str]]:
    """Every configuration with a budget point or a quality, sorted."""
    found = set(map(tuple, points[CONFIG].values))
    for q in qualities:
        found |= set(q.values) | set(q.partial)
    return sorted(found)


def _positions(points: pd.DataFrame) -> list[list]:
    """[budget, machine, [positions], busy]: where each budget was measured on each machine,
    trusted or not (a position whose every timing was unsteady is still offered, and says so),
    and whether a busy machine left it no trusted value there at all."""
    out = []
    for (b, machine), rows in points.groupby(["budget", MACHINE]):
        xs = sorted(float(x) for x in rows["x_value"].unique())
        out.append([int(b), str(machine), xs, _busy(rows["verdict"])])
    return out


def _busy(verdicts: pd.Series) -> bool:
    """Whether these points' timings were unsteady and none is trusted."""
    return bool((verdicts == "unsteady").any() and not (verdicts == OK).any())


def embeddable(data: dict) -> str:
    """``data`` as JSON safe inside a <script> element: ``<``, ``>`` and ``&`` as ``\\u``
    escapes, so that no name in it can end the element (the page sets it as text, never as
    markup)."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
