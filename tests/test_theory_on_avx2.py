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
from pathlib import Path

import pytest
import torch

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


@pytest.mark.slow
@pytest.mark.skipif(
    torch.backends.cpu.get_cpu_capability() != "AVX512"
    or os.environ.get("ATEN_CPU_CAPABILITY", "").lower() == "avx2",
    reason="the host has no AVX-512 capability to lower (its own run is already the AVX2 one)",
)
def test_every_theory_claim_holds_on_avx2_kernels_too():
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "avx2"}
    probe = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    capability = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert capability == "AVX2"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            *theory_test_files(numerical_only=True),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
