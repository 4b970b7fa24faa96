"""The page in the reader's words (#44 item 2, #46 item 6): chart titles, axes, table and overview
headers from the labels and units a task declares (`Metric.label`, `TaskInfo.label`,
`TaskInfo.axes`), identifiers where it declares none, log axes labelled with whole numbers,
and the rules of the overview folded under "How to read this", after the table."""

from __future__ import annotations

import json
import re

from conftest import chart_view, make_record

from attnbench.harness.jobs.records import write_record
from attnbench.harness.leaderboard import build_site
from attnbench.harness.leaderboard.charts import log_ticks
from attnbench.harness.results.collect import collect
from attnbench.metrics import Metric
from attnbench.task_info import TaskInfo

LABELLED = TaskInfo(
    name="lbl_task",
    label="Labelled <task>",
    description="A task that names its metrics for readers.",
    headline="acc",
    charts=["acc_by_state"],
    metrics=[
        Metric("acc", True, "Accuracy", label="recall accuracy"),
        Metric("acc_by_state", True, "Accuracy by state size", label="recall accuracy"),
        Metric("state_bytes", False, "State one sequence holds", "bytes", "state per sequence"),
    ],
    axes=[Metric("n_pairs", None, "Pairs per sequence", label="key-value pairs")],
)


def _write(tmp_path, info, rows):
    for name, variant, width, acc in rows:
        state = 1000.0 * width
        write_record(
            tmp_path,
            make_record(
                name,
                task=info.name,
                variant=variant,
                task_params={"n_pairs": 8, "width": width},
                metrics=[
                    {"metric": "acc", "value": acc, "higher_is_better": True},
                    {"metric": "state_bytes", "value": state, "higher_is_better": False},
                    {
                        "metric": "acc_by_state",
                        "value": acc,
                        "x_name": "state_bytes",
                        "x_value": state,
                        "higher_is_better": True,
                    },
                ],
                task_info=info.to_dict(),
                details={"variant_family": variant},
            ),
        )
    collect(tmp_path)
    return build_site(tmp_path).read_text()


ROWS = [
    (f"r{i}", v, w, a)
    for i, (v, w, a) in enumerate(
        [("softmax", 1, 0.5), ("softmax", 10, 0.8), ("softmax", 100, 0.9), ("linear", 1, 0.3)]
        + [("linear", 10, 0.4), ("linear", 100, 0.6)]
    )
]


def _figures(html):
    found = re.findall(r'<script type="application/json" data-chart="([^"]+)">(.*?)</script>', html)
    return {cid: json.loads(text) for cid, text in found}


def test_titles_axes_and_headers_come_from_the_tasks_labels_and_units(tmp_path):
    html = _write(tmp_path, LABELLED, ROWS)
    (fig,) = [f for cid, f in _figures(html).items() if "acc_by_state" in cid]
    # the label is text: escaped like every name that comes from results
    title = "Labelled &lt;task&gt;: recall accuracy against state per sequence (bytes)"
    assert fig["layout"]["title"]["text"] == title
    assert fig["layout"]["xaxis"]["title"]["text"] == "state per sequence (bytes)"
    assert fig["layout"]["yaxis"]["title"]["text"] == "recall accuracy"
    overview = html.split('id="overview-table"')[1].split("</thead>")[0]
    assert "Labelled &lt;task&gt;: recall accuracy" in overview.replace("<wbr>", "")
    section = html.split('id="task-lbl_task"')[1]
    assert '<h2>Labelled &lt;task&gt; <code class="task-name">lbl_task</code></h2>' in section
    # a task table's header is the label; its hover keeps the identifier
    assert re.search(r'<th title="acc: Accuracy"[^>]*>recall accuracy ↑</th>', section)


def test_a_task_that_declares_no_labels_still_reads_in_words(tmp_path):
    """Without labels, a metric is titled by its description's lead, an undeclared axis by its
    name spelled out; the identifiers stay in the headers' hover."""
    bare = TaskInfo(
        name="bare_task",
        headline="acc",
        charts=["acc_by_state"],
        metrics=[
            Metric("acc", True, "Accuracy"),
            Metric("acc_by_state", True, "Accuracy by state size (one line per variant)"),
        ],
    )
    html = _write(tmp_path, bare, ROWS)
    (fig,) = _figures(html).values()
    title = "bare_task: accuracy by state size against state bytes"
    assert fig["layout"]["title"]["text"] == title
    assert fig["layout"]["xaxis"]["title"]["text"] == "state bytes"
    section = html.split('id="task-bare_task"')[1]
    header = r"accuracy by state size \(mean over state bytes\) ↑"
    hover = r"acc_by_state \(mean over state_bytes\): [^\"]*"
    assert re.search(rf'<th title="{hover}"[^>]*>{header}</th>', section)


def test_a_log_axis_is_labelled_with_whole_numbers_not_mantissas(tmp_path):
    html = _write(tmp_path, LABELLED, ROWS)
    (fig,) = [f for cid, f in _figures(html).items() if "acc_by_state" in cid]
    xaxis = fig["layout"]["xaxis"]
    assert xaxis["type"] == "log"
    assert xaxis["tickmode"] == "array"
    assert xaxis["ticktext"] == ["1000", "10000", "100000"]  # whole values: a tick at each
    assert [float(t) for t in xaxis["ticktext"]] == xaxis["tickvals"]
    # any other log axis: 1, 2, 5 of each decade, written out
    assert log_ticks([0.15, 4.0])["ticktext"] == ["0.1", "0.2", "0.5", "1", "2", "5"]
    # a span of more than three decades: the decades alone
    wide = log_ticks([0.002, 0.05, 3.0, 70.0])
    assert wide["ticktext"] == ["0.001", "0.01", "0.1", "1", "10", "100"]
    small = log_ticks([0.1, 0.7])
    assert small["ticktext"] == ["0.1", "0.2", "0.5", "1"]


def test_the_table_comes_first_and_the_rules_are_folded_after_it(tmp_path):
    html = _write(tmp_path, LABELLED, ROWS)
    overview = html.split('<section id="overview">')[1].split("</section>")[0]
    table_at = overview.index('id="overview-table"')
    fold_at = overview.index('<details id="how-to-read"><summary>How to read this</summary>')
    rule_at = overview.index('id="overview-rule"')
    assert table_at < fold_at < rule_at
    assert overview.index("One row per variant and hardware") > fold_at


def test_labels_and_axes_survive_the_records_round_trip():
    again = TaskInfo.from_dict(json.loads(json.dumps(LABELLED.to_dict())))
    assert again == LABELLED
    assert again.axis_title("n_pairs") == "key-value pairs"
    assert again.axis_title("state_bytes") == "state per sequence (bytes)"
    assert again.axis_title("undeclared") == "undeclared"
    assert again.metric_title("acc") == "recall accuracy" and again.title == "Labelled <task>"


LABELLED_BUILT_INS = ("throughput", "decode", "recall", "copy", "icl_regression", "concentration")


def test_the_built_in_tasks_name_their_headline_charts_and_axes_for_readers():
    """What the board titles and axes show of the built-in tasks is a label, not an identifier:
    the task, its headline and cost metric, each chart metric and each curve axis it draws."""
    from attnbench.harness.discovery import load_plugins
    from attnbench.task import TASKS

    load_plugins()
    unnamed = []
    for name in LABELLED_BUILT_INS:
        info = TASKS.get(name).describe()
        wanted = [info.headline, info.cost_metric, *info.charts, *info.bar_charts]
        unnamed += [f"{name}: task label"] * (not info.label)
        unnamed += [f"{name}: {m}" for m in wanted if m and info.metric_title(m) == m]
    assert not unnamed


def _timed(tmp_path, name, variant, n, ms, path):
    from attnbench.tasks.throughput import Throughput

    points = [
        {"metric": m, "value": v, "x_name": "seq_len", "x_value": n, "higher_is_better": False}
        for m, v in (("fwd_ms", ms), ("fwd_ratio", ms / 4), ("peak_mem_mib", 1.0 + n / 64))
    ]
    write_record(
        tmp_path,
        make_record(
            name,
            variant=variant,
            task_params={"seq_len": n},
            metrics=points,
            task_info=Throughput.describe().to_dict(),
            details={"variant_family": variant, "fwd_kernel_path": path},
        ),
    )


def test_a_timings_kernel_path_is_in_the_task_table_and_the_hover(tmp_path):
    """#41 item 3: each timing's record says which kernel ran (details.fwd_kernel_path); the
    task declares it beside its timed metrics (TaskInfo.annotations), so the board shows it."""
    for i, n in enumerate((64, 128, 256)):
        _timed(tmp_path, f"w{i}", "window", n, 1.0 + i, "tile kernel (AVX512) <x>")
        _timed(tmp_path, f"s{i}", "softmax", n, 2.0 + i, "torch operators")
    collect(tmp_path)
    html = build_site(tmp_path).read_text()
    section = html.split('id="task-throughput"')[1].split("</section>")[0]
    headers = re.findall(r"<th [^>]*>([^<]*)</th>", section.split("</thead>")[0])
    assert "kernel path" in headers
    rows = section.split("<tbody>")[1].split("</tbody>")[0].split("</tr>")[:-1]
    window = [r for r in rows if ">window<" in r]
    assert window and all("tile kernel (AVX512) &lt;x&gt;</td>" in r for r in window)
    assert all('title="tile kernel (AVX512) &lt;x&gt;"' in r for r in window)  # the hover
    assert 'class="unsteady"' not in section  # an annotation marks nothing
    (fig,) = [f for cid, f in _figures(html).items() if cid.startswith("chart-throughput-")]
    latency = chart_view(fig, "forward latency")
    hover = {t["name"].split(" · ")[0]: t["text"] for t in latency if t.get("text")}
    assert hover["softmax"] == ["torch operators"] * 3
    assert hover["window"] == ["tile kernel (AVX512) &lt;x&gt;"] * 3  # escaped for Plotly


def test_a_table_collected_before_annotations_existed_still_loads(tmp_path):
    import pandas as pd

    from attnbench.harness.results.collect import COLUMNS
    from attnbench.harness.results.table_file import load

    _timed(tmp_path, "a", "softmax", 64, 2.0, "torch operators")
    collect(tmp_path)
    table = tmp_path / "results.parquet"
    frame = pd.read_parquet(table).drop(columns="annotation")
    frame.to_parquet(tmp_path / "old.parquet")
    loaded = load(tmp_path / "old.parquet", COLUMNS)[0]
    assert (loaded["annotation"] == "").all()


def test_a_fraction_of_the_length_reads_as_a_fraction_in_labels():
    """#46 item 6: `strided local=0.1, stride=0.333333` reads `strided local=0.1n, stride=n/3`
    where the records name local and stride as pattern sizes (`size_params`), `stride=1/3`
    where they do not (a table collected before records named them); round values stay."""
    import pandas as pd

    from attnbench.harness.leaderboard.charts import entry_label
    from attnbench.harness.leaderboard.tables import config_labels, size_params_of

    configs = pd.DataFrame(
        [
            ("strided", '{"local": 0.1, "stride": 0.333333}', "local,stride"),
            ("strided", '{"local": 64, "stride": 64}', "local,stride"),
            ("bigbird", '{"block": 0.03125, "n_random": 1}', "block"),
            ("decay", '{"gamma": 0.5}', ""),
            ("decay", '{"gamma": 0.25}', ""),
        ],
        columns=["variant", "variant_params", "variant_size_params"],
    )
    sizes = size_params_of(configs)
    assert sizes == {"strided": {"local", "stride"}, "bigbird": {"block"}}
    labels = config_labels(configs, sizes)
    relative = ("strided", '{"local": 0.1, "stride": 0.333333}')
    assert labels[relative] == "strided local=0.1n, stride=n/3"
    assert labels[("strided", '{"local": 64, "stride": 64}')] == "strided local=64, stride=64"
    assert labels[("bigbird", '{"block": 0.03125, "n_random": 1}')] == "bigbird"  # one config
    assert labels[("decay", '{"gamma": 0.5}')] == "decay gamma=0.5"  # not a size: no n
    assert config_labels(configs)[relative] == "strided local=0.1, stride=1/3"  # older tables
    keys = ["variant", "variant.block"]
    assert entry_label(keys, ("bigbird", 0.03125), [0, 1]) == "bigbird · block=1/32"


def test_a_split_column_s_title_names_its_value_in_words():
    """A column per mode is titled with the mode in words ("one layer"), not its identifier;
    the column's name (what the command line and the hover say) keeps the identifier."""
    from attnbench.harness.leaderboard.columns import _headline, column_name

    name = column_name("lbl_task", "one_layer")
    headline = _headline(name, LABELLED, "acc")
    assert headline.task == "lbl_task (one_layer)"
    assert headline.label == "Labelled <task> (one layer): recall accuracy"
