"""The precision the recurrent mixers compute in: float64 and float32 as given, half precision
widened to float32 (cumulative log-decays in bfloat16 lose a position's decay against the
chunk's sum; the chunks' triangular inverses and conjugate-gradient steps lose more).

One module of its own, not a helper inside one variant's module: a job's code fingerprint
covers the modules its variant imports, so a variant that imported another variant's module
would be re-run by every change to it."""

from __future__ import annotations

import torch

_WIDENED = (torch.float16, torch.bfloat16)


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32 for half-precision inputs, else the input's dtype."""
    return torch.float32 if dtype in _WIDENED else dtype
