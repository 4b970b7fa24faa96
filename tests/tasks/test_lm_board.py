"""`lm` on the board (#60 item 5), from hand-made records with known answers: its bits-per-byte
column votes in the quality rank, its charts (bpb against evaluation length and against training
tokens, a step's time against its mixers') are drawn from what the task declares, and the chooser
can rank by bpb. The board names no task: all of it comes from `LanguageModel.describe()`."""

from __future__ import annotations

import json
import re

import pytest
from conftest import make_record

from attnbench.harness.jobs.records import write_record
from attnbench.harness.leaderboard import build_site
from attnbench.harness.results.collect import collect
from attnbench.tasks.decode import Decode
from attnbench.tasks.lm import LanguageModel

CONTEXT = 32
# variant → (bpb at the training context, its mixers' ms in a step, the whole step's ms): apart
# by far more than the seeds' ±0.01, so every contest has a winner; linear's mixers are 10×
# faster than softmax's, its step only 8/7.1 = 1.13× (what the speed chart is for)
RUNS = {"softmax": (3.0, 1.0, 8.0), "gla": (3.2, 0.4, 7.4), "linear": (3.5, 0.1, 7.1)}
SEEDS = (-0.01, 0.0, 0.01)  # added to every value of a seed's run
LM_COLUMN = "Byte-level language model (code): held-out bits per byte"


def _point(metric: str, value: float, x_name: str | None = None, x: float | None = None) -> dict:
    hib = LanguageModel.metric(metric).higher_is_better
    return {
        "metric": metric,
        "value": value,
        "x_name": x_name,
        "x_value": x,
        "higher_is_better": hib,
    }


def _lm_points(bpb: float, mixer_ms: float, step_ms: float) -> list[dict]:
    points = [
        _point("bpb", bpb),
        _point("converged", 1.0),
        _point("mixer_ms", mixer_ms),
        _point("step_ms", step_ms),
        _point("density", 1.0),
    ]
    for f in (1, 2, 4):  # worse at 4× the context than at 1×
        points.append(_point("bpb_by_length", bpb + 0.1 * (f - 1), "length", f * CONTEXT))
        points.append(_point("ngram_bpb_by_length", 3.3, "length", f * CONTEXT))
    for tokens in (1024, 2048, 4096):  # the learning curve, against training tokens
        points.append(_point("learning_curve", bpb + 4096 / tokens, "tokens_seen", tokens))
    return points


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> str:
    folder = tmp_path_factory.mktemp("lm-board")
    for variant, (bpb, mixer_ms, step_ms) in RUNS.items():
        for seed, shift in enumerate(SEEDS):
            record = make_record(
                f"lm-{variant}-{seed}",
                task="lm",
                variant=variant,
                seed=seed,
                task_params={"corpus": "code", "context": CONTEXT, "lr": 0.01},
                metrics=_lm_points(bpb + shift, mixer_ms + shift, step_ms + shift),
                task_info=LanguageModel.describe().to_dict(),
            )
            write_record(folder, record)
        # a decoding budget, so that the page has a chooser
        decode = make_record(
            f"decode-{variant}",
            task="decode",
            variant=variant,
            task_params={"seq_len": 1024},
            metrics=[
                {
                    "metric": "decode_ms_per_token",
                    "value": mixer_ms,
                    "x_name": "seq_len",
                    "x_value": 1024.0,
                    "higher_is_better": False,
                }
            ],
            task_info=Decode.describe().to_dict(),
        )
        write_record(folder, decode)
    collect(folder)
    return build_site(folder).read_text()


def _figures(page: str) -> dict[str, dict]:
    return {
        m.group(1): json.loads(m.group(2))
        for m in re.finditer(r'data-chart="([^"]+)">(.*?)</script>', page, re.S)
    }


def test_the_bits_per_byte_column_votes_in_the_quality_rank(page):
    overview = page.split('id="overview-table"')[1].split("</table>")[0]
    headers = [
        re.sub(r"<[^>]+>", "", h).strip() for h in re.findall(r"<th[^>]*>(.*?)</th>", overview)
    ]
    assert f"{LM_COLUMN} ↓" in headers  # lower is better, and no "(no vote)"
    rows = overview.split("<tr data-machine")[1:]
    # the quality rank (first cell) follows bpb: softmax, gla, linear
    ranks = {
        v: float(re.search(r'<td data-sort="([^"]*)"', r).group(1))
        for v in RUNS
        for r in rows
        if f">{v}<" in r
    }
    assert [ranks[v] for v in ("softmax", "gla", "linear")] == [1, 2, 3]


def test_bpb_is_drawn_against_evaluation_length_and_training_tokens(page):
    figures = _figures(page)
    by_length = figures["chart-lm-bpb_by_length-length"]
    assert by_length["layout"]["xaxis"]["title"]["text"] == "evaluation length (bytes)"
    softmax = next(t for t in by_length["data"] if t["name"] == "softmax")
    assert softmax["x"] == [32.0, 64.0, 128.0]
    assert softmax["y"] == pytest.approx([3.0, 3.1, 3.3])  # the seeds' mean at each length
    assert any(t["name"] == "order-3 Kneser-Ney" for t in by_length["data"])  # the baseline
    curve = figures["chart-lm-learning_curve-tokens_seen"]
    assert curve["layout"]["xaxis"]["title"]["text"] == "training tokens"
    linear = next(t for t in curve["data"] if t["name"] == "linear")
    assert linear["x"] == [1024.0, 2048.0, 4096.0]


def test_a_step_s_time_is_drawn_against_its_mixers_time_beside_the_line_where_they_are_equal(
    page,
):
    speed = _figures(page)["chart-lm-step_ms-mixer_ms"]
    layout = speed["layout"]
    assert layout["xaxis"]["title"]["text"] == "mixers' time in a step (ms)"
    assert layout["yaxis"]["title"]["text"] == "time of a whole step (ms)"
    markers = {t["name"]: (t["x"][0], t["y"][0]) for t in speed["data"] if t["mode"] == "markers"}
    assert markers == {v: pytest.approx((m, s)) for v, (_, m, s) in RUNS.items()}
    (equal,) = [t for t in speed["data"] if t["mode"] == "lines"]
    assert equal["name"] == "time of a whole step = mixers' time in a step"
    assert equal["x"] == equal["y"] == pytest.approx([0.1, 8.0])  # across every marker


def test_the_chooser_can_rank_by_bits_per_byte(page):
    data = json.loads(page.split('id="chooser-data">')[1].split("</script>")[0])
    (i,) = [i for i, q in enumerate(data["qualities"]) if q["label"] == LM_COLUMN]
    assert data["qualities"][i]["higher"] is False  # the panel sorts it ascending
    configs = [c[0] if isinstance(c, list) else c for c in data["configs"]]
    values = {configs[int(k)]: v for k, v in data["quality"][i].items()}
    assert values == pytest.approx({v: bpb for v, (bpb, _, _) in RUNS.items()})
