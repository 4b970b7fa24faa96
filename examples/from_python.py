"""attnbench from Python (a notebook or a script): reproduce one cell of the reference board.

    python examples/from_python.py [RESULTS_DIR]

It reruns one job of `sweep=standard` (softmax on the concentration task, whose queries and keys
come from a recall model trained for 300 steps) with `attnbench.run`, reads the committed
reference board with `attnbench.results`, and prints both values of the concentration S(x) of
each of the model's two layers (the board's "concentration" chart). The job has the same identity
as on the command line; its numbers agree with the reference's to float32 rounding where the
CPU's kernels are the same (another CPU model may differ in the last digits).
"""

import sys
from pathlib import Path

import attnbench

REFERENCE = Path(__file__).resolve().parent.parent / "results" / "reference"
JOB = {"threads": 1, "seed": 0, "task.source": "recall", "task.recall_steps": 300}

results_dir = sys.argv[1] if sys.argv[1:] else "results"
mine = attnbench.run("softmax", "concentration", results_dir=results_dir, **JOB)
board = attnbench.results(REFERENCE)


def sparsity(table):
    """S(x) of the recall model's attention, per layer, in the job above."""
    rows = table[
        table.current  # the runs of the installed code (older ones stay in the table as history)
        & (table.variant == "softmax")
        & (table.task == "concentration")
        & table.task_params.str.contains('"source": "recall"')
        & (table.metric == "sparsity_s")
    ]
    return rows.set_index("x_value")["value"].sort_index()


for layer, (ours, reference) in enumerate(zip(sparsity(mine), sparsity(board), strict=True)):
    print(f"concentration × softmax, S(x) of layer {layer}: {ours:.6f}, reference {reference:.6f}")
