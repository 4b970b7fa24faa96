"""attnbench's Hydra configs (installed as ``attnbench.conf``): config.yaml and sweep/ presets.

A package so that the configs ship inside the wheel and are found from any working directory.
"""
