"""Running jobs: the configuration and its checks, one job (a task × a variant × a setting) and
its record, the code fingerprint and environment in a job's identity, and how a command ends."""
