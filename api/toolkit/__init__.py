"""The task author's toolkit (public, stable like `attnbench` itself): what the built-in tasks
use beyond the contracts, so that a plugin task can do everything a built-in does.

- `attnbench.toolkit.timing`: timing a kernel against a reference in alternating rounds, with the
  steadiness verdict that keeps a busy machine's timings off the board;
- `attnbench.toolkit.timed`: what timed tasks share (settings, errors beside a timing);
- `attnbench.toolkit.memory`: peak memory of a call, in a fresh process on the CPU;
- `attnbench.toolkit.layer` and `attnbench.toolkit.model`: the shared multi-head layer around a
  variant and the small sequence model the training tasks use;
- `attnbench.toolkit.training`: the training loop, with divergence reported as a failed job.
"""
