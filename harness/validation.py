"""Bad input is refused before any job runs, with one sentence that names the value and the fix.

Three layers, cheapest first:

1. `check_overrides`: the command line against the registries and the typed schemas, without
   composing anything: unknown ``variant=``/``task=`` names (with "did you mean"), unknown keys
   (``variant.windw=4``), and values of the wrong type (``task.seq_len=abc``, ``device=gpu``).
2. `check_results_dir`: the results directory exists or can be made, and takes a file.
3. `prepare_job`: each composed job's values (sizes ≥ 1, heads dividing the width, a device and
   dtype this machine can run). The ``attnbench`` command calls it for a single job before Hydra
   starts, the `grids` sweeper for every job of a sweep before launching the first one, and
   `harness.run.run` for the job it runs — the one check all three share, kept here with the
   other checks so that `harness.run` only runs jobs.

Resolving ``device=auto`` and ``dtype=auto`` belongs to the third layer: the resolved values are
part of a job's identity (its run_id), and resolving is where an impossible device or dtype is
refused.

Every refusal is a `ConfigError`; the ``attnbench`` command prints it and exits with status 2.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import os
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
from attnbench.harness.config import AttnbenchConfig, option_schema
from attnbench.harness.env import device_name
from attnbench.harness.fingerprint import code_modules, combined_digest
from attnbench.harness.records import make_run_id
from attnbench.harness.registry import Registry
from attnbench.harness.task_api import TASKS, Task, build_task
from attnbench.harness.variant_api import VARIANTS, VariantShape, build_variant

GROUPS: dict[str, Registry] = {"variant": VARIANTS, "task": TASKS}


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
                if group in GROUPS:
                    choices[str(group)] = str(name)
    return choices


OTHER_GROUPS = {"sweep", "hydra"}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


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
    return [default_choices()[group]]


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
    if choice not in DTYPES:
        raise ConfigError(f"dtype={choice!r} is not valid; use auto, {', '.join(DTYPES)}.")
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


def code_identity(task: Task, variant_name: str) -> tuple[str, dict[str, str]]:
    """(fingerprint, {module: source digest}) of the code a job runs: the task's and the
    variant's modules and the project modules they use (`harness.fingerprint`)."""
    roots = [type(task).__module__, VARIANTS.get(variant_name).__module__]
    modules = code_modules(roots)
    return combined_digest(modules), modules


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
        identity: What determines its measurement (`harness.records.IDENTITY_FIELDS`); its hash
            is the run_id.
        task: The task, built and checked.
        code_modules: {module: source digest} of the code it runs; ``identity`` holds their
            combined digest as ``code_fingerprint``.
    """

    identity: dict[str, Any]
    task: Task
    code_modules: dict[str, str]

    @property
    def run_id(self) -> str:
        return make_run_id(self.identity)


def prepare_job(cfg: DictConfig) -> PreparedJob:
    """Validate one composed job and return it with its identity. `ConfigError` for bad values.

    Checks what the schema cannot: the device and dtype exist here, the task's sizes and
    relations (its `Task.check`), and the variant's hyperparameters (its constructor).
    """
    ident = job_identity(cfg)
    built = {}
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
    check_dtype_runs(DTYPES[ident["dtype"]], torch.device(ident["device"]))
    ident["code_fingerprint"], modules = code_identity(built["task"], ident["variant"])
    return PreparedJob(ident, built["task"], modules)
