"""Every config composes, and its schema is typed (compose with hydra.initialize_config_dir)."""

from __future__ import annotations

import dataclasses
import re
import warnings
from pathlib import Path

import pytest
from conftest import FAST
from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from attnbench.harness.cli.app import CONF_DIR
from attnbench.harness.jobs.config import store_configs
from attnbench.task import TASKS
from attnbench.variant import VARIANTS
from hydra_plugins.attnbench_sweeper.grids_sweeper import GRID_KEYS

store_configs()
SWEEPS = sorted(p.stem for p in (Path(CONF_DIR) / "sweep").glob("*.yaml"))


def _compose(overrides: list[str], hydra_cfg: bool = False):
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return compose("config", overrides=overrides, return_hydra_config=hydra_cfg)


def test_default_config():
    cfg = _compose([])
    assert cfg.variant.name == "softmax" and cfg.task.name == "throughput"
    assert cfg.seed == 0 and cfg.results_dir == "results"
    assert str(cfg.device.value) == "auto" and cfg.dtype.value == "auto"


@pytest.mark.parametrize("variant", VARIANTS.names())
def test_every_variant_composes_with_its_schema(variant):
    cfg = _compose([f"variant={variant}"])
    params = VARIANTS.get(variant).Params
    assert cfg.variant.name == variant
    expected = {f.name for f in dataclasses.fields(params)} | {"name"}
    assert set(cfg.variant.keys()) == expected
    assert OmegaConf.is_missing(cfg, "variant") is False


@pytest.mark.parametrize("task", TASKS.names())
def test_every_task_composes_with_its_schema(task):
    cfg = _compose([f"task={task}"])
    params = TASKS.get(task).Params
    assert set(cfg.task.keys()) == {f.name for f in dataclasses.fields(params)} | {"name"}


def _grids(sweeper) -> list:
    """The parameter grids of a sweeper config (the basic sweeper has one)."""
    return list(sweeper.grids) if "grids" in sweeper else [sweeper.params]


@pytest.mark.parametrize("sweep", SWEEPS)
def test_every_sweep_preset_composes(sweep):
    cfg = _compose([f"sweep={sweep}"], hydra_cfg=True)
    for grid in _grids(cfg.hydra.sweeper):
        assert "variant" in grid and "task" in grid


def test_schema_rejects_unknown_key_and_wrong_type():
    with pytest.raises(ConfigCompositionException, match="windw"):
        _compose(["variant.windw=4"])
    with pytest.raises(ConfigCompositionException, match="seq_len"):
        _compose(["task.seq_len=abc"])
    with pytest.raises(ConfigCompositionException, match="device"):
        _compose(["device=gpu"])


OURS = "glob(*,exclude=peer_*)"  # every variant but the peers (other libraries' code)


def _expand(variant_override: str) -> list[str]:
    """The registered variants a grid's ``variant`` value selects, expanded by Hydra's parser."""
    (override,) = OverridesParser.create().parse_overrides([f"variant={variant_override}"])
    return override.value().filter(VARIANTS.names())


# quick's smoke board (conf/sweep/quick.yaml): the quality columns every variant of ours trains
# on, as (task, mode); every other task runs the two references
QUICK_EVERY_VARIANT = {("recall", None), ("icl_regression", "attention_system")}
QUICK_REFERENCES = "softmax,linear"
SPARSE = {"window", "strided", "bigbird", "learned_pattern", "topk"}


def _tasks_of(grid) -> list[str]:
    return str(grid.task).split(",")


def test_quick_sweep_puts_every_variant_on_the_board_and_every_task_in_it():
    """The main job's smoke board, sized for 3 minutes on two cores (docs/sweeps.md "What quick
    costs and shows"): every task has a grid; throughput times every variant, peers included (a
    peer unavailable here is one quick `unsupported` record), decode every variant of ours, each
    once, a sparse one at its trained defaults (no size of its own: the configuration the quality
    grids train, so that its row pairs quality and cost of one setting, #46 item 2); every
    variant of ours trains on recall and on in-context regression's attention_system mode, and
    every other task runs the two references. So every variant is a row with two cost and two
    quality columns, and every column is on the board; a new variant or task that the presets'
    globs miss fails here."""
    cfg = _compose(["sweep=quick"], hydra_cfg=True)
    grids = _grids(cfg.hydra.sweeper)
    assert {t for grid in grids for t in _tasks_of(grid)} == set(TASKS.names())
    timed: list[tuple[str, str]] = []
    every_variant: set[tuple[str, str | None]] = set()
    for grid in grids:
        if grid.task in ("throughput", "decode"):
            assert not [k for k in grid if str(k).startswith("variant.")], grid.task
            value = str(grid.variant)
            names = _expand(value) if value.startswith("glob(") else value.split(",")
            timed += [(grid.task, name) for name in names]
        elif grid.variant == OURS:
            every_variant |= {(t, grid.get("task.mode")) for t in _tasks_of(grid)}
        else:
            assert grid.variant == QUICK_REFERENCES, grid.task
    assert every_variant == QUICK_EVERY_VARIANT
    assert sorted(timed) == sorted(
        {("throughput", n) for n in VARIANTS.names()} | {("decode", n) for n in _expand(OURS)}
    )


def test_the_sparse_papers_sizes_that_quick_leaves_out_are_timed_by_standard():
    """quick times a sparse variant at its trained defaults only; its paper's absolute size (a
    window of 256, blocks of 64, k = 32), where the speed targets judge it, moved to
    `sweep=standard`, which must time each sparse variant there, in throughput and decode."""
    cfg = _compose(["sweep=standard"], hydra_cfg=True)
    sized = {
        (str(grid.task), name)
        for grid in _grids(cfg.hydra.sweeper)
        if str(grid.task) in ("throughput", "decode")
        and any(str(k).startswith("variant.") for k in grid)
        for name in str(grid.variant).split(",")
    }
    assert {(t, n) for t in ("throughput", "decode") for n in SPARSE} <= sized


def test_quality_grids_exclude_exactly_the_peers():
    ours = _expand(OURS)
    assert "softmax" in ours and "window" in ours
    assert not any(name.startswith("peer_") for name in ours)
    assert set(_expand("glob(*)")) - set(ours) == set(VARIANTS.names("peer_*"))
    assert {"peer_local_window", "peer_performer"} <= set(VARIANTS.names("peer_*"))


@pytest.mark.parametrize("sweep", SWEEPS)
def test_every_grid_composes_into_a_job(sweep):
    """Each grid's first job composes: its keys exist and its values have the right types."""
    cfg = _compose([f"sweep={sweep}"], hydra_cfg=True)
    for grid in _grids(cfg.hydra.sweeper):
        overrides = []
        for key, value in grid.items():
            if key in GRID_KEYS:  # how the sweeper runs the grid's jobs, not an override
                continue
            value = str(value)
            first = value.split(",")[0] if not value.startswith(("glob", "[")) else value
            overrides.append(f"{key}={'softmax' if first.startswith('glob') else first}")
        job = _compose(overrides)
        assert job.task.name == _tasks_of(grid)[0]  # a grid may sweep several tasks


def test_the_peers_preset_runs_every_registered_peer_on_each_of_its_tasks():
    """`sweep=peers` is the board's ours-vs-theirs comparison: every library variant that is
    registered (named ``peer_*``) is in a grid of each task of the preset, and every grid times
    or trains one of ours beside its peers."""
    cfg = _compose(["sweep=peers"], hydra_cfg=True)
    by_task: dict[str, set[str]] = {}
    for grid in _grids(cfg.hydra.sweeper):
        listed = set(str(grid.variant).split(","))
        by_task.setdefault(str(grid.task), set()).update(listed)
        assert listed - {n for n in listed if n.startswith("peer_")}  # ours, beside them
    assert set(by_task) == {"throughput", "recall"}
    for listed in by_task.values():
        assert set(VARIANTS.names("peer_*")) <= listed


def test_a_plugin_whose_params_make_no_config_is_skipped_with_one_sentence():
    """A plugin's Params default of the wrong type (``scale: float = "high"``) made every
    command fail in OmegaConf, whichever variant it named: that option alone is skipped, with a
    sentence naming it and the fix (the command says it once: a warning where the run goes on,
    the refusal where it names the entry); the others are stored."""
    from hydra.core.config_store import ConfigStore

    from attnbench.harness.jobs.config import _store_group
    from attnbench.registry import Registry
    from attnbench.variant import AttentionVariant

    @dataclasses.dataclass
    class Bad:
        scale: float = "high"  # type: ignore[assignment]

    @dataclasses.dataclass
    class Good:
        scale: float = 2.0

    registry = Registry("variant", AttentionVariant)
    registry.register("bad_params_probe", type("BadV", (AttentionVariant,), {"Params": Bad}))
    registry.register("good_params_probe", type("GoodV", (AttentionVariant,), {"Params": Good}))
    cs = ConfigStore.instance()
    (skipped,) = _store_group(cs, "probe_group", registry)  # the caller says it, once
    assert "variant 'bad_params_probe'" in skipped
    assert "give each field a default of its declared type" in skipped
    stored = cs.list("probe_group")
    assert stored == ["good_params_probe.yaml"]


@pytest.fixture
def bad_params_variant():
    """A registered variant whose Params default has the wrong type, as a plugin might have."""
    from attnbench.variant import AttentionVariant

    @dataclasses.dataclass
    class Bad:
        scale: float = "high"  # type: ignore[assignment]

    VARIANTS.register("bad_params_probe", type("BadV", (AttentionVariant,), {"Params": Bad}))
    yield "bad_params_probe"
    VARIANTS.unregister("bad_params_probe")


def test_a_variant_skipped_for_its_params_is_refused_by_name_and_listed_as_unavailable(
    bad_params_variant, capsys
):
    """Such a variant is not listed as available (`--strict` exits 2), and a command naming it
    gets the skip's sentence, not Hydra's "Could not find 'variant/…'"; a glob leaves it out as
    the sweep does."""
    from attnbench.harness.cli import variants
    from attnbench.harness.cli.strict import PLUGINS_STATUS
    from attnbench.harness.jobs.command_line import check_command_line
    from attnbench.harness.jobs.preflight import ConfigError

    sentence = (
        f"variant '{bad_params_variant}' ({__name__}) is skipped: its Params do not make a config ("
    )
    with pytest.raises(ConfigError, match=re.escape(sentence)):
        check_command_line([f"variant={bad_params_variant}", "task=throughput"])
    with pytest.raises(ConfigError, match=re.escape(sentence)):
        check_command_line(["-m", f"variant=softmax,{bad_params_variant}"])
    check_command_line(["-m", "variant=glob([bad_params_*,softmax])", *FAST])  # left out
    with pytest.raises(ConfigError, match=re.escape(sentence)):  # the only match: not "none"
        check_command_line(["-m", "variant=glob(bad_params_*)"])
    rows = {r["name"]: r for r in variants.variant_table("cpu")}
    assert rows[bad_params_variant]["available"].startswith(sentence)
    assert rows["softmax"]["available"] == "yes"
    assert variants.main(["--strict", "soft*"]) == PLUGINS_STATUS
    assert sentence in capsys.readouterr().err


def test_a_command_naming_a_variant_skipped_for_its_params_says_so_once(
    bad_params_variant, tmp_path, monkeypatch, capsys
):
    """The skip's sentence is said once: not as a warning, then again as the refusal."""
    import sys

    from attnbench.harness.cli import app

    argv = ["attnbench", f"variant={bad_params_variant}", f"results_dir={tmp_path / 'r'}"]
    monkeypatch.setattr(sys, "argv", argv)
    monkeypatch.setattr(app, "_hydra_main", lambda: pytest.fail("the command reached Hydra"))
    with pytest.raises(SystemExit) as exit_, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        app.main()
    err = capsys.readouterr().err
    assert not [w for w in caught if "skipped" in str(w.message)]  # no warning before it
    assert exit_.value.code == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"attnbench: variant '{bad_params_variant}' (") and "skipped" in err


def test_the_reference_is_standard_and_recall_state_and_the_script_runs_both():
    """results/reference/ holds one run of `sweep=standard` and one of `sweep=recall_state`
    (docs/leaderboard.md): the two presets share no task, every task of the committed reference
    has a grid in one of them, and scripts/regenerate-reference.sh runs each preset's quality
    tasks (a task moved from one preset to the other without the script would never run again)."""
    import pandas as pd

    repo = Path(__file__).resolve().parents[2]
    tasks = {}
    for preset in ("standard", "recall_state"):
        cfg = _compose([f"sweep={preset}"], hydra_cfg=True)
        tasks[preset] = {t for grid in _grids(cfg.hydra.sweeper) for t in _tasks_of(grid)}
    assert not tasks["standard"] & tasks["recall_state"]
    held = set(
        pd.read_parquet(repo / "results/reference/results.parquet", columns=["task"])["task"]
    )
    assert held <= tasks["standard"] | tasks["recall_state"]
    script = (repo / "scripts/regenerate-reference.sh").read_text(encoding="utf-8")
    listed = {
        name: set(re.search(rf"^{name}=([\w,]+)$", script, re.M).group(1).split(","))
        for name in ("STANDARD", "RECALL_STATE")
    }
    assert listed["RECALL_STATE"] == tasks["recall_state"]
    assert listed["STANDARD"] == tasks["standard"] - {"throughput", "decode"}


@pytest.mark.parametrize("sweep", SWEEPS)
def test_a_tuned_setting_is_tuned_in_one_grid_per_variant(sweep):
    """A `seeds_at_best` grid picks its winner per grid: a variant in a grid and in its
    extension (the same setting, more learning rates) got seeds 1 and 2 at both grids' winners
    wherever the two differed. Each variant's tuned setting is in exactly one grid."""
    cfg = _compose([f"sweep={sweep}"], hydra_cfg=True)
    by_setting: dict[str, list[str]] = {}
    for grid in _grids(cfg.hydra.sweeper):
        if "seeds_at_best" not in grid:
            continue
        skip = {"variant", "task.lr", "task.layer_lr", "seed", "seeds_at_best", "expected_s"}
        setting = repr(sorted((k, str(v)) for k, v in grid.items() if k not in skip))
        listed = str(grid.variant)
        names = _expand(listed) if listed.startswith("glob(") else listed.split(",")
        by_setting.setdefault(setting, []).extend(names)
    for setting, variants in by_setting.items():
        twice = sorted({v for v in variants if variants.count(v) > 1})
        assert not twice, f"{sweep}: {twice} in two grids of one setting {setting}"
