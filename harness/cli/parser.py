"""The argument parser every console script uses: a bad flag or value is one sentence.

argparse answers a bad command line with its usage text (two to nine lines) and then the
problem; the project's rule for bad input is one sentence naming the value and the fix, exit
status 2. `--help` still prints the usage in full.
"""

from __future__ import annotations

import argparse
from typing import NoReturn


class OneLineParser(argparse.ArgumentParser):
    """`argparse.ArgumentParser` whose errors are one line: ``prog: problem; see prog --help.``"""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message.rstrip('.')}; see {self.prog} --help.\n")
