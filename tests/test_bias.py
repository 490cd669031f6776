"""attnlearn.learner.bias: score biases c_h and the output offset, learned by learn(bias=True)."""

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlearn import RecoveryError, learn, query_budget
from attnlearn.errors import IllConditionedError, NotIdentifiableError
from attnlearn.layer import AttentionLayer
from attnlearn.learner.cost import bias_budget
from attnlearn.learner.family import AFFINE
from attnlearn.learner.paper.bias import bias_error
from attnlearn.learner.paper.bias import AffineHeads, biased_layer as layer_from_parts
from attnlearn.learner.paper.design import ConfigTable, build_design, draw_directions
from attnlearn.learner.cost import holdout_count
from attnlearn.learner.tolerances import Tolerances


def biased_layer(H, d, seed, *, c_scale=1.0, b=None):
    g = np.random.default_rng(seed)
    W = g.normal(size=(H, d, d)) / np.sqrt(d)
    v = g.normal(size=(H, d))
    c = c_scale * g.normal(size=(H, d)) / np.sqrt(d)
    return AttentionLayer(W, v, c=c, b=np.asarray(g.normal() if b is None else b))


class LayerOracle:
    """A scalar AttentionLayer as an oracle: float64, or exact at ``dps`` digits."""

    def __init__(self, layer, dps=None):
        self.layer, self.d, self.exact, self.dps, self.queries = layer, layer.d, dps is not None, dps, 0

    def batch(self, Xs):
        self.queries += len(Xs)
        if self.exact:
            with mpmath.workdps(self.dps):
                return self.layer.to_mpmath().batch(Xs)
        return self.layer.batch(np.asarray(Xs, dtype=float))


def test_table_has_one_more_block_and_midpoint_crosses():
    for d in (1, 2, 5):
        t, p = ConfigTable(d, family=AFFINE), ConfigTable(d)
        assert (t.B, t.mid, p.B, p.mid) == (d + 1, 0.5, d, 1)
        assert len(t) == (d + 1) * (2 * d - 1) + d == len(p) + 2 * d
        assert list(t.kind).count("cross") == d and t.qidx[t.cross(d)] == 2 * d
        # 2n samples per configuration and the shared query: the biased count
        assert 2 * 3 * len(t) + 1 == bias_budget(d, 3)[0] == query_budget(d, 3)[0] + 4 * 3 * d


@pytest.mark.parametrize("H, d, seed", [(1, 1, 0), (1, 3, 1), (2, 2, 2), (2, 3, 3), (3, 2, 4)])
def test_exact_mode_recovers_biases_to_1e_20(H, d, seed):
    layer = biased_layer(H, d, seed)
    with mpmath.workdps(40):
        oracle = LayerOracle(layer, dps=40)
        rec = learn(oracle, d, heads=H, bias=True)
        err = bias_error(rec.model, layer)
    assert err <= 1e-20 and err <= rec.error_estimate
    assert rec.queries["design"] == bias_budget(d, H)[0]  # the biased design's count exactly
    assert rec.queries["holdout"] == holdout_count(8, H) and rec.verified
    assert rec.queries["total"] == oracle.queries == rec.queries["design"] + rec.queries["holdout"]
    assert rec.model.c.shape == (H, d) and rec.model.b.shape == (1,)


@pytest.mark.parametrize("H, d, seed", [(1, 4, 0), (2, 3, 1), (2, 4, 5)])
def test_float64_recovers_biases_within_the_estimate(H, d, seed):
    layer = biased_layer(H, d, seed)
    rec = learn(LayerOracle(layer), d, heads=H, bias=True, seed=seed)
    err = bias_error(rec.model, layer)
    assert err <= 1e-6 and err <= rec.error_estimate and rec.verified


def test_zero_biases_are_learned_as_zero():
    layer = biased_layer(2, 3, 7, c_scale=0.0, b=0.0)  # PyTorch's initial biases
    rec = learn(LayerOracle(layer), 3, heads=2, bias=True, seed=1)
    assert bias_error(rec.model, layer) <= 1e-8
    assert np.abs(rec.model.c).max() <= 1e-7 and abs(rec.model.b[0]) <= 1e-7


def test_robust_mode_asks_one_constant_per_other_block():
    H, d = 2, 3
    layer = biased_layer(H, d, 3)
    rec = learn(LayerOracle(layer), d, heads=H, bias=True, robust=True)
    assert rec.queries["constants"] == d and rec.queries["design"] == bias_budget(d, H)[0]
    assert bias_error(rec.model, layer) <= min(rec.error_estimate, 1e-6)


def test_a_constant_function_is_no_head_and_its_offset():
    layer = AttentionLayer(np.zeros((0, 2, 2)), np.zeros((0, 2)), c=np.zeros((0, 2)), b=np.asarray(0.75))
    rec = learn(LayerOracle(layer), 2, max_heads=2, bias=True)
    assert rec.heads == 0 and abs(rec.model.b[0] - 0.75) <= 1e-15
    assert rec.model.batch(np.ones((3, 4, 2))).tolist() == [0.75] * 3
    with pytest.raises(IllConditionedError, match=r"within the output error .* of a constant"):
        learn(LayerOracle(layer), 2, max_heads=2, bias=True, output_error=1e-9)


def test_the_paper_learner_cannot_express_a_bias_and_says_so():
    layer = biased_layer(1, 2, 0)
    with pytest.raises(RecoveryError, match=r"cross\(2\): interpolated poles"):  # never a silent model
        learn(LayerOracle(layer), 2, heads=1)


def test_arguments_are_checked():
    layer = biased_layer(1, 2, 0)
    with pytest.raises(TypeError, match=r"bias must be True or False, got str 'yes'"):
        learn(LayerOracle(layer), 2, heads=1, bias="yes")
    design = bias_budget(22, 1)[0]  # 4 d^2 + 4 d - 1 = 2023 at d = 22, one head
    with pytest.raises(ValueError, match=rf"would ask {design + 32:,} queries \(design {design:,}, held-out 32\)"):
        learn(LayerOracle(biased_layer(1, 22, 0)), 22, heads=1, bias=True, max_queries=2000)
    with pytest.raises(TypeError, match=r"bias_error expects scalar AttentionLayer models"):
        bias_error(layer, np.zeros(3))
    with pytest.raises(ValueError, match=r"layers of different widths: d = 2, 3"):
        bias_error(layer, biased_layer(1, 3, 0))
    assert bias_error(layer, biased_layer(2, 2, 0)) == float("inf")


@settings(max_examples=25, deadline=None)
@given(d=st.integers(1, 6), seed=st.integers(0, 2**32 - 1), f=st.floats(0.1, 30.0))
def test_the_biased_design_is_affine(d, seed, f):
    """Every cross's final token is the midpoint of q_1 and its block's, so an affine map's value there
    is the mean of the two blocks' (what the matching predicts), and [Q; 1] is invertible."""
    rng = np.random.default_rng(seed)
    dirs = draw_directions(rng, d, family=AFFINE)
    design = build_design(dirs, dirs.q[0], dirs.base[0, 0], f, exact=False, family=AFFINE)
    t = design.table
    assert design.Q.shape == (d, d + 1) and design.U.shape == (d + 1, d, d)
    for k in range(1, t.B):
        mid = design.qtok[t.qidx[t.cross(k)]]
        assert np.array_equal(mid, (design.q[0] + design.q[k]) * 0.5)
        W, c = rng.normal(size=(d, d)), rng.normal(size=d)
        w = lambda q: W @ q + c  # noqa: E731
        np.testing.assert_allclose(w(mid), (w(design.q[0]) + w(design.q[k])) / 2, rtol=1e-12, atol=1e-12)
    assert np.linalg.matrix_rank(np.vstack([design.Q, np.ones(d + 1)])) == d + 1
    # links add their bases' u, as in the paper's design
    for k in range(t.B):
        for j in range(1, d):
            assert np.array_equal(design.u[t.link(k, j)], design.U[k, 0] + design.U[k, j])


def test_a_head_recovered_with_v_zero_is_refused():
    W, c = np.ones((2, 2, 2)), np.ones((2, 2))
    v = np.array([[1.0, 0.5], [0.0, 0.0]])  # head 1 has v = 0: not a canonical head
    tol = Tolerances.for_mode(exact=False)
    with pytest.raises(NotIdentifiableError, match=r"head 1 was recovered with v = 0 \(not a canonical head\)"):
        layer_from_parts(AffineHeads(W, c, np.zeros((2, 2, 3))), v, np.zeros((2, 2)), 1.0, np.ones(2), eps_out=0.0,
                         tol=tol)
    model, estimate = layer_from_parts(AffineHeads(W[:1], c[:1], np.zeros((1, 2, 3))), v[:1], np.zeros((1, 2)), 1.0,
                                       np.ones(2), eps_out=0.0, tol=tol)
    assert float(np.ravel(model.b)[0]) == 1.0 - 1.5 and estimate == 0.0  # beta = c_1 - V^T q_1, no error bound without errors
