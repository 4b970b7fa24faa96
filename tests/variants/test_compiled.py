"""The build helper of the compiled kernels (`variants.kernels.compiled`): cache names that separate
CPU capabilities and torch versions, ninja found beside the interpreter, and a failed build that
warns once, naming what runs instead."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest
import torch

from attnbench.variants.kernels import compiled, tile, topk


@pytest.fixture(autouse=True)
def _extensions_here(tmp_path, monkeypatch):
    """Build folders under the test's own folder, not torch's cache in the home directory."""
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "extensions"))


def test_extension_names_separate_capabilities_torch_versions_and_installations(monkeypatch):
    avx512 = compiled.extension_name("attnbench_tiles", "AVX512")
    assert avx512 != compiled.extension_name("attnbench_tiles", "AVX2")
    assert avx512.isidentifier()  # torch builds a module of that name
    monkeypatch.setattr(torch, "__version__", "9.9.9+cu999")
    other_version = compiled.extension_name("attnbench_tiles", "AVX512")
    assert other_version != avx512
    # the same torch installed in another environment: another build folder
    monkeypatch.setattr(torch, "__file__", "/elsewhere/site-packages/torch/__init__.py")
    assert compiled.extension_name("attnbench_tiles", "AVX512") not in (avx512, other_version)


def test_capability_flags_name_the_capability():
    """at::vec picks its Vectorized by the CPU_CAPABILITY macros, the compiler the instructions
    by the -m flags: both must name the capability torch dispatches to."""
    avx512, avx2 = compiled.capability_flags("AVX512"), compiled.capability_flags("AVX2")
    assert "-DCPU_CAPABILITY=AVX2" in avx2 and "-DCPU_CAPABILITY_AVX2" in avx2
    assert {"-mavx2", "-mfma"} <= set(avx2) and not any("avx512" in f for f in avx2)
    assert "-DCPU_CAPABILITY=AVX512" in avx512 and "-DCPU_CAPABILITY_AVX512" in avx512
    assert {"-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mfma"} <= set(avx512)
    default = compiled.capability_flags("DEFAULT")
    assert not any(f.startswith("-m") or f.startswith("-DCPU_CAPABILITY_") for f in default)


def test_ninja_beside_the_interpreter_goes_on_the_path(tmp_path, monkeypatch):
    (tmp_path / "ninja").write_text("")
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", "/usr/bin")
    compiled._ninja_on_path()
    assert os.environ["PATH"].split(os.pathsep)[0] == str(tmp_path)
    compiled._ninja_on_path()  # once only
    assert os.environ["PATH"].split(os.pathsep).count(str(tmp_path)) == 1


def test_no_ninja_beside_the_interpreter_leaves_the_path(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "executable", str(Path(tmp_path) / "python"))
    monkeypatch.setenv("PATH", "/usr/bin")
    compiled._ninja_on_path()
    assert os.environ["PATH"] == "/usr/bin"


def test_a_failed_build_warns_naming_the_fallback(monkeypatch):
    import torch.utils.cpp_extension as cpp_extension

    def fail(**_):
        raise RuntimeError("first line\nno compiler here")

    monkeypatch.setattr(cpp_extension, "load", fail)
    with pytest.warns(RuntimeWarning, match="no compiler here.*the slow path runs"):
        assert not compiled.build("attnbench_test", tile.SOURCE, "DEFAULT", "the slow path runs.")


def test_a_missing_source_file_warns_naming_the_fallback(tmp_path):
    with pytest.warns(RuntimeWarning, match="FileNotFoundError.*the slow path runs"):
        assert not compiled.build(
            "attnbench_test", tmp_path / "none.cpp", "DEFAULT", "the slow path runs."
        )


@pytest.mark.parametrize("module", [tile, topk], ids=["tile", "topk"])
def test_each_kernel_builds_the_cpp_file_beside_its_module(module, monkeypatch):
    """The C++ is a file of the package (``tile.py`` -> ``tile.cpp``), the file torch's ``load``
    compiles (not ``load_inline``, whose ``torch/extension.h`` tripled the build's time), under the
    capability's cache name; no Python source holds it."""
    import torch.utils.cpp_extension as cpp_extension

    source = Path(module.__file__).with_name(Path(module.__file__).stem + ".cpp")
    assert source == module.SOURCE and source.is_file()
    assert "TORCH_LIBRARY(" in source.read_text()
    assert "TORCH_LIBRARY(" not in Path(module.__file__).read_text()
    calls = []
    monkeypatch.setattr(cpp_extension, "load", lambda **kw: calls.append(kw))
    assert compiled.build("attnbench_test", module.SOURCE, "AVX2", "unused")
    (call,) = calls
    assert call["sources"] == [str(source)]
    assert call["name"] == compiled.extension_name("attnbench_test", "AVX2")
    assert "-DCPU_CAPABILITY=AVX2" in call["extra_cflags"]


def _folder(stem: str = "attnbench_test") -> Path:
    import torch.utils.cpp_extension as cpp_extension

    name = compiled.extension_name(stem, "DEFAULT")
    return Path(cpp_extension._get_build_directory(name, False))


@pytest.fixture
def torch_build(monkeypatch):
    """``load`` as torch runs it around the compiler: take the build folder's lock file
    (`FileBaton`) and release it when built; a lock it cannot take is waited on, which here is
    recorded instead of hanging. Returns the list of what each call did."""
    import torch.utils.cpp_extension as cpp_extension
    from torch.utils.file_baton import FileBaton

    calls = []

    def load(build_directory, **_):
        baton = FileBaton(os.path.join(build_directory, "lock"))
        if baton.try_acquire():
            baton.release()
            calls.append("built")
        else:
            calls.append("waited")

    monkeypatch.setattr(cpp_extension, "load", load)
    return calls


KILLED_BUILDER = textwrap.dedent(
    """
    import os, time
    import torch.utils.cpp_extension as cpp_extension
    from torch.utils.file_baton import FileBaton
    from attnbench.variants.kernels import compiled

    def load(build_directory, **_):
        FileBaton(os.path.join(build_directory, "lock")).try_acquire()
        print("building", flush=True)
        time.sleep(120)

    cpp_extension.load = load
    compiled.build("attnbench_test", compiled.Path(compiled.__file__), "DEFAULT", "unused")
    """
)


def test_a_build_killed_midway_leaves_a_lock_the_next_build_removes(torch_build):
    """``kill -9`` during the first build left torch's lock file, and every later build waited
    on it forever; the next build finds its builder gone, removes it and builds, warning once."""
    builder = subprocess.Popen(
        [sys.executable, "-c", KILLED_BUILDER], stdout=subprocess.PIPE, text=True
    )
    try:
        assert builder.stdout.readline() == "building\n"
    finally:
        builder.kill()
        builder.wait()
    assert (_folder() / "lock").exists()
    with pytest.warns(
        RuntimeWarning, match=f"lock .* removed \\(its builder, process {builder.pid}"
    ):
        assert compiled.build("attnbench_test", tile.SOURCE, "DEFAULT", "unused")
    assert torch_build == ["built"] and not (_folder() / "lock").exists()
    assert (_folder() / compiled.OWNER_FILE).read_text() == ""  # built: no builder on record
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the next build: nothing to say
        assert compiled.build("attnbench_test", tile.SOURCE, "DEFAULT", "unused")


def _lock(owner: dict | None, age_s: float = 0.0) -> Path:
    folder = _folder()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "lock").touch()
    then = time.time() - age_s
    os.utime(folder / "lock", (then, then))
    (folder / compiled.OWNER_FILE).write_text(json.dumps(owner) if owner else "")
    return folder / "lock"


def test_a_lock_whose_recorded_builder_has_ended_is_removed(torch_build):
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()  # reaped: its id names no process
    host = compiled.socket.gethostname()
    lock = _lock({"host": host, "pid": ended.pid, "start": "1"})
    with pytest.warns(RuntimeWarning, match=f"process {ended.pid}, has ended.*built again"):
        assert compiled.build("attnbench_test", tile.SOURCE, "DEFAULT", "unused")
    assert torch_build == ["built"] and not lock.exists()


def test_a_lock_older_than_any_build_with_no_builder_on_record_is_removed(torch_build):
    lock = _lock(None, age_s=compiled.STALE_LOCK_S + 60)
    with pytest.warns(RuntimeWarning, match="11 minutes old"):
        assert compiled.build("attnbench_test", tile.SOURCE, "DEFAULT", "unused")
    assert torch_build == ["built"] and not lock.exists()


@pytest.mark.parametrize("same_process", [True, False], ids=["its own start", "id reused"])
def test_a_lock_whose_builder_lives_is_waited_on(torch_build, same_process):
    """A live builder is building: its lock stays and torch waits on it, however old it is. An
    id that now names a process started later is not that builder."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        start = compiled._process_start(sleeper.pid)[1]
        owner = {"host": compiled.socket.gethostname(), "pid": sleeper.pid}
        owner["start"] = start if same_process else str(int(start) - 1)
        lock = _lock(owner, age_s=compiled.STALE_LOCK_S + 60)
        if same_process:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                assert compiled.build("attnbench_test", tile.SOURCE, "DEFAULT", "unused")
            assert torch_build == ["waited"] and lock.exists()
        else:
            with pytest.warns(RuntimeWarning, match="has ended"):
                assert compiled.build("attnbench_test", tile.SOURCE, "DEFAULT", "unused")
            assert torch_build == ["built"]
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_recent_lock_with_no_builder_on_record_is_waited_on(torch_build):
    """Another host's build (or one that records no builder) may be running: within
    `STALE_LOCK_S` its lock stays."""
    lock = _lock({"host": "elsewhere", "pid": 1, "start": "1"})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert compiled.build("attnbench_test", tile.SOURCE, "DEFAULT", "unused")
    assert torch_build == ["waited"] and lock.exists()
