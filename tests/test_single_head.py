"""Tests of attnlearn.single_head: the prior work's baseline (claim C1)."""

import re

import mpmath
import numpy as np
import pytest

from attnlearn import (
    MultiHeadAttention,
    NotIdentifiableError,
    Oracle,
    RecoveryError,
    UniformNoise,
    canonical,
    learn_single_head,
    param_error,
)
from attnlearn.errors import CheckFailedError
from attnlearn.single_head import balanced_basis


def single_head(rng, d):
    return MultiHeadAttention(rng.normal(size=(1, d, d)) / np.sqrt(d), rng.normal(size=(1, d)))


@pytest.mark.parametrize("d", [1, 2, 4, 8, 16])
def test_float64_recovery(d):
    m = single_head(np.random.default_rng(50 + d), d)
    o = Oracle(m)
    r = learn_single_head(o, d)  # d^2 + d queries, then 4 of 2 tokens that verify the head
    assert o.queries == d * d + d + 4
    assert o.max_length == 2
    assert dict(o.lengths) == {1: d, 2: d * d + 4}
    assert not r.exact and r.H == 1
    assert param_error(r, canonical(m)) <= 1e-9


@pytest.mark.parametrize("d", [1, 2, 4, 8, 16])
def test_exact_recovery(d):
    m = single_head(np.random.default_rng(50 + d), d)
    o = Oracle(m, precision=60)
    r = learn_single_head(o, d, holdout=0)  # the algorithm alone: exactly d^2 + d queries
    assert o.queries == d * d + d
    assert r.exact
    err = param_error(r, canonical(m.to_mpmath()))
    assert err <= 1e-40
    assert mpmath.mp.dps == 15  # the learner restores the global precision


def test_exact_error_shrinks_with_precision():
    m = single_head(np.random.default_rng(60), 3)
    errs = [param_error(learn_single_head(Oracle(m, precision=p), 3), m.to_mpmath()) for p in (20, 40)]
    assert errs[0] <= 1e-15 and errs[1] <= 1e-35


def test_zero_entries_in_v():
    """Degenerate directions: v_i = 0 makes v^T e_i = 0; the balanced basis avoids it."""
    rng = np.random.default_rng(61)
    d = 5
    W = rng.normal(size=(1, d, d)) / np.sqrt(d)
    v = np.array([[0.0, 1.3, 0.0, 0.0, -0.4]])
    m = MultiHeadAttention(W, v)
    r = learn_single_head(Oracle(m), d)
    assert param_error(r, m) <= 1e-9
    re = learn_single_head(Oracle(m, precision=60), d)
    assert param_error(re, m.to_mpmath()) <= 1e-40


def test_v_along_one_axis_and_along_ones():
    rng = np.random.default_rng(62)
    d = 4
    W = rng.normal(size=(1, d, d))
    for v in (np.eye(d)[2], np.ones(d), -np.ones(d)):
        m = MultiHeadAttention(W, v[None])
        assert param_error(learn_single_head(Oracle(m), d), m) <= 1e-9


@pytest.mark.parametrize("v", [[3.0, 0.0, 0.0], [1.0, 0.0, 2.0], [1.0, 1.0, 1.0], [-1.0, -1.0, -1.0], [0.0, 0.0, 1e-8]])
def test_balanced_basis(v):
    v = np.array(v)
    U = balanced_basis(v)
    np.testing.assert_allclose(U.T @ U, np.eye(3), atol=1e-15)
    np.testing.assert_allclose(U.T @ v, np.full(3, np.linalg.norm(v) / np.sqrt(3)), rtol=1e-14)


def test_balanced_basis_exact():
    with mpmath.workdps(50):
        v = np.array([mpmath.mpf(2), mpmath.mpf(0), mpmath.mpf(0), mpmath.mpf(-1)], dtype=object)
        U = balanced_basis(v)
        target = mpmath.sqrt(5) / 2
        assert all(abs(x - target) < mpmath.mpf("1e-48") for x in U.T.dot(v))


def test_zero_v_not_identifiable():
    m = MultiHeadAttention(np.random.default_rng(63).normal(size=(1, 3, 3)), np.zeros((1, 3)))
    o = Oracle(m)
    with pytest.raises(NotIdentifiableError, match=r"v = 0: the model is the zero function"):
        learn_single_head(o, 3)
    assert o.queries == 3  # it stops after the singleton queries
    with pytest.raises(NotIdentifiableError, match="W is not identifiable"):
        learn_single_head(Oracle(m, precision=30), 3)


def test_zero_heads_not_identifiable():
    m = MultiHeadAttention(np.zeros((0, 2, 2)), np.zeros((0, 2)))
    with pytest.raises(NotIdentifiableError):
        learn_single_head(Oracle(m), 2)


def test_wrong_d():
    o = Oracle(single_head(np.random.default_rng(64), 3))
    with pytest.raises(ValueError, match=r"d = 4 does not match the oracle's token width 3"):
        learn_single_head(o, 4)
    assert o.queries == 0


@pytest.mark.parametrize("d, exc", [(0, ValueError), (-2, ValueError), (2.0, TypeError), (2.5, TypeError),
                                    ("3", TypeError), (True, TypeError), (None, TypeError)])
def test_bad_d(d, exc):
    o = Oracle(single_head(np.random.default_rng(65), 2))
    with pytest.raises(exc, match="d must be a positive integer"):
        learn_single_head(o, d)


def test_numpy_integer_d():
    m = single_head(np.random.default_rng(66), 2)
    assert param_error(learn_single_head(Oracle(m), np.int64(2)), m) <= 1e-9


def two_head(seed, d=4):
    rng = np.random.default_rng(seed)
    return MultiHeadAttention(rng.normal(size=(2, d, d)) / np.sqrt(d), rng.normal(size=(2, d))), rng


def test_two_heads_wrong_model_is_caught_by_the_verification():
    """Seed 0: the log-ratios happen to be positive, so the algorithm builds one head; it is wrong
    (``holdout=0`` returns it unverified), and the default verification queries raise instead."""
    m, rng = two_head(0)
    r = learn_single_head(Oracle(m), 4, holdout=0)
    assert r.H == 1
    Xs = rng.normal(size=(1000, 5, 4))
    assert np.max(np.abs(r.batch(Xs) - m.batch(Xs))) > 1.0
    assert param_error(r, canonical(m)) == float("inf")
    with pytest.raises(CheckFailedError, match=r"misses the oracle on 4 verification queries"):
        learn_single_head(Oracle(m), 4)


def test_two_heads_raise():
    """Seed 1: a log-ratio argument is negative, which no single head can produce."""
    m, _ = two_head(1)
    with pytest.raises(RecoveryError, match=r"is not positive .* not those of a single noiseless head"):
        learn_single_head(Oracle(m), 4)


def test_noise_can_break_the_log_ratio():
    m = single_head(np.random.default_rng(67), 3)
    with pytest.raises(RecoveryError, match="not positive"):
        learn_single_head(Oracle(m, noise=UniformNoise(10.0), seed=0), 3)


def test_balanced_basis_near_the_ones_direction():
    # v a few ulps away from 1 (another machine's rounding of the singleton answers): the basis
    # must stay orthonormal and balanced (a reflection vector made of rounding errors is not)
    eps = np.finfo(float).eps
    for d in (2, 4, 7):
        for k in ([1, -2, 3, 0, 4, -1, 2][:d], [0] * d):
            v = np.ones(d) * (1 + np.array(k) * eps)
            for sgn in (1, -1):
                U = balanced_basis(sgn * v)
                np.testing.assert_allclose(U.T @ U, np.eye(d), atol=4e-16 * d)
                np.testing.assert_allclose(U.T @ (sgn * v), np.full(d, np.linalg.norm(v) / np.sqrt(d)), rtol=1e-14)


# --- issue 13: d and the oracle checked as learn checks them ------------------------------------


@pytest.mark.parametrize("oracle", [None, object(), np.zeros(3)])
def test_an_oracle_without_the_protocol_is_named(oracle):
    with pytest.raises(TypeError, match=r"oracle must have \.d, \.exact, \.dps and \.batch\(Xs\)"):
        learn_single_head(oracle, 2)


@pytest.mark.parametrize("d, exc, match", [(0, ValueError, "d must be a positive integer, got 0"),
                                           ("2", TypeError, "d must be a positive integer, got str '2'"),
                                           (3, ValueError, "d = 3 does not match the oracle's token width 2")])
def test_bad_d_asks_nothing(d, exc, match):
    o = Oracle(single_head(np.random.default_rng(67), 2))
    with pytest.raises(exc, match=match):
        learn_single_head(o, d)
    assert o.queries == 0


# --- issue 13: never silent: the verification queries catch a model with more heads ---------------


@pytest.mark.parametrize("precision, limit", [("float64", r"1e-08"), (40, r"1e-20")])
@pytest.mark.parametrize("d", [2, 3])
def test_a_two_head_model_raises_instead_of_returning_one_head(precision, limit, d):
    from attnlearn.model import random_model

    raised = 0
    for seed in range(3):
        o = Oracle(random_model(2, d, seed=seed), precision=precision)
        try:
            learn_single_head(o, d)
        except CheckFailedError as err:
            assert re.search(r"misses the oracle on 4 verification queries: relative discrepancy \S+ > "
                             + limit + r": the oracle is not a single noiseless attention head", str(err))
            raised += 1
        except RecoveryError as err:  # a negative log-ratio argument stops it earlier
            assert "is not positive" in str(err)
        else:
            raise AssertionError(f"a 2-head model (d = {d}, seed {seed}) returned a single head")
    assert raised >= 2  # measured: 3 of 3 at d = 2 and 2 of 3 at d = 3 reach the verification


def test_holdout_and_seed_are_validated():
    o = Oracle(single_head(np.random.default_rng(0), 2))
    with pytest.raises(ValueError, match=r"holdout must be a non-negative integer, got -1"):
        learn_single_head(o, 2, holdout=-1)
    with pytest.raises(TypeError, match=r"seed must be None, a non-negative integer"):
        learn_single_head(o, 2, seed=1.5)
    assert o.queries == 0
