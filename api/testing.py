"""The attention-variant contract as a pytest suite that plugins run in their own CI.

attnbench runs this same suite over every registered variant (built-in or plugin), so a plugin
that passes it here will behave in the benchmark: right shapes, no leak of the future under
``causal=True``, gradients that reach everything trainable, and so on. Ship-with-the-package
follows Hydra's ``hydra.test_utils``: the checks live in one place, and a plugin does not need
attnbench's checkout to run them. Use it from a plugin's test module::

    from attnbench.testing import VariantContractTests


    class TestCosine(VariantContractTests):
        variant = "cosine_softmax"  # the name your entry point registers


    class TestCosineSharp(TestCosine):
        params = {"scale": 20.0}  # the same suite with these hyperparameters

The base class's name does not start with ``Test``, so pytest collects only the subclasses. The
variant is found through the installed entry points (`attnbench.load_plugins`), so install the
plugin into the test environment (``pip install -e '.[test]'``), or import its module in the test
file, before the tests run.

Importing this module needs pytest, which is a test-time dependency of a plugin (put it in the
plugin's ``test`` extra), not a dependency of attnbench. Apart from pytest it uses only torch and
the public API of `attnbench`, so it runs unchanged outside attnbench's own repository.

Every test builds its variant with ``VariantShape(n_heads=3, head_dim=8, max_len=2048)`` (the
grouped-query tests: 4 heads) and the hyperparameters of ``variant_params`` (the class attribute
``params``; by default none: the variant's defaults), on CPU in float32 (plus one
bfloat16 test; the incremental form's equality tests in float64), with parameters initialised
from a fixed seed so a failure reproduces. The incremental form's tests skip, saying why, for a
variant that registers none (it is optional), and the grouped-query test for a form without
``grouped_query``.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any, ClassVar

import pytest
import torch

from attnbench import COST_CLASSES, AttentionVariant, UnsupportedError, VariantShape
from attnbench import build_variant as _build_variant
from attnbench import incremental_form as _incremental_form
from attnbench import load_plugins as _load_plugins
from attnbench import why_no_incremental_form as _why_no_incremental_form
from attnbench.toolkit.timed import gradient_errors as _gradient_errors

__all__ = ["VariantContractTests", "packed_error", "random_qkv"]

H, D = 3, 8  # heads and head dim: small and odd-sized, so a mixed-up axis shows as a shape error
MAX_LEN = 2048  # the longest sequence any test below uses


def random_qkv(
    b: int = 2,
    h: int = H,
    n: int = 16,
    m: int | None = None,
    d: int = D,
    dv: int | None = None,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gaussian q (B,H,N,D), k (B,H,M,D), v (B,H,M,Dv) from a fixed seed (M = N, Dv = D unless
    given).

    Drawn from a private generator, so the inputs do not depend on what ran before.
    """
    m = n if m is None else m
    dv = d if dv is None else dv
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, n, d, generator=g, dtype=dtype)
    k = torch.randn(b, h, m, d, generator=g, dtype=dtype)
    v = torch.randn(b, h, m, dv, generator=g, dtype=dtype)
    return q, k, v


def _make(
    name: str,
    params: dict[str, Any] | None = None,
    max_len: int = MAX_LEN,
    heads: int = H,
    kv_heads: int | None = None,
) -> AttentionVariant:
    """The variant ``name`` with hyperparameters ``params`` (None or {}: the defaults), its
    parameters initialised from seed 0.

    Skips the test, with the variant's one sentence, where it is unavailable on CPU here
    (`AttentionVariant.unavailable`: a wrapped library or a CUDA device missing).

    The seed is set inside a forked RNG state: the same name always gives the same parameters
    (the bfloat16 test compares two instances), and the caller's global RNG is left as it was.
    """
    _load_plugins()  # installed plugins register on import; a no-op after the first call
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        try:
            shape = VariantShape(n_heads=heads, head_dim=D, max_len=max_len, n_kv_heads=kv_heads)
            variant = _build_variant(name, dict(params or {}), shape)
        except UnsupportedError as exc:  # its library is missing here: skip, with the reason
            pytest.skip(str(exc))
    reason = variant.unavailable("cpu")  # the tests run on CPU; a CUDA-only variant skips
    if reason:
        pytest.skip(reason)
    return variant


def gates_of_keys(
    variant: AttentionVariant, k: torch.Tensor, value_dim: int | None = None
) -> dict[str, torch.Tensor]:
    """Raw gates for a gated variant (`AttentionVariant.gates`) as fixed functions of each key
    (B, H_kv, M, D): about unit scale, different for every gate; a "value" gate has
    ``value_dim`` channels (None: D). Gates that follow the keys position by position keep
    every contract test meaningful unchanged: a batch element's gates are its own, perturbing
    the future perturbs only future gates, and repeating a key/value head repeats its gates.
    {} for an ungated variant.

    Computed in float64 from the keys as given and rounded once to their dtype, so that a
    half-precision call gets the float64 call's gates up to that rounding (its keys' own), not
    other gates: in bfloat16 the cosines' arguments i·(j + 1) + 0.5 round to whole numbers past
    128, and a D-term sum rounds at every step."""
    d = k.shape[-1]
    dv = d if value_dim is None else value_dim
    wide = k.to(torch.float64)
    idx = torch.arange(d, device=k.device, dtype=torch.float64)
    gates = {}
    for i, (name, width) in enumerate(sorted(variant.gates.items())):
        if width == "head":
            weights = torch.cos(idx * (i + 1) + 0.5) * (2.0 / d) ** 0.5
            gate = (wide * weights).sum(dim=-1, keepdim=True)
        elif width == "value":  # k times a fixed D×Dv matrix of cosines
            rows = idx[:, None] * (i + 1)
            columns = torch.arange(dv, device=k.device, dtype=torch.float64) * 0.7
            gate = wide @ (torch.cos(rows + columns + 0.5) * (2.0 / d) ** 0.5)
        else:
            gate = wide.roll(i + 1, dims=-1)
        gates[name] = gate.to(k.dtype)
    return gates


def _call(
    variant: AttentionVariant,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
) -> torch.Tensor:
    """``variant(q, k, v, causal)``, with `gates_of_keys` for a gated variant."""
    if variant.gates:
        return variant(q, k, v, causal=causal, gates=gates_of_keys(variant, k, v.shape[-1]))
    return variant(q, k, v, causal=causal)


def _feed(decoder: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The decoder's ``step`` for one token, ``prefill`` for more, with `gates_of_keys` of the
    tokens' keys for a gated variant (the same gates `_call` gives the forward)."""
    gates = gates_of_keys(decoder.variant, k, v.shape[-1]) if decoder.variant.gates else None
    if q.shape[-2] == 1:
        return decoder.step(q, k, v, gates)
    return decoder.prefill(q, k, v, gates)


# documents of a packed sequence in the packing tests: one shorter than a chunk (64) or block,
# one crossing two chunk edges, one of 11; no boundary on a multiple of 64
PACKED_LENGTHS = (37, 80, 11)


def packed_error(
    variant: AttentionVariant, dtype: torch.dtype = torch.float64, causal: bool = True
) -> float:
    """The largest difference between a packed call over `PACKED_LENGTHS` documents
    (``cu_seqlens``) and each document run alone, over max(1, max |alone|): 0 up to rounding
    for a variant that honours document boundaries, the size of the leak for one that does
    not. A variant that refuses packing (`UnsupportedError`) raises it."""
    bounds = [0]
    for length in PACKED_LENGTHS:
        bounds.append(bounds[-1] + length)
    q, k, v = random_qkv(b=2, h=H, n=bounds[-1], d=D, dv=5, seed=11, dtype=dtype)
    gates = gates_of_keys(variant, k, 5) if variant.gates else None
    with torch.no_grad():
        packed = variant(q, k, v, causal=causal, gates=gates, cu_seqlens=bounds)
        alone = torch.cat(
            [
                _call(variant, q[..., a:b, :], k[..., a:b, :], v[..., a:b, :], causal=causal)
                for a, b in pairwise(bounds)
            ],
            dim=-2,
        )
    scale = max(1.0, alone.abs().max().item())
    return ((packed - alone).abs().max() / scale).item()


class VariantContractTests:
    """The contract tests for one variant, named by the ``variant_name`` fixture and built with
    the hyperparameters of the ``variant_params`` fixture.

    Subclass it and set ``variant`` to the registered name (and ``params`` to hyperparameters
    other than the defaults, e.g. ``{"negative_eigenvalues": True}``); or, to run it over several
    variants or settings, override the ``variant_name`` and ``variant_params`` fixtures (e.g.
    with ``params=[...]``), as attnbench's own suite does over its whole registry.
    """

    variant: ClassVar[str] = ""  # the registered name of the variant under test
    # hyperparameters the variant is built with in every test; {}: its defaults
    params: ClassVar[dict[str, Any]] = {}

    @pytest.fixture
    def variant_name(self) -> str:
        """The name of the variant under test: the class attribute ``variant``."""
        if not self.variant:
            pytest.fail(
                f"{type(self).__name__} runs the variant contract tests but names no variant; "
                "set the class attribute `variant` to the registered name."
            )
        return self.variant

    @pytest.fixture
    def variant_params(self) -> dict[str, Any]:
        """The hyperparameters of the variant under test: the class attribute ``params`` ({}:
        the defaults)."""
        return dict(self.params)

    def test_declares_its_contract(self, variant_name, variant_params):
        """The class attributes the harness reads are set and well-formed.

        The listing (``attnbench-variants``), every result record and the leaderboard's
        grouping read ``family``, ``cost`` and ``supports_causal`` from the class, and
        ``check_inputs`` reads ``requires_equal_lengths``, without running the variant; so they
        must hold valid values.
        """
        variant = _make(variant_name, variant_params)
        assert variant.family, "set the class attribute `family`"
        assert variant.cost in COST_CLASSES, f"cost {variant.cost!r} is not one of {COST_CLASSES}"
        assert isinstance(variant.supports_causal, bool)
        assert isinstance(variant.requires_equal_lengths, bool)

    def test_the_pattern_sizes_it_checks_are_the_ones_it_declares(
        self, variant_name, variant_params, monkeypatch
    ):
        """Every parameter the variant checks as a pattern size (`check_size`) is in its
        ``size_params``, and each of those is a parameter: a record names them, and the board
        writes a fraction of the sequence as one ("window=0.2n") only for those."""
        from attnbench.variant import AttentionVariant

        checked = []
        original = AttentionVariant.check_size

        def spy(self, key):
            checked.append(key)
            return original(self, key)

        monkeypatch.setattr(AttentionVariant, "check_size", spy)
        variant = _make(variant_name, variant_params)
        declared = type(variant).size_params
        assert isinstance(declared, tuple) and all(isinstance(k, str) for k in declared)
        assert set(checked) <= set(declared), (
            f"{variant_name} checks {sorted(set(checked) - set(declared))} as pattern sizes: "
            "list them in the class attribute `size_params`"
        )
        assert all(hasattr(variant.params, k) for k in declared)

    @pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
    def test_shapes_and_value_dim(self, variant_name, variant_params, causal):
        """The output is (B, H, N, Dv) in the input dtype, with Dv ≠ D.

        Dv = 5 differs from D = 8, so a variant that returns something of the query's width, or
        mixes up the key and value axes, fails here rather than deep inside a model.
        """
        variant = _make(variant_name, variant_params)
        if causal and not variant.supports_causal:
            pytest.skip("non-causal variant")
        q, k, v = random_qkv(b=2, h=H, n=17, d=D, dv=5)
        out = _call(variant, q, k, v, causal=causal)
        assert out.shape == (2, H, 17, 5) and out.dtype == torch.float32

    def test_cross_attention_lengths(self, variant_name, variant_params):
        """N queries attend over M ≠ N keys, or the variant refuses with the documented reason.

        Positional patterns (windows, decays) declare ``requires_equal_lengths`` and must raise
        `UnsupportedError` (recorded as "unsupported", not as a crash); everyone else must
        return (B, H, N, Dv).
        """
        variant = _make(variant_name, variant_params)
        q, k, v = random_qkv(b=1, h=H, n=7, m=19, d=D)
        if variant.requires_equal_lengths:  # positional patterns refuse, with a reason
            with pytest.raises(UnsupportedError, match="needs as many keys as queries"):
                _call(variant, q, k, v)
            return
        assert _call(variant, q, k, v).shape == (1, H, 7, D)

    def test_batch_independence(self, variant_name, variant_params):
        """Each batch element's output depends on that element alone.

        A normalisation or pooling taken over the batch axis by mistake would make results
        depend on the batch size the harness happens to use. Tolerance 1e-5: batched and
        single-element calls may reduce in a different order in float32.
        """
        variant = _make(variant_name, variant_params)
        q, k, v = random_qkv(b=3, h=H, n=20, d=D)
        causal = variant.supports_causal
        full = _call(variant, q, k, v, causal=causal)
        for b in range(3):
            alone = _call(variant, q[b : b + 1], k[b : b + 1], v[b : b + 1], causal=causal)
            torch.testing.assert_close(full[b : b + 1], alone, rtol=1e-5, atol=1e-5)

    @pytest.mark.parametrize("n", [1, 2, 63, 2048])
    def test_finite_for_random_inputs(self, variant_name, variant_params, n):
        """No inf or NaN for Gaussian inputs, causal and not, from one token up to 2048.

        n = 1 and 2 catch empty or degenerate normalisers (a causal first row sees one key);
        63 is not a multiple of any block or chunk size, so it catches padding mistakes; 2048
        is long enough for unnormalised sums or exponentials to overflow.
        """
        variant = _make(variant_name, variant_params)
        q, k, v = random_qkv(b=1, h=H, n=n, d=D, seed=n)
        for causal in [False, True] if variant.supports_causal else [False]:
            assert torch.isfinite(_call(variant, q, k, v, causal=causal)).all()

    def test_gradients_flow_to_inputs_and_parameters(self, variant_name, variant_params):
        """q, k, v and every parameter receive finite, non-zero gradients.

        The training tasks learn through the variant: a detached path, a parameter that never
        enters the output, or a NaN gradient would make the variant look untrainable rather
        than fail.
        """
        variant = _make(variant_name, variant_params)
        # long enough for block patterns to have several blocks, so their parameters matter
        q, k, v = (t.requires_grad_(True) for t in random_qkv(b=1, h=H, n=200, d=D))
        _call(variant, q, k, v, causal=variant.supports_causal).square().sum().backward()
        for t in (q, k, v, *variant.parameters()):
            assert t.grad is not None and torch.isfinite(t.grad).all() and t.grad.abs().sum() > 0

    def test_gradients_match_float64_within_the_declared_tolerance(
        self, variant_name, variant_params
    ):
        """The float32 gradients of q, k, v and the gates (one random cotangent) are within the
        variant's `backward_tolerance` of its own float64 gradients, causal and not: a fast
        backward that is wrong is caught as a wrong forward is (the throughput task records the
        same error beside every forward+backward timing). n = 100 crosses a chunk edge."""
        variant = _make(variant_name, variant_params)
        q, k, v = random_qkv(b=1, h=H, n=100, d=D, dv=5, seed=13, dtype=torch.float64)
        inputs = {"q": q, "k": k, "v": v}
        gates = gates_of_keys(variant, k, 5) if variant.gates else {}
        inputs.update({f"gate {name}": g.detach() for name, g in gates.items()})
        limit = variant.backward_tolerance["float32"]
        for causal in [False, True] if variant.supports_causal else [False]:

            def run(xs, dtype, causal=causal):
                on = {name: xs[f"gate {name}"] for name in gates}
                return variant.to(dtype)(xs["q"], xs["k"], xs["v"], causal=causal, gates=on or None)

            try:
                errors = _gradient_errors(
                    run, inputs, torch.float32, torch.Generator().manual_seed(5)
                )
            finally:
                variant.float()
            if "unmeasured" in errors:
                pytest.skip(str(errors["unmeasured"]))
            worst = max(errors, key=errors.get)
            assert errors[worst] <= limit, (
                f"{variant_name} (causal={causal}): the float32 gradient of {worst} is "
                f"{errors[worst]:.2e} from float64's (declared backward_tolerance {limit:.0e})"
            )

    def test_causality_is_a_leak_test(self, variant_name, variant_params):
        """Output at t must not change when any position > t changes (not a mask inspection).

        Perturbing the future of q, k and v catches every route information can take (a mask
        applied after a normaliser, a global statistic, a chunk carried the wrong way), which
        inspecting the variant's own mask would not. A variant that does not support causal
        masking must refuse ``causal=True`` with `UnsupportedError` rather than silently
        ignore it. Tolerance 1e-5 relative, 1e-6 absolute: the prefix must be unchanged up to
        float32 rounding, while the perturbation (×10 Gaussian) changes it by far more.
        """
        variant = _make(variant_name, variant_params)
        q, k, v = random_qkv(b=1, h=H, n=24, d=D, seed=3)
        if not variant.supports_causal:
            with pytest.raises(UnsupportedError):
                _call(variant, q, k, v, causal=True)
            return
        base = _call(variant, q, k, v, causal=True)
        for t in (0, 5, 11, 22):
            q2, k2, v2 = q.clone(), k.clone(), v.clone()
            g = torch.Generator().manual_seed(t)
            for x in (q2, k2, v2):
                x[:, :, t + 1 :] = 10 * torch.randn(x[:, :, t + 1 :].shape, generator=g)
            out = _call(variant, q2, k2, v2, causal=True)
            torch.testing.assert_close(
                out[:, :, : t + 1], base[:, :, : t + 1], rtol=1e-5, atol=1e-6
            )
            # and the future did change (the test can fail: the perturbation reaches the output)
            assert not torch.allclose(out[:, :, t + 1 :], base[:, :, t + 1 :])

    @pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
    def test_attention_weights_reproduce_forward(self, variant_name, variant_params, causal):
        """``attention_weights(q, k) @ v == forward(q, k, v)``, shape (B, H, N, M).

        The concentration task analyses the weights in place of the forward pass, and the
        throughput task checks its forward against them before timing, so they must be the
        same operator. Skipped for a variant that raises
        NotImplementedError (it cannot materialise its weights). Tolerance 1e-5: the two paths
        may sum in a different order.
        """
        variant = _make(variant_name, variant_params)
        if causal and not variant.supports_causal:
            pytest.skip("non-causal variant")
        q, k, v = random_qkv(b=2, h=H, n=33, d=D)
        try:
            weights = variant.attention_weights(q, k, causal=causal)
        except NotImplementedError:
            pytest.skip(f"{variant_name} cannot materialise its weights")
        assert weights.shape == (2, H, 33, 33)
        torch.testing.assert_close(
            weights @ v, _call(variant, q, k, v, causal=causal), rtol=1e-5, atol=1e-5
        )

    @pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
    def test_density_is_a_fraction_that_weights_confirm(self, variant_name, variant_params, causal):
        """``density`` is in (0, 1], and a sparse variant scores no fewer pairs than its weights
        keep (a nonzero weight is a scored pair), at a length that is no multiple of a block.

        Every task records density beside its scores, and the board sets quality against it.
        """
        variant = _make(variant_name, variant_params)
        if causal and not variant.supports_causal:
            pytest.skip("non-causal variant")
        n = 37
        density = variant.density(n, n, causal)
        assert 0 < density <= 1, f"density {density} at n={n} is not a fraction"
        q, k, _ = random_qkv(b=1, h=H, n=n, d=D)
        try:
            with torch.no_grad():
                weights = variant.attention_weights(0.1 * q, 0.1 * k, causal=causal)
        except NotImplementedError:
            return
        kept = float((weights != 0).sum()) / H
        assert variant.scored_pairs(n, n, causal) >= kept - 1e-6

    @pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
    def test_packed_documents_equal_each_document_alone(self, variant_name, variant_params, dtype):
        """Documents packed into one sequence (``cu_seqlens``) give exactly the outputs of each
        document run alone, causal and not: no key of another document is seen, a recurrent
        state restarts at each boundary, a positional pattern restarts its positions. Or the
        variant refuses packing in one sentence (`UnsupportedError`), never leaks.

        Tolerance: float64 1e-9 (the two calls may reduce in another order; a leak moves outputs
        by 1e-2 or more); float32 twice the variant's declared float32 tolerance (each call is
        within it of the exact value)."""
        variant = _make(variant_name, variant_params)
        if dtype == torch.float64:
            variant = variant.double()
        limit = 1e-9 if dtype == torch.float64 else 2 * variant.error_tolerance["float32"]
        for causal in [False, True] if variant.supports_causal else [False]:
            try:
                error = packed_error(variant, dtype, causal)
            except UnsupportedError as exc:
                assert variant.packing == "none", f"refused packing without packing='none': {exc}"
                return
            assert error <= limit, (
                f"{variant_name} (causal={causal}): a packed call differs from its documents "
                f"run alone by {error:.2e} (limit {limit:.0e}): it leaks across documents"
            )

    def test_bfloat16_runs(self, variant_name, variant_params):
        """The variant runs in bfloat16 (the GPU sweeps' dtype) and agrees with float32.

        Catches float32 constants or buffers that do not follow ``.to(dtype)``, and
        overflow or underflow in a reduced-precision normaliser.
        """
        variant = _make(variant_name, variant_params).to(torch.bfloat16)
        q, k, v = random_qkv(b=1, h=H, n=32, d=D, dtype=torch.bfloat16)
        out = _call(variant, q, k, v, causal=variant.supports_causal)
        assert out.dtype == torch.bfloat16 and torch.isfinite(out).all()
        ref = _call(
            _make(variant_name, variant_params),
            *(t.float() for t in (q, k, v)),
            causal=variant.supports_causal,
        )
        # bf16 has an 8-bit mantissa: agreement to a few percent of the output scale
        assert (out.float() - ref).abs().max() <= 0.05 * ref.abs().max() + 0.05

    # The incremental form (`attnbench.IncrementalAttention`): optional for a plugin, so these
    # skip, saying why, for a causal variant that registers none. Float64 throughout: the two
    # paths sum in different orders, and float64 rounding over a few hundred terms (~1e-13)
    # stays four orders of magnitude under the 1e-9 tolerance, while a wrong weight, a key
    # dropped from a pattern or a decay off by one step changes outputs at 1e-3 or more.
    INCREMENTAL_LEN = 151  # no multiple of a chunk (64), block (5 at 1/32) or stride (51)

    @staticmethod
    def _incremental(
        variant, max_len, batch=2, dv=5, dtype=torch.float64, device="cpu", kv_heads=None
    ):
        reason = _why_no_incremental_form(variant)
        if reason:
            if not variant.supports_causal:  # refused with the sentence, never a crash
                with pytest.raises(UnsupportedError, match="not causal"):
                    _incremental_form(variant, batch, max_len, D, dv, device, dtype)
            pytest.skip(reason)
        try:
            return _incremental_form(variant, batch, max_len, D, dv, device, dtype, kv_heads)
        except UnsupportedError as exc:  # grouped-query heads are optional too
            pytest.skip(str(exc))

    @pytest.mark.parametrize(
        "schedule",
        [(151,), (1,) * 151, (61, 1, 1, 23, 1, 2, 62)],
        ids=["prefill", "steps", "prefill+steps+prefill"],
    )
    def test_incremental_form_equals_causal_forward(self, variant_name, variant_params, schedule):
        """Token by token (``step``), all at once (``prefill``) or mixed, with prefills that
        continue a sequence and cross chunk and block edges: the outputs equal the causal
        forward over the whole sequence at every position."""
        variant = _make(variant_name, variant_params).double()
        n = self.INCREMENTAL_LEN
        decoder = self._incremental(variant, n)
        q, k, v = random_qkv(b=2, h=H, n=n, d=D, dv=5, seed=7, dtype=torch.float64)
        with torch.no_grad():
            expected = _call(variant, q, k, v, causal=True)
            outs, t = [], 0
            for size in schedule:
                part = (x[:, :, t : t + size] for x in (q, k, v))
                outs.append(_feed(decoder, *part))
                t += size
        assert t == n and decoder.position == n
        torch.testing.assert_close(torch.cat(outs, dim=2), expected, rtol=1e-9, atol=1e-9)

    def test_incremental_form_resets_at_each_document_boundary(self, variant_name, variant_params):
        """A packed prefill (``cu_seqlens``) decodes each document as a fresh decoder decodes it
        alone, and the next step continues the last document only; ``reset`` forgets every
        token. Tolerance as the incremental form's equality (float64, 1e-9)."""
        variant = _make(variant_name, variant_params).double()
        n = self.INCREMENTAL_LEN
        bounds = [0, 29, 97, n - 1]  # three documents, then one more step of the last
        q, k, v = random_qkv(b=2, h=H, n=n, d=D, dv=5, seed=9, dtype=torch.float64)
        gates = gates_of_keys(variant, k, 5) if variant.gates else {}
        decoder = self._incremental(variant, n)
        with torch.no_grad():
            cut = {name: g[..., : n - 1, :] for name, g in gates.items()}
            packed = decoder.prefill(
                *(x[..., : n - 1, :] for x in (q, k, v)), cut or None, cu_seqlens=bounds
            )
            last = _feed(decoder, *(x[..., n - 1 :, :] for x in (q, k, v)))
            expected = []
            for a, b in pairwise(bounds):
                alone = self._incremental(variant, n)
                expected.append(_feed(alone, *(x[..., a:b, :] for x in (q, k, v))))
            expected.append(_feed(alone, *(x[..., n - 1 :, :] for x in (q, k, v))))
            decoder.reset()
            again = _feed(decoder, *(x[..., :29, :] for x in (q, k, v)))
        assert decoder.position == 29
        torch.testing.assert_close(
            torch.cat([packed, last], dim=2), torch.cat(expected, dim=2), rtol=1e-9, atol=1e-9
        )
        torch.testing.assert_close(again, expected[0], rtol=1e-9, atol=1e-9)

    def test_incremental_state_is_what_it_holds(self, variant_name, variant_params):
        """After n tokens the tensors held have ``state_size(n)`` elements per sequence, and
        their storage is exactly what the full sequence needs (a cache reserved once for
        ``max_len``, nothing more); past ``max_len`` the decoder refuses, naming it."""
        variant = _make(variant_name, variant_params)
        n = self.INCREMENTAL_LEN
        decoder = self._incremental(variant, n, dtype=torch.float32)
        q, k, v = random_qkv(b=2, h=H, n=n, d=D, dv=5, seed=1)
        t = 0
        with torch.no_grad():
            for size in (1, 16, 1, 100, 33):
                _feed(decoder, *(x[:, :, t : t + size] for x in (q, k, v)))
                t += size
                held = sum(x.numel() for x in decoder.state_tensors())
                assert held == 2 * decoder.state_size(t), f"after {t} tokens"
                assert decoder.state_bytes() == 4 * decoder.state_size(t)
        storages = {x.untyped_storage().data_ptr(): x for x in decoder.state_tensors()}
        reserved = sum(x.untyped_storage().nbytes() for x in storages.values())
        assert reserved == 2 * 4 * decoder.state_size(n)
        with pytest.raises(ValueError, match="max_len=151"), torch.no_grad():
            _feed(decoder, *(x[:, :, :1] for x in (q, k, v)))

    def test_incremental_state_over_lengths_and_flat_for_linear_cost(
        self, variant_name, variant_params
    ):
        """After 64, 512 and 4096 tokens the state held is what ``state_size`` says, measured
        from the tensors; and a variant of cost "n" holds the same state at all three: the O(1)
        memory per sequence that makes it cheap to decode."""
        variant = _make(variant_name, variant_params, max_len=4096)
        sizes = []
        for n in (64, 512, 4096):
            decoder = self._incremental(variant, n, batch=1, dtype=torch.float32)
            q, k, v = random_qkv(b=1, h=H, n=n, d=D, dv=5)
            with torch.no_grad():
                _feed(decoder, q, k, v)
            assert decoder.state_bytes() == 4 * decoder.state_size(n), f"after {n} tokens"
            sizes.append(decoder.state_bytes())
        assert sizes[0] > 0
        if variant.cost == "n":
            assert sizes[0] == sizes[1] == sizes[2]

    @pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
    @pytest.mark.parametrize("kv_heads", [1, 2], ids=["multi-query", "grouped-query"])
    def test_forward_with_fewer_key_value_heads_equals_repeated_heads(
        self, variant_name, variant_params, kv_heads, causal
    ):
        """Keys and values with 1 or 2 heads for 4 query heads (``VariantShape.n_kv_heads``):
        the outputs equal the forward on keys and values repeated for each query head's group
        (query head h reads key/value head h // group), in float64 to 1e-9 (the two differ
        only in the order of their sums). A variant that shares them natively
        (``grouped_query``) computes this itself, and this checks its kernel; for any other,
        calling the variant repeats them first, and this checks only that the call does. 77
        positions: no multiple of a chunk (64) or of a block. Built with ``n_kv_heads``, as a
        task builds it."""
        variant = _make(variant_name, variant_params, heads=4, kv_heads=kv_heads).double()
        if causal and not variant.supports_causal:
            pytest.skip(f"variant '{variant_name}' is not causal")
        q, _, _ = random_qkv(b=2, h=4, n=77, d=D, dv=5, seed=21, dtype=torch.float64)
        _, k, v = random_qkv(b=2, h=kv_heads, n=77, d=D, dv=5, seed=22, dtype=torch.float64)
        group = 4 // kv_heads
        with torch.no_grad():
            grouped = _call(variant, q, k, v, causal=causal)
            repeated = _call(
                variant,
                q,
                k.repeat_interleave(group, 1),
                v.repeat_interleave(group, 1),
                causal=causal,
            )
        assert grouped.shape == (2, 4, 77, 5)
        torch.testing.assert_close(grouped, repeated, rtol=1e-9, atol=1e-9)

    def test_key_value_heads_that_do_not_divide_the_query_heads_are_refused(
        self, variant_name, variant_params
    ):
        """3 key/value heads for 4 query heads: refused in one sentence naming both counts, in
        the shape and in the call, never a broadcast error from deep inside a kernel."""
        with pytest.raises(ValueError, match="n_kv_heads=3 must divide the 4 query heads"):
            VariantShape(n_heads=4, head_dim=D, max_len=64, n_kv_heads=3)
        variant = _make(variant_name, variant_params, heads=4)
        q, _, _ = random_qkv(b=1, h=4, n=16)
        _, k, v = random_qkv(b=1, h=3, n=16)
        with pytest.raises(ValueError, match="3 .*heads|must divide"):
            _call(variant, q, k, v)

    @pytest.mark.parametrize("kv_heads", [1, 2], ids=["multi-query", "grouped-query"])
    def test_grouped_query_heads_equal_the_forward_on_repeated_keys_and_values(
        self, variant_name, variant_params, kv_heads
    ):
        """Fewer key/value heads than query heads (4 query heads; 1 or 2 key/value heads): the
        outputs equal the causal forward with each key/value head repeated for its group of query
        heads, and a form that shares them holds no more state than its key/value heads need."""
        variant = _make(variant_name, variant_params, heads=4).double()
        n = self.INCREMENTAL_LEN
        decoder = self._incremental(variant, n, kv_heads=kv_heads)
        q, _, _ = random_qkv(b=2, h=4, n=n, d=D, dv=5, seed=11, dtype=torch.float64)
        _, k, v = random_qkv(b=2, h=kv_heads, n=n, d=D, dv=5, seed=12, dtype=torch.float64)
        group = 4 // kv_heads
        with torch.no_grad():
            expected = _call(
                variant,
                q,
                k.repeat_interleave(group, 1),
                v.repeat_interleave(group, 1),
                causal=True,
            )
            outs, t = [], 0
            for size in (61, 1, 1, 23, 1, 2, 62):
                outs.append(_feed(decoder, *(x[:, :, t : t + size] for x in (q, k, v))))
                t += size
        torch.testing.assert_close(torch.cat(outs, dim=2), expected, rtol=1e-9, atol=1e-9)
        assert sum(x.numel() for x in decoder.state_tensors()) == 2 * decoder.state_size(n)
        ungrouped = self._incremental(variant, n)
        assert decoder.state_size(n) <= ungrouped.state_size(n)
