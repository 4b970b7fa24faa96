"""The engines and compiled kernels that the built-in variants share: causal prefix sums, the
banded and block-sparse engines, and the CPU kernels compiled on first use (their C++ in ``.cpp``
files beside the module that loads them). Registers nothing."""
