"""learn(..., design="long") (attnlearn.learner.long): long ratio queries through float32-level noise."""

import dataclasses

import numpy as np
import pytest
from scipy.optimize import least_squares

from attnlearn import IllConditionedError, Oracle, RecoveryError, RelativeNoise, canonical, learn, param_error
from attnlearn.layer import AttentionLayer
from attnlearn.learner.family import AFFINE
from attnlearn.learner import bias_error
from attnlearn.learner.certificate import QueryLog, confront_spread
from attnlearn.learner.cost import long_cost
from attnlearn.learner.long import ask as long_ask
from attnlearn.learner.long import fit as long_fit
from attnlearn.learner.long import passes as long_passes
from attnlearn.learner.long import run as long_run
from attnlearn.learner.long import solve as long_solve
from attnlearn.learner.long.curve import step_curve, step_jacobian, step_residuals
from attnlearn.learner.long.fit import fit_config
from attnlearn.learner.long.solve import AnswerSpread
from attnlearn.learner.nodes import ratio_grid
from attnlearn.learner.samples import noise_sd
from attnlearn.learner.tolerances import CertificateTolerances, LongTolerances
from attnlearn.model import MultiHeadAttention, random_model
from attnlearn.sweeps import run_trials

F32 = 6e-8
L = 4096


def run(H, d, s, *, eps=F32, told=None, **kw):
    model = random_model(H, d, seed=5_000 + 100 * H + 10 * d + s)
    oracle = Oracle(model, noise=RelativeNoise(eps), seed=s)
    rec = learn(oracle, d, heads=H, design="long", relative_error=eps if told is None else told, max_length=L,
                seed=s, **kw)
    return rec, param_error(rec.model, canonical(model)), oracle


def long_trial(key):
    """A seeded long-design run for the engine (module-level: the workers import it)."""
    H, d, s = key
    try:
        rec, err, _ = run(H, d, s)
    except RecoveryError as exc:
        return (key, type(exc).__name__)
    return (key, err, rec.error_estimate, rec.queries["total"])


def test_two_heads_through_float32_noise_within_the_estimate():
    rec, err, oracle = run(2, 3, 0)
    assert rec.heads == 2 and err <= 1e-3
    assert err <= 10 * rec.error_estimate  # the acceptance bound (and in fact err <= estimate)
    assert err <= rec.error_estimate
    # the cost: every design query is max_length long, the count is long_cost's, held-out apart
    parts, longest = long_cost(3, 2, L, tol=LongTolerances())
    assert rec.queries["design"] == sum(parts.values()) and rec.max_length == longest == L
    assert oracle.max_length == L and rec.queries["holdout"] >= LongTolerances().holdout_length
    assert rec.queries["redraws"] == 0 and rec.queries["total"] == rec.queries["design"] + rec.queries["holdout"]
    assert rec.verified and oracle.queries == rec.queries["total"]


def test_holdout_zero_returns_unverified_with_the_same_design():
    """holdout=0: no held-out query, the design's count unchanged, ``verified`` False."""
    rec, err, oracle = run(1, 2, 0, holdout=0)
    checked, _, _ = run(1, 2, 0)
    assert not rec.verified and checked.verified
    assert rec.queries["holdout"] == 0 and rec.holdout_error is None
    assert rec.queries["design"] == checked.queries["design"] and oracle.queries == rec.queries["total"]
    assert err <= rec.error_estimate


def test_estimate_against_the_truth():
    """The estimate is a bound (error below it) and not a vacuous one (within a factor 100)."""
    ratios = [err / rec.error_estimate for rec, err, _ in (run(1, 2, s) for s in range(4))]
    assert max(ratios) <= 1.0
    assert np.median(ratios) >= 1e-2
    # and it scales with the noise: 100x less noise, about 100x smaller estimate
    quiet, _, _ = run(1, 2, 0, eps=6e-10)
    loud, _, _ = run(1, 2, 0)
    assert 20 <= loud.error_estimate / quiet.error_estimate <= 500


def test_understated_noise_raises_never_returns_wrong():
    """Noise 1e-4 told as 6e-8: no configuration fits within the stated noise."""
    with pytest.raises(IllConditionedError, match="fitted within 3 x its noise"):
        run(1, 2, 0, eps=1e-4, told=F32)


def test_one_worker_and_two_give_identical_records():
    keys = [(1, 2, s) for s in range(3)]
    assert run_trials(long_trial, keys, workers=1) == run_trials(long_trial, keys, workers=2)


def test_fit_config_recovers_steps_and_ratio_grid():
    b, z = ratio_grid(L, 24)
    assert len(b) == 24 and b.min() >= 1 and b.max() <= L - 1 and np.all(np.diff(z) > 0)
    assert z[0] == pytest.approx(-np.log(L - 1)) and z[-1] == pytest.approx(np.log(L - 1))
    c_true, g_true, C = np.array([-1.5, 2.0]), np.array([0.7, -1.3]), 0.4
    F = C + 1 / (1 + np.exp(z[:, None] - c_true[None, :])) @ g_true
    sd = noise_sd(F, absolute=0.0, relative=1e-12)
    _, c, g, chi2 = fit_config(z, F, sd, 2, ends=(C, 1e-12, C + g_true.sum(), 1e-12))
    assert np.allclose(c, c_true, atol=1e-8) and np.allclose(g, g_true, atol=1e-8) and chi2 < 100


def test_fit_config_leaves_a_wrong_start_and_bounds_its_evaluations(monkeypatch):
    """A start in the wrong basin (both steps far off) is left for the next starts:
    the steps are found, and every start but the carried best runs at most
    SCOUT_EVALUATIONS per parameter (a creeping start used to run all 200)."""
    _, z = ratio_grid(L, 24)
    c_true, g_true, C = np.array([-1.5, 2.0]), np.array([0.7, -1.3]), 0.4
    F = C + 1 / (1 + np.exp(z[:, None] - c_true[None, :])) @ g_true
    sd = noise_sd(F, absolute=0.0, relative=1e-12)
    budgets, real = [], long_fit.least_squares

    def counted(*args, **kw):
        budgets.append(kw["max_nfev"])
        return real(*args, **kw)

    monkeypatch.setattr(long_fit, "least_squares", counted)
    _, c, g, chi2 = fit_config(z, F, sd, 2, ends=(C, 1e-12, C + g_true.sum(), 1e-12), c0=[6.0, 7.0],
                               chi2_ok=100.0, rng=np.random.default_rng(0))
    assert np.allclose(c, c_true, atol=1e-8) and np.allclose(g, g_true, atol=1e-8) and chi2 < 100
    assert len(budgets) >= 3  # the wrong start, at least one more, the carried best
    assert budgets[:-1] == [long_fit.SCOUT_EVALUATIONS * 5] * (len(budgets) - 1)
    assert budgets[-1] == long_fit.EVALUATIONS * 5


def _close_pair(relative=1e-14):
    """Four steps, two of them 0.15 nats apart with heights of opposite sign, on a 32-ratio grid."""
    _, z = ratio_grid(L, 32)
    c_true, g_true, C = np.array([-3.0, -0.3, -0.15, 2.5]), np.array([1.1, -0.2, 1.9, -0.8]), 0.4
    F = C + 1 / (1 + np.exp(z[:, None] - c_true[None, :])) @ g_true
    sd = noise_sd(F, absolute=0.0, relative=relative)
    return z, F, sd, (C, relative, C + g_true.sum(), relative), c_true, g_true


def test_fit_config_starts_under_known_heights():
    """With the heights g0 known, the first start is c0 moved under them (a fit of the positions
    and the constant alone: H + 1 columns), then c0. From 0.02 nats off the positions are found
    to the noise under the exact heights, and the whole fit under heights a millionth off."""
    z, F, sd, ends, c_true, g_true = _close_pair()
    c0 = c_true + np.array([0.02, -0.02, 0.02, -0.02])
    moved = long_fit._under_heights(z, F, sd, ends, g_true, c0)
    assert np.allclose(moved, c_true, atol=1e-8)
    starts = []
    real = long_fit.least_squares

    def seen(fun, x0, **kw):
        starts.append(np.array(x0, dtype=float))
        return real(fun, x0, **kw)

    g0 = g_true * (1 + 1e-6)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(long_fit, "least_squares", seen)
        _, c, g, chi2 = fit_config(z, F, sd, 4, ends=ends, c0=c0, g0=g0, chi2_ok=1e4,
                                   rng=np.random.default_rng(0))
    # under the heights (C and four positions), then the free fit (all nine) from where that left them
    assert len(starts[0]) == 5 and np.array_equal(starts[0][1:], c0)
    assert len(starts[1]) == 9
    assert np.array_equal(starts[1][1:5], long_fit._under_heights(z, F, sd, ends, g0, c0))
    assert np.allclose(c, c_true, atol=1e-6) and np.allclose(g, g_true, atol=1e-6) and chi2 < 1e4


def test_positions_only_ranks_its_starts_by_their_own_chi2(monkeypatch):
    """With the heights known, the right order of a configuration's positions is found even when
    it comes last of many starts: the starts are scouted in the order of their chi2 as they stand,
    at most SCOUT_STARTS of them, and the best is carried to convergence."""
    _, z = ratio_grid(L, 28)
    c_true, g, C = np.array([-2.0, 0.5, 3.0]), np.array([0.9, -1.4, 0.6]), 0.3
    F = C + 1 / (1 + np.exp(z[:, None] - c_true[None, :])) @ g
    sd = noise_sd(F, absolute=0.0, relative=1e-12)
    ends = tuple(np.array([x]) for x in (C, 1e-12, C + g.sum(), 1e-12))
    rng = np.random.default_rng(1)
    wrong = [np.sort(rng.uniform(-6, 6, 3)) for _ in range(40)]
    starts = wrong + [c_true[[1, 0, 2]], c_true + 0.05]  # a wrong order, then the right one, last
    calls, real = [], long_fit.least_squares

    def counted(*args, **kw):
        calls.append(kw["max_nfev"])
        return real(*args, **kw)

    monkeypatch.setattr(long_fit, "least_squares", counted)
    c, C_fit, chi2 = long_fit._positions_only(z, F, sd, g, starts, ends, 0, limit=3.0 * (len(z) + 2))
    assert np.allclose(c, c_true, atol=1e-8) and abs(C_fit - C) < 1e-8 and chi2 < 3.0 * (len(z) + 2)
    assert len(calls) == 2  # the right start ranked first: one scout, then carried
    assert calls == [long_fit.SCOUT_EVALUATIONS * 4, 100 * 4]
    calls.clear()  # no start within the limit: SCOUT_STARTS scouted, the best still carried
    c, _, _ = long_fit._positions_only(z, F, sd, g, starts, ends, 0, limit=-1.0)
    assert len(calls) == long_fit.SCOUT_STARTS + 1 and np.allclose(c, c_true, atol=1e-8)


def _dense_variances(Jg, Jt):
    """The variances of _group_variances from the whole block Jacobian, through its SVD."""
    m, rows, H = Jg.shape
    J = np.zeros((m * rows, H + m * (H + 1)))
    for j in range(m):
        J[j * rows:(j + 1) * rows, :H] = Jg[j]
        J[j * rows:(j + 1) * rows, H + j * (H + 1):H + (j + 1) * (H + 1)] = Jt[j]
    n = np.linalg.norm(J, axis=0)
    _, sv, Vt = np.linalg.svd(J / n, full_matrices=False)
    var = np.sum((Vt.T / sv) ** 2, axis=1) / n**2
    return var[:H], var[H:].reshape(m, H + 1)[:, 1:]


@pytest.mark.parametrize("small", [1.0, 1e-7])
def test_group_variances_match_the_whole_jacobian(small):
    """A group's variances in square-root form agree with the SVD of the whole block Jacobian,
    also when a step's height is 1e-7 of the others' (its position column that much smaller) and
    two heights' columns are nearly collinear: there the normal equations lose every digit."""
    rng = np.random.default_rng(3)
    m, rows, H = 6, 40, 3
    Jg, Jt = rng.normal(size=(m, rows, H)), rng.normal(size=(m, rows, H + 1))
    Jt[:, :, 2] *= small
    Jg[:, :, 1] = Jg[:, :, 0] + (small * 1e-2) * Jg[:, :, 1]
    g_var, c_var = long_fit._group_variances(Jg, Jt)
    g_ref, c_ref = _dense_variances(Jg, Jt)
    assert np.allclose(g_var, g_ref, rtol=1e-5) and np.allclose(c_var, c_ref, rtol=1e-5)
    assert np.all(g_var > 0) and np.all(c_var > 0)


@pytest.mark.parametrize("case", ["heights in the span", "collinear positions"])
def test_group_variances_are_infinite_for_a_singular_group(case):
    """A singular group gives infinite variances, never large finite ones: the heights' columns
    inside every configuration's own columns (all of their projection is rounding), or two
    position columns collinear in every configuration."""
    rng = np.random.default_rng(6)
    Jg, Jt = rng.normal(size=(4, 30, 1)), rng.normal(size=(4, 30, 3))
    if case == "heights in the span":
        Jg[:, :, 0] = 3 * Jt[:, :, 0] - 0.5 * Jt[:, :, 1]
    else:
        Jt[:, :, 2] = 2 * Jt[:, :, 1]
    g_var, c_var = long_fit._group_variances(Jg, Jt)
    assert np.all(np.isinf(g_var)) and np.all(np.isinf(c_var))


def test_group_variances_are_infinite_for_a_vanishing_height():
    """A head whose height is exactly zero leaves its position columns zero: infinite variance
    (fit_group then refuses the group)."""
    rng = np.random.default_rng(4)
    Jg, Jt = rng.normal(size=(5, 30, 2)), rng.normal(size=(5, 30, 3))
    Jt[:, :, 2] = 0.0
    g_var, c_var = long_fit._group_variances(Jg, Jt)
    assert np.all(np.isinf(g_var)) and np.all(np.isinf(c_var))


def test_fit_group_reaches_the_optimum_along_a_weak_direction():
    """Two steps 0.2 nats apart in each of eight configurations, answers to 3e-14: the heights'
    difference is known to about 1e-10 of their size. Started five of its standard deviations
    off, fit_group ends where scipy's least_squares ends (within half a standard
    deviation), its chi2 within one of the optimum's."""
    rng = np.random.default_rng(8)
    _, z = ratio_grid(256, LongTolerances().ratios(2))
    m, g = 8, np.array([-0.6, -0.19])
    c = rng.uniform(-3, 3, size=(m, 1)) + np.array([0.0, 0.2])
    C = rng.normal(size=m)
    F = step_curve(z, C, c, g)
    sd = 3e-14 * np.maximum(np.abs(F), 1.0)
    F = F + sd * rng.normal(size=F.shape)
    e_sd = np.full(m, 1e-15)
    ends = (C + e_sd * rng.normal(size=m), e_sd, C + g.sum() + e_sd * rng.normal(size=m), e_sd)

    def res(x):
        return step_residuals(z, F, sd, x[2:2 + m], x[2 + m:].reshape(m, 2), x[:2], ends,
                              prior=long_fit.PRIOR).ravel()

    best = least_squares(res, np.concatenate([g, C, c.ravel()]), method="trf", x_scale="jac",
                         xtol=1e-15, ftol=1e-15, gtol=1e-15).x
    g_opt, C_opt, c_opt = best[:2], best[2:2 + m], best[2 + m:].reshape(m, 2)
    _, Jg, Jt = long_fit._group_blocks(z, F, sd, ends, g_opt, C_opt, c_opt)
    g_sd = np.sqrt(long_fit._group_variances(Jg, Jt)[0])
    assert np.all(g_sd < 1e-9 * np.abs(g))
    fit = long_fit.fit_group(z, F, sd, ends, g_opt + 5 * g_sd * np.array([1.0, -1.0]), C_opt, c_opt)
    assert np.all(np.abs(fit.g - g_opt) <= 0.5 * g_sd)
    r = long_fit._group_blocks(z, F, sd, ends, fit.g, fit.C, fit.c)[0]
    assert np.sum(r**2) <= np.sum(res(best) ** 2) + 1.0  # five sd off, chi2 would be 25 above


@pytest.mark.parametrize("chi2_per_dof", [0.5, 4.0])
def test_resolution_is_the_closest_gap_in_its_standard_deviations(chi2_per_dof):
    """resolution(): the smallest gap between neighbouring steps over the standard deviation of
    that gap, from the inverse of the whole information matrix (ends and prior rows included),
    times 1/sqrt(chi2/dof) when chi2 exceeds its degrees of freedom; 0 for coinciding steps, inf
    for one head."""
    _, z = ratio_grid(256, LongTolerances().ratios(3))
    c, g = np.array([1.0, -2.5, 0.4]), np.array([0.8, -0.5, 1.2])
    sd = np.full(len(z), 1e-6)
    ends = (0.0, 1e-6, g.sum(), 1e-6)
    dof = len(z) + 2 - 7
    J = step_jacobian(z, sd, c, g, ends_sd=(1e-6, 1e-6), prior=long_fit.PRIOR)
    cov = np.linalg.inv(J.T @ J)
    pairs = [(2, 3), (3, 1)]  # sorted by position: heads 2, 3, 1 (columns 1 + h)
    want = min((c[b - 1] - c[a - 1]) / np.sqrt(cov[a, a] + cov[b, b] - 2 * cov[a, b]) for a, b in pairs)
    got = long_fit.resolution(z, sd, ends, c, g, chi2_per_dof * dof)
    assert got == pytest.approx(want / np.sqrt(max(1.0, chi2_per_dof)), rel=1e-6)
    assert long_fit.resolution(z, sd, ends, np.array([0.3, 0.3, 2.0]), g, dof) == 0.0
    assert long_fit.resolution(z, sd, ends, c[:1], g[:1], dof) == np.inf
    assert long_fit.resolution(z, sd, ends, c, g, np.nan) == 0.0


def test_closest_gap_takes_neighbours_in_position_order():
    """closest_gap(): neighbours by position whatever the heads' order; the sd of a gap from the
    difference of the two rows of the covariance's factor (correlated rows: a smaller sd)."""
    c = np.array([3.0, 0.0, 1.0])
    root = 0.1 * np.eye(3)
    assert long_fit.closest_gap(c, root) == pytest.approx(1.0 / (0.1 * np.sqrt(2)))  # heads 2 and 3
    root[2] = [0.0, 0.1, 0.01]  # head 3 almost head 2's error: their gap known to 0.01
    assert long_fit.closest_gap(c, root) == pytest.approx(min(1.0 / 0.01, 2.0 / np.sqrt(0.1**2 + 0.1**2 + 0.01**2)))


@pytest.mark.parametrize("kw, exc, match", [
    (dict(design="longest"), ValueError, 'design must be "paper", "lean", "long" or "rank"'),
    (dict(design="long"), ValueError, "pass max_length= explicitly"),
    (dict(design="long", max_length=32), ValueError, "max_length must be at least 64"),
    (dict(design="long", max_length=4096, heads=None, max_heads=2), ValueError, 'design="long" needs heads=H'),
    (dict(design="long", max_length=4096, heads=9), ValueError, "supports heads <= 8"),
    (dict(design="long", max_length=4096, robust=True), ValueError, "robust=True is an option of design"),
    (dict(design="long", max_length=4096, relative_error=-1.0), ValueError, "relative_error must be a finite"),
    (dict(design="long", max_length=4096, relative_error="small"), TypeError, "relative_error must be"),
    (dict(design="long", max_length=4096, max_queries=100), ValueError, "more than max_queries = 100"),
    (dict(relative_error=1e-8), ValueError, 'relative_error is an option of design="long"'),
    (dict(design="long", max_length=4096, scale="search"), ValueError, "scale='search' is an option of design="),
    (dict(design="long", max_length=4096, scale="probe"), ValueError, "scale='probe' is an option of design="),
    (dict(design="long", max_length=4096, scale="wide"), ValueError, 'scale must be "auto", "probe" or "search", got'),
    (dict(design="long", max_length=4096, bias="yes"), TypeError, "bias must be True or False"),
])
def test_bad_input(kw, exc, match):
    args = dict(heads=1)
    args.update(kw)
    if args.get("heads") is None:
        args.pop("heads")
    with pytest.raises(exc, match=match):
        learn(Oracle(random_model(1, 2, seed=0)), 2, **args)


def test_exact_oracle_refused():
    with pytest.raises(ValueError, match='design="long" is a float64 design'):
        learn(Oracle(random_model(1, 2, seed=0), precision=30), 2, heads=1, design="long", max_length=4096)


def _group_context(H, d, s, eps):
    """A long-design context on a seeded model (the learner's stages called one by one)."""
    from attnlearn.protocol import Access

    model = random_model(H, d, seed=7_000 + s)
    ask = Access(Oracle(model, noise=RelativeNoise(eps), seed=s), d)
    tol = LongTolerances()
    b, z = ratio_grid(L, tol.ratios(H))
    ctx = long_ask.Context(ask=ask, d=d, H=H, L=L, b=b, z=z, absolute=0.0, relative=eps, tol=tol,
                  rng=np.random.default_rng(s))
    ctx.V, ctx.V_sd = long_ask.ask_V(ctx)
    return ctx, model


def test_float64_rounding_floor_matches_the_oracle():
    """A float64 oracle's answers to 4096-token ratio queries miss the exact curve within the
    modelled rounding (half the sequential-summation bound, between the 90th and 99th percentile
    of configurations; on these three seeded ones chi2 per ratio between 1/200 and 1, the median
    configuration's error being about 1/6 of it); 4 eps |F| alone is 100x too small."""
    from scipy.special import expit

    ctx, model = _group_context(6, 8, 0, 0.0)
    rng = np.random.default_rng(1)
    for _ in range(3):
        u, q = long_passes._unit(rng, 8) * 2, long_passes._unit(rng, 8) * 2
        F, sd = ctx.config(u, q)
        c = -(np.einsum("hij,i->hj", model.W, u) @ q)
        exact = model.V @ q + expit(c[None, :] - ctx.z[:, None]) @ (-(model.v @ u))
        chi2 = np.mean(((F - exact) / sd) ** 2)
        assert 0.005 <= chi2 <= 1
        assert np.mean(((F - exact) / noise_sd(F, absolute=0.0, relative=0.0)) ** 2) > 100


def test_anchored_coarse_pass_labels_four_heads():
    """H = 4 at float32-level noise: the anchored coarse pass labels every head of a group
    (each head's y = W_h^T u within 1e-2 of the truth), where random q put two steps within
    half a nat in most configurations."""
    from attnlearn.learner.long.passes import coarse_pass, probe_scale
    from attnlearn.learner.long.solve import regress_y

    ctx, model = _group_context(4, 4, 3, F32)
    scale, reprobes = probe_scale(ctx, rng=ctx.rng)
    assert reprobes == 0  # a random model at unit spread: the first probe measures its steps
    u = long_passes._unit(ctx.rng, 4) * scale
    Q, F, sd, ends, fit = coarse_pass(ctx, u, scale, rng=ctx.rng)
    Y, _, _ = regress_y(Q, fit, tol=ctx.tol)
    Y_true = np.einsum("hij,i->hj", model.W, u)
    g_true = -(model.v @ u)
    order = np.argsort(fit.g)
    assert np.allclose(fit.g[order], np.sort(g_true), rtol=1e-3)
    err = np.abs(Y[order] - Y_true[np.argsort(g_true)]).max() / np.abs(Y_true).max()
    assert err <= 1e-2
    # the nudged configurations stay near the anchor (labels by continuity): every step moved
    # by less than half the anchor's smallest gap
    gap = np.min(np.diff(fit.c[0]))
    assert np.max(np.abs(fit.c[1:] - fit.c[0])) < 0.5 * gap


def _contaminated_group():
    """A group of 16 configurations of three steps, exact answers plus 1e-12 relative noise,
    whose joint fit started three configurations with two close steps (0.3 to 0.6 nats apart,
    heights 2 and 0.3) passed through each other: the shared heights come out far off."""
    from scipy.special import expit


    tol = LongTolerances()
    H, m = 3, 16
    b, z = ratio_grid(L, tol.ratios(H))
    rng = np.random.default_rng(5)
    g = np.array([2.0, 0.3, -1.5])
    c = np.sort(rng.uniform(-4, 4, (m, H)), axis=1)
    c[:, 1] = c[:, 0] + rng.uniform(0.3, 0.6, m)
    C = rng.normal(size=m)
    exact = C[:, None] + np.einsum("mrh,h->mr", expit(c[:, None, :] - z[None, :, None]), g)
    sd = 1e-12 * np.max(np.abs(exact), axis=1, keepdims=True) * np.ones_like(exact)
    F = exact + sd * rng.normal(size=exact.shape)
    ends = (C, np.full(m, 1e-12), C + g.sum(), np.full(m, 1e-12))
    c0 = c.copy()
    c0[:3, [0, 1]] = c0[:3, [1, 0]]
    ctx = long_ask.Context(ask=None, d=4, H=H, L=L, b=b, z=z, absolute=0.0, relative=1e-16, tol=tol,
                  rng=np.random.default_rng(0))
    return ctx, F, sd, ends, long_fit.fit_group(z, F, sd, ends, g * (1 + 1e-3), C, c0), g, c


def test_trim_frees_the_heights_of_a_contaminated_group():
    """_trim: a group whose joint fit sits far above the noise (three configurations in a wrong
    local minimum pull the shared heights) is refitted without its worst configurations, those
    repaired under the clean heights: heights and positions back to the noise level; a group
    within the noise is returned as it is."""
    ctx, F, sd, ends, fit, g, c = _contaminated_group()
    assert fit.reduced > 1e10 and np.max(np.abs(fit.g - g)) > 1e-2
    clean = long_passes._trim(ctx, F, sd, ends, fit)
    assert clean.reduced <= ctx.tol.chi2_factor
    assert np.max(np.abs(clean.g - g)) < 1e-8 and np.max(np.abs(clean.c - c)) < 1e-8
    assert long_passes._trim(ctx, F, sd, ends, clean) is clean


def test_repair_never_leaves_a_configuration_worse(monkeypatch):
    """_repair: a configuration above the noise is refitted under the group's heights from its own
    positions first (then their orders); a refit whose chi2 is not below the configuration's
    is dropped, and its positions stay as they were."""
    ctx, F, sd, ends, fit, g, c = _contaminated_group()
    bad = np.flatnonzero(~(fit.chi2 <= ctx.tol.chi2_factor * (len(ctx.z) + 2)))
    assert len(bad)
    firsts, seen = [], []
    real = long_passes._positions_only

    def worse(z, Fj, sdj, gj, starts, e, j, *, limit):
        firsts.append(np.array(starts[0]))
        return starts[0] + 1.0, 0.0, np.inf  # a refit far off, its chi2 infinite

    def group(ctx, F, sd, ends, g, C, c):
        seen.append(c.copy())
        return fit

    monkeypatch.setattr(long_passes, "_positions_only", worse)
    monkeypatch.setattr(long_passes, "_fit_group_checked", group)
    long_passes._repair(ctx, F, sd, ends, fit)
    assert len(firsts) == len(bad) and all(np.array_equal(f, fit.c[j]) for f, j in zip(firsts, bad))
    assert np.array_equal(seen[0], fit.c)  # nothing replaced
    monkeypatch.setattr(long_passes, "_positions_only", real)
    seen.clear()
    long_passes._repair(ctx, F, sd, ends, fit)
    assert not np.array_equal(seen[0][bad], fit.c[bad])  # a real refit, below the old chi2, is kept


def _bare_context(d):
    """A long-design context for :func:`draw_groups` alone (``_group`` patched: nothing asked)."""

    ctx = long_ask.Context(ask=Oracle(random_model(1, d, seed=0)), d=d, H=1, L=L, b=None, z=None, absolute=0.0,
                  relative=0.0, tol=LongTolerances(), rng=None)
    return ctx


@pytest.mark.parametrize("d, fail", [(5, {}), (5, {1: 1, 3: 2}), (1, {0: 1}), (4, {3: 1}), (4, {3: 2})])
def test_groups_directions_are_orthogonal_and_redraws_keep_them(monkeypatch, d, fail):
    """draw_groups: the u_k are scale times the rows of an orthogonal matrix (U^-1 amplifies the
    groups' errors least); a redrawn group takes a new direction orthogonal to the groups before
    it (the last group, with no orthogonal direction left, its own tilted by ``tol.last_tilt``
    into the span of the others, which bounds the amplification). ``fail`` maps a group to the
    number of its attempts that raise."""
    ctx = _bare_context(d)
    tried, accepted, attempts = [], [], {}

    def group(ctx, u, scale, rng):
        k = len(accepted)
        attempts[k] = attempts.get(k, 0) + 1
        tried.append(u.copy())
        if attempts[k] <= fail.get(k, 0):
            raise IllConditionedError("degenerate")
        accepted.append(u.copy())
        return {"k": k, "covY": np.broadcast_to(np.eye(d), (3, d, d))}  # three heads seen alike

    monkeypatch.setattr(long_run, "_group", group)
    U, groups, redrawn, _ = long_run.draw_groups(ctx, 2.0, rng=np.random.default_rng(3))
    assert [g["k"] for g in groups] == list(range(d))
    assert redrawn == [f"group({k + 1})" for k in sorted(fail) for _ in range(fail[k])]
    assert np.allclose(np.linalg.norm(U, axis=1), 2.0, rtol=1e-12)
    last = d - 1 in fail and d > 1  # the last group redrawn: tilted into the others' span
    inner = U[:-1] if last else U
    assert np.allclose(inner @ inner.T, 4.0 * np.eye(len(inner)), atol=1e-12)
    assert len(tried) == d + sum(fail.values())
    if d > 1:  # every redraw a new direction (d = 1 has only one, up to its sign)
        rejected = [u for u in tried if not any(np.array_equal(u, w) for w in U)]
        assert len(rejected) == sum(fail.values())
    if d == 1 and fail:  # the only other direction: the first one's other sign
        assert np.array_equal(U[0], -tried[0])
    if not last:
        assert np.isclose(np.linalg.cond(U), 1.0)
    else:
        inner = U[:-1] / 2.0
        across = U[-1] / 2.0 - (U[-1] / 2.0 @ inner.T) @ inner  # its part orthogonal to the others
        assert np.isclose(np.linalg.norm(across), np.cos(ctx.tol.last_tilt), rtol=1e-12)
        assert not np.allclose(U[-1] @ U[:-1].T, 0.0)
        # the amplification factor ||U^-1||_F s / sqrt(d) of draw_groups' Notes, at 45 degrees
        assert np.isclose(np.linalg.norm(np.linalg.inv(U)) * 2.0 / np.sqrt(d), np.sqrt((d + 2) / d), rtol=1e-10)


@pytest.mark.parametrize("d", [1, 2, 7])
def test_orthonormal_fixes_the_signs_lapack_leaves_open(d):
    """_orthonormal (the groups' directions and coarse_pass's nudge bases): the Q of the QR of the
    Gaussian matrix drawn with every column's sign fixed so that R has a positive diagonal, the
    one factorisation whatever sign convention the LAPACK in use chooses: Q^T A is upper
    triangular with positive diagonal, and the same draw gives the same matrix."""
    A = np.random.default_rng(d).normal(size=(d, d))
    Q = long_passes._orthonormal(np.random.default_rng(d), d)
    R = Q.T @ A
    assert np.allclose(Q.T @ Q, np.eye(d), atol=1e-13)
    assert np.allclose(np.tril(R, -1), 0.0, atol=1e-12) and np.all(np.diag(R) > 0)
    assert np.array_equal(Q, long_passes._orthonormal(np.random.default_rng(d), d))


def test_coarse_pass_nudges_along_orthonormal_bases(monkeypatch):
    """coarse_pass's nudged configurations move q0 along the rows of _orthonormal's matrices
    (transposed: their columns), one matrix per d nudges, not along a bare np.linalg.qr's."""
    d, H = 4, 3
    real_basis, real_pass = long_passes._orthonormal, long_passes.coarse_pass
    drawn, passes = [], []

    def spy(rng, n):
        drawn.append(real_basis(rng, n))
        return drawn[-1]

    def coarse(*args, **kw):
        start = len(drawn)
        out = real_pass(*args, **kw)
        passes.append((drawn[start:], out[0]))
        return out

    monkeypatch.setattr(long_passes, "_orthonormal", spy)
    monkeypatch.setattr(long_run, "coarse_pass", coarse)
    rec = learn(Oracle(random_model(H, d, seed=2)), d, heads=H, design="long", max_length=256, seed=0)
    m = LongTolerances().per_group(d)
    assert len(passes) == d + len(rec.diagnostics.redrawn)
    for bases, Q in passes:
        assert len(bases) == -(-m // d)
        W = np.vstack([B.T for B in bases])[:m]
        steps = Q[1:m + 1] - Q[0]  # q0 + eta w_j, j = 1..m
        eta = np.linalg.norm(steps, axis=1)
        assert np.allclose(steps / eta[:, None], W, atol=1e-10) and np.allclose(eta, eta[0])


@pytest.mark.parametrize("n_faint", [0, 1, 2, 3])
def test_a_group_seeing_a_head_faintly_is_drawn_again(monkeypatch, n_faint):
    """A group whose faintest head's y has a standard deviation over tol.faint_head times the
    median of its heads' is drawn again; when every attempt is faint, the least faint is kept,
    its direction put back among orthonormal rows, and only the other attempts' queries are
    spent. Group 2's first ``n_faint`` attempts are faint (3, 2 and 4 times tol.faint_head)."""
    d = 5
    ctx = _bare_context(d)
    tol = ctx.tol
    tried, ratios = [], [3 * tol.faint_head, 2 * tol.faint_head, 4 * tol.faint_head]

    def group(ctx, u, scale, rng):
        a = len(tried) - 1  # group 2's attempt (the first call is group 1's)
        tried.append(u.copy())
        ctx.ask.queries += 10  # every attempt asks ten queries
        sd = [1.0, 1.0, ratios[a] if 0 <= a < n_faint else 1.0]
        return {"u": u.copy(), "covY": np.array([np.eye(d) * x**2 / d for x in sd])}

    monkeypatch.setattr(long_run, "_group", group)
    U, groups, redrawn, spent = long_run.draw_groups(ctx, 2.0, rng=np.random.default_rng(1))
    attempts = min(n_faint + 1, tol.faint_redraws + 1)
    assert len(tried) == d - 1 + attempts
    assert redrawn == ["group(2)"] * (attempts - 1)
    assert np.allclose(U @ U.T, 4.0 * np.eye(d), atol=1e-12)  # the kept direction among orthonormal rows
    kept = 1 if n_faint == 3 else n_faint  # all faint: the least faint, the second attempt
    assert np.array_equal(groups[1]["u"], tried[1 + kept]) and np.array_equal(U[1], tried[1 + kept])
    assert spent == 10 * (attempts - 1)


@pytest.mark.parametrize("k", [1, 3])
def test_a_faint_group_is_kept_when_its_redraws_raise(monkeypatch, k):
    """Group k + 1 (k = 3: the last, whose redraws are tilts) is faint at its first attempt and
    degenerate at its two redraws: the faint attempt is kept (not a raise), its direction among
    the others as drawn (orthonormal rows; the last group's own, untilted), its anchor's retried
    queries counted and the failed attempts' queries spent."""
    d = 4
    ctx = _bare_context(d)
    tol = ctx.tol
    tried = []

    def group(ctx, u, scale, rng):
        j = len(tried) - k  # this group's attempt
        tried.append(u.copy())
        ctx.ask.queries += 10
        if j == 0:
            ctx.retried += 3  # the faint attempt's anchor asked a second candidate
        if 0 < j <= tol.faint_redraws:  # its redraws fail: the faint attempt is kept after these
            ctx.retried += 5  # lost with the raise
            raise IllConditionedError("degenerate")
        sd = [1.0, 1.0, 3 * tol.faint_head if j == 0 else 1.0]
        return {"u": u.copy(), "covY": np.array([np.eye(d) * x**2 / d for x in sd])}

    monkeypatch.setattr(long_run, "_group", group)
    U, groups, redrawn, spent = long_run.draw_groups(ctx, 2.0, rng=np.random.default_rng(2))
    assert np.array_equal(U[k], tried[k]) and np.array_equal(groups[k]["u"], tried[k])
    assert np.allclose(U @ U.T, 4.0 * np.eye(d), atol=1e-12)
    assert tol.faint_redraws < tol.group_redraws
    assert len(tried) == d + tol.faint_redraws  # not the failure budget's remaining redraws
    assert redrawn == [f"group({k + 1})"] * tol.faint_redraws
    assert spent == 10 * tol.faint_redraws and ctx.retried == 3


@pytest.mark.parametrize("k", [1, 3])
def test_a_group_failing_all_but_its_last_redraw_is_kept(monkeypatch, k):
    """Group k + 1 (k = 3: the last, drawn again by tilts) fails at its first attempt and at
    every redraw but the last (``tol.group_redraws``, more than the faint budget): the last
    attempt's direction and result are kept, every failed attempt's queries spent."""
    d = 4
    ctx = _bare_context(d)
    tol = ctx.tol
    tried = []

    def group(ctx, u, scale, rng):
        j = len(tried) - k  # this group's attempt
        tried.append(u.copy())
        ctx.ask.queries += 10
        if 0 <= j < tol.group_redraws:
            raise IllConditionedError("degenerate")
        return {"u": u.copy(), "covY": np.broadcast_to(np.eye(d) / d, (3, d, d))}

    monkeypatch.setattr(long_run, "_group", group)
    U, groups, redrawn, spent = long_run.draw_groups(ctx, 2.0, rng=np.random.default_rng(3))
    assert len(tried) == d + tol.group_redraws
    assert np.array_equal(U[k], tried[k + tol.group_redraws]) and np.array_equal(groups[k]["u"], U[k])
    assert redrawn == [f"group({k + 1})"] * tol.group_redraws
    assert spent == 10 * tol.group_redraws
    if k < d - 1:  # a new direction orthogonal to the groups before: the rows stay orthonormal
        assert np.allclose(U @ U.T, 4.0 * np.eye(d), atol=1e-12)
    else:  # the last group tilted by tol.last_tilt out of its first direction, every time
        first = tried[k] / 2.0
        for u in tried[k + 1:]:
            assert np.isclose(abs(u / 2.0 @ first), np.cos(tol.last_tilt), atol=1e-12)


def test_groups_redraws_exhausted_raise(monkeypatch):
    """A group that stays degenerate after ``group_redraws`` new directions raises, naming it."""
    ctx = _bare_context(3)
    tol = ctx.tol
    tried = []

    def group(ctx, u, scale, rng):
        tried.append(u.copy())
        if len(tried) > 1:  # group 1 passes, group 2 never does
            raise IllConditionedError("degenerate")
        return {"covY": np.broadcast_to(np.eye(3), (2, 3, 3))}

    monkeypatch.setattr(long_run, "_group", group)
    with pytest.raises(IllConditionedError, match=f"group 2, after {tol.group_redraws} redraws: degenerate"):
        long_run.draw_groups(ctx, 1.0, rng=np.random.default_rng(0))
    assert len(tried) == 1 + tol.group_redraws + 1
    # every attempt at group 2 a new direction orthogonal to group 1
    assert np.allclose(np.array(tried[1:]) @ tried[0], 0.0, atol=1e-12)
    assert len({tuple(np.round(u, 12)) for u in tried}) == len(tried)


def _biased(H, d, seed, *, c_scale=1.0, b=0.7):
    """A scalar layer with score biases c_h (entries N(0, c_scale^2 / d)) and offset b, read
    through the float64 Oracle."""
    g = np.random.default_rng(seed)
    W = g.normal(size=(H, d, d)) / np.sqrt(d)
    v = g.normal(size=(H, d))
    return AttentionLayer(W, v, c=c_scale * g.normal(size=(H, d)) / np.sqrt(d), b=np.asarray(b))


@pytest.mark.parametrize("H, d, seed, c_scale, b", [
    (1, 2, 0, 1.0, 0.7), (2, 3, 1, 1.0, -1.3),
    (3, 3, 2, 1.0, 0.7),   # the anchored coarse pass: its stretch predicted from the group's origin
    (3, 3, 3, 0.0, 0.0),   # PyTorch's initial biases: zero (the origin's steps coincide)
    (3, 3, 1, 2.0, 0.7),   # the origin's steps several nats apart: no grid start fits them, the
                           # free fit's positions do (raised before _origin_starts had them)
    (4, 4, 3, 4.0, 0.7),   # heights from the candidate off by 1e-8 put the origin's chi2 8x its
                           # limit: refitted jointly with the candidate (raised before)
])
def test_biases_recovered_within_the_estimate(H, d, seed, c_scale, b):
    """design="long", bias=True on a float64 oracle: every c_h, v_h, W_h and beta within the
    estimate, the model an AttentionLayer with c and b, the count long_cost's with bias."""
    layer = _biased(H, d, seed, c_scale=c_scale, b=b)
    oracle = Oracle(layer)
    rec = learn(oracle, d, heads=H, design="long", bias=True, max_length=L, seed=seed)
    err = bias_error(rec.model, layer)
    assert isinstance(rec.model, AttentionLayer) and rec.model.c is not None and rec.model.c.shape == (H, d)
    assert err <= rec.error_estimate <= 1e-6
    assert abs(float(rec.model.b[0]) - b) <= rec.error_estimate * max(abs(b), 1.0)
    parts, _ = long_cost(d, H, L, tol=LongTolerances(), bias=True)
    assert rec.queries["design"] == sum(parts.values())  # a redrawn group's queries are counted apart


def test_long_cost_with_bias_counts_the_zero_token_and_the_origins():
    tol = LongTolerances()
    R = len(ratio_grid(L, tol.ratios(3))[0])
    plain, _ = long_cost(4, 3, L, tol=tol)
    biased, _ = long_cost(4, 3, L, tol=tol, bias=True)
    assert biased["V"] == plain["V"] + 1 == 5
    assert biased["anchor"] == plain["anchor"] + 4 * R  # one origin per group
    assert {k: v for k, v in biased.items() if k not in ("V", "anchor")} == \
        {k: v for k, v in plain.items() if k not in ("V", "anchor")}
    # below the anchored heads there is no anchor, hence no origin
    assert long_cost(4, 2, L, tol=tol, bias=True)[0]["anchor"] == 0


def test_origin_fits_minus_kappa_from_the_candidate_and_refuses_a_foreign_one():
    """_origin: the steps of the configuration q = 0 sit at -kappa_h = -u^T c_h, labelled by the
    candidate's heights (positions-only under them, or jointly with the candidate); a candidate
    from another direction shares no heights with the origin, which then raises."""
    from attnlearn.protocol import Access

    H, d = 2, 3
    layer = _biased(H, d, 5, c_scale=2.0)
    tol = LongTolerances()
    b, z = ratio_grid(L, tol.ratios(H))
    ctx = long_ask.Context(ask=Access(Oracle(layer), d), d=d, H=H, L=L, b=b, z=z, absolute=0.0, relative=0.0, tol=tol,
                  rng=np.random.default_rng(0), family=AFFINE)
    ctx.V, ctx.V_sd = long_ask.ask_V(ctx)

    def candidate(u, q):
        F, sd = ctx.config(u, q)
        e = ctx.ends(u, q)
        C, c, g, chi2 = long_fit.fit_config(z, F, sd, H, ends=e, rng=ctx.rng)
        return (F, sd, e, C, c), g

    u, q = np.array([1.0, -0.6, 0.4]), np.array([0.3, 0.5, -0.2])
    cand, g = candidate(u, q)
    gamma, kappa = -np.asarray(layer.A) @ u, np.asarray(layer.c) @ u
    label = [int(np.argmin(np.abs(gamma - gh))) for gh in g]
    assert sorted(label) == [0, 1]
    assert np.allclose(long_passes._origin(ctx, u, g, cand), -kappa[label], atol=1e-8)
    foreign, g2 = candidate(np.array([-0.2, 0.9, 0.7]), q)
    with pytest.raises(IllConditionedError, match=r"origin \(q = 0\) is not fitted .* jointly with the anchor's "
                                                   r"candidate .*: its score biases cannot be placed"):
        long_passes._origin(ctx, u, g2, foreign)


@pytest.mark.parametrize("scale, reprobes", [(1.0, 0), (1e-3, 1), (1e-5, 3)])
def test_a_small_model_is_probed_again_at_larger_scales(scale, reprobes):
    """Steps crowded within a few hundredths of a nat (W scaled down, as a layer initialised
    N(0, 0.02^2)): the probe is asked again at 16 times the |u||q| (each round of four
    configurations reported in queries["scale"], outside the design's long_cost count) until the
    steps spread, and the model is learned; at unit scale no probe is repeated. The positions are
    bilinear in u and q, so each round moves them 16 times: a correction of about 2000 at 1e-3
    takes one round (2464, then 127), 3e5 at 1e-5 three (3e5, 9544, 770, 40): every correction at
    least twice away from the threshold 256."""
    d, H = 3, 2
    model = random_model(H, d, seed=5, scale=scale)
    oracle = Oracle(model)
    rec = learn(oracle, d, heads=H, design="long", max_length=L, seed=5)
    parts, _ = long_cost(d, H, L, tol=LongTolerances())
    probe = parts["probe"]
    assert rec.queries.get("scale", 0) == reprobes * probe
    assert rec.queries["design"] == sum(parts.values()) and rec.queries["redraws"] == 0
    assert oracle.queries == rec.queries["total"]
    err = param_error(rec.model, canonical(model))
    assert err <= rec.error_estimate <= 1e-6


# ---------------------------------------------------------------- the held-out answers confront the covariance
def _spread_case(d, H, biased, seed):
    """Random groups solved by ``solve_heads``, their AnswerSpread, and the model's answers as a
    function of every group's y, gamma (and beta): the covariance's first-order reference."""
    rng = np.random.default_rng(seed)
    w = d + 1 if biased else d
    U = rng.normal(size=(d, d))
    perms = np.array([rng.permutation(H) for _ in range(d)])
    groups = []
    for _ in range(d):
        A = rng.normal(size=(H, w, w))
        groups.append({"Y": rng.normal(size=(H, w)), "g": rng.normal(size=H),
                       "covY": np.einsum("hij,hkj->hik", A, A) * 1e-6, "g_sd": rng.uniform(0.5, 2, H) * 1e-3})
    beta, beta_sd = (0.3, 2e-3) if biased else (0.0, 0.0)

    def model_of(groups, beta):
        W, v, _ = long_solve.solve_heads(U, groups, perms)
        return AttentionLayer(W[:, :, :d], v, c=W[:, :, d], b=np.asarray(beta)) if biased else MultiHeadAttention(W, v)

    model = model_of(groups, beta)
    spread = AnswerSpread(model, np.linalg.inv(U), groups, perms, beta_sd=beta_sd, absolute=1e-9, relative=0.0,
                          rounding=0.5)
    return spread, model_of, groups, beta


@pytest.mark.parametrize("d, H, biased", [(1, 1, False), (3, 2, False), (2, 3, True)])
def test_answer_spread_is_the_covariance_solve_heads_propagates(d, H, biased):
    spread, model_of, groups, beta = _spread_case(d, H, biased, seed=d + H)
    rng = np.random.default_rng(7)
    data = [(rng.normal(size=(4, N, d)), rng.normal(size=4)) for N in (2, 5)]
    r, K = spread.residuals(data)
    Xs = [X for X, _ in data]
    f0 = np.concatenate([spread.model.batch(X) for X in Xs])
    np.testing.assert_allclose(r, np.concatenate([y for _, y in data]) - f0, atol=1e-12)

    def moved(**kw):  # the answers' change per unit move of one y, gamma or beta (finite difference, linear)
        g = [{"Y": gr["Y"].copy(), "g": gr["g"].copy()} for gr in groups]
        b = beta
        if "y" in kw:
            k, j, l = kw["y"]
            g[k]["Y"][j, l] += 1e-6
        elif "g" in kw:
            k, j = kw["g"]
            g[k]["g"][j] += 1e-6
        else:
            b += 1e-6
        return (np.concatenate([model_of(g, b).batch(X) for X in Xs]) - f0) / 1e-6

    ref = np.diag(np.concatenate([noise_sd(spread.model.batch(X), absolute=1e-9, relative=0.0, length=X.shape[1])
                                  for X in Xs]) ** 2)
    for k, gr in enumerate(groups):
        for j in range(H):
            D = np.column_stack([moved(y=(k, j, l)) for l in range(gr["Y"].shape[1])])
            ref += D @ gr["covY"][j] @ D.T
            ref += np.outer(moved(g=(k, j)), moved(g=(k, j))) * gr["g_sd"][j] ** 2
    if biased:
        ref += np.outer(moved(), moved()) * spread.beta_sd**2
    np.testing.assert_allclose(K, ref, rtol=1e-4, atol=1e-6 * np.abs(ref).max())


class _Spread:
    """A stand-in AnswerSpread: fixed residuals and covariance; records the data it was given."""

    def __init__(self, r, K):
        self.r, self.K, self.seen = np.asarray(r, float), np.asarray(K, float), None

    def residuals(self, data):
        self.seen = data
        return self.r, self.K


def _correlated(m, seed):
    """A covariance of m answers dominated by a few shared directions, as the held-out answers'."""
    rng = np.random.default_rng(seed)
    J = rng.normal(size=(m, 6)) * np.array([10, 5, 2, 1, 0.5, 0.2])
    return J @ J.T + np.diag(rng.uniform(0.01, 0.1, m))


def test_confront_spread_is_calibrated_on_correlated_residuals():
    """Residuals drawn from the covariance itself: the estimate is raised in at most 0.5% of 2000
    draws (Chernoff's bound promises 0.1%; a chi2_m test of the same statistic raised it in about 8%)."""
    tol = CertificateTolerances()
    K = _correlated(32, seed=0)
    Lc = np.linalg.cholesky(K)
    rng = np.random.default_rng(1)
    log = QueryLog()
    log.add(np.zeros((32, 1, 1)), np.zeros(32))
    raised = sum(confront_spread(_Spread(Lc @ rng.normal(size=32), K), log, 0, estimate=1.0, tol=tol)[0] > 1.0
                 for _ in range(2000))
    assert raised <= 10


def test_confront_spread_raises_by_the_measured_excess_and_never_lowers():
    tol = CertificateTolerances()
    K = _correlated(32, seed=2)
    v = np.diag(K)
    u = np.linalg.eigh(K / np.sqrt(np.outer(v, v)))[1][:, -1]  # the dominant direction, unit norm
    log = QueryLog()
    log.add(np.zeros((12, 1, 1)), np.zeros(12))
    log.add(np.zeros((32, 2, 1)), np.zeros(32))
    excess = _Spread(np.sqrt(100 * 32) * np.sqrt(v) * u, K)  # T = 100 m: far beyond any bound (at most 20 m)
    est, per = confront_spread(excess, log, 1, estimate=1e-6, tol=tol)
    assert per == pytest.approx(100, rel=1e-9) and est == pytest.approx(1e-5, rel=1e-9)
    assert [X.shape[1] for X, _ in excess.seen] == [2]  # only the batches from start on
    for r in (np.zeros(32), 0.1 * np.sqrt(v) * u):  # within the spread: unchanged
        assert confront_spread(_Spread(r, K), log, 1, estimate=1e-6, tol=tol)[0] == 1e-6
    assert confront_spread(_Spread(np.zeros(0), np.zeros((0, 0))), QueryLog(), 0, estimate=1e-6, tol=tol) == (1e-6,
                                                                                                          None)


def test_confront_spread_refuses_a_miss_where_the_covariance_says_exact():
    """An answer of zero predicted variance: ignored when it is met exactly, inf when it is missed."""
    tol = CertificateTolerances()
    K = np.diag([1.0, 0.0, 1.0])
    log = QueryLog()
    log.add(np.zeros((3, 1, 1)), np.zeros(3))
    est, per = confront_spread(_Spread([0.5, 0.0, -0.5], K), log, 0, estimate=1e-6, tol=tol)
    assert est == 1e-6 and per == pytest.approx(0.25)  # two answers counted
    assert confront_spread(_Spread([0.5, 1e-30, -0.5], K), log, 0, estimate=1e-6, tol=tol)[0] == np.inf


class _LoudShortQueries:
    """An oracle whose answers to queries of 2 to 16 tokens (the long design's held-out ones) are off
    by 1e-9 relative, far beyond what its covariance predicts for the model: the estimate must rise."""

    def __init__(self, oracle):
        self.oracle, self.rng = oracle, np.random.default_rng(0)

    def __getattr__(self, name):
        return getattr(self.oracle, name)

    def batch(self, Xs):
        y = self.oracle.batch(Xs)
        if 2 <= np.shape(Xs)[1] <= 16:
            y = y * (1 + 1e-9 * self.rng.choice([-1.0, 1.0], size=len(y)))
        return y


def test_held_out_answers_that_disagree_raise_the_long_designs_estimate():
    model = random_model(2, 3, seed=11)
    quiet = learn(Oracle(model), 3, heads=2, design="long", max_length=256, seed=0)
    loud = learn(_LoudShortQueries(Oracle(model)), 3, heads=2, design="long", max_length=256, seed=0)
    assert quiet.diagnostics.holdout_chi2 < 10 and quiet.error_estimate < 1e-11  # the covariance holds
    assert loud.queries == quiet.queries  # the same design: only the held-out answers differ
    assert param_error(loud.model, canonical(model)) == pytest.approx(param_error(quiet.model, canonical(model)))
    assert loud.diagnostics.holdout_chi2 > 1e4  # the held-out residuals are 1e-9, the spread far below
    assert loud.error_estimate > 100 * quiet.error_estimate and loud.holdout_error <= 10 * loud.error_estimate
    assert learn(Oracle(model), 3, heads=2).diagnostics.holdout_chi2 is None  # the paper's design: its certificate


def _anchors(monkeypatch):
    """Every anchor coarse_pass is given, and every candidate _stretch returned, recorded."""
    kept, stretched = [], []
    real_anchor, real_stretch = long_passes._anchor, long_passes._stretch

    def anchor(*args, **kw):  # the first anchor, the one coarse_pass nudges unless it loses its labels
        found = real_anchor(*args, **kw)
        kept.append(found[0])
        return found

    def stretch(*args, **kw):
        stretched.append(real_stretch(*args, **kw)[0])
        return stretched[-1], np.zeros(args[0].H)

    monkeypatch.setattr(long_passes, "_anchor", anchor)
    monkeypatch.setattr(long_passes, "_stretch", stretch)
    return kept, stretched


def test_every_candidate_is_stretched_and_the_widest_resolved_is_the_anchor(monkeypatch):
    """Of a group's candidates, every one is stretched; of those that resolve their steps, the one
    whose closest two steps lie farthest apart (in nats: the nudges scale with it) is the anchor.
    The stretched configurations after the first are reported with the redraws and the design's
    count stays long_cost's."""
    d, H, L = 4, 3, 256
    M = random_model(H, d, seed=2)
    monkeypatch.setattr(long_run, "_faintness", lambda group: 1.0)  # no group drawn again for a faint head
    kept, stretched = _anchors(monkeypatch)
    gap = lambda a: np.min(np.diff(a.fits[0][1]))  # noqa: E731
    resolved = iter([0.0, np.inf] * 100)  # every other candidate resolves
    monkeypatch.setattr(long_passes, "resolution", lambda *args: next(resolved))
    rec = learn(Oracle(M), d, heads=H, design="long", max_length=L, seed=0)
    tol = LongTolerances()
    R = len(ratio_grid(L, tol.ratios(H))[0])
    assert len(kept) == d and len(stretched) == d * tol.base_tries  # an exact oracle: every candidate fitted
    for k, a in enumerate(kept):
        group = stretched[k * tol.base_tries:(k + 1) * tol.base_tries]
        assert a is max(group[1::2], key=gap) and a.apart == np.inf and len(a.Q) == 1
        assert gap(a) > min(gap(b) for b in group[1::2])  # a choice was made
    assert rec.queries["design"] == sum(long_cost(d, H, L, tol=tol)[0].values())
    assert rec.queries["redraws"] == d * (tol.base_tries - 1) * R and rec.diagnostics.redrawn == []
    assert param_error(rec.model, M) <= rec.error_estimate


def test_unresolved_candidates_are_stretched_again_and_fitted_in_pairs(monkeypatch):
    """When no stretched candidate resolves its steps alone, each is asked again at its stretch
    (from its steps of appreciable height) and at tol.restretch times it, the two fitted together
    (fit_stretches): the first pair that resolves is the anchor, both its configurations in the
    group, their queries reported with the redraws. With no pair resolved either, the group is
    drawn again, and after two redraws the learner raises."""
    d, H, L = 4, 3, 256
    M = random_model(H, d, seed=2)
    monkeypatch.setattr(long_run, "_faintness", lambda group: 1.0)
    kept, stretched = _anchors(monkeypatch)
    monkeypatch.setattr(long_passes, "resolution", lambda *args: 0.0)
    rec = learn(Oracle(M), d, heads=H, design="long", max_length=L, seed=0)
    tol = LongTolerances()
    R = len(ratio_grid(L, tol.ratios(H))[0])
    assert [len(a.Q) for a in kept] == [2] * d and all(a.apart >= tol.anchor_resolve for a in kept)
    for a in kept:
        assert np.allclose(a.Q[1], tol.restretch * a.Q[0])
        assert a.fits[1][1] == pytest.approx(tol.restretch * a.fits[0][1])  # no biases: the origin at 0
        assert np.array_equal(a.fits[0][2], a.fits[1][2])  # the heights shared
    assert rec.queries["redraws"] == d * ((tol.base_tries - 1) * R + 2 * R)  # the later candidates, one pair
    assert param_error(rec.model, M) <= rec.error_estimate

    monkeypatch.setattr(long_fit, "_resolved", lambda *args: 0.0)
    with pytest.raises(IllConditionedError, match=rf"group 1, after {tol.group_redraws} redraws: a group's anchor configuration, stretched, "
                                                  r"does not resolve its steps \(of 8 candidates, alone and stretched "
                                                  r"again by 2, the closest two at best 0 standard deviations"):
        learn(Oracle(M), d, heads=H, design="long", max_length=L, seed=0)


def test_an_anchor_whose_nudges_lose_its_labels_gives_way_to_the_next(monkeypatch):
    """When not one of an anchor's first tol.anchor_check nudged configurations is fitted within
    the noise from its start (a wrong local minimum resolved as an anchor), the next anchor that resolves is nudged
    instead, the abandoned nudges reported with the redraws and the design's count long_cost's;
    when every anchor loses its labels, the group is drawn again, and after two redraws the
    learner raises."""
    d, H, L = 4, 3, 256
    M = random_model(H, d, seed=2)
    tol = LongTolerances()
    R = len(ratio_grid(L, tol.ratios(H))[0])
    monkeypatch.setattr(long_run, "_faintness", lambda group: 1.0)
    real_fit, real_nudged, calls, outcomes = long_passes.fit_config, long_passes._nudged, [], []

    def lost(*args, **kw):  # the first anchor of every group loses its labels
        out = real_fit(*args, **kw)
        if kw.get("labelled") and calls[-1] == 1:
            return (*out[:3], np.inf)
        return out

    def nudged(ctx, u, anchor, Wd, *, rng):
        calls.append(1 if not calls or outcomes[-1] is not None else calls[-1] + 1)
        outcomes.append(real_nudged(ctx, u, anchor, Wd, rng=rng))
        return outcomes[-1]

    monkeypatch.setattr(long_passes, "fit_config", lost)
    monkeypatch.setattr(long_passes, "_nudged", nudged)
    rec = learn(Oracle(M), d, heads=H, design="long", max_length=L, seed=0)
    given_up = [o is None for o in outcomes]
    assert calls.count(1) == d and all(given_up[k] for k, c in enumerate(calls) if c == 1)  # every group's first
    assert all(given_up[k] != (k + 1 == len(calls) or calls[k + 1] == 1) for k in range(len(calls)))  # its last kept
    assert rec.queries["design"] == sum(long_cost(d, H, L, tol=tol)[0].values())
    assert rec.queries["redraws"] == (d * (tol.base_tries - 1) + sum(given_up) * tol.anchor_check) * R
    assert rec.diagnostics.redrawn == [] and param_error(rec.model, M) <= rec.error_estimate

    monkeypatch.setattr(long_passes, "fit_config", lambda *a, **kw: (*real_fit(*a, **kw)[:3], np.inf)
                        if kw.get("labelled") else real_fit(*a, **kw))
    with pytest.raises(IllConditionedError, match=rf"group 1, after {tol.group_redraws} redraws: none of a group's anchors holds: not "
                                                  r"one of the first 4 nudged configurations of each was fitted"):
        learn(Oracle(M), d, heads=H, design="long", max_length=L, seed=0)


def test_seen_steps_set_the_stretch_not_a_parked_one():
    """A fit of crowded steps parks a spare one far out with no height: the stretch is set by the
    steps of appreciable height (tol.faint_step of the largest), so theirs lands tol.stretch out."""
    tol = LongTolerances()
    g = np.array([1.0, -0.5, 1e-4 * 1.0, 0.3])
    assert list(long_passes._seen(g, tol)) == [True, True, False, True]
    ctx, _ = _group_context(4, 4, 0, 1e-12)
    u, q = long_passes._unit(ctx.rng, 4), long_passes._unit(ctx.rng, 4)
    F, sd = ctx.config(u, q)
    C, c, gg, _ = fit_config(ctx.z, F, sd, 4, ends=ctx.ends(u, q))
    parked = c.copy()
    parked[np.argmin(np.abs(gg))] = 40.0  # a step of the fit moved far out
    heights = gg.copy()
    heights[np.argmin(np.abs(gg))] = 0.0  # with no height
    anchor, origin = long_passes._stretch(ctx, u, q, parked, heights, (F, sd, ctx.ends(u, q), C), [],
                                          rng=ctx.rng)
    seen = long_passes._seen(heights, tol)
    alpha = np.linalg.norm(anchor.Q[0]) / np.linalg.norm(q)
    assert alpha == pytest.approx(min(tol.stretch / np.max(np.abs(parked[seen])), tol.stretch_clip[1]))
    assert not np.any(origin)


def _crowded(relative):
    """Eight steps of about unit height, two of them 0.1 nat apart, at L = 4096, asked at stretches 1 and 2."""
    tol = LongTolerances()
    _, z = ratio_grid(L, tol.ratios(8))
    c = np.array([-5.5, -3.9, -2.6, -1.1, -1.0, 0.4, 2.2, 6.0])
    g = np.array([1.0, -0.7, 1.3, 0.9, -1.2, 0.8, -1.1, 0.6])
    C = np.array([0.3, -0.2])
    rng = np.random.default_rng(3)
    F, sd = [], []
    for k, a in enumerate((1.0, 2.0)):
        exact = step_curve(z, C[k], a * c, g)
        sd.append(noise_sd(exact, absolute=0.0, relative=relative))
        F.append(exact + sd[-1] * rng.normal(size=len(z)))
    ends = (C, np.full(2, 1e-9), C + g.sum(), np.full(2, 1e-9))
    return z, np.array(F), np.array(sd), ends, c, g


def test_fit_stretches_jacobian_and_the_pairs_information():
    """fit_stretches: its Jacobian (the second configuration's positions a (c - o) + o, the
    heights shared) against finite differences; from the truth's neighbourhood it finds the steps,
    and the pair resolves the closest two far better than the first configuration alone
    (chapter 5b: 160 standard deviations against 0.64 at the truth, median of twenty)."""
    z, F, sd, ends, c, g = _crowded(F32)
    o = np.array([0.1, -0.2, 0.0, 0.3, 0.0, 0.0, -0.1, 0.2])
    # the residuals' Jacobian, through a one-start fit that stops at once
    captured = {}
    real = long_fit.least_squares

    def grab(fun, x0, jac, **kw):
        captured.update(fun=fun, jac=jac, x0=np.array(x0))
        return real(fun, x0, jac=jac, **kw)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(long_fit, "least_squares", grab)
        long_fit.fit_stretches(z, F, sd, ends, (1.0, 2.0), o, [c + 0.01])
    x = captured["x0"] + 0.01
    num = np.column_stack([(captured["fun"](x + h) - captured["fun"](x - h)) / 2e-7
                           for h in 1e-7 * np.eye(len(x))])
    assert np.allclose(captured["jac"](x), num, rtol=1e-5, atol=1e-5 * np.abs(num).max())

    C, cf, gf, chi2, apart = long_fit.fit_stretches(z, F, sd, ends, (1.0, 2.0), np.zeros(8), [c + 0.02],
                                                    chi2_ok=1e4)
    assert np.allclose(cf, c, atol=1e-3) and np.allclose(gf, g, atol=1e-3) and chi2.shape == (2,)
    alone = long_fit.resolution(z, sd[0], tuple(e[0] for e in ends), cf, gf, chi2[0])
    assert apart >= LongTolerances().anchor_resolve > alone and apart > 10 * alone


def test_fit_stretches_keeps_the_best_resolved_fit_within_the_noise():
    """Of its starts' fits within chi2_ok the best resolved is kept; none within it, the lowest
    chi2 (a start whose fit merges two steps is not chosen over the truth's)."""
    z, F, sd, ends, c, g = _crowded(1e-12)
    merged = c.copy()
    merged[4] = merged[3]  # two steps on top of each other: no information on their gap
    far = c + 3.0
    judged, real = [], long_fit._resolved

    def seen(J, c, first, reduced):
        judged.append((reduced, real(J, c, first, reduced)))
        return judged[-1][1]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(long_fit, "_resolved", seen)
        out = long_fit.fit_stretches(z, F, sd, ends, (1.0, 2.0), np.zeros(8), [merged, c + 0.01, far], chi2_ok=1e3)
    dof = 2 * (len(z) + 2) - (2 + 16)
    assert len(judged) == 3 and out[4] == max(a for r, a in judged if r * dof <= 1e3)
    assert np.allclose(out[1], c, atol=1e-6) and out[4] > 1e3
    none = long_fit.fit_stretches(z, F, sd, ends, (1.0, 2.0), np.zeros(8), [far, c + 0.01], chi2_ok=0.0)
    assert np.sum(none[3]) == pytest.approx(np.sum(out[3]), rel=1e-3)


def test_a_group_left_far_above_its_noise_is_drawn_again(monkeypatch):
    """A group whose joint fit stays above trim_above times its noise after the repairs is not
    kept: it is drawn again (its queries reported as redraws), and the next draw is used."""
    d, H, L = 4, 2, 256
    M = random_model(H, d, seed=1)
    real, calls = long_run._trim, []

    def contaminated_once(*args):
        fit = real(*args)
        calls.append(fit.reduced)
        if len(calls) == 1:
            fit.reduced = 10 * LongTolerances().trim_above
        return fit

    monkeypatch.setattr(long_run, "_trim", contaminated_once)
    rec = learn(Oracle(M), d, heads=H, design="long", max_length=L, seed=0)
    R = len(ratio_grid(L, LongTolerances().ratios(H))[0])
    assert rec.diagnostics.redrawn == ["group(1)"]
    assert rec.queries["redraws"] == 2 * LongTolerances().per_group(d) * R  # one group's two passes
    assert rec.queries["design"] == sum(long_cost(d, H, L, tol=LongTolerances())[0].values())
    assert len(calls) == d + 1 and param_error(rec.model, M) <= rec.error_estimate
    monkeypatch.setattr(long_run, "_trim", lambda *args: dataclasses.replace(real(*args), reduced=np.inf))
    with pytest.raises(IllConditionedError, match=rf"group 1, after {LongTolerances().group_redraws} redraws: a group's joint fit stays at inf "
                                                  r"times its noise \(reduced chi2\) after its repairs"):
        learn(Oracle(M), d, heads=H, design="long", max_length=L, seed=0)


def test_fit_config_labelled_keeps_the_starts_order():
    """labelled=True: one start, c0 moved under the heights g0, and the heads returned in c0's
    order (here the close pair given reversed, heights with them, stays reversed); without c0 or
    g0 it is refused."""
    z, F, sd, ends, c_true, g_true = _close_pair()
    order = np.array([0, 2, 1, 3])  # the close pair's labels swapped
    C, c, g, chi2 = fit_config(z, F, sd, 4, ends=ends, c0=c_true[order] + 0.01, g0=g_true[order], chi2_ok=1e4,
                               labelled=True)
    assert np.allclose(c, c_true[order], atol=1e-6) and np.allclose(g, g_true[order], atol=1e-6) and chi2 < 1e4
    with pytest.raises(ValueError, match="labelled=True needs the positions c0 and the heights g0"):
        fit_config(z, F, sd, 4, ends=ends, c0=c_true, labelled=True)
