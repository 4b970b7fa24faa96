"""A fingerprint of the code that produced a measurement: the modules a variant and a task use.

A job's identity must change when the code that determines its numbers changes, and only then.
The git commit is not enough: it misses uncommitted edits, and an installed wheel has none. So a
job's identity carries a digest of the source of the variant's module and the task's module, and
of every project module they import, transitively (`code_modules`); a change to one variant's
module re-runs that module's jobs only, while an edit to shared engine code the modules import
(the variant contract, the training loop) re-runs every job that uses it.

The import graph is read statically (`ast`) from the source files, without importing anything:
collection recomputes the digests of a record's modules to tell whether the record is still
current for the installed code, and the leaderboard's collection must not need torch or the
plugins. "Project" modules are those in the ``attnbench`` package and in the top-level package of
each root module (a plugin's own package); imports inside functions count too (conservative: a
lazily imported helper is still code the job may run). Names imported from the public API
(``from attnbench import X``) are followed to the module that defines them.

A module's digest is the SHA-256 of its ``.py`` file, unless a C++ file of the same stem sits
beside it (``kernels/tile.py`` and ``kernels/tile.cpp``: the source of a kernel the module
compiles): then it covers both (`module_digest`), so an edit to the C++ re-runs every job that uses
the module.

A variant that wraps another project's library (a peer, `AttentionVariant.library`) also depends
on code outside the project: its entry ``dist:<distribution>`` holds the installed version (or
"not installed"), so a job of another release — or one recorded ``unsupported`` before the
library was installed — is a different job, and collection marks it stale once the installed
version differs. Where the library is not installed at all, collection cannot tell (as for a
plugin package that is missing): the record stays current unless a newer one of its job exists.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import types
from collections.abc import Iterable
from pathlib import Path

PROJECT = "attnbench"


@functools.cache
def _package_dirs(top: str) -> tuple[Path, ...]:
    """The folders of top-level package ``top`` (several for a namespace package); () if absent.

    `importlib.util.find_spec` on a top-level name locates it without importing it.
    """
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return ()
    if spec is None:
        return ()
    if spec.submodule_search_locations is not None:
        return tuple(Path(p) for p in spec.submodule_search_locations)
    return (Path(spec.origin).parent,) if spec.origin else ()


def module_file(name: str) -> Path | None:
    """The source file of module ``name`` (``pkg/sub/mod.py`` or ``pkg/sub/__init__.py``), found
    without importing it; None when there is none here."""
    top, *rest = name.split(".")
    for base in _package_dirs(top):
        if not rest:
            candidates = [base / "__init__.py"]
        else:
            stem = base.joinpath(*rest)
            candidates = [stem.with_suffix(".py"), stem / "__init__.py"]
        for path in candidates:
            if path.is_file():
                return path
    if not rest:  # a top-level single-file module
        try:
            spec = importlib.util.find_spec(top)
        except (ImportError, ValueError):
            return None
        if spec is not None and spec.origin and spec.origin.endswith(".py"):
            return Path(spec.origin)
    return None


@functools.cache
def _public_exports() -> dict[str, str]:
    """The public API's name → defining module map (``attnbench._EXPORTS``), read from source."""
    path = module_file(PROJECT)
    if path is None:
        return {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.AnnAssign | ast.Assign):
            targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
            if any(isinstance(t, ast.Name) and t.id == "_EXPORTS" for t in targets):
                return dict(ast.literal_eval(node.value))
    return {}


@functools.cache
def _moved() -> dict[str, str]:
    """Old module path → new one (``attnbench._moved.MOVED``), read from source: an import of a
    0.2 path is followed to the module it forwards to."""
    path = module_file(f"{PROJECT}._moved")
    if path is None:
        return {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "MOVED":
            return dict(ast.literal_eval(node.value))
    return {}


def _stamp(path: Path) -> tuple[str, int, int]:
    stat = path.stat()
    return str(path), stat.st_mtime_ns, stat.st_size


@functools.lru_cache(maxsize=4096)
def _read(stamp: tuple[str, int, int]) -> tuple[bytes, str]:
    """(bytes, SHA-256) of a source file, cached by its path, modification time and size: a
    sweep checks every job's code, and most jobs share most modules. (An edit that keeps the size
    within one tick of the file system's clock would go unseen by this process; a new process,
    which every sweep is, reads the file afresh.)"""
    data = Path(stamp[0]).read_bytes()
    return data, hashlib.sha256(data).hexdigest()


@functools.lru_cache(maxsize=4096)
def _imported(name: str, stamp: tuple[str, int, int], tops: frozenset[str]) -> frozenset[str]:
    """Project modules that module ``name`` (its file at ``stamp``) imports, at any depth of its
    source."""
    source = _read(stamp)[0].decode("utf-8")
    found: set[str] = set()
    is_package = Path(stamp[0]).name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]  # what relative imports start from

    def add(module: str) -> None:
        module = _moved().get(module, module)
        if module.split(".")[0] in tops and module_file(module) is not None:
            found.add(module)

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = importlib.util.resolve_name("." * node.level + base, package)
            for alias in node.names:
                if base == PROJECT:
                    defining = _public_exports().get(alias.name)
                    if defining:
                        add(defining)
                elif module_file(_moved().get(f"{base}.{alias.name}", f"{base}.{alias.name}")):
                    add(f"{base}.{alias.name}")  # a submodule: from pkg import mod
                else:
                    add(base)
    found.discard(PROJECT)  # the public API only re-exports; its names were followed above
    return frozenset(found)


def module_closure(roots: Iterable[str]) -> list[str]:
    """``roots`` and every project module they import, transitively, sorted."""
    roots = list(roots)
    tops = frozenset({PROJECT, *(r.split(".")[0] for r in roots)})
    seen: set[str] = set()
    todo = [r for r in roots if module_file(r) is not None]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        path = module_file(name)
        assert path is not None  # only found modules are queued
        todo.extend(_imported(name, _stamp(path), tops) - seen)
    return sorted(seen)


DISTRIBUTION = "dist:"  # prefix of a library's entry among a job's modules (module docstring)
NOT_INSTALLED = "not installed"  # a library entry's value where the library is missing


def distribution_version(distribution: str) -> str:
    """The installed version of a distribution, or "not installed"."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return NOT_INSTALLED


SIBLING_SOURCES = (".cpp",)  # files beside a module, of its stem, that its digest covers too


def module_digest(name: str) -> str | None:
    """SHA-256 of module ``name``'s source bytes; None when the module is not found here. For a
    library's entry (``dist:<distribution>``), its installed version.

    Where a ``.cpp`` of the module's stem sits beside its file (the C++ of a kernel it builds),
    the SHA-256 of a text that lists the ``.py``'s SHA-256 and, per such file, its name and
    SHA-256; a module without one keeps the plain SHA-256 of its bytes."""
    if name.startswith(DISTRIBUTION):
        return distribution_version(name.removeprefix(DISTRIBUTION))
    path = module_file(name)
    if path is None:
        return None
    digest = _read(_stamp(path))[1]
    siblings = [path.with_suffix(s) for s in SIBLING_SOURCES if path.with_suffix(s).is_file()]
    if not siblings:
        return digest
    lines = [digest, *(f"{p.name} {_read(_stamp(p))[1]}" for p in siblings)]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def combined_digest(modules: dict[str, str]) -> str:
    """One 16-hex-digit digest of a {module: source digest} map (order does not matter)."""
    text = json.dumps(modules, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def code_modules(roots: Iterable[str], libraries: Iterable[str] = ()) -> dict[str, str]:
    """{module: source digest} of ``roots`` and the project modules they use, and
    {``dist:<name>``: installed version} of the outside ``libraries`` they wrap."""
    modules = {DISTRIBUTION + lib: distribution_version(lib) for lib in libraries if lib}
    for name in module_closure(roots):
        digest = module_digest(name)
        if digest is not None:
            modules[name] = digest
    return modules


CLASS = "class:"  # a code_modules entry for a class with no source file: class:<module>.<name>


def class_digest(cls: type) -> str:
    """SHA-256 of a class's code, for a class whose module has no source file here (defined in
    a notebook or a script's ``__main__``), down to the first base class of this project (whose
    modules are fingerprinted as files): its source where Python can find it, else the compiled
    code of its functions; and, either way, the values its functions take from outside their
    text (defaults, closure cells), so that a class made by a factory with another value is
    another class too. Values are taken by ``repr``."""
    import inspect

    parts = []
    for klass in cls.__mro__:
        if klass.__module__.split(".")[0] == PROJECT or klass is object:
            break
        try:
            parts.append(inspect.getsource(klass).encode())
            source = True
        except (OSError, TypeError):
            source = False
        for name, value in sorted(vars(klass).items()):
            function = getattr(value, "__func__", value)
            code = getattr(function, "__code__", None)
            parts.append(name.encode())
            if code is None:
                parts.append(b"" if source else repr(value).encode())
                continue
            if not source:
                parts.append(_code_bytes(code))
            cells = [c.cell_contents for c in function.__closure__ or () if _filled(c)]
            outside = (function.__defaults__, function.__kwdefaults__, cells)
            parts.append(repr(outside).encode())
    return hashlib.sha256(b"\0".join(parts)).hexdigest()


def _code_bytes(code: types.CodeType) -> bytes:
    """A compiled function's identity: its bytecode, the names it uses and its constants, nested
    functions' code included (what ``marshal`` would write, without loading anything back)."""
    consts = [
        _code_bytes(c) if isinstance(c, types.CodeType) else repr(c).encode()
        for c in code.co_consts
    ]
    names = repr((code.co_names, code.co_varnames, code.co_freevars)).encode()
    return b"\1".join([code.co_code, names, *consts])


def _filled(cell: object) -> bool:
    try:
        cell.cell_contents  # noqa: B018 (an empty cell raises)
    except ValueError:
        return False
    return True
