"""The Python entry point, for notebooks and scripts: `run` jobs and read `results` as tables.

``attnbench.run(variant, task, **overrides)`` is ``attnbench -m variant=… task=… key=value…``
without a shell: the same checks of every job before the first (a bad value raises `ValueError` with
the command line's one sentence), the same jobs, records and run ids (each job runs through
`harness.jobs.job.run_job`, as a Hydra job does), the same collection. A keyword's list value
sweeps, as a comma list does on the command line. What it returns is the results table's rows of
the jobs it ran (a job finished earlier is not run again: its existing rows are returned).

A variant may be a registered name or an `AttentionVariant` subclass defined in the notebook: it
is registered under its ``name`` attribute (or its class name in lower case). Its module has no
source file to fingerprint, so the identity of its jobs carries a digest of the class itself
(`harness.jobs.fingerprint.class_digest`): an edited class makes new jobs, not stale skips.

``attnbench.results(path)`` reads a results folder's table as a DataFrame, collecting first the
records written since it was collected; it never needs to write (a read-only folder of records
is read in memory).

An argument of the wrong type is refused in one sentence before anything is done:
`harness.discovery.ArgumentTypeError`, both a `ValueError` and a `TypeError`.

Presets (``sweep=NAME``) and Hydra's launchers stay the command line's: this runs the jobs one
after another in the calling process.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import threading
import warnings
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from attnbench.harness.discovery import ArgumentTypeError, check_type, shown
from attnbench.harness.jobs.preflight import ConfigError
from attnbench.harness.results.collect import COLUMNS
from attnbench.harness.results.table_file import TableError, load
from attnbench.registry import UnknownNameError

if TYPE_CHECKING:
    from attnbench.harness.results.freshness import FreshTable

_PLAIN = re.compile(r"[A-Za-z0-9_./+-]+")  # a value Hydra's grammar reads as it is written


def _override_value(value: Any) -> str:
    """One Python value as Hydra override text; a list or tuple is a list value (``[16,48]``,
    for a parameter that takes a list: inside the sweep's list, ``[[16, 48]]``)."""
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_override_value(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return repr(value)
    text = str(value)
    if _PLAIN.fullmatch(text):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _override(key: str, value: Any) -> str:
    """``key=value``; a list or tuple sweeps (``key=a,b``), as a comma list does in a shell."""
    if isinstance(value, (list, tuple)):
        if not value:
            raise ValueError(f"{key}=[] sweeps over nothing; give at least one value.")
        return f"{key}=" + ",".join(_override_value(v) for v in value)
    return f"{key}={_override_value(value)}"


def _variant_names(variant: Any) -> list[str]:
    """Registered names for ``variant``: a name, an `AttentionVariant` subclass (registered here
    if it is not yet), or a list of either.

    A class takes the place of one registered under its name only where that one was itself
    defined here (a notebook cell run again): a built-in's or a plugin's name is refused, since
    taking it would swap that variant for the class in every job of the session, under a name
    the board and the records already give to the original.

    Raises:
        ArgumentTypeError: an item is neither (a `ValueError` and a `TypeError`).
        ValueError: a class claims a name with a source file behind it.
    """
    from attnbench.harness.discovery import load_plugins
    from attnbench.variant import VARIANTS, AttentionVariant, register_variant

    load_plugins()  # every built-in and plugin name is taken before a class claims one
    items = list(variant) if isinstance(variant, (list, tuple)) else [variant]
    names = []
    for item in items:
        if isinstance(item, str):
            names.append(item)
        elif isinstance(item, type) and issubclass(item, AttentionVariant):
            name = getattr(item, "name", None) or item.__name__.lower()
            if name in VARIANTS and VARIANTS.get(name) is not item:
                entry = VARIANTS.entry(name)
                if _has_source(entry.obj):
                    raise ValueError(
                        f"variant class {item.__qualname__} is named {name!r}, the name of "
                        f"{entry.origin}'s variant {entry.obj.__module__}."
                        f"{entry.obj.__qualname__}; give the class another name "
                        f'(name = "my_{name}" in its body).'
                    )
                VARIANTS.unregister(name)  # the notebook's class redefined: the new one counts
            if name not in VARIANTS:
                register_variant(name)(item)
            names.append(name)
        else:
            raise ArgumentTypeError(
                f"variant={shown(item)} is neither a registered name nor an AttentionVariant "
                "subclass; give one of them (attnbench-variants lists the names)."
            )
    return names


def _load_plugins_warning_here(stacklevel: int) -> None:
    """Load the plugins; a failed plugin's warning names the line that called the API.

    `load_plugins` warns from inside attnbench's installed code, so a notebook user read a path
    into site-packages and a line of discovery.py before the sentence. The
    warnings are caught and given again at the caller's line (``stacklevel`` as `warnings.warn`
    would take it in the function that calls this); any other warning keeps its own place.
    `attnbench.list_variants` still warns from discovery.py: that module is part of every job's
    code fingerprint, so editing it would mark every reference record as older code.
    """
    from attnbench.harness.discovery import PluginLoadWarning, load_plugins

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_plugins()
    for w in caught:
        if issubclass(w.category, PluginLoadWarning):
            warnings.warn(w.message, stacklevel=stacklevel + 1)
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def _has_source(cls: type) -> bool:
    """Whether another process could import ``cls`` from a source file: not a class of a
    notebook or of a script's ``__main__`` (whose file, even under ``python -m``, is not
    imported as ``__main__`` elsewhere)."""
    from attnbench.harness.jobs.fingerprint import module_file

    return cls.__module__ != "__main__" and module_file(cls.__module__) is not None


def _defined_here(names: list[str]) -> dict[str, type]:
    """The variants among ``names`` whose class has no source file another process could import
    it from (defined in a notebook or a script's ``__main__``)."""
    from attnbench.variant import VARIANTS

    classes = {name: VARIANTS.get(name) for name in names}
    return {n: c for n, c in classes.items() if not _has_source(c)}


class _ClassesByValue:
    """Notebook variant classes on their way to the memory probe. ``multiprocessing`` sends a
    child's start-up arguments by pickling them, which names a class by module and name; a class
    from a notebook or ``__main__`` has no module the child could import, so this wrapper asks
    to be sent by value instead (cloudpickle writes the class's code). Nothing is read from a
    file: the bytes go from this process to the probe it has just started."""

    def __init__(self, classes: dict[str, type]) -> None:
        self.classes = classes

    def __reduce__(self) -> tuple[Any, tuple[bytes]]:
        import cloudpickle

        return cloudpickle.loads, (cloudpickle.dumps(self.classes),)


def _register_in_probe(classes: dict[str, type]) -> None:
    """The memory probe's start (`attnbench.toolkit.memory`) in a run from Python: its own set-up,
    then the caller's notebook variants (sent by value, `_ClassesByValue`), registered by name."""
    from attnbench.toolkit import memory
    from attnbench.variant import VARIANTS, register_variant

    memory._init_probe()
    for name, cls in classes.items():
        if name not in VARIANTS:
            register_variant(name)(cls)


@contextlib.contextmanager
def _probe_knowing(classes: dict[str, type]) -> Iterator[None]:
    """CPU peak memory is measured in a spawned probe process that builds the variant by name
    (`attnbench.toolkit.memory.isolated_cpu_peak`); a class defined in a notebook is registered only
    here. So for the jobs of such a class the probe is started here, with the classes sent by value,
    and without the caller's ``__main__`` (spawn would run a script's top level again in the probe,
    ``attnbench.run`` call included). It is shut down afterwards."""
    if not classes:
        yield
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from attnbench.toolkit import memory

    memory.release_probe()
    with memory.main_script_hidden(), memory._sigint_ignored():
        memory._probe = ProcessPoolExecutor(
            1,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_register_in_probe,
            initargs=(_ClassesByValue(classes),),
        )
        memory._probe.submit(int).result()  # started now, while __main__ is hidden
    try:
        yield
    finally:
        memory.release_probe()


def _jobs(args: Sequence[str]) -> list[list[str]]:
    """The command line ``args`` (with comma sweeps) as one override list per job."""
    from attnbench.harness.jobs.preflight import parse_overrides

    choices = []
    for o in parse_overrides(list(args)):
        if o.is_sweep_override():
            values = list(o.sweep_string_iterator())
            choices.append([f"{o.key_or_group}={v}" for v in values])
        else:
            choices.append([o.input_line])
    return [list(job) for job in itertools.product(*choices)]


# Hydra's configuration state is one per process, and a job's timing assumes the process is
# its own: calls of `run` from several threads take turns instead of failing ("GlobalHydra is
# already initialized") or timing each other's work
_ONE_AT_A_TIME = threading.Lock()


def run(
    variant: Any,
    task: str | Iterable[str] = "throughput",
    *,
    results_dir: str | os.PathLike = "results",
    **overrides: Any,
) -> pd.DataFrame:
    """Run the jobs ``attnbench -m variant=… task=… key=value…`` would run; return their rows.

    Args:
        variant: A registered name, an `AttentionVariant` subclass, or a list of them (a sweep).
        task: A task name, or a list of them.
        results_dir: Where the records and the table go (the command line's ``results_dir``).
        **overrides: Config keys as on the command line: ``seed=0``, ``threads=1``; dotted keys
            through a dict, ``**{"task.seq_len": [256, 512]}`` (a list sweeps; a parameter that
            takes a list gets it inside the sweep's list, ``**{"task.doc_lengths": [[16, 48]]}``).

    Returns:
        The results table's rows of these jobs (`results`), one row per metric point.

    Raises:
        ValueError: a value no job could run with, in the command line's one sentence, before
            any job ran; an argument of the wrong type (``results_dir=None``, ``task=3``) is an
            `ArgumentTypeError`, both a `ValueError` and a `TypeError`.
    """
    from hydra import compose, initialize_config_dir

    from attnbench.harness.jobs.command_line import CONF_DIR, check_command_line
    from attnbench.harness.jobs.config import store_configs
    from attnbench.harness.jobs.job import run_job
    from attnbench.harness.jobs.preflight import check_results_dir, prepare_job

    _load_plugins_warning_here(stacklevel=2)  # as warnings.warn in run: its caller
    if "sweep" in overrides:
        raise ValueError(
            "attnbench.run runs the jobs it is given; run a preset from the shell "
            f"(attnbench -m sweep={overrides['sweep']})."
        )
    if hydra_keys := [k for k in overrides if k.split(".")[0].split("/")[0] == "hydra"]:
        raise ValueError(
            f"{hydra_keys[0]} is a setting of Hydra's command line (its folders, launchers), "
            "which attnbench.run does not start: it runs the jobs here and writes only their "
            "records under results_dir; drop it, or use the attnbench command."
        )
    check_type(
        "attnbench.run",
        "results_dir",
        results_dir,
        (str, os.PathLike),
        "a folder path (a str or a Path)",
        "results_dir='results'",
    )
    try:
        check_results_dir(os.fspath(results_dir))  # as given: "" is not the current folder
    except ConfigError as exc:
        raise ValueError(str(exc)) from None
    names = _variant_names(variant)
    tasks = [task] if isinstance(task, str) else list(task) if isinstance(task, Iterable) else []
    if not tasks or not all(isinstance(t, str) and t for t in tasks):
        raise ArgumentTypeError(
            f"attnbench.run: task must be a task name or a list of them, got {shown(task)}; "
            "e.g. task='recall' (docs/tasks.md lists the tasks)."
        )
    skipped = store_configs()  # a notebook's variant class becomes variant=<name>
    results_dir = os.path.abspath(results_dir)
    args = [
        _override("variant", names),
        _override("task", tasks),
        *(_override(key, value) for key, value in overrides.items()),
        _override("results_dir", results_dir),
    ]
    with _ONE_AT_A_TIME:
        try:
            check_command_line(["-m", *args])
            with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
                configs = [compose("config", overrides=job) for job in _jobs(args)]
            jobs = [prepare_job(cfg) for cfg in configs]  # every job checked before the first
        except (ConfigError, UnknownNameError) as exc:
            raise ValueError(str(exc) + _list_hint(str(exc), overrides)) from None
        del jobs
        for problem in skipped:  # said once, after the check: a refusal naming it says it
            warnings.warn(problem, stacklevel=2)
        with _probe_knowing(_defined_here(names)):
            run_ids = _run_with_progress(configs, run_job)
    table = results(results_dir, every_run=True)
    return table[table["run_id"].isin(run_ids)].reset_index(drop=True)


def _list_hint(message: str, overrides: dict[str, Any]) -> str:
    """Where a refusal says a key swept from a Python list needed a list (each item was given
    alone), how to give the list itself; else ""."""
    for key, value in overrides.items():
        swept = isinstance(value, (list, tuple)) and value
        if not swept or any(isinstance(v, (list, tuple)) for v in value):
            continue
        if message.startswith(f"{key}=") and "ListConfig, list or tuple" in message:
            return (
                f" A list given to attnbench.run sweeps its items; to give {key} the list "
                f"itself, put it inside the sweep's list: **{{{key!r}: [{list(value)!r}]}}."
            )
    return ""


def _run_with_progress(configs: list, run_job: Any) -> list[str]:
    """Run the jobs one after the other behind one progress bar: jobs done of all, jobs failed
    so far, elapsed and time left (a notebook shows it too, with or without ipywidgets)."""
    from attnbench.harness.jobs.records import FAILURES
    from attnbench.toolkit.progress import progress

    run_ids, failed = [], 0
    bar = progress(configs, desc="attnbench.run", unit="job", mininterval=1.0, disable=False)
    for cfg in bar:
        record = run_job(cfg)
        run_ids.append(record.run_id)
        failed += record.status in FAILURES
        if failed:
            bar.set_postfix(failed=failed, refresh=False)
    return run_ids


def results(
    path: str | os.PathLike = "results", *, every_run: bool = False, include_stale: bool = False
) -> pd.DataFrame:
    """The results table of a results folder (or a table file) as a DataFrame, one row per
    metric point (columns: docs/results.md), with the board's two verdicts on each row:
    ``chosen``, a row the board ranks, and ``untrusted``, a value its figures leave out.

    By default only the chosen rows: runs of the installed code (``current``; the board leaves
    older code's runs out, and so does this, with a warning counting them; ``include_stale=True``
    takes them too, as ``attnbench-leaderboard --include-stale`` shows them), and, of a task that
    tunes a parameter (`Tuning`, e.g. the learning rate), the value its validation picked per
    variant and setting (`harness.leaderboard.tuning.select_tuned`). The board's figure for a
    variant in a task's column is then the mean, over settings (``task_params``), of each
    setting's mean over the ok, not derived, not ``untrusted`` rows of the task's headline
    metric: a plain mean where every setting has as many seeds. An ``untrusted`` value (an
    unsteady timing, an inaccurate kernel, a run still learning at its cap:
    `harness.leaderboard.steadiness`) counts only for a variant that has no other.
    ``every_run=True`` returns every row (older code, the values that lost), ``chosen`` marking
    the board's.

    A folder's table is read as the board reads it (`harness.results.freshness.fresh_table`):
    collected again first where records were written since, or where its runs were judged
    against other code than the installed attnbench; where it cannot be (a read-only folder),
    read as it is and judged for the installed code, with the board's line as a warning. Reading
    never needs writing: a read-only folder of records without a table gives the table made from
    them in memory, in one warning. Each record file collection leaves out (an invalid field, a
    newer schema) is named in one warning, as collection names it (`_read_folder`).

    Example (a task's column of the board, ``task`` and its headline ``metric`` named)::

        rows = attnbench.results("results")
        mine = rows[(rows.task == task) & (rows.metric == metric) & (rows.status == "ok")
                    & ~rows.derived & ~rows.untrusted]
        mine.groupby(["variant", "task_params"])["value"].mean().groupby("variant").mean()

    Raises:
        ValueError: no results there, a path too long for the filesystem, or a table that cannot
            be read; one sentence. An argument of the wrong type (``path=None``) is an
            `ArgumentTypeError`, both a `ValueError` and a `TypeError`.
    """
    from attnbench.harness.leaderboard.ranking import count_stale
    from attnbench.harness.results.freshness import FreshnessError

    source = _results_source(path, every_run=every_run, include_stale=include_stale)
    try:
        fresh = _read_folder(source, stacklevel=2) if source.is_dir() else None
        if fresh is not None and (fresh.has_table or fresh.in_memory):
            frame, infos = fresh.frame, fresh.infos
        else:  # a table file, or a folder without one (`load` says why)
            frame, infos = load(source, COLUMNS)[:2]
    except (FreshnessError, TableError) as exc:
        raise ValueError(str(exc)) from None
    frame = _board_verdicts(frame, infos, include_stale)
    if every_run:
        return frame
    if not include_stale and (stale := count_stale(frame)):
        warnings.warn(
            f"attnbench.results: {stale} run(s) of {path} are of older code than the installed "
            "attnbench and left out, as the board leaves them out; include_stale=True returns "
            "them (as attnbench-leaderboard --include-stale shows them).",
            stacklevel=2,
        )
    return frame[frame["chosen"]].reset_index(drop=True)


def _read_folder(folder: Path, stacklevel: int) -> FreshTable:
    """The table of the results folder ``folder`` as `results` reads it: `fresh_table`, made in
    memory where the folder has records but no table and cannot be written (reading never
    needs to write). Its lines are given as warnings at the line that called the API
    (``stacklevel`` as `warnings.warn` would take it in the function that calls this), once the
    read is done: the collection's own (a record file skipped, with its field), the notes, and
    the record files a table read as it is left out (`FreshTable.left_out`), each once.
    """
    from attnbench.harness.results.freshness import fresh_table

    here = stacklevel + 1
    caught: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fresh = fresh_table(folder, "attnbench.results", say=lambda line: None, in_memory=True)
    finally:  # a refusal's warnings too (a record file skipped before collecting failed)
        for w in caught:
            if issubclass(w.category, UserWarning):
                warnings.warn(w.message, stacklevel=here)
            else:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    for line in [*fresh.notes, *fresh.left_out]:
        warnings.warn(line, stacklevel=here)
    return fresh


def _results_source(path: Any, **flags: Any) -> Path:
    """The path `results` reads, its arguments checked first: one sentence for a path of the
    wrong type, one too long for the filesystem (where ``is_dir`` raises ENAMETOOLONG) or
    through a symbolic link that leads back into itself (where it answers False)."""
    from attnbench.harness.jobs.paths import looping_link, too_long
    from attnbench.harness.jobs.records import runs_dir

    who = "attnbench.results"
    wanted = "a results folder or a table file (a str or a Path)"
    check_type(who, "path", path, (str, os.PathLike), wanted, "path='results'")
    for name, value in flags.items():
        check_type(who, name, value, bool, "True or False", f"{name}=True")
    if not os.fspath(path):
        raise ValueError(f"{who}: path is empty; give a results folder, e.g. path='results'.")
    source = Path(path)
    if reason := too_long(runs_dir(source)):
        raise ValueError(
            f"{who}: path is too long for the filesystem ({reason}); give a shorter path."
        )
    if reason := looping_link(source):
        raise ValueError(
            f"{who}: {source} cannot be read ({reason}); fix the link or give "
            "another results folder."
        )
    return source


def _board_verdicts(frame: pd.DataFrame, infos: dict, include_stale: bool) -> pd.DataFrame:
    """``frame`` with the board's verdicts on each row, by the board's own rules: ``chosen``, a
    row the board ranks (`harness.leaderboard.ranking.shown_rows`, then of a tuned task the
    value validation picked: `harness.leaderboard.tuning.select_tuned`), and ``untrusted``
    (`harness.leaderboard.steadiness.judge_steadiness`)."""
    from attnbench.harness.leaderboard.ranking import shown_rows
    from attnbench.harness.leaderboard.steadiness import UNTRUSTED, judge_steadiness
    from attnbench.harness.leaderboard.tuning import select_tuned

    shown = shown_rows(frame, include_stale)
    kept = select_tuned(shown, infos)[0] if not shown.empty else shown
    untrusted = judge_steadiness(frame, infos)[UNTRUSTED].astype(bool)
    return frame.assign(chosen=frame.index.isin(kept.index), untrusted=untrusted)
