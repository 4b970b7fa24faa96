"""The decode task: what it records, that the state it reports is the state held, that a wrong
incremental form is not timed, and that a variant without one is unsupported."""

from __future__ import annotations

import pytest
import torch

from attnbench import UnsupportedError
from attnbench.incremental import INCREMENTAL, register_incremental
from attnbench.task import JobContext, build_task
from attnbench.variant import VARIANTS, register_variant
from attnbench.variants.softmax import SoftmaxAttention, SoftmaxIncremental

FAST = {"min_run_time": 0.01, "min_samples": 4, "max_timing_s": 0.5}


def _run(variant="softmax", variant_params=None, **task_params):
    ctx = JobContext(variant, variant_params or {}, torch.device("cpu"), torch.float32, 0, 1)
    task = build_task("decode", {**FAST, **task_params})
    result = task.measure(ctx)
    return {p.metric: p for p in result.points}, result.details, task


def test_records_every_declared_metric_at_the_context_length():
    # a 4 MiB cache: the probe reads peaks of a few hundred KiB as less than the state once its
    # process has served other measurements (seen after the memory-scaling tests: 0.008 MiB for
    # a 0.16 MiB cache), and such a reading is withheld (below); 4 MiB read 5.9 MiB there
    points, details, task = _run(seq_len=2048, new_tokens=4, n_heads=4, head_dim=64)
    assert set(points) == {m.name for m in task.metrics}
    assert all(p.x_name == "seq_len" and p.x_value == 2048 for p in points.values())
    per_token_s = points["decode_ms_per_token"].value / 1e3
    assert points["tokens_per_s"].value == pytest.approx(1 / per_token_s)
    assert points["decode_ratio"].value > 0 and points["prefill_ratio"].value > 0
    assert details["correctness_check"].startswith("prefill 88 + 8 steps == causal forward at n=96")
    # softmax's cache is read by PyTorch's operators in the prefill and at every step
    assert details["prefill_kernel_path"] == details["decode_kernel_path"] == "torch operators"


def test_a_decode_record_names_the_kernel_path_of_its_prefill_and_its_steps():
    """Each timing says what ran (attnbench.toolkit.kernel_path): a kernel noted during one
    untimed prefill and one untimed step, recorded beside the timings."""
    from attnbench.toolkit import kernel_path

    _, details, _ = _run("window", {"window": 8}, seq_len=64, new_tokens=2, n_heads=2, head_dim=16)
    for key in ("prefill_kernel_path", "decode_kernel_path"):
        assert details[key] == "torch operators" or "kernel (" in details[key]
    with kernel_path.recording() as paths:
        kernel_path.note("tile kernel (AVX2)")
    assert kernel_path.described(paths) == "tile kernel (AVX2)"


@pytest.mark.parametrize(
    ("variant", "params", "elements"),
    [
        ("softmax", {}, 64 * 2 * (16 + 16)),  # keys and values of the 64 context tokens
        ("linear", {}, 2 * 16 * (16 + 1)),  # S and the normaliser's key sum, at any length
        ("decay", {}, 2 * 16 * 16),
        ("window", {"window": 8}, 8 * 2 * (16 + 16)),  # the ring of the 8 latest
    ],
)
def test_state_bytes_are_the_state_held_after_the_context(variant, params, elements):
    points, details, _ = _run(variant, params, seq_len=64, new_tokens=2, n_heads=2, head_dim=16)
    assert details["state_elements"] == elements
    assert points["state_bytes"].value == 4 * elements


def test_the_prefill_is_timed_only_up_to_prefill_max_len():
    points, details, _ = _run(seq_len=64, new_tokens=2, prefill_max_len=32)
    assert "prefill_ms" not in points and "decode_ms_per_token" in points
    assert details["prefill_timing"] == "not timed: seq_len 64 > prefill_max_len"


def test_a_variant_without_an_incremental_form_is_unsupported_with_the_reason():
    with pytest.raises(UnsupportedError, match="not causal"):
        _run("sinkhorn", seq_len=32, new_tokens=2)


def test_an_incremental_form_that_disagrees_with_the_forward_is_not_timed():
    """A KV cache that drops the oldest key: right shapes, plausible numbers, wrong maths."""

    class Forgetful(SoftmaxIncremental):
        def _attend(self, q, t, keys, values):
            if t == 0:
                return super()._attend(q, t, keys, values)
            return super()._attend(q, t - 1, keys[:, :, 1:], values[:, :, 1:])

    register_variant("test_forgetful")(type("ForgetfulSoftmax", (SoftmaxAttention,), {}))
    register_incremental("test_forgetful")(Forgetful)
    try:
        with pytest.raises(ValueError, match="incremental form disagrees with the causal"):
            _run("test_forgetful", seq_len=64, new_tokens=2)
    finally:
        VARIANTS.unregister("test_forgetful")
        INCREMENTAL.unregister("test_forgetful")


# wrong incremental form → (what its outputs become, the sentence the job fails with). The check
# decodes 66 tokens (seq_len 64 + 2 new) as a prefill of 58 and 8 steps, 4 heads of 16 channels
_PREFILL = r"the contract is \(B, H, n, Dv\) = \(1, 4, 58, 16\) torch\.float32 on cpu"
WRONG_FORMS = {
    "test_form_a_channel_short": (
        lambda out, n: out[..., :-1],
        r"returned \(1, 4, 58, 15\) torch\.float32 on cpu from prefill; " + _PREFILL,
    ),
    "test_form_last_position": (
        lambda out, n: out[:, :, -1:],
        r"returned \(1, 4, 1, 16\) torch\.float32 on cpu from prefill; " + _PREFILL,
    ),
    # within tolerance of the forward: without the check an installed plugin gets an ok record
    "test_form_float64": (
        lambda out, n: out.double(),
        r"returned \(1, 4, 58, 16\) torch\.float64 on cpu from prefill; " + _PREFILL,
    ),
    "test_form_steps_a_channel_short": (
        lambda out, n: out[..., :-1] if n == 1 else out,
        r"returned \(1, 4, 1, 15\) torch\.float32 on cpu from step; the contract is "
        r"\(B, H, n, Dv\) = \(1, 4, 1, 16\)",
    ),
}


@pytest.mark.parametrize("name", list(WRONG_FORMS))
def test_an_incremental_form_whose_outputs_break_the_contract_fails_naming_it(name):
    """A right forward beside a form whose prefill or step returns the wrong shape or dtype:
    the job fails with one sentence naming what came back and what was expected, before
    anything is timed (without the check: an unrelated RuntimeError, or an ok record)."""
    cut, message = WRONG_FORMS[name]

    class WrongForm(SoftmaxIncremental):
        def _extend(self, q, k, v):
            return cut(super()._extend(q, k, v), q.shape[-2])

    register_variant(name)(type("RightSoftmax", (SoftmaxAttention,), {}))
    register_incremental(name)(WrongForm)
    try:
        with pytest.raises(
            ValueError, match=rf"^the incremental form of variant '{name}' {message}"
        ):
            _run(name, seq_len=64, new_tokens=2, head_dim=16)
    finally:
        VARIANTS.unregister(name)
        INCREMENTAL.unregister(name)


def test_bad_sizes_are_one_clear_sentence():
    with pytest.raises(ValueError, match=r"task.new_tokens must be >= 1, got 0"):
        build_task("decode", {"new_tokens": 0})


@pytest.mark.parametrize(("variant", "per_kv_head"), [("softmax", True), ("decay", False)])
def test_grouped_query_heads_shrink_the_state_by_the_group(variant, per_kv_head):
    """4 query heads on 1 key/value head: softmax's KV cache is a quarter of the ungrouped one;
    decay's state is per query head (its λ differs per head), so it does not shrink."""
    grouped, details, _ = _run(variant, seq_len=64, new_tokens=2, n_kv_heads=1, head_dim=16)
    full, _, _ = _run(variant, seq_len=64, new_tokens=2, head_dim=16)
    shrink = 4 if per_kv_head else 1
    assert grouped["state_bytes"].value * shrink == full["state_bytes"].value
    assert details["kv_heads"] == 1
    assert details["correctness_check"].startswith("prefill 58 + 8 steps == causal forward")


def test_key_value_heads_must_divide_the_query_heads():
    with pytest.raises(ValueError, match=r"task.n_kv_heads=3 must divide task.n_heads=4"):
        build_task("decode", {"n_kv_heads": 3})


def test_a_peak_memory_reading_below_the_state_held_is_not_recorded(monkeypatch):
    """The state's size is known exactly; a probe reading under it is memory the probe's process
    reused, not a measurement (seen: 0.9 MiB for a 2 MiB cache)."""
    import attnbench.tasks.decode as decode

    monkeypatch.setattr(decode, "isolated_cpu_peak", lambda *args: 0.01)
    points, details, _ = _run(seq_len=256, new_tokens=2, n_heads=2, head_dim=16)
    assert "decode_peak_mib" not in points
    assert details["decode_peak"].startswith("not recorded: the probe read 0.01 MiB, less than")


@pytest.mark.parametrize("variant", ["softmax", "linear", "window"])
def test_the_decoded_outputs_error_is_recorded_and_judged(variant):
    """Prefill + steps in float32 against the same in float64: within the declared 10⁻⁵ of
    the output's scale, so decode_accurate is 1; the outlier inputs' error is recorded too."""
    points, details, task = _run(variant, seq_len=128, new_tokens=2, n_heads=2, head_dim=16)
    assert 0 < points["max_abs_error"].value <= 1e-5 * details["error_scale"]
    assert points["rms_error"].value <= points["max_abs_error"].value
    assert points["outlier_max_abs_error"].value > 0
    assert points["decode_accurate"].value == 1.0
    assert set(task.accuracy) == set(task.steadiness)


@pytest.mark.parametrize(
    ("variant", "per_token"),
    [
        # keys and values of every token held after each of the 4 steps: 64 + 1 … 64 + 4
        ("softmax", lambda t: t * 2 * (16 + 16)),
        ("linear", lambda t: 2 * 16 * (16 + 1)),  # the fixed state, whatever the length
    ],
)
def test_a_step_reads_the_state_the_batch_holds_at_the_rate_recorded(variant, per_token):
    """B = 8 sequences: ``step_bytes`` is exact arithmetic on the state each step holds
    (elements × 4 bytes × B, averaged over the generated tokens), the achieved rate is those
    bytes over the per-token latency, and the bandwidth fraction is that over the machine's
    read rate measured beside it."""
    points, _, _ = _run(variant, seq_len=64, new_tokens=4, batch_size=8, n_heads=2, head_dim=16)
    expected = 8 * 4 * sum(per_token(64 + i + 1) for i in range(4)) / 4
    assert points["step_bytes"].value == expected
    per_token_s = points["decode_ms_per_token"].value / 1e3
    assert points["achieved_gbs"].value == pytest.approx(expected / per_token_s / 1e9)
    assert points["bandwidth_fraction"].value == pytest.approx(
        points["achieved_gbs"].value / points["peak_gbs"].value
    )


def test_the_bandwidth_calibration_reads_its_buffer_at_a_plausible_rate(monkeypatch):
    """The read rate is its buffer's bytes over the fastest sum: positive, finite, and within
    what any machine's memory gives (0.1 GB/s to 100 TB/s); a buffer four times as large
    reads at the same order of rate (the count is of the bytes read, not of the calls)."""
    from attnbench.toolkit import timed

    cpu = torch.device("cpu")
    rate = timed.read_bandwidth_gbs(cpu, repeats=3)
    assert 0.1 < rate < 1e5
    monkeypatch.setitem(timed.BANDWIDTH_BYTES, "cpu", 1024 * 2**20)
    larger = timed.read_bandwidth_gbs(cpu, repeats=2)
    assert 0.3 < larger / rate < 3.3  # a busy machine moves both; a miscount: 0.25 or 4


def test_batch_sizes_below_one_are_refused_in_one_sentence():
    with pytest.raises(ValueError, match="batch_size"):
        build_task("decode", {"batch_size": 0})
