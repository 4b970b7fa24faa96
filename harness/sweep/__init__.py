"""A sweep from launch to end: its progress on the console, the stop on Ctrl-C or SIGTERM, how the
command ends (`outcome`), and the collection when it ends (the Hydra callback)."""
