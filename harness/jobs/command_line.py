"""The command line checked before Hydra starts: one sentence (`ConfigError`) for bad input.

The ``attnbench`` command and `attnbench.run` both call `check_command_line` before any job runs:
Hydra's grammar, the registries, typed schemas and presets (`harness.jobs.preflight`), symbolic
links that lead back into themselves, and the results folder's writability. A sweep whose fixed
``task.X=v`` overrides only some of its tasks take is rewritten so that Hydra composes it
(`group_keys_per_job`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.types import OverrideType
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

import attnbench.conf
from attnbench.harness.jobs.paths import looping_link
from attnbench.harness.jobs.preflight import (
    CONFIG_GROUPS,
    ConfigError,
    check_hydra_settings,
    check_overrides,
    check_preset,
    check_results_dir,
    check_tuning_folder,
    default_choices,
    parse_overrides,
    prepare_job,
    results_dir_of,
)

# The configs ship inside the package (attnbench.conf), so they are found from any working
# directory, in a checkout and in an installed wheel alike. An absolute path: Hydra would
# otherwise resolve a relative one against the calling module.
CONF_DIR = str(Path(attnbench.conf.__file__).resolve().parent)

MULTIRUN = {"-m", "--multirun"}
# Hydra's modes that print instead of running; Hydra allows only one of them, without -m
PRINT_MODES = {"--cfg", "-c", "--info"}
INFORMATIONAL = PRINT_MODES | {"--help", "-h", "--hydra-help"}


def deferred(overrides: list) -> set[str]:
    """The fixed ``task.X=v`` / ``variant.X=v`` overrides of a sweep that Hydra's base
    composition cannot take: their key is not a parameter of the task (variant) that composition
    uses, the one fixed on the command line or else the config's default.

    Hydra composes a sweep's base config from the fixed overrides before it sweeps, so
    ``-m task=memorization,compression task.steps=5`` was refused there ("Could not override
    'task.steps'": the default task has no steps) though every task of the sweep has it. Such an
    override is left out of the base composition and reaches each job with the job's own task
    (`group_keys_per_job`); every task and variant the sweep runs is still checked for the key
    (`check_overrides`)."""
    base = dict(default_choices())  # a copy: the cached one is shared
    for o in overrides:
        if o.key_or_group in CONFIG_GROUPS and not o.is_sweep_override():
            base[o.key_or_group] = str(o.value())
    out = set()
    for o in overrides:
        head, _, rest = o.key_or_group.partition(".")
        if head not in CONFIG_GROUPS or not rest or o.is_sweep_override():
            continue
        if o.type != OverrideType.CHANGE or base.get(head) not in CONFIG_GROUPS[head]:
            continue
        params = CONFIG_GROUPS[head].get(base[head]).Params
        if rest.split(".")[0] not in {f.name for f in dataclasses.fields(params)}:
            out.add(o.input_line)
    return out


def group_keys_per_job(args: list[str]) -> list[str]:
    """``args`` with each `deferred` override of a sweep written as a one-value sweep,
    ``task.X=choice(v)``: Hydra leaves a sweep override out of the base composition and the
    `grids` sweeper gives it to each job as ``task.X=v``. Called once the command line passed
    `check_command_line`, so that every message quotes what the user typed."""
    if not MULTIRUN & set(args):
        return list(args)
    late = deferred(parse_overrides(args))
    return [f"{a.split('=', 1)[0]}=choice({a.split('=', 1)[1]})" if a in late else a for a in args]


def check_command_line(args: list[str]) -> None:
    """Check a command line before Hydra starts (`harness.jobs.preflight`); `ConfigError` if bad.

    The config is composed once, without the sweep's values, to read ``results_dir`` exactly as
    the jobs will; a single job is checked in full (a sweep's jobs are checked by the `grids`
    sweeper before the first one runs). Runs before Hydra creates its run directory, so a
    refused command leaves nothing behind. ``--strict`` is not Hydra's: `main` takes it off the
    command line (and checks the plugins) before calling this.
    """
    multirun = bool(MULTIRUN & set(args))
    informational = bool(INFORMATIONAL & set(args))
    if multirun and PRINT_MODES & set(args):
        flag = sorted(PRINT_MODES & set(args))[0]
        raise ConfigError(
            f"{flag} prints one job's config and cannot be combined with -m (Hydra refuses it "
            "too); drop -m and give one job's values (attnbench --cfg job task=recall …), or see "
            "a preset's grids with attnbench --cfg hydra sweep=NAME."
        )
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        # the preset first: a misspelt one would otherwise be reported as whatever key of the
        # command line its grids would have given meaning to
        loader = GlobalHydra.instance().config_loader()
        check_preset(parse_overrides(args), loader, multirun or informational)
        overrides = check_overrides(args, multirun=multirun or informational)
        if informational:
            return
        late = deferred(overrides) if multirun else set()
        fixed = [o.input_line for o in overrides if not o.is_sweep_override()]
        fixed = [line for line in fixed if line not in late]
        try:
            cfg = compose("config", overrides=fixed, return_hydra_config=True)
        except (HydraException, OmegaConfBaseException) as exc:
            reason = str(exc).strip().splitlines()[0]
            raise ConfigError(f"the command line does not compose: {reason}") from None
        _check_links(cfg, multirun)
        check_results_dir(results_dir_of(cfg))
        check_tuning_folder()
        check_hydra_settings(cfg.hydra, multirun)
        with open_dict(cfg):
            del cfg["hydra"]  # a job's config, as Hydra hands it to the job
        if not multirun:
            prepare_job(cfg)


def _check_links(cfg: DictConfig, multirun: bool) -> None:
    """Raise `ConfigError` where ``results_dir`` (its ``runs/`` included) or Hydra's output folder
    is reached through a symbolic link that leads back into itself: the writability checks would
    call such a path missing and pass it, and Hydra's ``mkdir`` would raise ELOOP."""
    folder = Path(results_dir_of(cfg))
    if reason := looping_link(folder / "runs"):
        raise ConfigError(
            f"results_dir={folder} cannot be reached ({reason}); fix the link or choose another "
            "with results_dir=PATH."
        )
    key = "sweep.dir" if multirun else "run.dir"
    try:
        output = str(OmegaConf.select(cfg.hydra, key))
    except OmegaConfBaseException:
        return  # said by check_hydra_settings
    if reason := looping_link(output):
        raise ConfigError(
            f"hydra.{key}={output} cannot be reached ({reason}); fix the link, or leave "
            f"hydra.{key} out (its default is under results_dir)."
        )
