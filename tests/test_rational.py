"""Tests of attnlearn.rational: the copies family, rational interpolation, the head-count rank (claim C3)."""

import mpmath
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from attnlearn import InconsistentHeadCountError, MultiHeadAttention, Oracle, PoleError
from attnlearn.rational import (
    RationalFit,
    copies_sequences,
    fit_checked,
    fit_known_degree,
    fit_min_degree,
    jacobian,
    loewner_matrix,
    ratio_nodes,
)

METHODS = ["linearised", "loewner"]


def samples(ell, gamma, t):
    r"""G(t) = sum_h gamma_h / (1 + e^{ell_h} t) for rows of ell, gamma (float64)."""
    ell, gamma = np.atleast_2d(ell), np.atleast_2d(gamma)
    t = np.asarray(t, dtype=float)
    return (gamma[:, None, :] / (1.0 + np.exp(ell)[:, None, :] * t[None, :, None])).sum(axis=2)


def samples_mp(ell, gamma, t):
    """The same at the current mpmath precision, one configuration; object array (1, m)."""
    row = [mpmath.fsum(g / (1 + mpmath.exp(e) * ti) for e, g in zip(ell, gamma)) for ti in t]
    return np.array([row], dtype=object)


def random_poles(rng, C, H, spread=2.0, min_gap=0.2, min_gamma=0.2):
    """ell in [-spread, spread] with gaps >= min_gap, |gamma| >= min_gamma (well separated heads)."""
    ell = np.empty((C, H))
    for c in range(C):
        while True:
            e = np.sort(rng.uniform(-spread, spread, H))
            if H < 2 or np.min(np.diff(e)) >= min_gap:
                ell[c] = e
                break
    gamma = rng.choice([-1, 1], size=(C, H)) * rng.uniform(min_gamma, 2.0, size=(C, H))
    return ell, gamma


# --- copies_sequences ----------------------------------------------------------------------


@given(C=st.integers(1, 4), d=st.integers(1, 5), t=st.integers(0, 6), seed=st.integers(0, 2**16))
def test_copies_sequences_shape_and_content(C, d, t, seed):
    rng = np.random.default_rng(seed)
    x, q = rng.normal(size=(C, d)), rng.normal(size=(C, d))
    S = copies_sequences(x, q, t)
    assert S.shape == (C, t + 1, d)
    np.testing.assert_array_equal(S[:, 0], x)
    for k in range(1, t + 1):
        np.testing.assert_array_equal(S[:, k], q)


def test_copies_family_is_the_rational_function():
    """F(t) = V^T q + sum_h gamma_h / (1 + rho_h t), exact mode (DESIGN §4.1)."""
    rng = np.random.default_rng(10)
    H, d = 3, 4
    m = MultiHeadAttention(rng.normal(size=(H, d, d)) / np.sqrt(d), rng.normal(size=(H, d)))
    x, q = rng.normal(size=(1, d)), rng.normal(size=(1, d))
    oracle = Oracle(m, precision=50)
    with mpmath.workdps(50):
        mm = m.to_mpmath()
        xm, qm = [mpmath.mpf(a) for a in x[0]], [mpmath.mpf(a) for a in q[0]]
        um = [a - b for a, b in zip(qm, xm)]
        ell = [mpmath.fdot(um, mm.W[h].dot(qm)) for h in range(H)]
        gamma = [-mpmath.fdot(um, mm.v[h]) for h in range(H)]
        c = mpmath.fdot(mm.V, qm)
        for t in range(1, 7):
            F = oracle.batch(copies_sequences(x, q, t))[0]
            formula = c + mpmath.fsum(g / (1 + mpmath.exp(e) * t) for e, g in zip(ell, gamma))
            assert abs(F - formula) < mpmath.mpf(10) ** -45
    assert oracle.max_length == 7


# --- fit_known_degree ----------------------------------------------------------------------


@pytest.mark.parametrize("H", [1, 2, 3, 4])
def test_exact_mode_recovers_poles_and_residues(H):
    rng = np.random.default_rng(100 + H)
    ell, gamma = random_poles(rng, 1, H)
    t = list(range(1, 2 * H + 1))
    with mpmath.workdps(60):
        em, gm = [mpmath.mpf(e) for e in ell[0]], [mpmath.mpf(g) for g in gamma[0]]
        fit = fit_known_degree(t, samples_mp(em, gm, t), H)
        assert isinstance(fit, RationalFit) and fit.n == H
        err_l = max(abs(a - b) for a, b in zip(fit.ell[0], em))
        err_g = max(abs(a - b) for a, b in zip(fit.gamma[0], gm))
        assert err_l < 1e-40 and err_g < 1e-40
        assert fit.residual[0] < 1e-50


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("polish", [True, False])
@pytest.mark.parametrize("H", [1, 2])
def test_float64_recovers_small_H(method, polish, H):
    rng = np.random.default_rng(200 + H)
    ell, gamma = random_poles(rng, 20, H)
    t = np.arange(1, 2 * H + 1)
    fit = fit_known_degree(t, samples(ell, gamma, t), H, method=method, polish=polish)
    assert fit.ell.shape == fit.gamma.shape == (20, H)
    assert np.max(np.abs(fit.ell - ell)) < 1e-9
    assert np.max(np.abs(fit.gamma - gamma)) < 1e-9
    assert np.all(np.diff(fit.ell, axis=1) > 0)  # sorted increasingly


@given(ell=st.floats(-2.0, 2.0), gamma=st.floats(0.05, 5.0), sign=st.sampled_from([-1.0, 1.0]),
       method=st.sampled_from(METHODS))
def test_float64_one_head_property(ell, gamma, sign, method):
    t = np.arange(1, 3)
    fit = fit_known_degree(t, samples([ell], [sign * gamma], t), 1, method=method)
    assert abs(fit.ell[0, 0] - ell) < 1e-10
    assert abs(fit.gamma[0, 0] - sign * gamma) < 1e-10 * max(1.0, gamma)


@pytest.mark.parametrize("method", METHODS)
def test_sensitivity_positive_finite(method):
    rng = np.random.default_rng(300)
    ell, gamma = random_poles(rng, 10, 2)
    t = np.arange(1, 5)
    fit = fit_known_degree(t, samples(ell, gamma, t), 2, method=method)
    assert fit.sens.shape == (10, 2, 2)
    assert np.all(np.isfinite(fit.sens)) and np.all(fit.sens > 0)
    # the sensitivity is a bound per unit sample error: perturb and compare (first order)
    delta = 1e-10
    G2 = samples(ell, gamma, t) + delta * rng.choice([-1, 1], size=(10, 4))
    fit2 = fit_known_degree(t, G2, 2, method=method)
    assert np.all(np.abs(fit2.ell - fit.ell) <= 1.5 * delta * fit.sens[:, 0] + 1e-12)


def test_exact_mode_sensitivity_is_float():
    with mpmath.workdps(40):
        em, gm = [mpmath.mpf("-0.5"), mpmath.mpf("0.8")], [mpmath.mpf(1), mpmath.mpf(-2)]
        fit = fit_known_degree([1, 2, 3, 4], samples_mp(em, gm, [1, 2, 3, 4]), 2)
    assert fit.sens.dtype == float and np.all(np.isfinite(fit.sens)) and np.all(fit.sens > 0)


def test_zero_degree():
    G = np.zeros((2, 4))
    fit = fit_known_degree([1, 2, 3, 4], G, 0)
    assert fit.n == 0 and np.all(fit.residual == 0)


# --- errors of fit_known_degree ------------------------------------------------------------


@pytest.mark.parametrize("method", METHODS)
def test_positive_pole_raises(method):
    t = np.array([1.0, 2.0])
    G = 1.0 / (1.0 - 0.3 * t)  # rho = -0.3: a positive pole at t = 1/0.3
    with pytest.raises(PoleError, match=r"configuration 0: interpolated poles .* not all real and negative"):
        fit_known_degree(t, G[None], 1, method=method)


@pytest.mark.parametrize("method", METHODS)
def test_complex_poles_raise(method):
    z = 0.5 + 0.8j
    t = np.arange(1, 5)
    G = (2.0 / (1.0 + z * t)).real  # a conjugate pair of poles
    with pytest.raises(PoleError, match=r"cfg-A: interpolated poles .* not all real"):
        fit_known_degree(t, G[None], 2, method=method, labels=["cfg-A"])


def test_positive_pole_raises_exact():
    with mpmath.workdps(40):
        G = np.array([[1 / (1 - mpmath.mpf("0.3") * t) for t in (1, 2)]], dtype=object)
        with pytest.raises(PoleError, match=r"configuration 0: interpolated pole -1/rho .* not real and negative"):
            fit_known_degree([1, 2], G, 1)


def test_wrong_shape_and_too_few_samples():
    with pytest.raises(ValueError, match=r"G must have shape \(C, 4\), got \(4,\)"):
        fit_known_degree([1, 2, 3, 4], np.ones(4), 2)
    with pytest.raises(ValueError, match=r"G must have shape \(C, 4\), got \(1, 3\)"):
        fit_known_degree([1, 2, 3, 4], np.ones((1, 3)), 2)
    with pytest.raises(ValueError, match=r"3 samples cannot fix 4 unknowns \(n = 2 poles\)"):
        fit_known_degree([1, 2, 3], np.ones((1, 3)), 2)


def test_unknown_method():
    with pytest.raises(ValueError, match=r'method must be "linearised" or "loewner", got \'aaa\''):
        fit_known_degree([1, 2], np.ones((1, 2)), 1, method="aaa")


# --- unknown degree ------------------------------------------------------------------------


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("Hp", [0, 1, 2])
def test_min_degree_float64(method, Hp):
    rng = np.random.default_rng(400 + Hp)
    ell, gamma = random_poles(rng, 5, Hp)
    t = np.arange(1, 9)  # bound H0 = 4
    k, fit = fit_min_degree(t, samples(ell, gamma, t), 4, tol=1e-10, method=method)
    assert k == Hp
    assert np.max(np.abs(fit.ell - ell), initial=0.0) < 1e-8


@pytest.mark.parametrize("Hp", [1, 2, 3])
def test_min_degree_exact(Hp):
    rng = np.random.default_rng(500 + Hp)
    ell, gamma = random_poles(rng, 1, Hp)
    t = list(range(1, 11))  # bound H0 = 5
    with mpmath.workdps(60):
        em, gm = [mpmath.mpf(e) for e in ell[0]], [mpmath.mpf(g) for g in gamma[0]]
        k, fit = fit_min_degree(t, samples_mp(em, gm, t), 5, tol=1e-45)
        assert k == Hp
        assert max(abs(a - b) for a, b in zip(fit.ell[0], em)) < 1e-40


@pytest.mark.parametrize("method", METHODS)
def test_min_degree_configurations_disagree(method):
    t = np.arange(1, 7)
    G = np.vstack([samples([0.3], [1.0], t), samples([-0.5, 0.7], [1.0, -0.8], t)])
    with pytest.raises(InconsistentHeadCountError,
                       match=r"cfg-1 needs more than the 1 canonical heads found in the first configuration"):
        fit_min_degree(t, G, 3, tol=1e-10, method=method, labels=["cfg-0", "cfg-1"])


def test_fit_checked_per_configuration_tol():
    t = np.arange(1, 7)
    G = np.vstack([samples([0.3], [1.0], t), samples([0.1], [1.0], t) + 1e-6 * np.array([1, -1, 1, -1, 1, -1])])
    fit_checked(t, G, 1, tol=[1e-10, 1e-5])  # passes with the looser tol for configuration 1
    with pytest.raises(InconsistentHeadCountError, match=r"configuration 1 needs more than the 1 canonical heads"):
        fit_checked(t, G, 1, tol=1e-10)


def test_min_degree_later_configuration_has_fewer_heads_exact():
    t = list(range(1, 7))
    with mpmath.workdps(60):
        G = np.vstack([samples_mp([mpmath.mpf("-0.5"), mpmath.mpf("0.7")], [1, mpmath.mpf("-0.8")], t),
                       samples_mp([mpmath.mpf("0.3")], [1], t)])
        with pytest.raises(InconsistentHeadCountError):
            fit_min_degree(t, G, 3, tol=1e-40)


# --- the Loewner matrix --------------------------------------------------------------------


@pytest.mark.parametrize("Hp", [1, 2, 3])
def test_loewner_rank_exact(Hp):
    rng = np.random.default_rng(600 + Hp)
    ell, gamma = random_poles(rng, 1, Hp)
    t = list(range(1, 9))  # H0 = 4: a 4 x 4 Loewner matrix
    with mpmath.workdps(60):
        G = samples_mp([mpmath.mpf(e) for e in ell[0]], [mpmath.mpf(g) for g in gamma[0]], t)[0]
        L = loewner_matrix(t, G)
        assert L.shape == (4, 4) and L.dtype == object
        s = mpmath.svd_r(mpmath.matrix(L.tolist()), compute_uv=False)
        s = sorted((abs(x) for x in s), reverse=True)
        rank = sum(1 for x in s if x > mpmath.mpf(10) ** -45 * s[0])
        assert rank == Hp
        assert s[Hp - 1] > mpmath.mpf(10) ** -20 * s[0]


def test_loewner_matrix_entries_float():
    t = np.arange(1, 6)
    G = samples([0.2], [1.5], t)[0]
    L = loewner_matrix(t, G)
    assert L.shape == (3, 2) and L.dtype == float  # mu = 1, 3, 5; lambda = 2, 4
    assert L[1, 0] == pytest.approx((G[2] - G[1]) / (3 - 2), rel=1e-15)
    assert np.linalg.matrix_rank(L, tol=1e-12 * np.abs(L).max()) == 1


# --- jacobian ------------------------------------------------------------------------------


@given(seed=st.integers(0, 2**16), H=st.integers(1, 4))
def test_jacobian_matches_finite_differences(seed, H):
    rng = np.random.default_rng(seed)
    ell, gamma = rng.uniform(-2, 2, size=(2, H)), rng.normal(size=(2, H))
    t = np.arange(1, 2 * H + 1)
    J = jacobian(t, ell, gamma)
    assert J.shape == (2, 2 * H, 2 * H)
    h = 1e-6
    for k in range(2 * H):
        e, g = ell.copy(), gamma.copy()
        e2, g2 = ell.copy(), gamma.copy()
        if k < H:
            e[:, k] += h
            e2[:, k] -= h
        else:
            g[:, k - H] += h
            g2[:, k - H] -= h
        fd = (samples(e, g, t) - samples(e2, g2, t)) / (2 * h)
        np.testing.assert_allclose(J[:, :, k], fd, atol=1e-8)


@pytest.mark.parametrize("n", range(1, 9))
def test_ratio_nodes_design(n):
    from fractions import Fraction

    pairs = ratio_nodes(n)
    taus = [Fraction(t, s) for s, t in pairs]
    assert len(set(taus)) == 2 * n  # 2n distinct nodes
    assert max(s + t for s, t in pairs) == 2 * n + 1  # the paper's longest query, exactly
    assert all(s >= 1 and t >= 1 for s, t in pairs)
    assert sorted(taus) == sorted(1 / x for x in taus)  # symmetric in log(t/s) around 1


def test_ratio_family_is_the_rational_function_of_t_over_s():
    # s copies of x, then t copies of q: F = V^T q + sum_h gamma_h / (1 + rho_h t / s)
    rng = np.random.default_rng(3)
    d, H = 3, 2
    model = MultiHeadAttention(rng.normal(size=(H, d, d)) / np.sqrt(d), rng.normal(size=(H, d)))
    x, q = rng.normal(size=(1, d)), rng.normal(size=(1, d))
    u = q[0] - x[0]
    rho = np.exp([u @ model.W[h] @ q[0] for h in range(H)])
    gam = np.array([-u @ model.v[h] for h in range(H)])
    c = model.v.sum(axis=0) @ q[0]
    for s, t in [(1, 1), (3, 2), (5, 1), (2, 7)]:
        Xs = copies_sequences(x, q, t, s=s)
        assert Xs.shape == (1, s + t, d)
        np.testing.assert_allclose(model.batch(Xs)[0], c + np.sum(gam / (1 + rho * t / s)), rtol=1e-13)


def test_ratio_nodes_condition_better_than_copies():
    # chapter 3's finding in one line: at n = 4 the ratio nodes' sensitivities are far smaller
    rng = np.random.default_rng(5)
    C, n = 200, 4
    ell, gam = rng.normal(size=(C, n)), rng.normal(size=(C, n))
    med = {}
    for name, taus in (("copies", list(range(1, 2 * n + 1))), ("ratios", [t / s for s, t in ratio_nodes(n)])):
        J = jacobian(taus, ell, gam)
        med[name] = np.median(np.abs(np.linalg.pinv(J)).sum(axis=2).max(axis=1))
    assert med["ratios"] * 100 < med["copies"]


# --- closed-form inverse of the square Jacobian ---------------------------------------------


def _mp_jacobian_inverse(t, ell, gamma, dps=50):
    """Reference: mpmath inverse of the *exact* Jacobian at (ell, gamma) (not of its rounding)."""
    from fractions import Fraction

    n = len(ell)
    with mpmath.workdps(dps):
        J = mpmath.matrix(len(t), 2 * n)
        for i, ti in enumerate(t):
            ti = Fraction(ti)
            ti = mpmath.mpf(ti.numerator) / ti.denominator
            for h in range(n):
                rho, g = mpmath.exp(mpmath.mpf(ell[h])), mpmath.mpf(gamma[h])
                J[i, h] = -g * rho * ti / (1 + rho * ti) ** 2
                J[i, n + h] = 1 / (1 + rho * ti)
        return np.array((J**-1).tolist(), dtype=float)


@pytest.mark.parametrize("n", [1, 2, 3, 4])
@pytest.mark.parametrize("nodes", ["copies", "ratios"])
def test_jacobian_inverse_square_matches_mpmath(n, nodes):
    from fractions import Fraction

    from attnlearn.rational.family import _jacobian_inverse_square

    rng = np.random.default_rng(10 * n)
    t = list(range(1, 2 * n + 1)) if nodes == "copies" else [Fraction(b, a) for a, b in ratio_nodes(n)]
    ell = np.sort(rng.uniform(-2, 2, size=(20, n)), axis=1)
    gamma = rng.normal(size=(20, n))
    Jinv = _jacobian_inverse_square(t, ell, gamma)
    assert Jinv.shape == (20, 2 * n, 2 * n)
    for c in range(20):
        ref = _mp_jacobian_inverse(t, ell[c], gamma[c])
        # entrywise, relative to the largest entry: a few hundred ulps even where LU of the rounded
        # Jacobian loses cond(J) eps
        assert np.abs(Jinv[c] - ref).max() <= 1e-12 * np.abs(ref).max()


def test_jacobian_inverse_square_near_double_pole():
    # poles 1e-4 apart: cond(J) ~ 1e16, LU of the rounded J has no correct digit; the closed
    # form is still accurate to ~1e-10 of the largest entry
    from attnlearn.rational.family import _jacobian_inverse_square

    t = [1, 2, 3, 4]
    ell, gamma = np.array([[0.3, 0.3001]]), np.array([[1.0, -0.7]])
    ref = _mp_jacobian_inverse(t, ell[0], gamma[0], dps=80)
    got = _jacobian_inverse_square(t, ell, gamma)[0]
    assert np.abs(got - ref).max() <= 1e-8 * np.abs(ref).max()


@given(seed=st.integers(0, 2**16), n=st.integers(1, 3))
def test_jacobian_inverse_square_is_the_inverse(seed, n):
    from attnlearn.rational.family import _jacobian_inverse_square

    rng = np.random.default_rng(seed)
    ell = np.sort(rng.uniform(-1.5, 1.5, size=(1, n)), axis=1)
    if n > 1 and np.min(np.diff(ell[0])) < 0.2:  # well separated: J itself well enough conditioned
        ell[0] = ell[0, 0] + 0.3 * np.arange(n)
    gamma = rng.normal(size=(1, n))
    gamma = np.where(np.abs(gamma) < 0.2, 0.5, gamma)
    t = np.arange(1, 2 * n + 1)
    J = jacobian(t, ell, gamma)[0]
    Jinv = _jacobian_inverse_square(t, ell, gamma)[0]
    # J @ J^-1 = I to about eps * cond(J): seed 493, n = 3 (spacing 0.3) has cond(J) = 4.9e10 and
    # np.linalg.inv itself misses I by 1.3e-6 there
    np.testing.assert_allclose(Jinv @ J, np.eye(2 * n), atol=max(1e-6, 1e-14 * np.linalg.cond(J)))


def test_gauss_newton_mp_converges_quadratically_onto_exact_samples():
    """Samples of F(t) = sum gamma_h / (1 + e^ell_h t) at 2H nodes: a perturbed fit returns to the
    true one, the miss shrinking quadratically; no head leaves nothing to move."""
    import mpmath

    from attnlearn.rational import gauss_newton_mp

    with mpmath.workdps(50):
        ell, gam = [mpmath.mpf("-0.3"), mpmath.mpf("0.8")], [mpmath.mpf("1.5"), mpmath.mpf("-0.7")]
        tt = [mpmath.mpf(t) for t in range(1, 5)]
        G = [sum(g / (1 + mpmath.exp(e) * t) for e, g in zip(ell, gam)) for t in tt]
        start = [e + mpmath.mpf("1e-3") for e in ell], [g - mpmath.mpf("1e-3") for g in gam]
        misses = []
        for steps in (1, 2, 3):
            e, g, r = gauss_newton_mp(tt, G, *start, steps=steps)
            misses.append(max(abs(x) for x in r))
        assert misses[1] < misses[0] ** 1.5 and misses[2] < misses[1] ** 1.5  # 4e-7, 3e-11, 2e-21
        assert max(abs(a - b) for a, b in zip(e + g, ell + gam)) < mpmath.mpf(10) ** -18
        e0, g0, r0 = gauss_newton_mp(tt, G, [], [], steps=3)
        assert (e0, g0) == ([], []) and max(abs(x - y) for x, y in zip(r0, G)) == 0


def test_gauss_newton_mp_stops_at_a_singular_jacobian():
    """Two equal poles make the Jacobian singular (mpmath's QR raises "numerically singular"): the
    steps stop and the fit comes back as it was, with its misses, instead of mpmath's ValueError
    escaping from the learner's verification stage."""
    import mpmath

    from attnlearn.rational import gauss_newton_mp

    with mpmath.workdps(30):
        tt = [mpmath.mpf(t) for t in range(1, 5)]
        G = [1 / (1 + t) for t in tt]
        for gap in ("0", "1e-25"):
            ell, gam = [mpmath.mpf(0), mpmath.mpf(gap)], [mpmath.mpf("0.5"), mpmath.mpf("0.5")]
            e, g, r = gauss_newton_mp(tt, G, ell, gam, steps=3)
            assert (e, g) == (ell, gam) and max(abs(x) for x in r) < mpmath.mpf(10) ** -20
