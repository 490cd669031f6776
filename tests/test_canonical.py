"""Tests of attnlearn.canonical: the canonical form (claim C2) and param_error."""

import mpmath
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from attnlearn import MultiHeadAttention, canonical, default_atol, param_error
from attnlearn.model import random_model


# --- merging -----------------------------------------------------------------------------


def test_distinct_heads_kept():
    m = random_model(3, 4, seed=np.random.default_rng(30))
    c = canonical(m)
    assert c.H == 3
    assert param_error(c, m) == 0.0


def test_duplicate_W_merged():
    rng = np.random.default_rng(31)
    m = random_model(2, 3, seed=rng)
    v2 = rng.normal(size=3)
    split = MultiHeadAttention(np.stack([m.W[0], m.W[1], m.W[0]]), np.stack([m.v[0] - v2, m.v[1], v2]))
    c = canonical(split)
    assert c.H == 2
    assert param_error(c, m) <= 1e-15


def test_opposite_v_dropped():
    rng = np.random.default_rng(32)
    m = random_model(1, 3, seed=rng)
    W2, v2 = rng.normal(size=(3, 3)), rng.normal(size=3)
    m2 = MultiHeadAttention(np.stack([m.W[0], W2, W2]), np.stack([m.v[0], v2, -v2]))
    c = canonical(m2)
    assert c.H == 1
    assert param_error(c, m) == 0.0


def test_all_cancelling_gives_zero_heads():
    rng = np.random.default_rng(33)
    W, v = rng.normal(size=(2, 3, 3)), rng.normal(size=(2, 3))
    m = MultiHeadAttention(np.stack([W[0], W[1], W[0], W[1]]), np.stack([v[0], v[1], -v[0], -v[1]]))
    c = canonical(m)
    assert (c.H, c.d) == (0, 3)
    assert param_error(c, MultiHeadAttention(np.zeros((0, 3, 3)), np.zeros((0, 3)))) == 0.0
    assert canonical(c).H == 0


def test_zero_value_head_dropped_any_W():
    rng = np.random.default_rng(34)
    m = random_model(2, 2, seed=rng)
    m0 = MultiHeadAttention(np.concatenate([m.W, 1e3 * rng.normal(size=(1, 2, 2))]),
                            np.concatenate([m.v, np.zeros((1, 2))]))
    assert canonical(m0).H == 2
    assert param_error(canonical(m0), m) == 0.0


def test_idempotent():
    rng = np.random.default_rng(35)
    W = rng.normal(size=(3, 3, 3))
    m = MultiHeadAttention(np.stack([W[0], W[1], W[0], W[2], W[2]]), rng.normal(size=(5, 3)))
    c = canonical(m)
    cc = canonical(c)
    assert c.H == 3
    np.testing.assert_array_equal(cc.W, c.W)
    np.testing.assert_array_equal(cc.v, c.v)


def test_permutation_invariant_output():
    rng = np.random.default_rng(36)
    W = rng.normal(size=(3, 3, 3))
    idx = [0, 1, 0, 2, 0, 2]
    m = MultiHeadAttention(W[idx], rng.normal(size=(6, 3)))
    c = canonical(m)
    for _ in range(10):
        p = rng.permutation(6)
        cp = canonical(MultiHeadAttention(m.W[p], m.v[p]))
        np.testing.assert_array_equal(cp.W, c.W)  # bit for bit: the same canonical model
        np.testing.assert_array_equal(cp.v, c.v)


def test_exact_model_stays_exact():
    rng = np.random.default_rng(37)
    m = random_model(2, 2, seed=rng)
    e = MultiHeadAttention(np.concatenate([m.W, m.W[:1]]), np.concatenate([m.v, m.v[:1]])).to_mpmath()
    c = canonical(e)
    assert c.exact and c.H == 2
    assert all(isinstance(x, mpmath.mpf) for x in c.v.ravel())


# --- tolerance -----------------------------------------------------------------------------


def test_default_atol():
    m = MultiHeadAttention(np.full((1, 2, 2), 0.5), np.full((1, 2), 0.25))
    assert default_atol(m) == pytest.approx(np.finfo(float).eps ** 0.75)
    big = MultiHeadAttention(np.full((1, 2, 2), 100.0), np.full((1, 2), 3.0))
    assert default_atol(big) == pytest.approx(100 * np.finfo(float).eps ** 0.75)


def test_atol_decides_merging():
    rng = np.random.default_rng(38)
    W = rng.normal(size=(2, 2))
    W2 = W.copy()
    W2[0, 1] += 1e-14
    m = MultiHeadAttention(np.stack([W, W2]), rng.normal(size=(2, 2)))
    assert canonical(m).H == 1  # default atol ~ 1.8e-12 merges
    assert canonical(m, atol=0).H == 2
    assert canonical(m, atol=1e-15).H == 2
    assert canonical(m, atol=1e-13).H == 1


def test_atol_decides_dropping():
    W = np.eye(2)[None]
    m = MultiHeadAttention(W, np.array([[1e-13, 0.0]]))
    assert canonical(m).H == 0
    assert canonical(m, atol=0).H == 1


def test_single_linkage_chains():
    W = np.zeros((3, 1, 1))
    W[:, 0, 0] = [0.0, 0.6, 1.2]
    m = MultiHeadAttention(W, np.ones((3, 1)))
    assert canonical(m, atol=0.7).H == 1  # 0 ~ 0.6 ~ 1.2, though |0 - 1.2| > atol
    assert canonical(m, atol=0.5).H == 3


@pytest.mark.parametrize("atol", [-1e-3, float("nan"), float("inf")])
def test_bad_atol(atol):
    m = random_model(1, 2, seed=np.random.default_rng(39))
    with pytest.raises(ValueError, match="atol must be a finite number >= 0"):
        canonical(m, atol=atol)


def test_canonical_wrong_type():
    with pytest.raises(TypeError, match="canonical expects a MultiHeadAttention, got tuple"):
        canonical((np.zeros((1, 2, 2)), np.zeros((1, 2))))


# --- function preserved (hypothesis) -------------------------------------------------------


@st.composite
def redundant_models(draw):
    """A model with duplicated W (split v), cancelling pairs and zero-v heads."""
    d = draw(st.integers(1, 3))
    K = draw(st.integers(0, 3))  # distinct W
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    base_W = rng.normal(size=(K + 1, d, d))
    Ws, vs = [], []
    for k in range(K):
        copies = draw(st.integers(1, 3))
        for _ in range(copies):
            Ws.append(base_W[k])
            vs.append(rng.normal(size=d))
    if draw(st.booleans()):  # a cancelling pair
        u = rng.normal(size=d)
        Ws += [base_W[K], base_W[K]]
        vs += [u, -u]
    if draw(st.booleans()):  # a zero head
        Ws.append(rng.normal(size=(d, d)))
        vs.append(np.zeros(d))
    H = len(Ws)
    W = np.array(Ws).reshape(H, d, d)
    v = np.array(vs).reshape(H, d)
    return MultiHeadAttention(W, v), K, rng


@given(redundant_models())
def test_canonical_preserves_function(data):
    m, K, rng = data
    c = canonical(m)
    assert c.H <= K  # a split v may sum to ~0 only by accident; never more than K heads
    Xs = rng.normal(size=(20, 4, m.d))
    scale = 1 + np.abs(m.v).sum() * np.abs(Xs).max()
    np.testing.assert_allclose(c.batch(Xs), m.batch(Xs), rtol=1e-11, atol=1e-11 * scale)


@given(redundant_models())
def test_canonical_permutation_invariant_property(data):
    m, K, rng = data
    p = rng.permutation(m.H)
    c, cp = canonical(m), canonical(MultiHeadAttention(m.W[p], m.v[p]))
    assert c.H == cp.H
    np.testing.assert_array_equal(c.W, cp.W)
    np.testing.assert_array_equal(c.v, cp.v)


@given(redundant_models())
def test_canonical_idempotent_property(data):
    m, _, _ = data
    c = canonical(m)
    cc = canonical(c)
    np.testing.assert_array_equal(c.W, cc.W)
    np.testing.assert_array_equal(c.v, cc.v)


# --- param_error ---------------------------------------------------------------------------


def test_param_error_identical_is_zero():
    m = random_model(3, 3, seed=np.random.default_rng(40))
    assert param_error(m, m) == 0.0


def test_param_error_head_count_differs():
    rng = np.random.default_rng(41)
    assert param_error(random_model(2, 3, seed=rng), random_model(3, 3, seed=rng)) == float("inf")
    empty = MultiHeadAttention(np.zeros((0, 3, 3)), np.zeros((0, 3)))
    assert param_error(empty, empty) == 0.0
    assert param_error(empty, random_model(1, 3, seed=rng)) == float("inf")


def test_param_error_permutation_invariant():
    rng = np.random.default_rng(42)
    m = random_model(4, 3, seed=rng)
    p = [2, 0, 3, 1]
    assert param_error(MultiHeadAttention(m.W[p], m.v[p]), m) == 0.0
    noisy = MultiHeadAttention(m.W + 1e-6 * rng.normal(size=m.W.shape), m.v)
    e = param_error(noisy, m)
    assert 1e-8 < e < 1e-5
    assert param_error(MultiHeadAttention(noisy.W[p], noisy.v[p]), m) == e


def test_param_error_value():
    W = np.array([[[1.0, 0.0], [0.0, 0.0]]])
    v = np.array([[3.0, 4.0]])
    ref = MultiHeadAttention(W, v)
    assert param_error(MultiHeadAttention(W, v + [[0.0, 0.5]]), ref) == pytest.approx(0.1)
    assert param_error(MultiHeadAttention(2 * W, v), ref) == pytest.approx(1.0)


def test_param_error_zero_reference_is_absolute():
    ref = MultiHeadAttention(np.zeros((1, 2, 2)), np.array([[1.0, 0.0]]))
    a = MultiHeadAttention(np.full((1, 2, 2), 1e-3), np.array([[1.0, 0.0]]))
    assert param_error(a, ref) == pytest.approx(2e-3)


def test_param_error_resolves_mpmath_differences():
    rng = np.random.default_rng(43)
    m = random_model(2, 3, seed=rng)
    with mpmath.workdps(60):
        e = m.to_mpmath()
        W = e.W.copy()
        W[1, 0, 0] = W[1, 0, 0] + mpmath.mpf("1e-50")
        e2 = MultiHeadAttention(W, e.v)
    err = param_error(e2, e)  # at the default 15-digit mpmath precision
    expect = 1e-50 / np.linalg.norm(m.W[1])
    assert err == pytest.approx(expect, rel=1e-6)
    assert err > 0
    assert param_error(e, m) == 0.0  # mixed float / mpmath


def test_param_error_errors():
    rng = np.random.default_rng(44)
    a = random_model(1, 2, seed=rng)
    with pytest.raises(TypeError, match="param_error expects MultiHeadAttention models, got ndarray"):
        param_error(a, a.W)
    with pytest.raises(TypeError, match="param_error expects MultiHeadAttention models"):
        param_error("model", a)
    with pytest.raises(ValueError, match="models have different widths d = 2 and d = 3"):
        param_error(a, random_model(1, 3, seed=rng))


# --- exact helpers carry the precision of their inputs (issue 13) -------------------------------


def _sixty_digit_equal_W_model(d=2, seed=45):
    """Three heads at 60 digits, heads 0 and 1 share W; v entries need all 60 digits."""
    rng = np.random.default_rng(seed)
    m = random_model(3, d, seed=rng)
    with mpmath.workdps(60):
        W = m.to_mpmath().W + mpmath.mpf(1) / 7  # entries with ~200-bit mantissas
        W[1] = W[0]
        v = np.array([[mpmath.mpf(1) / (3 + h + i) for i in range(d)] for h in range(3)], dtype=object)
        v = v + m.to_mpmath().v
        return MultiHeadAttention(W, v)


def test_canonical_merges_at_the_precision_of_the_model():
    model = _sixty_digit_equal_W_model()
    assert mpmath.mp.dps == 15  # the ambient default: the test is about not using it
    c = canonical(model)
    assert mpmath.mp.dps == 15
    assert c.H == 2
    with mpmath.workdps(60):
        ab = model.v[0] + model.v[1]
        merged = [h for h in range(c.H) if all(c.W[h].ravel() == model.W[0].ravel())]
        assert len(merged) == 1
        assert max(abs(x - y) for x, y in zip(c.v[merged[0]], ab)) <= mpmath.mpf("1e-55")
        # the same canonical form as inside a 60-digit context
        ref = canonical(model)
    assert param_error(c, ref) == 0.0
    # the default tolerance is that of the model's 60 digits, not of float64
    assert default_atol(model) <= 1e-40


def test_canonical_sums_float64_sized_mpmath_entries_exactly():
    # entries that carry 53 bits, at the default 15 digits: the merged v is the exact sum (which
    # float64 would round), the same as inside workdps(60); the tolerance stays float64's
    rng = np.random.default_rng(46)
    m = random_model(2, 3, seed=rng)
    v2 = rng.normal(size=3) * 1e-3
    split = MultiHeadAttention(np.stack([m.W[0], m.W[1], m.W[0]]), np.stack([m.v[0], m.v[1], v2])).to_mpmath()
    assert mpmath.mp.dps == 15
    c15 = canonical(split)
    with mpmath.workdps(60):
        c60 = canonical(split)
        exact = [mpmath.mpf(a) + mpmath.mpf(b) for a, b in zip(m.v[0], v2)]
    assert c15.H == c60.H == 2
    assert param_error(c15, c60) == 0.0
    merged = [h for h in range(2) if all(c15.W[h].ravel() == split.W[0].ravel())][0]
    assert all(x == y for x, y in zip(c15.v[merged], exact))
    assert any(x != mpmath.mpf(float(x)) for x in c15.v[merged])  # a sum float64 would round
    scale = max(1.0, np.abs(m.W).max(), np.abs(m.v).max())
    assert default_atol(split) == pytest.approx(np.finfo(float).eps ** 0.75 * scale)


def test_param_error_of_an_exact_recovery_of_an_equal_W_model():
    from attnlearn import Oracle, learn

    model = _sixty_digit_equal_W_model()
    assert mpmath.mp.dps == 15
    rec = learn(Oracle(model, precision=60), model.d, heads=2)
    err = param_error(rec.model, canonical(model))
    assert err <= 1e-40
    assert err <= 10 * rec.error_estimate


def test_matched_error_takes_the_matching_and_its_worst_pair():
    from attnlearn.canonical import matched_error

    cost = np.array([[0.9, 0.1], [0.2, 0.8]])  # heads swapped: pairs (0, 1) and (1, 0)
    assert matched_error(cost) == 0.2
    assert matched_error(np.zeros((0, 0))) == 0.0
