"""Bad input through the real CLI: one sentence, exit status 2, nothing written (issue #7).

Each row is a command line and a fragment of the sentence it must print. Two more rows are not
refusals by design: causal=true for a variant that cannot be causal is a job outcome (a record with
status `unsupported`), and a window longer than the sequence is clamped to the sequence (the
documented choice: a window that covers everything is dense attention, exactly).
"""

from __future__ import annotations

import json

import pytest
import torch
from conftest import run_cli

FAST = ["task.seq_len=32", "task.backward=false", "task.min_run_time=0.01"]

REFUSALS = [
    (["variant=softmx"], "Unknown variant 'softmx'. Did you mean: softmax?"),
    (["task=recal"], "Unknown task 'recal'. Did you mean: recall?"),
    (["-m", "variant=softmax,linaer"], "Unknown variant 'linaer'. Did you mean: linear?"),
    (["variant=window", "variant.windw=4"], "variant.windw is not a parameter of variant window."),
    (["task.seq_lenn=4"], "task.seq_lenn is not a parameter of task throughput."),
    (["seeed=1"], "seeed is not a config key. Did you mean seed?"),
    (["task.seq_len=abc"], "task.seq_len=abc is not valid: Value 'abc' of type 'str'"),
    (["seed=1.5"], "seed=1.5 is not valid"),
    (["task.seq_len=0"], "task.seq_len must be >= 1, got 0."),
    (["task.batch_size=-2"], "task.batch_size must be >= 1, got -2."),
    (["task=recall", "task.n_heads=3"], "task.n_heads=3 must divide task.d_model=64"),
    (["variant=window", "variant.window=0"], "variant window: window must be >= 1, got 0."),
    (["variant=decay", "variant.decay=1.5"], "variant decay: decay must be in (0, 1]"),
    (["device=gpu"], "device=gpu is not valid: Invalid value 'gpu', expected one of"),
    (["dtype=float64"], "dtype=float64 is not valid: Invalid value 'float64'"),
    (["-m", "variant=softmax,linear", "task.seq_len=32,0"], "task.seq_len must be >= 1, got 0."),
]
if not torch.cuda.is_available():
    REFUSALS.append((["device=cuda"], "device=cuda was asked for but no CUDA GPU is available"))


def _files(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


@pytest.mark.parametrize(
    "args, message", REFUSALS, ids=lambda x: " ".join(x) if isinstance(x, list) else None
)
def test_refused_with_one_sentence_and_nothing_written(tmp_path, args, message):
    results = tmp_path / "results"
    flags = [a for a in args if a.startswith("-")]
    rest = [a for a in args if not a.startswith("-")]
    proc = run_cli("attnbench", *flags, *rest, f"results_dir={results}")
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr  # one sentence
    assert _files(tmp_path) == []  # no record, no partial file, no Hydra run directory


def test_unwritable_results_dir_is_refused_before_any_job(tmp_path):
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("a file where the results directory should be")
    proc = run_cli("attnbench", "-m", "variant=softmax,linear", f"results_dir={blocker / 'r'}")
    assert proc.returncode == 2
    assert f"results_dir={blocker / 'r'} is not writable" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert _files(tmp_path) == ["not_a_dir"]


def _records(results):
    return [json.loads(p.read_text()) for p in sorted((results / "runs").glob("*.json"))]


OUTCOMES = [  # by design not refusals: the job runs and its record says what happened
    (["variant=sinkhorn", "task.causal=true"], "unsupported", "does not support causal"),
    (["variant=window", "variant.window=100000"], "ok", None),  # clamped to the sequence
]


@pytest.mark.parametrize("args, status, error", OUTCOMES, ids=lambda x: str(x))
def test_outcomes_that_are_records_not_refusals(tmp_path, args, status, error):
    results = tmp_path / "results"
    proc = run_cli("attnbench", *args, *FAST, f"results_dir={results}")
    assert proc.returncode == 0, proc.stderr
    (record,) = _records(results)
    assert record["status"] == status
    assert error is None or error in record["error"]
