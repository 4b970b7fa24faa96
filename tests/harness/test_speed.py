"""``attnbench-speed``'s plumbing: ratios per round, memory targets, bounds both ways, exit code,
and the targets found through their entry points."""

from __future__ import annotations

import subprocess
import sys
import time
from importlib import metadata

import pytest

from attnbench.harness.cli import speed
from attnbench.harness.cli.speed import SpeedTarget, SpeedVerdict, format_table, measure
from attnbench.tasks.throughput.targets import Case, Target

GROUP = "attnbench.speed_targets"


def declared(*entries: tuple[str, str]) -> list[metadata.EntryPoint]:
    return [metadata.EntryPoint(name, value, GROUP) for name, value in entries]


def targets_of(case: Case) -> list[Target]:
    """A declaration of one target (for an entry point in these tests)."""
    return [Target("declared", case, case, 2.0, False)]


def test_bounds_in_both_directions():
    case = Case("softmax", 64, False)
    at_least = Target("x", case, case, 4.0, True)
    at_most = Target("y", case, case, 4.0, False)
    assert SpeedVerdict(at_least, 5.0, 4.5, 6.0).met and not SpeedVerdict(at_least, 3.9, 3, 5).met
    assert SpeedVerdict(at_most, 3.9, 3, 5).met and not SpeedVerdict(at_most, 4.1, 4, 5).met
    assert not SpeedVerdict(at_most, None, None, None).met  # unknown is never a pass


def test_measure_gives_one_ratio_per_round_and_a_memory_reading():
    small, large = (
        Case("window", 256, True, {"window": 32}),
        Case("window", 512, True, {"window": 32}),
    )
    targets = [
        Target("time ratio", large, small, 100.0, False),
        Target("peak", large, None, 1000.0, False, "memory"),
    ]
    outcomes, medians = measure(targets, rounds=3, threads=1, min_run_time=0.01)
    ratio, peak = outcomes
    assert ratio.low <= ratio.median <= ratio.high and ratio.median > 0
    assert peak.median is None or 0 <= peak.median < 1000
    assert set(medians) == {small.key, large.key}
    table = format_table(outcomes, medians, 3)
    assert "| time ratio |" in table and "of 3 rounds" in table


def test_a_reported_row_says_so():
    a, b = Case("softmax", 64, False), Case("softmax", 128, False)
    marginal = Target("step", b, a, None, False)
    assert SpeedVerdict(marginal, 9.0, 9.0, 9.0).met
    assert "(reported)" in format_table([SpeedVerdict(marginal, 2.0, 1.0, 3.0)], {}, 1)


def test_forward_backward_peak_is_measured():
    case = Case("linear", 256, True, {}, backward=True)
    targets = [Target("bwd peak", case, None, None, False, "memory")]
    (peak,), _ = measure(targets, rounds=1, threads=1, min_run_time=0.01)
    assert peak.median is None or peak.median > 0


def test_the_installed_targets_are_the_declared_ones():
    """The built-in declaration is an entry point like a plugin's, and its targets keep the
    protocol the command reads."""
    names = {ep.name for ep in metadata.entry_points(group=GROUP)}
    assert "throughput" in names
    targets, failed = speed.declared_targets()
    assert not failed and targets
    assert all(isinstance(t, SpeedTarget) for t in targets)
    assert len({t.label for t in targets}) == len(targets)


def test_a_declaration_that_fails_is_a_warning_naming_it_and_skipped(monkeypatch):
    monkeypatch.setattr(
        speed.metadata,
        "entry_points",
        lambda group: declared(
            ("ok", f"{__name__}:one_target"),
            ("broken", "no_such_module_xyz:targets"),
            ("wrong", f"{__name__}:not_targets"),
        ),
    )
    targets, failed = speed.declared_targets()
    assert [t.label for t in targets] == ["declared"]
    assert [(f.name, f.error.split(":")[0]) for f in failed] == [
        ("broken", "ModuleNotFoundError"),
        ("wrong", "TypeError"),
    ]
    assert "entry point attnbench.speed_targets: broken = no_such_module_xyz:targets" in (
        failed[0].source
    )
    monkeypatch.setattr(speed, "measure", lambda targets, **_: ([], {}))
    with pytest.warns(speed.PluginLoadWarning) as caught:
        assert speed.main(["--rounds", "1"]) == 0
    assert [str(w.message).split(": ")[2].split(" = ")[0] for w in caught] == ["broken", "wrong"]


def test_strict_refuses_a_declaration_that_fails(monkeypatch, capsys):
    monkeypatch.setattr(speed, "refuse_broken_plugins", lambda prog: 0)
    monkeypatch.setattr(
        speed.metadata, "entry_points", lambda group: declared(("broken", "no_such_xyz:t"))
    )
    monkeypatch.setattr(speed, "measure", lambda *_, **__: pytest.fail("measured"))
    assert speed.main(["--strict"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("attnbench-speed: plugin unknown (entry point attnbench.speed_targets")
    assert line.endswith("fix or uninstall it (--strict makes this an error).")


def one_target() -> list[Target]:
    return targets_of(Case("softmax", 64, False))


def not_targets() -> list[str]:
    return ["not a target"]


@pytest.fixture
def no_targets(monkeypatch):
    """Nothing declared: the command's own logic, in a second."""
    monkeypatch.setattr(speed, "declared_targets", lambda: ([], []))


def test_main_exits_non_zero_when_a_target_is_missed(no_targets, monkeypatch, capsys):
    case = Case("softmax", 64, False)
    missed = SpeedVerdict(Target("too slow", case, case, 1.0, True), 0.5, 0.4, 0.6)
    monkeypatch.setattr(speed, "measure", lambda *_, **__: ([missed], {case.key: 1.0}))
    assert speed.main(["--rounds", "1"]) == 1
    assert "| too slow | 0.4 | 0.5 | 0.6 | ≥ 1 | NO |" in capsys.readouterr().out


def test_ctrl_c_is_one_line_and_exit_130(no_targets, monkeypatch, capsys):
    """As in the other commands: one line, exit status 130, no traceback."""

    def interrupted(*_, **__):
        raise KeyboardInterrupt

    monkeypatch.setattr(speed, "measure", interrupted)
    assert speed.main(["--rounds", "1"]) == 130
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert line.startswith("attnbench-speed: interrupted by Ctrl-C") and not captured.out


def test_more_threads_than_cores_is_refused_before_timing(monkeypatch, capsys):
    """Oversubscribed threads time the scheduler, not the kernels: refused in argparse's way,
    exit 2, nothing measured."""
    monkeypatch.setattr(speed, "usable_cores", lambda: 2)
    monkeypatch.setattr(speed, "measure", lambda *_, **__: pytest.fail("measured"))
    with pytest.raises(SystemExit) as exit_:
        speed.main(["--threads", "3"])
    assert exit_.value.code == 2
    assert "--threads 3 is more than the 2 CPU cores usable here" in capsys.readouterr().err


def test_other_processes_cpu_use_is_measured_not_read_off_the_load_average():
    """attnbench-speed on a busy machine reported 20 misses and exit 1 without a word about the
    load; it now says how many cores other processes used during the run (the machine's CPU time
    less its own, /proc/stat), which the 1-minute load average cannot (it still counts work that
    ended before the run)."""
    assert speed._others_cores((0.0, 10.0, 1.0), (2.0, 13.0, 3.0)) == pytest.approx(0.5)
    assert speed._others_cores((0.0, 10.0, 1.0), (2.0, 12.0, 3.0)) == 0.0  # only this run
    assert speed._others_cores(None, (2.0, 13.0, 3.0)) is None
    spin = subprocess.Popen([sys.executable, "-c", SPIN])
    try:
        time.sleep(1.0)  # the spinner's interpreter is up and spinning
        before = speed._cpu_seconds()
        if before is None:
            pytest.skip("no /proc/stat here")
        time.sleep(1.0)
        others = speed._others_cores(before, speed._cpu_seconds())
    finally:
        spin.kill()
        spin.wait()
    # the spinner, not yet waited for, is another process: about one core (more on a busy host)
    assert others > 0.6


SPIN = "import time\nend = time.time() + 30\nwhile time.time() < end: pass"
