"""'Which attention for my case' (#44 item 3, #64 item 4): the chooser's data, from the same rows as
the page (the board: `tests/chooser_board.py`; in Chromium: `tests/test_leaderboard_browser.py`;
on small frames: `tests/harness/test_chooser_data.py`)."""

from __future__ import annotations

from chooser_board import HOSTILE, chooser_data, write_chooser_board

from attnbench.harness.leaderboard import build_site


def test_the_chooser_pairs_quality_and_cost_of_the_same_configuration_only(tmp_path):
    html = write_chooser_board(tmp_path).read_text()
    data = chooser_data(html)
    assert [b["label"] for b in data["budgets"]] == [
        "Generation: per-token latency",
        "Generation: state per sequence",
        "Training: step time",  # declared no budget: its timing is one
    ]
    assert data["budgets"][0]["axis"] == "context length (tokens)"
    assert [q["label"] for q in data["qualities"]] == [
        "Copying: copy accuracy",
        "Recall: recall accuracy",
    ]
    # window was timed at window=64 and trained at window=0.2: two configurations, never paired
    listed = {data["configs"][c[3]] for c in data["cost"]}
    assert listed == {HOSTILE, "linear", "softmax"}
    mismatch = [e for e in data["left_out"] if e[4] == "window"]
    assert {(e[0], e[2], e[5]) for e in mismatch if e[0] < 2} == {
        (b, x, "mismatch") for b in (0, 1) for x in (1024.0, 32768.0)
    }
    costs = {(c[0], c[2], data["configs"][c[3]]): c[4] for c in data["cost"]}
    assert costs[(0, 32768.0, "softmax")] == 2.0 and costs[(1, 1024.0, "linear")] == 2**16
    assert costs[(2, 4096.0, "linear")] == 3.0


def test_the_chooser_leaves_out_an_unsteady_timing_and_names_it(tmp_path):
    data = chooser_data(write_chooser_board(tmp_path, unsteady_softmax_at_32k=True).read_text())
    latency = {(c[2], data["configs"][c[3]]) for c in data["cost"] if c[0] == 0}
    assert (32768.0, "softmax") not in latency and (1024.0, "softmax") in latency
    state = {(c[2], data["configs"][c[3]]) for c in data["cost"] if c[0] == 1}
    assert (32768.0, "softmax") in state  # its state is no timing: kept
    unsteady = [(e[0], e[2], e[4]) for e in data["left_out"] if e[5] == "unsteady"]
    assert unsteady == [(0, 32768.0, "softmax")]


def test_a_budget_a_busy_machine_left_without_a_steady_timing_is_still_offered(tmp_path):
    data = chooser_data(write_chooser_board(tmp_path, busy_training=True).read_text())
    assert [b["busy"] for b in data["budgets"]] == [False, False, True]
    assert not [c for c in data["cost"] if c[0] == 2]
    assert {e[4] for e in data["left_out"] if e[0] == 2 and e[5] == "unsteady"} == {
        "softmax",
        "linear",
    }


def test_the_chooser_data_cannot_end_its_script_element(tmp_path):
    html = write_chooser_board(tmp_path).read_text()
    embedded = html.split('id="chooser-data">')[1].split("</script>")[0]
    assert "<" not in embedded and "\\u003cimg" in embedded


def test_no_chooser_without_a_declared_budget(tmp_path):
    html = build_site(tmp_path).read_text()  # an empty board
    assert 'id="chooser"' not in html


def test_the_summary_names_the_best_per_column_and_each_cost_regime(tmp_path):
    """#46 item 6: the page opens with the answers: the best of each overview column, and per
    declared budget the cheapest and dearest variant at the smallest and largest size."""
    import re

    html = write_chooser_board(tmp_path).read_text()
    assert html.index('id="summary"') < html.index('id="overview"')
    section = html.split('<section id="summary">')[1].split("</section>")[0]
    rows = re.findall(
        r"<tr><td>(.*?)</td><td>(.*?)</td><td class=\"answer\">(.*?)</td></tr>", section
    )
    lines = {what: answer for what, _, answer in rows}
    assert lines["Recall: recall accuracy ↑"] == "softmax (0.95)"
    assert lines["Generation: per-token latency at context length 32768 tokens"] == (
        "cheapest linear (0.2 ms); dearest softmax (2 ms, 10× the cheapest)"
    )
    assert lines["Generation: state per sequence at context length 1024 tokens"] == (
        "cheapest &lt;img src=x onerror=&#34;window.__pwned = 1&#34;&gt; (1 KiB); dearest "
        "softmax (128 KiB, 128× the cheapest)"
    )
