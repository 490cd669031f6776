"""attnlearn.learner.scale: the query scale found from the probe (scale="probe") or searched (scale="search")."""

import numpy as np
import pytest

from attnlearn import Oracle, RecoveryError, canonical, learn, param_error
from attnlearn.learner.cost import holdout_count
from attnlearn.learner.tolerances import Tolerances
from attnlearn.model import random_model


def test_probe_is_the_old_rule_and_the_default():
    m = random_model(2, 4, seed=2, scale=0.02)  # a small layer: the probe wants a factor far above 4
    rec = learn(Oracle(m), 4, heads=2, seed=2)
    assert rec.diagnostics.scale["factor"] == 4.0 and rec.diagnostics.scale["probe_scales"] == [1.0]
    assert "scale" not in rec.queries and rec.queries["design"] == 4 * 2 * 16 - 4 + 1
    wide = learn(Oracle(m), 4, heads=2, seed=2, scale="search")
    assert 4.0 < wide.diagnostics.scale["factor"] <= Tolerances.scale_wide
    assert wide.queries == rec.queries  # no re-probe: the probe fitted; the count is the paper's
    truth = canonical(m)
    assert param_error(wide.model, truth) < param_error(rec.model, truth) / 10
    assert param_error(wide.model, truth) <= wide.error_estimate


def test_one_head_keeps_the_clip():
    m = random_model(1, 4, seed=0, scale=0.02)
    rec = learn(Oracle(m), 4, heads=1, seed=0, scale="search")
    assert rec.diagnostics.scale["factor"] == 4.0


@pytest.mark.parametrize("H, d, seed, probes", [(4, 4, 2, 2), (4, 4, 3, 3), (3, 4, 1, 2)])
def test_crowded_probe_is_reprobed_and_counted(H, d, seed, probes):
    m = random_model(H, d, seed=seed, scale=0.01)
    with pytest.raises(RecoveryError, match=r"base\(1,1\)"), np.errstate(all="ignore"):
        learn(Oracle(m), d, heads=H, seed=seed, robust=True)  # the old rule: the probe base(1,1) fails
    oracle = Oracle(m)
    with np.errstate(all="ignore"):
        rec = learn(oracle, d, heads=H, seed=seed, robust=True, scale="search")
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
    oracle = Noise()
    with pytest.raises(RecoveryError, match=r"base\(1,1\)"), np.errstate(all="ignore"):
        learn(oracle, 3, heads=H)
    assert oracle.asked == 2 * H + 1


def test_scale_argument_is_checked():
    m = random_model(1, 2, seed=0)
    with pytest.raises(ValueError, match=r'scale must be "probe" or "search", got \'wide\''):
        learn(Oracle(m), 2, heads=1, scale="wide")
    with pytest.raises(ValueError, match=r'scale="search" is a float64 mode'):
        learn(Oracle(m, precision=30), 2, heads=1, scale="search")
