"""Rational interpolation in mpmath: one configuration at a time, polished by Gauss-Newton.

Used in: chapters 3-4 (exact mode of :func:`attnlearn.rational.fit_known_degree`, the verification
of :func:`attnlearn.learn`).
"""

from fractions import Fraction

import mpmath
import numpy as np

from ..errors import PoleError
from .family import RationalFit

__all__ = [
    "gauss_newton_mp",
]


def _mpnode(t):
    """A node as an mpf: exact for ints and fractions (the ratio nodes of robust mode)."""
    if isinstance(t, Fraction):
        return mpmath.mpf(t.numerator) / t.denominator
    return mpmath.mpf(t)


def _mp_jacobian(tt, rho, gamma):
    """:func:`jacobian` of one configuration in mpmath: nodes ``tt`` and ``rho`` as mpf."""
    n = len(rho)
    return mpmath.matrix([[-gamma[h] * rho[h] * ti / (1 + rho[h] * ti) ** 2 for h in range(n)]
                          + [1 / (1 + rho[h] * ti) for h in range(n)] for ti in tt])


def _mp_miss(tt, G, ell, gamma):
    """The misses :math:`G_i-\\sum_h\\gamma_h/(1+e^{\\ell_h}t_i)` of one configuration (mpmath)."""
    rho = [mpmath.exp(e) for e in ell]
    return mpmath.matrix([G[i] - mpmath.fsum(gamma[h] / (1 + rho[h] * tt[i]) for h in range(len(ell)))
                          for i in range(len(tt))])


def gauss_newton_mp(tt, G, ell, gamma, *, steps):
    r"""``steps`` Gauss-Newton steps of one configuration's fit :math:`(\ell,\gamma)` onto its
    samples ``G`` (constant removed) at the nodes ``tt`` (mpf), at the current mpmath precision.

    Each step is :math:`\delta=J^+r` (the Jacobian of :func:`jacobian` in mpmath, a least-squares
    solve by QR): quadratic convergence to the fit its samples determine when they have one
    (as many samples as unknowns, or samples without noise), linear towards the least-squares
    fit otherwise; a singular Jacobian (two equal
    poles) stops the steps early. Returns ``(ell, gamma, r)`` with ``r`` the misses after the
    last step (an ``mpmath.matrix``).

    Used in: chapter 3 (an overdetermined exact fit, through :func:`fit_known_degree`) and
    chapter 5 (the verification stage, :func:`attnlearn.learner.verify.polish_onto_samples`).
    """
    H = len(ell)
    r = _mp_miss(tt, G, ell, gamma)
    for _ in range(steps if H else 0):  # no head: nothing to move
        try:
            step, _ = mpmath.qr_solve(_mp_jacobian(tt, [mpmath.exp(e) for e in ell], gamma), r)
        except (ZeroDivisionError, ValueError) as exc:  # a singular Jacobian (two equal poles): keep the fit
            if isinstance(exc, ValueError) and "singular" not in str(exc):  # mpmath says "numerically singular"
                raise
            break
        ell = [ell[h] + step[h] for h in range(H)]
        gamma = [gamma[h] + step[H + h] for h in range(H)]
        r = _mp_miss(tt, G, ell, gamma)
    return ell, gamma, r


def _fit_mp_one(t, G, n, label):
    """Exact-mode fit of one configuration at the current mpmath precision."""
    m = len(t)
    if n == 0:
        return [], [], max((abs(g) for g in G), default=mpmath.mpf(0))
    rows = []
    for ti, gi in zip(t, G):
        rows.append([_mpnode(ti) ** k for k in range(n)] + [-gi * _mpnode(ti) ** k for k in range(1, n + 1)])
    A = mpmath.matrix(rows)
    b = mpmath.matrix(list(G))
    if m == 2 * n:
        sol = mpmath.lu_solve(A, b)
    else:
        sol, _ = mpmath.qr_solve(A, b)
    qc = [sol[n + k] for k in range(n)]
    # roots of s^n + q1 s^(n-1) + ... + qn are -rho_h
    if n == 1:
        roots = [-qc[0]]
    else:
        roots = mpmath.polyroots([mpmath.mpf(1)] + qc, maxsteps=400, extraprec=4 * mpmath.mp.prec)
    rho = [-r for r in roots]
    tol = mpmath.mpf(10) ** (-mpmath.mp.dps // 2)
    for r in rho:
        im = mpmath.im(r) if isinstance(r, mpmath.mpc) else 0
        re = mpmath.re(r)
        if abs(im) > tol * abs(r) or re <= 0:
            raise PoleError(
                f"{label}: interpolated pole -1/rho with rho = {mpmath.nstr(r, 8)} is not real and "
                "negative (rho must be real and > 0)"
            )
    rho = sorted(mpmath.re(r) for r in rho)
    B = mpmath.matrix([[1 / (1 + r * _mpnode(ti)) for r in rho] for ti in t])
    gamma, _ = mpmath.qr_solve(B, b)
    gamma = [gamma[h] for h in range(n)]
    if m > 2 * n:
        # overdetermined: the linearised solution weights sample i by Q(t_i), which grows
        # like t_i^n; Gauss-Newton steps move it to the least-squares fit in (ell, gamma),
        # whose first-order sensitivity is the J^+ reported below (used by the learner)
        ell, gamma, _ = gauss_newton_mp([_mpnode(ti) for ti in t], G, [mpmath.log(r) for r in rho], gamma, steps=3)
        order = sorted(range(n), key=lambda h: ell[h])
        rho = [mpmath.exp(ell[h]) for h in order]
        gamma = [gamma[h] for h in order]
    resid = max(abs(G[i] - mpmath.fsum(gamma[h] / (1 + rho[h] * t[i]) for h in range(n))) for i in range(m))
    return [mpmath.log(r) for r in rho], gamma, resid


def _fit_mp(t, G, n, labels=None):
    C = G.shape[0]
    ell = np.empty((C, n), dtype=object)
    gamma = np.empty((C, n), dtype=object)
    residual = np.empty(C, dtype=object)
    for c in range(C):
        label = labels[c] if labels is not None else f"configuration {c}"
        e, g, r = _fit_mp_one(list(t), list(G[c]), n, label)
        ell[c, :], gamma[c, :], residual[c] = e, g, r
    # sensitivities (rows of |J^+|), computed in mpmath: J can be singular to float64 at large n
    sens = np.zeros((C, 2, n))
    shift = np.zeros((C, 2, n))
    for c in range(C):
        if n == 0:
            break
        J = _mp_jacobian([_mpnode(ti) for ti in t], [mpmath.exp(e) for e in ell[c]], gamma[c])
        Jp = J**-1 if len(t) == 2 * n else (J.T * J) ** -1 * J.T
        absrow = [float(mpmath.fsum(abs(Jp[i, j]) for j in range(len(t)))) for i in range(2 * n)]
        sh = [-float(mpmath.fsum(Jp[i, j] for j in range(len(t)))) for i in range(2 * n)]
        sens[c, 0], sens[c, 1] = absrow[:n], absrow[n:]
        shift[c, 0], shift[c, 1] = sh[:n], sh[n:]
    return RationalFit(ell, gamma, sens, residual, shift)
