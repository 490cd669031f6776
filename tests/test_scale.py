"""attnlearn.learner.paper.scale: the query scale found from the probe (scale="probe"), searched
(scale="search"), or searched when the probe finds the layer small (scale="auto", the default)."""

import numpy as np
import pytest

from attnlearn import MultiHeadAttention, Oracle, RecoveryError, canonical, learn, param_error
from attnlearn.learner.cost import holdout_count
from attnlearn.learner.nodes import node_pairs
from attnlearn.learner.paper.scale import small_layer
from attnlearn.learner.tolerances import Tolerances
from attnlearn.model import random_model


def test_probe_is_the_old_rule():
    m = random_model(2, 4, seed=2, scale=0.02)  # a small layer: the probe wants a factor far above 4
    rec = learn(Oracle(m), 4, heads=2, seed=2, scale="probe")
    assert rec.diagnostics.scale["factor"] == 4.0 and rec.diagnostics.scale["probe_scales"] == [1.0]
    assert rec.diagnostics.scale["rule"] == "probe"
    assert "scale" not in rec.queries and rec.queries["design"] == 4 * 2 * 16 - 4 + 1
    wide = learn(Oracle(m), 4, heads=2, seed=2, scale="search")
    assert 4.0 < wide.diagnostics.scale["factor"] <= Tolerances.scale_wide
    assert wide.diagnostics.scale["rule"] == "search"
    assert wide.queries == rec.queries  # no re-probe: the probe fitted; the count is the paper's
    truth = canonical(m)
    assert param_error(wide.model, truth) < param_error(rec.model, truth) / 10
    assert param_error(wide.model, truth) <= wide.error_estimate


@pytest.mark.parametrize("scale, rule", [(1.0, "probe"), (0.1, "probe"), (1e-3, "search"), (1e-4, "search")])
def test_auto_searches_only_a_small_layer(scale, rule):
    # the same model at four scales: the probe's max|ell| is 1.16 * scale, against the threshold
    # spread / 256 = 0.0078 (robust mode's spread 2), a factor of 4 or more away on either side
    m = random_model(2, 4, seed=2, scale=scale)
    rec = learn(Oracle(m), 4, heads=2, seed=2, robust=True)
    sc = rec.diagnostics.scale
    small = 2 * Tolerances.scale_small
    assert sc["rule"] == rule
    assert sc["probe_max_abs_ell"] / sc["probe_scales"][-1] < small / 4 if rule == "search" else \
        sc["probe_max_abs_ell"] > 4 * small
    same = learn(Oracle(m), 4, heads=2, seed=2, robust=True, scale=rule)  # "auto" is the rule it chose
    assert same.queries == rec.queries and param_error(same.model, rec.model) == 0
    assert param_error(rec.model, canonical(m)) <= min(rec.error_estimate, 1e-6)


def test_auto_is_the_clipped_rule_in_exact_mode():
    m = random_model(2, 2, seed=0, scale=1e-3)
    rec = learn(Oracle(m, precision=30), 2, heads=2)
    assert rec.diagnostics.scale["rule"] == "probe" and rec.diagnostics.scale["factor"] == 4.0
    assert rec.queries["design"] == 4 * 2 * 4 - 4 + 1


def test_one_head_keeps_the_clip():
    m = random_model(1, 4, seed=0, scale=0.02)
    rec = learn(Oracle(m), 4, heads=1, seed=0, scale="search")
    assert rec.diagnostics.scale["factor"] == 4.0


class CrowdedProbes:
    """``model``'s answers, except for the first ``crowded`` probes (base(1,1) at each scale tried):
    those come from ``model`` with every head's :math:`W_h` set to :math:`W_1`, so their poles
    coincide exactly (one pole where ``heads`` are asked) whatever the arithmetic, as two heads of
    a small layer crowd a unit-scale probe."""

    exact, dps = False, None

    def __init__(self, model, crowded):
        self.real = Oracle(model)
        self.merged = Oracle(MultiHeadAttention(np.repeat(model.W[:1], model.H, axis=0), model.v))
        self.d, self.left, self.queries = model.d, crowded * 2 * model.H, 0

    def batch(self, Xs):
        Xs = np.asarray(Xs)
        self.queries += len(Xs)
        if Xs.shape[1] > 1 and self.left > 0:  # the probes' 2H multi-token queries come first
            self.left -= len(Xs)
            return self.merged.batch(Xs)
        return self.real.batch(Xs)


@pytest.mark.parametrize("H, probes, seed, rule", [(2, 2, 1, "search"), (2, 3, 0, "search"), (3, 2, 1, "search"),
                                                   (3, 3, 3, "search"), (2, 3, 0, "auto"), (3, 3, 3, "auto")])
def test_crowded_probe_is_reprobed_and_counted(H, probes, seed, rule):
    # "auto" searches the layers of scale 1/256 (the probe's max|ell| 0.002-0.0023, 3.4 times below
    # the threshold 0.0078)
    d = 4
    m = random_model(H, d, seed=seed, scale=16.0 ** (1 - probes))  # the last probe's scale gives |ell| ~ 1
    # the clipped rule keeps the crowded probe's one head, which the design's other configurations contradict
    with pytest.raises(RecoveryError, match=r"\b(base|link)\(\d+,\d+\)|\bcross\(\d+\)"), np.errstate(all="ignore"):
        learn(CrowdedProbes(m, 1), d, heads=H, seed=seed, robust=True, scale="probe")
    oracle = CrowdedProbes(m, probes - 1)
    with np.errstate(all="ignore"):
        rec = learn(oracle, d, heads=H, seed=seed, robust=True, scale=rule)
    assert rec.diagnostics.scale["rule"] == "search"
    assert oracle.left == 0  # every crowded probe was asked, and nothing else was answered crowded
    scales = rec.diagnostics.scale["probe_scales"]
    assert scales == [16.0 ** i for i in range(probes)]
    assert rec.queries["scale"] == (probes - 1) * (2 * H + 1)
    assert rec.queries["design"] == 4 * H * d * d - 2 * H + 1
    assert rec.queries["total"] == oracle.queries == sum(v for k, v in rec.queries.items() if k != "total")
    # the verification stage runs on the searched design as on any other, its queries counted apart
    assert rec.verified and rec.queries["holdout"] == holdout_count(Tolerances.holdout, H)
    assert param_error(rec.model, canonical(m)) <= min(rec.error_estimate, 1e-6)


def test_a_probe_that_never_fits_raises_after_the_rounds():
    class Noise:
        d, exact, dps = 3, False, None

        def __init__(self):
            self.rng, self.asked = np.random.default_rng(0), 0

        def batch(self, Xs):
            self.asked += len(Xs)
            return self.rng.normal(size=len(Xs))

    oracle, H = Noise(), 2
    with pytest.raises(RecoveryError, match=r"base\(1,1\)"), np.errstate(all="ignore"):
        learn(oracle, 3, heads=H, scale="search")
    assert Tolerances.scale_rounds == 3
    assert oracle.asked == (1 + Tolerances.scale_rounds) * (2 * H + 1)  # the first probe, then 3 re-probes
    for scale in ("probe", "auto"):  # noise is not a small layer: "auto" does not re-probe it
        oracle = Noise()
        with pytest.raises(RecoveryError, match=r"base\(1,1\)"), np.errstate(all="ignore"):
            learn(oracle, 3, heads=H, scale=scale)
        assert oracle.asked == 2 * H + 1


def test_scale_argument_is_checked():
    m = random_model(1, 2, seed=0)
    with pytest.raises(ValueError, match=r'scale must be "auto", "probe" or "search", got \'wide\''):
        learn(Oracle(m), 2, heads=1, scale="wide")
    with pytest.raises(ValueError, match=r'scale="search" is a float64 mode'):
        learn(Oracle(m, precision=30), 2, heads=1, scale="search")


def test_a_small_spread_counts_only_when_the_samples_resolve_it():
    # samples of two poles at ell = +-1e-3 (gamma 1 each) at the nodes t = 1..4, constant 0:
    # max|ell| = 1e-3 is below spread / 256 = 0.0039, and max|ell| max|F - c| = 1e-3 is resolved when
    # it exceeds 100 times the samples' error bound (1e-6 at 1e-8: 1000 times; 1e-2 at 1e-4: not)
    tol = Tolerances.for_mode(exact=False)
    t = np.array(node_pairs(2, "copies").ts, dtype=float)
    F = (1 / (1 + np.exp(1e-3) * t) + 1 / (1 + np.exp(-1e-3) * t))[None, :]
    assert small_layer(1e-3, F, 0.0, spread=1.0, output_error=None, tol=tol)  # float64 rounding: resolved
    assert small_layer(1e-3, F, 0.0, spread=1.0, output_error=1e-8, tol=tol)
    assert not small_layer(1e-3, F, 0.0, spread=1.0, output_error=1e-4, tol=tol)
    assert not small_layer(0.01, F, 0.0, spread=1.0, output_error=None, tol=tol)  # above the threshold
    assert small_layer(0.01, F, 0.0, spread=4.0, output_error=None, tol=tol)  # ... which scales with spread
