"""The chooser's quality columns (`views.chooser`): per ranked quality column of the overview, each
configuration's value, the settings that value is over in words, and the column the panel opens on.

**One number per configuration, over the column's common settings.** A column's rows may come
from several settings of its task (MQAR at several model widths and lengths). A *setting* is a
run's task parameters less those tuned per variant (`TaskInfo.tuning`: validation picked their
value) and the one that splits the task into columns (`TaskInfo.column_by`: the column names it),
with its curve position. The column's *common* settings are those measured for the most
configurations. A configuration's quality is the mean over the common settings of its value in
each (the mean of its seeds and machines), every setting weighing the same, so that a setting run
with three seeds does not count three times; it has one only where it was measured in every
common setting, since a mean over other settings would not compare. A configuration measured in
only some of them is *partial*: the panel names it with that reason instead of listing it.

**The settings are said beside the column** (`QualityColumn.setting`): how many, the parameters
that vary between them with their values, and the fixed ones a reader can name, each by the
label the task declares for it (`TaskInfo.axes`). A parameter the task leaves unnamed takes the
label another task of the board declares for the same name (most tasks' choice), else it is
counted ("and 8 more parameters"), not named.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field

import pandas as pd

from attnbench.harness.leaderboard.columns import Columns
from attnbench.harness.leaderboard.tables import map_distinct, param_text
from attnbench.metrics import Metric
from attnbench.task_info import TaskInfo

CONFIG = ["variant", "variant_params"]
SETTING = "setting"  # column: a row's setting as text (see the module docstring)
Config = tuple[str, str]


@dataclass
class QualityColumn:
    """One ranked quality column as the chooser offers it.

    Attributes:
        label: The column's name ("Associative recall (MQAR): recall accuracy").
        higher: Whether higher is better.
        setting: The settings its values are over, in words (see the module docstring).
        n_settings: How many common settings each value is a mean over.
        values: configuration → its quality, for those measured in every common setting.
        partial: configuration → how many of the common settings it was measured in, for
            those measured in some but not all.
    """

    label: str
    higher: bool
    setting: str
    n_settings: int
    values: dict[Config, float] = field(default_factory=dict)
    partial: dict[Config, int] = field(default_factory=dict)

    def entry(self) -> dict:
        """The page's description of the column (its values are sent apart)."""
        return {"label": self.label, "higher": self.higher, "setting": self.setting}


def quality_columns(columns: Columns, infos: dict[str, TaskInfo]) -> list[QualityColumn]:
    """The overview's ranked quality columns that have ok rows, in column order."""
    frame = columns.frame
    ok = frame[(frame["status"] == "ok") & ~frame["derived"].astype(bool) & frame["value"].notna()]
    found = []
    for h in columns.headlines:
        if h.cost or h.higher_is_better is None:
            continue
        rows = ok[(ok["task"] == h.task) & (ok["metric"] == h.metric)]
        info = infos.get(columns.task_of.get(h.task, h.task))
        if rows.empty or info is None:
            continue
        label = h.label or f"{h.task}: {h.metric}"
        found.append(_column(rows, info, infos, label, bool(h.higher_is_better)))
    return found


def _column(
    rows: pd.DataFrame, info: TaskInfo, infos: dict[str, TaskInfo], label: str, higher: bool
) -> QualityColumn:
    """The column of ``rows`` (one headline's ok rows), its values over its common settings."""
    params = map_distinct(rows["task_params"], lambda text: _setting_params(text, info))
    x = [
        {name: value} if isinstance(name, str) and pd.notna(value) else {}
        for name, value in zip(rows["x_name"], rows["x_value"], strict=True)
    ]
    settings = [{**p, **extra} for p, extra in zip(params, x, strict=True)]
    rows = rows.assign(**{SETTING: [json.dumps(s, sort_keys=True) for s in settings]})
    means = rows.groupby([*CONFIG, SETTING])["value"].mean()
    per_setting = means.groupby(level=SETTING).size()
    common = set(per_setting[per_setting == per_setting.max()].index)
    at_common = means[means.index.get_level_values(SETTING).isin(common)]
    have = at_common.groupby(level=CONFIG).size()
    mean = at_common.groupby(level=CONFIG).mean()
    column = QualityColumn(label, higher, "", len(common))
    column.values = {c: float(mean[c]) for c in have.index if have[c] == len(common)}
    column.partial = {c: int(have[c]) for c in have.index if have[c] < len(common)}
    for config in means.index.droplevel(SETTING).unique():
        if config not in have.index:  # measured only in settings others lack
            column.partial[config] = 0
    column.setting = setting_text([json.loads(s) for s in sorted(common)], info, infos)
    return column


def _setting_params(text: object, info: TaskInfo) -> dict:
    """A run's task parameters (JSON text) less the tuned ones and the column's own."""
    try:
        params = json.loads(str(text))
    except ValueError:
        return {}
    if not isinstance(params, dict):
        return {}
    dropped = set(info.tuning.params if info.tuning else []) | {info.column_by}
    return {k: v for k, v in params.items() if k not in dropped and v is not None}


def setting_text(settings: list[dict], info: TaskInfo, infos: dict[str, TaskInfo]) -> str:
    """The common ``settings`` (parameter dicts) of a column in words: "mean over 7 settings:
    key-value pairs 4, 8, 16; model width 16, 32, 64 (and 8 more parameters)", "one setting:
    sequence length 16 tokens, model width 64"."""
    keys = sorted({k for s in settings for k in s}, key=lambda k: _order(k, info))
    values = {k: sorted({json.dumps(s.get(k)) for s in settings}, key=_number_first) for k in keys}
    varying = [k for k in keys if len(values[k]) > 1]
    named = {k: m for k in keys if (m := _parameter(k, info, infos)) is not None}
    fixed = [_named(named[k], values[k]) for k in keys if k in named and k not in varying]
    if len(settings) <= 1:
        return "one setting" + (": " + ", ".join(fixed) if fixed else "")
    shown = [_named(named[k], values[k]) for k in varying if k in named]
    unnamed = sum(1 for k in varying if k not in named)
    text = f"mean over {len(settings)} settings"
    if shown:
        text += ": " + "; ".join(shown)
    if unnamed:
        text += f" (and {unnamed} more parameter{'s' if unnamed > 1 else ''})"
    if fixed:
        text += "; each at " + ", ".join(fixed)
    return text


def _order(key: str, info: TaskInfo) -> tuple[int, str]:
    """The task's declared parameters first, in its order, then the others by name."""
    declared = [a.name for a in info.axes]
    return (declared.index(key), "") if key in declared else (len(declared), key)


def _number_first(text: str) -> tuple[int, float, str]:
    value = json.loads(text)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return (0, float(value), "")
    return (1, 0.0, text)


def _parameter(key: str, info: TaskInfo, infos: dict[str, TaskInfo]) -> Metric | None:
    """The label ``info`` declares for the parameter ``key``, else the one most tasks of the
    board declare for it (the first by task name of ties), else None."""
    own = next((a for a in info.axes if a.name == key and a.label), None)
    if own is not None:
        return own
    others = [a for _, i in sorted(infos.items()) for a in i.axes if a.name == key and a.label]
    if not others:
        return None
    # most_common keeps the first seen of equal counts: the first by task name
    (label, unit), _ = Counter((a.label, a.unit) for a in others).most_common(1)[0]
    return Metric(key, None, "", unit, label=label)


def _named(parameter: Metric, texts: list[str]) -> str:
    """ "model width 16, 32, 64", "sequence length 128 tokens"."""
    shown = ", ".join(param_text(json.loads(t)) for t in texts)
    return f"{parameter.label} {shown}" + (f" {parameter.unit}" if parameter.unit else "")


def default_column(columns: list[QualityColumn], costed: set[Config]) -> int:
    """The index of the column the panel opens on.

    The rule: the column that lists the most configurations with a cost (its values among
    ``costed``, the configurations with a trusted cost of some budget), so that the first answer
    leaves out the fewest variants; of those, the one whose values are means over the most
    settings, a quality that rests least on one setting's chance; then the first in the
    overview's order. Declared nowhere: it follows from the rows, so it moves with them (on the
    reference board, MQAR's recall over seven settings, not a one-setting MAD task).
    """
    if not columns:
        return 0

    def weight(i: int) -> tuple[int, int, int]:
        column = columns[i]
        return (len(costed & column.values.keys()), column.n_settings, -i)

    return max(range(len(columns)), key=weight)
