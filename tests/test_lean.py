"""learn(..., design="lean") (attnlearn/learner/lean/) and its root finder (lean/roots.py).

Exact mode at 50 digits: random and degenerate models recovered to 1e-20 against the canonical
form of the exact model, the count read off the oracle's own counter, bad input refused.
"""

import math

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import attnlearn as al
from attnlearn import MultiHeadAttention, Oracle, canonical, param_error
from attnlearn._arith import to_mp
from attnlearn.errors import IllConditionedError, PoleError, RecoveryError, UnmatchedHeadsError
from attnlearn.learner.cost import lean_budget, lean_holdout_count
from attnlearn.learner.nodes import extra_node, lean_nodes
from attnlearn.learner.lean.roots import complete_roots
from attnlearn.learner.cost import learn_cost
from attnlearn.model import degenerate, random_model

DPS = 50


def exact_reference(M):
    """The canonical form of the model the exact oracle evaluates (its float entries taken
    exactly, heads merged in mpmath)."""
    with mpmath.workdps(2 * DPS):
        return canonical(MultiHeadAttention(to_mp(M.W), to_mp(M.v)), atol=0)


def recovered_error(r, M):
    with mpmath.workdps(2 * DPS):
        return param_error(r.model, exact_reference(M))


def degenerate_model(kind, H, d, seed):
    return degenerate(random_model(H, d, seed=seed), kind)


def expected_count(d, n, r):
    """The design's count given what the run saw: phase 1 with n heads' nodes, then m samples
    per phase-2 configuration, the links and the checks actually needed (m >= 2)."""
    m = r.diagnostics.visible_heads
    if m == 0:
        return 1 + 2 * n * d
    checks = sum(1 for c in r.diagnostics.combinations if c)
    links = d - 1 if m >= 2 else 0
    return 1 + 2 * n * d + links + m * d * (d - 1) + checks


@pytest.mark.parametrize("d,H,seed", [(1, 1, 0), (1, 3, 1), (2, 1, 2), (2, 2, 3), (3, 2, 4), (2, 3, 5),
                                      (3, 3, 6), (2, 4, 7)])
def test_random_models_recovered_with_the_lean_count(d, H, seed):
    M = random_model(H, d, seed=seed)
    o = Oracle(M, precision=DPS)
    r = al.learn(o, d, heads=H, design="lean", seed=seed)
    assert recovered_error(r, M) < 1e-20
    assert r.error_estimate < 1e-20 and recovered_error(r, M) <= r.error_estimate
    budget, longest = lean_budget(d, H)
    assert r.queries["design"] == expected_count(d, H, r) <= budget
    assert o.max_length == r.max_length <= longest == 2 * H + 1
    # exact mode's default 8 verification queries, held-out sequences of every length, apart
    assert r.queries["holdout"] == lean_holdout_count(8, H) == max(8, 2 * H + 1)
    assert o.queries == r.queries["total"] == r.queries["design"] + r.queries["holdout"]
    assert r.verified and r.heads == H


def test_the_full_count_is_reached_when_every_block_needs_its_check():
    # d = 3, H = 3: several real roots per configuration (the rule with H samples)
    M = random_model(3, 3, seed=11)
    o = Oracle(M, precision=DPS)
    r = al.learn(o, 3, heads=3, design="lean", seed=0)
    assert all(c > 1 for c in r.diagnostics.combinations)
    assert r.queries["design"] == lean_budget(3, 3)[0] == 3 * (9 + 3) + 2 * 3 - 1 == 41
    assert recovered_error(r, M) < 1e-20


@pytest.mark.parametrize("kind,H,heads", [("merged", 3, 2), ("zero-sum", 3, 1), ("zero-v", 3, 2),
                                          ("equal-v", 3, 3), ("equal-v", 2, 2), ("zero", 2, 0)])
def test_degenerate_models_give_the_canonical_form(kind, H, heads):
    d = 3
    M = degenerate_model(kind, H, d, seed=7)
    o = Oracle(M, precision=DPS)
    r = al.learn(o, d, heads=H, design="lean", seed=1)
    assert r.heads == exact_reference(M).H == heads
    assert recovered_error(r, M) < 1e-20
    assert r.queries["design"] == expected_count(d, H, r) <= lean_budget(d, H)[0]
    assert r.verified and o.queries == r.queries["total"]
    if kind == "equal-v":  # equal residues in every configuration: only the check can label
        assert all(c > 1 for c in r.diagnostics.combinations)


def test_max_heads_finds_the_count():
    M = random_model(2, 3, seed=3)
    o = Oracle(M, precision=DPS)
    r = al.learn(o, 3, max_heads=4, design="lean", seed=2)
    assert r.heads == 2 and recovered_error(r, M) < 1e-20
    assert r.queries["design"] == expected_count(3, 4, r) and o.max_length == 9  # phase 1 asks 2 * 4 nodes


def test_holdout_queries_are_reported_apart():
    M = random_model(2, 2, seed=4)
    o = Oracle(M, precision=DPS)
    r = al.learn(o, 2, heads=2, design="lean", seed=0, holdout=10)
    assert r.queries["holdout"] == 10 and r.queries["design"] == expected_count(2, 2, r)
    assert o.queries == r.queries["design"] + r.queries["holdout"] == r.queries["total"]
    assert r.holdout_error < 1e-14 and r.verified


def test_holdout_zero_returns_unverified():
    M = random_model(2, 2, seed=4)
    o = Oracle(M, precision=DPS)
    r = al.learn(o, 2, heads=2, design="lean", seed=0, holdout=0)
    assert not r.verified and r.holdout_error is None and r.queries["holdout"] == 0
    assert o.queries == r.queries["design"] == r.queries["total"] == expected_count(2, 2, r)
    assert recovered_error(r, M) < 1e-20


def test_cost_is_the_lean_budget_and_refused_beyond_max_queries():
    assert [lean_budget(6, H)[0] for H in (1, 2, 4)] == [43, 95, 179]  # DESIGN-lean's counts
    assert learn_cost(6, 4, robust=False, holdout=0, design="lean") == ({"design": 179, "constants": 0,
                                                                        "held-out": 0}, 9)
    assert learn_cost(6, 4, robust=False, holdout=8, design="lean")[0]["held-out"] == 9  # one per length
    M = random_model(2, 2, seed=0)
    # 15 design queries and exact mode's 8 held-out sequences
    with pytest.raises(ValueError, match=r"23 queries \(design 15, held-out 8\).*more than max_queries = 22"):
        al.learn(Oracle(M, precision=DPS), 2, heads=2, design="lean", max_queries=22)
    o = Oracle(M, precision=DPS)
    r = al.learn(o, 2, heads=2, design="lean", max_queries=23)
    assert r.queries["design"] <= 15 and r.queries["holdout"] == 8 and o.queries == r.queries["total"] <= 23


def test_bad_design_arguments_are_refused():
    M = random_model(1, 2, seed=0)
    with pytest.raises(ValueError, match='design must be "paper", "lean", "long" or "rank", got \'fast\''):
        al.learn(Oracle(M, precision=DPS), 2, heads=1, design="fast")
    with pytest.raises(ValueError, match="design must be"):
        al.learn(Oracle(M, precision=DPS), 2, heads=1, design=None)
    with pytest.raises(ValueError, match='robust=True is an option of design="paper"'):
        al.learn(Oracle(M), 2, heads=1, design="lean", robust=True)
    with pytest.raises(ValueError, match="nodes is an option of design=\"paper\""):
        al.learn(Oracle(M, precision=DPS), 2, heads=1, design="lean", nodes="ratios")


class _Tampered:
    """An exact oracle whose two-token answers with a final token other than the first query's
    token (the lean design's check queries) are off by 1e-12: no combination can match."""

    def __init__(self, oracle):
        self.inner, self.d, self.exact, self.dps = oracle, oracle.d, True, oracle.dps
        self.q0 = None

    def batch(self, Xs):
        y = self.inner.batch(Xs)
        if self.q0 is None:
            self.q0 = Xs[0, -1].copy()
        if Xs.shape[1] == 2 and any(a != b for a, b in zip(Xs[0, -1], self.q0)):
            y = np.array([v + mpmath.mpf("1e-12") for v in y], dtype=object)
        return y


class _TamperedLinks(_Tampered):
    """The same, for the links (two tokens, final token q_0)."""

    def batch(self, Xs):
        y = self.inner.batch(Xs)
        if self.q0 is None:
            self.q0 = Xs[0, -1].copy()
        if Xs.shape[1] == 2 and all(a == b for a, b in zip(Xs[0, -1], self.q0)):
            y = np.array([v + mpmath.mpf("1e-12") for v in y], dtype=object)
        return y


def test_a_check_query_that_no_combination_reproduces_raises():
    M = random_model(3, 3, seed=11)
    with pytest.raises(UnmatchedHeadsError, match="combinations of candidate roots reproduce the check query"):
        al.learn(_Tampered(Oracle(M, precision=DPS)), 3, heads=3, design="lean", seed=0)


def test_a_link_that_no_pairing_reproduces_raises():
    M = random_model(2, 3, seed=11)
    with pytest.raises(UnmatchedHeadsError, match=r"link\(1,2\): 0 of the 2 pairings"):
        al.learn(_TamperedLinks(Oracle(M, precision=DPS)), 3, heads=2, design="lean", seed=0)


def test_lean_nodes_are_distinct_and_short():
    for m in range(1, 7):
        pairs = lean_nodes(m)
        taus = {t / s for s, t in pairs}
        assert len(pairs) == len(taus) == m
        assert max(s + t for s, t in pairs) <= max(m + 1, 2) <= 2 * m + 1


@settings(max_examples=12, deadline=None)
@given(m=st.integers(1, 4), seed=st.integers(0, 2**16))
def test_complete_roots_holds_every_root_and_the_truth(m, seed):
    rng = np.random.default_rng(seed)
    with mpmath.workdps(70):
        gamma = [mpmath.mpf(float(x)) for x in rng.normal(size=m)]
        rho = [mpmath.exp(mpmath.mpf(float(x))) for x in rng.uniform(-3, 3, size=m)]
        tau = [mpmath.mpf(t) / s for s, t in lean_nodes(m)]
        G = [mpmath.fsum(g / (1 + r * t) for g, r in zip(gamma, rho)) for t in tau]
        try:
            rs = complete_roots(gamma, tau, G, rng=rng)
        except IllConditionedError as exc:  # allowed only for a near-double root
            assert "cannot be certified complete" in str(exc)
            return
        assert len(rs.roots) == math.factorial(m)
        assert any(max(abs(c - r) for c, r in zip(cand, rho)) < mpmath.mpf(10) ** -50 for cand in rs.candidates)
        # every root solves the system: the candidates (polished) to the working precision, the
        # complex ones (certain in float64, far from the real positive orthant) to float64's
        polished = [[mpmath.mpc(c) for c in cand] for cand in rs.candidates]
        for root in rs.roots:
            bound = mpmath.mpf(10) ** (-40 if root in polished else -8)
            for t, g in zip(tau, G):
                assert abs(mpmath.fsum(gg / (1 + r * t) for gg, r in zip(gamma, root)) - g) < bound


def test_a_double_root_cannot_be_certified():
    # equal residues and equal rho: (a, a) is a double root, so 2 distinct roots cannot exist
    with mpmath.workdps(70):
        gamma = [mpmath.mpf(1), mpmath.mpf(1)]
        tau = [mpmath.mpf(t) / s for s, t in lean_nodes(2)]
        G = [2 / (1 + 2 * t) for t in tau]
        with pytest.raises(IllConditionedError, match=r"found [01] of the 2 roots .* cannot be certified complete"):
            complete_roots(gamma, tau, G, rng=np.random.default_rng(0))


def test_float64_returns_are_within_their_estimate_or_raise():
    returned = raised = 0
    for seed in range(6):
        M = random_model(2, 3, seed=30_000 + seed)
        o = Oracle(M)
        try:
            r = al.learn(o, 3, heads=2, design="lean", seed=seed)
        except RecoveryError as exc:
            raised += 1
            # a loud raise: it names what failed, and nothing past the design and its verification was asked
            assert str(exc) and o.queries <= lean_budget(3, 2)[0] + 32
            continue
        returned += 1
        assert param_error(r.model, canonical(M)) <= r.error_estimate <= 1
        assert r.queries["design"] <= lean_budget(3, 2)[0] and r.queries["holdout"] >= 32
        assert o.queries == r.queries["total"] == r.queries["design"] + r.queries["holdout"]
    assert returned >= 4 and returned + raised == 6  # measured: 6 of 6 (benchmarks/lean.py --float64)


def _learn_extra_sample(oracle, d, H, seed):
    # learn's validation, checked access and precision, then the variant with H + 1 samples
    from attnlearn._arith import working_precision
    from attnlearn.learner.lean.run import learn_lean
    from attnlearn.learner.options import Request, build_options as _options
    from attnlearn.protocol import Access

    opt, tol = _options(oracle, d, Request(heads=H, seed=seed, max_length=129, design="lean"))
    access = Access(oracle, opt.d)
    with working_precision(access):
        return learn_lean(access, opt, tol, extra_sample=True)


def test_extra_node_is_new_and_short():
    for m in range(1, 7):
        s, t = extra_node(m)
        assert t / s not in {b / a for a, b in lean_nodes(m)} and s + t <= m + 2 <= 2 * m + 1


@pytest.mark.parametrize("d,H,seed", [(2, 1, 0), (3, 3, 11), (3, 2, 1)])
def test_extra_sample_variant_needs_no_check_query(d, H, seed):
    M = random_model(H, d, seed=seed)
    o = Oracle(M, precision=DPS)
    r = _learn_extra_sample(o, d, H, seed)
    assert recovered_error(r, M) < 1e-20 and r.verified
    # the extra sample leaves one candidate per configuration: (H+1)d² + Hd, no check query
    links = d - 1 if H >= 2 else 0
    assert r.diagnostics.combinations == [0] * (d - 1)
    assert r.queries["design"] == 1 + 2 * H * d + links + (H + 1) * d * (d - 1)
    assert r.queries["design"] == (H + 1) * d * d + H * d - (d - 1 - links)
    assert o.max_length <= 2 * H + 1


def test_an_extra_sample_that_no_root_reproduces_raises():
    # H = 2: the extra node is (s, t) = (1, 1), a two-token query with final token q_j, which
    # _Tampered moves by 1e-12 (before any check query is asked)
    assert extra_node(2) == (1, 1)
    M = random_model(2, 3, seed=1)
    with pytest.raises(PoleError, match="none of the 2 roots .* reproduces the extra sample"):
        _learn_extra_sample(_Tampered(Oracle(M, precision=DPS)), 3, 2, 1)


def test_extra_sample_variant_with_equal_v_still_asks_its_checks():
    # equal v: the roots are symmetric, the extra sample cannot label them, the check query does
    d, H = 3, 2
    M = degenerate_model("equal-v", H, d, seed=7)
    o = Oracle(M, precision=DPS)
    r = _learn_extra_sample(o, d, H, 1)
    assert recovered_error(r, M) < 1e-20 and all(c > 1 for c in r.diagnostics.combinations)
    assert r.queries["design"] == 1 + 2 * H * d + (d - 1) + (H + 1) * d * (d - 1) + (d - 1)


def test_extra_sample_variant_in_float64_is_within_its_estimate_or_raises():
    returned = 0
    for seed in range(4):
        M = random_model(2, 3, seed=30_000 + seed)
        o = Oracle(M)
        try:
            r = _learn_extra_sample(o, 3, 2, seed)
        except RecoveryError as exc:
            # a loud raise: it names what failed, within the variant's count with every check query
            # (as in the equal-v test above: d = 3, H = 2) and its 32 verification queries
            d, H = 3, 2
            assert str(exc) and o.queries <= 1 + 2 * H * d + (d - 1) + (H + 1) * d * (d - 1) + (d - 1) + 32
            continue
        returned += 1
        assert param_error(r.model, canonical(M)) <= r.error_estimate <= 1
    assert returned >= 3


@pytest.mark.parametrize("kwargs, match", [
    ({"bias": True}, r'bias=True is an option of design="paper" \(the lean design learns the paper'),
    ({"scale": "search"}, r"scale='search' is an option of design=\"paper\" \(design=\"lean\" finds its own scale\)"),
    ({"scale": "probe"}, r"scale='probe' is an option of design=\"paper\""),
])
def test_lean_refuses_the_paper_designs_bias_and_scale(kwargs, match):
    oracle = Oracle(al.model.random_model(2, 2, seed=0))
    with pytest.raises(ValueError, match=match):
        al.learn(oracle, 2, heads=2, design="lean", **kwargs)
    assert oracle.queries == 0


@pytest.mark.parametrize("precision", ["float64", 30])
def test_lean_zero_function_is_certified_only_without_a_stated_output_error(precision):
    # v = 0 everywhere: no canonical head; as the paper's design, the lean design returns the zero
    # function only when the answers are exact to the oracle's rounding
    m = al.model.random_model(2, 2, seed=0)
    zero = MultiHeadAttention(m.W, np.zeros_like(m.v))
    rec = al.learn(Oracle(zero, precision=precision), 2, heads=2, design="lean")
    assert rec.heads == 0 and rec.verified
    assert rec.model.W.dtype == (object if precision != "float64" else float)
    with pytest.raises(IllConditionedError, match=r"no canonical head can be certified, nor their absence"):
        al.learn(Oracle(zero, precision=precision), 2, heads=2, design="lean", output_error=1e-12)


@pytest.mark.parametrize("scale, seed", [(1e-3, 1), (1e-3, 3), (1e-4, 2), (1e-6, 1), (1e-6, 3)])
def test_a_small_layers_first_configuration_is_asked_again_at_its_scale(scale, seed):
    # the probe's max|ell| of order 1e-4, more than 3 times below spread / 256: with the clipped
    # factor the poles of the phase-1 configurations would crowd within 1e-2 nats (at 1e-4 the
    # first fit fits or fails depending on the kernel; when it fails a one-pole fit measures the
    # crowding; at 1e-6 it finds fewer heads than asked: base(1) is asked again in every case)
    m = random_model(2, 4, seed=seed, scale=scale)
    oracle = Oracle(m)
    r = al.learn(oracle, 4, heads=2, seed=seed, design="lean")
    assert r.queries["scale"] == 2 * 2  # base(1) again, its 2n samples, apart from the design's count
    assert r.queries["design"] <= lean_budget(4, 2)[0]
    assert r.queries["total"] == oracle.queries == sum(v for k, v in r.queries.items() if k != "total")
    assert r.diagnostics.scale > 100 * 4  # far beyond the clip
    assert param_error(r.model, canonical(m)) <= min(r.error_estimate, 1e-6)
    big = al.learn(Oracle(random_model(2, 4, seed=seed)), 4, heads=2, seed=seed, design="lean")
    assert "scale" not in big.queries and big.diagnostics.scale <= 4  # the same model at unit scale
