"""Typed configs: the root schema and one ConfigStore option per registered variant and task.

Every registered variant becomes the Hydra option ``variant=<name>`` whose schema is its
hyperparameter dataclass plus a ``name`` field, so a plugin needs no YAML file; tasks likewise
(``task=<name>``). ``conf/config.yaml`` picks the defaults and holds the Hydra settings.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf

from attnbench.registry import Registry
from attnbench.task import TASKS
from attnbench.variant import VARIANTS


class DeviceChoice(str, Enum):
    """Where jobs run: ``auto`` picks CUDA when available, else CPU."""

    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


class DTypeChoice(str, Enum):
    """Floating-point type of the job's tensors: ``auto`` is bfloat16 on CUDA, float32 on CPU."""

    auto = "auto"
    float32 = "float32"
    bfloat16 = "bfloat16"
    float16 = "float16"


@dataclass
class AttnbenchConfig:
    """Root config of one job (``attnbench --cfg job`` prints the resolved one)."""

    variant: Any = MISSING  # variant option: its hyperparameters plus `name`
    task: Any = MISSING  # task option: its parameters plus `name`
    seed: int = 0  # seeds every random draw of the job
    device: DeviceChoice = DeviceChoice.auto  # auto | cpu | cuda
    dtype: DTypeChoice = DTypeChoice.auto  # auto (CUDA bfloat16, CPU float32) | float32 | …
    results_dir: str = "results"  # records go to <results_dir>/runs, the table beside them
    threads: int = 0  # CPU threads for the job and its timers; 0 = torch's default
    overwrite: bool = False  # re-run jobs that already have an `ok` or `unsupported` record
    timeout_s: float = 0.0  # wall-clock budget per job, else recorded as `timeout`; 0 = none


def option_schema(name: str, params_cls: type) -> type:
    """The dataclass stored as a config option: the item's Params plus a ``name`` field."""
    return dataclasses.make_dataclass(
        f"{name}_config",
        [("name", str, field(default=name))],
        bases=(params_cls,),
    )


@functools.cache
def _option_problem(name: str, params_cls: type) -> str:
    """OmegaConf's first line where ``params_cls`` makes no config option, else ""."""
    try:
        OmegaConf.structured(option_schema(name, params_cls))
    except Exception as exc:  # OmegaConf's ValidationError and its kin
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return ""


def params_problem(registry: Registry, name: str) -> str:
    """The sentence saying why the registered ``name`` has no config option (its Params cannot
    be typed: a plugin's default of the wrong type, ``scale: float = "high"``), else "". The
    commands skip such an entry (`_store_group`), refuse a command line that names it, and
    list it as not available."""
    cls = registry.get(name)
    problem = _option_problem(name, cls.Params)
    if not problem:
        return ""
    return (
        f"{registry.kind} {name!r} ({cls.__module__}) is skipped: its Params do not make a "
        f"config ({problem}); give each field a default of its declared type."
    )


def _store_group(cs: ConfigStore, group: str, registry: Registry) -> list[str]:
    """Store each entry's option; one whose Params make no config (`params_problem`) is
    skipped, rather than failing every command whichever variant it names: returns the sentence
    of each skipped one."""
    skipped = []
    for entry in registry.entries():
        problem = params_problem(registry, entry.name)
        if problem:
            skipped.append(problem)
        else:
            cs.store(group=group, name=entry.name, node=option_schema(entry.name, entry.obj.Params))
    return skipped


def store_configs() -> list[str]:
    """Put the root schema and every registered variant and task into Hydra's ConfigStore;
    returns the sentences of the entries skipped (`_store_group`), for the caller to say once:
    as a warning where the run goes on, not before a refusal that names the same entry."""
    cs = ConfigStore.instance()
    cs.store(name="attnbench_schema", node=AttnbenchConfig)
    return _store_group(cs, "variant", VARIANTS) + _store_group(cs, "task", TASKS)
