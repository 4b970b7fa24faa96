from __future__ import annotations

import re
from html import escape as html_escape

import pandas as pd
from conftest import chart_view, make_record, test_run_id

from attnbench.harness.jobs.records import write_record
from attnbench.harness.leaderboard import build_site
from attnbench.harness.leaderboard.ranking import with_machine
from attnbench.harness.leaderboard.tables import task_table
from attnbench.harness.results.collect import collect
from attnbench.tasks.throughput import Throughput

HOSTILE = "<img src=x onerror=alert(1)>"
REFERENCE_MS = 4.0  # the made-up dense SDPA time behind each record's fwd_ratio (the headline)


def _point(metric, value, x, hib):
    return {
        "metric": metric,
        "value": value,
        "x_name": "seq_len",
        "x_value": x,
        "higher_is_better": hib,
    }


def _point_at(metric, value, x_name, x):
    return {
        "metric": metric,
        "value": value,
        "x_name": x_name,
        "x_value": x,
        "higher_is_better": True,
    }


def _write(tmp_path, run_id, variant, seq_len, fwd_ms, status="ok", error=None):
    metrics = (
        []
        if status != "ok"
        else [
            _point("fwd_ms", fwd_ms, seq_len, False),
            _point("fwd_ratio", fwd_ms / REFERENCE_MS, seq_len, False),
            _point("gflops", 100 / fwd_ms, seq_len, True),
        ]
    )
    write_record(
        tmp_path,
        make_record(
            run_id,
            status=status,
            error=error,
            task="throughput",
            variant=variant,
            task_params={"seq_len": seq_len},
            variant_params={},
            seed=0,
            device="cpu",
            dtype="float32",
            metrics=metrics,
            env={"device_name": "cpu0"},
            task_info=Throughput.describe().to_dict(),  # as every run record carries it
            details={"variant_family": variant},
        ),
    )


def test_best_value_is_marked_per_setting(tmp_path):
    _write(tmp_path, "a", "softmax", 64, 2.0)
    _write(tmp_path, "b", "linear", 64, 1.0)
    _write(tmp_path, "c", "softmax", 128, 3.0)
    _write(tmp_path, "d", "linear", 128, 4.0)
    collect(tmp_path)
    frame = pd.read_parquet(tmp_path / "results.parquet")
    table = task_table(
        with_machine(frame), {"fwd_ms": ("latency", False), "gflops": ("speed", True)}
    )
    headers = [c.header for c in table.columns]
    assert headers == [  # the declared metrics first
        "variant",
        "machine",
        "dtype",
        "task.seq_len",
        "fwd_ms",
        "gflops",
        "fwd_ratio",
    ]
    best = {(r[0].text, r[3].text): (r[4].best, r[5].best) for r in table.rows}
    assert best == {
        ("linear", "64"): (True, True),
        ("softmax", "64"): (False, False),
        ("softmax", "128"): (True, True),
        ("linear", "128"): (False, False),
    }


def test_text_from_results_is_escaped(tmp_path):
    _write(tmp_path, "a", HOSTILE, 64, 2.0)
    _write(tmp_path, "a2", HOSTILE, 128, 4.0)  # two points: a curve is drawn
    _write(tmp_path, "b", "softmax", 64, 2.0, status="failed", error=f"boom {HOSTILE}</script>")
    collect(tmp_path)
    html = build_site(tmp_path).read_text()
    assert HOSTILE not in html and '</script>"' not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html  # table text, escaped
    assert "\\u0026lt;img src=x onerror=alert(1)\\u0026gt;" in html  # chart JSON, escaped
    assert "Runs that did not finish" in html


def test_rows_sort_numerically_by_setting(tmp_path):
    for i, n in enumerate((1024, 256, 512)):
        _write(tmp_path, f"r{i}", "softmax", n, 1.0)
    collect(tmp_path)
    frame = pd.read_parquet(tmp_path / "results.parquet")
    runs = frame[~frame["derived"]]  # the page shows fits apart
    table = task_table(with_machine(runs), {})
    assert [r[3].text for r in table.rows] == ["256", "512", "1024"]
    html = build_site(tmp_path).read_text()
    assert "Scaling fits" in html and "scaling_exponent" in html


def test_every_variant_keeps_its_row_whatever_parameters_others_have(tmp_path):
    """A parameter only some variants have (or that one variant sweeps) never drops rows."""

    def write(run_id, variant, params, fwd):
        write_record(
            tmp_path,
            make_record(
                run_id,
                status="ok",
                task="throughput",
                variant=variant,
                task_params={"seq_len": 64},
                variant_params=params,
                seed=0,
                device="cpu",
                dtype="float32",
                metrics=[_point("fwd_ms", fwd, 64, False)],
                env={},
            ),
        )

    write("a", "softmax", {"temperature": 1.0}, 1.0)
    write("b", "window", {"window": 16, "block": 0}, 2.0)
    write("c", "window", {"window": 32, "block": 0}, 3.0)
    write("d", "linear", {"feature_map": "elu1"}, 4.0)
    collect(tmp_path)
    frame = with_machine(pd.read_parquet(tmp_path / "results.parquet"))
    table = task_table(frame, {"fwd_ms": ("", False)})
    headers = [c.header for c in table.columns]
    assert headers[:2] == ["variant", "variant.window"]  # swept within window; block is not
    rows = sorted((r[0].text, r[1].text) for r in table.rows)
    assert rows == [("linear", "–"), ("softmax", "–"), ("window", "16"), ("window", "32")]


def test_axes_are_logarithmic_only_for_positive_values_spanning_decades():
    from attnbench.harness.leaderboard.charts import axis_type

    assert axis_type(pd.Series([256.0, 512.0, 4096.0])) == "log"
    assert axis_type(pd.Series([0.0, 1.0])) == "linear"  # layer 0 has no logarithm
    assert axis_type(pd.Series([0.4, 0.9])) == "linear"
    assert axis_type(pd.Series([-1.0, 100.0])) == "linear"


def test_rows_with_gaps_still_sort_numbers_numerically():
    from attnbench.harness.leaderboard.tables import _numbers_first

    col = pd.Series(["1024", "256", "–", "512"])
    assert list(col.iloc[_numbers_first(col).argsort()]) == ["256", "512", "1024", "–"]


RUN_A, RUN_B = test_run_id("a"), test_run_id("b")  # run_ids of the hash form link


def _two_variant_page(tmp_path) -> str:
    _write(tmp_path, "a", "softmax", 64, 2.0)
    _write(tmp_path, "b", "linear", 64, 1.0)
    collect(tmp_path)
    return build_site(tmp_path).read_text()


def test_rows_link_their_records_which_sit_beside_the_page(tmp_path):
    html = _two_variant_page(tmp_path)
    assert f'href="runs/{RUN_A}.json"' in html and f'href="runs/{RUN_B}.json"' in html
    assert (tmp_path / "leaderboard" / "runs" / f"{RUN_A}.json").read_text() == (
        tmp_path / "runs" / f"{RUN_A}.json"
    ).read_text()


def _figures(html):
    import json
    import re

    return {
        m.group(1): json.loads(m.group(2))
        for m in re.finditer(r'data-chart="([^"]+)">(.*?)</script>', html, re.S)
    }


def test_throughput_chart_marks_oom_and_shows_the_fitted_exponent(tmp_path):
    for i, n in enumerate((64, 128, 256)):
        _write(tmp_path, f"s{i}", "softmax", n, n * n / 1e4)  # time ∝ n²
        _write(tmp_path, f"l{i}", "linear", n, n / 1e2)  # time ∝ n
    _write(tmp_path, "oom", "linear", 512, 0.0, status="oom", error="out of memory")
    _write(tmp_path, "uns", "sinkhorn", 512, 0.0, status="unsupported", error="no causal")
    collect(tmp_path)
    figures = _figures(build_site(tmp_path).read_text())
    (figure,) = [f for cid, f in figures.items() if cid.startswith("chart-throughput-")]
    latency = chart_view(figure, "forward latency")  # one view of the chart's menu
    names = [t["name"] for t in latency]
    # the exponent is stated against the axis as the task names it, not its identifier
    assert any(n.startswith("softmax") and "∝ sequence length^2.00" in n for n in names)
    assert any(n.startswith("linear") and "∝ sequence length^1.00" in n for n in names)
    (marks,) = [t for t in latency if "oom" in t["name"]]
    assert marks["x"] == [512] and marks["text"] == ["linear: oom"]  # unsupported: not marked


def test_the_header_counts_jobs_not_the_scaling_fit_rows(tmp_path):
    """Six finished jobs, one oom, one unsupported: 8 runs, although the two fits (softmax and
    linear, each over three lengths) add rows with run_ids of their own."""
    for i, n in enumerate((64, 128, 256)):
        _write(tmp_path, f"s{i}", "softmax", n, n * n / 1e4)
        _write(tmp_path, f"l{i}", "linear", n, n / 1e2)
    _write(tmp_path, "oom", "linear", 512, 0.0, status="oom", error="out of memory")
    _write(tmp_path, "uns", "sinkhorn", 512, 0.0, status="unsupported", error="no causal")
    collect(tmp_path)
    frame = pd.read_parquet(tmp_path / "results.parquet")
    assert frame["run_id"].nunique() == 10 and frame.loc[frame["derived"], "run_id"].nunique() == 2
    html = build_site(tmp_path).read_text()
    assert "measured. 8 runs." in html
    assert "(6 runs; best value per setting" in html  # the task's table: its finished runs


def test_overview_with_its_filters_is_on_the_page(tmp_path):
    html = _two_variant_page(tmp_path)
    assert 'id="overview-table"' in html and 'data-filter="family"' in html
    assert 'data-family="linear"' in html and 'data-machine="cpu0"' in html


def test_curve_chart_draws_bands_and_reference_lines():
    from attnbench.harness.leaderboard.charts import CurveExtras, curve_figure
    from attnbench.harness.results.collect import COLUMNS

    rows = []
    for variant in ("softmax", "linear"):
        for n in (1, 2, 3):
            for metric, value in (("mse", 1 / n), ("mse_q05", 0.8 / n), ("mse_q95", 1.2 / n)):
                rows.append(
                    {
                        **dict.fromkeys(COLUMNS),
                        "run_id": variant,
                        "variant": variant,
                        "variant_params": "{}",
                        "task_params": "{}",
                        "device": "cpu",
                        "dtype": "float32",
                        "metric": metric,
                        "value": value,
                        "x_name": "n_examples",
                        "x_value": float(n),
                    }
                )
            rows.append({**rows[-1], "metric": "mse_least_squares", "value": 0.5 / n})
    frame = pd.DataFrame(rows, columns=COLUMNS).assign(machine="cpu0 · 1 threads")
    extras = CurveExtras(band=("mse_q05", "mse_q95"), references={"mse_least_squares": "LS"})
    fig = curve_figure(frame, "mse", "icl", extras=extras)
    names = [t.name for t in fig.data]
    assert names.count("LS") == 1  # one baseline line, averaged over the runs
    bands = [t for t in fig.data if t.fill == "toself"]
    assert len(bands) == 2 and list(bands[0].y) == [0.8, 0.4, 0.8 / 3, 1.2 / 3, 0.6, 1.2]
    (ls,) = [t for t in fig.data if t.name == "LS"]
    assert list(ls.y) == [0.5, 0.25, 0.5 / 3] and ls.line.dash == "dash"


def test_curve_chart_draws_each_lines_companion_dashed_in_its_colour():
    """A per-line companion (a variant's own closed form) comes from that line's runs only,
    is dashed in the line's colour, is absent where the runs do not report it, and its label
    (escaped like everything else) says in the subtitle what the dashed lines are."""
    from attnbench.harness.leaderboard.charts import CurveExtras, curve_figure, embeddable_json
    from attnbench.harness.results.collect import COLUMNS

    rows = []
    for variant, own in (("softmax", 0.9), ("relu2", 0.4), ("window", None)):
        for x in (0.5, 1.0, 2.0):
            base = {
                **dict.fromkeys(COLUMNS),
                "run_id": variant,
                "variant": variant,
                "variant_params": "{}",
                "task_params": "{}",
                "device": "cpu",
                "dtype": "float32",
                "x_name": "scale",
                "x_value": x,
            }
            rows.append({**base, "metric": "sparsity_s", "value": own or 0.7})
            if own is not None and x < 2:  # the form applies at the two small scales only
                rows.append({**base, "metric": "sparsity_s_theory", "value": own / x})
    frame = pd.DataFrame(rows, columns=COLUMNS).assign(machine="cpu0 · 1 threads")
    extras = CurveExtras(companions={"sparsity_s_theory": "closed <form>"})
    fig = curve_figure(frame, "sparsity_s", "concentration", extras=extras)
    lines = {t.name.split(" · ")[0]: t for t in fig.data if t.showlegend is not False}
    dashed = {t.name.split(" · ")[0]: t for t in fig.data if t.showlegend is False}
    assert all(t.line.dash == "solid" for t in lines.values())
    assert all(t.line.dash == "dash" for t in dashed.values())
    assert set(lines) == {"softmax", "relu2", "window"} and set(dashed) == {"softmax", "relu2"}
    for variant, own in (("softmax", 0.9), ("relu2", 0.4)):
        assert list(dashed[variant].x) == [0.5, 1.0]
        assert list(dashed[variant].y) == [own / 0.5, own / 1.0]  # its own runs, not a mean
        assert dashed[variant].line.color == lines[variant].line.color
        assert dashed[variant].legendgroup == lines[variant].legendgroup
    assert len({t.line.color for t in lines.values()}) == 3
    assert "closed <form>" in fig.layout.title.subtitle.text
    text = embeddable_json(fig)
    assert "closed \\u0026lt;form\\u0026gt;" in text and "\\u003cform" not in text


BLOCKED_IMPORTS = """
import sys, importlib.abc

class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        plugins = ("attnbench.tasks", "attnbench.variants")
        if name.split(".")[0] == "torch" or name.startswith(plugins):
            raise ImportError(f"the leaderboard must not import {name}")

sys.meta_path.insert(0, Blocked())
from attnbench.harness.cli.leaderboard import main
sys.exit(main([sys.argv[1]]))
"""


def test_board_builds_from_the_table_alone_without_torch_or_the_plugin(tmp_path):
    """A task from a plugin that is not installed here: its records describe it, the table
    carries the description, and the page shows it. Importing torch, or any built-in task or
    variant, fails the build (a meta-path finder refuses them)."""
    import subprocess
    import sys

    from attnbench.metrics import Metric
    from attnbench.task_info import TaskInfo

    info = TaskInfo(
        name="plugin_task",
        description="A task whose plugin is not installed here.",
        headline="score",
        metrics=[Metric("score", True, "How well it went", "pts")],
    )
    for run_id, variant, score in (("p1", "plugin_variant", 0.9), ("p2", "other", 0.5)):
        write_record(
            tmp_path,
            make_record(
                run_id,
                status="ok",
                task="plugin_task",
                variant=variant,
                task_params={},
                variant_params={},
                seed=0,
                device="cpu",
                dtype="float32",
                metrics=[{"metric": "score", "value": score, "higher_is_better": True}],
                task_info=info.to_dict(),
                details={"variant_family": "plugin_family"},
            ),
        )
    proc = subprocess.run(
        [sys.executable, "-c", BLOCKED_IMPORTS, str(tmp_path)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    html = (tmp_path / "leaderboard" / "index.html").read_text()
    assert "A task whose plugin is not installed here." in html
    assert 'title="How well it went' in html  # the metric's description, from the table
    overview_header = html.replace("<wbr>", "")  # headers may break after an underscore
    assert "plugin_task: score" in overview_header and 'data-family="plugin_family"' in html
    assert "2 runs" in html


def _write_stale(tmp_path):
    """A throughput run of `linear` measured by older code (a module digest that is not ours)."""
    write_record(
        tmp_path,
        make_record(
            "old",
            variant="linear",
            task_params={"seq_len": 64},
            metrics=[_point("fwd_ms", 9.0, 64, False)],
            task_info=Throughput.describe().to_dict(),
            code_modules={"attnbench.metrics": "an older digest"},
        ),
    )


def test_runs_of_older_code_are_left_out_and_counted(tmp_path):
    _write(tmp_path, "a", "softmax", 64, 2.0)
    _write_stale(tmp_path)
    collect(tmp_path)
    html = build_site(tmp_path).read_text()
    assert "1 run." in html and "1 run of older code is left out" in html
    assert ">linear<" not in html  # its numbers are not on the page
    everything = build_site(tmp_path, include_stale=True).read_text()
    assert "2 runs." in everything and "older code are left out" not in everything
    assert "1 of them are of older code than the installed one" in everything
    assert ">linear<" in everything


def test_a_board_of_current_code_says_none_is_stale(tmp_path):
    _write(tmp_path, "a", "softmax", 64, 2.0)
    collect(tmp_path)
    assert "All of them are of the installed code (none stale)." in build_site(tmp_path).read_text()


def test_an_ok_run_whose_latest_attempt_failed_says_so(tmp_path):
    _write(tmp_path, "a", "softmax", 64, 2.0)
    _write(tmp_path, "a", "softmax", 64, 2.0, status="timeout", error="too slow")  # a re-run
    collect(tmp_path)
    html = build_site(tmp_path).read_text()
    assert "ok, latest attempt timeout" in html
    assert "fwd_ms" in html  # the ok record's numbers are still shown


def test_the_overview_groups_by_machine_not_by_device(tmp_path):
    for name, hardware, threads, ms in (
        ("laptop", "Laptop CPU", 4, 3.0),
        ("server", "Server CPU", 4, 1.0),
        ("server-1t", "Server CPU", 1, 2.0),
    ):
        write_record(
            tmp_path,
            make_record(
                name,
                task_params={"seq_len": 64},
                hardware=hardware,
                threads=threads,
                metrics=[_point("fwd_ms", ms, 64, False), _point("fwd_ratio", ms, 64, False)],
                task_info=Throughput.describe().to_dict(),
            ),
        )
    collect(tmp_path)
    html = build_site(tmp_path).read_text()
    # threads are not a machine: the server's 4- and 1-thread runs are one row (their timings
    # compete only at equal threads, in contests of their own)
    for machine in ("Laptop CPU", "Server CPU"):
        assert f'data-machine="{machine}"' in html
    assert html.count('data-machine="Server CPU"') == 1


def test_a_board_of_only_older_code_points_to_the_history(tmp_path):
    _write_stale(tmp_path)
    collect(tmp_path)
    html = build_site(tmp_path).read_text()
    assert "No results of the current code: all 1 runs" in html
    assert "No results yet" not in html  # the records exist; they are only stale
    assert ">linear<" in build_site(tmp_path, include_stale=True).read_text()


def test_bar_chart_compares_each_variant_with_the_reference_level_per_setting(tmp_path):
    """A task declaring ``bar_charts`` gets, per setting, one bar per variant (the mean over its
    runs, each run a marker) and each reference metric as one horizontal level averaged over that
    setting's runs only; the single values never become a curve over one x value, and text from
    the results is escaped."""
    from attnbench.metrics import Metric
    from attnbench.task_info import TaskInfo

    info = TaskInfo(
        name="bars_task",
        headline="mse",
        metrics=[Metric("mse", False, "error"), Metric("mse_ls", None, "least squares")],
        charts=["mse"],
        bar_charts={"mse": {"mse_ls": "least squares", "mse_missing": "never reported"}},
    )
    runs = [  # (variant, seed, n, mse, mse_ls)
        ("identity", 0, 100, 1.0, 1.0),
        ("identity", 1, 100, 3.0, 3.0),
        (HOSTILE, 0, 100, 50.0, 2.0),
        ("identity", 0, 1000, 7.0, 7.0),
    ]
    for i, (variant, seed, n, mse, ls) in enumerate(runs):
        write_record(
            tmp_path,
            make_record(
                f"bar{i}",
                task="bars_task",
                variant=variant,
                task_params={"n_points": n},
                seed=seed,
                metrics=[
                    {"metric": "mse", "value": mse, "higher_is_better": False},
                    {"metric": "mse_ls", "value": ls, "higher_is_better": None},
                ],
                task_info=info.to_dict(),
            ),
        )
    collect(tmp_path)
    html = build_site(tmp_path).read_text()
    assert HOSTILE not in html
    figures = _figures(html)
    task_charts = [k for k in figures if k.startswith("chart-bars_task-")]
    assert sorted(task_charts) == ["chart-bars_task-mse-bars-0", "chart-bars_task-mse-bars-1"]
    bar_figures = [f for k, f in figures.items() if "-bars-" in k]
    assert {f["layout"]["title"]["text"] for f in bar_figures} == {"bars_task: mse per variant"}
    by_subtitle = {f["layout"]["title"]["subtitle"]["text"]: f for f in bar_figures}
    # the setting, then what all bars share, said once
    assert sorted(by_subtitle) == [  # the setting in words: the task declares no label
        "number of points 100 · cpu0 · float32",
        "number of points 1000 · cpu0 · float32",
    ]
    small = by_subtitle["number of points 100 · cpu0 · float32"]
    large = by_subtitle["number of points 1000 · cpu0 · float32"]
    bars = small["data"][0]
    assert bars["type"] == "bar"
    means = dict(zip(bars["x"], bars["y"], strict=True))
    assert means["identity"] == 2.0  # the mean of its two seeds
    assert means[html_escape(HOSTILE, quote=False)] == 50.0  # escaped for Plotly
    assert len(set(bars["marker"]["color"])) == 2  # a colour per variant
    (marks,) = [t for t in small["data"] if t["name"] == "each run"]
    assert sorted(marks["y"]) == [1.0, 3.0, 50.0]
    (level,) = [t for t in small["data"] if t["name"].startswith("least squares")]
    assert set(level["y"]) == {2.0} and level["line"]["dash"] == "dash"  # (1 + 3 + 2)/3
    assert not [t for t in small["data"] if t["name"].startswith("never reported")]
    assert small["layout"]["yaxis"]["type"] == "log"  # 2 to 50 spans more than a decade
    (large_level,) = [t for t in large["data"] if t["name"].startswith("least squares")]
    assert set(large_level["y"]) == {7.0}  # the other setting's own runs only


def test_a_curve_needs_two_points_on_its_axis(tmp_path):
    """One x value is not a curve (the task table shows the number): no chart for it."""
    _write(tmp_path, "a", "softmax", 64, 2.0)
    collect(tmp_path)
    assert 'data-chart="chart-throughput-' not in build_site(tmp_path).read_text()
    _write(tmp_path, "b", "softmax", 128, 4.0)
    collect(tmp_path)
    assert 'data-chart="chart-throughput-' in build_site(tmp_path).read_text()


# --- ours vs theirs (harness.leaderboard.peers) ---------------------------------------------

LOCAL = "local-attention 1.11.2"


def _peer_record(tmp_path, name, variant, seq_len, fwd_ms, peer_of="", library="", **fields):
    """A throughput record of ``variant`` (a library's when ``library`` is given) on machine
    cpu0, one thread, host "box" unless ``fields`` say otherwise."""
    status = fields.pop("status", "ok")
    steady = fields.pop("steady", None)  # its fwd_steady flag; None: not recorded
    metrics = (
        [
            _point("fwd_ms", fwd_ms, seq_len, False),
            _point("fwd_ratio", fwd_ms / REFERENCE_MS, seq_len, False),
            _point("peak_mem_mib", 2 * fwd_ms, seq_len, False),
        ]
        if status == "ok"
        else []
    )
    if steady is not None:
        metrics.append(_point("fwd_steady", steady, seq_len, None))
    write_record(
        tmp_path,
        make_record(
            name,
            status=status,
            variant=variant,
            task_params={"seq_len": seq_len, "causal": True},
            metrics=metrics,
            env={"attnbench_version": "0.2.0", "hostname": fields.pop("hostname", "box")},
            task_info=Throughput.describe().to_dict(),
            details={"variant_family": "sparse", "peer_of": peer_of, "variant_library": library},
            **fields,
        ),
    )


def _section(tmp_path):
    from attnbench.harness.leaderboard.peers import peer_section
    from attnbench.harness.leaderboard.steadiness import judge_steadiness
    from attnbench.harness.results.collect import read_table

    collect(tmp_path)
    frame, infos = read_table(tmp_path / "results.parquet")
    return peer_section(judge_steadiness(frame, infos), infos)


def _cells(table):
    return [[c.text for c in row] for row in table.rows]


def test_peer_ratio_is_ours_over_the_peer_per_setting_with_both_versions_named(tmp_path):
    """Ratios are exact quotients of the seed means (no noise: hand-made values), per length;
    the newest record of a job counts (an older one of the same job, also current, does not)."""
    _peer_record(tmp_path, "w512", "window", 512, 2.0)
    _peer_record(tmp_path, "w512s1", "window", 512, 4.0, seed=1)  # seed mean: 3.0
    _peer_record(tmp_path, "w1024-old", "window", 1024, 100.0, created_at="2020-01-01T00:00:00")
    _peer_record(tmp_path, "w1024", "window", 1024, 6.0)  # newer: replaces the 100.0
    for name, n, ms in (("p512", 512, 4.0), ("p1024", 1024, 3.0)):
        _peer_record(tmp_path, name, "peer_local_window", n, ms, "window", LOCAL)
    section = _section(tmp_path)
    (pt,) = section.tables
    assert pt.task == "throughput" and pt.how == "ours / peer"
    assert [c.header for c in pt.table.columns] == [
        "ours / peer",
        "machine",
        "dtype",
        "task.seq_len",
        "fwd_ratio",
        "fwd_ms",
        "peak_mem_mib",
    ]
    label = f"window (attnbench 0.2.0) / peer_local_window ({LOCAL})"
    assert _cells(pt.table) == [  # fwd_ratio is fwd_ms / REFERENCE_MS in these records
        [label, "cpu0", "float32", "512", "0.75 (0.75 / 1)", "0.75 (3 / 4)", "0.75 (6 / 8)"],
        [label, "cpu0", "float32", "1024", "2 (1.5 / 0.75)", "2 (6 / 3)", "2 (12 / 6)"],
    ]
    assert pt.table.rows[0][5].sort == 0.75 and not section.unpaired
    html = build_site(tmp_path).read_text()
    assert "Ours vs theirs" in html and "ratios across machines are not made" in html
    assert label in html and "0.75 (3 / 4)" in html
    # everywhere else the library variant is named with its library
    assert f"peer_local_window ({LOCAL})" in html.split('id="overview-table"')[1]


def test_a_ratio_from_an_unsteady_timing_is_marked(tmp_path):
    _peer_record(tmp_path, "w", "window", 512, 2.0, steady=1.0)
    _peer_record(tmp_path, "p", "peer_local_window", 512, 4.0, "window", LOCAL, steady=0.0)
    (pt,) = _section(tmp_path).tables
    ratio, fwd, mem = pt.table.rows[0][3:6]  # pair, machine, dtype, fwd_ratio, fwd_ms, peak
    assert fwd.text == "~0.5 (2 / 4)" and fwd.note.startswith("the timing of peer is unsteady")
    assert ratio.text == "~0.5 (0.5 / 1)" and ratio.note.startswith("the timing of peer")
    assert mem.note == ""  # peak memory is not a timing


def test_rows_of_different_machines_threads_or_hosts_are_not_paired(tmp_path):
    _peer_record(tmp_path, "w", "window", 512, 2.0)
    _peer_record(tmp_path, "p1", "peer_local_window", 512, 4.0, "window", LOCAL, hardware="cpu1")
    _peer_record(tmp_path, "p2", "peer_local_window", 512, 4.0, "window", LOCAL, threads=2)
    _peer_record(tmp_path, "p3", "peer_local_window", 512, 4.0, "window", LOCAL, hostname="other")
    _peer_record(tmp_path, "p4", "peer_local_window", 512, 4.0, "window", LOCAL, dtype="float64")
    section = _section(tmp_path)
    assert section.tables == []
    assert section.unpaired == [
        "peer_local_window (peer of window): no setting where both have current ok runs on the "
        "same machine, host and dtype"
    ]
    html = build_site(tmp_path).read_text()
    assert 'id="peers-none"' in html and "0.5 (2 / 4)" not in html


def test_an_unavailable_peer_is_listed_as_such_and_not_as_a_failure(tmp_path):
    reason = "flash-attn needs a CUDA device; this job runs on cpu."
    _peer_record(tmp_path, "s", "softmax", 512, 2.0)
    for i, n in enumerate((512, 1024)):
        _peer_record(
            tmp_path,
            f"f{i}",
            "peer_flash_softmax",
            n,
            0.0,
            "softmax",
            "flash-attn 2.8.3",
            status="unsupported",
            error=reason,
        )
    _peer_record(tmp_path, "x", "softmax", 1024, 0.0, status="failed", error="boom")  # ours
    section = _section(tmp_path)
    assert section.tables == [] and section.unpaired == []
    assert _cells(section.unavailable) == [
        [
            "peer_flash_softmax",
            "flash-attn 2.8.3",
            "softmax",
            "cpu0",
            "float32",
            reason,
            "2",
        ]
    ]
    html = build_site(tmp_path).read_text()
    unfinished = html.split('id="unfinished"')[1]
    assert "Unavailable here" in html and reason in html.split('id="unfinished"')[0]
    assert "boom" in unfinished and "peer_flash_softmax" not in unfinished


def test_a_quality_task_shows_both_values_side_by_side(tmp_path):
    from attnbench.metrics import Metric
    from attnbench.task_info import TaskInfo

    info = TaskInfo(name="quality", headline="accuracy", metrics=[Metric("accuracy", True, "acc")])
    for name, variant, acc, peer_of, lib in (
        ("o", "linear", 0.5, "", ""),
        ("t", "peer_fla_linear", 0.75, "linear", "fla-core 0.6.0"),
        ("n", "peer_performer", 0.25, "", "performer-pytorch 1.1.4"),  # no counterpart here
    ):
        write_record(
            tmp_path,
            make_record(
                name,
                task="quality",
                variant=variant,
                task_params={"d_model": 32},
                metrics=[{"metric": "accuracy", "value": acc, "higher_is_better": True}],
                task_info=info.to_dict(),
                env={"attnbench_version": "0.2.0", "hostname": "box"},
                details={"peer_of": peer_of, "variant_library": lib},
            ),
        )
    (pt,) = _section(tmp_path).tables
    assert pt.how == "side by side" and [c.header for c in pt.table.columns][-1] == "accuracy"
    (row,) = pt.table.rows
    assert row[0].text == "linear (attnbench 0.2.0) / peer_fla_linear (fla-core 0.6.0)"
    assert row[-1].text == "0.5 vs 0.75 (1 / 1 seeds)" and row[-1].sort == -0.25
    html = build_site(tmp_path).read_text()
    assert "peer_performer (performer-pytorch 1.1.4)" in html.split('data-task="quality"')[1]


def test_peer_names_libraries_and_reasons_are_escaped(tmp_path):
    _peer_record(tmp_path, "w", HOSTILE, 512, 2.0)
    _peer_record(tmp_path, "w2", HOSTILE, 1024, 2.0)
    _peer_record(tmp_path, "p", f"peer{HOSTILE}", 512, 4.0, HOSTILE, f"lib{HOSTILE}")
    _peer_record(tmp_path, "p2", f"peer{HOSTILE}", 1024, 4.0, HOSTILE, f"lib{HOSTILE}")
    _peer_record(
        tmp_path,
        "u",
        "peer_x",
        512,
        0.0,
        HOSTILE,
        f"x{HOSTILE}",
        status="unsupported",
        error=f"needs {HOSTILE}</script>",
    )
    section = _section(tmp_path)
    assert section.tables and section.unavailable.rows
    html = build_site(tmp_path).read_text()
    assert HOSTILE not in html and '</script>"' not in html
    assert "lib&lt;img src=x onerror=alert(1)&gt;" in html  # in the tables, escaped
    assert "lib\\u0026lt;img src=x onerror=alert(1)\\u0026gt;" in html  # a chart legend, escaped


def test_a_table_without_library_variants_has_no_peer_section(tmp_path):
    html = _two_variant_page(tmp_path)
    assert 'id="peers"' not in html


# --- presentation: integer axes, scatters, columns per mode, quality against density ---------


def test_integer_axes_get_integer_ticks_only():
    from attnbench.harness.leaderboard.charts import integer_ticks

    assert integer_ticks(pd.Series([0.0, 1.0, 2.0, 3.0])) == {
        "tickmode": "array",
        "tickvals": [0.0, 1.0, 2.0, 3.0],
        "ticktext": ["0", "1", "2", "3"],
    }
    assert integer_ticks(pd.Series([2.0, None, 1.0, 2.0]))["ticktext"] == ["1", "2"]
    assert integer_ticks(pd.Series([0.5, 1.0])) == {}  # a scale or temperature: Plotly's ticks
    assert integer_ticks(pd.Series([], dtype=float)) == {}
    many = integer_ticks(pd.Series(range(40), dtype=float))  # 39 / 12 → a step of 5
    assert many == {"tickmode": "linear", "tick0": 0.0, "dtick": 5, "tickformat": "d"}
    assert integer_ticks(pd.Series(range(1, 400), dtype=float))["dtick"] == 50
    # on a log axis, ticks at most 1/12 of the span apart, powers of two first
    ticks = integer_ticks(pd.Series(range(1, 40), dtype=float), log=True)["tickvals"]
    assert ticks == [1.0, 2.0, 4.0, 8.0, 11.0, 16.0, 22.0, 32.0]
    # a log axis never puts two labels on top of each other: 1088 B beside 1024 B, 4224 beside
    # 4096 are dropped, powers of two kept first (recall's state sizes)
    sizes = [1024.0, 1088.0, 3328.0, 4096.0, 4224.0, 6656.0, 13312.0, 16384.0, 65536.0]
    assert integer_ticks(pd.Series(sizes), log=True)["tickvals"] == [
        1024.0,
        4096.0,
        6656.0,
        16384.0,
        65536.0,
    ]


def test_widths_along_the_state_axis_are_one_chart_with_a_line_per_variant(tmp_path):
    """Zoology's figure from a width sweep: recall's accuracy against the state a sequence holds
    is one chart, each variant's widths one line (not one chart per width)."""
    from attnbench.tasks.recall import Recall

    info = Recall.describe().to_dict()
    states = {"softmax": 1024, "linear": 17}  # bytes per unit of width² (made up)
    for variant, per in states.items():
        for width in (16, 32, 64):
            for seed in (0, 1):
                accuracy = width / 64 - 0.01 * seed
                write_record(
                    tmp_path,
                    make_record(
                        f"{variant}{width}{seed}",
                        task="recall",
                        variant=variant,
                        seed=seed,
                        task_params={"d_model": width, "lr": 0.01},
                        metrics=[
                            _point_at(
                                "accuracy_by_state_bytes", accuracy, "state_bytes", per * width
                            ),
                            _point_at("accuracy", accuracy, None, None),
                        ],
                        task_info=info,
                    ),
                )
    collect(tmp_path)
    figures = _figures(build_site(tmp_path).read_text())
    (state,) = [f for k, f in figures.items() if "accuracy_by_state_bytes" in k]
    lines = {t["name"]: t for t in state["data"]}
    assert set(lines) == {"softmax", "linear"}
    assert lines["linear"]["x"] == [17 * 16, 17 * 32, 17 * 64]
    assert lines["linear"]["text"] == ["model width 16", "model width 32", "model width 64"]


def _curve_rows(x_name, xs, variants=("softmax",)):
    from attnbench.harness.results.collect import COLUMNS

    rows = [
        {
            **dict.fromkeys(COLUMNS),
            "run_id": v,
            "variant": v,
            "variant_params": "{}",
            "task_params": "{}",
            "device": "cpu",
            "dtype": "float32",
            "metric": "probe",
            "value": 0.1 * x,
            "x_name": x_name,
            "x_value": float(x),
        }
        for v in variants
        for x in xs
    ]
    return pd.DataFrame(rows, columns=COLUMNS).assign(machine="cpu0 · 1 threads")


def test_a_curve_over_layers_has_a_tick_at_each_layer_and_none_between():
    from attnbench.harness.leaderboard.charts import curve_figure

    fig = curve_figure(_curve_rows("layer", range(4)), "probe", "probe by layer")
    assert list(fig.layout.xaxis.tickvals) == [0, 1, 2, 3]
    assert list(fig.layout.xaxis.ticktext) == ["0", "1", "2", "3"]
    scales = curve_figure(_curve_rows("scale", (0.5, 1.0, 2.0)), "probe", "by scale")
    assert scales.layout.xaxis.tickvals is None  # not an integer quantity


def test_scatter_names_each_variant_in_the_legend_and_puts_no_text_on_the_plot():
    """Four variants at one point (the issue's case): five traces of one marker each, no text
    mode, the hover of each of the four naming the other three, names escaped for Plotly."""
    import json

    from attnbench.harness.leaderboard.charts import embeddable_json, scatter_figure

    points = pd.DataFrame(
        {
            "label": ["softmax", "window", "strided", "bigbird", HOSTILE],
            "x": [1.0, 1.0, 1.0, 1.0, 0.25],
            "y": [0.9, 0.9, 0.9, 0.9, 0.5],
        }
    )
    fig = scatter_figure(points, "density", "accuracy ↑", "t: accuracy against density")
    assert len(fig.data) == 5 and {t.mode for t in fig.data} == {"markers"}
    assert all(t.text is None for t in fig.data) and fig.layout.showlegend
    names = [t.name for t in fig.data]
    assert names == sorted(names) and HOSTILE in names
    hover = {t.name: t.hovertext[0] for t in fig.data}
    assert hover["softmax"].endswith("same point: bigbird, strided, window")
    assert hover["window"].endswith("same point: bigbird, softmax, strided")
    assert "same point" not in hover[HOSTILE]
    assert len({t.marker.color for t in fig.data}) == 5  # a colour per variant
    drawn = json.loads(embeddable_json(fig))  # what Plotly gets: escaped, line breaks as <br>
    escaped = html_escape(HOSTILE, quote=False)
    assert escaped in [t["name"] for t in drawn["data"]]
    assert "<br>same point: bigbird, strided, window" in drawn["data"][2]["hovertext"][0]


def _modes_info():
    from attnbench.metrics import Metric
    from attnbench.task_info import TaskInfo

    return TaskInfo(
        name="modes_task",
        headline="mse",
        metrics=[Metric("mse", False, "error"), Metric("ratio", False, "error / baseline")],
        column_by="mode",
        column_headlines={"b": "ratio"},
    )


def _write_modes(tmp_path, runs):
    """runs: (name, variant, task_params, mse, ratio)."""
    for name, variant, params, mse, ratio in runs:
        write_record(
            tmp_path,
            make_record(
                name,
                task="modes_task",
                variant=variant,
                task_params=params,
                metrics=[
                    {"metric": "mse", "value": mse, "higher_is_better": False},
                    {"metric": "ratio", "value": ratio, "higher_is_better": False},
                ],
                task_info=_modes_info().to_dict(),
            ),
        )


def test_a_task_with_column_by_gets_a_column_per_value_with_its_own_headline(tmp_path):
    """Rows are relabelled per mode (rows of older records without the parameter stay in the
    task's own column); each column ranks by its declared headline, in sorted order of the
    values."""
    from attnbench.harness.leaderboard.columns import overview_columns
    from attnbench.harness.results.collect import read_table

    _write_modes(
        tmp_path,
        [
            ("a1", "softmax", {"mode": "a"}, 1.0, 50.0),
            ("a2", "linear", {"mode": "a"}, 3.0, 10.0),
            ("b1", "softmax", {"mode": "b"}, 100.0, 2.0),
            ("b2", "linear", {"mode": "b"}, 1.0, 1.0),
            ("old", "softmax", {}, 7.0, 7.0),
        ],
    )
    collect(tmp_path)
    frame, infos = read_table(tmp_path / "results.parquet")
    columns = overview_columns(frame, infos)
    assert [(h.task, h.metric) for h in columns.headlines] == [
        ("modes_task", "mse"),
        ("modes_task (a)", "mse"),
        ("modes_task (b)", "ratio"),
    ]
    assert columns.headlines[2].description == "error / baseline (mode=b)"
    assert set(columns.task_of.values()) == {"modes_task"}
    labels = columns.frame.drop_duplicates("run_id").set_index("run_id")["task"]
    assert labels[test_run_id("a1")] == "modes_task (a)"
    assert labels[test_run_id("b2")] == "modes_task (b)"
    assert labels[test_run_id("old")] == "modes_task"
    assert frame["task"].eq("modes_task").all()  # the input is not changed


def test_the_overview_shows_each_mode_apart_and_never_their_average(tmp_path):
    _write_modes(
        tmp_path,
        [
            ("a1", "softmax", {"mode": "a"}, 1.0, 50.0),
            ("a2", "linear", {"mode": "a"}, 3.0, 10.0),
            ("b1", "softmax", {"mode": "b"}, 100.0, 2.0),
            ("b2", "linear", {"mode": "b"}, 1.0, 1.0),
        ],
    )
    collect(tmp_path)
    html = build_site(tmp_path).read_text()
    overview_html = html.split('id="overview-table"')[1].split("</table>")[0]
    assert "modes_task (a): mse" in overview_html.replace("<wbr>", "")
    assert "modes_task (b): ratio" in overview_html.replace("<wbr>", "")
    cells = {
        row.split("</td>")[1].split(">")[-1]: row
        for row in overview_html.split("<tr ")[1:]  # rows of the body
    }
    # softmax wins mode a on mse (1 < 3), linear wins mode b on the ratio (1 < 2): one each
    assert ">1 · #1<" in cells["softmax"] and ">2 · #2<" in cells["softmax"]
    assert ">3 · #2<" in cells["linear"] and ">1 · #1<" in cells["linear"]
    # one win each, and the two modes of one task are one vote: both 0.5, neither ahead
    assert ">0.500</td>" in cells["softmax"] and ">0.500</td>" in cells["linear"]
    assert "51.5" not in overview_html and "25.5" not in overview_html  # no mean over modes


def test_every_registered_tasks_columns_name_a_parameter_and_declared_metrics():
    import dataclasses

    from attnbench.task import TASKS

    for name in TASKS.names():
        task = TASKS.get(name)
        info = task.describe()
        if not info.column_by:
            assert not info.column_headlines, name
            continue
        fields = {f.name for f in dataclasses.fields(task.Params)}
        assert info.column_by in fields, name
        for metric in info.column_headlines.values():
            declared = info.metric(metric)
            assert declared is not None and declared.higher_is_better is not None, (name, metric)


def _write_quality(tmp_path, runs, info):
    """runs: (name, variant, variant_params, seq_len, accuracy, density or None)."""
    for name, variant, vparams, n, acc, density in runs:
        metrics = [{"metric": "accuracy", "value": acc, "higher_is_better": True}]
        if density is not None:
            metrics.append({"metric": "density", "value": density, "higher_is_better": None})
        write_record(
            tmp_path,
            make_record(
                name,
                task="quality",
                variant=variant,
                variant_params=vparams,
                task_params={"seq_len": n},
                metrics=metrics,
                task_info=info.to_dict(),
            ),
        )


def _quality_info():
    from attnbench.metrics import Metric
    from attnbench.task_info import TaskInfo

    return TaskInfo(name="quality", headline="accuracy", metrics=[Metric("accuracy", True, "acc")])


def test_quality_against_density_averages_each_entrys_runs(tmp_path):
    """One point per variant, or per variant and parameters where it ran with several; x and
    y are means over the entry's runs (here two lengths, where a window covers more or less)."""
    _write_quality(
        tmp_path,
        [
            ("s1", "softmax", {}, 64, 0.9, 1.0),
            ("s2", "softmax", {}, 128, 0.7, 1.0),
            ("w1", "window", {"window": 16}, 64, 0.5, 0.4),
            ("w2", "window", {"window": 16}, 128, 0.3, 0.2),
            ("v1", "window", {"window": 32}, 64, 0.8, 0.7),
        ],
        _quality_info(),
    )
    collect(tmp_path)
    figures = _figures(build_site(tmp_path).read_text())
    (density,) = [f for k, f in figures.items() if k.startswith("chart-density-")]
    points = {t["name"]: (t["x"][0], t["y"][0]) for t in density["data"]}
    assert set(points) == {"softmax", "window window=16", "window window=32"}
    assert points["softmax"] == (1.0, 0.8)
    w16 = points["window window=16"]
    assert abs(w16[0] - 0.3) < 1e-12 and abs(w16[1] - 0.4) < 1e-12
    assert points["window window=32"] == (0.7, 0.8)
    assert density["layout"]["xaxis"]["range"] == [-0.02, 1.05]
    assert "quality: accuracy against density" in density["layout"]["title"]["text"]


def test_a_table_without_density_rows_has_no_density_view(tmp_path):
    _write_quality(
        tmp_path,
        [("s1", "softmax", {}, 64, 0.9, None), ("w1", "window", {}, 64, 0.5, None)],
        _quality_info(),
    )
    collect(tmp_path)
    html = build_site(tmp_path).read_text()
    assert "chart-density-" not in html and 'id="overview-table"' in html


def test_quality_against_cost_and_density_escape_names_and_titles(tmp_path):
    from attnbench.metrics import Metric
    from attnbench.task_info import TaskInfo

    info = TaskInfo(
        name=f"q{HOSTILE}", headline="accuracy", metrics=[Metric("accuracy", True, "acc")]
    )
    for i, variant in enumerate((HOSTILE, "softmax")):
        _write(tmp_path, f"t{i}", variant, 64, 1.0 + i)
        write_record(
            tmp_path,
            make_record(
                f"q{i}",
                task=info.name,
                variant=variant,
                metrics=[
                    {"metric": "accuracy", "value": 0.5, "higher_is_better": True},
                    {"metric": "density", "value": 1.0, "higher_is_better": None},
                ],
                task_info=info.to_dict(),
            ),
        )
    collect(tmp_path)
    html = build_site(tmp_path).read_text()
    assert HOSTILE not in html and "<img" not in html
    figures = _figures(html)
    kinds = sorted(
        k.split("-")[1] for k in figures if k.startswith(("chart-cost", "chart-density"))
    )
    assert kinds == ["cost", "density"]
    for key in figures:
        if key.startswith(("chart-cost", "chart-density")):
            fig = figures[key]
            assert "&lt;img src=x onerror=alert(1)&gt;" in [t["name"] for t in fig["data"]]
            assert fig["layout"]["title"]["text"].startswith("q&lt;img")
            assert all("<img" not in t["hovertext"][0] for t in fig["data"])
    (density,) = [f for k, f in figures.items() if k.startswith("chart-density")]
    assert density["data"][0]["hovertext"][0].endswith("same point: softmax")


def test_every_registered_tasks_steadiness_pairs_declared_metrics():
    from attnbench.task import TASKS

    for name in TASKS.names():
        info = TASKS.get(name).describe()
        for metric, flag in info.steadiness.items():
            assert info.metric(metric) is not None, (name, metric)
            assert info.metric(flag) is not None and info.metric(flag).higher_is_better is None


def _write_timed(tmp_path, run_id, variant, seq_len, fwd_ms, steady=None, info=None, accurate=None):
    """A throughput run; ``steady`` (1.0 / 0.0) is its fwd_steady flag, ``accurate`` its
    fwd_accurate flag, None: not recorded (a record from before the flag existed)."""
    metrics = [
        _point("fwd_ms", fwd_ms, seq_len, False),
        _point("fwd_ratio", fwd_ms / REFERENCE_MS, seq_len, False),
        _point("gflops_fwd", 100 / fwd_ms, seq_len, True),
    ]
    if steady is not None:
        metrics.append(_point("fwd_steady", steady, seq_len, None))
    if accurate is not None:
        metrics.append(_point("fwd_accurate", accurate, seq_len, None))
    write_record(
        tmp_path,
        make_record(
            run_id,
            task="throughput",
            variant=variant,
            task_params={"seq_len": seq_len},
            metrics=metrics,
            env={"device_name": "cpu0"},
            task_info=info or Throughput.describe().to_dict(),
        ),
    )


TIMINGS = [  # (variant, seq_len, fwd_ms): linear is the fastest at 64, but its timing there...
    ("softmax", 64, 2.0),
    ("linear", 64, 1.0),
    ("window", 64, 3.0),
    ("softmax", 128, 4.0),
    ("linear", 128, 8.0),
    ("window", 128, 6.0),
]


def _overview_cells(html: str) -> dict[str, str]:
    """variant → its overview row's HTML."""
    body = html.split('id="overview-table"')[1].split("</table>")[0]
    rows = body.split("<tr data-machine")[1:]
    return {
        re.search(r'<td data-sort="[^"]*">([^<]*)</td>', r.split("</td>", 1)[1]).group(1): r
        for r in rows
    }


def test_unsteady_timings_are_marked_counted_and_left_out_of_ranks(tmp_path):
    for i, (variant, n, ms) in enumerate(TIMINGS):
        steady = 0.0 if (variant, n) == ("linear", 64) else 1.0  # ...was unsteady
        _write_timed(tmp_path, f"t{i}", variant, n, ms, steady)
    collect(tmp_path)
    html = build_site(tmp_path).read_text()
    assert 'id="unsteady-note">1 timing is unsteady' in html
    # the task table: linear's 1 ms is marked, with its note, and is not the best at 64
    section = html.split('data-task="throughput"')[1].split("</table>")[0]
    marked = re.findall(r'<td data-sort="([^"]*)" class="unsteady" title="([^"]*)">~', section)
    # fwd_ratio (0.25 = 1 / REFERENCE_MS), fwd_ms and gflops_fwd of the same timing
    assert [s for s, _ in marked] == ["0.25", "1.0", "100.0"]
    assert all("never settled" in note for _, note in marked)
    assert '<td data-sort="2.0" class="best">2</td>' in section  # softmax is the best at 64
    # the chart draws it hollow
    assert '"circle-open"' in html and "hollow: unsteady timing" in html


def test_the_overview_leaves_an_unsteady_cost_out_of_its_rank(tmp_path):
    """The cost column is at 128 tokens (`stated_position`): linear's only timing there is
    unsteady, so it is shown marked and unranked; softmax and window compete."""
    for i, (variant, n, ms) in enumerate(TIMINGS):
        steady = 0.0 if (variant, n) == ("linear", 128) else 1.0
        _write_timed(tmp_path, f"t{i}", variant, n, ms, steady)
    collect(tmp_path)
    cells = _overview_cells(build_site(tmp_path).read_text())
    # throughput is a cost, ranked in its own column and never a quality rank
    assert "· #1</td>" in cells["softmax"] and "· #2</td>" in cells["window"]
    assert '<td data-sort="inf">–</td>' in cells["softmax"]  # no quality column, no quality rank
    assert 'class="unsteady" title="only 1 untrusted timing here' in cells["linear"]
    assert "· #" not in cells["linear"].split('class="unsteady"')[1].split("</td>")[0]
    assert "unsteady" not in cells["softmax"]


def test_a_cost_column_is_at_the_size_measured_for_the_most_variants(tmp_path):
    """Not a mean over sizes: the cost at 64 and at 128 tokens are not one number. 64 and 128
    were measured for all three variants, 256 for softmax alone: the column is at 128 (the
    largest of the tied), says so in its header and in the rule, and holds the values there."""
    for i, (variant, n, ms) in enumerate([*TIMINGS, ("softmax", 256, 16.0)]):
        _write_timed(tmp_path, f"t{i}", variant, n, ms, 1.0)
    collect(tmp_path)
    html = build_site(tmp_path).read_text().replace("<wbr>", "")  # break hints in long names
    # in the task's own words (its label, the metric's and the axis's: TaskInfo.label, axes)
    named = "Throughput (attention core): forward time relative to dense SDPA"
    assert f"{named} @ sequence length 128 tokens" in html.split('id="overview-table"')[1]
    assert f"Cost ({named} at sequence length 128 tokens)" in html
    cells = _overview_cells(html)
    # at 128: softmax 4/4, window 6/4, linear 8/4 (a mean over sizes would put linear second)
    assert ">1 · #1</td>" in cells["softmax"]
    assert ">1.5 · #2</td>" in cells["window"]
    assert ">2 · #3</td>" in cells["linear"]


def test_a_kernel_outside_its_tolerance_is_marked_and_enters_no_contest(tmp_path):
    """A planted wrong kernel: linear's timings are the fastest at every size but its runs say
    fwd_accurate = 0 (its error exceeded its declared tolerance). Its times are shown marked
    with the error's note in the task table, drawn hollow with their own hover line, never the
    best of a size, and the overview leaves them out of the cost rank."""
    for i, (variant, n, ms) in enumerate(TIMINGS):
        fast = ms / 10 if variant == "linear" else ms  # the wrong kernel is the fastest
        _write_timed(tmp_path, f"t{i}", variant, n, fast, 1.0, accurate=float(variant != "linear"))
    collect(tmp_path)
    html = build_site(tmp_path).read_text()
    section = html.split('data-task="throughput"')[1].split("</table>")[0]
    marked = re.findall(r'class="unsteady" title="(inaccurate kernel[^"]*)">✗', section)
    assert len(marked) == 2 * 3  # fwd_ratio, fwd_ms and gflops_fwd at 64 and 128 tokens
    assert all("declared tolerance" in note for note in marked)
    assert '<td data-sort="2.0" class="best">2</td>' in section  # softmax is the best at 64
    assert "kernel error above its tolerance: not ranked" in html
    cells = _overview_cells(html)
    assert 'title="only 1 untrusted timing here' in cells["linear"]
    assert "· #" not in cells["linear"].split('class="unsteady"')[1].split("</td>")[0]
    assert "· #1</td>" in cells["softmax"]


def test_unsteady_marks_keep_names_escaped(tmp_path):
    _write_timed(tmp_path, "h1", HOSTILE, 64, 1.0, 0.0)
    _write_timed(tmp_path, "h2", HOSTILE, 128, 2.0, 1.0)
    _write_timed(tmp_path, "s1", "softmax", 64, 2.0, 1.0)
    collect(tmp_path)
    html = build_site(tmp_path).read_text()
    assert HOSTILE not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    assert 'class="unsteady"' in html and '"circle-open"' in html


def test_the_cost_axis_leaves_unsteady_timings_out_or_draws_them_hollow(tmp_path):
    """linear's cost: its unsteady 50 ms is left out, its steady 1 ms kept; window has only an
    unsteady timing: kept, drawn hollow, with a note."""
    info = _quality_info()
    timings = [("softmax", 2.0, 1.0), ("linear", 1.0, 1.0), ("linear", 50.0, 0.0)]
    timings.append(("window", 3.0, 0.0))
    for i, (variant, ms, steady) in enumerate(timings):
        _write_timed(tmp_path, f"t{i}", variant, 64, ms, steady)
    for variant in ("softmax", "linear", "window"):
        write_record(
            tmp_path,
            make_record(
                f"q-{variant}",
                task="quality",
                variant=variant,
                metrics=[{"metric": "accuracy", "value": 0.5, "higher_is_better": True}],
                task_info=info.to_dict(),
            ),
        )
    collect(tmp_path)
    figures = _figures(build_site(tmp_path).read_text())
    (cost,) = [f for k, f in figures.items() if k.startswith("chart-cost")]
    traces = {t["name"]: t for t in cost["data"]}
    # the cost is throughput's fwd_ratio: 1 ms / REFERENCE_MS
    assert traces["linear"]["x"] == [0.25] and traces["linear"]["marker"]["symbol"] == "circle"
    assert traces["window"]["marker"]["symbol"].endswith("-open")
    assert traces["window"]["hovertext"][0].endswith(
        "forward time relative to dense SDPA from unsteady timings only"
    )


def test_records_without_the_flag_are_unknown_not_unsteady(tmp_path):
    older = {k: v for k, v in Throughput.describe().to_dict().items() if k != "steadiness"}
    for i, (variant, n, ms) in enumerate(TIMINGS):
        # half of them from before the flag existed (no fwd_steady), under the current task_info
        _write_timed(tmp_path, f"t{i}", variant, n, ms, None if i % 2 else 1.0)
    _write_timed(tmp_path, "old", "sinkhorn", 64, 5.0, None, info=older)  # an older description
    collect(tmp_path)
    html = build_site(tmp_path).read_text()
    assert "unsteady-note" not in html and 'class="unsteady"' not in html
    assert '"circle-open"' not in html
    cells = _overview_cells(html)
    assert "unsteady" not in cells["linear"]  # its 1 ms at 64 competes, as before


def test_unsupported_runs_are_counted_apart_and_failures_read_as_one_line(tmp_path):
    """Runs unsupported by design are one line, not failures; a real failure is listed with
    the last line of its error and its setting as text, no JSON; the footer says where the
    code came from and counts runs in words."""
    _write(tmp_path, "a", "softmax", 64, 2.0)
    _write(tmp_path, "a2", "softmax", 128, 4.0)
    for i in range(3):
        reason = "variant 'sinkhorn' does not support causal masking."
        _write(tmp_path, f"u{i}", "sinkhorn", 64 * 2**i, 1.0, status="unsupported", error=reason)
    trace = 'Traceback (most recent call last):\n  File "x.py", line 1\nRuntimeError: out of cake'
    _write(tmp_path, "f", "window", 64, 1.0, status="failed", error=trace)
    collect(tmp_path)
    html = build_site(tmp_path).read_text()
    unfinished = html.split('id="unfinished"')[1].split("</section>")[0]
    assert (
        "3 runs unsupported by design: sinkhorn (3): variant &#39;sinkhorn&#39; does not "
        "support causal masking." in unfinished
    )
    rows = unfinished.split("<tbody>")[1]
    assert "sinkhorn" not in rows and rows.count("<tr>") == 1
    assert ">RuntimeError: out of cake<" in rows and "Traceback" not in rows
    assert ">seq_len=64<" in rows and "{" not in rows
    footer = html.split("<footer>")[1]
    assert "dirty tree" not in footer and "commit unknown" not in footer
    assert "not from a git checkout" in footer or "commit " in footer


def test_a_constant_metric_is_said_in_one_line_not_charted(tmp_path):
    for i, n in enumerate((64, 128, 256)):
        _write(tmp_path, f"a{i}", "softmax", n, 2.0)
        _write(tmp_path, f"b{i}", "linear", n, 2.0)
    collect(tmp_path)
    html = build_site(tmp_path).read_text()
    said = "forward latency against sequence length (tokens) is 2 in every run: not charted."
    assert said in html
    assert 'id="chart-throughput-fwd_ms-seq_len"' not in html


def test_the_cost_axis_is_the_cost_measured_for_the_most_variants():
    """Decoding is measured for the causal variants only, so its cost (declared, and first by
    name) must not become the axis every quality chart is drawn against: the cost known for
    the most variants is; a tie goes to the first task by name."""
    import pandas as pd

    from attnbench.harness.leaderboard.tradeoffs import _cost_axis
    from attnbench.task_info import TaskInfo

    def info(name, cost):
        return TaskInfo(name=name, description="", headline=cost, metrics=[], cost_metric=cost)

    infos = {
        "decode": info("decode", "decode_ratio"),
        "throughput": info("throughput", "fwd_ratio"),
    }
    rows = [("decode", "decode_ratio", v) for v in ("softmax", "linear")]
    rows += [("throughput", "fwd_ratio", v) for v in ("softmax", "linear", "sinkhorn")]
    frame = pd.DataFrame(rows, columns=["task", "metric", "variant"])
    assert _cost_axis(frame, infos) == ("throughput", "fwd_ratio")
    tied = frame[frame["variant"] != "sinkhorn"]
    assert _cost_axis(tied, infos) == ("decode", "decode_ratio")
    assert _cost_axis(frame[frame["task"] == "decode"], infos) == ("decode", "decode_ratio")


def test_quality_and_cost_pair_only_within_one_configuration(tmp_path):
    """top-k trained at k = 0.2 (quality) and timed at k = 32 (cost): two settings under one
    name. The chart against cost has no top-k point (nothing pairs them), while softmax, trained
    and timed with the same parameters, has one; once top-k's trained setting is timed too, its
    point is that setting's quality against that setting's cost, labelled with its parameters."""
    info = _quality_info()
    timings = [("t-soft", "softmax", {}, 2.0), ("t-k32", "topk", {"k": 32.0}, 1.0)]

    def timed(run_id, variant, params, ms):
        write_record(
            tmp_path,
            make_record(
                run_id,
                variant=variant,
                variant_params=params,
                task_params={"seq_len": 64},
                metrics=[_point("fwd_ratio", ms / REFERENCE_MS, 64, False)],
                task_info=Throughput.describe().to_dict(),
            ),
        )

    for run in timings:
        timed(*run)
    for variant, params, accuracy in (("softmax", {}, 0.9), ("topk", {"k": 0.2}, 0.8)):
        write_record(
            tmp_path,
            make_record(
                f"q-{variant}",
                task="quality",
                variant=variant,
                variant_params=params,
                metrics=[{"metric": "accuracy", "value": accuracy, "higher_is_better": True}],
                task_info=info.to_dict(),
            ),
        )
    collect(tmp_path)

    def cost_points():
        figures = _figures(build_site(tmp_path).read_text())
        (cost,) = [f for k, f in figures.items() if k.startswith("chart-cost")]
        return {t["name"]: (t["x"][0], t["y"][0]) for t in cost["data"]}

    assert cost_points() == {"softmax": (2.0 / REFERENCE_MS, 0.9)}
    # the overview: one row per configuration, quality on the trained one, cost on the timed one
    rows = _overview_cells(build_site(tmp_path).read_text())
    assert {"topk k=0.2", "topk k=32"} <= set(rows)
    assert "0.8" in rows["topk k=0.2"] and f"{1.0 / REFERENCE_MS:.2f}" not in rows["topk k=0.2"]
    timed("t-k02", "topk", {"k": 0.2}, 3.0)
    collect(tmp_path)
    points = cost_points()
    assert points["topk k=0.2"] == (3.0 / REFERENCE_MS, 0.8)
    assert not any(name.startswith("topk") and name != "topk k=0.2" for name in points)
