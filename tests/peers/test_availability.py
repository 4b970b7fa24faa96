"""Peers without their libraries or device: listed as unavailable with one sentence, refused as
`unsupported` records, never failures. Runs with and without the ``[peers]`` extra."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

from attnbench.harness.cli.app import CONF_DIR
from attnbench.harness.cli.variants import variant_table
from attnbench.harness.jobs.config import store_configs
from attnbench.harness.jobs.job import run_job
from attnbench.peers.availability import import_problem
from attnbench.variant import VARIANTS, library_version

CUDA_PEERS = {
    "peer_flash_softmax": "flash-attn",
    "peer_xformers_softmax": "xformers",
    "peer_fla_linear": "fla-core",
    "peer_fla_decay": "fla-core",
    "peer_fla_delta_net": "fla-core",
    "peer_fla_gated_delta_net": "fla-core",
    "peer_fla_gla": "fla-core",
    "peer_fla_mamba2": "fla-core",
    "peer_natten_window": "natten",
}
CPU_PEERS = {"peer_local_window": "local-attention", "peer_performer": "performer-pytorch"}


def test_every_peer_names_its_library_and_our_variant():
    peers = set(VARIANTS.names("peer_*"))
    assert peers == set(CUDA_PEERS) | set(CPU_PEERS)
    for name in peers:
        cls = VARIANTS.get(name)
        assert cls.library == {**CUDA_PEERS, **CPU_PEERS}[name]
        assert cls.peer_of == "" or cls.peer_of in VARIANTS, name
    assert VARIANTS.get("peer_performer").peer_of == ""  # FAVOR+ approximates softmax
    ours = [n for n in VARIANTS.names() if not n.startswith("peer_")]
    assert all(VARIANTS.get(n).library == "" and VARIANTS.get(n).peer_of == "" for n in ours)


@pytest.mark.parametrize("name", sorted(CUDA_PEERS))
def test_cuda_peers_are_unavailable_on_cpu_with_one_sentence(name):
    reason = VARIANTS.get(name).unavailable("cpu")
    assert reason == f"{CUDA_PEERS[name]} needs a CUDA device; this job runs on cpu."


def test_a_missing_library_is_one_sentence_with_the_install_command():
    reason = import_problem("no_such_module_xyz", "no-such-dist", "pip install no-such-dist")
    assert reason == "no-such-dist is not installed: pip install no-such-dist."
    assert library_version("no-such-dist") == "no-such-dist (not installed)"
    assert library_version("") == ""


def test_listing_shows_library_and_availability():
    rows = {r["name"]: r for r in variant_table("cpu")}
    assert rows["softmax"]["available"] == "yes" and rows["softmax"]["library"] == ""
    for name in CUDA_PEERS:
        assert rows[name]["available"].endswith("needs a CUDA device; this job runs on cpu.")
    for name, dist in CPU_PEERS.items():
        problem = import_problem(VARIANTS.get(name).module, dist, "x")
        assert rows[name]["available"] == (
            "yes" if not problem else VARIANTS.get(name).unavailable("cpu")
        )
        assert rows[name]["library"].startswith(dist + " ")


@pytest.mark.parametrize("name", ["peer_flash_softmax", "peer_fla_decay"])
def test_an_unavailable_peer_is_an_unsupported_record(tmp_path, name):
    """Validation lets the job through (no ConfigError), and its record says why, naming the
    library and the peer's pair; it is not a failure."""
    store_configs()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose(
            "config",
            overrides=[
                f"results_dir={tmp_path}",
                "device=cpu",
                f"variant={name}",
                "task.seq_len=16",
                "task.min_run_time=0.01",
                "task.min_samples=4",
                "task.max_timing_s=1",
            ],
        )
    record = run_job(cfg)
    assert record.status == "unsupported"
    assert record.error == VARIANTS.get(name).unavailable("cpu")
    assert record.details["peer_of"] == VARIANTS.get(name).peer_of
    assert record.details["variant_library"].startswith(VARIANTS.get(name).library + " ")
