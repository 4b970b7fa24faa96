"""Bad input is refused before any job runs, with one sentence that names the value and the fix.

Three layers, cheapest first:

1. `check_overrides`: the command line against the registries and the typed schemas, without
   composing anything: unknown ``variant=``/``task=`` names (with "did you mean"), unknown keys
   (``variant.windw=4``), and values of the wrong type (``task.seq_len=abc``, ``device=gpu``).
2. `check_results_dir`: the results directory exists or can be made, and takes a file.
3. `harness.run.prepare_job`: each composed job's values (sizes ≥ 1, heads dividing the width,
   a device and dtype this machine can run). The `grids` sweeper calls it for every job of a
   sweep before launching the first one.

Every refusal is a `ConfigError`; the ``attnbench`` command prints it and exits with status 2.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import tempfile
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Glob, Override
from hydra.errors import HydraException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from attnbench.harness.config import AttnbenchConfig, option_schema
from attnbench.harness.registry import Registry
from attnbench.harness.task_api import TASKS
from attnbench.harness.variant_api import VARIANTS

GROUPS: dict[str, Registry] = {"variant": VARIANTS, "task": TASKS}
DEFAULT_CHOICE = {"variant": "softmax", "task": "throughput"}  # conf/config.yaml's defaults
OTHER_GROUPS = {"sweep", "hydra"}


class ConfigError(ValueError):
    """A config that no job can run with; the message says what would be valid."""


def _did_you_mean(value: str, valid: list[str]) -> str:
    close = difflib.get_close_matches(value, valid, n=3, cutoff=0.6)
    return f" Did you mean {' or '.join(close)}?" if close else ""


def _values(override: Override) -> list[Any]:
    """The values an override stands for: one, or each of a choice sweep; [] when unknowable."""
    if not override.is_sweep_override():
        return [override.value()]
    if override.is_choice_sweep() and not isinstance(override.value(), Glob):
        return list(override.sweep_iterator())
    return []  # ranges and globs: Hydra expands them


def _selected(group: str, overrides: list[Override]) -> list[str]:
    """Names a group's choice may take in this command (every name under a sweep preset)."""
    registry = GROUPS[group]
    for o in overrides:
        if o.key_or_group.lstrip("+~") != group:
            continue
        value = o.value()
        if isinstance(value, Glob):
            return value.filter(registry.names())
        names = [str(v) for v in _values(o)]
        for name in names:
            if name not in registry:
                raise ConfigError(registry.unknown_message(name))
        return names
    if any(o.key_or_group == "sweep" for o in overrides):
        return registry.names()  # presets sweep glob(*)
    return [DEFAULT_CHOICE[group]]


def _check_value(schema: type, field_name: str, value: Any, label: str) -> None:
    node = OmegaConf.structured(schema)
    try:
        OmegaConf.update(node, field_name, value, merge=False)
    except OmegaConfBaseException as exc:
        reason = str(exc).splitlines()[0]
        raise ConfigError(f"{label}={value} is not valid: {reason}.") from None


def _check_field(schema: type, key: str, values: list[Any], label: str, owner: str) -> None:
    fields = [f.name for f in dataclasses.fields(schema) if f.name != "name"]
    if key not in fields:
        raise ConfigError(
            f"{label} is not a parameter of {owner}.{_did_you_mean(key, fields)} "
            f"Its parameters: {', '.join(fields)}."
        )
    for value in values:
        _check_value(schema, key, value, label)


def check_overrides(args: list[str]) -> None:
    """Raise `ConfigError` for the first bad override on the command line (see module doc)."""
    candidates = [a for a in args if "=" in a and not a.startswith("-")]
    try:
        overrides = OverridesParser.create().parse_overrides(candidates)
    except HydraException:
        return  # Hydra reports malformed override syntax itself
    selected = {group: _selected(group, overrides) for group in GROUPS}
    root_fields = [f.name for f in dataclasses.fields(AttnbenchConfig)]
    for o in overrides:
        key = o.key_or_group.lstrip("+~")
        head, _, rest = key.partition(".")
        if head.split("/")[0] in OTHER_GROUPS:
            continue  # Hydra's own settings (hydra/launcher=…, hydra.launcher.n_jobs=…) and presets
        if head in GROUPS and rest:
            for name in selected[head]:
                schema = option_schema(name, GROUPS[head].get(name).Params)
                _check_field(schema, rest, _values(o), key, f"{head} {name}")
        elif head in GROUPS:
            continue
        elif key in root_fields:
            for value in _values(o):
                _check_value(AttnbenchConfig, key, value, key)
        else:
            raise ConfigError(
                f"{key} is not a config key.{_did_you_mean(key, root_fields)} Root keys: "
                f"{', '.join(root_fields)}; variant.<param> and task.<param> set parameters."
            )


def results_dir_from(args: list[str]) -> str:
    """The ``results_dir`` a command line asks for (the last one wins, as in Hydra)."""
    given = [a.split("=", 1)[1] for a in args if a.startswith("results_dir=")]
    return given[-1] if given else AttnbenchConfig.results_dir


def check_results_dir(path: str | os.PathLike) -> None:
    """Raise `ConfigError` unless records can be written under ``path`` (created if missing)."""
    runs = Path(path) / "runs"
    try:
        runs.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=runs, prefix=".write-check-"):
            pass
    except OSError as exc:
        raise ConfigError(
            f"results_dir={path} is not writable ({exc.strerror or exc}); "
            "choose another with results_dir=PATH."
        ) from None
