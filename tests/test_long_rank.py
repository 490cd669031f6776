"""learn(..., design="long", rank=p) (attnlearn/learner/long/rank.py): the long design with each head's row
space learned from the first groups and the later groups regressed in it."""

import numpy as np
import pytest

from attnlearn import Oracle, learn, param_error
from attnlearn.errors import IllConditionedError, RankError, UnmatchedHeadsError
from attnlearn.layer import AttentionLayer
from attnlearn.learner.cost import long_cost
from attnlearn.learner.long.fit import GroupFit
from attnlearn.learner.long.rank import RowSpans, regress_in_spans
from attnlearn.learner.paper.bias import bias_error
from attnlearn.learner.tolerances import LongTolerances
from attnlearn.model import low_rank_model

L = 256
TOL = LongTolerances()


@pytest.mark.parametrize("d, H, p, seed", [(4, 2, 1, 0), (6, 3, 2, 1)])
def test_low_rank_heads_recovered_with_fewer_queries(d, H, p, seed):
    M = low_rank_model(H, d, p, seed=seed)
    o = Oracle(M)
    rec = learn(o, d, heads=H, design="long", max_length=L, seed=seed, rank=p)
    err = param_error(rec.model, M)
    assert rec.diagnostics.ranks == [p] * H
    assert err <= rec.error_estimate <= 1e-6
    full, _ = long_cost(d, H, L, tol=TOL)
    bound, _ = long_cost(d, H, L, tol=TOL, rank=p)
    assert rec.queries["design"] == sum(bound.values()) < sum(full.values())


def test_biased_layer_of_low_rank():
    d, H, p = 6, 3, 2
    M = low_rank_model(H, d, p, seed=4)
    g = np.random.default_rng(4)
    layer = AttentionLayer(M.W, M.v, c=g.normal(size=(H, d)) / np.sqrt(d), b=np.asarray(0.3))
    rec = learn(Oracle(layer), d, heads=H, design="long", bias=True, max_length=L, seed=2, rank=p)
    assert rec.diagnostics.ranks == [p] * H
    assert bias_error(rec.model, layer) <= rec.error_estimate <= 1e-6


def test_rank_below_the_truth_raises_and_bounds_the_count():
    d, H = 4, 2
    M = low_rank_model(H, d, 2, seed=3)
    with pytest.raises(RankError, match=r"group 2, head \d: the head has more than rank = 1 independent rows"):
        learn(Oracle(M), d, heads=H, design="long", max_length=L, rank=1)
    need = sum(long_cost(d, H, L, tol=TOL, rank=2)[0].values()) + max(32, TOL.holdout_length)
    o = Oracle(M)
    with pytest.raises(ValueError, match="more than max_queries"):  # without rank= every group is full
        learn(o, d, heads=H, design="long", max_length=L, max_queries=need)
    with pytest.raises(ValueError, match=r"rank must be at most d = 4 \(a head's W_h is d x d\), got rank=5"):
        learn(o, d, heads=H, design="long", max_length=L, rank=5)
    assert o.queries == 0


def _spans(d, H, p, seed, sd=1e-10):
    rng = np.random.default_rng(seed)
    bases = [rng.normal(size=(d, p)) for _ in range(H)]
    spans = RowSpans.start(np.array([B[:, 0] for B in bases]), np.array([np.eye(d) * sd**2] * H))
    for k in range(1, p):
        spans.add_group(np.array([B[:, k] for B in bases]), np.array([np.eye(d) * sd**2] * H), limit=None, tol=TOL, k=k)
    return spans, bases


def test_row_spans_verdicts_and_nothing_appended_on_a_raise():
    d, H, p, sd = 6, 2, 2, 1e-10
    spans, bases = _spans(d, H, p, 0, sd)
    cov = np.array([np.eye(d) * sd**2] * H)
    assert spans.ranks == [None, None] and all(t[0] > TOL.rank_outside for t in spans.tests)
    inside = np.array([B @ np.array([0.3, -1.2]) for B in bases])
    spans.add_group(inside + 1e-10, cov, limit=None, tol=TOL, k=2)
    assert spans.ranks == [2, 2] and spans.certified and max(t[-1] for t in spans.tests) <= TOL.rank_inside
    with pytest.raises(RankError, match=r"group 4, head 1: W_h\^T u_k lies .* whose rank was certified"):
        spans.add_group(np.array([np.ones(d), inside[1]]), cov, limit=None, tol=TOL, k=3)
    fresh, bases = _spans(d, H, p, 1, sd)
    rows = [len(y) for y in fresh.ys]
    off = np.random.default_rng(2).normal(size=d)
    near = np.array([B @ np.array([1.0, 1.0]) + 1e-7 * off for B in bases])  # ~ 1e3 sd: undecided
    with pytest.raises(IllConditionedError, match=r"group 3, head 1: .* the rank cannot be told"):
        fresh.add_group(near, cov, limit=None, tol=TOL, k=2)
    assert [len(y) for y in fresh.ys] == rows and fresh.ranks == [None, None]
    with pytest.raises(RankError, match=r"group 3, head 1: the head has more than rank = 2 independent rows"):
        fresh.add_group(np.random.default_rng(3).normal(size=(H, d)), cov, limit=2, tol=TOL, k=2)


def _fit(Q, Y, sd):
    m, H = len(Q), len(Y)
    c = -Q @ Y.T
    return GroupFit(g=np.ones(H), C=np.zeros(m), c=c, g_sd=np.ones(H), c_sd=np.full((m, H), sd),
                    chi2=np.zeros(m), reduced=1.0)


def test_regress_in_spans_labels_the_group_by_its_row_spaces():
    d, H, p, sd = 6, 3, 2, 1e-9
    spans, bases = _spans(d, H, p, 4, 1e-12)
    spans.add_group(np.array([B @ np.array([1.0, 2.0]) for B in bases]), np.array([np.eye(d) * 1e-24] * H),
                    limit=None, tol=TOL, k=p)
    rng = np.random.default_rng(5)
    A = rng.normal(size=(H, p))
    Ytrue = np.array([bases[h] @ A[h] for h in range(H)])
    order = np.array([2, 0, 1])  # the group's heads: row space order[j]
    Q = rng.normal(size=(2 * (p + 1), d))
    fit = _fit(Q, Ytrue[order], sd)
    fit.c += rng.normal(size=fit.c.shape) * sd
    Y, covY, used, perm, margin = regress_in_spans(Q, fit, spans, tol=TOL)
    assert np.allclose(Y, Ytrue[order], atol=1e-6) and used.all()
    assert [int(perm[h]) for h in range(H)] == [int(np.flatnonzero(order == h)[0]) for h in range(H)]
    assert margin > 1e6
    assert np.all(np.linalg.eigvalsh(covY) > 0)
    bad = _fit(Q, Ytrue[order], sd)
    bad.c[:, 0] = -Q @ rng.normal(size=d)  # a head in no row space
    with pytest.raises(IllConditionedError, match="not linear in any head's row space"):
        regress_in_spans(Q, bad, spans, tol=TOL)
    same, _ = _spans(d, 2, p, 6, 1e-12)
    same.ys[1], same.covs[1] = same.ys[0], same.covs[0]  # two heads in one row space: no assignment wins
    same.ranks = [p, p]
    two = _fit(Q, np.array([same.basis(0) @ np.array([1.0, 0.5]), same.basis(0) @ np.array([-0.7, 2.0])]), sd)
    with pytest.raises(UnmatchedHeadsError, match="fits another head's row space nearly as well as its own"):
        regress_in_spans(Q, two, same, tol=TOL)
