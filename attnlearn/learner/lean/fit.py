r"""The lean design's phase 1: one final token's base configurations fitted, and labelled across
configurations by the link queries (:func:`phase_one`, :func:`match_links`).

Used in: chapter 8.
"""

import itertools
import math
from dataclasses import dataclass, field

import mpmath
import numpy as np

from ..._arith import mp_solve, to_float, to_mp
from ...errors import RecoveryError, UnmatchedHeadsError
from ...rational.degree import fit_checked, fit_min_degree
from ..asking import ask_nodes
from ..heads import check_significant
from ..nodes import node_pairs, scale_factor
from ..paper.scale import probe_spread, small_layer
from ..samples import sample_errors
from .ask import ask_queries

__all__ = ["PhaseOne", "first_configuration", "phase_one", "match_links"]


@dataclass
class PhaseOne:
    r"""What phase 1 learned: ``m`` canonical heads; per head ``v`` (m, d), ``w0`` (m, d)
    :math:`W_hq_0`; their first-order error bounds ``err_v``, ``err_w0``; ``V``; the query
    scale ``f``; the links' ``link_margin`` (relative gap to the best wrong pairing); ``rescaled``,
    the queries of base(1) asked again at a small layer's scale (0 otherwise)."""

    m: int
    v: np.ndarray
    w0: np.ndarray
    err_v: np.ndarray
    err_w0: np.ndarray
    V: np.ndarray
    f: float
    U: np.ndarray
    link_margin: list = field(default_factory=list)
    rescaled: int = 0


def first_configuration(ask, u, q0, c0, n, nodes, *, heads_given, spread, output_error, tol):
    r"""Phase 1's first configuration base(1) (direction ``u``, final token ``q0``, constant
    ``c0``): asked, fitted at minimal degree, and the query scale ``f`` set from its
    :math:`\max_h|\ell_h|` (clipped as in :func:`attnlearn.learn`). In float64, a small layer
    (:func:`~..paper.scale.small_layer`: two or more heads; or crowded ones, fewer than
    ``n`` found with ``heads_given``, or a fit that fails where a one-pole fit finds the poles
    crowded, :func:`~..paper.scale.probe_spread`) gets base(1) asked again at the factor that
    spreads its poles about ``spread``, set by this one fit (at most ``tol.scale_wide *
    tol.scale_max``; measured, the re-asked configuration's :math:`\max|\ell|` lands between 0.07
    and 2 for ``spread`` 1). Returns ``(u1, F1, m, fit1, f, rescaled)``: the direction and samples the
    design keeps, the head count and fit, the factor, and the queries of the configuration asked
    again (0, or :math:`2n`).

    Used in: chapter 8 (and chapter 7's small layers)."""
    def fitted(F):
        return fit_min_degree(nodes.ts, F - c0, n, tol=sample_errors(F, output_error, tol).residual[0],
                              labels=["base(1)"])

    F1 = ask_nodes(ask, u[None], q0[None], np.zeros(1, dtype=int), nodes.pairs, "configuration base(1)")
    try:
        m, fit1 = fitted(F1)
        probe, failure = (float(np.max(np.abs(to_float(fit1.ell)))) if m else 0.0), None
    except RecoveryError as exc:
        if tol.exact or n < 2:
            raise
        m, fit1, probe, failure = 0, None, probe_spread(nodes, F1, c0, None, method="linearised"), exc
    crowded = failure is not None or (heads_given and 0 < m < n)  # heads that one fit cannot tell apart
    if not tol.exact and (m >= 2 or crowded) and \
            small_layer(probe, F1, c0, spread=spread, output_error=output_error, tol=tol):
        f = scale_factor(probe, spread, tol, top=tol.scale_wide * tol.scale_max)
        u1 = u * f
        F1 = ask_nodes(ask, u1[None], q0[None], np.zeros(1, dtype=int), nodes.pairs,
                       "configuration base(1) at the small layer's scale")
        return (u1, F1, *fitted(F1), f, nodes.m)
    if failure is not None:
        raise failure
    return u, F1, m, fit1, scale_factor(probe, spread, tol), 0


def phase_one(ask, dirs, q0, n, *, heads_given=True, spread, output_error, tol):
    r"""Phase 1: :math:`(q_0)`, the :math:`d` base configurations at :math:`2n` ratio nodes
    (the first one also sets the query scale: :func:`first_configuration`), the
    minimal-degree fits, the :math:`d-1` links. Returns :class:`PhaseOne`.

    Raises
    ------
    InconsistentHeadCountError, PoleError
        A fit (:func:`attnlearn.rational.fit_checked`).
    IllConditionedError
        A vanishing residue or two coinciding poles (:func:`~attnlearn.learner.heads.check_significant`).
    UnmatchedHeadsError
        A link that no pairing, or more than one, reproduces.

    Used in: chapter 8."""
    d = len(q0)
    exact = tol.exact
    conv = to_mp if exact else (lambda a: np.asarray(a, dtype=float))
    nodes = node_pairs(n, "ratios")
    q0n = conv(to_float(q0))  # q0 is drawn in float64: exact either way
    c0 = ask(q0n[None, None, :], "the query (q_0)")[0]
    u1, F1, m, fit1, f, rescaled = first_configuration(ask, conv(dirs.base[0]), q0n, c0, n, nodes,
                                                        heads_given=heads_given, spread=spread,
                                                        output_error=output_error, tol=tol)
    U = np.empty((d, d), dtype=object if exact else float)
    U[0] = u1
    U[1:] = conv(dirs.base[1:] * f)
    F = np.empty((d, nodes.m), dtype=object if exact else float)
    F[0] = F1[0]
    if d > 1:
        F[1:] = ask_nodes(ask, U[1:], q0n[None], np.zeros(d - 1, dtype=int), nodes.pairs, "the base configurations")
    errors = sample_errors(F, output_error, tol)
    labels = [f"base({k + 1})" for k in range(d)]
    if m == 0:
        fit = fit_checked(nodes.ts, F - c0, 0, tol=errors.residual, labels=labels)
        zero = np.zeros((0, d), dtype=object)
        return PhaseOne(0, zero, zero, np.zeros((0, d)), np.zeros((0, d)), np.zeros(d, dtype=object), f,
                        to_mp(U), rescaled=rescaled), errors
    fit = fit_checked(nodes.ts, F - c0, m, tol=errors.residual, labels=labels)
    if exact:
        check_significant(to_float(fit.ell), to_float(fit.gamma), fit.sens[:, 0] * 2 * errors.output,
                          fit.sens[:, 1] * 2 * errors.output, labels, S=tol.significance)
    # from here on everything is in mpmath (float64 mode: at FLOAT_WORK_DPS digits)
    ell, gam, U, c0 = to_mp(fit.ell), to_mp(fit.gamma), to_mp(U), to_mp(np.array([c0]))[0]
    margins = []
    if m > 1 and d > 1:
        perms, margins = match_links(ask, q0, U, c0, fit, errors, tol=tol)
        for i in range(1, d):
            ell[i], gam[i] = ell[i][list(perms[i - 1])], gam[i][list(perms[i - 1])]
            fit.sens[i] = fit.sens[i][:, list(perms[i - 1])]
    Uinv = mp_solve(U, to_mp(np.eye(d)))
    Uabs = np.abs(to_float(Uinv))
    eps = 2 * errors.output  # a sample's error and the constant's
    v = np.array([[-x for x in mp_solve(U, gam[:, h])] for h in range(m)], dtype=object)
    w0 = np.array([mp_solve(U, ell[:, h]) for h in range(m)], dtype=object)
    err_v = np.array([Uabs @ (fit.sens[:, 1, h] * eps) for h in range(m)])
    err_w0 = np.array([Uabs @ (fit.sens[:, 0, h] * eps) for h in range(m)])
    V = np.array([mpmath.fsum(v[:, k]) for k in range(d)], dtype=object)
    return PhaseOne(m, v, w0, err_v, err_w0, V, f, U, margins, rescaled), errors


def match_links(ask, q0, U, c0, fit, errors, *, tol):
    r"""The :math:`d-1` link queries :math:`x=q_0-u_1-u_i` (one sample, :math:`t=1`) and the
    pairing of configuration :math:`i`'s heads with configuration 1's that reproduces each:
    predicted :math:`c_0+\sum_h(\gamma_{1h}+\gamma_{i\pi(h)})/(1+\rho_{1h}\rho_{i\pi(h)})`.

    Returns the pairings (one tuple per link) and each link's relative margin (best wrong
    pairing's residual over the answer's scale).

    The tolerance: in exact mode ``tol.exact_residual`` times the answer's scale; in float64
    ``tol.match_safety`` times the pairing's first-order error bound (the sensitivities
    ``fit.sens`` of the base configurations' fit ``fit`` times the sample error, through the
    prediction's derivatives).

    Raises
    ------
    UnmatchedHeadsError
        No pairing, or more than one, within the tolerance.

    Used in: chapter 8."""
    ell, gam, sens = to_mp(fit.ell), to_mp(fit.gamma), fit.sens
    d, m = U.shape[0], ell.shape[1]
    X = np.empty((d - 1, 2, d), dtype=object)
    for i in range(1, d):
        X[i - 1, 0] = q0 - U[0] - U[i]
        X[i - 1, 1] = q0
    obs = ask_queries(ask, X, "the link queries")
    rho = np.vectorize(mpmath.exp, otypes=[object])(ell)
    eps = 2 * errors.output
    perms, margins = [], []
    for i in range(1, d):
        res = []
        for p in itertools.permutations(range(m)):
            pred = c0 + mpmath.fsum((gam[0, h] + gam[i, p[h]]) / (1 + rho[0, h] * rho[i, p[h]]) for h in range(m))
            if tol.exact:
                limit = tol.exact_residual * max(abs(obs[i - 1]), 1)
            else:  # first-order bound of the prediction under this pairing
                bound = errors.output
                for h in range(m):
                    r2, g2 = float(rho[0, h] * rho[i, p[h]]), float(gam[0, h] + gam[i, p[h]])
                    dg = (sens[0, 1, h] + sens[i, 1, p[h]]) * eps
                    dl = (sens[0, 0, h] + sens[i, 0, p[h]]) * eps
                    bound += dg / (1 + r2) + abs(g2) * r2 / (1 + r2) ** 2 * dl
                limit = tol.match_safety * bound
            res.append((abs(pred - obs[i - 1]), p, limit))
        res.sort(key=lambda r: r[0])
        scale = max(abs(obs[i - 1]), 1)
        good = [p for r, p, lim in res if r <= lim]
        limit = res[0][2]
        if len(good) != 1:
            raise UnmatchedHeadsError(
                f"link(1,{i + 1}): {len(good)} of the {len(res)} pairings of the heads reproduce the link query "
                f"within {float(limit):.1e} (best residual {float(res[0][0]):.1e}): the heads cannot be labelled")
        perms.append(good[0])
        margins.append(float(res[1][0] / scale) if len(res) > 1 else math.inf)
    return perms, margins
