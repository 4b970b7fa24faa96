"""The build helper of the compiled kernels (`variants.kernels.compiled`): cache names that separate
CPU capabilities and torch versions, ninja found beside the interpreter, and a failed build that
warns once, naming what runs instead."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

from attnbench.variants.kernels import compiled, tile, topk


def test_extension_names_separate_capabilities_and_torch_versions(monkeypatch):
    avx512 = compiled.extension_name("attnbench_tiles", "AVX512")
    assert avx512 != compiled.extension_name("attnbench_tiles", "AVX2")
    assert avx512.isidentifier()  # torch builds a module of that name
    monkeypatch.setattr(torch, "__version__", "9.9.9+cu999")
    assert compiled.extension_name("attnbench_tiles", "AVX512") not in (avx512,)


def test_capability_flags_name_the_capability():
    assert "-DCPU_CAPABILITY=AVX2" in compiled.capability_flags("AVX2")
    assert "-DCPU_CAPABILITY_AVX512" in compiled.capability_flags("AVX512")
    assert not any(f.startswith("-m") for f in compiled.capability_flags("DEFAULT"))


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

    monkeypatch.setattr(cpp_extension, "load_inline", fail)
    with pytest.warns(RuntimeWarning, match="no compiler here.*the slow path runs"):
        assert not compiled.build("attnbench_test", tile.SOURCE, "DEFAULT", "the slow path runs.")


def test_a_missing_source_file_warns_naming_the_fallback(tmp_path):
    with pytest.warns(RuntimeWarning, match="FileNotFoundError.*the slow path runs"):
        assert not compiled.build(
            "attnbench_test", tmp_path / "none.cpp", "DEFAULT", "the slow path runs."
        )


@pytest.mark.parametrize("module", [tile, topk], ids=["tile", "topk"])
def test_each_kernel_builds_the_cpp_file_beside_its_module(module, monkeypatch):
    """The C++ is a file of the package (``tile.py`` -> ``tile.cpp``), its text what load_inline
    compiles, under the capability's cache name; no Python source holds it."""
    import torch.utils.cpp_extension as cpp_extension

    source = Path(module.__file__).with_name(Path(module.__file__).stem + ".cpp")
    assert source == module.SOURCE and source.is_file()
    assert "TORCH_LIBRARY(" in source.read_text()
    assert "TORCH_LIBRARY(" not in Path(module.__file__).read_text()
    calls = []
    monkeypatch.setattr(cpp_extension, "load_inline", lambda **kw: calls.append(kw))
    assert compiled.build("attnbench_test", module.SOURCE, "AVX2", "unused")
    (call,) = calls
    assert call["cpp_sources"] == [source.read_text()]
    assert call["name"] == compiled.extension_name("attnbench_test", "AVX2")
    assert "-DCPU_CAPABILITY=AVX2" in call["extra_cflags"]
