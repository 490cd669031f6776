"""Tests of attnlearn.model.MultiHeadAttention (DESIGN §1)."""

import math

import mpmath
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from attnlearn import MultiHeadAttention, canonical
from attnlearn.model import random_model


def naive(W, v, X):
    """Independent implementation: plain Python loops and math.exp, no numpy algebra."""
    W = np.asarray(W, dtype=float).tolist()
    v = np.asarray(v, dtype=float).tolist()
    X = np.asarray(X, dtype=float).tolist()
    N, d = len(X), len(X[0])
    q = X[-1]
    total = 0.0
    for Wh, vh in zip(W, v):
        scores = []
        for x in X:
            s = 0.0
            for a in range(d):
                for b in range(d):
                    s += x[a] * Wh[a][b] * q[b]
            scores.append(s)
        m = max(scores)
        e = [math.exp(s - m) for s in scores]
        z = sum(e)
        total += sum(e[i] / z * sum(vh[a] * X[i][a] for a in range(d)) for i in range(N))
    return total


# --- evaluation ---------------------------------------------------------------------


@pytest.mark.parametrize("H,d,N", [(1, 1, 1), (1, 3, 4), (2, 2, 5), (3, 4, 3), (4, 5, 7)])
def test_matches_naive_loop(H, d, N):
    rng = np.random.default_rng(100 + 10 * H + d)
    m = random_model(H, d, seed=rng)
    for _ in range(5):
        X = rng.normal(size=(N, d))
        assert m(X) == pytest.approx(naive(m.W, m.v, X), rel=1e-12, abs=1e-12)


def test_large_scores_do_not_overflow():
    rng = np.random.default_rng(1)
    m = random_model(2, 3, seed=rng, scale=300.0)
    X = rng.normal(size=(4, 3)) * 5
    y = m(X)
    assert np.isfinite(y)
    assert y == pytest.approx(naive(m.W, m.v, X), rel=1e-9, abs=1e-9)


def test_batch_matches_single():
    rng = np.random.default_rng(2)
    m = random_model(3, 4, seed=rng)
    Xs = rng.normal(size=(20, 6, 4))
    yb = m.batch(Xs)
    assert yb.shape == (20,)
    ys = np.array([m(X) for X in Xs])
    np.testing.assert_allclose(yb, ys, rtol=1e-13, atol=1e-13)


def test_call_returns_python_float():
    m = random_model(1, 2, seed=np.random.default_rng(3))
    assert type(m(np.ones((2, 2)))) is float


def test_zero_heads_is_zero_function():
    m = MultiHeadAttention(np.zeros((0, 3, 3)), np.zeros((0, 3)))
    assert (m.H, m.d) == (0, 3)
    Xs = np.random.default_rng(4).normal(size=(7, 5, 3))
    assert np.array_equal(m.batch(Xs), np.zeros(7))
    assert m(Xs[0]) == 0.0
    assert np.array_equal(m.V, np.zeros(3))
    mp = m.to_mpmath()
    assert mp.exact and mp(Xs[0]) == 0


def test_float_and_exact_agree():
    rng = np.random.default_rng(5)
    m = random_model(3, 3, seed=rng)
    me = m.to_mpmath()
    assert me.exact and not m.exact
    Xs = rng.normal(size=(10, 4, 3))
    with mpmath.workdps(40):
        ye = me.batch(Xs)
    assert all(isinstance(y, mpmath.mpf) for y in ye)
    yf = m.batch(Xs)
    for a, b in zip(yf, ye):
        assert abs(a - float(b)) <= 1e-13 * max(1.0, abs(float(b)))


def test_exact_model_keeps_parameters_exactly():
    W = np.array([[[0.1]]])
    me = MultiHeadAttention(W, np.array([[0.3]])).to_mpmath()
    assert me.W[0, 0, 0] == mpmath.mpf(0.1)  # the float64 value, not the decimal 1/10


def test_single_token_returns_V_dot_x():
    rng = np.random.default_rng(6)
    m = random_model(3, 4, seed=rng)
    x = rng.normal(size=4)
    assert m(x[None]) == pytest.approx(float(m.V @ x), rel=1e-13, abs=1e-13)


def test_properties_H_d_repr():
    m = random_model(2, 3, seed=np.random.default_rng(7))
    assert (m.H, m.d) == (2, 3)
    assert repr(m) == "MultiHeadAttention(H=2, d=3, float64)"
    assert repr(m.to_mpmath()) == "MultiHeadAttention(H=2, d=3, mpmath)"
    np.testing.assert_allclose(m.V, m.v.sum(axis=0))


# --- input validation ----------------------------------------------------------------


@pytest.mark.parametrize(
    "W,v,match",
    [
        (np.zeros((3, 3)), np.zeros((1, 3)), r"W must have shape \(H, d, d\)"),
        (np.zeros((1, 3, 2)), np.zeros((1, 3)), r"W must have shape \(H, d, d\)"),
        (np.zeros((1, 3, 3)), np.zeros(3), r"v must have shape \(H, d\)"),
        (np.zeros((2, 3, 3)), np.zeros((1, 3)), "inconsistent head count or width"),
        (np.zeros((1, 3, 3)), np.zeros((1, 2)), "inconsistent head count or width"),
        (np.zeros((1, 0, 0)), np.zeros((1, 0)), "token width d must be at least 1"),
    ],
)
def test_shape_errors(W, v, match):
    with pytest.raises(ValueError, match=match):
        MultiHeadAttention(W, v)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_parameters(bad):
    W = np.zeros((1, 2, 2))
    W[0, 1, 0] = bad
    with pytest.raises(ValueError, match=r"W has a non-finite entry"):
        MultiHeadAttention(W, np.ones((1, 2)))
    v = np.ones((1, 2))
    v[0, 0] = bad
    with pytest.raises(ValueError, match=r"v has a non-finite entry"):
        MultiHeadAttention(np.zeros((1, 2, 2)), v)


def test_non_finite_mpmath_parameter():
    W = np.array([[[mpmath.mpf("nan")]]], dtype=object)
    with pytest.raises(ValueError, match="non-finite"):
        MultiHeadAttention(W, np.ones((1, 1)))


@pytest.mark.parametrize(
    "W,v,match",
    [
        (np.full((1, 2, 2), "a"), np.ones((1, 2)), "W must be a real numeric array"),
        (np.ones((1, 2, 2), dtype=bool), np.ones((1, 2)), "W must be a real numeric array"),
        (np.ones((1, 2, 2)), np.ones((1, 2), dtype=complex), "v must be real"),
        (np.array([[[None]]], dtype=object), np.ones((1, 1)), "W must hold real numbers"),
    ],
)
def test_non_numeric_parameters(W, v, match):
    with pytest.raises(TypeError, match=match):
        MultiHeadAttention(W, v)


def test_sequence_errors():
    m = random_model(2, 3, seed=np.random.default_rng(8))
    with pytest.raises(ValueError, match=r"tokens have width 2, but the model has d = 3"):
        m(np.ones((4, 2)))
    with pytest.raises(ValueError, match=r"tokens have width 2, but the model has d = 3"):
        m.batch(np.ones((5, 4, 2)))
    with pytest.raises(ValueError, match="empty sequence"):
        m(np.ones((0, 3)))
    with pytest.raises(ValueError, match="empty sequence"):
        m.batch(np.ones((2, 0, 3)))
    with pytest.raises(ValueError, match=r"a sequence must have shape \(N, d\)"):
        m(np.ones(3))
    with pytest.raises(ValueError, match=r"a batch of sequences must have shape \(n, N, d\)"):
        m.batch(np.ones((4, 3)))
    with pytest.raises(ValueError, match="non-finite"):
        m(np.array([[0.0, np.nan, 1.0]]))
    with pytest.raises(TypeError, match="sequence must be a real numeric array"):
        m(np.array([["a", "b", "c"]]))
    with pytest.raises(TypeError, match="sequence must be a real numeric array"):
        m(np.ones((2, 3), dtype=bool))


# --- properties (hypothesis) --------------------------------------------------------

finite = st.floats(-2.0, 2.0, allow_nan=False, allow_infinity=False)


@st.composite
def model_and_queries(draw, max_H=3, max_d=3):
    H = draw(st.integers(1, max_H))
    d = draw(st.integers(1, max_d))
    N = draw(st.integers(1, 4))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    W = rng.normal(size=(H, d, d)) * draw(st.sampled_from([0.1, 1.0, 5.0]))
    v = rng.normal(size=(H, d))
    Xs = rng.normal(size=(6, N, d))
    return W, v, Xs, rng


def close(a, b, scale):
    np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-11 * scale)


@given(model_and_queries())
def test_permuting_heads_leaves_outputs_unchanged(data):
    W, v, Xs, rng = data
    perm = rng.permutation(len(W))
    y = MultiHeadAttention(W, v).batch(Xs)
    yp = MultiHeadAttention(W[perm], v[perm]).batch(Xs)
    close(y, yp, 1 + np.abs(v).sum() * np.abs(Xs).max())


@given(model_and_queries())
def test_merging_heads_with_equal_W(data):
    W, v, Xs, rng = data
    v2 = rng.normal(size=v.shape[1])
    # split head 0 into two heads with the same W whose v sum to v[0]
    Ws = np.concatenate([W, W[:1]])
    vs = np.concatenate([v - np.eye(len(v))[0][:, None] * v2, v2[None]])
    y = MultiHeadAttention(W, v).batch(Xs)
    ys = MultiHeadAttention(Ws, vs).batch(Xs)
    close(y, ys, 1 + (np.abs(v).sum() + 2 * np.abs(v2).sum()) * np.abs(Xs).max())


@given(model_and_queries(), st.sampled_from([0.0, 1e-3, 1.0, 1e3]), st.integers(0, 3))
def test_adding_a_zero_value_head(data, scale, pos):
    W, v, Xs, rng = data
    d = W.shape[1]
    pos = min(pos, len(W))
    W0 = scale * rng.normal(size=(1, d, d))
    Wz = np.concatenate([W[:pos], W0, W[pos:]])
    vz = np.concatenate([v[:pos], np.zeros((1, d)), v[pos:]])
    y = MultiHeadAttention(W, v).batch(Xs)
    yz = MultiHeadAttention(Wz, vz).batch(Xs)
    close(y, yz, 1 + np.abs(v).sum() * np.abs(Xs).max())


@given(model_and_queries(max_H=4, max_d=4))
def test_single_token_query_is_linear(data):
    W, v, Xs, rng = data
    m = MultiHeadAttention(W, v)
    x = Xs[:, :1, :]
    close(m.batch(x), x[:, 0, :] @ v.sum(axis=0), 1 + np.abs(v).sum() * np.abs(Xs).max())


def test_degenerate_models_and_their_canonical_heads():
    from attnlearn.model import DEGENERACIES, degenerate

    m = random_model(3, 2, seed=3)
    heads = {k: canonical(degenerate(m, k)).H for k in DEGENERACIES}
    assert heads == {"merged": 2, "zero-sum": 1, "equal-v": 3, "zero-v": 2, "zero": 0}
    assert np.array_equal(degenerate(m, "zero-v", head=-1).v[2], np.zeros(2))
    assert np.array_equal(m.v, random_model(3, 2, seed=3).v)  # the model itself is left alone
    with pytest.raises(ValueError, match=r"kind must be one of .*got 'equal'"):
        degenerate(m, "equal")
    with pytest.raises(ValueError, match=r"kind='merged' needs two heads, the model has 1"):
        degenerate(random_model(1, 2), "merged")


def test_degenerate_zero_v_names_a_missing_head():
    from attnlearn.model import degenerate

    with pytest.raises(ValueError, match=r"head must index one of the model's 2 heads, got 2"):
        degenerate(random_model(2, 3), "zero-v", head=2)
