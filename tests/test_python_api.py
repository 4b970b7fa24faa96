"""attnbench.run and attnbench.results: the command line's jobs, records and checks, from Python."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pandas as pd
import pytest
from conftest import REFERENCE, REPO, run_cli

import attnbench
from attnbench.metrics import Metric
from attnbench.task_info import TaskInfo, Tuning

GAUSSIAN = {"task.source": "gaussian", "task.seq_len": 64, "task.n_batches": 1, "threads": 1}


def test_run_is_the_command_line_s_sweep_same_jobs_same_numbers(tmp_path):
    """Same run_ids (so a sweep and a notebook share and skip each other's jobs) and the same
    values; a list sweeps as a comma list does."""
    overrides = " ".join(f"{k}={v}" for k, v in GAUSSIAN.items())
    cli = run_cli(
        "attnbench",
        "-m",
        "variant=softmax,linear",
        "task=concentration",
        "seed=0,1",
        *overrides.split(),
        f"results_dir={tmp_path / 'cli'}",
    )
    assert cli.returncode == 0, cli.stderr
    ours = attnbench.run(
        ["softmax", "linear"],
        "concentration",
        results_dir=tmp_path / "py",
        seed=[0, 1],
        **GAUSSIAN,
    )
    theirs = attnbench.results(tmp_path / "cli")
    assert set(ours.run_id) == set(theirs[~theirs.derived].run_id) and ours.run_id.nunique() == 4
    key = ["run_id", "metric", "x_value"]
    merged = ours.merge(theirs, on=key, suffixes=("", "_cli"))
    assert len(merged) == len(ours)
    assert merged.value.tolist() == pytest.approx(merged.value_cli.tolist(), rel=1e-6, nan_ok=True)
    again = attnbench.run(
        ["softmax", "linear"],
        "concentration",
        results_dir=tmp_path / "cli",
        seed=[0, 1],
        **GAUSSIAN,
    )  # finished by the command line: not run again
    assert set(again.run_id) == set(ours.run_id)
    assert len(list((tmp_path / "cli" / "runs").glob("*.json"))) == 4


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"variant": "softmx"}, "Unknown variant 'softmx'. Did you mean: softmax?"),
        ({"variant": "softmax", "task.seq_len": 0}, "task.seq_len must be >= 1, got 0."),
        ({"variant": ["softmax", "linear"], "seed": [0, -1]}, "seed=-1 is out of range"),
        ({"variant": "softmax", "sweep": "quick"}, "run a preset from the shell"),
        ({"variant": 3}, "variant=3 is neither a registered name nor an AttentionVariant"),
        # Hydra's settings were accepted and ignored: no Hydra command line runs here
        ({"variant": "softmax", "hydra.run.dir": "/proc"}, "hydra.run.dir is a setting of Hydra"),
        ({"variant": "softmax", "hydra/launcher": "joblib"}, "hydra/launcher is a setting of"),
        ({"variant": "softmax", "variant.temperature": float("inf")}, "is not finite"),
        # was the current folder; the command line refuses results_dir= empty
        ({"variant": "softmax", "results_dir": ""}, "results_dir is empty"),
        ({"variant": "softmax", "results_dir": "  "}, "results_dir is empty"),
    ],
)
def test_bad_values_raise_the_command_line_s_sentence_before_any_job(
    tmp_path, monkeypatch, kwargs, message
):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=message.replace("?", r"\?").replace("(", r"\(")):
        attnbench.run(**{"results_dir": tmp_path / "r", **kwargs})
    assert not (tmp_path / "r").exists() and not (tmp_path / "runs").exists()


NOTEBOOK = textwrap.dedent(
    """
    import json, sys, torch, attnbench
    from attnbench import AttentionVariant, NoParams

    print("top level ran", flush=True)  # once: the probe process must not run this again

    def define(scale):
        class Scaled(AttentionVariant):
            name = "nb_scaled"
            family = "softmax"
            cost = "n²"
            supports_causal = True
            Params = NoParams
            def forward(self, q, k, v, causal=False):
                self.check_inputs(q, k, v, causal)
                return torch.nn.functional.scaled_dot_product_attention(
                    q, k, v, is_causal=causal, scale=scale)
        return Scaled

    out = []
    for scale in (0.125, 0.25):  # the notebook's cell edited and run again
        rows = attnbench.run(define(scale), "throughput", results_dir=sys.argv[1], threads=1,
                             **{"task.seq_len": 32, "task.backward": False,
                                "task.min_run_time": 0.01, "task.min_samples": 4,
                                "task.max_timing_s": 1})
        out.append(rows.groupby("run_id").first()[["status"]].reset_index().to_dict("records")
                   + rows[rows.metric == "peak_mem_mib"][["value"]].to_dict("records"))
    print(json.dumps(out))
    """
)


def test_a_class_defined_in_a_notebook_runs_like_a_registered_variant(tmp_path):
    """Registered under its name, measured in the memory probe too (sent there by value), its
    code in its jobs' identity (an edited class is a new job, not a skip), and the caller's
    script never run a second time by the probe's spawn (it has no ``__main__`` guard)."""
    script = tmp_path / "notebook.py"
    script.write_text(NOTEBOOK)
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "r")],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("top level ran") == 1
    (first, second) = json.loads(proc.stdout.strip().splitlines()[-1])
    assert first[0]["status"] == second[0]["status"] == "ok"
    assert first[0]["run_id"] != second[0]["run_id"]
    assert first[1]["value"] is not None  # the probe built the class
    record = json.loads((tmp_path / "r" / "runs" / f"{first[0]['run_id']}.json").read_text())
    assert "class:__main__.define.<locals>.Scaled" in record["code_modules"]


def _notebook_class(name: str | None, class_name: str = "Mine") -> type:
    """An `AttentionVariant` subclass as a notebook cell defines it (module ``__main__``)."""
    body = {"family": "softmax", "cost": "n²", "Params": attnbench.NoParams}
    body.update({"__module__": "__main__", "forward": lambda self, q, k, v, causal=False: v})
    return type(class_name, (attnbench.AttentionVariant,), body | ({"name": name} if name else {}))


@pytest.mark.parametrize("name, class_name", [("softmax", "Mine"), (None, "Softmax")])
def test_a_notebook_class_may_not_take_a_built_in_s_name(tmp_path, name, class_name):
    """It replaced the built-in for the session (its jobs ran the class as "softmax", beside
    the real softmax's records under the same name)."""
    from attnbench.variant import VARIANTS
    from attnbench.variants.softmax import SoftmaxAttention

    with pytest.raises(ValueError, match=rf"class {class_name} is named 'softmax'.*another name"):
        attnbench.run(_notebook_class(name, class_name), results_dir=tmp_path / "r")
    assert VARIANTS.get("softmax") is SoftmaxAttention
    assert not (tmp_path / "r").exists()


def test_a_notebook_class_defined_again_replaces_the_one_defined_before():
    """A cell run again defines a new class under the same name: the new one counts."""
    from attnbench.harness.python_api import _variant_names
    from attnbench.variant import VARIANTS

    first, second = _notebook_class("nb_again"), _notebook_class("nb_again")
    try:
        assert _variant_names(first) == ["nb_again"] and VARIANTS.get("nb_again") is first
        assert _variant_names([second]) == ["nb_again"] and VARIANTS.get("nb_again") is second
    finally:
        VARIANTS.unregister("nb_again")


SCRIPT = textwrap.dedent(
    """
    import sys, attnbench

    print("top level ran", flush=True)
    attnbench.run("softmax", "throughput", results_dir=sys.argv[1], threads=1, seed=[0, 1],
                  **{"task.seq_len": 32, "task.backward": False, "task.min_run_time": 0.01,
                     "task.min_samples": 4, "task.max_timing_s": 1})
    """
)


@pytest.mark.parametrize("as_module", [False, True], ids=["path", "module"])
def test_a_script_without_a_main_guard_runs_its_jobs_once(tmp_path, as_module):
    """The memory probe is a spawned process, and spawn imports the caller's main module again
    (by its file, or by its name under ``python -m``): a script without a ``__main__`` guard
    must not run its top level there, which wrote a failed record per job."""
    (tmp_path / "guardless.py").write_text(SCRIPT)
    target = ["-m", "guardless"] if as_module else [str(tmp_path / "guardless.py")]
    proc = subprocess.run(
        [sys.executable, *target, str(tmp_path / "r")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("top level ran") == 1
    records = [json.loads(p.read_text()) for p in (tmp_path / "r" / "runs").glob("*.json")]
    assert sorted((r["seed"], r["status"]) for r in records) == [(0, "ok"), (1, "ok")]
    # the run shows its progress even where stderr is no terminal (a notebook, a log): jobs done
    # of all, without tqdm's "IProgress not found" warning where ipywidgets is missing
    assert "attnbench.run: 100%" in proc.stderr and "2/2" in proc.stderr
    assert "IProgress" not in proc.stderr


def test_progress_uses_the_text_bar_without_ipywidgets(monkeypatch):
    from tqdm import std

    from attnbench.toolkit import progress

    real = progress.importlib.util.find_spec
    monkeypatch.setattr(
        progress.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "ipywidgets" else real(name, *a),
    )
    assert type(progress.progress(range(3), disable=True)) is std.tqdm


def test_results_collects_what_is_not_in_the_table_yet(tmp_path):
    attnbench.run("softmax", "concentration", results_dir=tmp_path, seed=0, **GAUSSIAN)
    table = tmp_path / "results.parquet"
    table.unlink()
    frame = attnbench.results(tmp_path)
    assert isinstance(frame, pd.DataFrame) and frame.run_id.nunique() >= 1 and table.exists()
    with pytest.raises(ValueError, match="does not exist"):
        attnbench.results(tmp_path / "nowhere")


def test_the_example_reproduces_a_cell_of_the_reference_board(tmp_path):
    """examples/from_python.py reruns softmax × decode at 1024 tokens of the reference board:
    the state a sequence holds (a KV cache of 1024 tokens, 4 heads of 64 in float32: 2 MiB)
    is the reference's exactly; the time ratio is a timing, printed, not compared."""
    proc = subprocess.run(
        [sys.executable, str(REPO / "examples" / "from_python.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    lines = [x for x in proc.stdout.splitlines() if x.startswith("decode × softmax")]
    assert len(lines) == 2
    ours, reference = (float(x.split()[-1]) for x in lines[0].split(",")[1:])
    assert "state_bytes" in lines[0] and ours == reference == 2 * 1024 * 4 * 64 * 4


def test_a_key_shared_by_two_tasks_the_default_lacks(tmp_path):
    """``run`` is the command line's sweep: two MAD tasks with their shared ``steps`` (which the
    default task, throughput, has not) run, each with the value given."""
    tiny = {"task.train_size": 16, "task.test_size": 16, "task.val_size": 16, "task.batch_size": 8}
    table = attnbench.run(
        "softmax", ["memorization", "compression"], results_dir=tmp_path, threads=1,
        **{"task.steps": 2, **tiny},
    )  # fmt: skip
    assert sorted(table["task"].unique()) == ["compression", "memorization"]
    assert set(table["status"]) == {"ok"}
    assert all(json.loads(p)["steps"] == 2 for p in table["task_params"].unique())


def test_a_list_valued_parameter_goes_inside_the_sweep_s_list(tmp_path):
    """A keyword's list sweeps; a parameter that takes a list (throughput's ``doc_lengths``) gets
    it inside that list, and the job runs with it (its text was quoted into a string before)."""
    from attnbench.harness.python_api import _jobs, _override

    text = _override("task.doc_lengths", [[16, 48], (32, 32)])
    assert text == "task.doc_lengths=[16,48],[32,32]"
    assert _jobs([text]) == [["task.doc_lengths=[16,48]"], ["task.doc_lengths=[32,32]"]]
    fast = {"task.seq_len": 64, "task.causal": True, "task.backward": False}
    timing = {"task.min_run_time": 0.01, "task.max_timing_s": 0.5}
    table = attnbench.run(
        "softmax", "throughput", results_dir=tmp_path, threads=1,
        **{"task.doc_lengths": [[16, 48]], **fast, **timing},
    )  # fmt: skip
    assert set(table["status"]) == {"ok"}
    assert {json.loads(p)["doc_lengths"] == [16, 48] for p in table["task_params"]} == {True}
    # the list given bare sweeps its items, which the parameter refuses: the sentence says how
    # to give the list itself (it named no fix: the adversarial pre-round of issue #63)
    with pytest.raises(
        ValueError,
        match=r"put it inside the sweep's list: \*\*\{'task\.doc_"
        r"lengths': \[\[16, 48\]\]\}\.$",
    ):
        attnbench.run(
            "softmax", "throughput", results_dir=tmp_path, **{"task.doc_lengths": [16, 48]}
        )


def test_a_broken_plugin_s_warning_names_the_line_that_called_run(tmp_path):
    """The warning names the caller's line, not attnbench's installed discovery.py."""
    dist = tmp_path / "broken_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[attnbench.variants]\nbroken = broken_plugin_mod\n")
    (tmp_path / "broken_plugin_mod.py").write_text("raise ImportError('missing dependency xyz')\n")
    script = tmp_path / "users_script.py"
    script.write_text(
        "import attnbench\n\ntry:\n"
        "    attnbench.run('softmax', 'throughput', results_dir='', threads=1)\n"
        "except ValueError as exc:\n    print(exc)\n"
    )
    proc = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert proc.returncode == 0 and "results_dir" in proc.stdout, proc.stderr
    assert proc.stderr.startswith(
        f"{script}:4: PluginLoadWarning: attnbench: plugin broken-plugin (entry point "
        "attnbench.variants: broken = broken_plugin_mod) failed to load and is skipped: "
        "ImportError: missing dependency xyz\n"
    ), proc.stderr
    assert "discovery.py" not in proc.stderr


def _board_values(table: pd.DataFrame, infos: dict, task: str) -> pd.Series:
    """The overview's values of ``task``'s column per variant, computed as the board does from
    the rows it shows (`harness.leaderboard.site`): tuned values picked, verdicts judged once."""
    from attnbench.harness.leaderboard.columns import overview_columns
    from attnbench.harness.leaderboard.peers import labelled
    from attnbench.harness.leaderboard.ranking import shown_rows, standings
    from attnbench.harness.leaderboard.steadiness import judge_steadiness
    from attnbench.harness.leaderboard.tuning import select_tuned

    shown = judge_steadiness(shown_rows(table), infos)
    shown = labelled(select_tuned(shown, infos)[0])
    columns = overview_columns(shown, infos)
    values = standings(columns.frame, columns.headlines).values[task][0]
    return values.groupby(level="variant").first()


def test_results_are_the_rows_the_board_ranks(reference_as_current):
    """`attnbench.results` returns the rows the board ranks (current runs, the learning rate
    validation picked): the mean over settings of each setting's seed mean is the board's cell
    (a plain mean where every setting has as many seeds). Every row, the losing learning rates
    included, gives another figure for some variant (0.2's softmax recall: 0.865 against the
    board's 0.997). On the committed sweep with every run current (`reference_as_current`)."""
    from attnbench.harness.results.collect import read_table

    reference = reference_as_current
    chosen = attnbench.results(reference)
    every = attnbench.results(reference, every_run=True)
    assert chosen["chosen"].all() and len(chosen) == every["chosen"].sum() < len(every)
    infos = read_table(reference / "results.parquet")[1]
    board = _board_values(every, infos, "recall")
    headline = infos["recall"].headline

    def rows(table: pd.DataFrame, variant: str) -> pd.DataFrame:
        return table[
            (table["task"] == "recall")
            & (table["variant"] == variant)
            & (table["metric"] == headline)
            & (table["status"] == "ok")
            & ~table["derived"]
        ]

    for variant in ("softmax", "linear", "delta_net"):
        mine = rows(chosen, variant)
        per_setting = mine.groupby("task_params")["value"].mean()
        assert per_setting.mean() == pytest.approx(board[variant], abs=1e-12)
        if mine.groupby("task_params")["seed"].nunique().nunique() == 1:
            assert mine["value"].mean() == pytest.approx(board[variant], abs=1e-12)
    # the losing learning rates' rows give another figure (linear's grid reaches 0.3)
    assert any(abs(rows(every, v)["value"].mean() - board[v]) > 0.05 for v in board.index), board


@pytest.mark.slow
def test_the_board_s_figure_of_the_committed_reference_is_the_mean_of_its_results(tmp_path):
    """On the committed reference as committed (both read with their include-stale option, so
    that it holds whether or not the installed code is the reference's), softmax's recall on the
    board's page is the mean over settings of each setting's mean of `attnbench.results`' rows:
    the page is built by the board itself (`build_site`), from the committed table's recall rows
    (the column depends on no other rows; the whole table takes 20 s). The table is read where
    it lies and copied, never collected: the committed folder is only read."""
    from attnbench.harness.leaderboard import build_site
    from attnbench.harness.results.collect import _read_with_meta, write_table

    rows = attnbench.results(REFERENCE / "results.parquet", include_stale=True)
    frame, meta = _read_with_meta(REFERENCE / "results.parquet")
    folder = tmp_path / "recall"
    write_table(frame[frame["task"] == "recall"], folder / "results.parquet", meta)
    page = build_site(folder, tmp_path / "site", include_stale=True).read_text()
    table = page.split('id="overview-table"')[1].split("</table>")[0]
    rows_shown = [re.findall(r"<td[^>]*>(.*?)</td>", tr) for tr in table.split("<tr")]
    cells = next(c for c in rows_shown if len(c) > 1 and c[1] == "softmax")  # the variant's row
    shown = next(c for c in cells[2:] if " · #" in c)  # "0.997 ± 0.00028 · #2"
    recall = rows[
        (rows["task"] == "recall")
        & (rows["variant"] == "softmax")
        & (rows["metric"] == meta.tasks["recall"].headline)
        & (rows["status"] == "ok")
        & ~rows["derived"]
        & ~rows["untrusted"]
    ]
    assert not recall.empty and recall["chosen"].all()
    figure = recall.groupby("task_params")["value"].mean().mean()
    assert shown.split(" ")[0] == f"{figure:.3g}"


def _table(tmp_path, rows: list[dict]) -> Path:
    """A results table file of ``rows`` (dicts of a few columns) of the task `TRAINED`."""
    from attnbench.harness.results.collect import COLUMNS, TableMeta, write_table

    base = dict.fromkeys(COLUMNS) | {
        "status": "ok", "variant_params": "{}", "device": "cpu", "hardware": "Some CPU",
        "threads": 1, "dtype": "float32", "derived": False, "current": True,
    }  # fmt: skip
    frame = pd.DataFrame([base | r for r in rows], columns=COLUMNS)
    path = tmp_path / "results.parquet"
    write_table(frame, path, TableMeta(tasks={"train": TRAINED}))
    return path


def _run(variant, lr, acc, val, seed=0, current=True, converged=None) -> list[dict]:
    """A trained run's rows: its test and validation accuracy, and its convergence flag."""
    run = {
        "run_id": f"{variant}-{lr}-{seed}-{current}", "task": "train", "variant": variant,
        "task_params": json.dumps({"lr": lr, "size": 8}), "seed": seed, "current": current,
    }  # fmt: skip
    flag = [] if converged is None else [run | {"metric": "converged", "value": converged}]
    return [run | {"metric": "acc", "value": acc}, run | {"metric": "val", "value": val}, *flag]


TRAINED = TaskInfo(
    name="train",
    headline="acc",
    metrics=[Metric(name, True, "") for name in ("acc", "val", "converged")],
    tuning=Tuning(["lr"], "val"),
    convergence={"acc": "converged"},
)


def test_results_marks_the_rows_the_board_ranks_and_the_values_it_leaves_out(tmp_path):
    """``chosen``: runs of the installed code at the learning rate validation picked;
    ``untrusted``: a run still learning at its cap (its values count only where a variant has
    no other); runs of older code are left out with a warning counting them, and returned by
    ``include_stale=True`` as the board's option shows them."""
    path = _table(
        tmp_path,
        [
            *_run("A", 0.01, acc=0.8, val=0.9, seed=0),
            *_run("A", 0.01, acc=0.7, val=0.9, seed=1),
            *_run("A", 0.001, acc=0.99, val=0.5),  # tests best, lost on validation
            *_run("A", 0.01, acc=0.1, val=0.9, seed=2, current=False),  # older code
            *_run("B", 0.01, acc=0.6, val=0.6, converged=1.0),
            *_run("B", 0.01, acc=0.2, val=0.6, seed=1, converged=0.0),  # still learning
        ],
    )
    with pytest.warns(UserWarning, match=r"1 run\(s\) of .* older code .* include_stale=True"):
        chosen = attnbench.results(path)
    acc = chosen[chosen["metric"] == "acc"].set_index(["variant", "seed"])
    assert acc["value"].to_dict() == {("A", 0): 0.8, ("A", 1): 0.7, ("B", 0): 0.6, ("B", 1): 0.2}
    assert acc.index[acc["untrusted"]].tolist() == [("B", 1)]
    assert chosen["chosen"].all()

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every row: nothing is left out, nothing to warn of
        every = attnbench.results(path, every_run=True)
    assert len(every) == 14 and every["chosen"].sum() == len(chosen)
    lost = every[every["task_params"].str.contains('"lr": 0.001')]
    assert not lost["chosen"].any() and not every.loc[~every["current"], "chosen"].any()

    stale = attnbench.results(path, include_stale=True)
    assert set(stale.loc[stale["metric"] == "acc", "seed"]) == {0, 1, 2}
    assert stale.loc[~stale["current"], "value"].tolist() == [0.1, 0.9]


@pytest.mark.parametrize(
    ("kwargs", "fix"),
    [
        ({"results_dir": None}, "results_dir must be a folder path"),
        ({"results_dir": 123}, "results_dir must be a folder path"),
        ({"task": None}, "task must be a task name or a list of them"),
        ({"task": []}, "task must be a task name or a list of them"),
        ({"task": ["recall", 3]}, "task must be a task name or a list of them"),
    ],
)
def test_arguments_of_the_wrong_type_are_named_before_any_job(tmp_path, kwargs, fix):
    import attnbench

    kwargs = {"results_dir": tmp_path / "results", **kwargs}
    with pytest.raises(ValueError, match=fix) as refused:  # the promise, and a TypeError
        attnbench.run("softmax", **kwargs)
    assert isinstance(refused.value, TypeError)
    assert not (tmp_path / "results").exists()


# (call, the sentence's start) for each public function taking an argument of the wrong type
WRONG_TYPES = [
    (lambda: attnbench.run(None), "variant=None is neither a registered name"),
    (lambda: attnbench.run(["softmax", 3]), "variant=3 is neither a registered name"),
    (lambda: attnbench.results(None), "attnbench.results: path must be a results folder"),
    (lambda: attnbench.results(123), "attnbench.results: path must be a results folder"),
    (lambda: attnbench.results(b"results"), "attnbench.results: path must be a results folder"),
    (lambda: attnbench.results(every_run="no"), "attnbench.results: every_run must be True or"),
    (lambda: attnbench.results(include_stale=1), "attnbench.results: include_stale must be"),
    (lambda: attnbench.build_variant(None), "attnbench.build_variant: name must be a variant's"),
    (lambda: attnbench.build_variant(123), "attnbench.build_variant: name must be a variant's"),
    (lambda: attnbench.build_variant("softmax", [1]), "attnbench.build_variant: params must be"),
    (lambda: attnbench.build_variant("softmax", None, 3), "attnbench.build_variant: shape must"),
    (lambda: attnbench.build_task(None), "attnbench.build_task: name must be a task's name"),
    (lambda: attnbench.build_task("recall", 5), "attnbench.build_task: params must be a dict"),
    (lambda: attnbench.list_variants(3), "attnbench.list_variants: pattern must be a name"),
    (lambda: attnbench.list_tasks(None), "attnbench.list_tasks: pattern must be a name"),
    (lambda: attnbench.load_plugins(reload="yes"), "attnbench.load_plugins: reload must be"),
]


@pytest.mark.parametrize(("call", "start"), WRONG_TYPES)
def test_an_argument_of_the_wrong_type_is_one_sentence_caught_as_value_or_type_error(call, start):
    """Once ``expected str, bytes or os.PathLike object, not NoneType``, ``'int' object is not
    iterable`` (or a shape of 3 taken): now one sentence naming the function and the argument,
    an `ArgumentTypeError`, so that ``except ValueError`` and ``except TypeError`` both catch it."""
    from attnbench.harness.discovery import ArgumentTypeError

    with pytest.raises(ValueError) as refused:
        call()
    assert type(refused.value) is ArgumentTypeError and isinstance(refused.value, TypeError)
    message = str(refused.value)
    assert message.startswith(start) and message.endswith(".") and "\n" not in message


def test_a_wrong_value_s_repr_too_long_for_a_sentence_is_named_by_its_type():
    with pytest.raises(ValueError, match=r"path must be .*, got a DataFrame; e\.g\. path="):
        attnbench.results(pd.DataFrame({"a": range(100)}))


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("x" * 300, r"its part x{12}… is 300 bytes, over the 255 a file name may have"),
        ("/".join(["y" * 200] * 21), r"it is \d+ bytes, over the 4096 a path may have"),
    ],
)
def test_a_path_too_long_for_the_filesystem_is_one_sentence(tmp_path, name, reason):
    """Once OSError Errno 36 (File name too long) from inside ``Path.is_dir``."""
    with pytest.raises(
        ValueError,
        match=r"^attnbench\.results: path is too long for the "
        rf"filesystem \({reason}\); give a shorter path\.$",
    ):
        attnbench.results(tmp_path / name)


def test_an_empty_path_is_refused_rather_than_read_as_the_current_folder():
    with pytest.raises(ValueError, match=r"^attnbench\.results: path is empty; give a results"):
        attnbench.results("")


def test_a_path_through_a_link_to_itself_names_the_link(tmp_path):
    (tmp_path / "loop").symlink_to("loop")
    with pytest.raises(ValueError, match="loop is a symbolic link that leads back into itself"):
        attnbench.results(tmp_path / "loop" / "results")


@pytest.mark.slow
def test_two_threads_running_jobs_take_turns(tmp_path):
    """Hydra's configuration is one per process: two threads calling run at once once failed
    with "GlobalHydra is already initialized"; they now take turns, and both get their rows."""
    import threading

    import attnbench

    rows, errors = {}, []

    def call(seed: int) -> None:
        try:
            rows[seed] = attnbench.run(
                "softmax",
                "throughput",
                results_dir=tmp_path / f"r{seed}",
                seed=seed,
                **{"task.seq_len": 32, "task.max_timing_s": 0.1, "task.backward": False},
            )
        except Exception as exc:  # noqa: BLE001 (the test reports any failure of either)
            errors.append(exc)

    threads = [threading.Thread(target=call, args=(seed,)) for seed in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert {seed: set(frame["seed"]) for seed, frame in rows.items()} == {0: {0}, 1: {1}}
