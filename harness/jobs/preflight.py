"""Bad input is refused before any job runs, with one sentence that names the value and the fix.

Three layers, cheapest first:

1. `check_overrides`: the command line against Hydra's override grammar, the registries and the
   typed schemas, without composing anything: syntax (``task.seq_len=[64``), a key given twice
   (``seed=1 seed=2``), a sweep without ``-m`` (``variant=a,b``, ``variant=glob(s*)``), a glob that
   matches nothing, unknown ``variant=``/``task=`` names (with "did you mean"; a name that a
   plugin which failed to load would have provided names that plugin and its error), unknown keys
   (``variant.windw=4``), and values of the wrong type (``task.seq_len=abc``, ``device=gpu``).
   `check_preset` then asks Hydra's config loader whether ``sweep=NAME`` is a preset (an optional
   config group: Hydra itself would silently run the default job).
2. `check_results_dir`: the results directory, read from the composed config (`results_dir_of`,
   so quotes and ``${oc.env:…}`` resolve exactly as in the jobs), is not empty, exists or can be
   made, and takes a file.
3. `prepare_job`: each composed job's values (a seed numpy and torch accept, a thread count this
   process can use, a finite time budget, sizes ≥ 1, heads dividing the width, a device and dtype
   this machine can run). The ``attnbench`` command calls it for a single job before Hydra
   starts, the `grids` sweeper for every job of a sweep before launching the first one, and
   `harness.jobs.job.run_job` for the job it runs — the one check all three share, kept here with
   the other checks so that `harness.jobs.job` only runs jobs.

Resolving ``device=auto`` and ``dtype=auto`` belongs to the third layer: the resolved values are
part of a job's identity (its run_id), and resolving is where an impossible device or dtype is
refused.

Every refusal is a `ConfigError`; the ``attnbench`` command prints it and exits with status 2.
"""

from __future__ import annotations

import dataclasses
import decimal
import difflib
import errno
import functools
import math
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Glob, Override
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

import attnbench.conf
from attnbench.harness.discovery import failed_names, failure_for
from attnbench.harness.jobs.config import AttnbenchConfig, option_schema, params_problem
from attnbench.harness.jobs.env import device_name
from attnbench.harness.jobs.fingerprint import (
    CLASS,
    class_digest,
    code_modules,
    combined_digest,
    module_file,
)
from attnbench.harness.jobs.paths import too_long
from attnbench.harness.jobs.records import make_run_id, records_of
from attnbench.registry import Registry
from attnbench.task import TASKS, Task, build_task
from attnbench.toolkit.timing import usable_cores
from attnbench.variant import (
    VARIANTS,
    UnsupportedError,
    VariantShape,
    build_variant,
)

CONFIG_GROUPS: dict[str, Registry] = {"variant": VARIANTS, "task": TASKS}


@functools.lru_cache(maxsize=1)
def default_choices() -> dict[str, str]:
    """The ``variant`` and ``task`` that conf/config.yaml's defaults list selects.

    Read from the config rather than repeated here: the engine names no variant or task, and the
    checks must agree with what Hydra composes when the command line names none.
    """
    config = OmegaConf.load(Path(attnbench.conf.__file__).parent / "config.yaml")
    choices = {}
    for item in config.get("defaults", []):
        if isinstance(item, DictConfig):
            for group, name in item.items():
                if group in CONFIG_GROUPS:
                    choices[str(group)] = str(name)
    return choices


OTHER_GROUPS = {"sweep", "hydra"}
TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class ConfigError(ValueError):
    """A config that no job can run with; the message says what would be valid."""


def _did_you_mean(value: str, valid: list[str]) -> str:
    close = difflib.get_close_matches(value, valid, n=3, cutoff=0.6)
    return f" Did you mean {' or '.join(close)}?" if close else ""


def unknown_name(registry: Registry, name: str) -> str:
    """The one sentence for a ``name`` that ``registry`` lacks: the plugin that failed to load
    and would have provided it, with its error, where there is one; else "Unknown …, did you
    mean …"."""
    failure = failure_for(registry, name)
    return failure.asked_for(registry.kind) if failure else registry.unknown_message(name)


def check_known(group: str, name: str) -> None:
    """Raise `ConfigError` unless ``name`` is registered in ``group`` (`unknown_name`) with an
    option Hydra can compose (`params_problem`: else Hydra's "Could not find 'variant/…'")."""
    if name not in CONFIG_GROUPS[group]:
        raise ConfigError(unknown_name(CONFIG_GROUPS[group], name))
    problem = params_problem(CONFIG_GROUPS[group], name)
    if problem:
        raise ConfigError(problem)


def _values(override: Override) -> list[Any]:
    """The values an override stands for: one, or each of a choice sweep; [] when unknowable."""
    if not override.is_sweep_override():
        return [override.value()]
    if override.is_choice_sweep() and not isinstance(override.value(), Glob):
        return list(override.sweep_iterator())
    return []  # ranges and globs: Hydra expands them


def _selected(
    group: str, overrides: list[Override], preset: dict[str, list[str]] | None = None
) -> list[str]:
    """Names a group's choice may take in this command: the command line's, else under a sweep
    preset the names its grids select (``preset``, `_preset_choices`; every name where it could
    not be read), else the default."""
    registry = CONFIG_GROUPS[group]
    for o in overrides:
        if o.key_or_group.lstrip("+~") != group:
            continue
        value = o.value()
        if isinstance(value, Glob):
            # the entries Hydra has options for: a glob skips one whose Params make none
            found = value.filter(registry.names())
            matched = [n for n in found if not params_problem(registry, n)]
            failed = value.filter(failed_names(registry))
            if not matched and failed:  # the plugin that would have matched, not "no match"
                raise ConfigError(unknown_name(registry, failed[0]))
            if not matched and found:  # likewise, the entry skipped for its Params
                raise ConfigError(params_problem(registry, found[0]))
            if not matched:
                raise ConfigError(
                    f"{o.input_line} matches no {registry.kind}, and a sweep that matches "
                    f"nothing is an error; {registry.kind}s: {', '.join(registry.names())}."
                )
            return matched
        names = [str(v) for v in _values(o)]
        for name in names:
            check_known(group, name)
        return names
    if any(o.key_or_group.lstrip("+") == "sweep" for o in overrides):
        return registry.names() if preset is None else preset[group]
    return [default_choices()[group]]


def _preset_choices(overrides: list[Override]) -> dict[str, list[str]] | None:
    """The variant and task names the grids of the command line's ``sweep=NAME`` select (a grid
    without one selects the default), read from the preset as Hydra composes it (with the
    command line's ``hydra.searchpath``); None without a preset, or outside an initialised Hydra
    (`hydra.initialize_config_dir`), where it cannot be read.

    The `grids` sweeper applies a ``task.KEY`` of the command line to every grid, so such a key
    must exist in the preset's tasks, and only there: checking it against every registered task
    refused ``sweep=gqa task.seq_len=64`` naming a task gqa does not run.
    """
    from hydra import compose
    from hydra.core.global_hydra import GlobalHydra

    sweep = [o.input_line for o in overrides if o.key_or_group.lstrip("+") == "sweep"]
    if len(sweep) != 1 or not GlobalHydra.instance().is_initialized():
        return None
    searchpath = [o.input_line for o in overrides if o.key_or_group == "hydra.searchpath"]
    try:
        sweeper = compose("config", [*sweep, *searchpath], return_hydra_config=True).hydra.sweeper
    except (HydraException, OmegaConfBaseException):
        return None  # said by check_preset, or by composing the command line
    grids = list(sweeper.grids) if "grids" in sweeper else [sweeper.get("params") or {}]
    parser = OverridesParser.create()
    choices: dict[str, list[str]] = {}
    for group in CONFIG_GROUPS:
        names: list[str] = []
        for grid in grids:
            if grid.get(group) is None:
                found = [default_choices()[group]]
            else:
                found = _selected(group, [parser.parse_override(f"{group}={grid[group]}")])
            names += [n for n in found if n not in names]
        choices[group] = names
    return choices


def _check_value(schema: type, field_name: str, value: Any, label: str) -> None:
    node = OmegaConf.structured(schema)
    try:
        OmegaConf.update(node, field_name, value, merge=False)
    except OmegaConfBaseException as exc:
        reason = str(exc).splitlines()[0].rstrip(".")
        raise ConfigError(f"{label}={value} is not valid: {reason}.") from None
    if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**63:
        # torch's sizes are 64-bit: it would fail with a C++ stack dump, not a sentence
        raise ConfigError(f"{label}={value} is out of range; give a whole number below 2**63.")
    if not _finite(OmegaConf.to_container(node).get(field_name, value)):
        # a record is JSON, which has no inf or nan: the job could not be reproduced from it (a
        # text parameter holds "nan" as text, and its owner names its choices)
        raise ConfigError(
            f"{label}={value} is not finite (a record is JSON, which has no inf or nan); "
            "give finite numbers."
        )


def _finite(value: Any) -> bool:
    """Whether no number in ``value`` (a list or a dict of them, too) is inf or nan."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list | tuple):
        return all(_finite(v) for v in value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    return True


def _check_field(schema: type, key: str, values: list[Any], label: str, owner: str) -> None:
    fields = [f.name for f in dataclasses.fields(schema) if f.name != "name"]
    if key not in fields:
        known = f"Its parameters: {', '.join(fields)}." if fields else "It has no parameters."
        raise ConfigError(
            f"{label} is not a parameter of {owner}.{_did_you_mean(key, fields)} {known}"
        )
    for value in values:
        _check_value(schema, key, value, label)


FLOAT32_TINY, FLOAT32_MAX = decimal.Decimal("1.1754944e-38"), decimal.Decimal("3.4028235e38")
# a number standing alone, not digits inside a word (a name such as ``x1e50`` is no number)
_NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?![\w.])")


def _check_float32(override: Override, label: str) -> None:
    """Refuse a number that float32 cannot hold in a task's or variant's setting: they keep
    their parameters and compute in float32 (and lower), where a magnitude below its smallest
    normal number becomes 0 and one above its largest inf, so the job would fail on a value
    other than the one given (``lambda_min=1e-310`` read as 0). Read from the text as typed, in
    exact decimal arithmetic: a process that has run a job flushes denormal floats to zero, so
    the parsed float may already be 0."""
    text = override.input_line.split("=", 1)[-1]
    for literal in _NUMBER.findall(text):
        number = abs(decimal.Decimal(literal))
        if number != 0 and not FLOAT32_TINY <= number <= FLOAT32_MAX:
            raise ConfigError(
                f"{label}={text} is beyond float32's range, in which parameters are kept; give "
                f"a magnitude from {float(FLOAT32_TINY):.2g} to {float(FLOAT32_MAX):.2g} (or 0, "
                "where the parameter takes it)."
            )


def parse_overrides(args: list[str]) -> list[Override]:
    """The command line's overrides, parsed by Hydra's own grammar; `ConfigError` naming the first
    one that does not parse.

    Parsed one at a time so that the sentence can name the culprit: Hydra's own report of a
    syntax error is several lines about the whole command line.
    """
    _check_words(args)
    parser = OverridesParser.create()
    overrides = []
    for arg in (a for a in args if "=" in a and not a.startswith("-")):
        try:
            overrides.append(parser.parse_override(arg))
        except HydraException as exc:
            reason = str(exc).splitlines()[0].rstrip(".")
            raise ConfigError(
                f"{arg} is not a valid override ({reason}); check its brackets and quotes, "
                "and quote a value with spaces or commas as a whole: key='a b'."
            ) from None
    return overrides


# Hydra's flags that take the next word as their value (``--cfg job``, ``-cn config``)
VALUE_FLAGS = frozenset(
    [
        "--cfg",
        "-c",
        "--package",
        "-p",
        "--config-path",
        "-cp",
        "--config-name",
        "-cn",
        "--config-dir",
        "-cd",
        "--info",
        "-i",
        "--experimental-rerun",
    ]
)


@functools.cache
def _hydra_flags() -> frozenset[str]:
    """The options Hydra's command line takes (``-m``, ``--cfg``, …), read from its parser."""
    from hydra._internal.utils import get_args_parser

    return frozenset(get_args_parser()._option_string_actions)


def _check_words(args: list[str]) -> None:
    """Refuse a word that is neither a flag, a flag's value, nor ``key=value``: a bare word
    (Hydra's grammar error is several lines and exit 1), and ``~key``, which deletes a setting
    every job reads (the job then failed without a record). ``~hydra…`` stays Hydra's. And an
    option between settings (``variant=gla -m task=recall``): Hydra's parser reads the settings
    after it as unknown arguments, with its usage text."""
    settings = [i for i, w in enumerate(args) if "=" in w and not w.startswith("-")]
    for i, word in enumerate(args):
        if word.startswith("-") and settings and settings[0] < i < settings[-1]:
            raise ConfigError(
                f"{word} stands between settings, where Hydra cannot read the settings after "
                f"it; give the options first (attnbench {word} key=value …)."
            )
        if word.startswith("-") and word.split("=", 1)[0] not in _hydra_flags():
            raise ConfigError(
                f"{word} is not an option of attnbench (its own is --strict; Hydra's: -m, "
                "--cfg job|hydra|all, --info, --help, …); give settings as key=value, and see "
                "attnbench --help."
            )
        if word.startswith("-") or "=" in word or (i > 0 and args[i - 1] in VALUE_FLAGS):
            continue
        if word.startswith("~hydra"):
            continue
        if word.startswith("~"):
            key = word[1:]
            raise ConfigError(
                f"{word} deletes {key}, which every job reads; set it instead ({key}=VALUE), or "
                "leave it out for its default."
            )
        raise ConfigError(
            f"{word} is not an override; give key=value (e.g. variant=softmax task=recall), "
            "and see attnbench --help for the flags."
        )


def _check_given_once(overrides: list[Override]) -> None:
    """A key given twice is refused: Hydra would silently keep the last value."""
    first: dict[tuple[str, str | None], Override] = {}
    for o in overrides:
        key = (o.key_or_group, o.package)
        if key in first:
            raise ConfigError(
                f"{o.get_key_element()} is given twice ({first[key].input_line} and "
                f"{o.input_line}); give each key once."
            )
        first[key] = o


def _check_no_sweep(overrides: list[Override]) -> None:
    """Without ``-m`` a sweep value cannot run: say to add ``-m`` instead of Hydra's traceback."""
    for o in overrides:
        if o.is_sweep_override():
            what = "a glob, which sweeps" if isinstance(o.value(), Glob) else "a sweep"
            raise ConfigError(
                f"{o.input_line} is {what}; add -m to run one job per value "
                f"(attnbench -m {o.input_line} …)."
            )


def check_overrides(args: list[str], multirun: bool = True) -> list[Override]:
    """Raise `ConfigError` for the first bad override on the command line (see module doc).

    Args:
        args: the command line (flags are skipped).
        multirun: whether ``-m`` is given; without it a sweep value is refused.

    Returns:
        The parsed overrides, for the checks that follow (`check_preset`, composing).
    """
    overrides = parse_overrides(args)
    _check_given_once(overrides)
    if not multirun:
        _check_no_sweep(overrides)
    preset = _preset_choices(overrides)
    selected = {group: _selected(group, overrides, preset) for group in CONFIG_GROUPS}
    given = {o.key_or_group.lstrip("+~") for o in overrides}
    root_fields = [f.name for f in dataclasses.fields(AttnbenchConfig)]
    for o in overrides:
        key = o.key_or_group.lstrip("+~")
        head, _, rest = key.partition(".")
        if key == "hydra/sweeper" and str(o.value()) != "grids":
            raise ConfigError(
                f"{o.input_line} would run the jobs without attnbench's check of every job before "
                "the first (a bad value would fail at its job, after others ran, with nothing "
                "collected); drop it: the default grids sweeper sweeps a,b lists as basic does."
            )
        if head.split("/")[0] in OTHER_GROUPS:
            continue  # Hydra's own settings (hydra/launcher=…, hydra.launcher.n_jobs=…) and presets
        if head in CONFIG_GROUPS and rest:
            sweep = next((p.input_line for p in overrides if p.key_or_group == "sweep"), None)
            runs = (
                f", which {sweep} runs (narrow it with {head}=NAME)"
                if preset and head not in given and sweep
                else ""
            )
            _check_float32(o, key)
            for name in selected[head]:
                schema = option_schema(name, CONFIG_GROUPS[head].get(name).Params)
                _check_field(schema, rest, _values(o), key, f"{head} {name}{runs}")
        elif head in CONFIG_GROUPS:
            continue
        elif key in root_fields:
            if key == "results_dir" and o.is_sweep_override():
                raise ConfigError(
                    f"{o.input_line} sweeps the results directory, but a sweep collects into "
                    "one; give one results_dir and run a sweep per directory."
                )
            for value in _values(o):
                _check_value(AttnbenchConfig, key, value, key)
        else:
            raise ConfigError(
                f"{key} is not a config key.{_did_you_mean(key, root_fields)} Root keys: "
                f"{', '.join(root_fields)}; variant.<param> and task.<param> set parameters."
            )
    return overrides


def check_preset(overrides: list[Override], loader: Any, multirun: bool = True) -> None:
    """Refuse a ``sweep=NAME`` that names no preset, listing the presets, or that lacks ``-m``.

    ``sweep`` is an optional group in conf/config.yaml (``optional sweep: null``), so Hydra
    silently skips an unknown name and runs the default job; without ``-m`` a preset's grids
    are ignored just as silently. The presets are asked of Hydra's config loader (``loader``:
    `hydra.core.config_loader.ConfigLoader`), with the command line's ``hydra.searchpath``, so
    presets from a search path count too.
    """
    searchpath = [o.input_line for o in overrides if o.key_or_group == "hydra.searchpath"]
    for o in overrides:
        if o.key_or_group.lstrip("+") != "sweep":
            continue
        names = [str(v) for v in _values(o)]
        if len(names) != 1:
            raise ConfigError(f"{o.input_line} names several presets; run one preset at a time.")
        presets = loader.get_group_options("sweep", config_name="config", overrides=searchpath)
        if names[0] not in presets:
            raise ConfigError(
                f"sweep={names[0]} is not a sweep preset.{_did_you_mean(names[0], presets)} "
                f"Presets: {', '.join(presets)}."
            )
        if not multirun:
            raise ConfigError(
                f"{o.input_line} selects a sweep preset; add -m to run it (attnbench -m "
                f"{o.input_line})."
            )


def results_dir_of(cfg: DictConfig) -> str:
    """The ``results_dir`` of a composed config, resolved as the jobs will resolve it.

    Read from the config Hydra composed rather than from the raw command line, so that quotes
    (``results_dir='my results'``) and interpolations (``results_dir=${oc.env:HOME}/r``) give
    the directory the jobs will use, not a literal folder of that text.
    """
    try:
        return str(cfg.results_dir)
    except OmegaConfBaseException as exc:
        reason = str(exc).splitlines()[0]
        raise ConfigError(
            f"results_dir does not resolve ({reason}); give a path, e.g. results_dir=results."
        ) from None


def check_results_dir(path: str | os.PathLike) -> None:
    """Raise `ConfigError` unless records can be written under ``path``.

    Creates nothing: a temporary file is written and removed in the deepest folder of
    ``path/runs`` that exists (the jobs create the rest), so that a command refused later, or
    only checked, leaves no empty folders behind. An empty path is refused: Hydra's run
    directories (``${results_dir}/hydra/…``) would then land at the filesystem root.
    """
    if not str(path).strip():
        raise ConfigError(
            "results_dir is empty; give a directory for the records, e.g. results_dir=results."
        )
    reason = too_long(Path(path) / "runs")
    if reason:
        raise ConfigError(f"results_dir={path} is too long ({reason}); choose a shorter one.")
    if (parent := records_of(path)) is not None:  # its records would land in runs/runs
        raise ConfigError(
            f"results_dir={path} is the run records folder of {parent}; give the results "
            f"folder: results_dir={parent}."
        )
    reason = _unwritable(Path(path) / "runs")
    if reason:
        raise ConfigError(
            f"results_dir={path} is not writable ({reason}); choose another with results_dir=PATH."
        )


def check_tuning_folder() -> None:
    """Raise `ConfigError` where ``ATTNBENCH_TUNING_CACHE`` names a folder the kernel tuning
    files (`attnbench.variants.kernels.autotune`) cannot be written in, such as a file: every
    job would tune its kernels again and warn instead of keeping the machine's choices."""
    from attnbench.variants.kernels.autotune import CACHE_ENV

    folder = os.environ.get(CACHE_ENV)
    if folder and (reason := _unwritable(Path(folder))):
        raise ConfigError(
            f"{CACHE_ENV}={folder} cannot hold the kernel tuning files ({reason}); set it to a "
            f"folder, or unset it for the default."
        )


def _unwritable(folder: Path) -> str | None:
    """Why ``folder`` cannot be created or written in, or None. Creates nothing: a temporary
    file is written and removed in its deepest part that exists."""
    existing = folder.absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    try:
        if not existing.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(existing))
        with tempfile.NamedTemporaryFile(dir=existing, prefix=".write-check-"):
            pass
    except OSError as exc:
        return str(exc.strerror or exc)
    return None


def check_hydra_settings(hydra_cfg: DictConfig, multirun: bool) -> None:
    """Refuse Hydra settings of the command line that would fail after Hydra started, with its
    traceback: an output folder (``hydra.run.dir``, or ``hydra.sweep.dir`` with ``-m``) that is a
    file or cannot be written, and a joblib launcher with ``n_jobs=0`` (no worker)."""
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    try:
        folder = str(OmegaConf.select(hydra_cfg, key.removeprefix("hydra.")))
    except OmegaConfBaseException as exc:
        raise ConfigError(f"{key} does not resolve ({str(exc).splitlines()[0]}).") from None
    reason = too_long(folder) or _unwritable(Path(folder))
    if reason:
        raise ConfigError(
            f"{key}={folder} cannot hold Hydra's output ({reason}); give a writable folder, or "
            f"leave {key} out (its default is under results_dir)."
        )
    launcher = hydra_cfg.get("launcher") or {}
    if multirun and "joblib" in str(launcher.get("_target_", "")) and launcher.get("n_jobs") == 0:
        raise ConfigError(
            "hydra.launcher.n_jobs=0 starts no worker; give the number of jobs to run at once "
            "(2 for two cores), or -1 for one per core."
        )


# --- layer 3: one composed job -------------------------------------------------------------


def resolve_device(choice: str) -> torch.device:
    """``auto`` → CUDA when available, else CPU; ``cuda`` without a GPU is refused."""
    if choice == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if choice == "cuda" and not torch.cuda.is_available():
        raise ConfigError(
            "device=cuda was asked for but no CUDA GPU is available; use device=cpu or device=auto."
        )
    if choice not in ("cpu", "cuda"):
        raise ConfigError(f"device={choice!r} is not valid; use auto, cpu or cuda.")
    return torch.device(choice)


def resolve_dtype(choice: str, device: torch.device) -> str:
    """``auto`` → bfloat16 on CUDA (tensor-core speed), float32 on CPU (what CPU timing uses)."""
    if choice == "auto":
        return "bfloat16" if device.type == "cuda" else "float32"
    if choice not in TORCH_DTYPES:
        raise ConfigError(f"dtype={choice!r} is not valid; use auto, {', '.join(TORCH_DTYPES)}.")
    return choice


def _plain(node: Any) -> Any:
    """A config node as plain Python (enums as their names)."""
    if isinstance(node, DictConfig):
        return OmegaConf.to_container(node, resolve=True, enum_to_str=True)
    return node.value if hasattr(node, "value") else node


# torch's own default, read before any job of this process sets another (``threads=0`` means it)
DEFAULT_THREADS = torch.get_num_threads()


def resolve_threads(choice: int) -> int:
    """``threads=0`` → torch's default thread count for this process; else the count asked for."""
    return int(choice) or DEFAULT_THREADS


def job_identity(cfg: DictConfig) -> dict[str, Any]:
    """What determines a job's measurement, except its code: names, parameters, seed, device,
    dtype, thread count and hardware (`prepare_job` adds the code fingerprint)."""
    variant = _plain(cfg.variant)
    task = _plain(cfg.task)
    device = resolve_device(_plain(cfg.device))
    return {
        "task": task.pop("name"),
        "task_params": task,
        "variant": variant.pop("name"),
        "variant_params": variant,
        "seed": int(cfg.seed),
        "device": str(device),
        "dtype": resolve_dtype(_plain(cfg.dtype), device),
        "threads": resolve_threads(cfg.threads),
        "hardware": device_name(device),
    }


def code_identity(task_module: str, variant_name: str) -> tuple[str, dict[str, str]]:
    """(fingerprint, {module: source digest}) of the code a job runs: the task's and the
    variant's modules and the project modules they use, and the installed version of the
    library a peer variant wraps (`harness.jobs.fingerprint`)."""
    variant = VARIANTS.get(variant_name)
    roots = [task_module, variant.__module__]
    modules = code_modules(roots, libraries=[variant.library])
    if module_file(variant.__module__) is None:  # a notebook's class: no file to fingerprint
        modules[f"{CLASS}{variant.__module__}.{variant.__qualname__}"] = class_digest(variant)
    return combined_digest(modules), modules


SEED_MAX = 2**32 - 1  # numpy's generators take seeds in 0 … 2**32 - 1


def check_settings(cfg: DictConfig) -> None:
    """Refuse root settings no job can honour: ``seed``, ``threads`` and ``timeout_s``.

    A seed outside 0 … 2**32 - 1 is one numpy refuses (and torch would wrap silently); more
    threads than usable cores would oversubscribe the cores and time the scheduler, not the
    variant; a NaN or infinite budget is no budget at all.
    """
    seed = int(cfg.seed)
    if not 0 <= seed <= SEED_MAX:
        raise ConfigError(f"seed={seed} is out of range; use a seed from 0 to {SEED_MAX}.")
    threads, cores = int(cfg.threads), usable_cores()
    if not 0 <= threads <= cores:
        what = "is negative" if threads < 0 else f"is more than the {cores} CPU cores usable here"
        raise ConfigError(
            f"threads={threads} {what}; use threads=0 (torch's default) or 1 to {cores}."
        )
    budget = float(cfg.timeout_s)
    if not (math.isfinite(budget) and budget >= 0):
        raise ConfigError(
            f"timeout_s={budget} is not a time budget; use seconds >= 0 (0 = no budget)."
        )


NOMINAL_SHAPE = VariantShape(n_heads=2, head_dim=16, max_len=64)  # for checking hyperparameters


def check_dtype_runs(dtype: torch.dtype, device: torch.device) -> None:
    """Raise `ConfigError` if ``device`` cannot run attention in ``dtype``."""
    name = str(dtype).removeprefix("torch.")
    if device.type == "cuda" and dtype == torch.bfloat16 and not torch.cuda.is_bf16_supported():
        raise ConfigError(f"dtype={name} is not supported by this GPU; use float16 or float32.")
    try:
        x = torch.ones(1, 1, 4, 8, dtype=dtype, device=device)
        F.scaled_dot_product_attention(x, x, x)
    except RuntimeError as exc:
        reason = str(exc).splitlines()[0]
        raise ConfigError(f"dtype={name} cannot run on {device} ({reason}); use float32.") from None


@dataclass
class PreparedJob:
    """A checked job, ready to run.

    Attributes:
        identity: What determines its measurement (`harness.jobs.records.IDENTITY_FIELDS`); its hash
            is the run_id.
        task: The task, built and checked (None when its constructor raised: see
            ``build_error``).
        code_modules: {module: source digest} of the code it runs; ``identity`` holds their
            combined digest as ``code_fingerprint``.
        task_class: The task's class (its self-description needs no instance).
        build_error: Set when a plugin's constructor raised something other than the
            ValueError or TypeError of a bad value (a bug in the plugin, not in the command
            line): the job is not refused with the whole sweep but recorded `failed` with
            this sentence, naming the plugin.
    """

    identity: dict[str, Any]
    task: Task | None
    code_modules: dict[str, str]
    task_class: type[Task]
    build_error: str | None = None

    @property
    def run_id(self) -> str:
        return make_run_id(self.identity)


def prepare_job(cfg: DictConfig) -> PreparedJob:
    """Validate one composed job and return it with its identity. `ConfigError` for bad values.

    Checks what the schema cannot: the root settings (`check_settings`), the device and dtype
    exist here, the task's sizes and relations (its `Task.check`), and the variant's
    hyperparameters (its constructor).
    """
    check_settings(cfg)
    ident = job_identity(cfg)
    built: dict[str, Any] = {}
    errors = []
    for kind, build in (
        ("task", lambda: build_task(ident["task"], ident["task_params"])),
        (
            "variant",
            lambda: build_variant(ident["variant"], ident["variant_params"], NOMINAL_SHAPE),
        ),
    ):
        try:
            built[kind] = build()
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"{kind} {ident[kind]}: {exc}") from None
        except UnsupportedError:
            if kind != "variant":
                raise
            # a variant unavailable here (library or device missing; its hyperparameter names
            # were checked before it refused): the job runs and is recorded `unsupported`
        except Exception as exc:  # a plugin's bug: this job's failed record, not a refusal
            origin = (TASKS if kind == "task" else VARIANTS).entry(ident[kind]).origin
            reason = (str(exc).splitlines() or [""])[0][:200]
            errors.append(
                f"{kind} {ident[kind]} (from {origin}) raised {type(exc).__name__} when built"
                + (f": {reason}" if reason else "")
            )
    check_dtype_runs(TORCH_DTYPES[ident["dtype"]], torch.device(ident["device"]))
    task_class = TASKS.get(ident["task"])
    ident["code_fingerprint"], modules = code_identity(task_class.__module__, ident["variant"])
    return PreparedJob(ident, built.get("task"), modules, task_class, "; ".join(errors) or None)
