"""Typed configs: the root schema and one ConfigStore option per registered variant and task.

Every registered variant becomes the Hydra option ``variant=<name>`` whose schema is its
hyperparameter dataclass plus a ``name`` field, so a plugin needs no YAML file; tasks likewise
(``task=<name>``). ``conf/config.yaml`` picks the defaults and holds the Hydra settings.
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

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


def _store_group(cs: ConfigStore, group: str, registry: Registry) -> None:
    """Store each entry's option; one whose Params OmegaConf cannot type (a plugin's default of
    the wrong type, ``scale: float = "high"``) is skipped with a one-line warning naming it,
    rather than failing every command, whichever variant it names."""
    for entry in registry.entries():
        try:
            cs.store(group=group, name=entry.name, node=option_schema(entry.name, entry.obj.Params))
        except Exception as exc:  # OmegaConf's ValidationError and its kin
            problem = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            warnings.warn(
                f"{registry.kind} {entry.name!r} ({entry.obj.__module__}) is skipped: its Params "
                f"do not make a config ({problem}); give each field a default of its declared "
                "type.",
                stacklevel=2,
            )


def store_configs() -> None:
    """Put the root schema and every registered variant and task into Hydra's ConfigStore."""
    cs = ConfigStore.instance()
    cs.store(name="attnbench_schema", node=AttnbenchConfig)
    _store_group(cs, "variant", VARIANTS)
    _store_group(cs, "task", TASKS)
