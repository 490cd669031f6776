r"""The long design's fits: one configuration's step curve (:func:`fit_config`) and a group's joint
fit with shared heights (:func:`fit_group`, block Levenberg–Marquardt).

Used in: chapter 5b (long queries) and chapter 7.
"""

import itertools
import warnings
from dataclasses import dataclass

import numpy as np
from scipy.interpolate import AAA
from scipy.optimize import least_squares, linear_sum_assignment
from scipy.special import expit

from .curve import step_jacobian, step_residuals

__all__ = ["PRIOR", "fit_config", "GroupFit", "fit_group"]


#: Standard deviation of the weak prior on every step position (nats): the window's width at
#: L = 4096. It only holds a step beyond the window (whose position the data do not fix).
PRIOR = 16.0


# ---------------------------------------------------------------- fitting one configuration
def _aaa_start(z, G, H):
    """Starting steps from AAA in :math:`w=e^z`: :math:`\\sum_h\\gamma_hp_h/(p_h+w)` has poles
    :math:`-p_h=-e^{c_h}`; poles off the negative axis are moved onto it."""
    w = np.exp(z)
    try:
        with warnings.catch_warnings():  # AAA stops at max_terms by design: no convergence to report
            warnings.filterwarnings("ignore", ".*AAA failed to converge", RuntimeWarning)
            # spurious pole-zero pairs of noisy data: the H poles kept are chosen below
            warnings.filterwarnings("ignore", ".*Froissart doublets detected", RuntimeWarning)
            poles = AAA(w, G, max_terms=H + 1, rtol=0.0).poles()
    except (ValueError, np.linalg.LinAlgError, ZeroDivisionError):  # degenerate data
        poles = np.array([])
    # the H poles nearest the negative real axis (relative angle), then c = log|pole|
    poles = poles[np.isfinite(poles) & (np.abs(poles) > 0)]
    score = np.abs(poles.imag) / np.abs(poles) + (poles.real > 0)
    p = np.abs(poles[np.argsort(score)[:H]])
    c = np.sort(np.log(np.clip(p, np.exp(z[0] - 3), np.exp(z[-1] + 3))))
    if len(c) < H:  # spread the missing ones over the window
        c = np.sort(np.concatenate([c, np.linspace(z[0] / 2, z[-1] / 2, H - len(c))]))
    return c


def _linear_g(z, G, sd, c):
    """Heights (and the constant) by weighted linear least squares, positions fixed."""
    A = np.column_stack([np.ones_like(z), expit(c[None, :] - z[:, None])]) / sd[:, None]
    sol = np.linalg.lstsq(A, G / sd, rcond=None)[0]
    return sol[0], sol[1:]


#: Random starts :func:`fit_config` tries after AAA's when the first fit is a local minimum.
RANDOM_STARTS = 4


def fit_config(z, F, sd, H, *, ends, c0=None, chi2_ok=None, rng=None):
    r"""Fit one configuration, :math:`F\approx C+\sum_h\gamma_h\sigma(c_h-z)`, weighted by ``sd``,
    with the two ends as pseudo-observations (``ends``, ``(Vq, Vq_sd, Vx, Vx_sd)``:
    :math:`C=V^\top q`, :math:`C+\sum\gamma=V^\top x` and their standard deviations) and a weak
    prior :math:`c_h\sim\mathcal N(0,\mathrm{PRIOR}^2)` (a step beyond the window is
    then held instead of running off; in the window the data outweigh it by many decades).

    Starts from AAA (or ``c0``), then Levenberg–Marquardt (:func:`scipy.optimize.least_squares`,
    ``method="lm"``). When the :math:`\chi^2` exceeds ``chi2_ok`` (a local minimum), more starts
    are tried: the :math:`H`-subsets of AAA's :math:`H+1` poles, and :data:`RANDOM_STARTS` random sorted
    positions in the middle of the window (from ``rng``); the best fit is kept. Returns
    ``(C, c, g, chi2)`` with heads sorted by ``c``.

    Used in: chapter 5b.
    """
    Vq, Vq_sd, Vx, Vx_sd = ends

    def res(p):
        return step_residuals(z, F, sd, p[0], p[1:H + 1], p[H + 1:], (Vq, Vq_sd, Vx, Vx_sd), prior=PRIOR)

    def jac(p):
        return step_jacobian(z, sd, p[1:H + 1], p[H + 1:], ends_sd=(Vq_sd, Vx_sd), prior=PRIOR)

    def run(c):
        C, g = _linear_g(z, F, sd, c)
        sol = least_squares(res, np.concatenate([[C], c, g]), jac=jac, method="lm", xtol=1e-15, ftol=1e-15,
                            gtol=1e-15, max_nfev=200 * (2 * H + 1))
        return sol.x, float(2 * sol.cost)

    starts = [_aaa_start(z, F - Vq, H) if c0 is None else np.asarray(c0, dtype=float)]
    best = run(starts[0])
    if chi2_ok is not None and best[1] > chi2_ok:
        more = [np.sort(c) for c in itertools.combinations(_aaa_start(z, F - Vq, H + 1), H)]
        half = z[-1] * 0.75
        more += [np.sort(rng.uniform(-half, half, H)) for _ in range(RANDOM_STARTS)] if rng is not None else []
        for c in more:
            trial = run(c)
            if np.isfinite(trial[1]) and trial[1] < best[1]:
                best = trial
            if best[1] <= chi2_ok:
                break
    x = best[0]
    C, c, g = x[0], x[1:H + 1], x[H + 1:]
    order = np.argsort(c)
    return C, c[order], g[order], best[1]


# ---------------------------------------------------------------- fitting a group jointly
@dataclass
class GroupFit:
    r"""A group's joint fit: shared heights ``g`` (H,), per configuration the constant ``C`` (m,)
    and positions ``c`` (m, H); their standard deviations from the inverse Fisher matrix (scaled
    by :math:`\max(1,\chi^2/\mathrm{dof})`), every configuration's :math:`\chi^2` and the
    group's reduced :math:`\chi^2`."""

    g: np.ndarray
    C: np.ndarray
    c: np.ndarray
    g_sd: np.ndarray
    c_sd: np.ndarray
    chi2: np.ndarray
    reduced: float


def _group_blocks(z, F, sd, ends, g, C, c, prior=None):
    """Residuals and Jacobian blocks of every configuration: ``r`` (m, R+2+H), ``Jg`` (m, R+2+H, H),
    ``Jt`` (m, R+2+H, H+1) (columns C, c_1..c_H); rows: the ratios, the two ends, the prior."""
    prior = PRIOR if prior is None else prior
    H = c.shape[1]
    r = step_residuals(z, F, sd, C, c, g, ends, prior=prior)
    J = step_jacobian(z, sd, c, g, ends_sd=(ends[1], ends[3]), prior=prior)
    return r, np.ascontiguousarray(J[..., H + 1:]), np.ascontiguousarray(J[..., :H + 1])


def _schur_step(r, Jg, Jt, lam):
    """One damped Gauss–Newton step of the block system (shared g, per-configuration θ_j),
    solved through the Schur complement on g; returns (dg, dθ, S, Dinv, B)."""
    A = np.einsum("mrh,mrk->hk", Jg, Jg)
    B = np.einsum("mrh,mrk->mhk", Jg, Jt)  # (m, H, H+1)
    D = np.einsum("mrh,mrk->mhk", Jt, Jt)  # (m, H+1, H+1)
    ag = np.einsum("mrh,mr->h", Jg, r)
    at = np.einsum("mrh,mr->mh", Jt, r)
    Dd = D + lam * np.einsum("mii->mi", D)[:, :, None] * np.eye(D.shape[1])[None]
    Ad = A + lam * np.diag(np.diag(A))
    Dinv = np.linalg.inv(Dd)
    BDinv = np.einsum("mhk,mkl->mhl", B, Dinv)
    S = Ad - np.einsum("mhl,mkl->hk", BDinv, B)
    rhs = ag - np.einsum("mhl,ml->h", BDinv, at)
    dg = -np.linalg.solve(S, rhs)
    dt = -np.einsum("mkl,ml->mk", Dinv, at + np.einsum("mhk,h->mk", B, dg))
    return dg, dt, S, Dinv, B


def fit_group(z, F, sd, ends, g0, C0, c0, *, iterations=100):
    r"""Joint weighted fit of a group's configurations with shared heights :math:`\gamma` (a
    Levenberg–Marquardt iteration on the block system, solved through its Schur complement).

    Parameters
    ----------
    z : array (R,)
    F, sd : arrays (m, R)
        Answers and their standard deviations.
    ends : tuple of arrays (m,)
        :math:`V^\top q`, its sd, :math:`V^\top x`, its sd.
    g0, C0, c0 : arrays (H,), (m,), (m, H)
        Start.

    Returns
    -------
    GroupFit
    """
    g, C, c = np.array(g0, float), np.array(C0, float), np.array(c0, float)
    m, H = c.shape
    r, Jg, Jt = _group_blocks(z, F, sd, ends, g, C, c)
    cost, lam = float(np.sum(r**2)), 1e-3
    for _ in range(iterations):
        dg, dt, *_ = _schur_step(r, Jg, Jt, lam)
        g1, C1, c1 = g + dg, C + dt[:, 0], c + dt[:, 1:]
        r1, Jg1, Jt1 = _group_blocks(z, F, sd, ends, g1, C1, c1)
        cost1 = float(np.sum(r1**2))
        if np.isfinite(cost1) and cost1 <= cost:
            small = cost - cost1 <= 1e-10 * cost + 1e-12
            g, C, c, r, Jg, Jt, cost = g1, C1, c1, r1, Jg1, Jt1, cost1
            lam = max(lam / 5, 1e-12)
            if small:
                break
        else:
            lam *= 10
            if lam > 1e10:
                break
    chi2 = np.sum(r[:, :len(z) + 2] ** 2, axis=1)
    dof = max(1, m * (len(z) + 2) - (H + m * (H + 1)))
    reduced = float(np.sum(chi2)) / dof
    _, _, S, Dinv, B = _schur_step(r, Jg, Jt, 0.0)
    Sinv = np.linalg.inv(S)
    BD = np.einsum("mhk,mkl->mhl", B, Dinv)
    cov_t = Dinv + np.einsum("mhk,hj,mjl->mkl", BD, Sinv, BD)
    scale = max(1.0, reduced)
    g_var, c_var = np.diag(Sinv) * scale, np.einsum("mii->mi", cov_t)[:, 1:] * scale
    if not (np.all(np.isfinite(g_var)) and np.all(np.isfinite(c_var)) and g_var.min() > 0 and c_var.min() > 0):
        raise np.linalg.LinAlgError("the information matrix is singular to working precision")
    g_sd, c_sd = np.sqrt(g_var), np.sqrt(c_var)
    return GroupFit(g=g, C=C, c=c, g_sd=g_sd, c_sd=c_sd, chi2=chi2, reduced=reduced)


def _label_to_reference(g_list, ok):
    """Sorted-median reference of the heights over the well-fitted configurations, and every
    configuration's assignment of its heads to it (Hungarian on |γ - γ_ref|)."""
    G = np.array(g_list)
    use = G[ok] if ok.sum() else G
    ref = np.median(np.sort(use, axis=1), axis=0)
    perms = []
    for gj in G:
        rows, cols = linear_sum_assignment(np.abs(gj[:, None] - ref[None, :]))
        p = np.empty(len(ref), int)
        p[cols] = rows  # head cols of the reference is the config's head rows
        perms.append(p)
    return ref, perms


def _joint_positions(z, Fs, sds, ends, g, Cs, cs):
    r"""Two configurations fitted together with shared, free heights (weighted LM from ``g``,
    ``Cs``, ``cs``; the ends as pseudo-observations, as in :func:`fit_config`, without its prior on
    the positions). Returns both configurations' positions and :math:`\chi^2`."""
    H = len(g)

    def res(p):
        out = []
        for j in range(2):
            C, c = p[H + j * (H + 1)], p[H + j * (H + 1) + 1:H + (j + 1) * (H + 1)]
            out.append(step_residuals(z, Fs[j], sds[j], C, c, p[:H], ends[j]))
        return np.concatenate(out)

    p0 = np.concatenate([g, [Cs[0]], cs[0], [Cs[1]], cs[1]])
    sol = least_squares(res, p0, method="lm", x_scale="jac", max_nfev=200 * len(p0))
    r = sol.fun.reshape(2, -1)
    c = [sol.x[H + j * (H + 1) + 1:H + (j + 1) * (H + 1)] for j in range(2)]
    return c, [float(np.sum(rj ** 2)) for rj in r]


def _positions_only(z, F, sd, g, c0, ends, j):
    """One configuration's positions and constant with the heights fixed (weighted LM)."""
    Vq, Vq_sd, Vx, Vx_sd = (e[j] for e in ends)
    H = len(g)

    def res(p):
        return step_residuals(z, F, sd, p[0], p[1:], g, (Vq, Vq_sd, Vx, Vx_sd), prior=PRIOR)

    def jac(p):  # the heights fixed: their columns dropped
        return step_jacobian(z, sd, p[1:], g, ends_sd=(Vq_sd, Vx_sd), prior=PRIOR)[:, :H + 1]

    sol = least_squares(res, np.concatenate([[Vq], c0]), jac=jac, method="lm", max_nfev=100 * (H + 1))
    return sol.x[1:], sol.x[0], float(np.sum(sol.fun[:len(z) + 2] ** 2))
