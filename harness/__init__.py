"""The engine (installed as ``attnbench.harness``): registries, discovery, the job runner,
records, collection, timing, memory, the shared model and the leaderboard site.

Internal: plugins import the public API from `attnbench` instead. The engine names no task and
no variant; what it needs to know of them, tasks and variants declare (see ARCHITECTURE.md).
"""
