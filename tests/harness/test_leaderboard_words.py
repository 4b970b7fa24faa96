"""The page reads in words (#64 item 6): every header, legend and hover names things as a reader
does, with rounded settings (n/3, not 0.3333333333333333); no two columns of a table share a
title; every drawn variant has a colour of its own. Checked on the committed reference board and
on small frames that make each rule fail where it breaks."""

from __future__ import annotations

import html
import itertools
import json
import math
import re
from collections import defaultdict

import pandas as pd
import pytest
from conftest import REFERENCE

from attnbench.harness.leaderboard import build_site
from attnbench.harness.leaderboard.charts import curve_figure, lab
from attnbench.harness.leaderboard.site import readable_headers
from attnbench.harness.leaderboard.tables import Column, Table, Words, distinct_headers
from attnbench.harness.results.collect import COLUMNS
from attnbench.metrics import Metric
from attnbench.task_info import ScalingFit, TaskInfo

IDENTIFIER = re.compile(r"\b[a-z][a-z0-9]*(?:[_.][a-z0-9]+)+\b")  # fwd_ms, task.seq_len
LONG_FLOAT = re.compile(r"\b0\.0*[1-9]\d{4,}|\b[1-9]\d*\.\d{5,}")  # more than 4 figures


def raw_parts(text: str, names: set[str]) -> list[str]:
    """The parts of ``text`` that are not words: identifiers other than registered names (a
    variant's or task's name is its name) and floats of more than four significant figures."""
    found = [w for w in IDENTIFIER.findall(text) if w not in names]
    return found + LONG_FLOAT.findall(text)


def _text(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", fragment.replace("<wbr>", ""))).strip()


@pytest.fixture(scope="module")
def board(tmp_path_factory, reference_as_current):
    """The reference board's page, every run of the committed sweep shown (`reference_as_current`),
    and the registered names its table holds."""
    page = build_site(reference_as_current, tmp_path_factory.mktemp("board")).read_text()
    frame = pd.read_parquet(REFERENCE / "results.parquet", columns=["variant", "task"])
    return page, set(frame["variant"]) | set(frame["task"])


def _tables(page: str) -> dict[str, list[list[str]]]:
    """section id → the headers of each of its tables."""
    found: dict[str, list[list[str]]] = defaultdict(list)
    for section, body in re.findall(r'<section id="([^"]+)">(.*?)</section>', page, re.S):
        for head in re.findall(r"<thead>(.*?)</thead>", body, re.S):
            found[section].append([_text(h) for h in re.findall(r"<th[^>]*>(.*?)</th>", head)])
    return found


def _figures(page: str) -> list[dict]:
    found = re.findall(r'<script type="application/json" data-chart="[^"]+">(.*?)</script>', page)
    return [json.loads(text) for text in found]


def test_no_task_table_header_of_the_reference_board_is_an_identifier(board):
    page, names = board
    tables = _tables(page)
    task_headers = {h for s, ts in tables.items() if s.startswith("task-") for t in ts for h in t}
    assert len(task_headers) > 150  # the reference's tables, all of them
    raw = {h: raw_parts(h, names) for h in task_headers}
    assert {h: parts for h, parts in raw.items() if parts} == {}
    peers = {h for t in tables.get("peers", []) for h in t}
    assert {h for h in peers if raw_parts(h, names)} == set()
    # a fit's believability reads as a question, not "scaling_exponent_reliable = 0"
    assert "fit believable?" in task_headers


def test_no_two_columns_of_a_reference_table_share_a_title(board):
    page, _ = board
    for section, tables in _tables(page).items():
        for headers in tables:
            twins = {h for h in headers if headers.count(h) > 1}
            assert not twins, (section, twins)
    recall = _tables(page)["task-recall"][0]
    assert "recall accuracy ↑" in recall
    assert "recall accuracy at the row's key-value pairs ↑" in recall


def _figure_texts(node: object, found: set[str]) -> set[str]:
    """Every text a figure shows: legend names, hovers, point texts, and the layout's titles,
    axis titles, tick labels, menu labels and annotations (Plotly's template left out)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("name", "text", "hovertext", "ticktext", "label"):
                values = value if isinstance(value, list) else [value]
                found.update(v for v in values if isinstance(v, str) and v)
            if key != "template":
                _figure_texts(value, found)
    elif isinstance(node, list):
        for item in node:
            _figure_texts(item, found)
    return found


def test_the_reference_board_s_legends_and_hovers_read_in_words_with_rounded_settings(board):
    page, names = board
    texts: set[str] = set()
    for figure in _figures(page):
        _figure_texts(figure, texts)
    assert any("against" in t for t in texts)  # the charts' titles are among them
    texts = {html.unescape(str(t)) for t in texts if t}
    assert {t: raw_parts(t, names) for t in texts if raw_parts(t, names)} == {}
    legends = " | ".join(texts)
    # a size as a fraction of n (an input scale of 0.333 is Garg's own value, not a rounded 1/3)
    assert "stride=n/3" in legends and "stride=0.333" not in legends
    assert "block=0" not in legends  # a parameter one variant's configurations share: unsaid


def test_every_variant_drawn_on_the_reference_board_has_its_own_colour(board):
    page, names = board
    colours: dict[str, set[str]] = defaultdict(set)
    for figure in _figures(page):
        for trace in figure["data"]:
            variant = str(trace.get("name") or "").split(" ")[0]
            colour = (trace.get("line") or {}).get("color") or (trace.get("marker") or {}).get(
                "color"
            )
            if variant in names and isinstance(colour, str):
                colours[variant].add(colour)
    assert len(colours) > 15
    assert {v: c for v, c in colours.items() if len(c) != 1} == {}
    owners: dict[str, list[str]] = defaultdict(list)
    for variant, (colour,) in colours.items():
        owners[colour].append(variant)
    assert {c: v for c, v in owners.items() if len(v) > 1} == {}
    # told apart at a glance: no near twins (strided's generated cyan beside linear's, once)
    pairs = itertools.combinations(sorted(colours.items()), 2)
    close = [(a, b) for (a, (ca,)), (b, (cb,)) in pairs if math.dist(lab(ca), lab(cb)) < 20]
    assert close == []


def test_every_metric_and_axis_a_built_in_task_declares_has_a_label_in_words():
    """The board's words come from the tasks' declarations; its fallbacks (`Words`) are for
    plugins and older records, not for what the project itself declares."""
    from attnbench.harness.discovery import load_plugins
    from attnbench.task import TASKS

    load_plugins()
    missing = []
    for entry in TASKS.entries():
        if entry.origin != "attnbench":
            continue  # a plugin installed beside: its words are its own
        info = entry.obj.describe()
        missing += [f"{info.name}: {m.name}" for m in [*info.metrics, *info.axes] if not m.label]
        missing += [f"{info.name}: {m.label}" for m in info.metrics if raw_parts(m.label, set())]
        # the parameters and detail keys its own declarations name: tuned, the column's, the
        # annotations' keys, the fits' axes
        named = [*(info.tuning.params if info.tuning else []), *info.annotations.values()]
        named += [info.column_by] * bool(info.column_by) + [f.axis for f in info.scaling_fits]
        labelled = {m.name for m in [*info.all_metrics(), *info.axes] if m.label}
        missing += [f"{info.name}: {n} (named, not labelled)" for n in named if n not in labelled]
        budgets = info.budgets or list(info.steadiness)
        missing += [f"{info.name}: budget {b}" for b in budgets if b not in labelled]
    assert missing == []


def test_a_parameter_two_built_in_tasks_declare_has_one_label():
    """One name, one meaning: the board titles the same parameter alike in every column (and
    the chooser names a parameter a task leaves undeclared by the others' label). Two names
    have two meanings, said apart: decode's ``seq_len`` is the context before generating, not a
    sequence trained or timed on; lm's ``length`` an evaluation window in bytes, state
    tracking's a test sequence in tokens."""
    from attnbench.harness.discovery import load_plugins
    from attnbench.task import TASKS

    load_plugins()
    by_name: dict[str, dict[tuple[str, str], list[str]]] = defaultdict(lambda: defaultdict(list))
    for entry in TASKS.entries():
        if entry.origin == "attnbench":
            info = entry.obj.describe()
            for a in info.axes:
                by_name[a.name][(a.label, a.unit)].append(info.name)
    twins = {name: dict(labels) for name, labels in by_name.items() if len(labels) > 1}
    said_apart = {
        "seq_len": {("sequence length", "tokens"), ("context length", "tokens")},
        "length": {("test length", "tokens"), ("evaluation length", "bytes")},
    }
    assert {
        n: set(labels) for n, labels in twins.items() if set(labels) - said_apart.get(n, set())
    } == {}


TIMED = TaskInfo(
    name="timed",
    metrics=[
        Metric("fwd_ms", False, "Forward latency", "ms", label="forward latency"),
        Metric("fwd_ms_iqr", None, "Interquartile range of the forward samples (ms)", "ms"),
        Metric("fwd_steady", None, "1: the forward samples settled and the machine was quiet"),
        Metric("val_fwd_ms", None, "fwd_ms on held-out inputs"),
        Metric("gd_over_zero", None, "mse_gd / mse_zero on the same prompts"),
    ],
    axes=[Metric("seq_len", None, "", "tokens", label="sequence length")],
    scaling_fits=[ScalingFit("fwd_ms", "seq_len", reference_variant="softmax")],
)


def test_a_name_no_declaration_labels_still_reads_in_words():
    words = Words(TIMED)
    assert words.metric("fwd_ms") == "forward latency"  # the label, where declared
    # the description's lead (asides dropped); a flag's as a question
    assert words.metric("fwd_ms_iqr") == "interquartile range of the forward samples"
    assert words.metric("fwd_steady") == "forward samples settled and the machine was quiet?"
    # a description naming identifiers: a labelled metric's name and a part in words
    assert words.metric("val_fwd_ms") == "validation forward latency"
    assert words.metric("gd_over_zero") == "GD over zero"  # else the identifier spelled out
    assert words.metric("scaling_exponent_reliable") == "fit believable?"
    crossover = "sequence length (tokens) where it overtakes softmax"
    assert words.metric("crossover_seq_len") == crossover
    assert words.axis("seq_len") == "sequence length (tokens)"
    assert words.setting("seq_len", 4096.0) == "sequence length 4096 tokens"
    bare = Words()  # a task the table does not describe
    assert bare.metric("peak_mem_mib") == "peak memory (MiB)"
    assert bare.setting("n_kv_pairs", 8) == "number of key-value pairs 8"
    assert bare.setting("mode", "one_layer") == "mode one layer"
    assert bare.setting("stride", 0.3333333333333333) == "stride 1/3"
    assert bare.setting("lr", 0.0031416) == "learning rate 0.003142"
    assert bare.setting("lr", 0.0012345) == "learning rate 0.001234"  # near 1/810, not it


def test_a_fit_of_a_metric_without_a_label_is_titled_without_end():
    """A fit's titles name the fitted metric, which may itself have only a description."""
    info = TaskInfo(
        name="t",
        metrics=[Metric("fwd_ms", False, "Forward latency", "ms")],
        scaling_fits=[ScalingFit("fwd_ms", "n")],
    )
    assert Words(info).metric("scaling_exponent") == "exponent of forward latency against n"
    assert Words(info).metric("scaling_exponent_ci_low").endswith(", 95% CI low end")


def test_a_task_table_s_identifier_headers_read_in_words_with_the_identifier_in_the_hover():
    keys = ["variant", "variant.n_random", "task.seq_len", "fwd_ms", "fwd_ms_iqr", "load_avg"]
    keys += ["scaling_exponent_reliable", "fwd_ms (mean over seq_len)", "runs"]
    table = readable_headers(Table([Column(k, k) for k in keys]), TIMED)
    headers = [c.header for c in table.columns]
    assert headers == [
        "variant",
        "n random",
        "sequence length (tokens)",
        "forward latency",
        "interquartile range of the forward samples",
        "load average",
        "fit believable?",
        "forward latency (mean over sequence length)",
        "runs",
    ]
    assert table.columns[4].description == "fwd_ms_iqr"
    assert not [h for h in headers if raw_parts(h, set())]


def test_columns_that_would_share_a_title_are_told_apart():
    """Two metrics labelled alike ("recall accuracy") are told apart by the curve axis a value
    sits at, then by their names in words; a clash left after both gets a number."""
    columns = [
        Column("accuracy", "recall accuracy"),
        Column("accuracy_by_pairs", "recall accuracy", axis="n_kv_pairs"),
        Column("accuracy_by_width", "recall accuracy", axis="d_model"),
        Column("a", "chance"),
        Column("b", "chance"),
    ]
    words = Words()
    distinct_headers(
        columns,
        lambda c: [f" at the row's {words.axis(c.axis)}" if c.axis else "", f" ({c.key})"],
    )
    assert [c.header for c in columns] == [
        "recall accuracy",
        "recall accuracy at the row's number of key-value pairs",
        "recall accuracy at the row's d model",
        "chance (a)",
        "chance (b)",
    ]
    same = [Column("x", "t"), Column("x", "t")]
    distinct_headers(same, lambda c: [])
    assert [c.header for c in same] == ["t", "t (2)"]


def _line_rows(configs: dict[tuple[str, str, str], float]) -> pd.DataFrame:
    """Curve rows: (variant, params JSON, size params) → its value at n = 1, 2, 4; numbers of
    a parameter only some variants have turn to text in the charts' keys (`key_columns`)."""
    rows = [
        {
            **dict.fromkeys(COLUMNS),
            "run_id": f"{variant}{params}",
            "variant": variant,
            "variant_params": params,
            "variant_size_params": sizes,
            "task_params": "{}",
            "dtype": "float32",
            "metric": "fwd_ms",
            "value": value * x,
            "x_name": "seq_len",
            "x_value": x,
        }
        for (variant, params, sizes), value in configs.items()
        for x in (1.0, 2.0, 4.0)
    ]
    return pd.DataFrame(rows, columns=COLUMNS).assign(machine="cpu0")


def test_legends_label_configurations_as_the_overview_does_with_rounded_sizes():
    frame = _line_rows(
        {
            ("strided", '{"local": 0.1, "stride": 0.3333333333333333}', "local,stride"): 1.0,
            ("strided", '{"local": 64, "stride": 64}', "local,stride"): 2.0,
            ("window", '{"block": 0, "window": 0.2}', "window"): 3.0,
            ("window", '{"block": 0, "window": 256}', "window"): 4.0,
            ("bigbird", '{"block": 0.03125, "n_random": 1}', "block"): 5.0,
            ("bigbird", '{"block": 64, "n_random": 2}', "block"): 6.0,
        }
    )
    fig = curve_figure(frame, "fwd_ms", "t")
    assert sorted(t.name for t in fig.data) == [
        "bigbird block=64, n random=2",
        "bigbird block=n/32, n random=1",
        "strided local=0.1n, stride=n/3",
        "strided local=64, stride=64",
        "window window=0.2n",  # block=0, the same in both of window's: unsaid
        "window window=256",
    ]
