"""The leaderboard in a real browser: headless Chromium driven over the DevTools protocol.

Builds the site from a real small sweep (plus one record whose variant name is an HTML injection),
opens it from file://, and checks: a row per variant in the overview, sorting by a header reorders
the rows, every chart was drawn by Plotly (its SVG exists), the hostile name is shown as text and
ran nothing. A screenshot is saved next to the site (``leaderboard/screenshot.png``).

A second, hand-made board (`wide`: many tasks with long names, a task split into columns by its
mode, density rows, four variants at one point, an axis of layers) is opened at 1400 × 900, the
window the issue names: the page is no wider than the window, every overview header can be
scrolled into view inside the table's box with the rank and variant columns frozen, scatter
labels never overlap, integer axes have integer ticks, and quality against density is drawn
where (and only where) the runs record density.

Chromium comes from Debian's ``chromium`` package; the test installs it when it is missing and it
can (root with apt-get), and is skipped, saying why, only where it cannot.
"""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

import pytest
from chromium import Browser, find_chromium
from conftest import run_cli, wait_for_ci_services

HOSTILE = '<img src=x onerror="window.__pwned = 1">'
FAST = [
    "task.backward=false",
    "task.min_run_time=0.01",
    "task.min_samples=4",
    "task.max_timing_s=1",
]
VARIANTS = ["softmax", "linear", "window"]


def _chromium() -> str:
    wait_for_ci_services()
    found = find_chromium()
    if not found:
        pytest.skip(
            "headless Chromium is not installed and could not be installed here "
            "(needs root and apt-get: `apt-get install chromium`)"
        )
    return found


@pytest.fixture(scope="module")
def chromium() -> str:
    """The browser's path, found (or the module's tests skipped) before any board is built."""
    return _chromium()


@pytest.fixture(scope="module")
def site(chromium, tmp_path_factory):
    root = tmp_path_factory.mktemp("browser")
    results = root / "results"
    for task in (
        ["task=throughput", "task.seq_len=64,128,256", *FAST],
        ["task=concentration", "task.source=gaussian", "task.seq_len=64"],
    ):
        proc = run_cli(
            "attnbench", "-m", f"variant={','.join(VARIANTS)}", *task, f"results_dir={results}"
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
    record_file = next((results / "runs").glob("*.json"))
    record = json.loads(record_file.read_text())
    record.update(variant=HOSTILE, run_id="0" * 16)
    (results / "runs" / f"{'0' * 16}.json").write_text(json.dumps(record))
    assert run_cli("attnbench-collect", str(results)).returncode == 0
    proc = run_cli("attnbench-leaderboard", str(results))
    assert proc.returncode == 0, proc.stderr
    return results / "leaderboard"


def show_charts(browser: Browser) -> None:
    """Open every folded group of charts, as a reader clicks each, and let Plotly draw them."""
    browser.eval("document.querySelectorAll('details.charts').forEach(d => { d.open = true; })")
    time.sleep(2.0)  # the toggle events draw them


@pytest.fixture(scope="module")
def page(chromium, site, tmp_path_factory):
    browser = Browser(chromium, tmp_path_factory.mktemp("profile"))
    browser.open((site / "index.html").as_uri())
    time.sleep(1.0)  # Plotly draws after load
    assert browser.eval("document.querySelectorAll('div.chart svg.main-svg').length") == 0
    show_charts(browser)
    yield browser
    browser.close()


OVERVIEW_NAMES = (
    "[...document.querySelectorAll('#overview-table tbody tr')].map(tr => tr.cells[1].textContent)"
)


def test_overview_has_a_row_per_variant(page):
    names = page.eval(OVERVIEW_NAMES)
    assert sorted(names) == sorted([*VARIANTS, HOSTILE])


def test_sorting_by_a_header_reorders_the_rows(page):
    before = page.eval(OVERVIEW_NAMES)
    page.eval("document.querySelector('#overview-table th[data-col=\"1\"]').click()")
    ascending = page.eval(OVERVIEW_NAMES)
    page.eval("document.querySelector('#overview-table th[data-col=\"1\"]').click()")
    descending = page.eval(OVERVIEW_NAMES)
    assert ascending == sorted(before) and descending == ascending[::-1]
    assert ascending != descending
    sort = page.eval("document.querySelector('#overview-table th[data-col=\"1\"]').ariaSort")
    assert sort == "descending"


def test_every_chart_was_drawn_by_plotly(page):
    charts = page.eval("document.querySelectorAll('div.chart').length")
    drawn = page.eval("document.querySelectorAll('div.chart svg.main-svg').length")
    traces = page.eval("document.querySelectorAll('div.chart g.trace').length")
    assert charts >= 2  # throughput (its times and memory in one chart's menu), concentration
    assert drawn >= charts and traces > 0


def test_a_merged_charts_menu_switches_its_view(page):
    """Throughput's time ratio, latency and memory against length are one chart with a menu
    (`merged_figure`): Plotly draws the menu, and each of its buttons, applied as Plotly applies
    it, shows that view's traces only and that view's axis title."""
    views = page.eval(
        """(() => {
          const div = [...document.querySelectorAll('div.chart')]
            .find(d => d.id.startsWith('chart-throughput-') && d.layout && d.layout.updatemenus);
          const drawn = div.querySelectorAll('g.updatemenu-container').length;
          const out = [];
          for (const button of div.layout.updatemenus[0].buttons) {
            Plotly.update(div, button.args[0], button.args[1]);
            const shown = div.data.filter(t => t.visible !== false).length;
            out.push([button.label, div.layout.yaxis.title.text, shown, drawn]);
          }
          return out;
        })()"""
    )
    assert len(views) >= 2 and all(drawn == 1 for *_, drawn in views)
    labels = [label for label, *_ in views]
    assert any("latency" in label for label in labels), labels
    assert len({title for _, title, *_ in views}) == len(views)  # each view its own y axis
    assert all(shown > 0 for _, _, shown, _ in views)


def test_hostile_variant_name_is_text_and_ran_nothing(page):
    assert page.eval("window.__pwned === undefined")
    assert page.eval(
        f"[...document.querySelectorAll('td')].some(td => td.textContent === {json.dumps(HOSTILE)})"
    )
    assert page.eval("document.querySelectorAll('td img').length") == 0


def test_screenshot_is_saved_next_to_the_site(page, site):
    png = page.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
    (site / "screenshot.png").write_bytes(base64.b64decode(png["data"]))
    assert (site / "screenshot.png").read_bytes().startswith(b"\x89PNG")


# --- the hand-made wide board, at 1400 × 900 ----------------------------------------------------

WIDTH, HEIGHT = 1400, 900
SAME_POINT = ["softmax", "window", "strided", "bigbird"]  # same quality, latency and density
WIDE_VARIANTS = [*SAME_POINT, "linear", HOSTILE]
LONG_TASKS = [f"quality_task_number_{i}_with_a_long_name" for i in range(7)]
NO_DENSITY = LONG_TASKS[-1]  # a task of older code: no density rows, so no density chart


def _wide_records(results) -> None:
    from conftest import make_record

    from attnbench.harness.jobs.records import write_record
    from attnbench.metrics import Metric
    from attnbench.task_info import TaskInfo
    from attnbench.tasks.throughput import Throughput

    def write(name, task, variant, info, params, points):
        write_record(
            results,
            make_record(
                name,
                task=task,
                variant=variant,
                task_params=params,
                metrics=points,
                task_info=info.to_dict(),
                details={"variant_family": "dense" if variant == "softmax" else "sparse"},
            ),
        )

    quality = [Metric("accuracy", True, "Share right"), Metric("density", None, "pairs scored")]
    modes = TaskInfo(
        name="modes_task",
        headline="mse",
        metrics=[Metric("mse", False, "error"), Metric("ratio", False, "error / baseline")],
        column_by="mode",
        column_headlines={"b": "ratio"},
    )
    layers = TaskInfo(
        name="layers_task",
        headline="probe_mean",
        metrics=[Metric("probe", True, "by layer"), Metric("probe_mean", True, "mean")],
        charts=["probe"],
    )
    for i, variant in enumerate(WIDE_VARIANTS):
        same = variant in SAME_POINT
        fwd = 1.0 if same else 0.5 + i
        write(
            f"t{i}",
            "throughput",
            variant,
            Throughput.describe(),
            {"seq_len": 256},
            [
                _point("fwd_ms", fwd, False, "seq_len", 256),
                _point("fwd_ratio", fwd, False, "seq_len", 256),
            ],
        )
        for j, task in enumerate(LONG_TASKS):
            info = TaskInfo(name=task, headline="accuracy", metrics=quality)
            points = [_point("accuracy", 1.0 if same else 0.1 * (i + j), True)]
            if task != NO_DENSITY:
                points.append(_point("density", 1.0 if same else 0.25))
            write(f"q{i}-{j}", task, variant, info, {"seq_len": 64}, points)
        for mode, mse in (("a", 1.0 + i), ("b", 100.0 - i)):
            write(
                f"m{i}{mode}",
                "modes_task",
                variant,
                modes,
                {"mode": mode},
                [_point("mse", mse, False), _point("ratio", mse / 10, False)],
            )
        write(
            f"l{i}",
            "layers_task",
            variant,
            layers,
            {},
            [_point("probe_mean", 0.5, True)]
            + [_point("probe", 0.1 * k + 0.01 * i, True, "layer", k) for k in range(5)],
        )


def _point(metric, value, hib=None, x_name=None, x=None):
    """One metric point of a hand-made record."""
    return {
        "metric": metric,
        "value": value,
        "x_name": x_name,
        "x_value": x,
        "higher_is_better": hib,
    }


def _open_board(tmp_path_factory, name: str, write_records) -> tuple[Browser, Path]:
    """Write a hand-made board's records (``write_records(results)``), collect, build it, and
    open it at WIDTH × HEIGHT once Plotly has drawn: (browser, index.html)."""
    from attnbench.harness.leaderboard import build_site
    from attnbench.harness.results.collect import collect

    results = tmp_path_factory.mktemp(name) / "results"
    write_records(results)
    collect(results)
    index = build_site(results)
    browser = Browser(_chromium(), tmp_path_factory.mktemp("profile"), (WIDTH, HEIGHT))
    browser.viewport(WIDTH, HEIGHT)
    browser.open(index.as_uri())
    show_charts(browser)
    return browser, index


@pytest.fixture(scope="module")
def wide(tmp_path_factory):
    browser, index = _open_board(tmp_path_factory, "wide", _wide_records)
    yield browser
    png = browser.call("Page.captureScreenshot", format="png")
    (index.parent / "screenshot-1400x900.png").write_bytes(base64.b64decode(png["data"]))
    browser.close()


BOX = "document.querySelector('#overview-table').closest('.table-box')"


def test_the_page_is_no_wider_than_the_window(wide):
    assert wide.eval("window.innerWidth") == WIDTH
    assert wide.eval("document.documentElement.scrollWidth") <= WIDTH
    # the overview is wider than its box here, so the box's scrolling is what is tested below
    assert wide.eval(f"{BOX}.scrollWidth > {BOX}.clientWidth")


def test_every_overview_header_can_be_scrolled_into_view(wide):
    """Header by header, left to right, scrolled into view inside the table's box: each is
    then the element drawn at its own centre (not hidden under the frozen columns), inside the
    window."""
    seen = wide.eval(
        f"""(() => {{
          const box = {BOX};
          box.scrollIntoView();
          box.scrollLeft = 0;
          return [...document.querySelectorAll('#overview-table th')].map(th => {{
            th.scrollIntoView({{block: 'nearest', inline: 'nearest'}});
            const r = th.getBoundingClientRect();
            const x = (r.left + r.right) / 2, y = (r.top + r.bottom) / 2;
            const hit = document.elementFromPoint(x, y);
            return [th.textContent, th.contains(hit), r.left >= 0 && r.right <= {WIDTH}];
          }});
        }})()"""
    )
    headers = [text for text, _, _ in seen]
    assert len(headers) == 6 + len(LONG_TASKS) + 4  # + throughput, two modes, layers
    assert [row for row in seen if not (row[1] and row[2])] == []


def test_rank_and_variant_stay_in_view_when_the_table_scrolls(wide):
    cells = wide.eval(
        f"""(() => {{
          const box = {BOX};
          box.scrollIntoView();
          box.scrollLeft = box.scrollWidth;
          const row = document.querySelector('#overview-table tbody tr');
          return [0, 1].map(i => {{
            const r = row.cells[i].getBoundingClientRect();
            const hit = document.elementFromPoint((r.left + r.right) / 2, (r.top + r.bottom) / 2);
            return [r.left, r.right, row.cells[i].contains(hit)];
          }}).concat([[box.scrollLeft, box.getBoundingClientRect().left, 0]]);
        }})()"""
    )
    (rank_left, rank_right, rank_seen), (var_left, _, var_seen), (scrolled, box_left, _) = cells
    assert scrolled > 0  # it did scroll
    assert rank_seen and var_seen
    assert abs(rank_left - box_left) <= 2 and var_left >= rank_right - 1  # side by side


def test_a_task_with_modes_has_a_column_per_mode(wide):
    headers = wide.eval(
        "[...document.querySelectorAll('#overview-table th')].map(t => t.textContent)"
    )
    assert "modes_task (a): mse ↓" in headers and "modes_task (b): ratio ↓" in headers
    assert not any(h.startswith("modes_task:") for h in headers)


TRADEOFFS = (
    "[...document.querySelectorAll("
    '\'div.chart[id^="chart-cost-"], div.chart[id^="chart-density-"]\')]'
)


def test_scatter_labels_never_overlap_and_every_variant_is_in_the_legend(wide):
    charts = wide.eval(
        f"""{TRADEOFFS}.map(div => {{
          const boxes = [...div.querySelectorAll('.scatterlayer text')]
            .map(t => t.getBoundingClientRect())
            .filter(r => r.width > 0 && r.height > 0);
          const overlaps = boxes.some((a, i) => boxes.some((b, j) => j > i &&
            a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom));
          const legend = [...div.querySelectorAll('g.legend text.legendtext')]
            .map(t => t.textContent);
          return [div.id, overlaps, legend];
        }})"""
    )
    ids = [c[0] for c in charts]
    # every ranked column: the long tasks, the two modes and the layers task
    assert len([i for i in ids if i.startswith("chart-cost-")]) == len(LONG_TASKS) + 3
    for chart_id, overlaps, legend in charts:
        assert not overlaps, chart_id
        assert sorted(legend) == sorted(WIDE_VARIANTS), chart_id  # the hostile name as text


def test_quality_against_density_only_where_runs_record_density(wide):
    ids = wide.eval(f"{TRADEOFFS}.map(d => d.id)")
    density = [i for i in ids if i.startswith("chart-density-")]
    assert len(density) == len(LONG_TASKS) - 1
    assert not any(NO_DENSITY in i for i in density)
    drawn = wide.eval(
        f"{TRADEOFFS}.filter(d => d.id.startsWith('chart-density-'))"
        ".every(d => d.querySelectorAll('svg.main-svg').length > 0)"
    )
    assert drawn


def test_an_axis_of_layers_has_integer_ticks(wide):
    ticks = wide.eval(
        "[...document.querySelectorAll('#chart-layers_task-probe-layer .xtick text')]"
        ".map(t => t.textContent)"
    )
    assert ticks == ["0", "1", "2", "3", "4"]


def test_hostile_text_on_the_wide_board_ran_nothing(wide):
    assert wide.eval("window.__pwned === undefined")
    assert wide.eval("document.querySelectorAll('img').length") == 0


# --- a board whose every text place carries hostile strings --------------------------------------

LINK = '<a href="https://evil.example/q">x</a>'
IMG_TAG = '<img src=x onerror="window.__pwned = 2">'
HOSTILE_DTYPE = "float32<b>"


def _hostile_records(results) -> None:
    """Records drawing every chart type of the board (throughput-like curves with their scaling
    fits, bars with a reference level, quality against cost and density, peers, tuned values)
    whose variant names, variant and task parameter values, hardware, dtype and metric
    descriptions are HTML."""
    from conftest import make_record

    from attnbench.harness.jobs.records import write_record
    from attnbench.metrics import Metric
    from attnbench.task_info import ScalingFit, TaskInfo, Tuning

    speed = TaskInfo(
        name="speed",
        description=f"speed {IMG_TAG}",
        headline="fwd_ms",
        metrics=[
            Metric("fwd_ms", False, f"latency {LINK}", unit="ms"),
            Metric("density", None, IMG_TAG),
        ],
        charts=["fwd_ms"],
        cost_metric="fwd_ms",
        scaling_fits=[ScalingFit("fwd_ms", "seq_len", reference_variant="softmax")],
    )
    quality = TaskInfo(
        name="quality",
        headline="accuracy",
        metrics=[
            Metric("accuracy", True, f"share right {LINK}"),
            Metric("val_accuracy", True, IMG_TAG),
            Metric("density", None, IMG_TAG),
        ],
        tuning=Tuning(["lr"], "val_accuracy"),
    )
    bars = TaskInfo(
        name="levels",
        headline="mse",
        metrics=[Metric("mse", False, f"error {IMG_TAG}"), Metric("mse_ls", None, LINK)],
        bar_charts={"mse": {"mse_ls": f"least squares {LINK}"}},
    )

    def write(name, info, variant, task_params, points, variant_params=None, **details):
        write_record(
            results,
            make_record(
                name,
                task=info.name,
                variant=variant,
                variant_params=variant_params or {},
                task_params=task_params,
                metrics=points,
                hardware=LINK,
                dtype=HOSTILE_DTYPE,
                task_info=info.to_dict(),
                env={"hostname": "box"},
                details={"variant_family": IMG_TAG, **details},
            ),
        )

    variants = [  # (name, its parameters, library details)
        ("softmax", {}, {}),
        (LINK, {"mode": IMG_TAG}, {}),
        (LINK, {"mode": LINK}, {}),
        (IMG_TAG, {}, {}),
        ("peer_soft", {}, {"peer_of": "softmax", "variant_library": f"lib{IMG_TAG} 1.0"}),
    ]
    for i, (variant, params, lib) in enumerate(variants):
        for flavour in (LINK, IMG_TAG):  # a task parameter with hostile values: two settings
            for n in (64, 128, 256, 512):
                write(
                    f"s{i}-{flavour[:2]}-{n}",
                    speed,
                    variant,
                    {"seq_len": n, "flavour": flavour},
                    [_point("fwd_ms", (1 + i) * (n / 64) ** (1 + i / 10), False, "seq_len", n)],
                    params,
                    **lib,
                )
        if lib:
            continue
        for lr in (0.1, 0.01):
            write(
                f"q{i}-{lr}",
                quality,
                variant,
                {"lr": lr, "flavour": IMG_TAG},
                [
                    _point("accuracy", 0.5 + 0.1 * i + lr, True),
                    _point("val_accuracy", 0.5 + lr, True),
                    _point("density", 1.0 / (1 + i)),
                ],
                params,
            )
        write(
            f"b{i}",
            bars,
            variant,
            {"flavour": LINK},
            [_point("mse", 1.0 + i, False), _point("mse_ls", 0.5)],
            params,
        )


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    browser, index = _open_board(tmp_path_factory, "hostile", _hostile_records)
    yield browser, index.read_text()
    browser.close()


def test_the_hostile_board_draws_every_chart_type(hostile):
    page, html = hostile
    ids = page.eval("[...document.querySelectorAll('div.chart')].map(d => d.id)")
    assert any(i.startswith("chart-speed-fwd_ms-seq_len") for i in ids)  # curves
    assert any(i.startswith("chart-levels-mse-bars") for i in ids)  # bars
    assert any(i.startswith("chart-cost-") for i in ids)  # quality against cost
    assert any(i.startswith("chart-density-") for i in ids)  # quality against density
    drawn = page.eval(
        "[...document.querySelectorAll('div.chart')].every(d => d.querySelector('svg.main-svg'))"
    )
    assert drawn
    assert page.eval("!!document.querySelector('#peers table[data-peers]')")  # peers
    assert page.eval("!!document.querySelector('table[data-task=\"speed-fits\"]')")  # fits
    assert page.eval("!!document.querySelector('table[data-task=\"quality-tuned\"]')")  # tuning


# elements made from text: a link (HTML or SVG, whose href Plotly writes as xlink:href), an image,
# any element with an event handler, bold text (the dtype's <b>)
MADE = """[...document.querySelectorAll('*')].filter(e => ['A', 'a', 'IMG', 'img', 'B', 'b']
  .includes(e.tagName) && !(e.tagName === 'A' && !/evil/.test(e.outerHTML))
  || [...e.attributes].some(a => /^on/.test(a.name) || (/(href|src)$/.test(a.name)
     && /evil|^x$/.test(a.value)))).map(e => e.outerHTML.slice(0, 120))"""


def test_hostile_strings_create_no_element_and_run_nothing(hostile):
    page, _ = hostile
    assert page.eval("window.__pwned === undefined")
    assert page.eval(MADE) == []
    assert page.eval("document.querySelectorAll('a[href*=\"evil.example\"]').length") == 0
    assert page.eval("document.querySelectorAll('img').length") == 0
    # hovering a point shows its text; nothing it holds becomes an element either
    page.eval(
        """(() => {
          const div = document.querySelector('div.chart[id^="chart-speed-"]');
          Plotly.Fx.hover(div, [{curveNumber: 0, pointNumber: 0}]);
        })()"""
    )
    time.sleep(0.3)
    assert page.eval(MADE) == [] and page.eval("window.__pwned === undefined")


def test_hostile_strings_are_shown_as_text(hostile):
    page, _ = hostile
    texts = page.eval(
        """(() => {
          const charts = [...document.querySelectorAll('div.chart')];
          return charts.map(d => [d.id, [...d.querySelectorAll('text')].map(t => t.textContent)
            .join(' | ')]);
        })()"""
    )
    by_id = dict(texts)
    curve = next(v for k, v in by_id.items() if k.startswith("chart-speed-fwd_ms"))
    assert LINK in curve and IMG_TAG in curve  # variant names and a parameter, in the legend
    assert f"flavour {IMG_TAG}" in curve or f"flavour {LINK}" in curve  # the setting
    assert HOSTILE_DTYPE in curve and LINK in curve  # machine and dtype, in the subtitle
    bars = next(v for k, v in by_id.items() if k.startswith("chart-levels-mse-bars"))
    assert f"least squares {LINK}" in bars and f"mode={IMG_TAG}" in bars
    scatter = next(v for k, v in by_id.items() if k.startswith("chart-cost-"))
    assert IMG_TAG in scatter
    cells = page.eval("[...document.querySelectorAll('td, th')].map(c => c.textContent)")
    assert IMG_TAG in cells and any(LINK in c for c in cells)
    titles = page.eval("[...document.querySelectorAll('th[title]')].map(c => c.title)")
    assert any(LINK in t for t in titles)  # a metric's description, as a tooltip's text


# --- "Which attention for my case" (#44 item 3), at 1400 × 900 ----------------------------------


@pytest.fixture(scope="module")
def chooser(tmp_path_factory):
    from chooser_board import write_chooser_board

    index = write_chooser_board(tmp_path_factory.mktemp("chooser") / "results")
    browser = Browser(_chromium(), tmp_path_factory.mktemp("profile"), (WIDTH, HEIGHT))
    browser.viewport(WIDTH, HEIGHT)
    browser.open(index.as_uri())
    yield browser
    browser.close()


CHOOSER_ROWS = (
    "[...document.querySelectorAll('#chooser-table tbody tr')]"
    ".map(tr => [...tr.cells].map(td => td.textContent))"
)


def _choose(browser, **values) -> list[list[str]]:
    """Set the chooser's controls (id suffix → value, as the reader would), then its rows."""
    for name, value in values.items():
        event = "input" if name == "limit" else "change"
        browser.eval(
            f"(() => {{ const e = document.getElementById('chooser-{name}');"
            f" e.value = {json.dumps(str(value))};"
            f" e.dispatchEvent(new Event('{event}')); }})()"
        )
    return browser.eval(CHOOSER_ROWS)


def test_the_chooser_lists_the_variants_within_the_budget_best_first(chooser):
    from chooser_board import HOSTILE

    # per-token latency at a 32k context, no limit: by quality, the frontier starred
    rows = _choose(chooser, budget=0, context=32768, limit="")
    assert [r[1] for r in rows] == ["softmax", "linear", HOSTILE]
    assert [r[0] for r in rows] == ["★", "★", ""]  # the hostile variant: slower and worse
    assert rows[0][3] == "2 ms" and rows[1][3] == "0.2 ms"
    # a limit of 1 ms per token: softmax (2 ms at 32k) drops out, linear is the best left
    rows = _choose(chooser, limit="1")
    assert [r[1] for r in rows] == ["linear", HOSTILE]
    note = chooser.eval("document.getElementById('chooser-note').textContent")
    # softmax over the limit, window timed as another configuration than it was trained
    assert note == "2 within the limit; 2 not listed, each named below with the reason."
    # at a 1k context softmax is the fastest and the best: alone on the frontier
    rows = _choose(chooser, context=1024, limit="")
    assert [r[0] for r in rows] == ["★", "", ""]


LEFT_OUT = (
    "[...document.querySelectorAll('#chooser-left-out li')]"
    ".map(li => [li.querySelector('strong').textContent, li.textContent])"
)


def _text(browser, element_id: str) -> str:
    return browser.eval(f"document.getElementById('{element_id}').textContent")


def test_the_chooser_names_every_variant_it_does_not_list_with_the_reason(chooser):
    """#64 item 4: the count line counts what the list names, and the list names every
    variant not listed: over the limit, or timed as another configuration than trained."""
    rows = _choose(chooser, budget=0, context=32768, limit="")
    assert len(rows) == 3
    assert _text(chooser, "chooser-note") == (
        "3 listed; 1 not listed, each named below with the reason."
    )
    assert chooser.eval(LEFT_OUT) == [
        [
            "window",
            "window: timed here as \u201cwindow window=64\u201d, but its quality is of "
            "\u201cwindow window=0.2\u201d: another configuration",
        ]
    ]
    _choose(chooser, limit="1 ms")
    assert [name for name, _ in chooser.eval(LEFT_OUT)] == ["softmax", "window"]
    assert chooser.eval(LEFT_OUT)[0][1] == "softmax: over the limit: 2 ms"
    assert chooser.eval("document.getElementById('chooser-busy').hidden")  # a quiet machine


def test_the_chooser_opens_on_the_recall_column_and_states_its_settings(tmp_path_factory):
    """#64 item 4: the default column is the one measured in the most settings among those
    that list the most variants (recall over two widths, not the one-setting copying column
    that comes first), and its settings are stated under the choices; the size a fresh page
    opens at is the largest measured."""
    from chooser_board import write_chooser_board

    index = write_chooser_board(tmp_path_factory.mktemp("fresh") / "results")
    browser = Browser(_chromium(), tmp_path_factory.mktemp("profile"), (WIDTH, HEIGHT))
    try:
        browser.open(index.as_uri())
        quality = "document.getElementById('chooser-quality')"
        assert browser.eval(f"{quality}.selectedOptions[0].textContent") == (
            "Recall: recall accuracy \u2191"
        )
        assert _text(browser, "chooser-setting") == (
            "Quality: Recall: recall accuracy, mean over 2 settings: model width 32, 64."
        )
        # at the largest context measured, where the budgets part most
        assert browser.eval("document.getElementById('chooser-context').value") == "32768"
        _choose(browser, quality=0)
        assert _text(browser, "chooser-setting").endswith("Copying: copy accuracy, one setting.")
    finally:
        browser.close()


def test_the_chooser_offers_a_training_budget_at_a_sequence_length(chooser):
    """#64 item 4: a task that declares no budget offers its timings (a training step)."""
    budgets = chooser.eval(
        "[...document.getElementById('chooser-budget').options].map(o => o.textContent)"
    )
    assert budgets[2] == "Training: step time (ms)"
    rows = _choose(chooser, budget=2, context=4096, limit="5 ms")
    assert [r[1] for r in rows] == ["linear"] and rows[0][3] == "3 ms"
    assert _text(chooser, "chooser-axis") == "sequence length (tokens)"
    assert [name for name, _ in chooser.eval(LEFT_OUT)] == ["softmax", HOSTILE, "window"]
    assert chooser.eval("document.querySelectorAll('#chooser img').length") == 0  # as text


@pytest.fixture(scope="module")
def busy(tmp_path_factory):
    """The chooser's board where a busy machine made softmax's 32k timing and every training
    step unsteady."""
    from chooser_board import write_chooser_board

    folder = tmp_path_factory.mktemp("busy") / "results"
    index = write_chooser_board(folder, unsteady_softmax_at_32k=True, busy_training=True)
    browser = Browser(_chromium(), tmp_path_factory.mktemp("profile"), (WIDTH, HEIGHT))
    browser.open(index.as_uri())
    yield browser
    browser.close()


def test_the_chooser_says_when_a_busy_machine_removed_a_variant(busy):
    rows = _choose(busy, budget=0, context=32768, limit="")
    assert [r[1] for r in rows] == ["linear", HOSTILE]
    assert not busy.eval("document.getElementById('chooser-busy').hidden")
    assert _text(busy, "chooser-busy").startswith("A busy machine removed 1 variant here: softmax")
    assert [name for name, _ in busy.eval(LEFT_OUT)] == ["softmax", "window"]
    _choose(busy, context=1024)  # steady there
    assert busy.eval("document.getElementById('chooser-busy').hidden")


def test_the_chooser_says_when_a_busy_machine_removed_a_whole_budget(busy):
    option = "document.getElementById('chooser-budget').options[2].textContent"
    assert busy.eval(option) == "Training: step time (ms) \u2014 every timing unsteady"
    assert _choose(busy, budget=2, context=4096, limit="") == []
    assert _text(busy, "chooser-busy").startswith(
        "Every timing of Training: step time on this machine was unsteady"
    )
    assert (
        _text(busy, "chooser-note") == "0 listed; 4 not listed, each named below with the reason."
    )


def test_the_chooser_takes_a_state_budget_in_binary_units(chooser):
    from chooser_board import HOSTILE

    rows = _choose(chooser, budget=1, context=32768, limit="1 MiB")
    assert [r[1] for r in rows] == ["linear", HOSTILE]  # softmax holds 4 MiB at 32k
    assert rows[0][3] == "64 KiB"
    assert [r[1] for r in _choose(chooser, limit="8MiB")][0] == "softmax"
    assert [r[1] for r in _choose(chooser, limit="1 TiB")][0] == "softmax"  # a unit it shows
    for unreadable in ("lots", "-5", "0.5 s", "1 PiB"):
        # not a limit in this unit: nothing listed and a sentence, never every variant as if
        # there were no limit
        assert _choose(chooser, limit=unreadable) == []
        assert not chooser.eval("document.getElementById('chooser-limit').checkValidity()")
        note = chooser.eval("document.getElementById('chooser-note').textContent")
        assert note.startswith(f"The limit \u201c{unreadable}\u201d is not a number in B"), note


def test_the_chooser_takes_a_time_budget_in_seconds_or_microseconds(chooser):
    from chooser_board import HOSTILE

    rows = _choose(chooser, budget=0, context=32768, limit="0.001 s")  # 1 ms
    assert [r[1] for r in rows] == ["linear", HOSTILE]
    assert [r[1] for r in _choose(chooser, limit="5.")] == ["softmax", "linear", HOSTILE]
    assert [r[1] for r in _choose(chooser, limit="1000 us")] == ["linear", HOSTILE]


def test_the_chooser_shows_hostile_names_as_text_and_runs_nothing(chooser):
    from chooser_board import HOSTILE

    rows = _choose(chooser, budget=0, context=1024, limit="")
    assert HOSTILE in [r[1] for r in rows]
    assert chooser.eval("document.querySelectorAll('#chooser img').length") == 0
    assert chooser.eval("window.__pwned === undefined")


def test_a_tasks_charts_are_folded_and_one_click_draws_them(chooser):
    """#46 item 6: the page is the tables; each task's charts open with one click on its
    summary, and are drawn then (a folded box has no width for Plotly to draw in)."""
    drawn = "document.querySelectorAll('{} div.chart svg.main-svg').length"
    assert chooser.eval(drawn.format("")) == 0
    summary = "document.querySelector('#task-gen details.charts > summary')"
    assert "chart" in chooser.eval(f"{summary}.textContent")
    chooser.eval(f"{summary}.click()")
    time.sleep(1.5)
    assert chooser.eval(drawn.format("#task-gen")) >= 1
    assert chooser.eval(drawn.format("#overview")) == 0  # the other groups stay folded
