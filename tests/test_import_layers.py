"""The import layers (pyproject.toml's ``[tool.importlinter]``, ARCHITECTURE.md): each module of
the package as installed imports only modules of its own layer or below, and no two modules or
folders of one package import each other. import-linter reads the installed package, the same
contracts ``lint-imports`` checks from the command line."""

from __future__ import annotations

from pathlib import Path

import grimp
import pytest
from importlinter import configuration
from importlinter.application import use_cases
from importlinter.application.app_config import settings

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


class _GraphWith:
    """A graph builder that adds ``imports`` (importer, imported) to the real graph."""

    def __init__(self, builder: object, imports: list[tuple[str, str]]) -> None:
        self.builder, self.imports = builder, imports

    def build(self, *args: object, **kwargs: object) -> grimp.ImportGraph:
        graph = self.builder.build(*args, **kwargs)
        for importer, imported in self.imports:
            graph.add_import(importer=importer, imported=imported)
        return graph


def kept(contract: str, extra_imports: list[tuple[str, str]] = ()) -> bool:
    """Whether the package, plus ``extra_imports`` (importer, imported), keeps ``contract``
    (``lint-imports --contract ID``; its report goes to the captured output)."""
    configuration.configure()
    settings.configure(GRAPH_BUILDER=_GraphWith(settings.GRAPH_BUILDER, list(extra_imports)))
    try:
        return use_cases.lint_imports(
            str(PYPROJECT), limit_to_contracts=(contract,), cache_dir=None, no_logo=True
        )
    finally:
        configuration.configure()


def contract_ids() -> list[str]:
    configuration.configure()
    return [c["id"] for c in use_cases.read_user_options(str(PYPROJECT)).contracts_options]


@pytest.mark.parametrize("contract", contract_ids())
def test_the_installed_package_keeps_every_contract(contract):
    assert kept(contract)


def test_the_contracts_are_the_layers_and_the_cycles():
    assert set(contract_ids()) == {"engine", "package", "acyclic"}


@pytest.mark.parametrize(
    "importer, imported, contract",
    [
        # a stage reaching up: the records of a job into the command line
        ("attnbench.harness.jobs.records", "attnbench.harness.cli.app", "engine"),
        # the results stage into the sweep (`FAILURES` lives with the records, below both)
        ("attnbench.harness.results.compare", "attnbench.harness.sweep.outcome", "engine"),
        # a built-in into the engine: a plugin could not do what it does
        ("attnbench.tasks.decode", "attnbench.harness.jobs.job", "package"),
        # a contract of the public package into a built-in
        ("attnbench.variant", "attnbench.variants.softmax", "package"),
        # two folders of the board that import each other
        (
            "attnbench.harness.leaderboard.ranking",
            "attnbench.harness.leaderboard.views.chooser",
            "acyclic",
        ),
    ],
)
def test_a_deliberate_import_against_the_layers_breaks_a_contract(importer, imported, contract):
    assert not kept(contract, [(importer, imported)])


def test_no_job_s_code_reaches_the_engine():
    """A job's identity covers the modules its task and variant import, names from the package
    face followed to the module that defines them (`harness.jobs.fingerprint`): no built-in task,
    variant or peer may reach `attnbench.harness` that way (``from attnbench import
    load_plugins`` did), or an engine change would mark every record of theirs as older code."""
    from importlib import metadata

    from attnbench.harness.jobs.fingerprint import module_closure

    roots = sorted(
        {
            ep.value.split(":")[0]
            for group in ("attnbench.variants", "attnbench.tasks")
            for ep in metadata.entry_points(group=group)
            if ep.value.startswith("attnbench.")
        }
    )
    assert len(roots) > 20
    reached = {
        root: [m for m in module_closure([root]) if m.startswith("attnbench.harness")]
        for root in roots
    }
    assert {root: mods for root, mods in reached.items() if mods} == {}
