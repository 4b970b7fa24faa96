"""A plugin whose forward returns a tensor of the wrong shape gets a failed record from every
registered task, naming the shape the contract expects, instead of a time or a score (issue
#63: a slice of the output was once timed as the cheapest variant).

Two wrong shapes: one value channel short, and the first position alone (which broadcasts, so
that without the check some tasks train on it for minutes). Each task runs one job through the
engine (`run_job`, in process) at small settings: the contract is checked on the variant's
first call (`AttentionVariant._checked_output`), so every job ends at its first forward, and
``timeout_s`` ends one that does not. The tasks come from the registry, so a new task is
covered without a line here; `SMALL` only makes the known ones quicker."""

from __future__ import annotations

import re

import pytest
from conftest import FAST
from hydra import compose, initialize_config_dir

from attnbench.harness.cli.app import CONF_DIR
from attnbench.harness.jobs.config import store_configs
from attnbench.harness.jobs.job import run_job
from attnbench.harness.jobs.records import read_record, record_path
from attnbench.incremental import INCREMENTAL, register_incremental
from attnbench.task import TASKS
from attnbench.variant import VARIANTS, register_variant
from attnbench.variants.softmax import SoftmaxAttention

# plugin name → (what its forward returns, the shape that gives from the contract's (B, H, N, Dv))
WRONG = {
    "test_narrow_output": (lambda out: out[..., :-1], lambda b, h, n, dv: (b, h, n, dv - 1)),
    "test_first_position_output": (lambda out: out[:, :, :1], lambda b, h, n, dv: (b, h, 1, dv)),
}

_MAD = ["task.train_size=256", "task.test_size=64", "task.val_size=64", "task.batch_size=32"]
_FEW = ["task.train_size=64", "task.test_size=16", "task.val_size=16", "task.batch_size=16"]
# settings that make each known task's data small; a task not named here runs at its defaults
SMALL = {
    "throughput": FAST,
    "decode": ["task.seq_len=32", "task.new_tokens=2", "task.head_dim=16", "task.min_samples=4"],
    "compression": _MAD,
    "fuzzy_recall": _MAD,
    "memorization": _MAD,
    "noisy_recall": _MAD,
    "recall": _FEW,
    "forgetting_recall": _FEW,
    "copy": _FEW,
    "parity": _FEW,
    "modular_arithmetic": _FEW,
    "word_problem": _FEW,
    "icl_regression": ["task.eval_prompts=64", "task.val_prompts=64", "task.bootstrap=10"],
    # the code corpus ships with attnbench; the default prose corpus is an optional package
    "lm": [
        "task.corpus=code",
        "task.context=16",
        "task.tokens=256",
        "task.batch_size=4",
        "task.eval_tokens=256",
        "task.val_tokens=64",
    ],
    "concentration": ["task.seq_len=32", "task.scales=[1.0]", "task.n_batches=1"],
}
# a task whose settings take another path through it runs once more per entry here: the
# concentration task reads its weights from gaussian draws by default, from a trained model here
ALSO = {"concentration": [["task.source=recall", "task.recall_steps=1"]]}


def cases():
    """(task, its overrides) for every registered task, and each of its `ALSO` settings."""
    for task in TASKS.names():
        yield pytest.param(task, SMALL.get(task, []), id=task)
        for overrides in ALSO.get(task, []):
            yield pytest.param(task, overrides, id=f"{task}-{overrides[0]}")


# the dtype is the job's, or float64 where a task checks the forward in it (concentration)
CONTRACT = re.compile(
    r"variant '(\w+)' returned \((\d+), (\d+), (\d+), (\d+)\) (torch\.\w+) on cpu; the "
    r"contract is \(B, H, N, Dv\) = \((\d+), (\d+), (\d+), (\d+)\) \6 on cpu"
)


def wrong_shape(cut):
    """Softmax whose output goes through ``cut``: fast, and wrong."""

    class WrongShape(SoftmaxAttention):
        def forward(self, q, k, v, causal=False):
            return cut(super().forward(q, k, v, causal=causal))

    return WrongShape


@pytest.fixture(scope="module", autouse=True)
def wrong_shape_variants():
    """The plugins, registered in this process with softmax's decoder (a subclass each:
    registering sets the class's name), so that decode reaches its check against the forward."""
    softmax_decoder = INCREMENTAL.get("softmax")
    for name, (cut, _) in WRONG.items():
        register_variant(name)(wrong_shape(cut))
        register_incremental(name)(type(f"{name}_decoder", (softmax_decoder,), {}))
    store_configs()
    yield
    for name in WRONG:
        VARIANTS.unregister(name)
        INCREMENTAL.unregister(name)


@pytest.mark.parametrize(("task", "overrides"), list(cases()))
@pytest.mark.parametrize("variant", list(WRONG))
def test_a_wrongly_shaped_output_fails_the_job_naming_the_contract(
    variant, task, overrides, tmp_path
):
    """Status failed, no metric, and the error names the shape the variant returned and the
    contract's: on the record returned and on disk."""
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose(
            "config",
            overrides=[
                f"results_dir={tmp_path}",
                "device=cpu",
                f"variant={variant}",
                f"task={task}",
                "timeout_s=60",  # without the check, some tasks train on a broadcast output
                *overrides,
            ],
        )
    record = run_job(cfg)
    assert record.status == "failed", (record.status, record.error, record.metrics[:3])
    match = CONTRACT.search(record.error or "")
    assert match, record.error
    got, expected = [int(x) for x in match.groups()[1:5]], [int(x) for x in match.groups()[6:]]
    assert match.group(1) == variant and tuple(got) == WRONG[variant][1](*expected), record.error
    on_disk = read_record(record_path(tmp_path, record.run_id))
    assert on_disk.status == "failed" and on_disk.metrics == [] and on_disk.error == record.error
