"""attnlearn.vector: value-output maps of a vector oracle from the scalar learner's own queries."""

import numpy as np
import pytest

from attnlearn import Oracle, learn, query_budget
from attnlearn.errors import CheckFailedError, IllConditionedError
from attnlearn.layer import AttentionLayer, layer_error
from attnlearn.learner.cost import holdout_count
from attnlearn.model import random_model
from attnlearn.vector import _solve_maps, attention_means, learn_vector


class VectorOracle:
    """A float64 AttentionLayer with k outputs as a vector oracle (the protocol's .outputs)."""

    exact, dps = False, None

    def __init__(self, layer, mangle=None):
        self.layer, self.d, self.outputs, self.mangle, self.queries = layer, layer.d, layer.k, mangle, 0

    def batch(self, Xs):
        self.queries += len(Xs)
        y = self.layer.batch(Xs)
        return y if self.mangle is None else self.mangle(y)


def vector_layer(H, d, k, seed):
    base = random_model(H, d, seed=seed)
    A = np.random.default_rng(seed + 1).normal(size=(H, k, d))
    return AttentionLayer(base.W, A)


@pytest.mark.parametrize("k", [1, 3, 9])
def test_maps_recovered_with_the_scalar_learners_queries(k):
    d, H = 3, 2
    lay = vector_layer(H, d, k, seed=4)
    oracle = VectorOracle(lay)
    rec = learn_vector(oracle, d, heads=H, seed=1)
    assert layer_error(rec.model, lay) <= max(rec.error_estimate, 1e-14) and layer_error(rec.model, lay) <= 1e-8
    # every query is the scalar learner's: the paper's count and the held-out ones, whatever k
    assert rec.queries == rec.scalar.queries and oracle.queries == rec.queries["total"]
    assert rec.queries["design"] == query_budget(d, H)[0]
    assert rec.model.A.shape == (H, k, d) and rec.holdout_error <= 1e-8
    assert rec.verified and rec.queries["holdout"] == holdout_count(32, H)  # verification, counted apart


def test_without_verification_the_maps_are_unverified():
    lay = vector_layer(2, 3, 4, seed=4)
    rec = learn_vector(VectorOracle(lay), 3, heads=2, seed=1, holdout=0)
    assert not rec.verified and rec.holdout_error is None and rec.queries["holdout"] == 0
    assert layer_error(rec.model, lay) <= 1e-8


def test_the_readout_is_the_scalar_model():
    lay = vector_layer(2, 3, 4, seed=0)
    rec = learn_vector(VectorOracle(lay), 3, heads=2, seed=3)
    scalar = rec.model.readout(rec.readout)
    Xs = np.random.default_rng(0).normal(size=(5, 4, 3))
    np.testing.assert_allclose(scalar.batch(Xs), rec.scalar.model.batch(Xs), rtol=1e-8, atol=1e-10)


def test_attention_means_are_convex_combinations():
    W = random_model(2, 3, seed=0).W
    Xs = np.random.default_rng(1).normal(size=(4, 5, 3))
    m = attention_means(Xs, W)
    assert m.shape == (4, 2, 3)
    np.testing.assert_allclose(attention_means(Xs[:, :1], W)[:, 0], Xs[:, 0], rtol=1e-15)


def test_wrong_answers_on_held_out_queries_raise():
    lay = vector_layer(1, 2, 3, seed=2)
    r = np.random.default_rng(0).normal(size=3)  # the read-out learn_vector draws first from seed=0
    r /= np.linalg.norm(r)
    off = np.array([0.0, 0.0, 1e-3]) - 1e-3 * r[2] * r  # a change the read-out r^T F cannot see
    calls = []

    def late(y):  # the design's answers exact, then the held-out ones off in that direction
        calls.append(1)
        return y + off if len(calls) > 5 else y

    with pytest.raises(CheckFailedError, match=r"value-output maps miss the oracle on the held-out queries: "
                                               r"relative discrepancy"):
        learn_vector(VectorOracle(lay, mangle=late), 2, heads=1, seed=0, holdout=8)
    # the design asks 5 batches (the shared query, the probe's 2 nodes, the other configurations' 2), then
    # the verification: 1 batch of check queries and 3 of held-out ones (lengths 1..3); the perturbed
    # answers pass the scalar checks (r^T F unchanged) and reach only the vector check
    assert len(calls) == 5 + 1 + 3


def test_scalar_and_exact_oracles_are_refused():
    m = random_model(1, 2, seed=0)
    with pytest.raises(ValueError, match=r"learn_vector needs a vector oracle"):
        learn_vector(Oracle(m), 2, heads=1)
    exact = VectorOracle(vector_layer(1, 2, 2, seed=0))
    exact.exact, exact.dps = True, 30
    with pytest.raises(ValueError, match=r"learn_vector is a float64 learner"):
        learn_vector(exact, 2, heads=1)
    with pytest.raises(ValueError, match=r"learn_vector does not learn score biases or an offset"):
        learn_vector(VectorOracle(vector_layer(1, 2, 2, seed=0)), 2, heads=1, bias=True)
    with pytest.raises(TypeError, match=r"returns 3 numbers per query"):
        learn(VectorOracle(vector_layer(1, 2, 3, seed=0)), 2, heads=1)


def test_options_are_checked_before_any_query():
    oracle = VectorOracle(vector_layer(1, 2, 2, seed=0))
    with pytest.raises(TypeError, match=r"bias must be True or False, got str 'yes'"):
        learn_vector(oracle, 2, heads=1, bias="yes")
    with pytest.raises(ValueError, match=r"learn_vector learns with design=\"paper\" only, got design='lean'"):
        learn_vector(oracle, 2, heads=1, design="lean")
    assert oracle.queries == 0
    rec = learn_vector(oracle, 2, heads=1, bias=np.False_, design="paper")  # a numpy bool is a bool
    assert layer_error(rec.model, oracle.layer) <= 1e-8


def test_maps_not_determined_by_the_queries_raise():
    W = random_model(1, 2, seed=0).W
    X = np.array([[[1.0, 0.0], [2.0, 0.0]]])  # every token on one line: the means span 1 of 2 dimensions
    rows = [(X, np.ones((1, 3))), (2 * X, np.ones((1, 3)))]
    with pytest.raises(IllConditionedError, match=r"the attention means of the 2 queries span only 1 of the 2 "
                                                  r"dimensions of the maps"):
        _solve_maps(W, rows, 1e-12)


def test_layer_error_checks_its_arguments():
    a = vector_layer(1, 2, 3, seed=0)
    with pytest.raises(TypeError, match=r"layer_error expects AttentionLayer models, got MultiHeadAttention"):
        layer_error(a, random_model(1, 2, seed=0))
    with pytest.raises(ValueError, match=r"layers of different shapes: d = 2, 3; k = 3, 3"):
        layer_error(a, vector_layer(1, 3, 3, seed=0))
    with pytest.raises(ValueError, match=r"layers of different shapes: d = 2, 2; k = 3, 2"):
        layer_error(a, vector_layer(1, 2, 2, seed=0))
    assert layer_error(a, a) == 0.0 and layer_error(a, vector_layer(2, 2, 3, seed=0)) == float("inf")
