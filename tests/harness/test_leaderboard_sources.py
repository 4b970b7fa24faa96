"""One board from several results folders (#44 item 4): `attnbench-leaderboard A B -o SITE`.

Machines stay apart by their hardware identity, each folder's provenance and stale runs are
stated in the header (staleness judged per folder), a run two folders hold is shown once, the
records of both are published, and bad combinations are refused in one sentence, exit 2."""

from __future__ import annotations

import re

import pandas as pd
from conftest import make_record, run_cli

from attnbench.harness.jobs.records import write_record
from attnbench.harness.leaderboard import build_site
from attnbench.harness.results.collect import collect
from attnbench.tasks.throughput import Throughput


def _timing(folder, name, variant, ms, hardware, stale=False):
    extra = {"code_modules": {"attnbench.metrics": "an older digest"}} if stale else {}
    write_record(
        folder,
        make_record(
            name,
            variant=variant,
            hardware=hardware,
            task_params={"seq_len": 64},
            metrics=[
                {
                    "metric": "fwd_ratio",
                    "value": ms / 4.0,
                    "x_name": "seq_len",
                    "x_value": 64,
                    "higher_is_better": False,
                }
            ],
            task_info=Throughput.describe().to_dict(),
            details={"variant_family": variant},
            **extra,
        ),
    )


def _two_folders(tmp_path):
    cpu, gpu = tmp_path / "cpu", tmp_path / "gpu"
    _timing(cpu, "c1", "softmax", 4.0, "AMD EPYC (AVX512)")
    _timing(cpu, "c2", "linear", 6.0, "AMD EPYC (AVX512)")
    _timing(cpu, "c3", "window", 9.0, "AMD EPYC (AVX512)", stale=True)
    _timing(gpu, "g1", "softmax", 1.0, "NVIDIA H100 <80GB>")
    _timing(gpu, "g2", "linear", 0.5, "NVIDIA H100 <80GB>")
    for folder in (cpu, gpu):
        collect(folder)
    return cpu, gpu


def test_two_folders_make_one_board_with_both_machines_apart(tmp_path):
    cpu, gpu = _two_folders(tmp_path)
    html = build_site([cpu, gpu], tmp_path / "site").read_text()
    machines = re.findall(r'<tr data-machine="([^"]*)"', html)
    assert sorted(set(machines)) == ["AMD EPYC (AVX512)", "NVIDIA H100 &lt;80GB&gt;"]
    assert len(machines) == 4  # softmax and linear on each machine, ranked within it
    # each folder's provenance in the header, its stale runs counted on its own line
    sources = html.split('<ul class="sub" id="sources">')[1].split("</ul>")[0]
    cpu_line, gpu_line = re.findall(r"<li>(.*?)</li>", sources, re.S)
    assert f"<code>{cpu}</code>: 2 runs on AMD EPYC (AVX512)" in cpu_line
    assert "1 run of older code than the installed one left out" in cpu_line
    assert f"<code>{gpu}</code>: 2 runs on NVIDIA H100 &lt;80GB&gt;" in gpu_line
    assert "older code" not in gpu_line
    assert "1 run of older code is left out" in html  # the total, in the summary line
    published = {p.stem for p in (tmp_path / "site" / "runs").glob("*.json")}
    assert len(published) == 5  # every run of both tables (the published table holds all)
    table = pd.read_parquet(tmp_path / "site" / "results.parquet")
    assert table.groupby("results_folder")["run_id"].nunique().to_dict() == {
        str(cpu): 3,
        str(gpu): 2,
    }


def test_a_run_both_folders_hold_is_shown_once(tmp_path, caplog):
    """...and its second copy is no fault: not "left out … not valid records" """
    cpu, gpu = _two_folders(tmp_path)
    copy = tmp_path / "copy"
    _timing(copy, "c1", "softmax", 4.0, "AMD EPYC (AVX512)")  # the same record: same identity
    (record,) = (copy / "runs").glob("*.json")  # and an earlier attempt kept beside it (R11)
    (record.parent / f"{record.stem}.20261126T145538Z.json").write_bytes(record.read_bytes())
    collect(copy)
    html = build_site([cpu, copy], tmp_path / "site").read_text()
    assert len(re.findall(r'<tr data-machine="AMD EPYC \(AVX512\)"', html)) == 2
    assert "1 run also in a folder before it, shown once" in html
    assert "left out" not in caplog.text


def test_one_folder_keeps_its_page_without_a_sources_list(tmp_path):
    cpu, _ = _two_folders(tmp_path)
    html = build_site(cpu).read_text()
    assert 'id="sources"' not in html and "2 runs." in html


def test_the_command_builds_a_board_of_several_folders_and_refuses_bad_combinations(tmp_path):
    cpu, gpu = _two_folders(tmp_path)
    site = tmp_path / "site"
    ok = run_cli("attnbench-leaderboard", str(cpu), str(gpu), "-o", str(site))
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.strip() == str((site / "index.html").resolve())
    for args, said in (
        ([str(cpu), str(gpu)], "needs its own folder: give -o SITE."),
        ([str(cpu), str(cpu), "-o", str(site)], "is given twice"),
        ([str(cpu), str(tmp_path / "missing"), "-o", str(site)], "missing"),
    ):
        bad = run_cli("attnbench-leaderboard", *args)
        assert bad.returncode == 2, bad.stderr
        assert said in bad.stderr and "Traceback" not in bad.stderr
        assert len(bad.stderr.strip().splitlines()) == 1
