"""A machine is its CPU model *and* the vector capability torch dispatches to (or its GPU): one
CPU model name covers hosts that run AVX-512 and hosts that run AVX2, and their timings must
never meet as one machine's."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from conftest import make_record
from hydra import compose, initialize_config_dir

from attnbench.harness.cli.app import CONF_DIR
from attnbench.harness.jobs import env
from attnbench.harness.jobs.config import store_configs
from attnbench.harness.jobs.job import run_job
from attnbench.harness.jobs.records import write_record
from attnbench.harness.leaderboard import build_site
from attnbench.harness.results.collect import collect
from attnbench.tasks.throughput import Throughput

CPU = torch.device("cpu")


def test_a_cpu_is_named_by_model_and_capability_a_gpu_by_its_name(monkeypatch):
    capability = torch.backends.cpu.get_cpu_capability()
    assert env.cpu_capability() == capability
    assert env.device_name(CPU) == f"{env.cpu_model()} ({capability})"
    record_env = env.environment(CPU)
    assert record_env["cpu"] == env.cpu_model()  # the model name alone
    assert record_env["cpu_capability"] == capability
    assert record_env["device_name"] == env.device_name(CPU)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Some GPU")
    assert env.device_name(torch.device("cuda")) == "Some GPU"


@pytest.mark.skipif(
    torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"),
    reason="ATEN_CPU_CAPABILITY=avx2 needs an AVX2 or AVX-512 host",
)
def test_aten_cpu_capability_lowers_the_name_in_a_process():
    code = (
        "import torch; from attnbench.harness.jobs.env import device_name; "
        "print(device_name(torch.device('cpu')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "ATEN_CPU_CAPABILITY": "avx2"},
        timeout=120,
    ).stdout.strip()
    assert out == f"{env.cpu_model()} (AVX2)"


def _cfg(tmp_path):
    store_configs()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return compose(
            "config",
            overrides=[
                f"results_dir={tmp_path}",
                "device=cpu",
                "variant=softmax",
                "threads=1",
                "task.seq_len=16",
                "task.min_run_time=0.01",
                "task.backward=false",
                "task.min_samples=4",
                "task.max_timing_s=1",
            ],
        )


def test_a_job_on_another_capability_is_another_job(tmp_path, monkeypatch):
    """The same job under AVX-512 and under AVX2 has two identities: neither host skips the
    other's job as finished, and both records keep the plain model name in ``env.cpu``."""
    monkeypatch.setattr(env, "cpu_capability", lambda: "AVX512")
    wide = run_job(_cfg(tmp_path))
    monkeypatch.setattr(env, "cpu_capability", lambda: "AVX2")
    narrow = run_job(_cfg(tmp_path))
    assert wide.run_id != narrow.run_id
    assert (wide.hardware, narrow.hardware) == (
        f"{env.cpu_model()} (AVX512)",
        f"{env.cpu_model()} (AVX2)",
    )
    assert (wide.env["cpu_capability"], narrow.env["cpu_capability"]) == ("AVX512", "AVX2")
    assert wide.env["cpu"] == narrow.env["cpu"] == env.cpu_model()


def test_the_board_shows_each_capability_as_a_machine_of_its_own(tmp_path):
    """Records of one CPU model under two capabilities, and one written before the capability
    was part of the name (hardware "AMD EPYC"): three machines, a row for the variant on each."""
    machines = ["AMD EPYC (AVX2)", "AMD EPYC (AVX512)", "AMD EPYC"]
    for i, (hardware, ms) in enumerate(zip(machines, (4.0, 1.0, 2.0), strict=True)):
        metrics = [
            {
                "metric": m,
                "value": ms,
                "x_name": "seq_len",
                "x_value": 64,
                "higher_is_better": False,
            }
            for m in ("fwd_ms", "fwd_ratio")
        ]
        write_record(
            tmp_path,
            make_record(
                f"epyc-{i}",
                task_params={"seq_len": 64},
                hardware=hardware,
                metrics=metrics,
                task_info=Throughput.describe().to_dict(),
            ),
        )
    collect(tmp_path)
    html = build_site(tmp_path).read_text()
    for machine in machines:
        assert html.count(f'data-machine="{machine}"') == 1
