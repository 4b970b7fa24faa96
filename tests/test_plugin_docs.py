"""The plugin examples in the docs run as written: the README's quickstart variant with the
incremental form of docs/plugins.md, checked against the variant's causal forward."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHECK = """
import torch
from attnbench import VariantShape, build_variant, incremental_form

torch.manual_seed(0)
variant = build_variant("cosine_softmax", {}, VariantShape(n_heads=2, head_dim=8, max_len=12))
variant = variant.double()
q, k, v = (torch.randn(3, 2, 12, 8, dtype=torch.float64) for _ in range(3))
full = variant(q, k, v, causal=True)
decoder = incremental_form(variant, batch=3, max_len=12, head_dim=8, dtype=torch.float64)
parts = [decoder.prefill(q[:, :, :5], k[:, :, :5], v[:, :, :5])]
for t in range(5, 12):
    parts.append(decoder.step(q[:, :, t : t + 1], k[:, :, t : t + 1], v[:, :, t : t + 1]))
torch.testing.assert_close(torch.cat(parts, dim=2), full, rtol=1e-9, atol=1e-9)
assert decoder.position == 12
assert decoder.state_bytes() == decoder.state_size(12) * 8
print("ok")
"""


def python_block(text: str, first_line: str) -> str:
    match = re.search(r"```python\n(" + re.escape(first_line) + r".*?)```", text, re.S)
    assert match, f"no python block starting with {first_line!r}"
    return match.group(1)


def test_the_quickstart_variant_and_its_incremental_form_run_as_written(tmp_path):
    variant = python_block((ROOT / "README.md").read_text(encoding="utf-8"), "# my_attention/")
    form = python_block((ROOT / "docs" / "plugins.md").read_text(encoding="utf-8"), "import torch")
    assert "..." not in form, "the incremental form's example has a gap"
    script = tmp_path / "check.py"
    script.write_text(variant + "\n" + form + "\n" + CHECK, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("ok")


GATED_CHECK = """
import torch
from attnbench import VariantShape, build_variant
from attnbench.toolkit.layer import MultiHeadAttention

variant = build_variant("forget", {}, VariantShape(n_heads=2, head_dim=4, max_len=6))
q, k, v = (torch.randn(1, 2, 6, 4, dtype=torch.float64) for _ in range(3))
alpha = torch.randn(1, 2, 6, 1, dtype=torch.float64)
out = variant(q, k, v, causal=True, gates={"alpha": alpha})
state = torch.zeros(1, 2, 4, 4, dtype=torch.float64)  # the recurrence, written out once more
for t in range(6):
    state = torch.sigmoid(alpha[:, :, t, 0])[..., None, None] * state
    state = state + k[:, :, t, :, None] * v[:, :, t, None, :]
    torch.testing.assert_close(out[:, :, t], (q[:, :, t, None] @ state)[:, :, 0])
layer = MultiHeadAttention(8, 2, "forget", causal=True)
assert set(layer.gate_proj) == {"alpha"}
assert layer(torch.randn(3, 6, 8)).shape == (3, 6, 8)
print("ok")
"""


def test_the_gated_variant_example_runs_as_written(tmp_path):
    """docs/plugins.md's gated variant: its recurrence, and the shared layer feeding its gate."""
    variant = python_block(
        (ROOT / "docs" / "plugins.md").read_text(encoding="utf-8"), "# my_attention/forget"
    )
    script = tmp_path / "check.py"
    script.write_text(variant + "\n" + GATED_CHECK, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("ok")
