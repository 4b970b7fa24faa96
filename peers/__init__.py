"""Peers: other projects' implementations of our variants, registered as optional variants.

Each module wraps one library (imported lazily, inside the adapter, so every module imports on
every machine) and registers ``peer_<library>_<what>`` variants through the public plugin API.
Install the CPU libraries with ``pip install 'attnbench[peers]'``; the CUDA ones have their own
install commands (docs/peers.md). See `attnbench.peers.availability`.
"""
