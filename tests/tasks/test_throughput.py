from __future__ import annotations

import math
import statistics

import pytest
import torch
from conftest import ScaledGradient

from attnbench import VariantShape, build_variant
from attnbench.task import JobContext, build_task
from attnbench.task_info import TaskInfo
from attnbench.tasks.throughput import Throughput
from attnbench.tasks.throughput.packed import drawn_lengths


def _softmax():
    return build_variant("softmax", {}, VariantShape(1, 4, 4))


def _ctx(variant="softmax", **params):
    return JobContext(
        variant_name=variant,
        variant_params=params,
        device=torch.device("cpu"),
        dtype=torch.float32,
        seed=0,
        threads=1,
    )


def _one_sequence_metrics(task) -> set[str]:
    """The metrics a job of one sequence records: every declared one but task.doc_lengths's."""
    packed = {"boundaries_ms", "document_mask_ms", "padded_fraction"}
    return {m.name for m in task.metrics if not m.name.startswith("packed_")} - packed


def _run(variant="softmax", **task_params):
    task = build_task("throughput", {"min_run_time": 0.01, **task_params})
    return {p.metric: p for p in task.measure(_ctx(variant)).points}, task


@pytest.mark.parametrize("causal", [False, True])
def test_metrics_are_consistent(causal):
    points, task = _run(seq_len=128, batch_size=2, n_heads=2, head_dim=16, causal=causal)
    assert set(points) == _one_sequence_metrics(task)
    assert all(p.x_name == "seq_len" and p.x_value == 128 for p in points.values())
    fwd_s = points["fwd_ms"].value / 1e3
    assert points["tokens_per_s"].value == pytest.approx(2 * 128 / fwd_s)
    flops = 4 * 2 * 2 * 128**2 * 16 / (2 if causal else 1)  # FlashAttention convention
    assert points["gflops_fwd"].value == pytest.approx(flops / fwd_s / 1e9)
    # a forward+backward call contains a forward and a backward of about twice its cost: its
    # median is clearly above the forward's (not merely positive)
    assert points["fwd_bwd_ms"].value > 1.2 * points["fwd_ms"].value
    assert points["first_call_ms"].value > 0  # one sample: no ordering with the median is safe


def test_backward_can_be_switched_off():
    points, _ = _run(seq_len=32, backward=False)
    assert "fwd_bwd_ms" not in points and "fwd_ms" in points


def test_linear_reports_its_own_flop_count():
    points, _ = _run("linear", seq_len=256, n_heads=1, head_dim=32)
    fwd_s = points["fwd_ms"].value / 1e3
    assert points["gflops_fwd"].value == pytest.approx(2 * 2 * 256 * 32 * 32 / fwd_s / 1e9)


def test_bad_size_is_one_clear_sentence():
    with pytest.raises(ValueError, match=r"task.seq_len must be >= 1, got 0"):
        _run(seq_len=0)


def test_a_variant_whose_forward_disagrees_with_its_weights_is_not_timed():
    from attnbench.variant import VARIANTS, register_variant
    from attnbench.variants.softmax import SoftmaxAttention

    class Wrong(SoftmaxAttention):  # forward is off by 1% from its own weights·V
        def forward(self, q, k, v, causal=False):
            return 1.01 * super().forward(q, k, v, causal=causal)

    register_variant("test_wrong_forward")(Wrong)
    try:
        with pytest.raises(ValueError, match="forward disagrees with its attention weights"):
            _run("test_wrong_forward", seq_len=64)
    finally:
        VARIANTS.unregister("test_wrong_forward")


@pytest.mark.parametrize(
    "cut, got",
    [
        (lambda w: w[..., :-1], r"\(1, 4, 64, 63\) torch\.float32 on cpu"),  # a key short
        (lambda w: w.double(), r"\(1, 4, 64, 64\) torch\.float64 on cpu"),
    ],
    ids=["a_key_short", "float64"],
)
def test_weights_that_break_the_contract_are_named_before_anything_is_timed(cut, got):
    """The correctness check compares the forward with the variant's own weights: weights of
    another shape or dtype failed it with torch's unrelated size or dtype error."""
    from attnbench.variant import VARIANTS, register_variant
    from attnbench.variants.softmax import SoftmaxAttention

    class WrongWeights(SoftmaxAttention):
        def attention_weights(self, q, k, causal=False):
            return cut(super().attention_weights(q, k, causal=causal))

    register_variant("test_wrong_weights")(WrongWeights)
    try:
        with pytest.raises(
            ValueError,
            match=rf"^variant 'test_wrong_weights' returned attention weights {got}; the contract "
            r"is \(B, H, N, M\) = \(1, 4, 64, 64\) torch\.float32 on cpu",
        ):
            _run("test_wrong_weights", seq_len=64)
    finally:
        VARIANTS.unregister("test_wrong_weights")


def test_correctness_check_is_recorded():
    task = build_task("throughput", {"min_run_time": 0.01, "seq_len": 600, "backward": False})
    result = task.measure(_ctx("window"))
    assert result.details["correctness_check"].startswith("forward == weights·V at n=512")


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"min_samples": 3}, r"task.min_samples must be >= 4 \(the steadiness rule .*\), got 3."),
        ({"steady_rtol": 0}, r"task.steady_rtol must be a finite number > 0, got 0.0."),
        ({"steady_max_rel_iqr": float("nan")}, r"task.steady_max_rel_iqr must be a finite .*nan"),
        ({"max_timing_s": -1}, r"task.max_timing_s must be a finite number >= 0, got -1.0."),
    ],
)
def test_bad_timing_settings_are_one_clear_sentence(params, message):
    with pytest.raises(ValueError, match=message):
        build_task("throughput", params)


def test_each_timing_records_its_steadiness_spread_samples_and_time():
    task = build_task("throughput", {"min_run_time": 0.01, "seq_len": 64, "max_timing_s": 2.0})
    result = task.measure(_ctx())
    points = {p.metric: p.value for p in result.points}
    for prefix in ("fwd", "fwd_bwd"):
        assert points[f"{prefix}_steady"] in (0.0, 1.0)
        assert points[f"{prefix}_ms_rel_iqr"] == pytest.approx(
            points[f"{prefix}_ms_iqr"] / points[f"{prefix}_ms"]
        )
        samples = result.details[f"{prefix}_samples_ms"]  # the window judged, and only it
        assert points[f"{prefix}_samples"] == len(samples) >= 10
        assert min(samples) <= points[f"{prefix}_ms"] <= max(samples)
        how = result.details[f"{prefix}_timing"]
        assert how["steady"] == bool(points[f"{prefix}_steady"])
        assert how["samples_judged"] == len(samples) <= how["samples_taken"]
        assert 0 < how["sampling_s"] < 2.0 + 1.0  # the cap, plus at most the last round


def test_steadiness_flags_are_declared_metrics_and_survive_the_record():
    info = Throughput.describe()
    declared = {m.name for m in info.metrics}
    assert info.steadiness["fwd_ms"] == "fwd_steady"
    assert set(info.steadiness) | set(info.steadiness.values()) <= declared
    assert TaskInfo.from_dict(info.to_dict()).steadiness == info.steadiness
    older = {k: v for k, v in info.to_dict().items() if k != "steadiness"}  # an older record
    assert TaskInfo.from_dict(older).steadiness == {}


@pytest.mark.parametrize("variant", ["softmax", "linear", "window", "decay", "topk"])
def test_grouped_query_heads_are_checked_then_timed(variant):
    """4 query heads on 1 key/value head (multi-query): the job checks the grouped forward
    against the weights on repeated keys and values before timing it, records every declared
    metric and names the key/value heads; natively grouped (softmax, linear, window) or
    repeated by the call (decay, topk), the job is the same."""
    task = build_task(
        "throughput",
        {"min_run_time": 0.01, "seq_len": 96, "n_heads": 4, "n_kv_heads": 1, "head_dim": 16}
        | {"causal": True},
    )
    result = task.measure(_ctx(variant))
    assert {p.metric for p in result.points} == _one_sequence_metrics(task)
    assert result.details["kv_heads"] == 1
    assert result.details["correctness_check"].startswith("forward == weights·V at n=96")


def test_key_value_heads_must_divide_the_query_heads():
    with pytest.raises(ValueError, match=r"task.n_kv_heads=3 must divide task.n_heads=4"):
        build_task("throughput", {"n_kv_heads": 3})


@pytest.fixture
def planted():
    """A planted wrong kernel: softmax whose float32 path silently rounds q and k to bfloat16
    (in its weights too, so it passes the weights·V check); float64 is left exact. Its error
    in float32 is ~10⁻³, a hundred times the declared 10⁻⁵."""
    from attnbench.variant import VARIANTS, register_variant
    from attnbench.variants.softmax import SoftmaxAttention

    def rounded(x):
        return x.bfloat16().float() if x.dtype == torch.float32 else x

    class Planted(SoftmaxAttention):
        def forward(self, q, k, v, causal=False):
            return super().forward(rounded(q), rounded(k), v, causal=causal)

        def attention_weights(self, q, k, causal=False):
            return super().attention_weights(rounded(q), rounded(k), causal=causal)

    register_variant("test_planted_half")(Planted)
    yield "test_planted_half"
    VARIANTS.unregister("test_planted_half")


def test_a_kernel_outside_its_tolerance_is_timed_and_flagged(planted, monkeypatch):
    """The planted kernel passes the weights check (it is self-consistent), so it is timed; its
    error against float64 exceeds the declared tolerance: fwd_accurate is 0. Softmax, the same
    maths computed in float32, stays within it. (The memory probe's process would not know the
    test's variant: its reading is stubbed.)"""
    import attnbench.tasks.throughput as throughput

    monkeypatch.setattr(throughput, "isolated_cpu_peak", lambda *args: 1.0)
    wrong, task = _run(planted, seq_len=96)
    right, _ = _run("softmax", seq_len=96)
    assert wrong["fwd_accurate"].value == 0.0 and right["fwd_accurate"].value == 1.0
    assert wrong["max_abs_error"].value > 1e-4 > 1e-5 > right["max_abs_error"].value
    assert 0 < right["rms_error"].value <= right["max_abs_error"].value
    assert right["outlier_max_abs_error"].value > 0
    assert set(task.accuracy.values()) == {"fwd_accurate", "fwd_bwd_accurate"}
    # every timed value is judged (a packed one by its job failing when it leaks)
    assert set(task.accuracy) == {m for m, f in task.steadiness.items() if f != "packed_steady"}
    # a wrong forward makes the forward+backward timing untrusted too
    assert wrong["fwd_bwd_accurate"].value == 0.0 and right["fwd_bwd_accurate"].value == 1.0


@pytest.fixture
def planted_backward():
    """Softmax whose float32 backward reaches q scaled by 1.001: its forward is exact."""
    from attnbench.variant import VARIANTS, register_variant
    from attnbench.variants.softmax import SoftmaxAttention

    class PlantedBackward(SoftmaxAttention):
        def forward(self, q, k, v, causal=False):
            return super().forward(ScaledGradient.apply(q, 1 + 1e-3), k, v, causal=causal)

    register_variant("test_planted_backward")(PlantedBackward)
    yield "test_planted_backward"
    VARIANTS.unregister("test_planted_backward")


def test_a_backward_outside_its_tolerance_is_timed_and_flagged(planted_backward, monkeypatch):
    """The planted backward's forward is right (fwd_accurate 1) and its q gradient 0.1 % off,
    100× the declared 10⁻⁵ with softmax's gradients of order one: fwd_bwd_accurate is 0 and
    the error is recorded; softmax's own float32 gradients stay within (measured 5·10⁻⁷)."""
    import attnbench.tasks.throughput as throughput

    monkeypatch.setattr(throughput, "isolated_cpu_peak", lambda *args: 1.0)
    wrong, _ = _run(planted_backward, seq_len=64, max_timing_s=0.2)
    right, _ = _run("softmax", seq_len=64, max_timing_s=0.2)
    assert wrong["fwd_accurate"].value == 1.0 and wrong["fwd_bwd_accurate"].value == 0.0
    assert right["fwd_bwd_accurate"].value == 1.0
    assert wrong["grad_error"].value > 1e-4 > 1e-5 > right["grad_error"].value > 0


def test_peak_fraction_is_the_declared_flops_over_the_measured_gemm_rate():
    points, _ = _run(seq_len=128, n_heads=2, head_dim=16)
    fwd_s = points["fwd_ms"].value / 1e3
    assert points["gflops_fwd"].value == pytest.approx(4 * 2 * 128**2 * 16 / fwd_s / 1e9)
    assert points["peak_gflops"].value > 0
    assert points["peak_fraction"].value == pytest.approx(
        points["gflops_fwd"].value / points["peak_gflops"].value
    )


def test_outlier_inputs_are_flashattention3s():
    """N(0, 100) added at 0.1 % of the entries: over 10⁶ entries the count of changed entries is
    Binomial(10⁶, 10⁻³), 1000 ± 32 (five standard deviations allowed), and the added values have
    a standard deviation of 10 (±5 % at ~1000 samples: its standard error is ~2.2 %)."""
    from attnbench.toolkit.timed import outlier_inputs

    x = torch.zeros(1000, 1000, dtype=torch.float64)
    spikes = outlier_inputs(x, torch.Generator().manual_seed(0))
    changed = spikes[spikes != 0]
    assert abs(changed.numel() - 1000) <= 5 * 32
    assert float(changed.std()) == pytest.approx(10.0, rel=0.1)


def test_outliers_are_added_on_the_inputs_device():
    """The generator draws on the CPU; the inputs may live elsewhere (CUDA; here meta)."""
    from attnbench.toolkit.timed import outlier_inputs

    x = torch.zeros(2, 3, device="meta", dtype=torch.float64)
    assert outlier_inputs(x, torch.Generator().manual_seed(0)).device.type == "meta"


def test_a_kernel_without_a_float64_reference_records_no_error_and_no_flag():
    """A library kernel that refuses float64 (half-precision-only) is still timed: its error is
    unmeasured, said in the details, and no accuracy flag is invented."""
    from attnbench import UnsupportedError
    from attnbench.toolkit.timed import error_metrics, kernel_errors

    def run(xs, dtype):
        if dtype == torch.float64:
            raise UnsupportedError("half only")
        return xs[0].to(dtype)

    errors = kernel_errors(run, [torch.zeros(4, dtype=torch.float64)], torch.float32, None)
    variant = _softmax()
    values, details = error_metrics(errors, variant, torch.float32, "fwd_accurate")
    assert values == {} and "no float64 reference: half only" in details["kernel_error"]


def test_an_overflowing_kernel_is_flagged_not_failed():
    """Float16 overflowing where float64 does not: the error is not finite; the job records no
    error value (a non-finite point would fail it), says why, and sets the flag to 0."""
    from attnbench.toolkit.timed import error_metrics, kernel_errors

    def run(xs, dtype):
        return (xs[0] * 1e5).to(dtype)  # 1e5 > float16's largest, 65504: inf

    inputs = [torch.ones(4, dtype=torch.float64)]
    errors = kernel_errors(run, inputs, torch.float16, torch.Generator().manual_seed(0))
    values, details = error_metrics(errors, _softmax(), torch.float16, "fwd_acc")
    assert values == {"fwd_acc": 0.0}
    assert "not finite in float16" in details["kernel_error"]


def test_a_record_names_the_kernel_path_its_timing_ran():
    """Softmax runs PyTorch's operators; window at its paper's size runs the compiled tile
    kernel where it is built for this host (for its capability: "tile kernel (AVX2)"), else its
    SDPA path, and the record says which: timings of the two paths are not the same measurement."""
    from attnbench.toolkit import kernel_path
    from attnbench.variants.kernels import tile

    small = {"seq_len": 256, "batch_size": 1, "n_heads": 2, "head_dim": 16, "backward": False}
    task = build_task("throughput", {"min_run_time": 0.01, **small})
    softmax = task.measure(_ctx("softmax"))
    assert softmax.details["fwd_kernel_path"] == kernel_path.TORCH_OPERATORS
    window = task.measure(_ctx("window", window=64))
    expected = tile.path() if tile._load() else kernel_path.TORCH_OPERATORS
    assert window.details["fwd_kernel_path"] == expected


def test_kernel_paths_are_recorded_only_inside_a_recording():
    from attnbench.toolkit import kernel_path

    kernel_path.note("nobody listens")
    with kernel_path.recording() as outer:
        kernel_path.note("a")
        with kernel_path.recording() as inner:
            kernel_path.note("b")
    assert outer == {"a", "b"} and inner == {"b"}
    assert kernel_path.described(outer) == "a, b"
    assert kernel_path.described(set()) == kernel_path.TORCH_OPERATORS


def test_packed_documents_are_timed_against_the_padded_batch(monkeypatch):
    """task.doc_lengths: the packed call against the padded batch in alternating rounds, the
    boundaries and the dense document mask timed apart, the packed outputs checked against the
    documents alone (exactly equal for softmax's split path); seq_len becomes their sum."""
    from attnbench.tasks.throughput import packed

    timings = []

    def kept(*args, **kwargs):
        timings.append(packed_time_against(*args, **kwargs))
        return timings[-1]

    packed_time_against = packed.time_against
    monkeypatch.setattr(packed, "time_against", kept)
    points, task = _run(doc_lengths=[48, 16, 32], n_heads=2, head_dim=16, max_timing_s=0.3)
    assert task.params.seq_len == 96
    assert all(p.x_name == "seq_len" and p.x_value == 96 for p in points.values())
    assert points["packed_error"].value == 0.0
    assert points["padded_fraction"].value == pytest.approx(1 - 96 / (3 * 48))
    # the packed call's timing against the padded batch: its median of the rounds' ratios (a
    # ratio of the medians differed from it by 1.5x under another process's load)
    (timing,) = timings
    assert points["packed_ratio"].value == timing.ratio and timing.ratio > 0
    assert points["packed_ms"].value == pytest.approx(timing.median_ms)
    assert points["boundaries_ms"].value > 0 and points["document_mask_ms"].value > 0


def test_a_packed_call_that_leaks_fails_the_job():
    """A variant claiming a one-pass packed form that ignores the boundaries: its packed time is
    not recorded, the job fails naming the leak."""
    from attnbench.variant import VARIANTS, register_variant
    from attnbench.variants.softmax import SoftmaxAttention

    class Leaky(SoftmaxAttention):
        packing = "native"

        def forward(self, q, k, v, causal=False, cu_seqlens=None):
            return super().forward(q, k, v, causal=causal)

    register_variant("test_planted_leak")(Leaky)
    try:
        with pytest.raises(ValueError, match="leaks across documents"):
            _run("test_planted_leak", doc_lengths=[20, 12], causal=True, n_heads=2, head_dim=8)
    finally:
        VARIANTS.unregister("test_planted_leak")


@pytest.mark.parametrize(
    ("params", "fix"),
    [
        ({"doc_lengths": [], "causal": True}, "whole document lengths >= 1"),
        ({"doc_lengths": [64, 0], "causal": True}, "whole document lengths >= 1"),
        ({"doc_lengths": [64, 32], "causal": True, "seq_len": 100}, "sum to 96 tokens"),
        ({"doc_lengths": [64, 32], "doc_median": 16}, "list the documents or draw them"),
        ({"doc_median": 0}, "whole number of tokens >= 1"),
        ({"doc_median": 2.5}, "whole number of tokens >= 1"),
        ({"doc_median": 16, "doc_sigma": -1.0}, "finite number >= 0"),
        ({"doc_median": 16, "doc_sigma": float("nan")}, "finite number >= 0"),
        ({"doc_sigma": 2.0}, "none are drawn: add task.doc_median"),
    ],
)
def test_bad_document_lengths_are_refused_in_one_sentence(params, fix):
    with pytest.raises(ValueError, match=fix):
        build_task("throughput", params)


def test_drawn_documents_fill_the_sequence_with_log_normal_lengths():
    """task.doc_median: lengths drawn one after another until seq_len, the last cut to fit."""
    lengths = drawn_lengths(4096, 256, 1.0, torch.Generator().manual_seed(0))
    assert sum(lengths) == 4096 and min(lengths) >= 1
    assert lengths == drawn_lengths(4096, 256, 1.0, torch.Generator().manual_seed(0))
    assert drawn_lengths(1000, 100, 0.0, torch.Generator()) == [100] * 10
    # a huge spread draws documents of 1 token or the whole room left, never overflows exp
    wide = drawn_lengths(4096, 8, 1e6, torch.Generator().manual_seed(0))
    assert sum(wide) == 4096 and min(wide) >= 1
    # the median of the draws is the stated one: about 4000 draws of log-normal(log 256, 1) (mean
    # 256·e^0.5 = 422 tokens) fill 1.7M tokens; the sample median's log has a standard deviation
    # of 1.2533 / sqrt(4000) = 0.020, so its distance from log 256 stays below 0.1 (five of them)
    many = drawn_lengths(1_700_000, 256, 1.0, torch.Generator().manual_seed(1))[:-1]  # last: cut
    assert len(many) > 3500
    assert abs(math.log(statistics.median(many)) - math.log(256)) < 0.1
    # and their spread the stated one: the logs' interquartile range is 1.349 sigma (its sample
    # value's relative error at n = 4000 is about 2 %)
    logs = sorted(math.log(x) for x in many)
    quarter = len(logs) // 4
    assert logs[3 * quarter] - logs[quarter] == pytest.approx(1.349, rel=0.1)


def test_a_job_of_drawn_documents_records_them_at_its_seq_len():
    task = build_task(
        "throughput",
        {"min_run_time": 0.01, "doc_median": 24, "seq_len": 160, "causal": True},
    )
    task.params.n_heads, task.params.head_dim, task.params.max_timing_s = 2, 8, 0.3
    result = task.measure(_ctx("softmax"))
    lengths = result.details["doc_lengths"]
    assert sum(lengths) == 160 and len(lengths) > 1
    assert {(p.x_name, p.x_value) for p in result.points} == {("seq_len", 160)}
    assert next(p.value for p in result.points if p.metric == "packed_error") == 0.0


def test_a_packed_job_leaves_out_a_reading_the_platform_does_not_give(monkeypatch):
    """Where /proc/stat is not there (not Linux) the foreign CPU share and the load are NaN: a
    packed job leaves them out of its record, as every timed job does, instead of failing on a
    non-finite point."""
    from attnbench.toolkit import timing

    monkeypatch.setattr(timing, "foreign_cpu_share", lambda before, after: math.nan)
    monkeypatch.setattr(timing, "load_average", lambda: math.nan)
    points, _ = _run(doc_lengths=[16, 16], n_heads=2, head_dim=16, max_timing_s=0.2)
    assert "packed_ms" in points
    assert not any("foreign_cpu" in name or name == "load_avg" for name in points)
    assert all(math.isfinite(p.value) for p in points.values())


def test_cuda_graph_timing_off_a_gpu_is_unsupported_with_its_fix():
    """``cuda_graph`` replays CUDA graphs: on the CPU the job is unsupported (a record, not a
    crash), and the sentence names the setting and what to do."""
    from attnbench.variant import UnsupportedError

    with pytest.raises(UnsupportedError, match=r"task.cuda_graph=true .* needs device=cuda"):
        _run(seq_len=32, cuda_graph=True)


def test_cuda_graph_timing_of_packed_documents_is_refused_in_one_sentence():
    with pytest.raises(ValueError, match=r"task.cuda_graph=true replays one sequence.*drop one"):
        build_task("throughput", {"cuda_graph": True, "doc_lengths": [16, 16]})


def test_a_graph_replay_off_cuda_is_refused_before_anything_runs():
    """The toolkit's `graphed` has no graphs to capture off CUDA: it refuses, naming the call,
    and never calls it (a call run eagerly instead would be timed as if replayed)."""
    from attnbench.toolkit.timed import graphed
    from attnbench.variant import UnsupportedError

    calls = []
    with pytest.raises(UnsupportedError, match=r"the forward can be replayed .* on CUDA only"):
        graphed("the forward", lambda: calls.append(1), torch.device("cpu"))
    assert not calls


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_graph_timing_replays_both_calls_and_says_so(monkeypatch):
    """Each timed call, the variant's and dense SDPA's, forward and forward+backward, is the
    replay of a captured graph (a spy on `graphed` counts the captures and the replays)."""
    import attnbench.tasks.throughput as throughput
    from attnbench.toolkit.timed import graphed

    replays: dict[str, int] = {}

    def spy(what, call, device):
        replay = graphed(what, call, device)
        replays[what] = 0

        def counted():
            replays[what] += 1
            replay()

        return counted

    monkeypatch.setattr(throughput, "graphed", spy)
    task = build_task("throughput", {"min_run_time": 0.01, "seq_len": 256, "cuda_graph": True})
    ctx = _ctx()
    ctx.device, ctx.dtype = torch.device("cuda"), torch.bfloat16
    result = task.measure(ctx)
    points = {p.metric: p for p in result.points}
    assert set(replays) == {"the forward", "the fwd+bwd", "dense SDPA"}
    assert all(n >= points["fwd_samples"].value for n in replays.values()), replays
    assert result.details["fwd_kernel_path"].endswith("replayed as a CUDA graph")
