"""The per-machine tuning of kernel configurations (`attnbench.variants.kernels.autotune`): a
choice is measured once per machine and shape class, cached in this machine's file only, never
measured inside a timed region, re-measured after a corrupt file (one warning), and named in
what a timed call records."""

from __future__ import annotations

import json
import time
import warnings

import pytest

from attnbench.toolkit import kernel_path
from attnbench.toolkit.timing import timed_region
from attnbench.variants.kernels import autotune

CANDIDATES = [{"tile": 8}, {"tile": 16}, {"tile": 32}]
SLEEP_S = {8: 0.004, 16: 0.0005, 32: 0.002}  # tile 16 is the fastest by 4x or more


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(autotune.CACHE_ENV, str(tmp_path / "tuning"))
    monkeypatch.delenv(autotune.SWITCH_ENV, raising=False)
    autotune.forget()
    yield
    autotune.forget()


class Probe:
    """Calls that sleep by their configuration, counting how many were made."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, config):
        def call():
            self.calls += 1
            time.sleep(SLEEP_S[config["tile"]])

        return call


def test_the_fastest_candidate_is_chosen_once_and_then_read_from_this_machines_file():
    probe = Probe()
    with kernel_path.recording() as ran:
        assert autotune.choose("k", {"n": 1}, CANDIDATES, probe) == {"tile": 16}
    assert probe.calls > 0
    assert ran.tuned == {"k": "tile=16 (tuned)"}
    written = json.loads(autotune.cache_file().read_text())
    assert written["machine"] == autotune.machine()
    (entry,) = written["entries"].values()
    assert entry["choice"] == {"tile": 16} and set(entry["ms"]) == {"tile=8", "tile=16", "tile=32"}

    autotune.forget()  # a new process: the file answers, nothing is measured
    again = Probe()
    assert autotune.choose("k", {"n": 1}, CANDIDATES, again) == {"tile": 16}
    assert again.calls == 0
    # another shape class, or the same at another thread count, is tuned on its own
    other = Probe()
    assert autotune.choose("k", {"n": 2}, CANDIDATES, other) == {"tile": 16}
    assert other.calls > 0


def test_a_file_of_another_machine_or_capability_is_never_used(monkeypatch):
    autotune.choose("k", {"n": 1}, CANDIDATES, Probe())
    path = autotune.cache_file()
    body = json.loads(path.read_text())
    body["entries"] = {key: {**e, "choice": {"tile": 32}} for key, e in body["entries"].items()}
    body["machine"] = {**body["machine"], "cpu": "another CPU"}
    path.write_text(json.dumps(body))  # a copied file: the right name, another machine inside
    autotune.forget()
    probe = Probe()
    assert autotune.choose("k", {"n": 1}, CANDIDATES, probe) == {"tile": 16}
    assert probe.calls > 0
    # and another machine's identity names another file
    here = autotune.cache_file()
    monkeypatch.setattr(autotune, "machine", lambda: {**body["machine"], "capability": "AVX2"})
    assert autotune.cache_file() != here


def test_a_corrupt_file_is_tuned_again_with_one_warning():
    path = autotune.cache_file()
    path.parent.mkdir(parents=True)
    path.write_text('{"format": 1, "entries": {"k|')  # cut short
    with pytest.warns(RuntimeWarning, match="is not a tuning file") as caught:
        assert autotune.choose("k", {"n": 1}, CANDIDATES, Probe()) == {"tile": 16}
        assert autotune.choose("k", {"n": 2}, CANDIDATES, Probe()) == {"tile": 16}
    assert len([w for w in caught if "tuning" in str(w.message)]) == 1
    assert len(json.loads(path.read_text())["entries"]) == 2  # rewritten whole


def test_nothing_is_measured_inside_a_timed_region():
    probe = Probe()
    with timed_region(), kernel_path.recording() as ran:
        assert autotune.choose("k", {"n": 1}, CANDIDATES, probe) == CANDIDATES[0]
    assert probe.calls == 0 and not autotune.cache_file().exists()
    assert ran.tuned == {"k": "tile=8 (default)"}
    # the next call outside tunes
    assert autotune.choose("k", {"n": 1}, CANDIDATES, probe) == {"tile": 16}


def test_tuning_off_runs_the_defaults(monkeypatch):
    monkeypatch.setenv(autotune.SWITCH_ENV, "off")
    probe = Probe()
    with kernel_path.recording() as ran:
        assert autotune.choose("k", {"n": 1}, CANDIDATES, probe) == CANDIDATES[0]
    assert probe.calls == 0 and ran.tuned == {"k": "tile=8 (default, tuning off)"}


def test_a_cached_choice_no_longer_among_the_candidates_is_tuned_again():
    autotune.choose("k", {"n": 1}, CANDIDATES, Probe())
    autotune.forget()
    probe = Probe()
    assert autotune.choose("k", {"n": 1}, CANDIDATES[::2], probe) == {"tile": 32}
    assert probe.calls > 0


def test_an_unwritable_folder_warns_once_and_keeps_the_choice(tmp_path, monkeypatch):
    blocker = tmp_path / "a file"
    blocker.write_text("")
    monkeypatch.setenv(autotune.CACHE_ENV, str(blocker / "tuning"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert autotune.choose("k", {"n": 1}, CANDIDATES, Probe()) == {"tile": 16}
        assert autotune.choose("k", {"n": 1}, CANDIDATES, Probe()) == {"tile": 16}
    assert len([w for w in caught if "could not be written" in str(w.message)]) == 1


def test_a_call_too_small_to_tune_runs_the_default_and_caches_nothing():
    probe = Probe()
    with kernel_path.recording() as ran:
        assert (
            autotune.choose("k", {"n": 1}, CANDIDATES, probe, worth_tuning=False) == CANDIDATES[0]
        )
    assert probe.calls == 0 and not autotune.cache_file().exists()
    assert ran.tuned == {"k": "tile=8 (default: too small to tune)"}


def test_a_throughput_record_names_the_configuration_its_kernel_ran():
    from attnbench import build_task, load_plugins
    from attnbench.variants.kernels import pointwise

    if not pointwise._load():
        pytest.skip("the pointwise kernel cannot be built here")
    import torch

    from attnbench.task import JobContext

    load_plugins()
    context = JobContext(
        variant_name="relu2",
        variant_params={},
        device=torch.device("cpu"),
        dtype=torch.float32,
        seed=0,
        threads=1,
    )
    task = build_task(
        "throughput",
        {
            "seq_len": 2048,
            "batch_size": 1,
            "n_heads": 2,
            "head_dim": 16,
            "backward": False,
            "min_run_time": 0.01,
            "max_timing_s": 0.5,
        },
    )
    record = task.measure(context)
    (how,) = record.details["fwd_tuned"].values()
    assert how.endswith("(tuned)") and "query_tile=" in how
    assert json.loads(autotune.cache_file().read_text())["entries"]


def _chunks_of(name: str) -> tuple[int, ...]:
    """The chunk lengths variant ``name`` chooses among (its engine's `CHUNKS`)."""
    from attnbench.variants.kernels import prefix_sums
    from attnbench.variants.recurrent import delta, dplr_chunks, gla, mesa

    engines = {"gla": gla, "mamba2": gla, "mesa": mesa, "delta_net": delta}
    engines |= {"kda": dplr_chunks, "rwkv7": dplr_chunks}
    engines |= {"gated_delta_net": delta, "linear": prefix_sums, "identity": prefix_sums}
    return (engines | {"decay": prefix_sums})[name].CHUNKS


@pytest.mark.parametrize(
    "name",
    [
        *("delta_net", "gated_delta_net", "gla", "mamba2", "linear", "identity", "decay"),
        *("mesa", "kda", "rwkv7"),
    ],
)
def test_the_chunk_length_is_chosen_on_the_machine_and_named(name, tmp_path, monkeypatch):
    """chunk_size 0 (the default): a causal call large enough to tune (mesa's: longer than its
    direct solve takes) runs the machine's choice among its engine's chunks, says which (the
    record's ``fwd_tuned``) and remembers it for its FLOPs; the output is the same whatever the
    chunk (float32, to the declared tolerance); an explicit chunk is honoured, a negative one
    refused."""
    import torch

    from attnbench.variant import VariantShape, build_variant, random_gates

    monkeypatch.setenv(autotune.CACHE_ENV, str(tmp_path))
    autotune.forget()
    n, d = 4096, 16
    variant = build_variant(name, {}, VariantShape(4, d, n))
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 4, n, d, generator=gen) for _ in range(3))
    gates = random_gates(variant, 1, n, head_dim=d, kv_heads=4, generator=gen) or None
    with torch.no_grad(), kernel_path.recording() as ran:
        out = variant(q, k, v, causal=True, gates=gates)
    (how,) = ran.tuned.values()
    chosen = variant.last_chunk
    assert how == f"chunk={chosen} (tuned)" and chosen in _chunks_of(name)
    fixed = build_variant(name, {"chunk_size": 16}, VariantShape(4, d, n))
    fixed.load_state_dict(variant.state_dict())
    with torch.no_grad():
        other = fixed(q, k, v, causal=True, gates=gates)
    assert fixed.last_chunk == 16
    flops = variant.forward_flops(1, 4, n, n, d, d, True)
    assert (fixed.forward_flops(1, 4, n, n, d, d, True) < flops) == (chosen > 16)
    scale = max(1.0, float(other.abs().max()))
    assert float((out - other).abs().max()) <= variant.error_tolerance["float32"] * scale
    with pytest.raises(ValueError, match="chunk_size"):
        build_variant(name, {"chunk_size": -1}, VariantShape(4, d, n))
    autotune.forget()
