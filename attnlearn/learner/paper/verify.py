r"""Verification: check queries that the fits must predict (never silent).

The paper's design has no redundancy in :math:`d=1` (one configuration of :math:`2n` samples,
exactly as many as unknowns) and little elsewhere: a premise that is wrong (more heads than
``heads=``, noise the learner was not told of, an oracle that is not attention) can give fits that
reproduce every sample and a model that is silently wrong. So before the solves, a few
configurations get one more query each, at a node their fit did not use and within the paper's
longest query, and the fit must predict its answer within the first-order bound of the
prediction. These queries, and the random held-out sequences after them (:func:`.checks.finish`),
are counted in ``recovery.queries["holdout"]``, apart from the paper's design.

Used in: chapter 5 (the verification stage at work: what each failure kind costs and how it is
caught).
"""

from contextlib import nullcontext
from fractions import Fraction
from math import gcd

import mpmath
import numpy as np

from ..._arith import to_float, to_mp
from ...errors import CheckFailedError
from ...rational.family import jacobian
from ...rational.multiprecision import _mp_miss, _mpnode, gauss_newton_mp
from ..asking import ask_nodes
from ..tolerances import MEASURE_DPS, POLISH_STEPS

__all__ = ["check_nodes", "check_positions", "polish_onto_samples", "verify_fits"]


def check_nodes(nodes, k):
    r"""``k`` check queries' :math:`(s, t)`: :math:`s` copies of :math:`x` then :math:`t` of :math:`q`,
    :math:`s+t` at most the design's longest query, ratios :math:`t/s` the fit did not use, the ones
    nearest the middle (in :math:`\log t/s`) of the used ones, where a prediction is best
    conditioned."""
    L = nodes.max_length
    used = {Fraction(t, s) for s, t in nodes.pairs}
    cand = [(s, t) for s in range(1, L) for t in range(1, L - s + 1)
            if gcd(s, t) == 1 and Fraction(t, s) not in used]
    mid = float(np.median([np.log(float(r)) for r in used]))
    return sorted(cand, key=lambda st: (abs(np.log(st[1] / st[0]) - mid), st))[:k]


def check_positions(C, k):
    """``k`` configurations spread over the table (its first, its last, and between)."""
    k = min(k, C)
    return np.unique(np.linspace(0, C - 1, k).round().astype(int)) if k else np.zeros(0, dtype=int)


def _predict(ell, gam, tau, exact):
    r"""The fit's :math:`G(\tau)=\sum_h\gamma_h/(1+\rho_h\tau)` for every row (in the learner's
    arithmetic)."""
    if not ell.shape[1]:
        return np.zeros(len(ell), dtype=ell.dtype)
    if exact:
        rho = np.vectorize(mpmath.exp, otypes=[object])(ell)
        return (gam / (1 + rho * tau)).sum(axis=1)
    return (gam / (1 + np.exp(ell) * float(tau))).sum(axis=1)


def _node(ratio, exact):
    """The node :math:`t/s` (an int or a :class:`~fractions.Fraction`) in the learner's arithmetic."""
    r = Fraction(ratio)
    return mpmath.mpf(r.numerator) / r.denominator if exact else float(r)


def polish_onto_samples(F, ell, gam, ts, *, exact, steps=POLISH_STEPS):
    r"""``steps`` Gauss-Newton steps of each fit (rows of ``ell``, ``gam``) onto its own samples ``F``
    (constant removed), at :data:`~.tolerances.MEASURE_DPS` digits for float64 fits (converted
    exactly) or at the working precision in exact mode.

    Parameters
    ----------
    F : array (C, m)
        The samples less their constants.
    ell, gam : array (C, H)
        The stored fits (float64 or mpf).
    ts : sequence of int or Fraction
        The nodes :math:`t_i`.
    exact : bool, keyword-only
        Exact mode (work at the current mpmath precision) or float64.
    steps : int, keyword-only
        Gauss-Newton steps (:data:`~.tolerances.POLISH_STEPS`).

    Used in: chapter 5 (the verification stage).

    Returns the polished :math:`(\ell,\gamma)` (object arrays of mpf) and, float64, the largest
    miss of the samples before and after the steps.

    Notes
    -----
    A stored fit misses its samples by :math:`r_i=F(t_i)-G(t_i)`: an ill-conditioned float64 fit with
    as many unknowns as samples reports no residual and can miss them by :math:`10^3`-:math:`10^6`
    times the output error, and the calibration of the constants updates a fit to first order. Each
    step :math:`\delta=J^+r` moves the fit towards the one its samples determine (quadratically), so
    the prediction of a check query is that of the samples and not of the fit's inaccuracy; what
    the steps leave is measured and enters the bound (:func:`verify_fits`).
    """
    C, H = ell.shape
    out_ell, out_gam = np.empty((C, H), dtype=object), np.empty((C, H), dtype=object)
    before, after = np.zeros(C), np.zeros(C)
    with nullcontext() if exact else mpmath.workdps(max(MEASURE_DPS, mpmath.mp.dps)):
        tt = [_mpnode(t) for t in ts]
        for c in range(C):
            e, g = [to_mp(ell[c])[h] for h in range(H)], [to_mp(gam[c])[h] for h in range(H)]
            Fc = to_mp(F[c])
            before[c] = float(max(abs(x) for x in _mp_miss(tt, Fc, e, g)))
            e, g, r = gauss_newton_mp(tt, Fc, e, g, steps=steps)
            after[c] = float(max(abs(x) for x in r))
            out_ell[c], out_gam[c] = e, g
    return out_ell, out_gam, before, after


def _prediction_weights(ts, ell, gam, tau):
    r"""First-order weights :math:`w_i=\partial G(\tau)/\partial G(t_i)` of the prediction on the
    samples, through the fit: :math:`w=J^{+\top}\nabla G(\tau)`, float64, (C, m)."""
    C, m = len(ell), len(ts)
    if not ell.shape[1]:
        return np.zeros((C, m))
    ellf, gamf = to_float(ell), to_float(gam)
    J = jacobian(np.asarray([float(t) for t in ts]), ellf, gamf)  # (C, m, 2H)
    g = jacobian(np.asarray([float(tau)]), ellf, gamf)[:, 0, :]  # (C, 2H)
    return np.einsum("ckm,ck->cm", np.linalg.pinv(J), g)


def verify_fits(ask, design, state, nodes, *, count, eps_out, tol):
    r"""Ask ``count`` check queries (at most ``tol.check_configs``, one per configuration) and
    compare each answer with its configuration's fit. Returns the number of queries asked.

    Notes
    -----
    The prediction :math:`c+G(\tau)` of the check node :math:`\tau=t/s` depends on the
    samples :math:`F(t_i)` through the fit with weights :math:`w=J^{+\top}\nabla G(\tau)`
    (:math:`J` the fit's Jacobian); with every sample within :math:`\varepsilon` plus the fit's
    miss :math:`r` of its samples left by three Gauss-Newton steps (:func:`polish_onto_samples`, which
    corrects the prediction for the fit's miss to first order), and the constant within
    :math:`\delta c` (it shifts the samples and the prediction alike), the prediction is off by at most
    :math:`(\varepsilon+r)\sum_i|w_i|+\delta c\,|1-\sum_iw_i|` to first order, and the
    answer itself by :math:`\varepsilon`: a tight bound, so that undeclared noise a few times
    the output error is seen. A discrepancy beyond ``tol.check_safety`` times their sum means
    the samples are not those of the assumed model at the assumed output error.

    Raises
    ------
    CheckFailedError
        Naming the configuration, the answer, the prediction and its bound, and what to try.
    """
    k = min(count, tol.check_configs)
    pos = check_positions(len(state.F), k)
    if not len(pos):
        return 0
    # k queries in all: one node on each of k configurations, or several on fewer (d = 1)
    per = -(-k // len(pos))
    pairs = check_nodes(nodes, per)
    exact = tol.exact
    y = ask_nodes(ask, design.u[pos], design.qtok, design.qidx[pos], pairs, "the check queries")
    # the fits polished onto their own samples: the prediction is the samples', not the rounding's
    Fs = state.F[pos] - state.const[pos][:, None]
    ell, gam, _, r = polish_onto_samples(Fs, state.ell[pos], state.gamma[pos], nodes.ts, exact=exact)
    ws, preds = [], []
    with nullcontext() if exact else mpmath.workdps(max(MEASURE_DPS, mpmath.mp.dps)):
        for s, t in pairs:
            tau = _node(Fraction(t, s), True)
            preds.append(to_mp(state.const[pos]) + _predict(ell, gam, tau, True))
            ws.append(_prediction_weights(nodes.ts, ell, gam, tau))
        pred = np.stack(preds, axis=1)  # (k', nodes)
        miss = np.abs(to_float(to_mp(y) - pred))
    w = np.stack(ws, axis=1)  # (k', nodes, m)
    # every sample within eps_out plus what the polish left of the fit's miss (second order); the
    # constant shifts samples and prediction alike, so it enters with 1 - sum(w)
    sample_err = (eps_out + r)[:, None]
    bound = eps_out + sample_err * np.abs(w).sum(axis=2) + state.const_err[pos][:, None] * np.abs(1 - w.sum(axis=2))
    bad = ~(miss <= tol.check_safety * bound)
    if bad.any():
        i, j = np.argwhere(bad)[0]
        s, t = pairs[j]
        raise CheckFailedError(
            f"check query on {design.labels[int(pos[i])]} (s = {s}, t = {t}): the oracle answered "
            f"{float(to_float(y[i, j])):.6g}, the fit predicts {float(to_float(pred[i, j])):.6g} +- "
            f"{bound[i, j]:.1e}, missed by {miss[i, j]:.1e} > {tol.check_safety:g} x that bound: the answers are "
            f"not those of an attention model with {state.H} canonical head(s) and output error {eps_out:.1e} "
            "(undeclared noise? pass output_error=; more heads? raise heads= or use max_heads=; not attention?)"
        )
    return y.size
