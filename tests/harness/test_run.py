"""harness.jobs.job: every job outcome becomes a record; finished jobs are skipped."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from hydra import compose, initialize_config_dir

from attnbench.harness.cli.app import CONF_DIR
from attnbench.harness.jobs.config import store_configs
from attnbench.harness.jobs.job import run_job
from attnbench.harness.jobs.preflight import ConfigError
from attnbench.harness.jobs.records import find_finished_record, read_record, record_path
from attnbench.metrics import POINT_FIELDS
from attnbench.variant import VARIANTS, AttentionVariant, register_variant


@dataclass
class FaultParams:
    mode: str = "raise"  # raise | nan | oom | ok | broken_init (the constructor raises KeyError)
    oom_from: int = 0  # with mode=ok: out of memory from this sequence length on (0 = never)


class FaultyVariant(AttentionVariant):
    family = "test"
    cost = "n²"
    supports_causal = False
    Params = FaultParams

    def __init__(self, params, shape):
        if params.mode == "broken_init":  # a plugin's bug, not a bad value of the command line
            raise KeyError("no table entry for this head size")
        super().__init__(params, shape)

    def forward(self, q, k, v, causal=False):
        self.check_inputs(q, k, v, causal)
        if self.params.mode == "raise":
            raise RuntimeError("deliberate failure in forward")
        if self.params.mode == "oom" or 0 < self.params.oom_from <= q.shape[-2]:
            raise torch.OutOfMemoryError("simulated: out of memory")
        return v if self.params.mode == "ok" else v * float("nan")

    def attention_weights(self, q, k, causal=False):
        eye = torch.eye(k.shape[-2], dtype=q.dtype)[: q.shape[-2]]
        return eye.expand(*q.shape[:-2], q.shape[-2], k.shape[-2])


@pytest.fixture(scope="module", autouse=True)
def faulty_variant():
    register_variant("test_faulty")(FaultyVariant)
    store_configs()
    yield
    VARIANTS.unregister("test_faulty")


def _cfg(tmp_path, *overrides):
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return compose(
            "config",
            overrides=[
                f"results_dir={tmp_path}",
                "device=cpu",
                "task.seq_len=16",
                "task.min_run_time=0.01",
                "task.backward=false",
                "task.max_timing_s=1",  # a busy machine cannot stretch a job
                *overrides,
            ],
        )


@pytest.mark.parametrize(
    "mode, status, error",
    [
        ("raise", "failed", "RuntimeError: deliberate failure in forward"),
        ("nan", "failed", "non-finite: non-finite values in forward output"),
        ("oom", "oom", "simulated: out of memory"),
    ],
)
def test_job_failures_become_records(tmp_path, mode, status, error):
    record = run_job(_cfg(tmp_path, "variant=test_faulty", f"variant.mode={mode}"))
    assert record.status == status
    assert error in record.error
    on_disk = read_record(record_path(tmp_path, record.run_id))
    assert on_disk.status == status and on_disk.metrics == []
    assert "traceback" in on_disk.details


def test_length_sweep_goes_on_past_an_oom(tmp_path, monkeypatch):
    """One job per length, as a multirun runs them: the oom sizes are recorded, the rest run."""
    import attnbench.tasks.throughput

    # the memory probe process cannot see a variant registered only in this process
    monkeypatch.setattr(
        attnbench.tasks.throughput, "isolated_cpu_peak", lambda fn, *args: fn(*args)
    )
    statuses = {}
    for n in (16, 64, 32, 128):
        cfg = _cfg(tmp_path, "variant=test_faulty", "variant.mode=ok", "variant.oom_from=64")
        cfg.task.seq_len = n
        statuses[n] = run_job(cfg).status
    assert statuses == {16: "ok", 64: "oom", 32: "ok", 128: "oom"}


def test_causal_on_non_causal_variant_is_unsupported(tmp_path):
    record = run_job(_cfg(tmp_path, "variant=test_faulty", "task.causal=true"))
    assert record.status == "unsupported"
    assert "does not support causal" in record.error


def test_ok_job_records_environment_and_is_skipped_on_rerun(tmp_path):
    cfg = _cfg(tmp_path, "variant=softmax")
    first = run_job(cfg)
    assert first.status == "ok"
    assert {"fwd_ms", "peak_mem_mib", "gflops_fwd", "tokens_per_s", "first_call_ms"} <= {
        m["metric"] for m in first.metrics
    }
    assert first.env["torch_version"] == torch.__version__
    assert first.env["threads"] >= 1 and first.device == "cpu"
    # every point has exactly the fields of a MetricPoint, its direction from the task's metrics
    assert {tuple(m) for m in first.metrics} == {POINT_FIELDS}
    directions = {m["metric"]: m["higher_is_better"] for m in first.metrics}
    assert directions["fwd_ms"] is False and directions["tokens_per_s"] is True
    path = record_path(tmp_path, first.run_id)
    mtime = path.stat().st_mtime_ns
    again = run_job(cfg)
    assert again == find_finished_record(tmp_path, first.run_id)
    assert path.stat().st_mtime_ns == mtime  # not re-run
    overwritten = run_job(_cfg(tmp_path, "variant=softmax", "overwrite=true"))
    assert overwritten.run_id == first.run_id and path.stat().st_mtime_ns != mtime


def test_process_setting_refused_for_the_job_is_a_failed_record(tmp_path, monkeypatch):
    """A process setting that fails when the job sets it: a record, not an exception."""
    threads = torch.get_num_threads()
    cfg = _cfg(tmp_path, "variant=softmax")

    def refuse(n):
        raise RuntimeError("set_num_threads: refused by this process")

    monkeypatch.setattr(torch, "set_num_threads", refuse)
    record = run_job(cfg)
    assert record.status == "failed"
    assert "set_num_threads: refused by this process" in record.error
    assert read_record(record_path(tmp_path, record.run_id)).status == "failed"
    assert record.env["threads"] == threads == torch.get_num_threads()  # what it ran with


def test_settings_no_job_can_honour_are_refused_before_any_record(tmp_path):
    """threads=-1 passed programmatically is refused like on the command line, with no record."""
    cfg = _cfg(tmp_path, "variant=softmax")
    cfg.threads = -1
    with pytest.raises(ConfigError, match="threads=-1 is negative"):
        run_job(cfg)
    assert not (tmp_path / "runs").exists()


def test_run_id_depends_on_parameters_and_seed(tmp_path):
    ids = {
        run_job(_cfg(tmp_path, "variant=softmax", *o)).run_id
        for o in ([], ["seed=1"], ["variant.temperature=2.0"])
    }
    assert len(ids) == 3


def test_job_over_its_time_budget_is_recorded_as_timeout(tmp_path):
    import time

    class Slow(FaultyVariant):
        def forward(self, q, k, v, causal=False):
            time.sleep(0.05)
            return v

    register_variant("test_slow")(Slow)
    store_configs()
    try:
        start = time.perf_counter()
        record = run_job(
            _cfg(tmp_path, "variant=test_slow", "timeout_s=0.5", "task.min_samples=1000")
        )
        assert record.status == "timeout"
        assert "time budget of 0.5 s" in record.error
        assert time.perf_counter() - start < 5  # stopped, not run to completion
        assert read_record(record_path(tmp_path, record.run_id)).status == "timeout"
    finally:
        VARIANTS.unregister("test_slow")


def test_thread_count_and_hardware_are_part_of_the_identity(tmp_path):
    from attnbench.harness.jobs.env import device_name

    one = run_job(_cfg(tmp_path, "variant=softmax", "threads=1"))
    two = run_job(_cfg(tmp_path, "variant=softmax", "threads=2"))
    assert one.run_id != two.run_id  # both ran: neither was skipped as the other
    assert (one.threads, two.threads) == (1, 2) and one.env["threads"] == 1
    assert one.hardware == device_name(torch.device("cpu"))
    default = run_job(_cfg(tmp_path, "variant=softmax"))  # threads=0: torch's default, resolved
    assert default.threads >= 1


SCRATCH = """
from dataclasses import dataclass
from attnbench import AttentionVariant, register_variant

@dataclass
class ScratchParams:
    gain: float = 1.0  # multiplies the values

@register_variant("test_scratch")
class Scratch(AttentionVariant):
    family = "test"
    cost = "n"
    supports_causal = True
    Params = ScratchParams

    def forward(self, q, k, v, causal=False):
        return v * self.params.gain
"""


def test_editing_a_variant_module_reruns_exactly_its_jobs(tmp_path, monkeypatch):
    """The code fingerprint comes from the source files: an uncommitted edit of one variant's
    module gives its jobs a new identity; the other variants' jobs are still finished."""
    import importlib
    import sys

    plugin = tmp_path / "plugin"
    plugin.mkdir()
    module = plugin / "scratch_variant_mod.py"
    module.write_text(SCRATCH)
    monkeypatch.syspath_prepend(str(plugin))
    importlib.import_module("scratch_variant_mod")
    store_configs()
    try:
        results = tmp_path / "results"
        first = {v: run_job(_cfg(results, f"variant={v}")) for v in ("softmax", "test_scratch")}
        assert "scratch_variant_mod" in first["test_scratch"].code_modules
        assert "scratch_variant_mod" not in first["softmax"].code_modules
        stamps = {v: record_path(results, r.run_id).stat().st_mtime_ns for v, r in first.items()}

        module.write_text(SCRATCH + "\n# an edit that changes the source\n")
        again = {v: run_job(_cfg(results, f"variant={v}")) for v in ("softmax", "test_scratch")}
        assert again["softmax"].run_id == first["softmax"].run_id  # unrelated: still finished
        path = record_path(results, first["softmax"].run_id)
        assert path.stat().st_mtime_ns == stamps["softmax"]
        assert again["test_scratch"].run_id != first["test_scratch"].run_id  # re-ran
        assert again["test_scratch"].created_at > first["test_scratch"].created_at
        assert record_path(results, first["test_scratch"].run_id).exists()  # history kept

        import pandas as pd

        from attnbench.harness.results.collect import collect

        collect(results)
        table = pd.read_parquet(results / "results.parquet")
        current = table.drop_duplicates("run_id").set_index("run_id")["current"]
        assert not current[first["test_scratch"].run_id]  # older code: history
        assert current[again["test_scratch"].run_id] and current[first["softmax"].run_id]
    finally:
        VARIANTS.unregister("test_scratch")
        sys.modules.pop("scratch_variant_mod", None)


def test_a_failed_overwrite_keeps_the_ok_record(tmp_path, monkeypatch):
    from attnbench.tasks.throughput import Throughput

    ok = run_job(_cfg(tmp_path, "variant=softmax"))

    def broken(self, ctx):
        raise RuntimeError("the machine was busy")

    monkeypatch.setattr(Throughput, "measure", broken)
    failed = run_job(_cfg(tmp_path, "variant=softmax", "overwrite=true"))
    assert failed.status == "failed" and failed.run_id == ok.run_id
    assert find_finished_record(tmp_path, ok.run_id) == ok  # still in its place
    attempts = sorted((tmp_path / "runs").glob(f"{ok.run_id}.*.json"))
    assert len(attempts) == 1 and read_record(attempts[0]) == failed  # kept beside it


def test_an_unsupported_job_is_not_rerun_but_a_failed_one_is(tmp_path):
    unsupported = run_job(_cfg(tmp_path, "variant=test_faulty", "task.causal=true"))
    assert run_job(_cfg(tmp_path, "variant=test_faulty", "task.causal=true")) == unsupported
    failed = run_job(_cfg(tmp_path, "variant=test_faulty"))  # mode=raise
    again = run_job(_cfg(tmp_path, "variant=test_faulty"))
    assert failed.status == again.status == "failed" and again.created_at > failed.created_at
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == sorted(
        [f"{unsupported.run_id}.json", f"{failed.run_id}.json"]
        + [p.name for p in (tmp_path / "runs").glob(f"{failed.run_id}.*.json")]
    )
    assert len(list((tmp_path / "runs").glob(f"{failed.run_id}.*.json"))) == 1  # kept beside


def test_a_plugin_constructor_that_raises_a_bug_is_the_job_s_failed_record(tmp_path):
    """Anything but the ValueError/TypeError of a bad value, raised by a plugin's constructor,
    is that job's failed record naming the plugin, not a refusal of the whole sweep."""
    cfg = _cfg(tmp_path, "variant=test_faulty", "variant.mode=broken_init")
    record = run_job(cfg)
    assert record.status == "failed"
    origin = VARIANTS.entry("test_faulty").origin
    assert record.error == (
        f"variant test_faulty (from {origin}) raised KeyError when built: "
        "'no table entry for this head size'"
    )
    assert read_record(record_path(tmp_path, record.run_id)) == record
    assert record.task_info["name"] == "throughput"
    again = run_job(cfg)  # a failed job is retried by the next sweep, and fails the same way
    assert again.status == "failed" and again.run_id == record.run_id


def test_a_failure_s_error_is_its_first_line_and_the_traceback_keeps_the_rest():
    """torch's C++ errors append a stack dump; the record's error (shown in the log line and on
    the board) is the sentence, the details keep the traceback."""
    from attnbench.harness.jobs.job import _classify

    exc = RuntimeError("Storage size calculation overflowed\nException raised from x\nframe #0")
    assert _classify(exc) == ("failed", "RuntimeError: Storage size calculation overflowed")
