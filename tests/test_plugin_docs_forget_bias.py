"""docs/plugins.md's FoX example (a per-position bias from a forget gate) runs as written: its
incremental form decodes what its causal forward computes, in memory linear in the context, and
the shipped contract suite passes on it.

Each check runs in a process of its own: the example registers the variant "forget_bias", which must
not join the registry of the process running the rest of the suite."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MARKER = "# my_attention/forget_bias.py"

pytestmark = pytest.mark.slow  # processes, and a 32k prefill (about 10 s in all on two cores)

EQUAL = """
import torch
from attnbench import VariantShape, build_variant, incremental_form

torch.manual_seed(0)
B, H, D, N = 2, 2, 16, 150
variant = build_variant("forget_bias", {}, VariantShape(n_heads=H, head_dim=D, max_len=N)).double()
q, k, v = (torch.randn(B, H, N, D, dtype=torch.float64) for _ in range(3))
raw = 2 * torch.randn(B, H, N, 1, dtype=torch.float64)  # forget gates spread over (0, 1)
full = variant(q, k, v, causal=True, gates={"forget": raw})
plain = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
assert not torch.allclose(full, plain, atol=1e-3), "the forget gates change nothing"
assert variant.bias({"forget": raw}, causal=True).shape == (B, H, N, N)

# the default block, and blocks of one query row (a prefill that continues a sequence in blocks)
for block in (ForgettingAttentionIncremental.BLOCK_SCORES, 1):
    ForgettingAttentionIncremental.BLOCK_SCORES = block
    decoder = incremental_form(variant, batch=B, max_len=N, head_dim=D, dtype=torch.float64)
    outs, t = [], 0
    for size in (61, 1, 1, 40, 1, 46):
        part = [x[:, :, t : t + size] for x in (q, k, v, raw)]
        feed = decoder.step if size == 1 else decoder.prefill
        outs.append(feed(*part[:3], {"forget": part[3]}))
        t += size
    assert t == N == decoder.position
    torch.testing.assert_close(torch.cat(outs, dim=2), full, rtol=1e-10, atol=1e-10)
print("ok")
"""

LINEAR = """
import resource
from pathlib import Path

import torch
from attnbench import VariantShape, build_variant, incremental_form
from attnbench.toolkit.memory import peak_memory_mib

B, H, D, STEPS = 1, 1, 16, 4  # one head: the prefill's work is quadratic, its memory is checked


def serve(n):
    # (peak MiB of a prefill of n tokens then STEPS steps, elements of every tensor the decoder
    # holds, the decoder); inputs and the decoder are built before the measured work
    shape = VariantShape(n_heads=H, head_dim=D, max_len=n + STEPS)
    variant = build_variant("forget_bias", {}, shape)
    g = torch.Generator().manual_seed(n)
    q, k, v, raw = (torch.randn(B, H, n + STEPS, w, generator=g) for w in (D, D, D, 1))
    decoder = incremental_form(variant, batch=B, max_len=n + STEPS, head_dim=D)

    def work():
        with torch.no_grad():
            decoder.prefill(q[:, :, :n], k[:, :, :n], v[:, :, :n], {"forget": raw[:, :, :n]})
            for i in range(n, n + STEPS):
                token = [x[:, :, i : i + 1] for x in (q, k, v, raw)]
                decoder.step(*token[:3], {"forget": token[3]})

    peak = peak_memory_mib(work, torch.device("cpu"))
    held = sum(x.numel() for x in vars(decoder).values() if isinstance(x, torch.Tensor))
    assert decoder.position == n + STEPS
    return peak, held, decoder


serve(1024)  # warm: threads, allocator arenas, first-call work
# an n x n float32 tensor at 32k is 4096 MiB: past this limit its allocation fails at once
# instead of pressing on a shared machine's memory
status = Path("/proc/self/status").read_text()
vm = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmSize:")))
resource.setrlimit(resource.RLIMIT_AS, (vm * 1024 + 1536 * 2**20, resource.RLIM_INFINITY))
peak8, held8, d8 = serve(8192)
peak32, held32, d32 = serve(32768)
assert held8 == B * d8.state_size(8192 + STEPS), held8
assert held32 == B * d32.state_size(32768 + STEPS), held32
assert d32.state_size(32768) == 4 * d8.state_size(8192)  # linear in the context
print(f"peak MiB: 8k {peak8}, 32k {peak32}")
if peak8 is not None and peak32 is not None:
    assert peak32 <= 4 * max(peak8, 1.0), (peak8, peak32)  # linear: at most 4x from 8k to 32k
    assert peak32 < 256, peak32  # a 16th of one 32k x 32k float32 tensor
print("ok")
"""


def example() -> str:
    text = (ROOT / "docs" / "plugins.md").read_text(encoding="utf-8")
    match = re.search(r"```python\n(" + re.escape(MARKER) + r".*?)```", text, re.S)
    assert match, f"no python block starting with {MARKER!r} in docs/plugins.md"
    return match.group(1)


def run(tmp_path: Path, code: str, env: dict[str, str] | None = None) -> str:
    script = tmp_path / "check.py"
    script.write_text(example() + "\n" + code, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
        env={**os.environ, **(env or {})},
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert done.stdout.strip().endswith("ok")
    return done.stdout


def test_the_forget_bias_decoder_equals_its_causal_forward(tmp_path):
    """Prefill, steps and a prefill that continues the sequence equal the causal forward over
    the whole sequence, in float64 to 1e-10; with the default block and with one-row blocks."""
    run(tmp_path, EQUAL)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc, limits memory")
def test_the_forget_bias_decoder_holds_memory_linear_in_the_context(tmp_path):
    """A 32k prefill (then steps) holds 4x the state of an 8k one, allocates no n x n tensor
    (the address space allows 1.5 GiB more than before the measurement; one 32k x 32k float32
    tensor is 4 GiB) and its peak resident memory is at most 4x that of 8k (a linear footprint
    grows 4x at most, a quadratic one 16x). The glibc mmap threshold is pinned, as the memory
    probe pins it, so freed blocks leave the process and every peak is read afresh."""
    run(tmp_path, LINEAR, env={"MALLOC_MMAP_THRESHOLD_": "65536"})


CONTRACT = """
from attnbench.testing import VariantContractTests

import forget_bias


class TestForgetBias(VariantContractTests):
    variant = "forget_bias"
"""


def test_the_shipped_contract_suite_passes_on_the_forget_bias_example(tmp_path):
    (tmp_path / "forget_bias.py").write_text(example(), encoding="utf-8")
    (tmp_path / "test_forget_bias.py").write_text(CONTRACT, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_forget_bias.py"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "failed" not in done.stdout
