"""attnlearn.learner.stages: the paper design's first stages, shared by learn and learn(bias=True)."""

import numpy as np
import pytest

from attnlearn import Oracle, query_budget
from attnlearn.errors import PoleError
from attnlearn.layer import AttentionLayer
from attnlearn.learner.cost import bias_budget
from attnlearn.learner.options import Request, build_options as _options
from attnlearn.learner.paper.stages import FittedDesign, fit_design
from attnlearn.model import random_model
from attnlearn.protocol import Access


class ScalarLayer:
    """A scalar AttentionLayer (biases included) as a float64 oracle."""

    exact, dps = False, None

    def __init__(self, layer):
        self.layer, self.d = layer, layer.d

    def batch(self, Xs):
        return self.layer.batch(np.asarray(Xs, dtype=float))


def fitted(oracle, d, **kw):
    opt, tol = _options(oracle, d, Request(method="linearised", redraw_rounds=4, **kw))
    access = Access(oracle, opt.d)
    return fit_design(access, opt, tol), access


@pytest.mark.parametrize("bias", [False, True])
def test_fit_design_asks_the_design_and_fits_every_configuration(bias):
    H, d = 2, 3
    if bias:
        m = random_model(H, d, seed=4)
        g = np.random.default_rng(4)
        oracle = ScalarLayer(AttentionLayer(m.W, m.v, c=0.3 * g.normal(size=(H, d)), b=np.asarray(0.5)))
    else:
        oracle = Oracle(random_model(H, d, seed=4))
    out, access = fitted(oracle, d, heads=H, bias=bias)
    assert isinstance(out, FittedDesign) and out.H == H
    count = (bias_budget if bias else query_budget)(d, H)[0]
    assert out.queries["design"] == count  # the design's count, checked queries apart
    assert access.queries == count + out.queries["holdout"]
    assert out.design.table.B == (d + 1 if bias else d)
    assert len(out.state.F) == len(out.design.table)  # every configuration fitted ...
    assert np.asarray(out.state.ell).shape == (len(out.design.table), H)  # ... with H poles
    assert out.diagnostics.link_residual is None  # the matchings come later
    assert np.allclose(out.V.V, random_model(H, d, seed=4).v.sum(axis=0), atol=1e-8)


def test_robust_mode_asks_one_constant_per_other_block():
    H, d = 2, 3
    out, _ = fitted(Oracle(random_model(H, d, seed=5)), d, heads=H, robust=True)
    assert out.queries["constants"] == d - 1 and out.pre is not None


def test_a_fit_that_fails_raises_before_any_labelling():
    """Two heads asked of an oracle whose every configuration has a pair of complex poles: the
    stage raises, not a later one."""
    class Complex:
        exact, dps, d = False, None, 2

        def batch(self, Xs):  # G(t) = 1/(1 + (t/s)^2), poles t = +-i s, far from the real axis
            Xs = np.asarray(Xs)
            t = np.all(Xs == Xs[:, -1:], axis=2).sum(axis=1)
            s = Xs.shape[1] - t
            return np.where(s > 0, 1.0 / (1.0 + (t / np.maximum(s, 1)) ** 2), 0.0)

    with pytest.raises(PoleError, match=r"rho must be real and > 0|not real"):
        fitted(Complex(), 2, heads=2)
