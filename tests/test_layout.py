"""The layout's promises (ARCHITECTURE.md): a tree a newcomer can read, contracts defined in the
public package, built-ins that use only what a plugin can use, and the 0.2 import paths still
working for one release."""

from __future__ import annotations

import ast
import importlib
import re
import sys
import warnings
from pathlib import Path

import pytest

import attnbench
from attnbench import _moved

REPO = Path(__file__).resolve().parent.parent
# repository folder → import package (pyproject.toml's package-dir)
PACKAGE_ROOTS = {
    "api": "attnbench",
    "harness": "attnbench.harness",
    "variants": "attnbench.variants",
    "peers": "attnbench.peers",
    "tasks": "attnbench.tasks",
    "conf": "attnbench.conf",
}
MAX_MODULES = 12
BUILT_INS = ("variants", "tasks", "peers")
# what only C++ source holds
CPP_TOKENS = ("#include", "at::", "std::", "torch::Tensor", "__m512", "#pragma")


def looks_like_cpp(text: str) -> bool:
    """C++ source, not prose about it: a C++ token and several statement or block lines."""
    statements = sum(line.rstrip().endswith((";", "{", "}")) for line in text.splitlines())
    return statements >= 5 and any(token in text for token in CPP_TOKENS)


def package_folders() -> list[Path]:
    return [
        folder
        for root in PACKAGE_ROOTS
        for folder in [REPO / root, *(REPO / root).rglob("*")]
        if folder.is_dir() and (folder / "__init__.py").is_file()
    ]


def source_files(*roots: str) -> list[Path]:
    return sorted(p for root in roots for p in (REPO / root).rglob("*.py"))


def module_name(path: Path) -> str:
    rel = path.relative_to(REPO)
    parts = [PACKAGE_ROOTS[rel.parts[0]], *rel.parts[1:]]
    parts[-1] = parts[-1].removesuffix(".py")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(path: Path) -> set[str]:
    """Every attnbench module a file imports, at any depth (lazy imports too), resolved."""
    found = set()
    package = (
        module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    )
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = importlib.util.resolve_name("." * node.level + base, package)
            found.add(base)
    return {name for name in found if name.split(".")[0] == "attnbench"}


def is_public(module: str) -> bool:
    """A module of the public package: `attnbench` itself and its modules outside the engine and
    the built-ins (`attnbench.variant`, `attnbench.toolkit.timing`, …), not private ones."""
    parts = module.split(".")
    return parts[1:2] not in ([p] for p in ("harness", *BUILT_INS, "conf")) and not any(
        part.startswith("_") for part in parts[1:]
    )


def test_no_folder_of_the_package_holds_more_than_twelve_modules():
    folders = package_folders()
    assert len(folders) >= 10
    crowded = {
        str(f.relative_to(REPO)): n
        for f in folders
        if (n := len(list(f.glob("*.py")))) > MAX_MODULES
    }
    assert not crowded


def test_no_python_file_holds_cpp_source():
    for path in source_files(*PACKAGE_ROOTS):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                assert not looks_like_cpp(node.value), f"{path.relative_to(REPO)} holds C++"


def console_script_modules() -> set[str]:
    """The modules the console scripts run: every ``[project.scripts]`` entry starts in
    `attnbench.harness.cli`, which launches the command's module (its ``launch`` calls)."""
    text = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    section = text.split("[project.scripts]", 1)[1].split("\n[", 1)[0]
    entries = set(re.findall(r'^\S+ = "([\w.]+):\w+"', section, flags=re.M))
    assert entries == {"attnbench.harness.cli"}
    launcher = (REPO / "harness" / "cli" / "__init__.py").read_text(encoding="utf-8")
    return set(re.findall(r'launch\("[\w-]+", "([\w.]+)"\)', launcher))


def test_every_console_script_is_a_module_of_the_commands_folder():
    commands = console_script_modules()
    assert {"attnbench.harness.cli.app", "attnbench.harness.cli.speed"} <= commands
    assert all(module.startswith("attnbench.harness.cli.") for module in commands), commands


@pytest.mark.parametrize("folder", BUILT_INS)
def test_built_ins_import_only_the_public_package_and_their_own_folder(folder):
    own = PACKAGE_ROOTS[folder]
    files = source_files(folder)
    assert files
    for path in files:
        outside = {m for m in imported_modules(path) if not is_public(m) and not m.startswith(own)}
        assert not outside, f"{path.relative_to(REPO)} imports {sorted(outside)}"


def test_the_cpp_check_finds_a_kernel_in_a_string_and_not_prose_about_one():
    kernel = (
        "#include <ATen/cpu/vec/vec.h>\n" + "float f(float x) {\n  x += 1;\n  return x;\n}\n" * 2
    )
    assert looks_like_cpp(kernel)
    assert not looks_like_cpp("Compiler flags that build a kernel and at::vec for a capability.")


def test_the_import_rule_catches_an_engine_import(tmp_path):
    """The check above can fail: an engine import and a private public-package module are not
    public."""
    assert not is_public("attnbench.harness.jobs.records")
    assert not is_public("attnbench._moved")
    assert not is_public("attnbench.variants.kernels.tile")
    assert is_public("attnbench.toolkit.timing") and is_public("attnbench")


def test_the_contracts_are_defined_in_the_public_package():
    for name in attnbench.__all__:
        if name == "__version__":
            continue
        value = getattr(attnbench, name)
        defined = getattr(value, "__module__", None)
        if defined is None or not defined.startswith("attnbench"):
            continue
        if name in ("run", "results", "load_plugins", "list_variants", "list_tasks"):
            continue  # the engine's entry points, exported for notebooks: not contracts
        if name in ("build_variant", "build_task"):  # the contract's, with the plugins loaded
            assert getattr(attnbench.variant, name, None) or getattr(attnbench.task, name)
            continue
        assert is_public(defined), f"attnbench.{name} is defined in {defined}"
    assert attnbench.AttentionVariant.__module__ == "attnbench.variant"
    assert attnbench.Task.__module__ == "attnbench.task"


@pytest.mark.parametrize("old", sorted(_moved.MOVED))
def test_a_0_2_import_path_still_works_and_warns_with_the_new_path(old):
    new = _moved.MOVED[old]
    sys.modules.pop(old, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    messages = [str(w.message) for w in caught if w.category is DeprecationWarning]
    assert any(new in m and old in m for m in messages), messages
    target = importlib.import_module(new)
    public = [n for n in dir(target) if not n.startswith("_")]
    assert public
    for name in public:
        assert getattr(module, name) is getattr(target, name)


def test_moved_paths_have_no_file_and_their_targets_do():
    from attnbench.harness.jobs.fingerprint import module_file

    for old, new in _moved.MOVED.items():
        assert module_file(old) is None, old
        assert module_file(new) is not None, new


def version_tuple(text: str) -> tuple[int, ...]:
    """(0, 3, 0) for "0.3.0" (a pre- or dev-release suffix ignored: 0.4.0.dev1 is 0.4's)."""
    return tuple(int(part) for part in re.findall(r"\d+", text.split("+")[0])[:3])


def test_the_old_paths_are_gone_in_the_version_their_warning_names():
    """The shims live until the release their DeprecationWarning names, and not past it: a
    version bump to that release fails here until `_moved.MOVED` is emptied (and docs/migration.md
    says so)."""
    project = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    version = re.search(r'^version = "([^"]+)"', project, flags=re.M).group(1)
    assert version_tuple(_moved.REMOVED_IN) > version_tuple("0.3")
    if version_tuple(version) >= version_tuple(_moved.REMOVED_IN):
        assert not _moved.MOVED, f"attnbench {version} still serves {sorted(_moved.MOVED)}"


def test_the_version_check_would_fail_at_the_removal_release():
    assert version_tuple("0.4.0.dev1") >= version_tuple(_moved.REMOVED_IN)
    assert version_tuple("0.3.9") < version_tuple(_moved.REMOVED_IN)


def test_architecture_is_a_short_map_that_names_every_module():
    text = (REPO / "ARCHITECTURE.md").read_text(encoding="utf-8")
    assert len(text.encode()) <= 12 * 1024
    missing = [
        str(path.relative_to(REPO))
        for path in source_files("api", "harness", "variants", "tasks")
        if path.name != "__init__.py" and path.stem not in text
    ]
    assert not missing, f"ARCHITECTURE.md does not name {missing}"
