"""The modern mixers' learned decay parameters start as their sources draw them, tested as
distributions rather than ranges: a range test passes U(1, 2) for U(1, 16), and U(1, 16) for
U(0, 16).

The sources, read where each variant's docstring names them:

- `gated_delta_net`, `gated_delta_product`: fla's layers (`fla/layers/gated_deltanet.py`,
  `gated_deltaproduct.py`): A ~ U(0, 16) per head, A_log = log A; dt = exp(U(log 1e-3,
  log 0.1)) floored at 1e-4, dt_bias = softplus⁻¹(dt).
- `kda`: fla's KDA model (`fla/models/kda/modeling_kda.py`, ``_init_weights``; its layer alone
  leaves dt_bias at 0 and the model draws it): A ~ U(1, 16) per head; dt as above, drawn for
  every head and key channel.
- `mamba2`: mamba_ssm's `Mamba2` (`mamba_ssm/modules/mamba2.py`): A ~ U(A_init_range), (1, 16)
  by default; dt = exp(U(log dt_min, log dt_max)) clamped below at dt_init_floor; both ranges and
  the floor are the variant's hyperparameters.
- `rwkv7`: fla's `RWKV7Attention._initialize_weights` at layer 0, no draw: checked channel by
  channel.
- `gla` and `fox` own no parameter (their gates come from the shared layer's projections), so
  there is nothing of theirs to draw.

Each distribution check is a Kolmogorov–Smirnov test (scipy) of N = 4096 draws at a fixed seed,
p > 1e-3, plus the lowest and highest draws near the ends: under U(a, b) no draw falls within
10/N of an end's span with probability (1 − 10/N)^N ≈ e^−10, so a range wrong at one end
fails on its own count too (U(1, 16) for U(0, 16): no draw below 1, where 256 are expected),
not only on a KS distance (1/16) twice the test's threshold (1.95/√N = 0.030). Planted wrong
initialisations show each check can fail (`test_the_checks_refuse_…`)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from scipy.stats import kstest

from attnbench import VariantShape, build_variant

N = 4096  # draws of each parameter: heads (heads × key channels for kda's dt)
P_MIN = 1e-3  # a KS p-value below this: not the distribution claimed
# float32 storage: A_log and dt_bias read back through exp and softplus move a draw by about
# 1e-6 of itself (dt_bias ≈ log dt ≈ −9 at most, times float32's 6e-8)
ROUND_OFF = 1e-5


def build(name: str, heads: int = N, kv_heads: int | None = None, d: int = 4, seed: int = 0, **p):
    """``name`` with ``heads`` query heads (and key/value heads: one decay each), parameters
    drawn from ``seed``."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build_variant(name, p, VariantShape(heads, d, 64, n_kv_heads=kv_heads or heads))


def decay_rate(variant) -> torch.Tensor:
    """A = exp(A_log), in float64."""
    return variant.A_log.detach().double().exp().flatten()


def time_step(variant) -> torch.Tensor:
    """dt = softplus(dt_bias), in float64: the step at a raw gate of 0."""
    return F.softplus(variant.dt_bias.detach().double()).flatten()


def uniform_misfit(x: torch.Tensor, a: float, b: float) -> str:
    """What is wrong with the draws ``x`` as U(a, b)'s (module docstring); "" if nothing."""
    x = x.double().flatten()
    n, span = x.numel(), b - a
    slack, gap = ROUND_OFF * max(abs(a), abs(b)), 10 * span / n
    low, high = float(x.min()), float(x.max())
    problems = []
    if low < a - slack or high > b + slack:
        problems.append(f"draws in [{low:.4g}, {high:.4g}], outside [{a:.4g}, {b:.4g}]")
    if low > a + gap or high < b - gap:
        problems.append(f"no draw within {gap:.3g} of an end: lowest {low:.4g}, highest {high:.4g}")
    p = kstest(x.clamp(a, b).numpy(), "uniform", args=(a, span)).pvalue
    if not p > P_MIN:
        problems.append(f"Kolmogorov-Smirnov p = {p:.2g} against U({a:.4g}, {b:.4g})")
    return "; ".join(problems)


def log_uniform_misfit(dt: torch.Tensor, lo: float, hi: float) -> str:
    """What is wrong with ``dt`` as log-uniform on [lo, hi] (log dt ~ U(log lo, log hi)); ""
    if nothing."""
    return uniform_misfit(dt.double().log(), math.log(lo), math.log(hi))


# the plausible wrong initialisations each check must refuse: a neighbour's range, a range that
# is right at one end only, a uniform step where a log-uniform one is drawn, the layer's zero
# dt_bias without the model's draw (kda), a step drawn on the wrong decade
PLANTED = {
    "A ~ U(1, 16) for U(0, 16)": (lambda g: torch.empty(N).uniform_(1, 16, generator=g), "A", 0),
    "A ~ U(0, 16) for U(1, 16)": (lambda g: torch.empty(N).uniform_(0, 16, generator=g), "A", 1),
    "A ~ U(1, 2) for U(1, 16)": (lambda g: torch.empty(N).uniform_(1, 2, generator=g), "A", 1),
    "A ~ U(0, 8) for U(0, 16)": (lambda g: torch.empty(N).uniform_(0, 8, generator=g), "A", 0),
    "dt ~ U(1e-3, 0.1), not log-uniform": (
        lambda g: torch.empty(N).uniform_(1e-3, 0.1, generator=g),
        "dt",
        None,
    ),
    "dt = softplus(0) (fla's KDA layer without its model's init)": (
        lambda g: torch.full((N,), math.log(2.0)),
        "dt",
        None,
    ),
    "dt log-uniform on [1e-4, 0.1]": (
        lambda g: torch.exp(torch.empty(N).uniform_(math.log(1e-4), math.log(0.1), generator=g)),
        "dt",
        None,
    ),
    "dt log-uniform on [1e-3, 1]": (
        lambda g: torch.exp(torch.empty(N).uniform_(math.log(1e-3), 0.0, generator=g)),
        "dt",
        None,
    ),
}


@pytest.mark.parametrize("planted", list(PLANTED))
def test_the_checks_refuse_a_plausible_wrong_initialisation(planted):
    """Each planted draw fails the check the variants' parameters pass: A against U(0, 16) or
    U(1, 16) (the last field: the lower end), dt against log-uniform on [1e-3, 0.1]."""
    draw, what, a_low = PLANTED[planted]
    x = draw(torch.Generator().manual_seed(1))
    misfit = uniform_misfit(x, a_low, 16) if what == "A" else log_uniform_misfit(x, 1e-3, 0.1)
    assert misfit, planted


@pytest.mark.parametrize("name", ["gated_delta_net", "gated_delta_product"])
def test_the_gated_delta_rules_draw_a_and_dt_as_fla_does(name):
    """A ~ U(0, 16) and dt log-uniform on [1e-3, 0.1] (the floor 1e-4 never binds), one each
    per key/value head. Catches A from U(1, 16) (kda's and mamba2's range) or U(0, 8), dt drawn
    uniformly instead of log-uniformly, and gated_delta_product drawing a decay of its own other
    than gated_delta_net's."""
    variant = build(name)
    assert variant.A_log.shape == variant.dt_bias.shape == (N,)
    assert uniform_misfit(decay_rate(variant), 0, 16) == ""
    assert log_uniform_misfit(time_step(variant), 1e-3, 0.1) == ""


def test_kda_draws_a_per_head_and_dt_per_head_and_channel_as_fla_does():
    """A ~ U(1, 16) per key/value head; dt log-uniform on [1e-3, 0.1] over every head × key
    channel, and drawn for each channel: channels 0 and 1 uncorrelated across the heads
    (|r| < 4/√N, four standard errors). Catches A from U(0, 16) or U(1, 2), dt_bias left at 0
    (fla's layer alone), and one dt per head repeated over its channels (r = 1)."""
    variant = build("kda", d=2)
    assert variant.A_log.shape == (N,) and variant.dt_bias.shape == (N, 2)
    assert uniform_misfit(decay_rate(variant), 1, 16) == ""
    dt = F.softplus(variant.dt_bias.detach().double())
    assert log_uniform_misfit(dt, 1e-3, 0.1) == ""
    r = torch.corrcoef(dt.log()[:, :2].T)[0, 1]
    assert abs(float(r)) < 4 / math.sqrt(N), float(r)


def test_mamba2_draws_a_and_dt_as_mamba_ssm_does():
    """The defaults (mamba_ssm's): A ~ U(1, 16), dt log-uniform on [1e-3, 0.1], one each per
    key/value head. Catches A from U(0, 16) (the gated delta rule's) and dt drawn uniformly."""
    variant = build("mamba2")
    assert variant.A_log.shape == variant.dt_bias.shape == (N,)
    assert uniform_misfit(decay_rate(variant), 1, 16) == ""
    assert log_uniform_misfit(time_step(variant), 1e-3, 0.1) == ""


def test_mamba2_draws_from_its_hyperparameters_and_clamps_at_the_floor():
    """a_init 2…3, dt 1e-5…0.1 floored at 1e-4: A ~ U(2, 3); dt = max(log-uniform, 1e-4), so a
    quarter of the draws (log 10 of log 10⁴) sit at the floor, within four standard errors
    (√(¼·¾/N) = 0.0068), and the rest are log-uniform on [1e-4, 0.1]. Catches the defaults
    drawn whatever the hyperparameters, and a floor ignored, applied by redrawing or by raising
    dt_min (no draw sits at the floor then)."""
    floor = 1e-4
    variant = build(
        "mamba2", a_init_min=2.0, a_init_max=3.0, dt_min=1e-5, dt_max=0.1, dt_init_floor=floor
    )
    assert uniform_misfit(decay_rate(variant), 2, 3) == ""
    dt = time_step(variant)
    at_floor = (dt - floor).abs() <= ROUND_OFF * floor
    share = float(at_floor.double().mean())
    assert abs(share - 0.25) < 4 * math.sqrt(0.25 * 0.75 / N), share
    assert log_uniform_misfit(dt[~at_floor], floor, 0.1) == ""


@pytest.mark.parametrize("d", [64, 7])
def test_rwkv7_starts_at_flas_first_layer_on_every_channel(d):
    """At one head (fla's hidden size = D, so its per-width and per-head channel indices agree),
    every channel of w_bias, a_bias, k_k and k_a is fla's layer-0 value, written here from fla's
    ``_initialize_weights``: www = −6 + 6·n/(D−1), zigzag z·|z| with z = (n − (D−1)/2)/((D−1)/2),
    linear n/(D−1) − ½. Catches the zigzag without |z| (equal at the ends and the middle, where
    tests/variants/test_rwkv7.py looks), a shifted or reversed channel order, and a head's
    parameters not repeated over the key/value heads."""
    variant = build("rwkv7", heads=4, kv_heads=2, d=d)
    n = torch.arange(d, dtype=torch.float64)
    linear = n / (d - 1) - 0.5
    zig = (n - (d - 1) / 2) / ((d - 1) / 2)
    zig = zig * zig.abs()
    expected = {
        "w_bias": -6 + 6 * n / (d - 1) + 0.5 + 2.5 * zig,
        "a_bias": -0.19 + 0.3 * zig + 0.4 * linear,
        "k_k": 0.71 - 0.1 * linear,
        "k_a": torch.full((d,), 1.02, dtype=torch.float64),
    }
    for name, values in expected.items():
        got = getattr(variant, name).detach().double()
        assert got.shape == (2, d), name
        torch.testing.assert_close(got, values.expand(2, d), rtol=0, atol=1e-6, msg=name)


@pytest.mark.parametrize("name", ["gla", "fox"])
def test_gla_and_fox_own_no_parameter_to_initialise(name):
    """Their gates are the shared layer's projections (`attnbench.toolkit.layer`), the same for
    every variant: nothing of theirs is drawn. A parameter added to either needs its source's
    initialisation tested here."""
    assert dict(build(name, heads=4).named_parameters()) == {}
