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

__all__ = ["PRIOR", "fit_config", "resolution", "fit_stretches", "closest_gap", "GroupFit", "fit_group"]


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

#: Levenberg–Marquardt evaluations per parameter of :func:`fit_config`'s starts: each start
#: first gets 10 (a start near the optimum converges within them: the median run takes 20
#: evaluations at :math:`H=4`, 9 parameters), the best of them is then carried on for up to 200.
#: A start in a wrong basin creeps: at :math:`H=8`, :math:`d=16` (float64) a quarter of the starts
#: ran all 3400 evaluations from a :math:`\chi^2` of 1e21-1e25, 97 % of the learner's time.
SCOUT_EVALUATIONS = 10
EVALUATIONS = 200

#: Starts :func:`_positions_only` scouts: of a repair's up to 728 orders and random positions
#: (an origin's up to 1,449), the 24 whose :math:`\chi^2` as they stand is lowest (with the
#: heights known, the right order of a configuration's positions is the one nearest its answers).
SCOUT_STARTS = 24

#: :func:`fit_group`'s Levenberg–Marquardt damping, relative to each column's squared norm: its
#: first step is undamped (Gauss–Newton); a rejected step raises it to the first value or ten
#: times, an accepted one lowers it tenfold (to none below the first), and the fit gives up
#: above the second. Any fixed floor is too much: a group of :math:`H=8` heads had a weakest
#: direction of squared singular value 1e-15 (unit columns), and a floor of 1e-12 shrank the
#: step along it a thousandfold (:math:`\chi^2` 80 where 2.8 was one step away). Started at
#: 1e-3, on a group whose weakest direction was known to 1e-10 of the heights' size
#: (:math:`d=4`, :math:`H=2`, two close steps), the damped steps were shorter than the
#: rounding of :math:`\chi^2`, were rejected, and the fit froze 4.5 standard deviations short
#: (:math:`\chi^2` 21.9 where 1.9 was reachable), its error 1.4 times its estimate.
DAMPING = (1e-6, 1e10)

#: :func:`fit_group` has converged when the Gauss–Newton step would lower :math:`\chi^2` by
#: less than this (in units of the noise, scaled by the reduced :math:`\chi^2` when above 1):
#: the optimum is within a tenth of a standard deviation, far inside the estimate's three.
CONVERGED = 1e-2


def _scout(run, starts, limit, carry):
    """Each of ``starts`` (parameter vectors, taken lazily) run for :data:`SCOUT_EVALUATIONS` per
    parameter until one is within ``limit`` (None: the first only); the best carried on for
    ``carry`` per parameter. ``run(x0, evaluations)`` returns ``(x, chi2)``; so does this."""
    best = (None, np.inf)
    for x0 in starts:
        trial = run(x0, SCOUT_EVALUATIONS)
        if best[0] is None or (np.isfinite(trial[1]) and trial[1] < best[1]):
            best = trial
        if limit is None or best[1] <= limit:
            break
    return run(best[0], carry)  # the best start carried to convergence


def _under_heights(z, F, sd, ends, g, c0):
    """Positions ``c0`` moved to fit the answers with the heights ``g`` held (and the constant
    free): :data:`SCOUT_EVALUATIONS` per parameter of Levenberg–Marquardt, a start for
    :func:`fit_config`."""
    H = len(g)

    def res(p):
        return step_residuals(z, F, sd, p[0], p[1:], g, ends, prior=PRIOR)

    def jac(p):  # the heights held: their columns dropped
        return step_jacobian(z, sd, p[1:], g, ends_sd=(ends[1], ends[3]), prior=PRIOR)[:, :H + 1]

    with np.errstate(over="ignore"):  # a start far off may overflow its cost: judged by the free fit after
        sol = least_squares(res, np.concatenate([[ends[0]], c0]), jac=jac, method="lm",
                            xtol=1e-15, ftol=1e-15, gtol=1e-15, max_nfev=SCOUT_EVALUATIONS * (H + 1))
    return sol.x[1:]


def fit_config(z, F, sd, H, *, ends, c0=None, g0=None, chi2_ok=None, rng=None, labelled=False):
    r"""Fit one configuration, :math:`F\approx C+\sum_h\gamma_h\sigma(c_h-z)`, weighted by ``sd``,
    with the two ends as pseudo-observations (``ends``, ``(Vq, Vq_sd, Vx, Vx_sd)``:
    :math:`C=V^\top q`, :math:`C+\sum\gamma=V^\top x` and their standard deviations) and a weak
    prior :math:`c_h\sim\mathcal N(0,\mathrm{PRIOR}^2)` (a step beyond the window is
    then held instead of running off; in the window the data outweigh it by many decades).

    Starts from AAA (or ``c0``; with heights ``g0`` known, such as a group's anchor's, first
    from ``c0`` moved to fit the answers under those heights, :func:`_under_heights`, then from
    ``c0`` itself when ``chi2_ok`` is given), then Levenberg–Marquardt (:func:`scipy.optimize.least_squares`,
    ``method="lm"``). With ``labelled`` (``c0`` and ``g0`` given), that first start is the only
    one and the heads are returned in the order of ``c0``: the heights held on the way there
    keep every step with its head's height, so its label. When the :math:`\chi^2` exceeds ``chi2_ok`` (a local minimum), more starts
    are tried: the :math:`H`-subsets of AAA's :math:`H+1` poles, and :data:`RANDOM_STARTS` random sorted
    positions in the middle of the window (from ``rng``). Every start runs
    :data:`SCOUT_EVALUATIONS` per parameter, until one is within ``chi2_ok``; the best is then
    carried on to convergence (:data:`EVALUATIONS`). Returns ``(C, c, g, chi2)`` with heads sorted
    by ``c``.

    Notes
    -----
    A nudged configuration's steps lie about a tenth of a nat from its anchor's, yet from the
    anchor's positions (heights fitted linearly) the fit often falls into a close pair's
    *derivative* minimum: the two steps merged, their heights huge and opposite. The anchor's
    heights forbid it. Measured on a float64 layer (:math:`d=32`, :math:`H=8`, ``rank=4``, 128
    tokens), 352 nudged configurations: within ``chi2_ok`` after 170 evaluations, 13 of the first
    120 from the anchor's positions, 248 of 352 from them moved under the anchor's heights (median 15
    evaluations); the learner's CPU time fell from 90 s to 47 s (seed 0 of ``benchmarks/scale.py``).

    Used in: chapter 5b.
    """
    if labelled and (c0 is None or g0 is None):
        raise ValueError("fit_config: labelled=True needs the positions c0 and the heights g0 whose labels it keeps")
    Vq, Vq_sd, Vx, Vx_sd = ends

    def res(p):
        return step_residuals(z, F, sd, p[0], p[1:H + 1], p[H + 1:], (Vq, Vq_sd, Vx, Vx_sd), prior=PRIOR)

    def jac(p):
        return step_jacobian(z, sd, p[1:H + 1], p[H + 1:], ends_sd=(Vq_sd, Vx_sd), prior=PRIOR)

    def run(x0, evaluations):
        with np.errstate(over="ignore"):  # a start far off may overflow its cost: not reported, never kept
            sol = least_squares(res, x0, jac=jac, method="lm", xtol=1e-15, ftol=1e-15, gtol=1e-15,
                                max_nfev=evaluations * (2 * H + 1))
        return sol.x, float(2 * sol.cost)

    def start(c):
        C, g = _linear_g(z, F, sd, c)
        return np.concatenate([[C], c, g])

    def starts():
        if c0 is not None and g0 is not None:
            yield _under_heights(z, F, sd, ends, np.asarray(g0, dtype=float), np.asarray(c0, dtype=float))
        if labelled:
            return
        yield _aaa_start(z, F - Vq, H) if c0 is None else np.asarray(c0, dtype=float)
        if chi2_ok is None:
            return
        yield from (np.sort(c) for c in itertools.combinations(_aaa_start(z, F - Vq, H + 1), H))
        half = z[-1] * 0.75
        yield from (np.sort(rng.uniform(-half, half, H)) for _ in range(RANDOM_STARTS if rng is not None else 0))

    best = _scout(run, (start(c) for c in starts()), chi2_ok, EVALUATIONS)
    x = best[0]
    C, c, g = x[0], x[1:H + 1], x[H + 1:]
    order = np.arange(H) if labelled else np.argsort(c)
    return C, c[order], g[order], best[1]


def resolution(z, sd, ends, c, g, chi2):
    r"""How well one configuration's fit (:func:`fit_config`'s ``c``, ``g``, ``chi2``) tells its
    steps apart: the smallest gap between neighbouring positions in standard deviations of that
    gap (Cramér–Rao, from the whitened Jacobian's SVD with the ends and the prior as the fit
    weighs them, scaled by :math:`\sqrt{\max(1,\chi^2/\mathrm{dof})}`); 0 when the information
    is singular or :math:`\chi^2` is not finite, ``inf`` with one head.

    Used in: chapter 5b (the anchor of :func:`~.passes.coarse_pass`)."""
    if len(c) < 2:
        return np.inf
    if not np.isfinite(chi2):
        return 0.0
    J = step_jacobian(z, sd, c, g, ends_sd=(ends[1], ends[3]), prior=PRIOR)
    return _resolved(J, c, 1, chi2 / config_dof(len(z), len(c)))


def _resolved(J, c, first, reduced):
    r""":func:`resolution` from a whitened Jacobian ``J`` whose columns ``first`` to ``first + H``
    are the positions ``c``, scaled by :math:`\sqrt{\max(1,\text{reduced})}`; 0 when singular."""
    H = len(c)
    n = np.linalg.norm(J, axis=0)
    _, sv, Vt = np.linalg.svd(J / np.where(n > 0, n, 1.0), full_matrices=False)
    if not sv[-1] > np.finfo(float).eps * len(sv) * sv[0] or not np.all(n > 0):
        return 0.0
    root = (Vt.T / sv)[first:first + H] / n[first:first + H, None]  # the positions' rows of the covariance's factor
    return closest_gap(c, root) / np.sqrt(max(1.0, reduced))


def fit_stretches(z, F, sd, ends, factors, origin, starts, *, chi2_ok=None):
    r"""One :math:`q` asked at several stretches, fitted together: at stretch ``factors[k]``
    (:math:`a_k`, relative to the first configuration's) the steps sit at
    :math:`a_k(c_h-o_h)+o_h`, :math:`o` the group's ``origin`` (the positions at :math:`q=0`;
    zero without score biases), every configuration with its own constant and the heights
    shared. Weighted Levenberg–Marquardt, the ends and the prior as in :func:`fit_config`,
    from each of ``starts`` (the first configuration's positions; the heights and constants
    solved linearly), every one run to :data:`EVALUATIONS` per parameter; of the fits within
    ``chi2_ok`` (the sum over the configurations) the best resolved is kept, else the one of
    lowest :math:`\chi^2`.

    Parameters
    ----------
    z : array (R,)
    F, sd : arrays (K, R)
        The answers of the K configurations and their standard deviations.
    ends : tuple of arrays (K,)
        :math:`V^\top q`, its sd, :math:`V^\top x`, its sd, per configuration.
    factors : array (K,)
        The stretches, ``factors[0]`` = 1.
    origin : array (H,)
    starts : iterable of arrays (H,)

    Returns
    -------
    tuple
        ``(C, c, g, chi2, apart)``: the constants (K,), the first configuration's positions and
        the heights, sorted by position, every configuration's :math:`\chi^2` (K,), and the
        closest two steps' distance in standard deviations of their gap (:func:`resolution` over
        the joint Jacobian).

    Notes
    -----
    Alone, a configuration tells two steps a few tenths of a nat apart poorly: their heights
    trade off against their positions. At twice the stretch their gap is twice as wide while
    the heights are the same: tied together, the pair fixes the heights, and through them the
    positions (chapter 5b, at the truth on twenty eight-head anchors: the closest pair a median
    5.7 standard deviations apart alone, 720 with the same :math:`q` at twice the stretch).

    Used in: chapter 5b (the anchor of :func:`~.passes.coarse_pass` at eight heads).
    """
    F, sd = np.atleast_2d(F), np.atleast_2d(sd)
    a, o = np.asarray(factors, dtype=float), np.asarray(origin, dtype=float)
    K, H, R = len(a), len(o), len(z)

    def positions(c):
        return a[:, None] * (c - o) + o

    def res(p):
        P = positions(p[K:K + H])
        return np.concatenate([step_residuals(z, F[k], sd[k], p[k], P[k], p[K + H:], tuple(e[k] for e in ends),
                                              prior=PRIOR) for k in range(K)])

    def jac(p):
        P, J = positions(p[K:K + H]), []
        for k in range(K):
            Jk = step_jacobian(z, sd[k], P[k], p[K + H:], ends_sd=(ends[1][k], ends[3][k]), prior=PRIOR)
            B = np.zeros((len(Jk), K + 2 * H))
            B[:, k], B[:, K:K + H], B[:, K + H:] = Jk[:, 0], a[k] * Jk[:, 1:H + 1], Jk[:, H + 1:]
            J.append(B)
        return np.vstack(J)

    def start(c):  # the constants and heights of positions c: linear least squares over every configuration
        J = jac(np.concatenate([np.zeros(K), c, np.zeros(H)]))
        r0 = res(np.concatenate([np.zeros(K), c, np.zeros(H)]))
        cols = np.r_[0:K, K + H:K + 2 * H]
        lin = np.linalg.lstsq(J[:, cols], -r0, rcond=None)[0]
        return np.concatenate([lin[:K], c, lin[K:]])

    def run(x0, evaluations):
        with np.errstate(over="ignore"):  # as in fit_config: a start far off may overflow its cost
            sol = least_squares(res, x0, jac=jac, method="lm", xtol=1e-15, ftol=1e-15, gtol=1e-15,
                                max_nfev=evaluations * (K + 2 * H))
        return sol.x, float(np.sum(sol.fun.reshape(K, -1)[:, :R + 2] ** 2))

    dof = max(K * (R + 2) - (K + 2 * H), 1)

    def judged(x):
        chi2 = np.sum(res(x).reshape(K, -1)[:, :R + 2] ** 2, axis=1)
        apart = _resolved(jac(x), x[K:K + H], K, float(np.sum(chi2)) / dof) if np.all(np.isfinite(chi2)) else 0.0
        return x, chi2, apart

    # every start to its end: of the fits within chi2_ok the best resolved, else the lowest chi2
    fits = [judged(run(start(np.asarray(c, dtype=float)), EVALUATIONS)[0]) for c in starts]
    within = [f for f in fits if chi2_ok is not None and np.sum(f[1]) <= chi2_ok]
    x, chi2, apart = max(within, key=lambda f: f[2]) if within else min(fits, key=lambda f: np.sum(f[1]))
    order = np.argsort(x[K:K + H])
    return x[:K], x[K:K + H][order], x[K + H:][order], chi2, apart


def closest_gap(c, root):
    r"""The smallest gap between neighbouring positions ``c`` (H,) in standard deviations of that
    gap, the covariance of the positions given by its factor ``root`` (H, k),
    :math:`\operatorname{cov}c=\mathrm{root}\,\mathrm{root}^\top`: the sd of
    :math:`c_{h'}-c_h` is the norm of the difference of their rows.

    Used in: chapter 5b (the information of eight steps) and :func:`resolution`."""
    order = np.argsort(c)
    return float(np.min(np.diff(c[order]) / np.linalg.norm(np.diff(root[order], axis=0), axis=1)))


def config_dof(R, H):
    """Degrees of freedom of one configuration's fit: ``R`` ratios and the two ends, less the
    :math:`2H+1` parameters (at least 1)."""
    return max(R + 2 - (2 * H + 1), 1)


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
    r"""One damped Gauss–Newton step of the block system (shared :math:`\gamma`, per-configuration
    :math:`\theta_j`) in square-root form; returns ``(dg, dθ, gain)``, ``gain`` the decrease of
    :math:`\chi^2` the linearised model predicts for the step.

    Every column is scaled to unit norm (so the damping ``lam`` is Marquardt's, relative to each
    column's squared norm); each configuration's block with its damping rows,
    :math:`[J_{\theta_j};\sqrt{\lambda}I]=Q_jR_j`, is factorised; the heights' step solves the
    least-squares problem of their columns and the residuals projected off the :math:`Q_j` (with
    their own damping rows); then :math:`d\theta_j=-R_j^{-1}Q_j^\top(r_j+J_{g,j}d\gamma)`. The
    normal equations (the Schur complement of :math:`J^\top J`) square the condition number."""
    m, H, k = Jg.shape[0], Jg.shape[2], Jt.shape[2]
    ng = np.sqrt(np.einsum("mrh,mrh->h", Jg, Jg))
    nt = np.sqrt(np.einsum("mrk,mrk->mk", Jt, Jt))
    ng, nt = np.where(ng > 0, ng, 1.0), np.where(nt > 0, nt, 1.0)
    Jg, Jt, s = Jg / ng, Jt / nt[:, None, :], np.sqrt(lam)
    Q, R = np.linalg.qr(np.concatenate([Jt, np.broadcast_to(s * np.eye(k), (m, k, k))], axis=1))
    Qd, Qa = Q[:, :-k], Q[:, -k:]  # the rows of the data and of the damping (whose Jg and r are 0)
    P, p = np.einsum("mrk,mrh->mkh", Qd, Jg), np.einsum("mrk,mr->mk", Qd, r)
    Gp = np.concatenate([Jg - Qd @ P, -Qa @ P], axis=1).reshape(-1, H)
    rp = np.concatenate([r - np.einsum("mrk,mk->mr", Qd, p), -np.einsum("mrk,mk->mr", Qa, p)], axis=1).ravel()
    dg = -np.linalg.lstsq(np.vstack([Gp, s * np.eye(H)]), np.concatenate([rp, np.zeros(H)]), rcond=None)[0]
    dt = -np.linalg.solve(R, (p + P @ dg)[..., None])[..., 0]
    after = r + Jg @ dg + np.einsum("mrk,mk->mr", Jt, dt)
    return dg / ng, dt / nt, float(np.sum(r**2) - np.sum(after**2))


def _group_variances(Jg, Jt):
    r"""Variances of a group's shared heights (H,) and of every configuration's positions (m, H)
    from the whitened Jacobian blocks ``Jg`` (m, rows, H) and ``Jt`` (m, rows, H+1), in square-root
    form: each configuration's block :math:`J_{\theta_j}=Q_jR_j`, the heights' columns projected
    off it, :math:`(I-Q_jQ_j^\top)J_{g,j}`, give the heights' covariance through their SVD, and
    :math:`\operatorname{cov}\theta_j=R_j^{-1}R_j^{-\top}+M_j\operatorname{cov}(g)M_j^\top`,
    :math:`M_j=R_j^{-1}Q_j^\top J_{g,j}`, with :math:`\operatorname{cov}(g)` kept as its factor
    :math:`V\Sigma^{-1}` (formed, its entries of size :math:`1/\sigma_{\min}^2` cancel). The
    normal equations (the Schur complement of :func:`_schur_step`) square the condition number:
    at :math:`H=8` in float64 they gave variances of the wrong sign. Every column is scaled to
    unit norm first (a step of small height has a position column :math:`|\gamma_h|` times the
    others'). ``inf`` where singular."""
    ng = np.sqrt(np.einsum("mrh,mrh->h", Jg, Jg))
    nt = np.sqrt(np.einsum("mrk,mrk->mk", Jt, Jt))
    singular = np.full(ng.shape, np.inf), np.full((nt.shape[0], nt.shape[1] - 1), np.inf)
    if not (np.all(ng > 0) and np.all(nt > 0)):
        return singular
    Jg, Jt = Jg / ng, Jt / nt[:, None, :]
    # unit columns: a direction left with less than rounding of them is singular (absolute
    # thresholds: relative to the largest, a block that is all rounding would pass)
    floor = np.finfo(float).eps * Jg.shape[1] * (Jg.shape[0] + 1)
    Q, R = np.linalg.qr(Jt)  # (m, rows, H+1), (m, H+1, H+1)
    P = np.einsum("mrk,mrh->mkh", Q, Jg)
    perp = (Jg - np.einsum("mrk,mkh->mrh", Q, P)).reshape(-1, Jg.shape[2])
    _, sv, Vt = np.linalg.svd(perp, full_matrices=False)
    if not (sv[-1] > floor and np.min(np.abs(np.diagonal(R, axis1=1, axis2=2))) > floor):
        return singular
    root = Vt.T / sv  # cov(g) = root root^T, kept as its factor: formed, it would cancel
    Rinv = np.linalg.inv(R)
    MF = Rinv @ (P @ root)  # (m, H+1, H): M_j times the factor
    t_var = np.einsum("mkl,mkl->mk", Rinv, Rinv) + np.einsum("mkh,mkh->mk", MF, MF)
    return np.sum(root**2, axis=1) / ng**2, (t_var / nt**2)[:, 1:]


def _chi2_rounding(r, sd, C, g):
    r"""How finely :math:`\chi^2` can be evaluated: each answer's residual carries the rounding of
    the curve, :math:`\epsilon_i=\mathrm{eps}\,(|C|+\sum_h|\gamma_h|)/\mathrm{sd}_i`, and
    :math:`\chi^2=\sum r_i^2` moves by :math:`2\sum r_i\epsilon_i`, taken as the root mean
    square of that sum, :math:`2\sqrt{\sum r_i^2\epsilon_i^2}` (the :math:`\epsilon_i`
    independent; measured on a group of eight configurations with answers to 3e-14: 0.33, the
    spread of :math:`\chi^2` under last-bit changes of the constants 0.18, the gap between a
    step's predicted and actual change up to 0.38 on another draw)."""
    eps = np.finfo(float).eps * (np.abs(C) + np.sum(np.abs(g)))[:, None] / sd
    return 2 * float(np.sqrt(np.sum((r * eps) ** 2)))


def fit_group(z, F, sd, ends, g0, C0, c0, *, iterations=100):
    r"""Joint weighted fit of a group's configurations with shared heights :math:`\gamma` (a
    Levenberg–Marquardt iteration on the block system, :func:`_schur_step`, damped as
    :data:`DAMPING`), until the Gauss–Newton step's gain falls below :data:`CONVERGED`, or a
    rejected step's below the rounding of :math:`\chi^2` (:func:`_chi2_rounding`).

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
    dof = max(1, m * (len(z) + 2) - (H + m * (H + 1)))
    r, Jg, Jt = _group_blocks(z, F, sd, ends, g, C, c)
    cost, lam = float(np.sum(r**2)), 0.0
    for _ in range(iterations):
        dg, dt, step_gain = _schur_step(r, Jg, Jt, lam)
        # convergence is judged by the Gauss–Newton step, not a damped one
        gain = _schur_step(r, Jg, Jt, 0.0)[2] if lam > 0 else step_gain
        if gain <= CONVERGED * max(1.0, cost / dof):
            break
        g1, C1, c1 = g + dg, C + dt[:, 0], c + dt[:, 1:]
        r1, Jg1, Jt1 = _group_blocks(z, F, sd, ends, g1, C1, c1)
        cost1 = float(np.sum(r1**2))
        if np.isfinite(cost1) and cost1 < cost:
            g, C, c, r, Jg, Jt, cost = g1, C1, c1, r1, Jg1, Jt1, cost1
            lam = lam / 10 if lam / 10 >= DAMPING[0] else 0.0
        elif step_gain <= _chi2_rounding(r[:, :len(z)], sd, C, g):
            break  # the rejected step's gain is below the rounding of chi2 itself: as close as it can tell
        else:
            lam = max(10 * lam, DAMPING[0])
            if lam > DAMPING[1]:
                break
    chi2 = np.sum(r[:, :len(z) + 2] ** 2, axis=1)
    reduced = float(np.sum(chi2)) / dof
    scale = max(1.0, reduced)
    g_var, c_var = (v * scale for v in _group_variances(Jg, Jt))
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


def _positions_only(z, F, sd, g, starts, ends, j, *, limit):
    r"""One configuration's positions and constant with the heights ``g`` fixed (weighted LM),
    from ``starts`` (position vectors): the :data:`SCOUT_STARTS` of lowest :math:`\chi^2` as they
    stand, in that order, each for :data:`SCOUT_EVALUATIONS` per parameter until one is within
    ``limit``; the best is carried on to convergence (100 per parameter), as in
    :func:`fit_config`. At :math:`H=8` a repair's 720 orders of eight positions, tried in turn and
    each run to its end, took 90 % of the learner's time, and a configuration no order repairs
    (one under wrong heights) still scouted all of them. Returns ``(c, C, chi2)``."""
    Vq, Vq_sd, Vx, Vx_sd = (e[j] for e in ends)
    H = len(g)

    def res(p):
        return step_residuals(z, F, sd, p[0], p[1:], g, (Vq, Vq_sd, Vx, Vx_sd), prior=PRIOR)

    def jac(p):  # the heights fixed: their columns dropped
        return step_jacobian(z, sd, p[1:], g, ends_sd=(Vq_sd, Vx_sd), prior=PRIOR)[:, :H + 1]

    def run(x0, evaluations):
        with np.errstate(over="ignore", invalid="ignore"):  # as in fit_config: a far start's cost overflows
            sol = least_squares(res, x0, jac=jac, method="lm", max_nfev=evaluations * (H + 1))
            return sol.x, float(np.sum(sol.fun[:len(z) + 2] ** 2))

    x0 = [np.concatenate([[Vq], np.asarray(c, dtype=float)]) for c in starts]
    with np.errstate(over="ignore", invalid="ignore"):  # a start far off: an infinite chi2 is ranked last
        first = [float(np.sum(res(x)[:len(z) + 2] ** 2)) for x in x0]
    nearest = np.argsort(first, kind="stable")[:SCOUT_STARTS]  # the starts nearest the answers first
    x, cost = _scout(run, (x0[k] for k in nearest), limit, 100)
    return x[1:], x[0], cost
