r"""The constants :math:`c=V^\top q`: :math:`V` from block 1, and the calibration of the rest.

Used in: chapter 4 (one shared query :math:`(q_1)` and block 1's :math:`F(0)=V^\top x`
give :math:`V`, hence every later constant; the link equations re-estimate each block's
constant) and chapter 5 (a derived constant's error acts like oracle noise; its bound).

A configuration's samples are :math:`F(t)=c+\sum_h\gamma_h/(1+\rho_ht)`; the fit needs :math:`c`.
Block 1's constant is the shared query's answer :math:`c_1`; every other block's is
:math:`V^\top q_k` (derived from the learned :math:`V`, or asked directly in robust mode), a
cross's :math:`c_1+c_k`. With the paper's budget the derived constants carry :math:`V`'s error,
which :func:`calibrate_constants` and :func:`calibrate_polish` remove by Newton steps on the
link equations, without a query.
"""

from dataclasses import dataclass, field

import numpy as np

from ..._arith import absmax, solve, to_float
from ...matching import match_candidates
from ...rational.degree import fit_known_degree
from ...rational.floating import fit_masked
from .fitting import fit_at_constants, subset_fit
from .labelling import link_sets, scales

__all__ = [
    "VSolution",
    "solve_V",
    "solve_V_biased",
    "set_constants",
    "LinkLayout",
    "Calibration",
    "calibrate_constants",
    "calibrate_polish",
    "fit_calibrated",
]


@dataclass
class VSolution:
    r""":math:`V=\sum_hv_h` from block 1 and ``err`` its first-order bound :math:`|dV|_\infty`."""

    V: np.ndarray
    err: float


def solve_V(design, fit1, idx1, c1, *, H, eps_out):
    r""":math:`V` from :math:`F(0)=c_1+\sum_h\gamma_h=V^\top x` over block 1's base configurations.

    ``fit1`` is the fit of block 1's configurations ``idx1``. The bound: :math:`|dV|_\infty\le
    |X_0^{-1}|_\infty\max_j|dF(0)_j|`, to first order.
    """
    table = design.table
    base0 = [i for i in idx1 if table.kind[i] == "base"]
    pos = {i: p for p, i in enumerate(idx1)}
    X0 = design.qtok[0] - design.u[base0]  # first tokens x = q_1 - u_{1,j}
    F0 = np.array([c1 + (sum(fit1.gamma[pos[i]]) if H else 0) for i in base0], dtype=X0.dtype)
    V = solve(X0, F0)
    X0inv_norm = float(np.abs(np.linalg.inv(to_float(X0))).sum(axis=1).max())
    sens1 = np.asarray(fit1.sens)
    dF0 = eps_out + (np.max(sens1[:, 1, :].sum(axis=1)) * eps_out if H else 0.0)
    return VSolution(V, X0inv_norm * dF0)


def solve_V_biased(design, fit1, idx1, *, H, eps_out):
    r""":math:`V` from block 1's residues, :math:`\sum_h\gamma_h=-u_{1,j}^\top V` (:math:`j=1..d`).

    The bound: the residues' sum is off by at most its sensitivity times the samples' and
    :math:`c_1`'s error (:math:`2\varepsilon`), so :math:`|dV|_\infty\le|U_1^{-1}|_\infty\max_j
    |d\sum_h\gamma_h|` to first order.

    Parameters
    ----------
    design : Design
        The biased design (:func:`.design.build_design` with ``bias=True``).
    fit1 : RationalFit
        Block 1's rational fits (:func:`.fitting.fit_block_one`): residues ``gamma``, their
        sensitivities ``sens``.
    idx1 : list of int
        Block 1's configurations (rows of ``design.table``), in the order of ``fit1``.
    H : int, keyword-only
        The canonical head count.
    eps_out : float, keyword-only
        The samples' absolute error.

    Returns
    -------
    VSolution
        :math:`V` and its first-order bound.

    Used in: chapter 7."""
    table = design.table
    base0 = [i for i in idx1 if table.kind[i] == "base"]
    pos = {i: p for p, i in enumerate(idx1)}
    U0 = -design.u[base0]
    S = np.array([sum(fit1.gamma[pos[i]]) if H else 0 * U0[0, 0] for i in base0], dtype=U0.dtype)
    V = solve(U0, S)
    inv_norm = float(np.abs(np.linalg.inv(to_float(U0))).sum(axis=1).max())
    dS = 2 * eps_out * float(np.max(np.asarray(fit1.sens)[:, 1, :].sum(axis=1))) if H else 0.0
    return VSolution(V, inv_norm * dS)


def set_constants(state, design, cq, *, asked, Verr, eps_out):
    r"""Every configuration outside block 1 gets its constant from the block constants ``cq``
    (:math:`c_k`; a cross :math:`c_1+c_k`) and its error bound: the oracle's (robust mode,
    ``asked``: the constants were queried, a cross sums two) or :math:`|q|_1|dV|_\infty`."""
    table = design.table
    kind, blk, qi = table.kind, table.blk, table.qidx
    other = ~table.in_block_one()
    is_cross = kind == "cross"
    state.const[other] = cq[blk[other]]
    state.const[is_cross] = state.const[is_cross] + cq[0]  # final token q_1 + q_k
    # affine positions: final token (q_1 + q_k) / 2, constant (c_1 + c_k) / 2
    state.const[is_cross] = table.family.midpoint(state.const[is_cross])
    if asked:
        state.const_err[other] = np.where(is_cross[other], 2 * table.mid * eps_out, eps_out)
    elif table.family.affine:  # c_1 + V^T (q - q_1): the shared query's error and V's
        state.const_err[other] = eps_out + np.abs(to_float(design.qtok - design.q[0])).sum(axis=1)[qi[other]] * Verr
    else:
        state.const_err[other] = np.abs(to_float(design.qtok)).sum(axis=1)[qi[other]] * Verr


@dataclass(frozen=True)
class LinkLayout:
    """Index arrays of the blocks k >= 2: their configurations block by block (``rows``, 2d - 1
    each: d base then d - 1 links, contiguous in the table), the first base of each
    (``first``), and for every link its positions in ``rows``: reference base (k,1), other
    base (k,j), link (k,j)."""

    rows: np.ndarray
    first: np.ndarray
    ref: np.ndarray
    oth: np.ndarray
    lnk: np.ndarray
    blocks: int

    @classmethod
    def of(cls, table):
        B, pb = table.B, table.per_block
        ref, oth, lnk = table.link_indices(np.arange(1, B))
        return cls(table.block_rows()[1:].ravel(), table.base(np.arange(1, B), 0), ref - pb, oth - pb, lnk - pb, B - 1)


@dataclass
class Calibration:
    """The calibration's record: Newton ``steps`` (largest per step), total ``change`` per
    block, last ``bound``; the link pairing ``perm``/``obs`` and the ``layout``."""

    steps: list
    change: np.ndarray
    bound: np.ndarray
    perm: np.ndarray = field(repr=False)
    obs: np.ndarray = field(repr=False)
    layout: LinkLayout = field(repr=False)

    def summary(self):
        """``{"steps", "change", "bound"}`` (``Recovery.diagnostics["calibration"]``)."""
        return {"steps": self.steps, "change": self.change, "bound": self.bound}


def _link_residuals(fit, lay, perm, obs, *, eps_out, tol):
    """Scaled link mismatches, their derivatives in the constant and error bounds, (blocks, 4 H (d-1))."""
    ref, oth, lnk = lay.ref, lay.oth, lay.lnk
    ell, gam = fit.ell, fit.gamma
    r_ = np.arange(len(ref))[:, None]
    a_ = np.arange(perm.shape[1])[None, :]
    sc = scales(np.stack([ell[lnk], gam[lnk]], axis=2), tol=tol)  # (L, 2)
    res, der, err = [], [], []
    for comp, val in enumerate((ell, gam)):
        sh, ab = fit.shift[:, comp], fit.sens[:, comp]
        rr = val[lnk][r_, obs] - val[ref][r_, a_] - val[oth][r_, perm]
        dd = sh[lnk][r_, obs] - sh[ref][r_, a_] - sh[oth][r_, perm]
        ee = (ab[lnk][r_, obs] + ab[ref][r_, a_] + ab[oth][r_, perm]) * eps_out
        res.append(rr / sc[:, comp:comp + 1])
        der.append(dd / sc[:, comp:comp + 1])
        err.append(ee / sc[:, comp:comp + 1])
    nb = lay.blocks
    return (np.concatenate(res, axis=1).reshape(nb, -1), np.concatenate(der, axis=1).reshape(nb, -1),
            np.concatenate(err, axis=1).reshape(nb, -1))


def _link_newton(fit, ok, lay, H, *, eps_out, tol, perm=None, obs=None):
    """One weighted least-squares Newton step on each block's constant from its link mismatches.

    Returns ``(delta, bound, perm, obs)``: the step per block, its first-order error bound,
    and the link pairing used (computed here unless given).
    """
    ref, oth, lnk = lay.ref, lay.oth, lay.lnk
    usable = np.ones(len(lnk), dtype=bool)
    if perm is None:
        P, O = link_sets(fit.ell, fit.gamma, ref, oth, lnk)
        mt = match_candidates(P, O, scales(O, tol=tol))
        perm, obs = mt.perm, mt.observed
        usable = np.isfinite(mt.residual)  # each observed point used once
    good = usable & ok[ref] & ok[oth] & ok[lnk]  # (L,)
    res, der, err = _link_residuals(fit, lay, perm, obs, eps_out=eps_out, tol=tol)
    # weighted least squares: each link equation counts by the inverse of its error bound
    mask = np.repeat(good, 2 * H).reshape(lay.blocks, -1)
    wgt = np.where(mask, 1.0 / np.maximum(err, tol.newton_weight_floor) ** 2, 0.0)  # the square stays finite
    res = np.where(mask, res, 0)
    der = np.where(mask, der, 0.0)
    dd2 = (wgt * der**2).sum(axis=1)
    keep = dd2 > 0  # a block with no usable link keeps its constant
    dd2 = np.where(keep, dd2, 1.0)
    delta = np.where(keep, -(wgt * der * res).sum(axis=1) / dd2, 0)
    bound = np.where(keep, (wgt * np.abs(der) * err).sum(axis=1) / dd2, np.inf)  # first-order error
    return delta, bound, perm, obs


def _apply_constants(state, table, c, bound, *, eps_out, tol):
    """Set every block k >= 2 configuration's constant to c[k-1] (crosses: c_1 + c_k); a block
    whose bound is not finite (no usable link) keeps its constant."""
    ks = np.nonzero(np.isfinite(bound))[0]  # block k = ks + 1
    rows = table.block_rows()[ks + 1]  # (len(ks), 2d - 1)
    state.const[rows] = np.asarray(c)[ks][:, None]
    state.const_err[rows] = tol.calibration_margin * np.asarray(bound)[ks][:, None]
    ic = table.cross(ks + 1)
    state.const[ic] = state.const[table.base(0, 0)] + np.asarray(c)[ks]
    state.const_err[ic] = eps_out + tol.calibration_margin * np.asarray(bound)[ks]
    state.const[ic] = table.family.midpoint(state.const[ic])  # midpoint crosses (affine positions)
    state.const_err[ic] = table.family.midpoint(state.const_err[ic])


def calibrate_constants(nodes, state, table, *, H, eps_out, tol, method):
    r"""Refine :math:`c_k=V^\top q_k` for blocks :math:`k\ge2` from their link equations.

    Within block :math:`k` every configuration has the same constant. At the true constant
    the link configuration's set equals the pairwise sums of its two base sets; a wrong
    constant :math:`c_k+\delta` moves each fitted :math:`(\ell,\gamma)` by
    :math:`-\delta J^{+}\mathbf 1` to first order (``RationalFit.shift``), so the link
    mismatch is linear in :math:`\delta` and a weighted least-squares step (a Newton step)
    removes it. No query is spent. The derived constant's error is the error of :math:`V`
    times :math:`|q_k|_1`, amplified a second time by the interpolation; the calibrated
    one is limited by the links' own noise. In float64 and in exact mode alike.

    This function makes the first Newton step from a fit at the derived constants; the
    learner refits at the new constants and :func:`calibrate_polish` makes the next step
    on that fit: to first order, without another fit, once the step is within the noise
    (usually the second step), else with a refit (at most ``tol.calibration_refits`` more).
    Updates ``state.const`` and ``state.const_err`` (crosses use :math:`c_1+c_k`); returns
    the :class:`Calibration` that :func:`calibrate_polish` extends.
    """
    d = table.d
    lay = LinkLayout.of(table)
    start = state.const[lay.first].copy()
    G = state.F[lay.rows] - np.repeat(start, 2 * d - 1)[:, None]
    if G.dtype == object:
        fit, ok = fit_known_degree(nodes.ts, G, H, method=method), np.ones(len(G), dtype=bool)
    else:
        # a constant still off by V's error can make a fit fail (complex poles): such a
        # configuration's link equations get no weight; the final fit checks them all
        fit, ok = fit_masked(nodes.ts, G, H, method=method)
    delta, bound, perm, obs = _link_newton(fit, ok, lay, H, eps_out=eps_out, tol=tol)
    _apply_constants(state, table, start + delta, bound, eps_out=eps_out, tol=tol)
    return Calibration([absmax(delta)], to_float(delta), tol.calibration_margin * bound, perm, obs, lay)


def calibrate_polish(fit_rest, rest, state, calib, table, *, H, eps_out, tol):
    r"""Next Newton step of :func:`calibrate_constants`, on the learner's fit of the
    configurations ``rest`` (every block but the first, and the crosses) at the current
    constants. If every block's step is within ``tol.calibration_margin`` times its noise
    bound, Newton has converged: the constants and the fitted :math:`(\ell,\gamma)` are moved
    to first order and True is returned. Otherwise (a configuration so sensitive that the
    first step left the linear regime) only the constants move, and the caller refits.
    Either way each constant's error bound becomes that margin times its noise bound plus the
    step just taken (Newton contracts, so the remaining error is below the last step)."""
    d = table.d
    lay = calib.layout
    margin = tol.calibration_margin
    where = np.full(len(table), -1)
    where[rest] = np.arange(len(rest))
    rows = where[lay.rows]
    sub = subset_fit(fit_rest, rows)
    delta, bound, _, _ = _link_newton(sub, np.ones(len(rows), dtype=bool), lay, H, eps_out=eps_out, tol=tol,
                                      perm=calib.perm, obs=calib.obs)
    step = np.abs(to_float(delta))
    converged = bool(np.all(step <= margin * bound))
    if converged:
        per_config = np.repeat(delta, 2 * d - 1)
        cross_rows = where[table.cross(np.arange(1, table.B))]
        rows = np.concatenate([rows, cross_rows])
        per_config = np.concatenate([per_config, delta * table.mid])
        fit_rest.ell[rows] = fit_rest.ell[rows] + per_config[:, None] * fit_rest.shift[rows, 0]
        fit_rest.gamma[rows] = fit_rest.gamma[rows] + per_config[:, None] * fit_rest.shift[rows, 1]
    _apply_constants(state, table, state.const[lay.first] + delta, bound + step / margin, eps_out=eps_out, tol=tol)
    calib.steps.append(float(step.max()) if len(step) else 0.0)
    calib.change = calib.change + to_float(delta)
    calib.bound = margin * bound + step
    return converged


def fit_calibrated(nodes, state, design, rest, *, spec, tol, pre, calibrate):
    r"""Fit the configurations ``rest`` (all but block 1's) at their constants.

    With ``calibrate`` (the paper's budget, :math:`H'>0`, :math:`d>1`) the constants are first
    re-estimated from the links (:func:`calibrate_constants`), then refined by
    :func:`calibrate_polish` between refits. ``spec``: :class:`~.fitting.FitSpec`. Returns ``(fit,
    calibration or None)``.
    """
    H, errors = spec.H, spec.errors
    calib = None
    if calibrate:
        # paper budget: V^T q_k inherits V's error; re-estimate each block's constant
        # from the link equations, which hold only at the true constant
        calib = calibrate_constants(nodes, state, design.table, H=H, eps_out=errors.output, tol=tol,
                                    method=spec.method)
    if pre is not None:
        return fit_at_constants(nodes, state, rest, design.labels, spec=spec, tol=tol, pre=pre), calib
    fit = fit_at_constants(nodes, state, rest, design.labels, spec=spec, tol=tol)
    for _ in range(tol.calibration_refits if calib is not None else 0):
        if calibrate_polish(fit, rest, state, calib, design.table, H=H, eps_out=errors.output, tol=tol):
            break
        fit = fit_at_constants(nodes, state, rest, design.labels, spec=spec, tol=tol)
    return fit, calib
