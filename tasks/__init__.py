"""Built-in tasks, one per module, declared as entry points of the group ``attnbench.tasks``."""
