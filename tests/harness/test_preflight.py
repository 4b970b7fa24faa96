"""harness.jobs.preflight's job layer: resolving device and dtype (CLI refusals:
test_bad_input.py)."""

from __future__ import annotations

import pytest
import torch

from attnbench.harness.jobs.preflight import ConfigError, resolve_device, resolve_dtype


def test_device_resolution():
    assert resolve_device("cpu").type == "cpu"
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="no CUDA GPU is available; use device=cpu"):
            resolve_device("cuda")


def test_dtype_auto_is_bfloat16_on_cuda_and_float32_on_cpu():
    assert resolve_dtype("auto", torch.device("cuda")) == "bfloat16"
    assert resolve_dtype("auto", torch.device("cpu")) == "float32"
    assert resolve_dtype("float16", torch.device("cpu")) == "float16"
    with pytest.raises(ConfigError, match="dtype='float8' is not valid; use auto, float32"):
        resolve_dtype("float8", torch.device("cpu"))
