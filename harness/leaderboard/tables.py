"""Tables of the leaderboard: per-task result tables and the list of unfinished runs.

Everything here works on the tidy results table (see `harness.results.collect`) and returns plain
data; rendering is the template's job.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from attnbench.harness.jobs.records import is_run_id
from attnbench.harness.results.fit_quality import RELIABLE_SUFFIX
from attnbench.task_info import TaskInfo

ARROWS = {True: "↑", False: "↓"}


@dataclass
class Column:
    """A table column: key, header text, hover description, direction, and the curve axis of
    its points where they lie on one (a value at the row's own setting of that axis)."""

    key: str
    header: str
    description: str = ""
    higher_is_better: bool | None = None
    axis: str = ""

    @property
    def arrow(self) -> str:
        """↑ / ↓ / empty, for the header."""
        return ARROWS.get(self.higher_is_better, "")


UNSTEADY_MARK = "~"  # before a value that rests on unsteady timings (attnbench.toolkit.timing)
INACCURATE_MARK = "✗"  # before a timing of a kernel outside its declared error tolerance


@dataclass
class Cell:
    """One table cell: display text, sort value, whether it is the best of its group, and a
    note shown on hover (e.g. why a value is marked unsteady)."""

    text: str
    sort: float | str
    best: bool = False
    links: list[tuple[str, str]] = field(default_factory=list)  # (href, text) after the text
    note: str = ""
    hint: str = ""  # hover text that marks nothing (e.g. which kernel a timing ran)


@dataclass
class Table:
    """A rendered-ready table."""

    columns: list[Column]
    rows: list[list[Cell]] = field(default_factory=list)


def format_value(value: float) -> str:
    """Three significant figures, plain notation where it reads well."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if value != 0 and (abs(value) >= 1e5 or abs(value) < 1e-3):
        return f"{value:.3g}"
    return f"{value:.4g}"


MAX_DENOMINATOR = 1024  # a parameter 1/k up to this k is written as the fraction
FRACTION_TOLERANCE = 1e-5  # 1/k to six figures (0.333333) is 1/k; 0.0012345 is not 1/810
LABEL_DIGITS = 4  # significant figures of a float in a label ("0.1235", not "0.123456789")


def param_text(value: object) -> str:
    """A parameter's value as a label shows it: a float with more than three significant
    figures that is 1/k for a whole k written as "1/k" (a stride of n/3 stored as 0.333333 reads
    "1/3", a block of n/32 "1/32"), a whole float as an integer, any other float to
    `LABEL_DIGITS` significant figures, anything else as text.

    Example:
        >>> [param_text(v) for v in (0.333333, 0.03125, 0.2, 64, 65536.0, 0.123456789)]
        ['1/3', '1/32', '0.2', '64', '65536', '0.1235']
    """
    if not isinstance(value, float) or not math.isfinite(value):
        return str(value)
    if value.is_integer():
        return str(int(value))
    digits = len(f"{value:g}".lstrip("-0.").replace(".", "").split("e")[0])
    if 0 < value < 1 and digits > 3:
        k = round(1 / value)
        if 1 < k <= MAX_DENOMINATOR and abs(k * value - 1) < FRACTION_TOLERANCE:
            return f"1/{k}"
    return _rounded(value)


def _rounded(value: float) -> str:
    """``value`` to `LABEL_DIGITS` significant figures, in plain notation from 0.001 to a
    million ("1234", "0.1235"), else in ``g`` format."""
    if not 1e-3 <= abs(value) < 1e6:
        return f"{value:.{LABEL_DIGITS}g}"
    decimals = max(0, LABEL_DIGITS - 1 - math.floor(math.log10(abs(value))))
    text = f"{value:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


SIZE_PARAMS = "variant_size_params"  # the table's column: a variant's pattern-size parameters


def size_text(value: object) -> str:
    """A pattern size (`AttentionVariant.size_params`) as a label shows it: a fraction of the
    sequence as a fraction of n, a whole count as itself.

    Example:
        >>> [size_text(v) for v in (0.2, 0.333333, 0.03125, 256)]
        ['0.2n', 'n/3', 'n/32', '256']
    """
    if isinstance(value, float) and 0 < value < 1:
        text = param_text(value)
        return f"n/{text[2:]}" if text.startswith("1/") else f"{text}n"
    return param_text(value)


def size_params_of(frame: pd.DataFrame) -> dict[str, set[str]]:
    """variant → the parameters its records name as pattern sizes (none in tables collected
    before records named them: their labels show the plain values)."""
    if SIZE_PARAMS not in frame.columns or "variant" not in frame.columns:
        return {}
    found: dict[str, set[str]] = {}
    for variant, text in frame[["variant", SIZE_PARAMS]].drop_duplicates().itertuples(index=False):
        if isinstance(text, str) and text:
            found.setdefault(str(variant), set()).update(text.split(","))
    return found


# Words for identifiers. A task names what the page shows (`Metric.label`, `TaskInfo.axes`);
# where it names nothing, the page still reads in words: a short lead of the metric's declared
# description, else the identifier spelled out (`spelled`). The identifier itself stays in hovers.

IDENTIFIER = re.compile(r"\b[A-Za-z][A-Za-z0-9]*(?:[_.][A-Za-z0-9]+)+\b")  # snake_case, a.b
UNIT_TOKENS = {"ms": "ms", "us": "µs", "ns": "ns", "mib": "MiB", "gib": "GiB", "kib": "KiB"}
ABBREVIATIONS = {  # measurement vocabulary, not any task's or variant's names
    "abs": "absolute",
    "avg": "average",
    "bwd": "backward",
    "ci": "CI",
    "cpu": "CPU",
    "dist": "distribution",
    "fwd": "forward",
    "gd": "GD",
    "gflops": "GFLOP/s",
    "gpu": "GPU",
    "iqr": "IQR",
    "kv": "key-value",
    "len": "length",
    "lr": "learning rate",
    "ls": "least squares",
    "mem": "memory",
    "mse": "MSE",
    "ref": "reference",
    "rel": "relative",
    "rms": "RMS",
    "se": "standard error",
    "seq": "sequence",
    "val": "validation",
    "wd": "weight decay",
}
DESCRIPTION_CHARS = 100  # a description's lead longer than this is no header


def spelled(identifier: str) -> str:
    """An identifier spelled out in words, for what no declaration names: the parts between
    underscores and dots, common abbreviations written out (`ABBREVIATIONS`), a unit part as a
    trailing "(unit)", "0p5" as 0.5, "q05" as a 5% quantile, a leading "n" before a plural as
    "number of".

    Example:
        >>> [spelled(n) for n in ("fwd_ms_iqr", "tokens_per_s", "n_kv_pairs", "mse_x_scale_0p5")]
        ['forward IQR (ms)', 'tokens per second', 'number of key-value pairs', 'MSE x scale 0.5']
    """
    parts = [p for p in re.split(r"[_.]", identifier) if p]
    unit = ""
    out: list[str] = []
    for i, part in enumerate(parts):
        lower = part.lower()
        if lower in UNIT_TOKENS and (i == 0 or parts[i - 1] != "per") and len(parts) > 1:
            unit = UNIT_TOKENS[lower]
        elif lower == "s" and i > 0 and parts[i - 1] == "per":
            out.append("second")
        elif lower == "n" and i == 0 and len(parts) > 1 and parts[-1].endswith("s"):
            out.append("number of")
        elif re.fullmatch(r"\d+p\d+", lower):
            out.append(lower.replace("p", "."))
        elif re.fullmatch(r"q\d\d", lower):
            out.append(f"{int(lower[1:])}% quantile")
        else:
            out.append(ABBREVIATIONS.get(lower, part))
    return " ".join(out) + (f" ({unit})" if unit else "")


def value_words(value: object) -> str:
    """A setting's value as a label shows it: a number through `param_text`, an identifier with
    its underscores as spaces ("one_layer" reads "one layer"), any other text as it is."""
    if isinstance(value, str):
        return value.replace("_", " ") if re.fullmatch(r"\w+", value) else value
    return param_text(value)


def description_title(description: str) -> str:
    """A short title from a metric's declared description: its lead (before "; " or " — ",
    asides in parentheses dropped), lower-cased where it does not start with an acronym; ""
    where that lead is long, names an identifier, or states a 0/1 flag ("1: …")."""
    text = re.sub(r"\s+\([^()]*\)(?=[\s,;:.]|$)", "", description)
    text = re.split(r"; | — |\. ", text)[0].strip().rstrip(".")
    if not text or len(text) > DESCRIPTION_CHARS or IDENTIFIER.search(text):
        return ""
    if re.match(r"[01]:", text):
        return ""
    return text if text[:2].isupper() else text[0].lower() + text[1:]


def flag_title(description: str) -> str:
    """A 0/1 flag's title as a question from its description ("1: the samples settled" reads
    "samples settled?"); "" where the description states no flag or its words will not do."""
    found = re.match(r"1:\s*(?:the\s+)?(.*)", description)
    if not found:
        return ""
    text = description_title(found.group(1))
    return f"{text}?" if text else ""


@dataclass(frozen=True)
class Words:
    """How the page names one task's metrics, axes and settings: what the task declares
    (`TaskInfo`), else words for the identifiers (`description_title`, `spelled`).

    Attributes:
        info: The task's declarations (None: a task the table does not describe).
    """

    info: TaskInfo | None = None

    def metric(self, name: str) -> str:
        """A metric's title: its label; a scaling fit's in words; a name that is one word as
        it is; its description's lead (a flag's as a question); a labelled metric's name with
        a part before or after it in words ("val_mse_mean" as "validation" and the label of
        "mse_mean"); else its identifier spelled out (`spelled`)."""
        declared = self.info.metric(name) if self.info else None
        if declared is not None and declared.label:
            return declared.label
        fit = self._fit_title(name)
        if fit or not IDENTIFIER.fullmatch(name):
            return fit or name
        described = declared.description if declared is not None else ""
        flag = described.startswith("1:")
        title = flag_title(described) or description_title(described) or self._compound(name)
        return title or spelled(name) + "?" * flag

    def _compound(self, name: str) -> str:
        """ "<label> <words>" where ``name`` is a labelled metric's name and a suffix (or a
        prefix and the name), the longest such; "" where none is."""
        labelled = [m for m in self.info.all_metrics() if m.label] if self.info else []
        for m in sorted(labelled, key=lambda m: -len(m.name)):
            if name.startswith(m.name + "_"):
                return f"{m.label} {spelled(name[len(m.name) + 1 :])}"
            if name.endswith("_" + m.name):
                return f"{spelled(name[: -len(m.name) - 1])} {m.label}"
        return ""

    def metric_unit(self, name: str) -> str:
        """The metric's title with its declared unit: "state per sequence (bytes)"."""
        declared = self.info.metric(name) if self.info else None
        title = self.metric(name)
        unit = declared.unit if declared else ""
        return f"{title} ({unit})" if unit and f"({unit})" not in title else title

    def axis(self, name: str, unit: bool = True) -> str:
        """A curve axis or task parameter: its declared label (`TaskInfo.axes`), else a metric
        of that name (an axis may be a measured quantity), else the name in words; with its
        unit if ``unit``."""
        declared = next((a for a in self.info.axes if a.name == name), None) if self.info else None
        if declared is not None and declared.label:
            return declared.axis_title if unit else declared.label
        if self.info is not None and self.info.metric(name) is not None:
            return self.metric_unit(name) if unit else self.metric(name)
        return spelled(name)

    def setting(self, name: str, value: object) -> str:
        """One parameter of a setting: "model width 16", "sequence length 128 tokens",
        "mode one layer"."""
        declared = next((a for a in self.info.axes if a.name == name), None) if self.info else None
        unit = f" {declared.unit}" if declared is not None and declared.unit else ""
        return f"{self.axis(name, unit=False)} {value_words(value)}{unit}"

    def _fit_title(self, name: str) -> str:
        """The title of a metric a scaling fit adds (`ScalingFit.metrics`), "" for others."""
        for fit in self.info.scaling_fits if self.info else []:
            added = [fit.name, f"{fit.name}_ci_low", f"{fit.name}_ci_high"]
            added += [fit.name + RELIABLE_SUFFIX, fit.crossover_name * bool(fit.reference_variant)]
            if name not in added or name == fit.metric:
                continue
            exponent = f"exponent of {self.metric(fit.metric)} against {self.axis(fit.axis, False)}"
            crossover = f"{self.axis(fit.axis)} where it overtakes {fit.reference_variant}"
            return {
                fit.name: exponent,
                f"{fit.name}_ci_low": f"{exponent}, 95% CI low end",
                f"{fit.name}_ci_high": f"{exponent}, 95% CI high end",
                fit.name + RELIABLE_SUFFIX: "fit believable?",
                fit.crossover_name: crossover,
            }[name]
        return ""


def config_labels(
    entries: pd.DataFrame, sizes: dict[str, set[str]] | None = None
) -> dict[tuple[str, str], str]:
    """(variant, params JSON) → its label: the name alone where a variant has one configuration,
    else the name and only the parameters that differ between its configurations (those whose
    value is None left out; each name in words, "n random"), a pattern size as a fraction of n
    where ``sizes`` (`size_params_of`) names it: `window window=0.2n` beside `window
    window=256`, quality at matched density beside timing at the paper's size, so that a label
    says what sets the rows apart. The one labelling of configurations: the overview's rows,
    the chooser, every chart's legend."""
    sizes = sizes or {}
    labels = {}
    for variant, group in entries.groupby("variant"):
        texts = sorted(set(group["variant_params"]))
        params = {t: json.loads(t) if t else {} for t in texts}
        differing = differing_keys(list(params.values())) if len(texts) > 1 else []
        own = sizes.get(str(variant), set())
        for text, p in params.items():
            shown = [
                f"{spelled(k)}={size_text(p[k]) if k in own else param_text(p[k])}"
                for k in differing
                if p.get(k) is not None
            ]
            labels[(variant, text)] = " ".join([str(variant), ", ".join(shown)]).strip()
    return labels


def setting_label(params: dict, names: list[str], words: Words | None = None) -> str:
    """ "mode=prompt, n_dims=8": the parameters ``names`` of a setting, those whose value is
    None (a parameter this setting does not use) left out; with ``words``, each as the task
    names it ("mode prompt, number of dims 8", `Words.setting`)."""
    shown = [k for k in names if params.get(k) is not None]
    if words is not None:
        return ", ".join(words.setting(k, params[k]) for k in shown)
    return ", ".join(f"{k}={param_text(params[k])}" for k in shown)


def distinct_headers(columns: list[Column], told: Callable[[Column], list[str]]) -> None:
    """Headers that no two of ``columns`` share: in each round, every column whose header
    another has gets the next of its texts ``told(column)`` appended (an empty text: none this
    round), e.g. first the curve axis its value sits at, then the metric's name in words; a
    clash left after them gets its position among the clashing, " (2)"."""
    rounds = max((len(told(c)) for c in columns), default=0)
    for step in range(rounds + 1):
        counts = Counter(c.header for c in columns)
        clashing = [c for c in columns if counts[c.header] > 1]
        if not clashing:
            return
        seen: Counter[str] = Counter()
        for col in clashing:
            texts = told(col)
            if step < rounds:
                col.header += texts[step] if step < len(texts) else ""
            else:
                seen[col.header] += 1
                col.header += f" ({seen[col.header]})" if seen[col.header] > 1 else ""


def differing_keys(params: list[dict]) -> list[str]:
    """The keys, sorted, whose values are not the same in every dict of ``params`` (a key some
    dicts lack differs); what a label must name to tell settings or configurations apart."""
    names = sorted({k for p in params for k in p})
    return [k for k in names if len({repr(p.get(k)) for p in params}) > 1]


def map_distinct(column: pd.Series, fn: Callable[[Any], Any]) -> pd.Series:
    """``fn`` of each value of ``column``, computed once per distinct value (a table repeats a
    run's parameters on every one of its metric rows: thousands of rows, a few dozen texts)."""
    distinct = pd.unique(column)
    return column.map(dict(zip(distinct, [fn(v) for v in distinct], strict=True)))


def expand_params(frame: pd.DataFrame, column: str, prefix: str) -> pd.DataFrame:
    """The JSON-text column ``column`` as one column per parameter, named ``prefix.key``."""
    codes, texts = pd.factorize(frame[column], use_na_sentinel=False)
    distinct = pd.json_normalize([json.loads(t) for t in texts])
    params = (
        distinct.take(codes) if len(distinct.columns) else pd.DataFrame(index=range(len(codes)))
    )
    params.index = frame.index
    return params.add_prefix(f"{prefix}.")


def varying(frame: pd.DataFrame, within: pd.Series | None = None) -> list[str]:
    """Columns of ``frame`` that take more than one value (within a group of ``within``, if given).

    A parameter that only some rows have (another variant's) is not a setting of the others:
    with ``within=variant`` only parameters that differ between runs of one variant count.
    """

    def keys(col: pd.Series) -> pd.Series:  # lists and dicts compare by their text
        return col.map(repr) if col.dtype == object else col

    if within is None:
        return [c for c in frame.columns if keys(frame[c]).nunique(dropna=False) > 1]
    found = []
    for c in frame.columns:
        col = frame[c].dropna()
        if (keys(col).groupby(within.loc[col.index]).nunique() > 1).any():
            found.append(c)
    return found


def key_columns(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """``frame`` with its grouping keys made safe: missing values shown as "–" (pandas drops rows
    whose group key is missing) and lists/dicts as text; numbers stay numbers where complete."""
    frame = frame.copy()
    for key in keys:
        col = frame[key]
        if col.isna().any() or col.map(lambda x: isinstance(x, (list, dict))).any():
            frame[key] = col.map(_key_text)
    return frame


def _numbers_first(col: pd.Series) -> pd.Series:
    """Sort key: numbers (also numbers shown as text) in numeric order, then other text."""

    def order(value: object) -> tuple:
        try:
            return (0, float(value), "")  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return (1, 0.0, str(value))

    return col.map(order)


def _key_text(value: object) -> str:
    if value is None or value != value:  # None or NaN
        return "–"
    if isinstance(value, float) and value.is_integer():  # ints turned float by missing values
        return str(int(value))
    return str(value)


def task_table(
    ok: pd.DataFrame,
    metric_info: dict[str, tuple[str, bool | None]],
    run_link: str | None = None,
    linked: Collection[str] | None = None,
    steadiness: dict[str, str] | None = None,
    accuracy: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    flags: Collection[str] = (),
    convergence: dict[str, str] | None = None,
) -> Table:
    """One row per (variant, its parameters, machine, dtype, task setting); one column per metric.

    Values are means over seeds. A point whose curve coordinate is the job's own setting (e.g.
    throughput's seq_len) is a plain value; a metric reported along a curve (e.g. error by number
    of examples) is shown as its mean over the curve, and its header says so. The best value of
    each metric among rows that share a setting (same task parameters, machine and dtype) is marked.

    Args:
        ok: Rows of one task with status ok.
        metric_info: metric → (description, higher_is_better), in display order.
        run_link: Format of a link to a run's record (``{run_id}``); adds a "runs" column whose
            cell links every run behind the row (config, seed, commit, versions, machine).
        linked: The run_ids whose records are there to link (default: all). Whatever the
            default, only a run_id of the hash form becomes a link
            (`harness.jobs.records.is_run_id`): the table is input, and ``../../x`` or a quote
            must not become a path or an href.
        steadiness: metric → its 0/1 steadiness flag metric (`TaskInfo.steadiness`). A value
            whose row has the flag below 1 (a seed's timing was unsteady) is marked with
            UNSTEADY_MARK and a note, and is never the best of its group; rows without the
            flag (older records) are not marked.
        accuracy: metric → its 0/1 accuracy flag metric (`TaskInfo.accuracy`): a value whose
            kernel erred beyond its declared tolerance in a seed is marked with INACCURATE_MARK
            and a note, and is never the best of its group.
        convergence: trained metric → its run's 0/1 convergence flag (`TaskInfo.convergence`,
            recorded once per run): a value of a run still learning at its cap is marked with
            UNSTEADY_MARK and its own note, and is never the best of its group.
        annotations: metric → the header of a text column showing the text its points carry
            (`TaskInfo.annotations`, e.g. "kernel path"); the text is also in the hover of
            each of the metric's cells. Metrics sharing a header share the column.
        flags: 0/1 metrics (a timing's steadiness, a fit's believability) whose cells read
            "yes" and "no" (a mean over seeds between them: the share of yes).
    """
    wide = _wide(ok)
    annotations = annotations or {}
    metrics = _metric_order(wide.metric_columns, metric_info)
    table = Table(columns=_task_columns(wide.keys, metrics, metric_info, run_link is not None))
    for col in table.columns:
        col.axis = wide.axes.get(col.key, "")
    sizes = size_params_of(ok)
    headers = list(dict.fromkeys(annotations[_base(m)] for m in metrics if _base(m) in annotations))
    at = len(table.columns) - (run_link is not None)
    table.columns[at:at] = [Column(f"annotation:{h}", h) for h in headers]
    means = wide.means
    steady = {m: _steady_share(means, m, _base(m), steadiness or {}) for m in metrics}
    accurate = {m: _steady_share(means, m, _base(m), accuracy or {}) for m in metrics}
    learned = {m: _steady_share(means, m, _base(m), convergence or {}) for m in metrics}
    group_keys = ["machine", "dtype", *wide.settings]
    best = _best_rows(means, metrics, metric_info, group_keys, (steady, accurate, learned))
    for i, row in means.iterrows():
        own = sizes.get(str(row["variant"]), set())
        cells = [Cell(_key_text_of(k, row[k], own), _sortable(row[k])) for k in wide.keys]
        key = tuple(row[k] for k in wide.keys)
        notes = {m: wide.annotations.get((*key, m), "") for m in metrics}
        cells += [
            _noted(
                _value_cell(
                    row[m], steady[m][i], i in best.get(m, ()), accurate[m][i], learned[m][i]
                ),
                notes[m],
            )
            for m in metrics
        ]
        for cell, m in zip(cells[len(wide.keys) :], metrics, strict=True):
            if _base(m) in flags:
                cell.text = _yes_no(row[m])
        for header in headers:
            text = next(
                (notes[m] for m in metrics if annotations.get(_base(m)) == header and notes[m]), ""
            )
            cells.append(Cell(text, text))
        if run_link is not None:
            cells.append(_runs_cell(wide, row, run_link, linked))
        table.rows.append(cells)
    return table


@dataclass
class _Wide:
    """A task table's values: one row per key, one column per metric column.

    Attributes:
        means: The key columns, then each metric column's mean over seeds; rows sorted by key.
        metric_columns: The metric columns (a metric, or "metric (mean over x)").
        keys: variant, its varying parameters, machine, dtype, the varying task parameters.
        settings: The varying task parameters.
        runs: key → the run_ids behind it.
    """

    means: pd.DataFrame
    metric_columns: list[str]
    keys: list[str]
    settings: list[str]
    runs: pd.Series
    annotations: dict[tuple, str] = field(default_factory=dict)  # (*key, column) → its text
    axes: dict[str, str] = field(default_factory=dict)  # metric column → its points' curve axis


def _wide(ok: pd.DataFrame) -> _Wide:
    """The values of the rows of ``ok`` with a metric, by key and metric column."""
    ok = ok[ok["metric"].notna()]
    task_params = expand_params(ok, "task_params", "task")
    variant_params = expand_params(ok, "variant_params", "variant")
    setting_cols = varying(task_params)
    vparam_cols = varying(variant_params, within=ok["variant"])
    frame = pd.concat([ok, task_params[setting_cols], variant_params[vparam_cols]], axis=1)
    keys = ["variant", *vparam_cols, "machine", "dtype", *setting_cols]
    frame = key_columns(frame, keys)
    frame["metric"] = _column_names(ok, task_params)
    wide = frame.pivot_table(index=keys, columns="metric", values="value", aggfunc="mean")
    runs = frame.groupby(keys)["run_id"].unique()
    means = wide.reset_index().sort_values(keys, key=_numbers_first, ignore_index=True)
    on_curve = frame[frame["x_name"].notna()].groupby("metric")["x_name"].first()
    return _Wide(
        means,
        list(wide.columns),
        keys,
        setting_cols,
        runs,
        _annotation_texts(frame, keys),
        {str(c): str(x) for c, x in on_curve.items() if c == _base(str(c))},
    )


def _key_text_of(key: str, value: object, sizes: Collection[str]) -> str:
    """A key cell's text: a parameter's number as labels write it (a pattern size of the row's
    variant, ``sizes``, as a fraction of n: "n/3", not 0.3333333333333333), anything else as
    it is."""
    if not key.startswith(("variant.", "task.")):
        return str(value)
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return str(value)
    if math.isnan(number) or isinstance(value, bool):
        return str(value)
    number = int(number) if number.is_integer() else number
    name = key.split(".", 1)[1]
    return size_text(number) if key.startswith("variant.") and name in sizes else param_text(number)


def _yes_no(value: object) -> str:
    """A 0/1 flag's mean over seeds in words: "yes", "no", or "yes in 67%"."""
    if pd.isna(value):
        return "–"
    share = float(value)  # type: ignore[arg-type]
    return "yes" if share == 1 else "no" if share == 0 else f"yes in {share:.0%}"


def _annotation_texts(frame: pd.DataFrame, keys: list[str]) -> dict[tuple, str]:
    """(*key, metric column) → the distinct annotations of its points (`TaskInfo.annotations`:
    e.g. the kernel path of a timing), joined with "; "."""
    if "annotation" not in frame:
        return {}
    noted = frame[frame["annotation"].fillna("").astype(str) != ""]
    texts = noted.groupby([*keys, "metric"])["annotation"].agg(lambda s: "; ".join(sorted(set(s))))
    return {k if isinstance(k, tuple) else (k,): v for k, v in texts.items()}


def _base(column: str) -> str:
    """The metric behind a table column ("metric (mean over x)" or the metric itself)."""
    return column.split(" (mean over ")[0]


def _column_info(
    metric_info: dict[str, tuple[str, bool | None]], column: str
) -> tuple[str, bool | None]:
    """(description, higher_is_better) of the metric behind ``column``."""
    return metric_info.get(_base(column), ("", None))


def _metric_order(columns: list[str], metric_info: dict[str, tuple[str, bool | None]]) -> list:
    """The metric columns in table order: declared metrics in declaration order, each before its
    curve mean; the rest by name."""
    order = list(metric_info)
    return sorted(
        columns,
        key=lambda c: (order.index(_base(c)) if _base(c) in metric_info else len(order), c),
    )


def _task_columns(
    keys: list[str],
    metrics: list[str],
    metric_info: dict[str, tuple[str, bool | None]],
    with_runs: bool,
) -> list[Column]:
    """A task table's columns: its keys, its metric columns, and the "runs" column if wanted."""
    columns = [Column(k, k) for k in keys] + [
        Column(m, m, *_column_info(metric_info, m)) for m in metrics
    ]
    if with_runs:
        columns.append(Column("runs", "runs", "The run records behind this row (click to open)"))
    return columns


def _best_rows(
    means: pd.DataFrame,
    metrics: list[str],
    metric_info: dict[str, tuple[str, bool | None]],
    group_keys: list[str],
    shares: tuple[dict[str, pd.Series], ...],
) -> dict[str, set[int]]:
    """metric column → the rows of ``means`` holding the best value among the rows that share
    ``group_keys``, in the metric's direction (none without one). An unsteady value, one of an
    inaccurate kernel or of a run still learning (``shares``: the steady, accurate and converged
    share per column) is never the best."""
    best: dict[str, set[int]] = {}
    for m in metrics:
        direction = _column_info(metric_info, m)[1]
        if direction is None:
            continue
        candidates = means[m].where(~np.logical_or.reduce([share[m] < 1 for share in shares]))
        pick = candidates.groupby([means[k] for k in group_keys]).transform(
            "max" if direction else "min"
        )
        best[m] = set(means.index[(candidates == pick) & candidates.notna()])
    return best


def _noted(cell: Cell, text: str) -> Cell:
    """``cell`` with ``text`` (an annotation) as its hint: in its hover, marking nothing."""
    cell.hint = text
    return cell


def _runs_cell(wide: _Wide, row: pd.Series, run_link: str, linked: Collection[str] | None) -> Cell:
    """A row's "runs" cell: how many runs are behind it, with a link to each record that is there
    to link (``linked``; None: all) and whose run_id is of the hash form."""
    keys = wide.keys
    ids = sorted(wide.runs.loc[tuple(row[k] for k in keys) if len(keys) > 1 else row[keys[0]]])
    links = [
        (run_link.format(run_id=r), r[:8])
        for r in ids
        if is_run_id(r) and (linked is None or r in linked)
    ]
    return Cell(f"{len(ids)}:", len(ids), links=links)


def _steady_share(wide: pd.DataFrame, column: str, metric: str, steadiness: dict) -> pd.Series:
    """Per row of ``wide``, the seed-averaged steadiness flag of the metric shown in ``column``
    (NaN: no flag declared or recorded)."""
    flag = steadiness.get(metric)
    flag_column = column.replace(metric, flag, 1) if flag else None
    if flag_column not in wide.columns and flag in wide.columns:
        flag_column = flag  # recorded once per run (a convergence flag): it judges every column
    if flag_column not in wide.columns:
        return pd.Series(float("nan"), index=wide.index)
    return wide[flag_column].astype(float)


def _value_cell(
    value: object,
    steady_share: float,
    best: bool,
    accurate_share: float = float("nan"),
    converged_share: float = float("nan"),
) -> Cell:
    """A metric's cell; marked, with a note, where a seed's timing behind it was of a kernel
    that erred beyond its declared tolerance (first: that outranks unsteadiness) or unsteady,
    or where a seed's training was still learning at its cap."""
    cell = Cell(format_value(value), _sortable(value), best)
    if pd.isna(value):
        return cell
    for share, mark, what in (
        (
            accurate_share,
            INACCURATE_MARK,
            "inaccurate kernel{}: its error against float64 exceeds the variant's declared "
            "tolerance (max_abs_error, the record's error_tolerance)",
        ),
        (
            steady_share,
            UNSTEADY_MARK,
            "unsteady timing{}: its samples never settled within the time cap, or the machine "
            "was busy (the record says why)",
        ),
        (
            converged_share,
            UNSTEADY_MARK,
            "still learning at the cap{}: the validation accuracy still rose over the last "
            "doubling of training (the record's learning curve)",
        ),
    ):
        if share < 1:
            seeds = "" if share == 0 else f" in {1 - share:.0%} of its seeds"
            cell.text = mark + cell.text
            cell.note = what.format(seeds) + "; left out of the ranks and of the best value"
            break
    return cell


def _column_names(ok: pd.DataFrame, task_params: pd.DataFrame) -> pd.Series:
    """Table column of each point: its metric, or "metric (mean over x)" for curve points whose
    x is not the job's own setting of that name."""
    names = ok["metric"].astype(object).copy()
    curve = ok["x_name"].notna() & ok["x_value"].notna()
    for x_name in ok.loc[curve, "x_name"].unique():
        on_axis = curve & (ok["x_name"] == x_name)
        column = f"task.{x_name}"
        own = task_params[column] if column in task_params else pd.Series(None, index=ok.index)
        other = on_axis & ~(own.astype(object) == ok["x_value"]).fillna(False).astype(bool)
        names[other] = ok.loc[other, "metric"].astype(str) + f" (mean over {x_name})"
    return names


ERROR_CHARS = 240  # a failure's error as shown: its last line, cut to this length


def short_error(error: object) -> str:
    """A failure's error as one readable line: the last non-empty line of the text (a
    traceback's message), cut to `ERROR_CHARS`."""
    lines = [line.strip() for line in str(error or "").splitlines() if line.strip()]
    text = lines[-1] if lines else "(no error text)"
    return text if len(text) <= ERROR_CHARS else text[: ERROR_CHARS - 1] + "…"


def _setting_text(task_params: object) -> str:
    """A run's task parameters as "seq_len=1024, causal=True" (None values left out)."""
    try:
        params = json.loads(str(task_params))
    except ValueError:
        return str(task_params)
    if not isinstance(params, dict):
        return str(params)
    return setting_label(params, sorted(params))


def unfinished_table(frame: pd.DataFrame) -> Table:
    """Runs that failed (status failed, oom, timeout), and ok runs whose latest attempt failed
    (collection keeps the ok record and counts the failed re-run beside it): what failed, where,
    and why in one line (`short_error`). Runs ``unsupported`` by design are not failures: they
    are counted apart (`unsupported_line`)."""
    runs = frame[~frame["derived"]].drop_duplicates("run_id")
    failed_again = (runs["status"] == "ok") & ~runs["latest_status"].isin(["ok", "unsupported"])
    bad = runs[((runs["status"] != "ok") & (runs["status"] != "unsupported")) | failed_again]
    table = Table(
        columns=[
            Column("task", "task"),
            Column("variant", "variant"),
            Column("status", "status"),
            Column("error", "error", "The last line of the error the run recorded"),
            Column("machine", "machine"),
            Column("dtype", "dtype"),
            Column("setting", "setting", "The run's task parameters"),
            Column("run", "run", "The run's id: its record is runs/<id>.json"),
        ]
    )
    for i, row in bad.iterrows():
        status, error = str(row["status"]), short_error(row["error"])
        if failed_again[i]:
            status = f"ok, latest attempt {row['latest_status']}"
            error = (
                f"a re-run ({row['attempts']} attempts) ended {row['latest_status']}; the ok "
                f"record is shown, the failed one sits beside it in runs/{row['run_id']}.*.json"
            )
        texts = [
            str(row["task"]),
            str(row["variant"]),
            status,
            error,
            str(row["machine"]),
            str(row["dtype"]),
            _setting_text(row["task_params"]),
            str(row["run_id"]),
        ]
        table.rows.append([Cell(t, t) for t in texts])
    return table


def unsupported_line(frame: pd.DataFrame) -> str:
    """One line counting the runs ``unsupported`` by design (a variant that cannot do a
    setting, e.g. causal masking), by variant and reason, most first: "12 runs unsupported by
    design: sinkhorn (9): variant 'sinkhorn' does not support causal masking; …"; empty when
    there are none."""
    runs = frame[~frame["derived"]].drop_duplicates("run_id")
    runs = runs[runs["status"] == "unsupported"]
    if runs.empty:
        return ""
    reasons = runs.assign(reason=runs["error"].map(short_error))
    counts = reasons.groupby(["variant", "reason"]).size()
    counts = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    parts = [f"{variant} ({n}): {reason.rstrip('.')}" for (variant, reason), n in counts]
    total = len(runs)
    runs_text = "1 run" if total == 1 else f"{total} runs"
    return f"{runs_text} unsupported by design: " + "; ".join(parts)


def _sortable(value: object) -> float | str:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return str(value)
    return number if not math.isnan(number) else float("-inf")
