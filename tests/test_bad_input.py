"""Bad input: one sentence naming the value and the fix, exit status 2, nothing written.

Each row is a command line and a fragment of the sentence it must print. `REFUSALS` are refused
before Hydra starts, so they run in-process through `attnbench.harness.cli.app.main` (the console
script's own function, seconds faster than a subprocess); `CLI_REFUSALS` go through the real
command, among them the refusals made inside Hydra by the `grids` sweeper.

`OUTCOMES` are cases that are by design not refusals; each row says why.
"""

from __future__ import annotations

import json
import sys

import pytest
import torch
from conftest import FAST, REPO, run_cli

from attnbench.harness import discovery
from attnbench.harness.cli import app
from attnbench.harness.discovery import OLD_IMPORTS_HINT, PluginFailure
from attnbench.harness.jobs import command_line
from attnbench.harness.jobs.config import store_configs
from attnbench.toolkit.timing import usable_cores

SEARCHPATH = f"hydra.searchpath=[file://{REPO / 'tests' / 'conf'}]"
CORES = usable_cores()

REFUSALS = [
    # names: registries, presets, globs
    (["variant=softmx"], "Unknown variant 'softmx'. Did you mean: softmax?"),
    (["task=recal"], "Unknown task 'recal'. Did you mean: recall?"),
    (["-m", "variant=softmax,linaer"], "Unknown variant 'linaer'. Did you mean: linear?"),
    (
        ["sweep=doesnotexist"],
        "sweep=doesnotexist is not a sweep preset. Presets: gpu, gqa, lm, long, mad, paper,",
    ),
    (["-m", "sweep=quik"], "sweep=quik is not a sweep preset. Did you mean quick? Presets:"),
    (["sweep=quick"], "sweep=quick selects a sweep preset; add -m to run it"),
    (["-m", "variant=glob(zzz*)"], "variant=glob(zzz*) matches no variant, and a sweep that"),
    (["variant=glob(s*)"], "variant=glob(s*) is a glob, which sweeps; add -m"),
    (["variant=softmax,linear"], "variant=softmax,linear is a sweep; add -m"),
    # the command line itself
    (["task.seq_len=[64"], "task.seq_len=[64 is not a valid override (no viable alternative"),
    (["task.seq_len='64"], "task.seq_len='64 is not a valid override (token recognition error"),
    (["seed=1", "seed=2"], "seed is given twice (seed=1 and seed=2); give each key once."),
    (["-m", "--cfg", "job", "sweep=quick"], "--cfg prints one job's config and cannot be combined"),
    (["hydra/launcher=nope"], "the command line does not compose: In 'hydra/config': Could not"),
    # keys and types
    (["variant=window", "variant.windw=4"], "variant.windw is not a parameter of variant window."),
    (["task.seq_lenn=4"], "task.seq_lenn is not a parameter of task throughput."),
    (
        ["variant=peer_fla_linear", "variant.chunk=4"],
        "variant.chunk is not a parameter of variant peer_fla_linear. It has no parameters.",
    ),
    (["seeed=1"], "seeed is not a config key. Did you mean seed?"),
    (["task.seq_len=abc"], "task.seq_len=abc is not valid: Value 'abc' of type 'str'"),
    (["seed=1.5"], "seed=1.5 is not valid"),
    (["device=gpu"], "device=gpu is not valid: Invalid value 'gpu', expected one of"),
    (["dtype=float64"], "dtype=float64 is not valid: Invalid value 'float64'"),
    # words that are not overrides, and deletions of what every job reads (issue #28)
    (["foo"], "foo is not an override; give key=value"),
    (["variant=softmax", "recall"], "recall is not an override; give key=value"),
    (["~task"], "~task deletes task, which every job reads; set it instead (task=VALUE)"),
    (["~variant"], "~variant deletes variant, which every job reads"),
    (["~seed"], "~seed deletes seed, which every job reads"),
    (["~task.seq_len"], "~task.seq_len deletes task.seq_len"),
    # the preset is named first, not a key its grids would have given meaning to
    (["sweep=doesnotexist", "task.seq_len=64"], "sweep=doesnotexist is not a sweep preset."),
    # a task key goes to every grid of a preset: each task the preset runs must have it
    (
        ["-m", "sweep=quick", "task.seq_len=64"],
        "task.seq_len is not a parameter of task icl_regression, which sweep=quick runs (narrow "
        "it with task=NAME).",
    ),
    (["-m", "sweep=gqa", "task.sq_len=64"], "task.sq_len is not a parameter of task throughput"),
    # a sweeper that would skip the check of every job before the first
    (["-m", "sweep=quick", "hydra/sweeper=basic"], "hydra/sweeper=basic would run the jobs"),
    (["-m", "variant=softmax,linear", "hydra/sweeper=basic"], "drop it: the default grids"),
    # Hydra's own folders and workers, which failed after Hydra started (issue #28)
    (["hydra.run.dir=/etc/hostname"], "hydra.run.dir=/etc/hostname cannot hold Hydra's output"),
    (
        ["-m", "variant=softmax,linear", "hydra.sweep.dir=/proc/attnbench"],
        "hydra.sweep.dir=/proc/attnbench cannot hold Hydra's output",
    ),
    (
        ["-m", "variant=softmax,linear", "hydra/launcher=joblib", "hydra.launcher.n_jobs=0"],
        "hydra.launcher.n_jobs=0 starts no worker",
    ),
    # sizes torch cannot hold (it printed a C++ stack dump)
    (["task.seq_len=9223372036854775808"], "task.seq_len=9223372036854775808 is out of range"),
    (["seed=-9223372036854775809"], "is out of range"),
    # numbers a JSON record cannot hold (inf was stored as null: not reproducible from its record)
    (["variant.temperature=inf"], "variant.temperature=inf is not finite (a record is JSON"),
    (["task=icl_regression", "task.ridge_lambda=nan"], "task.ridge_lambda=nan is not finite"),
    (["task=concentration", "task.scales=[1,-inf]"], "task.scales=[1, -inf] is not finite"),
    (["-m", "variant.temperature=1,nan"], "variant.temperature=nan is not finite"),
    # a setting the task would ignore, or one that is no scale (issue #28's adversarial round)
    (["task=concentration", "task.scale=0.5"], "task.scale=0.5 is used only with task.scales=[]"),
    (["task=concentration", "task.scale=0"], "task.scale and task.scales must be finite and > 0"),
    (["task=concentration", "task.scales=[1,-2]"], "got 1.0 and [1.0, -2.0]"),
    # root settings
    (["seed=-1"], "seed=-1 is out of range; use a seed from 0 to 4294967295."),
    (["seed=4294967296"], "seed=4294967296 is out of range; use a seed from 0 to 4294967295."),
    (["threads=-1"], f"threads=-1 is negative; use threads=0 (torch's default) or 1 to {CORES}."),
    ([f"threads={CORES + 1}"], f"threads={CORES + 1} is more than the {CORES} CPU cores usable"),
    (["timeout_s=-1"], "timeout_s=-1.0 is not a time budget; use seconds >= 0 (0 = no budget)."),
    (["timeout_s=nan"], "timeout_s=nan is not finite"),
    (["results_dir="], "results_dir is empty; give a directory for the records"),
    ([f"results_dir=/tmp/{'x' * 300}"], "is too long (its part xxxxxxxxxxxx… is 300 bytes"),
    (["-m", "variant=softmax,linear", "results_dir=a,b"], "results_dir=a,b sweeps the results"),
    # task and variant values (their check() and constructors)
    (["task.seq_len=0"], "task.seq_len must be >= 1, got 0."),
    (["task.batch_size=-2"], "task.batch_size must be >= 1, got -2."),
    (["task.min_run_time=inf"], "task.min_run_time=inf is not finite"),
    (["task=recall", "task.n_heads=3"], "task.n_heads=3 must divide task.d_model=64"),
    (["task=recall", "task.lr=-1"], "task recall: task.lr must be a finite number > 0, got -1.0."),
    (["task=copy", "task.lr=nan"], "task.lr=nan is not finite"),
    (
        ["task=recall", "task.train_size=16", "task.batch_size=64"],
        "task.batch_size=64 exceeds task.train_size=16, the sequences a batch is drawn from",
    ),
    (["task=parity", "task.train_size=8"], "task.batch_size=64 exceeds task.train_size=8"),
    (["task=noisy_recall", "task.train_size=8"], "exceeds task.train_size=8"),
    (["task=copy", "task.batch_size=30000"], "task.batch_size=30000 exceeds task.train_size=20000"),
    (["task=icl_regression", "task.lr=0"], "task.lr must be a finite number > 0, got 0.0."),
    (["task=recall", "task.n_layers=0"], "task.n_layers must be >= 1, got 0."),
    (["task=icl_regression", "task.noise_std=nan"], "task.noise_std=nan is not finite"),
    (  # one_layer scores no shift: the value was stored in its records and ignored
        ["task=icl_regression", "task.mode=one_layer", "task.shifts=bogus"],
        "task.shifts='bogus' applies only to task.mode=prompt",
    ),
    (
        ["task=icl_regression", "task.mode=attention_system", "task.shifts=all"],
        "task.shifts='all' applies only to task.mode=prompt",
    ),
    (
        ["task=icl_regression", "task.shifts=bogus"],
        "task.shifts='bogus' names an unknown shift 'bogus'; use all, none, or names joined by +",
    ),
    (
        ["variant=window", "variant.window=0"],
        "variant window: window must be a fraction of the sequence in (0, 1) or a whole number "
        "of positions >= 1, got 0.",
    ),
    (["variant=decay", "variant.decay=1.5"], "variant decay: decay must be in (0, 1]"),
    (
        ["variant=mamba2", "variant.dt_init_floor=-1"],
        "mamba2 needs 0 <= dt_init_floor <= dt_max; got dt_init_floor=-1.0, dt_max=0.1.",
    ),
    (
        ["variant=mamba2", "variant.dt_init_floor=0.5"],
        "mamba2 needs 0 <= dt_init_floor <= dt_max; got dt_init_floor=0.5, dt_max=0.1.",
    ),
    (["variant=mamba2", "variant.dt_max=1e39"], "variant.dt_max=1e39 is beyond float32's range"),
    (["--bogus", "variant=softmax"], "--bogus is not an option of attnbench (its own is --strict;"),
    (["--cfg=job", "--verbose"], "--verbose is not an option of attnbench"),
    (
        ["variant=gla,mamba2", "-m", "task=throughput"],
        "-m stands between settings, where Hydra cannot read the settings after it; give the "
        "options first (attnbench -m key=value …).",
    ),
    (["variant=mesa", "variant.lambda_min=1e-310"], "variant.lambda_min=1e-310 is beyond float32"),
    (
        ["variant=mamba2", "variant.a_init_min=1e-320"],
        "give a magnitude from 1.2e-38 to 3.4e+38 (or 0, where",
    ),
    # a text parameter given "nan": its choices, not "give finite numbers"
    (["variant=delta_net", "variant.qk_activation=nan"], "qk_activation 'nan' is not known; valid"),
    (
        ["variant=mesa", "variant.lambda_init=1e38", "task.causal=true"],
        "mesa lambda_init=1e+38 is too large: its solve divides by λ, whose inverse must be a "
        "normal float32; give lambda_init below 8.51e+37.",
    ),
]
if not torch.cuda.is_available():
    REFUSALS.append((["device=cuda"], "device=cuda was asked for but no CUDA GPU is available"))


def _ids(x):
    return " ".join(x) if isinstance(x, list) else None


def _entries(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _with_results_dir(args, results):
    given = any(a.startswith("results_dir=") for a in args)
    return args if given else [*args, f"results_dir={results}"]


@pytest.mark.parametrize("args, message", REFUSALS, ids=_ids)
def test_refused_before_hydra_starts(tmp_path, monkeypatch, capsys, args, message):
    _refused_in_process(tmp_path, monkeypatch, capsys, args, message)


def test_a_tuning_folder_that_is_a_file_is_refused(tmp_path, monkeypatch, capsys):
    """ATTNBENCH_TUNING_CACHE naming a file: one sentence before any job (every job would
    otherwise re-tune its kernels and warn "File exists")."""
    from attnbench.variants.kernels.autotune import CACHE_ENV

    elsewhere = tmp_path.parent / f"{tmp_path.name}-tuning"
    elsewhere.write_text("not a folder")
    monkeypatch.setenv(CACHE_ENV, str(elsewhere))
    message = f"{CACHE_ENV}={elsewhere} cannot hold the kernel tuning files (Not a directory)"
    _refused_in_process(tmp_path, monkeypatch, capsys, ["task=recall"], message)


def _refused_in_process(tmp_path, monkeypatch, capsys, args, message):
    """``attnbench ARGS`` run in-process: exit 2 with one line holding ``message``, before
    Hydra, nothing written."""
    monkeypatch.chdir(tmp_path)  # a stray folder in the working directory would show too
    monkeypatch.setattr(sys, "argv", ["attnbench", *_with_results_dir(args, tmp_path / "r")])
    monkeypatch.setattr(app, "_hydra_main", lambda: pytest.fail("the command reached Hydra"))
    with pytest.raises(SystemExit) as exit_:
        app.main()
    err = capsys.readouterr().err
    assert exit_.value.code == 2, err
    assert message in err
    assert err.startswith("attnbench: ") and len(err.strip().splitlines()) == 1  # one sentence
    assert _entries(tmp_path) == []  # nothing written, not even an empty folder


# Plugins that failed to load, as discovery records them (a real broken distribution:
# tests/harness/test_discovery.py): asking for a name one of them declares names the plugin.
FAILED_PLUGINS = [
    PluginFailure("attnbench.variants", "broken", "broken_mod", "broken-dist", "ImportError: xyz"),
    PluginFailure(
        "attnbench.tasks",
        "old_task",
        "old_pkg.task",
        "old-dist",
        "ModuleNotFoundError: No module named 'harness'",
        OLD_IMPORTS_HINT,
    ),
]
PLUGIN_REFUSALS = [
    (
        ["variant=broken"],
        "variant 'broken' comes from plugin broken-dist (entry point attnbench.variants: broken = "
        "broken_mod), which failed to load: ImportError: xyz; fix or uninstall it.",
    ),
    (
        ["-m", "variant=softmax,broken"],
        "variant 'broken' comes from plugin broken-dist (entry point attnbench.variants: broken = ",
    ),
    (["-m", "variant=glob(bro*)"], "variant 'broken' comes from plugin broken-dist"),
    (
        ["task=old_task"],
        "task 'old_task' comes from plugin old-dist (entry point attnbench.tasks: old_task = "
        "old_pkg.task), which failed to load: ModuleNotFoundError: No module named 'harness'; "
        "attnbench 0.2 moved harness.* to the public API: import from attnbench (see "
        "docs/migration.md); fix or uninstall it.",
    ),
    (["variant=brokn"], "Unknown variant 'brokn'."),  # a typo of it stays unknown
    (["seed=-1"], "seed=-1 is out of range"),  # other refusals: their sentence alone
]


@pytest.mark.parametrize("args, message", PLUGIN_REFUSALS, ids=_ids)
def test_a_name_from_a_plugin_that_failed_to_load_names_it(
    tmp_path, monkeypatch, capsys, args, message
):
    """One sentence, exit 2: the plugin and its error instead of "Unknown variant"; the warning
    about the plugin is not printed beside a refusal (it would be a second sentence)."""
    monkeypatch.setattr(discovery, "_failures", FAILED_PLUGINS)
    _refused_in_process(tmp_path, monkeypatch, capsys, args, message)


CLI_REFUSALS = [  # through the console script, and inside Hydra (the sweeper's checks)
    (["variant=softmx"], "Unknown variant 'softmx'. Did you mean: softmax?"),
    (["task.seq_len=[64"], "task.seq_len=[64 is not a valid override"),
    (["-m", "variant=softmax,linear", "task.seq_len=32,0"], "task.seq_len must be >= 1, got 0."),
    (["-m", "variant=softmax,linear", "seed=-1"], "seed=-1 is out of range"),
    (["-m", "sweep=grids_test", SEARCHPATH, "task=recall"], "task=recall leaves none of this"),
]


@pytest.mark.parametrize("args, message", CLI_REFUSALS, ids=_ids)
def test_refused_by_the_command(tmp_path, args, message):
    proc = run_cli("attnbench", *args, f"results_dir={tmp_path / 'r'}", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr  # one sentence
    assert _entries(tmp_path) == []  # no record, no partial file, no Hydra run directory


@pytest.mark.parametrize(
    "args",
    [
        ["sweep=gqa", "task.seq_len=64"],  # was refused naming icl_regression, not in gqa
        ["sweep=gqa", "task=throughput", "task.n_kv_heads=2"],
        ["sweep=quick", "task=throughput", "task.seq_len=64"],  # narrowed to a task that has it
    ],
    ids=_ids,
)
def test_a_preset_s_task_keys_are_checked_against_the_tasks_it_runs(tmp_path, args):
    """Every task of gqa (throughput, decode) has seq_len: the command line's value replaces
    its grids' values, and the command is accepted."""
    command_line.check_command_line(["-m", *args, f"results_dir={tmp_path / 'r'}"])
    assert _entries(tmp_path) == []


def test_unwritable_results_dir_is_refused_before_any_job(tmp_path):
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("a file where the results directory should be")
    proc = run_cli("attnbench", "-m", "variant=softmax,linear", f"results_dir={blocker / 'r'}")
    assert proc.returncode == 2
    assert f"results_dir={blocker / 'r'} is not writable" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert _entries(tmp_path) == ["not_a_dir"]


def test_results_dir_is_resolved_as_the_jobs_resolve_it(tmp_path, monkeypatch, capsys):
    """An interpolation is resolved (here to a path under a file, so refused: the sentence names
    the resolved path), not taken as the name of a folder in the working directory."""
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("a file")
    monkeypatch.setenv("ATTNBENCH_TEST_ROOT", str(blocker))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["attnbench", "results_dir=${oc.env:ATTNBENCH_TEST_ROOT}/r"])
    with pytest.raises(SystemExit) as exit_:
        app.main()
    assert exit_.value.code == 2
    assert f"results_dir={blocker}/r is not writable" in capsys.readouterr().err
    assert _entries(tmp_path) == ["not_a_dir"]


def test_quoted_results_dir_and_chdir_write_where_collection_reads(tmp_path):
    """``results_dir='my results'`` is the folder ``my results``; with ``hydra.job.chdir=true``
    the jobs run in their Hydra folders, yet records and table land in that folder of the
    directory the command started in."""
    proc = run_cli(
        "attnbench",
        "-m",
        "variant=softmax,linear",
        *FAST,
        "hydra.job.chdir=true",
        "results_dir='my results'",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["my results"]
    results = tmp_path / "my results"
    assert len(list((results / "runs").glob("*.json"))) == 2
    assert (results / "results.parquet").is_file()


def _records(results):
    return [json.loads(p.read_text()) for p in sorted((results / "runs").glob("*.json"))]


OUTCOMES = [  # by design not refusals: (command line, {(task, variant): status}, error, why)
    (
        ["variant=sinkhorn", "task.causal=true", *FAST],
        {("throughput", "sinkhorn"): "unsupported"},
        "does not support causal",
        "whether a variant can be causal is a fact about the variant, worth a row in the table",
    ),
    (
        ["variant=window", "variant.window=100000", *FAST],
        {("throughput", "window"): "ok"},
        None,
        "a window covering the whole sequence is clamped to it: dense attention, exactly",
    ),
    (
        ["-m", "sweep=grids_test", SEARCHPATH, "task=concentration"],
        {("concentration", "softmax"): "ok", ("concentration", "linear"): "ok"},
        None,
        "a task on the command line narrows a preset to the grids of that task",
    ),
]


@pytest.mark.parametrize(
    "args, expected, error, why", OUTCOMES, ids=[" ".join(row[0][:3]) for row in OUTCOMES]
)
def test_outcomes_that_are_records_not_refusals(tmp_path, args, expected, error, why):
    results = tmp_path / "results"
    proc = run_cli("attnbench", *args, f"results_dir={results}")
    assert proc.returncode == 0, proc.stderr
    records = _records(results)
    assert {(r["task"], r["variant"]): r["status"] for r in records} == expected, why
    assert error is None or all(error in r["error"] for r in records)


def test_informational_flags_accept_what_they_only_print():
    """``--cfg hydra sweep=quick`` shows a preset's grids (the alternative to ``-m --cfg``), and
    ``--cfg job`` a sweep value's config as Hydra does: neither is refused for lacking ``-m``."""
    command_line.check_command_line(["--cfg", "hydra", "sweep=quick"])
    command_line.check_command_line(["--cfg", "job", "sweep=quick", "task=recall"])


@pytest.mark.parametrize(
    "args",
    [
        ["task=memorization,compression", "task.steps=5"],
        ["sweep=mad", "task=memorization,compression", "task.steps=5"],
        ["variant=mamba2,gla", "variant.chunk_size=16"],
    ],
    ids=_ids,
)
def test_a_key_the_default_task_or_variant_lacks_is_accepted_in_a_sweep_of_those_that_have_it(
    tmp_path, args
):
    """Hydra composes a sweep's base config with the default task (throughput) and variant
    (softmax) before it sweeps; `task.steps` was refused there ("Could not override") though
    every task of the sweep has it. Given to each job as a one-value sweep, it composes."""
    discovery.load_plugins()
    store_configs()
    given = ["-m", *args, f"results_dir={tmp_path / 'r'}"]
    command_line.check_command_line(given)  # as typed (attnbench.run checks this way too)
    line = command_line.group_keys_per_job(given)
    assert [a for a in line if a.startswith(("task.", "variant."))] == [
        f"{a.split('=')[0]}=choice({a.split('=')[1]})" for a in args if "." in a.split("=")[0]
    ]
    command_line.check_command_line(line)
    assert _entries(tmp_path) == []


def test_a_key_the_base_task_has_is_left_as_typed(tmp_path):
    """Only what the base composition cannot take is deferred: `null` (a key's default, no value
    of a one-value sweep) and keys of the default or the fixed task stay as the user gave them."""
    given = [
        "-m", "variant=gla,mamba2", "task=throughput", "task.seq_len=32", "task.n_kv_heads=null",
        "variant.chunk_size=16", f"results_dir={tmp_path / 'r'}",
    ]  # fmt: skip
    command_line.check_command_line(given)
    expected = [*given[:5], "variant.chunk_size=choice(16)", given[6]]
    assert command_line.group_keys_per_job(given) == expected


def test_a_refusal_quotes_the_key_as_typed(tmp_path, monkeypatch, capsys):
    args = ["-m", "task=memorization,compression", "task.steps=5", "task.steps=6"]
    _refused_in_process(tmp_path, monkeypatch, capsys, args, "task.steps=5 and task.steps=6")


def test_a_sweep_of_two_tasks_gives_each_job_the_key_they_share(tmp_path):
    """The real command: both jobs run with ``task.steps=2`` (their records say so)."""
    tiny = ["task.train_size=16", "task.test_size=16", "task.val_size=16", "task.batch_size=8"]
    done = run_cli(
        "attnbench", "-m", "variant=softmax", "task=memorization,compression", "task.steps=2",
        *tiny, "threads=1", f"results_dir={tmp_path}",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    records = [json.loads(p.read_text()) for p in (tmp_path / "runs").glob("*.json")]
    assert sorted(r["task"] for r in records) == ["compression", "memorization"]
    assert all(r["status"] == "ok" and r["task_params"]["steps"] == 2 for r in records)


def test_outside_a_sweep_the_command_line_is_left_as_it_is():
    args = ["task=memorization", "task.steps=5", "variant.temperature=2"]
    assert command_line.group_keys_per_job(args) == args
    line = ["-m", "task=recall", "task.steps=5,6", "+task.x=1", "seed=1", "--cfg"]
    assert command_line.group_keys_per_job(line) == line


def test_a_tiny_value_is_refused_where_denormals_are_flushed(tmp_path, monkeypatch, capsys):
    """A process that ran a job flushes denormal floats to zero (`torch.set_flush_denormal`),
    which parses ``1e-310`` as 0: the check reads the number from the text as typed."""
    torch.set_flush_denormal(True)
    try:
        args = ["variant=mesa", "variant.lambda_min=1e-310"]
        _refused_in_process(tmp_path, monkeypatch, capsys, args, "variant.lambda_min=1e-310 is")
    finally:
        torch.set_flush_denormal(False)  # a fresh process's setting
