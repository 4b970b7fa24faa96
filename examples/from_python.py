"""attnbench from Python (a notebook or a script): reproduce one cell of the reference board.

    python examples/from_python.py [RESULTS_DIR]

It reruns one job of `sweep=standard` (softmax on the decode task at a context of 1024 tokens,
one thread) with `attnbench.run`, reads the committed reference board with `attnbench.results`,
and prints both values of the state one sequence holds while decoding (`state_bytes`, the KV
cache) and of the time per generated token over one bare SDPA call (`decode_ratio`). The job has
the same identity as on the command line. The state is exact on any machine; the ratio is a
timing, so it agrees only roughly, and only on a quiet machine.
"""

import sys
from pathlib import Path

import attnbench

REFERENCE = Path(__file__).resolve().parent.parent / "results" / "reference"
JOB = {"threads": 1, "seed": 0, "task.seq_len": 1024, "task.min_run_time": 0.1}

results_dir = sys.argv[1] if sys.argv[1:] else "results"
mine = attnbench.run("softmax", "decode", results_dir=results_dir, **JOB)
# every run, history included: until the reference is regenerated its runs are of older code,
# and the state a KV cache holds does not depend on which
board = attnbench.results(REFERENCE, every_run=True)


def value(table, metric):
    """``metric`` of softmax's decode job at 1024 tokens in ``table``."""
    rows = table[
        (table.variant == "softmax")
        & (table.task == "decode")
        & (table.metric == metric)
        & (table.x_name == "seq_len")
        & (table.x_value == 1024)
    ]
    return float(rows["value"].mean())


for metric in ("state_bytes", "decode_ratio"):
    print(
        f"decode × softmax at 1024 tokens, {metric}: {value(mine, metric):.10g}, "
        f"reference {value(board, metric):.10g}"
    )
