"""Tests of attnlearn.learner.verify (chapter 5, the verification stage): check queries at ratios
the fits did not use, predicted within a first-order bound; counted apart from the design."""

from fractions import Fraction

import numpy as np
import pytest

from attnlearn import Oracle, UniformNoise, canonical, learn, param_error, query_budget
from attnlearn.errors import CheckFailedError
from attnlearn.learner.nodes import node_pairs
from attnlearn.learner.cost import holdout_count
from attnlearn.learner.paper.verify import check_nodes, check_positions
from attnlearn.model import random_model


@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("family", ["copies", "ratios"])
def test_check_nodes_are_unused_coprime_and_within_the_longest_query(n, family):
    nodes = node_pairs(n, family)
    used = {Fraction(t, s) for s, t in nodes.pairs}
    pairs = check_nodes(nodes, 4)
    assert 1 <= len(pairs) <= 4
    for s, t in pairs:
        assert s + t <= nodes.max_length
        assert np.gcd(s, t) == 1 and Fraction(t, s) not in used


def test_check_positions_spread_over_the_table():
    assert check_positions(7, 4).tolist() == [0, 2, 4, 6]
    assert check_positions(1, 4).tolist() == [0]
    assert check_positions(7, 0).tolist() == []


@pytest.mark.parametrize("exact", [False, True])
@pytest.mark.parametrize("d, H", [(1, 1), (1, 2), (2, 2), (3, 1)])
def test_the_verification_is_counted_apart_and_its_count_is_known_in_advance(exact, d, H):
    oracle = Oracle(random_model(H, d, seed=3), precision=40 if exact else "float64")
    rec = learn(oracle, d, heads=H, seed=1)
    assert rec.verified
    assert rec.queries["design"] == query_budget(d, H)[0]
    assert rec.queries["holdout"] == holdout_count(32 if not exact else 8, H)
    assert oracle.queries == rec.queries["total"] == rec.queries["design"] + rec.queries["holdout"]
    assert oracle.max_length == 2 * H + 1  # the check queries are no longer than the design's


@pytest.mark.parametrize("exact", [False, True])
def test_holdout_zero_skips_the_verification_and_says_so(exact):
    oracle = Oracle(random_model(2, 2, seed=3), precision=40 if exact else "float64")
    rec = learn(oracle, 2, heads=2, holdout=0)
    assert not rec.verified and rec.queries["holdout"] == 0 and rec.holdout_error is None
    assert oracle.queries == query_budget(2, 2)[0]


@pytest.mark.parametrize("holdout, asked", [(1, 1), (4, 4), (5, 4 + 5), (40, 40)])
def test_a_small_holdout_is_check_queries_first(holdout, asked):
    rec = learn(Oracle(random_model(2, 2, seed=3)), 2, heads=2, holdout=holdout)
    assert rec.queries["holdout"] == asked == holdout_count(holdout, 2)


def test_undeclared_noise_at_d1_is_caught_by_a_check_query():
    # d = 1: one configuration, 2H samples for 2H unknowns; only the check queries can see noise
    model = random_model(2, 1, seed=1)
    oracle = Oracle(model, noise=UniformNoise(1e-11), seed=0)
    with pytest.raises(CheckFailedError, match=r"check query on base\(1,1\) \(s = \d+, t = \d+\): the oracle "
                                                r"answered .* missed by .* > 10 x that bound: the answers are not "
                                                r"those of an attention model with 2 canonical head\(s\)"):
        learn(oracle, 1, heads=2)
    # told the noise, the same oracle's answers are consistent: it returns within its estimate
    rec = learn(Oracle(model, noise=UniformNoise(1e-11), seed=0), 1, heads=2, output_error=1e-11)
    assert rec.verified and rec.error_estimate < 1e-3
    assert param_error(rec.model, canonical(model)) <= rec.error_estimate



@pytest.mark.parametrize("exact", [False, True])
@pytest.mark.parametrize("H", [1, 2])
def test_polish_onto_samples_moves_a_fit_onto_its_samples(exact, H):
    # samples of a known G at nodes 1..2H; the fit handed over is off by 1e-9 in every parameter
    import mpmath

    from attnlearn._arith import to_float, to_mp
    from attnlearn.learner.paper.verify import polish_onto_samples

    ts = list(range(1, 2 * H + 1))
    ell, gam = np.array([[-0.3, 0.9][:H]]), np.array([[1.5, -0.7][:H]])
    with mpmath.workdps(50):
        F = np.array([[sum(to_mp(gam)[0, h] / (1 + mpmath.exp(to_mp(ell)[0, h]) * t) for h in range(H)) for t in ts]],
                     dtype=object)
        off = lambda a: (to_mp(a + 1e-9) if exact else a + 1e-9)  # noqa: E731
        Fin = F if exact else to_float(F)
        e, g, before, after = polish_onto_samples(Fin, off(ell), off(gam), ts, exact=exact)
    assert 1e-10 < before[0] < 1e-7  # the fit's miss of its samples, measured
    assert after[0] < 1e-25  # quadratic convergence at 40 (float64) or 50 digits
    # onto the samples' own parameters: exactly (50 digits), or within the float64 samples' rounding
    tol = 1e-30 if exact else 1e-11
    assert np.abs(to_float(e - to_mp(ell))).max() < tol and np.abs(to_float(g - to_mp(gam))).max() < tol


@pytest.mark.parametrize("seed", [1, 8, 10])
def test_undeclared_noise_at_d1_is_seen_once_the_fit_is_polished(seed):
    # float64, d = 1, H = 3, undeclared noise 1e-12: these three passed the check queries and returned
    # parameter errors 0.06-0.46 with estimates 3e-4-2e-2, because their fits miss their own samples by
    # 1e3-1e6 x the output error and that miss widened the check's bound; three Gauss-Newton steps at 40
    # digits put each fit on its samples (miss < 1e-30), and the check query sees the noise
    model = random_model(3, 1, seed=seed)
    oracle = Oracle(model, noise=UniformNoise(1e-12), seed=seed)
    with pytest.raises(CheckFailedError, match=r"check query on base\(1,1\) .* missed by .* > 10 x that bound"):
        learn(oracle, 1, heads=3, seed=seed)
