"""The theory tests once more on AVX2 kernels, where the host has AVX-512.

CI runs on whatever host a session gets, and a claim that holds on one vector ISA's rounding and
not on another's is a flaky claim, not a property of attention (an AVX2 host once failed the
attention-system test that passed on AVX-512). `ATEN_CPU_CAPABILITY=avx2` lowers torch's
dispatch on an AVX-512 host, so a suite run there checks both. The files are the ones
docs/theory-tests.md names, so a new claim's test joins this run by being listed there.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch
from conftest import ONE_THREAD

REPO = Path(__file__).resolve().parent.parent


def theory_test_files(numerical_only: bool = False) -> list[str]:
    """The test files docs/theory-tests.md names; ``numerical_only``: those of the claims that
    are numbers (§1–§4, §6, §7), leaving out §5's structural ones (a pattern skips its work,
    never builds N×N), which hold by construction on every ISA and whose kernels are rerun
    under every capability by tests/variants/test_kernel_capabilities.py."""
    text = (REPO / "docs" / "theory-tests.md").read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if line.startswith("| [§")]
    if numerical_only:
        rows = [line for line in rows if not line.startswith("| [§5]")]
    return sorted(set(re.findall(r"tests/[\w/]+\.py", "\n".join(rows))))


def test_the_theory_page_names_test_files_that_exist():
    files = theory_test_files()
    assert len(files) >= 5
    for name in files:
        assert (REPO / name).is_file(), f"docs/theory-tests.md names {name}, which does not exist"


def applies() -> bool:
    """Whether this host has an AVX-512 capability to lower (else its own run is the AVX2 one)."""
    return (
        torch.backends.cpu.get_cpu_capability() == "AVX512"
        and os.environ.get("ATEN_CPU_CAPABILITY", "").lower() != "avx2"
    )


_RUN: dict[str, object] = {}  # the rerun started when the session's tests were collected


def start() -> None:
    """Start the rerun in the background (tests/conftest.py does, once the session's tests are
    collected and this one is among them), beside the suite's workers: about 250 s of one core
    on the developers' 2-core host (its ICL thousand-point test 91 s), which the two workers
    share with it, so the test waiting for it holds a worker about that long. Its output goes to
    a file, which no pipe's buffer can block."""
    if "process" in _RUN or not applies():
        return
    out = tempfile.NamedTemporaryFile("w+", prefix="attnbench-avx2-", suffix=".log")  # noqa: SIM115 (closed by stop)
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "avx2", ONE_THREAD: "1"}  # beside two workers
    files = theory_test_files(numerical_only=True)
    command = [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", *files]
    _RUN["out"] = out
    _RUN["process"] = subprocess.Popen(
        command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, text=True
    )


def stop() -> None:
    """End a rerun that no test waited for (the session stopped early)."""
    process = _RUN.pop("process", None)
    if process is not None and process.poll() is None:
        process.kill()
        process.wait()
    out = _RUN.pop("out", None)
    if out is not None:
        out.close()


@pytest.mark.slow
@pytest.mark.skipif(
    not applies(),
    reason="the host has no AVX-512 capability to lower (its own run is already the AVX2 one)",
)
def test_every_theory_claim_holds_on_avx2_kernels_too():
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "avx2"}
    probe = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    capability = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert capability == "AVX2"
    start()  # started at collection where conftest's hook ran; here otherwise
    process, out = _RUN["process"], _RUN["out"]
    returncode = process.wait()
    out.seek(0)
    text = out.read()
    stop()
    assert returncode == 0, text[-6000:]
