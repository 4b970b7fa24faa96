"""harness.jobs.fingerprint: which code a job's identity covers, read from the source files."""

from __future__ import annotations

import hashlib

import pytest

from attnbench.harness.jobs.fingerprint import (
    code_modules,
    combined_digest,
    module_closure,
    module_digest,
    module_file,
)
from attnbench.task import TASKS
from attnbench.variant import VARIANTS

VARIANT_MODULES = {VARIANTS.get(name).__module__ for name in VARIANTS.names()}


@pytest.mark.parametrize("variant", VARIANTS.names())
@pytest.mark.parametrize("task", TASKS.names())
def test_a_job_covers_its_own_modules_and_no_other_variants(variant, task):
    """A change to an unrelated variant's module never re-runs this job; a change to the job's
    own variant or task module always does."""
    own = VARIANTS.get(variant).__module__
    task_module = TASKS.get(task).__module__
    modules = module_closure([own, task_module])
    assert own in modules and task_module in modules
    assert set(modules) & VARIANT_MODULES == {own}


def test_public_api_names_are_followed_to_their_defining_modules():
    modules = module_closure(["attnbench.variants.softmax"])
    assert "attnbench.variant" in modules  # from attnbench import AttentionVariant
    assert "attnbench.registry" in modules  # which variant_api imports
    assert "attnbench.masks" in modules
    assert "attnbench" not in modules  # the API only re-exports
    assert "attnbench.harness.leaderboard.site" not in modules  # not used by a job


def test_relative_imports_and_function_level_imports_of_a_plugin_count(tmp_path, monkeypatch):
    pkg = tmp_path / "fp_plugin"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "variant.py").write_text(
        "from .helpers import gain\n"
        "def forward():\n"
        "    from fp_plugin import lazy\n"
        "    return gain\n"
    )
    (pkg / "helpers.py").write_text(
        "import math\nfrom attnbench.harness import metrics\ngain = 2\n"
    )
    (pkg / "lazy.py").write_text("")
    (pkg / "unused.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert module_closure(["fp_plugin.variant"]) == [
        "attnbench.metrics",
        "fp_plugin.helpers",
        "fp_plugin.lazy",
        "fp_plugin.variant",
    ]
    before = code_modules(["fp_plugin.variant"])
    (pkg / "helpers.py").write_text(
        "import math\nfrom attnbench.harness import metrics\ngain = 3\n"
    )
    after = code_modules(["fp_plugin.variant"])
    assert after["fp_plugin.helpers"] != before["fp_plugin.helpers"]
    assert after["fp_plugin.variant"] == before["fp_plugin.variant"]
    assert combined_digest(after) != combined_digest(before)


def test_digest_is_the_source_sha256_and_none_for_a_missing_module():
    path = module_file("attnbench.metrics")
    assert module_digest("attnbench.metrics") == hashlib.sha256(path.read_bytes()).hexdigest()
    assert module_digest("attnbench.no_such_module") is None
    assert module_digest("no_such_package_anywhere.x") is None


def test_a_cpp_file_beside_a_module_is_part_of_its_digest(tmp_path, monkeypatch):
    """A kernel's C++ (``m.cpp`` beside ``m.py``) counts as the module's code: editing it changes
    the module's digest; a module without one keeps the plain SHA-256 of its bytes."""
    pkg = tmp_path / "fp_kernels"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "m.py").write_text("from fp_kernels import plain\n")
    (pkg / "m.cpp").write_text("int kernel() { return 1; }\n")
    (pkg / "plain.py").write_text("gain = 2\n")
    (pkg / "plain.hpp").write_text("// not a .cpp: not covered\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    py_only = hashlib.sha256((pkg / "m.py").read_bytes()).hexdigest()
    before = code_modules(["fp_kernels.m"])
    assert before["fp_kernels.m"] == module_digest("fp_kernels.m") != py_only
    plain = before["fp_kernels.plain"]
    assert plain == hashlib.sha256((pkg / "plain.py").read_bytes()).hexdigest()

    (pkg / "m.cpp").write_text("int kernel() { return 22; }\n")  # another size: a new stamp
    after = code_modules(["fp_kernels.m"])
    assert after["fp_kernels.m"] != before["fp_kernels.m"]
    assert after["fp_kernels.plain"] == plain
    assert combined_digest(after) != combined_digest(before)
    (pkg / "m.cpp").unlink()
    assert module_digest("fp_kernels.m") == py_only


def test_the_compiled_kernels_digests_cover_their_cpp_files():
    for name in ("attnbench.variants.kernels.tile", "attnbench.variants.kernels.topk"):
        path = module_file(name)
        assert path.with_suffix(".cpp").is_file(), f"{name}: no C++ beside {path}"
        assert module_digest(name) != hashlib.sha256(path.read_bytes()).hexdigest()


def test_combined_digest_ignores_order():
    assert combined_digest({"a": "1", "b": "2"}) == combined_digest({"b": "2", "a": "1"})
    assert combined_digest({"a": "1"}) != combined_digest({"a": "2"})


def test_a_peer_job_depends_on_its_library_version(monkeypatch):
    """A peer's job identity carries its library's installed version: installing the library
    (after its jobs were recorded `unsupported`) or upgrading it makes a new job, and
    collection calls the old records stale."""
    from attnbench.harness.jobs import fingerprint
    from attnbench.harness.jobs.preflight import code_identity
    from attnbench.harness.results.collect import _CodeJudge
    from attnbench.task import build_task

    task = type(build_task("throughput", {})).__module__
    versions = {"flash-attn": "not installed"}
    monkeypatch.setattr(fingerprint, "distribution_version", lambda d: versions.get(d, "0"))
    before, modules = code_identity(task, "peer_flash_softmax")
    assert modules["dist:flash-attn"] == "not installed"
    ours, our_modules = code_identity(task, "softmax")
    assert not [m for m in our_modules if m.startswith("dist:")]  # our own code only

    versions["flash-attn"] = "2.8.3"
    after, _ = code_identity(task, "peer_flash_softmax")
    assert after != before
    assert code_identity(task, "softmax")[0] == ours  # our variants' jobs are unaffected
    assert _CodeJudge({before: modules}).state(before) == "stale"  # measured without 2.8.3


def _sourceless_class(body: str) -> type:
    """A class as a notebook cell Python kept no source for: compiled from a string."""
    from attnbench import AttentionVariant

    scope = {"AttentionVariant": AttentionVariant}
    exec(compile(body, "<cell>", "exec"), scope)
    return scope["Cell"]


def test_class_digest_follows_the_code_of_a_class_without_source():
    from attnbench.harness.jobs.fingerprint import class_digest

    body = "class Cell(AttentionVariant):\n    def forward(self, q, k, v):\n        return {}\n"
    same = [_sourceless_class(body.format(v)) for v in ("q", "q")]
    other_code = _sourceless_class(body.format("k"))
    other_constant = _sourceless_class(body.format("q * 2"))
    nested = (
        "class Cell(AttentionVariant):\n    def forward(self, q, k, v):\n"
        "        f = lambda x: x + {}\n        return f(q)\n"
    )
    assert class_digest(same[0]) == class_digest(same[1])
    assert class_digest(other_code) != class_digest(same[0])
    assert class_digest(other_constant) != class_digest(same[0])
    assert class_digest(_sourceless_class(nested.format(1))) != class_digest(
        _sourceless_class(nested.format(2))
    )


def test_a_peer_record_is_not_stale_where_its_library_is_missing(monkeypatch):
    """A record measured with flash-attn 2.8.3, read where flash-attn is not installed (the
    committed reference board in a checkout without the peers): nothing here says its code
    changed, so it is "unknown" (current unless superseded), as for a missing plugin package.
    Another installed version is a different job: stale."""
    from attnbench.harness.jobs import fingerprint
    from attnbench.harness.jobs.preflight import code_identity
    from attnbench.harness.results.collect import _CodeJudge
    from attnbench.task import build_task

    task = type(build_task("throughput", {})).__module__
    versions = {"flash-attn": "2.8.3"}
    monkeypatch.setattr(fingerprint, "distribution_version", lambda d: versions.get(d, "0"))
    measured, modules = code_identity(task, "peer_flash_softmax")
    assert _CodeJudge({measured: modules}).state(measured) == "current"
    versions["flash-attn"] = "not installed"
    assert _CodeJudge({measured: modules}).state(measured) == "unknown"
    versions["flash-attn"] = "2.8.4"
    assert _CodeJudge({measured: modules}).state(measured) == "stale"
