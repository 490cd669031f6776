"""learn(..., design="rank") (attnlearn/learner/rank/): heads of low rank in exact mode.

Models of rank p built exactly (``low_rank_model(..., exact=True)``), recovered to 1e-20 at 50 digits
against their canonical form, the rank found from the answers, the count read off the oracle's own
counter and equal to ``rank_budget``; bad requests refused before any query; the rank test and the
height labelling raise on data that contradicts them.
"""

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import attnlearn as al
from attnlearn import MultiHeadAttention, Oracle, canonical, param_error
from attnlearn._arith import to_mp
from attnlearn.errors import IllConditionedError, RankError, UnmatchedHeadsError
from attnlearn.learner.cost import rank_budget, rank_floor
from attnlearn.learner.rank.blocks import BlockFit, label_by_heights
from attnlearn.learner.rank.span import HeadSpan, span_distance
from attnlearn.learner.tolerances import Tolerances
from attnlearn.model import low_rank_model, random_model

DPS = 50


def error(r, M):
    with mpmath.workdps(2 * DPS):
        return param_error(r.model, canonical(M, atol=0))


class Counting(Oracle):
    """An exact oracle that counts its answers itself (the learner's count is checked against it)."""

    def batch(self, Xs):
        out = super().batch(Xs)
        self.asked = getattr(self, "asked", 0) + len(out)
        return out


@pytest.mark.parametrize("d,H,p,seed", [(1, 1, 1, 0), (2, 1, 1, 1), (3, 2, 1, 2), (4, 2, 2, 3), (5, 3, 2, 4),
                                        (6, 2, 3, 5), (4, 2, 4, 6), (8, 2, 4, 7), (8, 4, 2, 8)])
def test_low_rank_models_recovered_with_the_rank_count(d, H, p, seed):
    M = low_rank_model(H, d, p, seed=seed, exact=True)
    o = Counting(M, precision=DPS)
    r = al.learn(o, d, heads=H, design="rank", seed=seed)
    assert error(r, M) < 1e-20
    assert r.error_estimate >= error(r, M)
    assert r.diagnostics.ranks == [min(p, d)] * H
    assert r.queries["design"] == rank_budget(d, H, p)[0]
    assert r.queries["total"] == o.asked
    assert r.max_length == 2 * H + 1
    if p < d:  # below twice the floor of rank-p heads (plus the blocks' constants)
        assert r.queries["design"] <= 2 * rank_floor(d, H, p) + 2 * d


def test_rank_given_is_checked_and_sets_the_bound():
    d, H, p = 6, 2, 2
    M = low_rank_model(H, d, p, seed=11, exact=True)
    r = al.learn(Oracle(M, precision=DPS), d, heads=H, design="rank", rank=p)
    assert error(r, M) < 1e-20 and r.diagnostics.ranks == [p, p]
    need = rank_budget(d, H, p)[0] + max(8, 2 * H + 1)
    r = al.learn(Oracle(M, precision=DPS), d, heads=H, design="rank", rank=p, max_queries=need)
    assert r.queries["total"] == need
    o = Oracle(M, precision=DPS)
    with pytest.raises(ValueError, match="more than max_queries"):  # without rank= the bound is full rank
        al.learn(o, d, heads=H, design="rank", max_queries=need)
    assert o.queries == 0
    with pytest.raises(RankError, match=r"more than rank = 1 independent columns"):
        al.learn(Oracle(M, precision=DPS), d, heads=H, design="rank", rank=1)


def test_heads_of_different_ranks():
    d = 6
    A, B = low_rank_model(1, d, 1, seed=1, exact=True), low_rank_model(1, d, 3, seed=2, exact=True)
    M = MultiHeadAttention(np.concatenate([A.W, B.W]), np.concatenate([A.v, B.v]))
    o = Oracle(M, precision=DPS)
    r = al.learn(o, d, heads=2, design="rank")
    assert error(r, M) < 1e-20
    assert sorted(r.diagnostics.ranks) == [1, 3]
    assert r.queries["design"] == rank_budget(d, 2, 3)[0]  # full blocks until the rank-3 head is certified


def test_full_rank_and_no_heads():
    d, H = 3, 2
    M = random_model(H, d, seed=3)
    r = al.learn(Oracle(M, precision=DPS), d, heads=H, design="rank")
    assert error(r, MultiHeadAttention(to_mp(M.W), to_mp(M.v))) < 1e-20
    assert r.diagnostics.ranks == [d, d] and r.queries["design"] == rank_budget(d, H, d)[0]
    Z = MultiHeadAttention(np.zeros((1, d, d)), np.zeros((1, d)))
    r = al.learn(Oracle(Z, precision=DPS), d, heads=1, design="rank")
    assert r.model.H == 0 and r.diagnostics.ranks == [] and r.diagnostics.visible_heads == 0


@settings(max_examples=10, deadline=None)
@given(d=st.integers(1, 4), H=st.integers(1, 3), data=st.data(), seed=st.integers(0, 2**16))
def test_random_low_rank_models(d, H, data, seed):
    p = data.draw(st.integers(1, d))
    M = low_rank_model(H, d, p, seed=seed, exact=True)
    r = al.learn(Oracle(M, precision=DPS), d, heads=H, design="rank", seed=seed)
    assert error(r, M) < 1e-20
    assert r.queries["design"] == rank_budget(d, r.diagnostics.visible_heads, max(r.diagnostics.ranks))[0]


def test_low_rank_model():
    M = low_rank_model(2, 5, 2, seed=0, exact=True)
    with mpmath.workdps(80):
        s = mpmath.svd_r(mpmath.matrix(M.W[1].tolist()), compute_uv=False)
    assert float(s[1]) > 0.01 and float(s[2]) < 1e-70  # rank 2 exactly, not to float64's 1e-16
    F = low_rank_model(2, 5, 2, seed=0)
    assert np.max(np.abs(F.W - np.array(M.W, dtype=float))) < 1e-15
    with pytest.raises(ValueError, match="p must be between 1 and d = 5, got 6"):
        low_rank_model(2, 5, 6)


@pytest.mark.parametrize("kwargs,exc,match", [
    (dict(design="paper", rank=2), ValueError, r'rank is an option of design="rank"'),
    (dict(design="rank", rank=5), ValueError, r"rank must be at most d = 4"),
    (dict(design="rank", rank=0), ValueError, r"rank must be a positive integer"),
    (dict(design="rank", rank=2.0), TypeError, r"rank must be a positive integer"),
    (dict(design="rank", robust=True), ValueError, r'robust=True is an option of design="paper"'),
    (dict(design="rank", bias=True), ValueError, r'bias=True is an option of design="paper"'),
    (dict(design="rank", nodes="ratios"), ValueError, r'nodes is not an option of design="rank"'),
    (dict(design="rank", method="loewner"), ValueError, r'method is not an option of design="rank"'),
    (dict(design="rank", scale="probe"), ValueError, r"scale='probe' is an option of design=\"paper\""),
    (dict(design="rank", relative_error=1e-8), ValueError, r'relative_error is an option of design="long"'),
])
def test_bad_requests_refused_before_any_query(kwargs, exc, match):
    o = Oracle(low_rank_model(2, 4, 2, seed=0, exact=True), precision=DPS)
    with pytest.raises(exc, match=match):
        al.learn(o, 4, heads=2, **kwargs)
    assert o.queries == 0


def test_float64_oracle_refused():
    o = Oracle(low_rank_model(2, 4, 2, seed=0))
    with pytest.raises(ValueError, match=r'design="rank" needs an exact oracle'):
        al.learn(o, 4, heads=2, design="rank")
    assert o.queries == 0


TOL = Tolerances.for_mode(exact=False)


def test_span_verdicts():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=4), rng.normal(size=4)
    e = np.full(4, 1e-12)
    s = HeadSpan([a], [e])
    s.add_full(b, e, limit=None, tol=TOL, name="block 2")  # a new direction
    assert s.rank is None and s.tests[0] > TOL.match_safety * TOL.rank_gap
    s.add_full(2 * a - b + 1e-13, e, limit=None, tol=TOL, name="block 3")  # in the span, within the bound
    assert s.rank == 2 and s.tests[1] <= TOL.match_safety
    with pytest.raises(RankError, match="block 4: W_h q_k lies .* from the span of the head's first 2 columns"):
        s.add_full(rng.normal(size=4), e, limit=None, tol=TOL, name="block 4")
    t = HeadSpan([a], [e])
    c = rng.normal(size=4)
    c -= (c @ a) / (a @ a) * a
    with pytest.raises(IllConditionedError, match="block 2: the distance .* the rank cannot be told"):
        t.add_full(a + 1e-9 * c / np.linalg.norm(c), e, limit=None, tol=TOL, name="block 2")
    u = HeadSpan([a], [e])
    with pytest.raises(RankError, match=r"block 2: the head has more than rank = 1"):
        u.add_full(b, e, limit=1, tol=TOL, name="block 2")
    d, bound, coef = span_distance(np.stack([a], axis=1), np.stack([e], axis=1), 3 * a, e)
    assert d < 1e-12 and bound == pytest.approx(np.linalg.norm(e) * 4) and coef[0] == pytest.approx(3)


def test_reduced_block_checked():
    rng = np.random.default_rng(1)
    a = rng.normal(size=5)
    s = HeadSpan([a, 2 * a], [np.full(5, 1e-14)] * 2, rank=1)
    U = rng.normal(size=(2, 5))
    s.add_reduced(U, U @ (3 * a), np.full(2, 1e-14), tol=TOL, name="block 3")
    assert np.allclose(s.cols[-1], 3 * a)
    with pytest.raises(RankError, match=r"block 4: the poles are not those of a column in the span"):
        s.add_reduced(U, U @ (3 * a) + np.array([0.0, 1e-3]), np.full(2, 1e-14), tol=TOL, name="block 4")


def test_heights_label_the_poles():
    rng = np.random.default_rng(2)
    d, m = 3, 2
    v = rng.normal(size=(m, d))
    U = rng.normal(size=(4, d))
    ell = np.sort(rng.normal(size=(4, m)), axis=1)
    gam = -(U @ v.T)[:, ::-1]  # the fitted order differs from the heads'
    small = np.full((4, m), 1e-12)
    lab = label_by_heights(BlockFit(U, U[0], ell, gam, small, small, 1e-16), v, np.full((m, d), 1e-12), tol=TOL,
                           name="block 2")
    assert np.array_equal(lab.ell, ell[:, ::-1]) and lab.margin > 1e6 * lab.residual
    with pytest.raises(UnmatchedHeadsError, match="block 2, configuration 1: no pairing fits"):
        label_by_heights(BlockFit(U, U[0], ell, gam + 0.5, small, small, 1e-16), v, np.full((m, d), 1e-12), tol=TOL,
                         name="block 2")
