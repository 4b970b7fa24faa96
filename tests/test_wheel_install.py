"""The real install: build the wheel, install it into a fresh virtual environment, run it.

The rest of the suite runs against the strict editable install of the checkout, which cannot
notice a file that the wheel leaves out, a wrong ``package-dir`` mapping or a broken console
script. This module builds the wheel, checks what is in it, installs it (not editable, with its
dependencies) into a new virtual environment and drives the installed commands from a
temporary directory outside the checkout, with the checkout on no search path.

How the wheel is built. From a snapshot of the checkout's files (tracked plus untracked but not
ignored, as ``git ls-files`` lists them), not from the checkout itself: setuptools builds through
``build/lib`` in the source tree and packs whatever it finds there, so a file dropped from
``package-data`` stays in a wheel built in place for as long as an earlier build left it
behind. The snapshot has no ``build/``, so the wheel holds exactly what pyproject.toml declares
(and the checkout gets no ``build/`` or ``*.egg-info`` from this test).

How the fresh environment is made. ``python -m venv --without-pip`` (from the test's interpreter,
whose ``venv`` bases the new environment on the base interpreter, not on our venv), then this
venv's pip installs the wheel into it (``pip --python``, non-editable), the dependencies resolved
by pip from the wheel's own metadata, then ``pip check``. Measured on 2 CPU cores with a warm pip
cache: about 55-70 s with pip's default byte-compilation of every installed module (torch alone
has thousands), 15-30 s with ``--no-compile``. That full install fits the budget, so no shortcut
is taken. The shortcut considered, lending this venv's installed packages to the new one through a
``.pth`` line, would leak: ``importlib.metadata`` would see two ``attnbench`` distributions (the
fresh one wins only because ``distributions()`` de-duplicates by name in ``sys.path`` order and
the venv's own site-packages precedes lines appended from a ``.pth``); ``hydra_plugins``, a
namespace package, would merge folders from both venvs, so a sweeper missing from the wheel could
still be found in a non-editable install of ours; only the ``.pth`` files of site directories are
read, so our editable install's ``.pth`` would stay out, but only by that rule; and our dev extras
would mask an undeclared runtime dependency. The remaining choices make the install fast and
deterministic and change nothing it could catch:

* ``--no-compile``: bytecode is written on first import instead, into a temporary
  ``PYTHONPYCACHEPREFIX`` (the first command pays for the modules it imports);
* ``-c constraints``: every dependency is pinned to the version installed in this venv (the one
  the rest of the suite tests, already in the pip cache), so pip downloads nothing new and picks
  the same torch build that the README's command pinned rather than a newer one from PyPI. A
  constraint adds no package: what gets installed is still only what the wheel requires.

The commands then run with the fresh environment's executables, cwd a temporary directory, no
``PYTHON*`` variables inherited (no PYTHONPATH) and no user site-packages. The whole module takes
about 70 s here (2 cores, ~55 s of CPU; longer when the cores are shared).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pytest depends on tomli there
    import tomli as tomllib

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
VERSION = PYPROJECT["project"]["version"]
BUILTIN_VARIANTS = set(PYPROJECT["project"]["entry-points"]["attnbench.variants"])

# Repository folder -> where its files belong in the wheel (the intended layout, stated here on
# its own rather than read back from pyproject.toml, so that a wrong mapping there fails).
MAPPED = {
    "api": "attnbench",
    "harness": "attnbench/harness",
    "variants": "attnbench/variants",
    "peers": "attnbench/peers",
    "tasks": "attnbench/tasks",
    "conf": "attnbench/conf",
    "hydra_plugins": "hydra_plugins",
}
PUBLIC_API = (
    "AttentionVariant, register_variant, VariantShape, Task, register_task, Metric, "
    "MetricPoint, TaskResult, JobContext"
)
FAST = [
    "task=throughput",
    "task.min_run_time=0.01",
    "task.backward=false",
    "task.min_samples=4",
    "task.max_timing_s=1",
]


def _run(cmd: list[str], what: str, timeout: float = 300, **kwargs) -> subprocess.CompletedProcess:
    """Run ``cmd``; fail the test naming ``what`` with the command's output if it fails."""
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kwargs)
    print(f"[wheel-install] {what}: {time.perf_counter() - start:.1f}s")
    assert proc.returncode == 0, (
        f"{what} failed (exit {proc.returncode}): {' '.join(map(str, cmd))}\n"
        f"--- stdout ---\n{proc.stdout[-4000:]}\n--- stderr ---\n{proc.stderr[-4000:]}"
    )
    return proc


def _checkout_files() -> list[str]:
    """The checkout's files as a clean clone would have them (tracked + untracked, not ignored)."""
    out = _run(
        ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        "listing the checkout's files with git",
    ).stdout
    return sorted(p for p in set(out.split("\0")) if p and (REPO / p).is_file())


def _expected_in_wheel(files: list[str]) -> dict[str, str]:
    """Checkout path -> wheel path of every file that must ship."""
    expected = {}
    for path in files:
        top, _, rest = path.partition("/")
        if top not in MAPPED or not rest:
            continue
        ships = (
            path.endswith(".py")
            or (top == "conf" and path.endswith(".yaml"))
            or (path.startswith("harness/leaderboard/") and path.endswith((".j2", ".js", ".css")))
            or (path.startswith("variants/kernels/") and path.endswith(".cpp"))
        )
        if ships:
            expected[path] = f"{MAPPED[top]}/{rest}"
    return expected


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(wheel path, checkout files) for a wheel built from a snapshot of the checkout."""
    root = tmp_path_factory.mktemp("wheel")
    files = _checkout_files()
    src = root / "src"
    for path in files:
        (src / path).parent.mkdir(parents=True, exist_ok=True)
        (src / path).write_bytes((REPO / path).read_bytes())
    try:  # setuptools in this venv (python3.11's venv has it): build without fetching it again
        metadata.version("setuptools")
        isolation = ["--no-build-isolation"]
    except metadata.PackageNotFoundError:  # e.g. Python >= 3.12 venvs: pip fetches setuptools
        isolation = []
    dist = root / "dist"
    cmd = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *isolation, "-w", dist, src]
    _run(cmd, "building the wheel")
    wheels = list(dist.glob("attnbench-*.whl"))
    assert len(wheels) == 1, f"expected one attnbench wheel in {dist}, found {wheels}"
    return wheels[0], files


@pytest.fixture(scope="module")
def fresh(built, tmp_path_factory):
    """A new virtual environment with the wheel installed (not editable) with its dependencies.

    Yields (venv folder, environment for its commands, a working folder outside the checkout).
    """
    wheel, _ = built
    root = tmp_path_factory.mktemp("fresh")
    assert not root.resolve().is_relative_to(REPO), f"{root} lies inside the checkout {REPO}"
    venv = root / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", venv], "creating the fresh venv")
    # Pin every dependency to what this venv has (see the module docstring); not attnbench itself.
    pins: dict[str, str] = {}
    for d in metadata.distributions():  # sys.path order; the first of a name is the one imported
        name = re.sub(r"[-_.]+", "-", d.metadata["Name"] or "").lower()
        if name and name != "attnbench":
            pins.setdefault(name, f"{name}=={d.version}")
    constraints = root / "constraints.txt"
    constraints.write_text("\n".join(sorted(pins.values())) + "\n")
    pip = [sys.executable, "-m", "pip", "--python", venv / "bin" / "python"]
    _run(
        [*pip, "install", "-q", "--no-compile", "-c", constraints, wheel],
        "installing the wheel with its dependencies into the fresh venv",
        timeout=600,
    )
    _run([*pip, "check"], "pip check (the wheel's requirements are satisfied) in the fresh venv")

    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.pop("VIRTUAL_ENV", None)
    env.update(
        PATH=f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        VIRTUAL_ENV=str(venv),
        PYTHONNOUSERSITE="1",
        PYTHONPYCACHEPREFIX=str(root / "pycache"),
        HYDRA_FULL_ERROR="1",
    )
    work = root / "work"
    work.mkdir()
    return venv, env, work


def _cli(fresh, *args: str, what: str) -> subprocess.CompletedProcess:
    """Run one of the fresh venv's executables (by absolute path) from the work folder."""
    venv, env, work = fresh
    return _run([str(venv / "bin" / args[0]), *args[1:]], what, env=env, cwd=work)


def test_wheel_holds_the_package_and_nothing_else(built):
    wheel, files = built
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        top = {n.split("/", 1)[0] for n in names}
        dist_info = {t for t in top if t.endswith(".dist-info")}
        assert dist_info == {f"attnbench-{VERSION}.dist-info"}, f"dist-info folders: {dist_info}"
        assert top - dist_info == {"attnbench", "hydra_plugins"}, (
            f"the wheel's top-level names must be attnbench, hydra_plugins and the dist-info; "
            f"got {sorted(top)}"
        )
        expected = _expected_in_wheel(files)
        assert "attnbench/conf/config.yaml" in expected.values()  # the mapping saw the configs
        assert any(p.endswith(".j2") for p in expected)  # and the leaderboard templates
        assert "attnbench/variants/kernels/tile.cpp" in expected.values()  # and the kernels' C++
        assert "attnbench/variants/kernels/topk.cpp" in expected.values()
        missing = sorted(f"{src} -> {dst}" for src, dst in expected.items() if dst not in names)
        assert not missing, "files of the checkout missing from the wheel:\n" + "\n".join(missing)
        stale = sorted(
            src for src, dst in expected.items() if zf.read(dst) != (REPO / src).read_bytes()
        )
        assert not stale, f"wheel files that differ from the checkout: {stale}"
        entry_points = zf.read(f"attnbench-{VERSION}.dist-info/entry_points.txt").decode()
        for script in PYPROJECT["project"]["scripts"]:
            assert f"{script} = " in entry_points, f"console script {script} not in the wheel"


def test_fresh_install_imports_from_the_venv_only(fresh):
    venv, env, _ = fresh
    probe = f"""
import importlib.metadata as md, importlib.resources as res, json, sys
from attnbench import {PUBLIC_API}
import attnbench, attnbench.harness, hydra_plugins.attnbench_sweeper as sweeper
from attnbench.variants.kernels import tile, topk
dist = md.distribution("attnbench")
print(json.dumps({{
    "sys_path": sys.path,
    "files": [attnbench.__file__, attnbench.harness.__file__, sweeper.__file__,
              str(dist.locate_file("attnbench"))],
    "config": (res.files("attnbench.conf") / "config.yaml").is_file(),
    "kernels": [str(tile.SOURCE), str(topk.SOURCE), tile.SOURCE.is_file(), topk.SOURCE.is_file()],
    "version": md.version("attnbench"),
    "variants": sorted(ep.name for ep in md.entry_points(group="attnbench.variants")),
}}))
"""
    out = json.loads(
        _cli(fresh, "python", "-c", probe, what="importing the public API").stdout.splitlines()[-1]
    )
    inside = [p for p in out["sys_path"] if p and Path(p).resolve().is_relative_to(REPO)]
    assert not inside, f"the checkout is on the fresh interpreter's sys.path: {inside}"
    outside = [f for f in out["files"] if not Path(f).resolve().is_relative_to(venv.resolve())]
    assert not outside, f"imported from outside the fresh venv {venv}: {outside}"
    assert out["config"], "attnbench.conf/config.yaml is not installed (package data missing)"
    *sources, tile_found, topk_found = out["kernels"]
    assert tile_found and topk_found, f"the kernels' C++ is not installed: {sources}"
    assert all(Path(f).resolve().is_relative_to(venv.resolve()) for f in sources), sources
    assert out["version"] == VERSION
    assert set(out["variants"]) == BUILTIN_VARIANTS, out["variants"]

    listing = _cli(fresh, "attnbench-variants", "--json", "--strict", what="attnbench-variants")
    table = json.loads(listing.stdout)
    assert not table["failed_plugins"], f"built-in plugins failed to load: {table}"
    assert {r["name"]: r["origin"] for r in table["variants"]} == dict.fromkeys(
        BUILTIN_VARIANTS, "attnbench"
    ), f"built-ins not listed with origin attnbench: {table['variants']}"


def test_fresh_install_runs_jobs_sweeps_and_the_leaderboard(fresh):
    _, _, work = fresh
    results = work / "results"

    _cli(
        fresh,
        "attnbench",
        "variant=softmax",
        *FAST,
        "task.seq_len=256",
        f"results_dir={results}",
        what="one job (attnbench variant=softmax task=throughput)",
    )
    (record_path,) = (results / "runs").glob("*.json")
    record = json.loads(record_path.read_text())
    assert record["status"] == "ok", record.get("error")
    env = record["env"]
    assert env["code_source"] == "distribution", env
    assert env["git_commit"] is None, env
    assert env["attnbench_version"] == VERSION, env

    # A multirun goes through our `grids` sweeper (the config's default): the Hydra plugin ships.
    _cli(
        fresh,
        "attnbench",
        "-m",
        "variant=softmax,linear",
        *FAST,
        "task.seq_len=64",
        f"results_dir={results}",
        what="a multirun through the grids sweeper",
    )
    records = [json.loads(p.read_text()) for p in (results / "runs").glob("*.json")]
    assert len(records) == 3 and {r["status"] for r in records} == {"ok"}, records
    assert {r["variant"] for r in records if r["task_params"]["seq_len"] == 64} == {
        "softmax",
        "linear",
    }
    (multirun,) = (results / "hydra" / "multiruns").glob("*/multirun.yaml")
    assert "_target_: hydra_plugins.attnbench_sweeper.grids_sweeper.GridsSweeper" in (
        multirun.read_text()
    ), "the multirun did not use the grids sweeper"

    board = _cli(fresh, "attnbench-leaderboard", str(results), what="attnbench-leaderboard")
    index = results / "leaderboard" / "index.html"
    assert board.stdout.strip() == str(index.resolve())
    html = index.read_text()
    assert "softmax" in html and "linear" in html, "the leaderboard lacks the variants run"
