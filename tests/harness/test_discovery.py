"""Entry-point discovery with real installed distributions (pip --target / a dist-info folder)."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from xml.etree import ElementTree

import pytest
from conftest import FAST, REPO, run_cli

from attnbench.harness.discovery import OLD_IMPORTS_HINT, _describe
from attnbench.variant import VARIANTS

EXAMPLE = REPO / "examples" / "attnbench-plugin-example"


def test_builtins_are_found_through_the_entry_point_group():
    from importlib import metadata

    declared = {
        ep.name
        for ep in metadata.entry_points(group="attnbench.variants")
        if ep.dist is not None and ep.dist.name == "attnbench"
    }
    assert {"softmax", "linear"} <= declared
    for name in declared:
        assert VARIANTS.entry(name).origin == "attnbench"


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory) -> Path:
    """The example plugin distribution, really installed (into a folder put on PYTHONPATH)."""
    target = tmp_path_factory.mktemp("site")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            str(EXAMPLE),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return target


def test_installed_plugin_is_listed_with_its_origin(plugin_site):
    proc = run_cli("attnbench-variants", "--json", env={"PYTHONPATH": str(plugin_site)})
    assert proc.returncode == 0, proc.stderr
    rows = {r["name"]: r for r in json.loads(proc.stdout)["variants"]}
    assert rows["cosine_softmax"]["origin"] == "attnbench-plugin-example"
    assert rows["cosine_softmax"]["cost"] == "n²"
    assert rows["cosine_softmax"]["params"] == {"scale": 10.0}
    assert rows["softmax"]["origin"] == "attnbench"


# Tiny sizes (a few seconds a job on two CPU cores): the point is that a plugin variant runs
# through the whole job path (Hydra option, build, task, record), not what it measures.
TINY_TASKS = {
    "throughput": FAST,
    "recall": [
        "task.seq_len=24",
        "task.n_kv_pairs=3",
        "task.vocab_size=16",
        "task.train_size=200",
        "task.test_size=50",
        "task.steps=10",
        "task.batch_size=8",
        "task.d_model=16",
    ],
}
HEADLINES = {"throughput": "fwd_ms", "recall": "accuracy"}


@pytest.mark.parametrize("task", sorted(TINY_TASKS))
def test_installed_plugin_runs_as_a_hydra_option(plugin_site, tmp_path, task):
    """The installed plugin's variant runs on a speed task and a training task, with its
    hyperparameter set from the command line, and its record names the plugin as its origin."""
    proc = run_cli(
        "attnbench",
        "variant=cosine_softmax",
        "variant.scale=5.0",
        f"task={task}",
        *TINY_TASKS[task],
        f"results_dir={tmp_path}",
        env={"PYTHONPATH": str(plugin_site)},
    )
    assert proc.returncode == 0, proc.stderr
    (record,) = [json.loads(p.read_text()) for p in (tmp_path / "runs").glob("*.json")]
    assert record["status"] == "ok", record["error"]
    assert record["task"] == task
    assert record["variant"] == "cosine_softmax" and record["variant_params"] == {"scale": 5.0}
    assert record["details"]["variant_origin"] == "attnbench-plugin-example"
    headline = [m["value"] for m in record["metrics"] if m["metric"] == HEADLINES[task]]
    assert len(headline) == 1 and math.isfinite(headline[0])


def test_plugin_hyperparameter_is_refused_in_one_sentence(plugin_site, tmp_path):
    """A value the plugin's Params refuses (its ``__post_init__`` raises ValueError) becomes a
    one-sentence refusal with exit 2 before any job runs, as for a built-in (README, "Adding a
    variant plugin")."""
    proc = run_cli(
        "attnbench",
        "variant=cosine_softmax",
        "variant.scale=0",
        f"results_dir={tmp_path}",
        env={"PYTHONPATH": str(plugin_site)},
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "attnbench: variant cosine_softmax: cosine_softmax scale must be > 0, got 0.0; try 10.0."
    )
    assert not list(tmp_path.rglob("*.json"))


def test_plugin_passes_its_own_test_suite(plugin_site, tmp_path):
    """The example plugin's tests (the shipped contract suite + its maths) pass where a plugin's
    CI would run them: from a copy of its folder, with the plugin and attnbench installed and
    nothing of attnbench's checkout importable (no `tests/`, no `conftest`).

    The JUnit report pins the count: 33 contract tests (every check of `attnbench.testing`, the
    incremental form's, grouped-query heads' and packed documents' included: the example
    registers a form) and the plugin's 2 reference tests, none skipped, so the suite cannot pass
    by running nothing (a check added to `attnbench.testing` changes the 35 here).
    """
    folder = tmp_path / "plugin"
    shutil.copytree(
        EXAMPLE, folder, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__")
    )
    report = tmp_path / "report.xml"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}"],
        capture_output=True,
        text=True,
        cwd=folder,
        env={**os.environ, "PYTHONPATH": str(plugin_site)},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    suite = ElementTree.parse(report).getroot().find("testsuite")
    counts = {k: int(suite.get(k)) for k in ("tests", "failures", "errors", "skipped")}
    assert counts == {"tests": 35, "failures": 0, "errors": 0, "skipped": 0}
    classes = [case.get("classname") for case in suite.iter("testcase")]
    assert classes.count("tests.test_cosine.TestCosineSoftmax") == 33, classes


def _broken_distribution(site: Path) -> None:
    dist = site / "broken_plugin-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[attnbench.variants]\nbroken = broken_plugin_mod\n")
    (site / "broken_plugin_mod.py").write_text("raise ImportError('missing dependency xyz')\n")


BROKEN_SOURCE = "plugin broken-plugin (entry point attnbench.variants: broken = broken_plugin_mod)"


def test_plugin_that_fails_to_import_is_reported_and_skipped(tmp_path):
    _broken_distribution(tmp_path)
    env = {"PYTHONPATH": str(tmp_path)}
    proc = run_cli("attnbench-variants", env=env)
    assert proc.returncode == 0
    header = proc.stdout.splitlines()[0].split()
    assert header == ["name", "family", "cost", "causal", "origin", "library", "available"]
    assert "softmax" in proc.stdout and "linear" in proc.stdout
    assert (
        proc.stderr == f"attnbench-variants: warning: {BROKEN_SOURCE} failed to load: ImportError: "
        "missing dependency xyz\n"
    )
    strict = run_cli("attnbench-variants", "--strict", env=env)
    assert strict.returncode == 2 and "softmax" in strict.stdout
    assert strict.stderr == (
        f"attnbench-variants: {BROKEN_SOURCE} failed to load: ImportError: missing dependency "
        "xyz; fix or uninstall it (--strict makes this an error).\n"
    )


def test_a_job_in_its_own_process_does_not_repeat_a_plugin_s_warning(tmp_path):
    """A job with a time budget runs in a spawned process, which loads the plugins again: the
    broken one is said once, by the command, not again by the child with a file:line."""
    _broken_distribution(tmp_path)
    args = ["variant=softmax", "task=throughput", *FAST, "timeout_s=60"]
    proc = run_cli(
        "attnbench", *args, f"results_dir={tmp_path / 'r'}", env={"PYTHONPATH": str(tmp_path)}
    )
    assert proc.returncode == 0, proc.stderr
    said = [line for line in proc.stderr.splitlines() if "broken" in line]
    assert said == [
        f"attnbench: warning: {BROKEN_SOURCE} failed to load and is skipped: ImportError: "
        "missing dependency xyz"
    ]


ASKED_FOR_BROKEN = (
    f"variant 'broken' comes from {BROKEN_SOURCE}, which failed to load: ImportError: missing "
    "dependency xyz; fix or uninstall it."
)


def test_a_run_that_asks_for_a_broken_plugin_names_it(tmp_path):
    """Not "Unknown variant 'broken'": the one sentence names the plugin, its entry point and
    its error, exit 2, no traceback, nothing written (the warning is not repeated)."""
    site = tmp_path / "site"
    _broken_distribution(site)
    env = {"PYTHONPATH": str(site)}
    proc = run_cli("attnbench", "variant=broken", f"results_dir={tmp_path / 'r'}", env=env)
    assert proc.returncode == 2
    assert proc.stderr == f"attnbench: {ASKED_FOR_BROKEN}\n"
    assert not (tmp_path / "r").exists()
    listed = run_cli("attnbench-variants", "broken", env=env)
    assert listed.returncode == 2 and listed.stdout == ""
    assert listed.stderr == f"attnbench-variants: {ASKED_FOR_BROKEN}\n"


def _old_import_distribution(site: Path) -> None:
    """A plugin written against attnbench before 0.2: it imports the engine as ``harness``."""
    dist = site / "old_plugin-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: old-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[attnbench.variants]\nold_cosine = old_plugin.cosine\n"
        "[attnbench.tasks]\nold_needle = old_plugin.needle\n"
    )
    (site / "old_plugin").mkdir()
    (site / "old_plugin" / "__init__.py").write_text("")
    (site / "old_plugin" / "cosine.py").write_text(
        "from harness.variant_api import AttentionVariant, register_variant\n"
    )
    (site / "old_plugin" / "needle.py").write_text("import harness.task_api\n")


def test_a_plugin_on_the_old_harness_imports_gets_the_migration_hint(tmp_path):
    site = tmp_path / "site"
    _old_import_distribution(site)
    env = {"PYTHONPATH": str(site)}
    proc = run_cli("attnbench", "task=old_needle", f"results_dir={tmp_path / 'r'}", env=env)
    assert proc.returncode == 2
    assert proc.stderr == (
        "attnbench: task 'old_needle' comes from plugin old-plugin (entry point attnbench.tasks: "
        "old_needle = old_plugin.needle), which failed to load: ModuleNotFoundError: No module "
        f"named 'harness'; {OLD_IMPORTS_HINT}; fix or uninstall it.\n"
    )
    listed = run_cli("attnbench-variants", "--json", env=env)
    failed = {f["name"]: f for f in json.loads(listed.stdout)["failed_plugins"]}
    assert failed["old_cosine"]["error"] == "ModuleNotFoundError: No module named 'harness'"
    assert failed["old_cosine"]["hint"] == OLD_IMPORTS_HINT


@pytest.mark.parametrize(
    "exc, hint",
    [
        (ModuleNotFoundError("No module named 'harness'", name="harness"), OLD_IMPORTS_HINT),
        (ModuleNotFoundError("…", name="harness.variant_api"), OLD_IMPORTS_HINT),
        (ModuleNotFoundError("No module named 'harnessx'", name="harnessx"), ""),
        (ImportError("cannot import name 'x' from 'harness'"), ""),
    ],
)
def test_only_a_missing_harness_module_gets_the_hint(exc, hint):
    assert _describe(exc)[1] == hint


def test_the_error_is_its_type_and_first_line():
    assert _describe(ValueError("bad value.\nmore detail")) == ("ValueError: bad value", "")
    assert _describe(RuntimeError()) == ("RuntimeError", "")


def test_failing_plugin_warns_in_process(tmp_path, monkeypatch):
    _broken_distribution(tmp_path)
    code = textwrap.dedent("""
        import warnings
        from attnbench.harness.discovery import load_plugins, PluginLoadWarning
        from attnbench.variant import VARIANTS
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            failed = load_plugins()
        assert [f.name for f in failed] == ["broken"], failed
        assert any(issubclass(w.category, PluginLoadWarning) for w in caught)
        assert "softmax" in VARIANTS
    """)
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr


def test_a_fresh_process_builds_a_variant_and_a_task_by_name():
    """`attnbench.build_variant` and `build_task` load the installed plugins first: the built-ins
    register on import like any plugin, and a fresh process once got "no variants registered"
    until it called `load_plugins` itself."""
    code = (
        "import attnbench; "
        "print(type(attnbench.build_variant('softmax')).__name__, "
        "type(attnbench.build_task('recall')).__name__)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["SoftmaxAttention", "Recall"]
