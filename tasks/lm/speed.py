"""End-to-end speed of the language model: where a mixer's kernel speed-up meets the whole model.

* **Training** (``train_tokens_per_s``): tokens of a batch over the mean wall time of a whole
  optimiser step (forward, backward, clipping, AdamW), as the training loop measured it while
  training (`attnbench.toolkit.training`: evaluations not counted).
* **Mixer share** (`mixer_share`): one training step's forward runs with a forward pre-hook on
  every layer's attention variant (the mixer alone: not its q/k/v/gate projections or output
  map) that keeps the mixer's inputs; each mixer's forward and backward are then timed on
  those inputs (detached copies that require gradients, the backward of a sum of its output),
  and the sum over layers is divided by the time of a whole step at the same batch. Timed in
  isolation, not inside the step, so the hooks cost the step nothing; what it leaves out is the
  overlap a real step might give the mixer (none on a CPU, where both run synchronously).
  Step and mixers alternate over ``repeats`` rounds; the share is the median of the rounds'
  ratios.
* **Generation** (`generate`): greedy decoding of ``new_tokens`` bytes after a prompt of the
  training context, batch 1, through each layer's incremental form
  (`attnbench.incremental_form`, as `attnbench.tasks.decode` drives it: ``prefill`` then
  ``step``); a variant without one generates by running the whole model on the growing sequence
  (``generate_mode`` says which). ``generate_tokens_per_s``: new tokens over the wall time.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch
from torch import nn

from attnbench.incremental import incremental_form
from attnbench.toolkit.model import SequenceModel
from attnbench.variant import UnsupportedError


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(fn, device: torch.device, repeats: int, warm: bool = True) -> float:
    """Median wall time of ``fn()`` in seconds, after one warm-up call (``warm``)."""
    if warm:
        fn()
    times = []
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def mixer_share(
    model: SequenceModel, batch: torch.Tensor, target: torch.Tensor, repeats: int = 3
) -> dict[str, float]:
    """The share of a training step spent in the mixers (module docstring), and the step's and
    the mixers' times in ms. The model's parameters are not changed (no optimiser step: the
    backward is what a step spends in the mixer; the optimiser is counted in the step)."""
    device = batch.device
    captured: list[tuple[nn.Module, tuple, dict]] = []
    mixers = [layer.attention for layer in model.attention_layers()]

    def keep(module, args, kwargs):
        captured.append((module, args, kwargs))

    handles = [m.register_forward_pre_hook(keep, with_kwargs=True) for m in mixers]
    try:
        model.train()
        loss = nn.functional.cross_entropy(model(batch).flatten(0, 1), target.flatten())
    finally:
        for h in handles:
            h.remove()
    del loss
    opt = torch.optim.AdamW(model.parameters(), lr=0.0)  # a step's work, the model unchanged

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        out = model(batch)
        nn.functional.cross_entropy(out.flatten(0, 1), target.flatten()).backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    calls = []
    for module, args, kwargs in captured:
        inputs = [a.detach().clone().requires_grad_(True) for a in args]
        rest = dict(kwargs)
        if rest.get("gates"):
            rest["gates"] = {
                k: g.detach().clone().requires_grad_(True) for k, g in rest["gates"].items()
            }

        def fwd_bwd(module=module, inputs=inputs, rest=rest) -> None:
            module(*inputs, **rest).sum().backward()

        calls.append(fwd_bwd)
    # the step and the mixers timed in alternating rounds, the share taken within each round
    # (a busy machine slows a round as a whole, so its ratio holds where absolute times drift)
    step_s, mixer_s, shares = [], [], []
    for r in range(max(1, repeats)):
        step_s.append(_timed(step, device, 1, warm=(r == 0)))
        mixer_s.append(sum(_timed(call, device, 1, warm=(r == 0)) for call in calls))
        shares.append(mixer_s[-1] / step_s[-1])
    opt.zero_grad(set_to_none=True)
    model.eval()
    return {
        "mixer_share": statistics.median(shares),
        "step_ms": 1000.0 * statistics.median(step_s),
        "mixer_ms": 1000.0 * statistics.median(mixer_s),
    }


class IncrementalModel:
    """The model run one token at a time: each layer's mixer through its incremental form, its
    short convolution on a window of the last kernel − 1 inputs (tested equal to the model's
    forward, tests/tasks/test_lm.py)."""

    def __init__(self, model: SequenceModel, max_len: int, device, dtype) -> None:
        cfg = model.cfg
        if cfg.positions or cfg.token_shift:
            raise UnsupportedError(
                "incremental generation needs a model without positions or token shift"
            )
        self.model = model
        self.decoders = [
            incremental_form(
                layer.attention, 1, max_len, layer.head_dim, layer.head_dim, device, dtype
            )
            for layer in model.attention_layers()
        ]
        # per block: the last kernel − 1 normalised inputs of its short convolution
        self.conv_inputs: list[torch.Tensor | None] = [None] * len(self.decoders)

    def _conv(self, i: int, conv, x: torch.Tensor) -> torch.Tensor:
        """The block's short convolution (`ShortConv`) over the new positions, its window of
        earlier inputs kept."""
        u = conv.norm(x)
        k = conv.conv.kernel_size[0]
        past = self.conv_inputs[i]
        if past is None:
            past = u.new_zeros(u.shape[0], k - 1, u.shape[2])
        window = torch.cat([past, u], dim=1)  # (B, k − 1 + n, d)
        out = nn.functional.conv1d(
            window.transpose(1, 2), conv.conv.weight, conv.conv.bias, groups=u.shape[2]
        ).transpose(1, 2)  # (B, n, d): position t sees its k − 1 predecessors and itself
        self.conv_inputs[i] = window[:, window.shape[1] - (k - 1) :]
        return x + out * conv.proj(u) + u

    def _mix(self, i: int, block, x: torch.Tensor, first: bool) -> torch.Tensor:
        if block.conv is not None:
            x = self._conv(i, block.conv, x)
        layer = block.attn
        h = block.norm1(x)
        q, k, v = layer.split_heads(h)
        gates = layer.project_gates(h) or None
        call = self.decoders[i].prefill if first else self.decoders[i].step
        mixed = call(q, k, v, gates) if gates else call(q, k, v)
        b, heads, n, d = mixed.shape
        x = x + layer.out(mixed.transpose(1, 2).reshape(b, n, heads * d))
        return x + block.mlp(block.norm2(x)) if block.mlp is not None else x

    def logits(self, tokens: torch.Tensor, first: bool) -> torch.Tensor:
        """(1, n, 256) logits of the ``n`` positions fed: the prompt when ``first``, else one new
        token (each position's state carried over from the calls before)."""
        x = self.model.embed(tokens)
        for i, block in enumerate(self.model.blocks):
            x = self._mix(i, block, x, first)
        return self.model.head(self.model.norm(x))


@torch.no_grad()
def generate(
    model: SequenceModel, prompt: torch.Tensor, new_tokens: int
) -> tuple[torch.Tensor, float, str]:
    """Greedy continuation of ``prompt`` (1, n): (the new tokens, tokens per second, mode)."""
    device = prompt.device
    dtype = next(model.parameters()).dtype
    model.eval()
    total = prompt.shape[1] + new_tokens
    try:
        runner: Any = IncrementalModel(model, total, device, dtype)
        mode = "incremental"
    except UnsupportedError:
        runner, mode = None, "recompute"
    out = []
    _sync(device)
    start = time.perf_counter()
    if runner is not None:
        logits = runner.logits(prompt, True)[:, -1]
        for i in range(new_tokens):
            token = logits.argmax(-1, keepdim=True)
            out.append(token)
            if i + 1 < new_tokens:
                logits = runner.logits(token, False)[:, -1]
    else:
        seq = prompt
        for _ in range(new_tokens):
            token = model(seq)[:, -1].argmax(-1, keepdim=True)
            out.append(token)
            seq = torch.cat([seq, token], dim=1)
    _sync(device)
    elapsed = time.perf_counter() - start
    return torch.cat(out, dim=1), new_tokens / elapsed, mode
