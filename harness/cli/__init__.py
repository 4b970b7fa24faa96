"""The command-line entry points: one module per console script, and what they share (``--strict``,
Ctrl-C handling). Each parses its arguments, calls the engine and turns bad input into one
sentence and exit status 2."""
