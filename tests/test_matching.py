"""Tests of attnlearn.matching (chapter 4): the assignment finds the true pairing, or raises."""

import warnings

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlearn import UnmatchedHeadsError
from attnlearn.matching import match_candidates


def link_problem(n, seed, noise=0.0):
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(n, 2))
    B = rng.normal(size=(n, 2))
    perm = rng.permutation(n)
    observed = A + B[perm] + noise * rng.normal(size=(n, 2))
    shuffle = rng.permutation(n)
    P = A[:, None, :] + B[None, :, :]
    return P[None], observed[shuffle][None], perm


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 6), seed=st.integers(0, 10_000))
def test_true_pairing_is_found(n, seed):
    P, O, perm = link_problem(n, seed)
    m = match_candidates(P, O, np.ones(2), tol=1e-9)
    np.testing.assert_array_equal(m.perm[0], perm)
    assert m.residual[0] <= 1e-12
    # the observed index of each matched candidate is a bijection
    assert sorted(m.observed[0].tolist()) == list(range(n))


def test_mpmath_residuals_are_not_rounded():
    P, O, perm = link_problem(3, 1)
    with mpmath.workdps(70):
        Pm = np.vectorize(mpmath.mpf, otypes=[object])(P)
        Om = np.vectorize(mpmath.mpf, otypes=[object])(O) + mpmath.mpf("1e-50")
        m = match_candidates(Pm, Om, np.ones(2))
    np.testing.assert_array_equal(m.perm[0], perm)
    assert 1e-51 < m.residual[0] < 1e-49


def test_no_pairing_fits():
    P, O, _ = link_problem(3, 2)
    O = O + 0.5
    with pytest.raises(UnmatchedHeadsError, match=r"link\(1,2\): no pairing fits"):
        match_candidates(P, O, np.ones(2), tol=1e-6, labels=["link(1,2)"])


def test_ambiguous_pairing():
    # two heads with identical candidates for both labels: two pairings fit equally well
    # both the identity and the swap put every candidate exactly on an observed point
    o = np.array([[1.0, 0.5], [2.0, -0.5]])
    P = np.stack([o, o])[None]  # P[0, a, b] = o[b] for both a
    O = o[None]
    with pytest.raises(UnmatchedHeadsError, match="configuration 0: two pairings fit"):
        match_candidates(P, O, np.ones(2), tol=1e-3)


def test_margin_reported():
    P, O, _ = link_problem(4, 3)
    m = match_candidates(P, O, np.ones(2))
    assert m.margin[0] > 10 * max(m.residual[0], 1e-15)


def test_matching_check_against_a_new_tolerance():
    # Matching.check re-judges a stored matching (robust mode checks the redraw's matching
    # against the learner's own tolerance instead of matching again)
    P, O, perm = link_problem(3, 5, noise=1e-6)
    m = match_candidates(P, O, np.ones(2))
    assert m.check(1e-3) is m
    with pytest.raises(UnmatchedHeadsError, match=r"link\(9,9\): no pairing fits - scaled residual"):
        m.check(1e-9, labels=["link(9,9)"])


def test_huge_values_from_a_failed_fit_lose_without_a_warning():
    # noise sweep, H = 3, d = 8, float32 seeds 70 and 188: a failed fit's 1e308-sized value over
    # a tiny scale overflowed with a RuntimeWarning instead of simply losing every comparison
    O = np.array([[[0.0, 1.0], [1.0, 2.0]]])
    P = np.array([[[[1e308, 1e308], [1.0, 2.0]], [[0.0, 1.0], [1e308, 1e308]]]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mt = match_candidates(P, O, np.array([[1e-10, 1e-10]]))
    assert mt.perm.tolist() == [[1, 0]] and mt.residual[0] == 0.0 and mt.margin[0] >= 1e300


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 4), seed=st.integers(0, 10_000), noise=st.sampled_from([0.0, 0.3, 3.0]))
def test_enumeration_agrees_with_linear_sum_assignment(n, seed, noise):
    # for n <= _ENUMERATE match_candidates enumerates the n! pairings instead of calling
    # linear_sum_assignment: both must reach the same minimal total cost (noise 3.0 makes the
    # problem far from the true pairing, where ties and near-ties are likely)
    from scipy.optimize import linear_sum_assignment

    from attnlearn.matching import _ENUMERATE

    assert n <= _ENUMERATE
    P, O, _ = link_problem(n, seed, noise=noise)
    m = match_candidates(P, O, np.ones(2))
    # the cost match_candidates minimises: distance from candidate (a, b) to the nearest observed point
    cost = np.abs(P[0][:, :, None, :] - O[0][None, None, :, :]).max(axis=3).min(axis=2)
    rows, cols = linear_sum_assignment(cost)
    assert cost[np.arange(n), m.perm[0]].sum() == pytest.approx(cost[rows, cols].sum(), rel=1e-12, abs=1e-15)
    assert sorted(m.perm[0].tolist()) == list(range(n))
