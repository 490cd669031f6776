r"""The solves for :math:`W_h` and :math:`v_h`: weighted least squares of the labelled equations.

Used in: chapter 4 (the block solves :math:`\ell=u^\top w_{h,k}` with the links as extra
equations, :math:`v_h` from every configuration's residues, and
:math:`W_h=[w_{h,1}\cdots w_{h,d}][q_1\cdots q_d]^{-1}`) and chapter 5 (their first-order
error bounds and the error estimate).

Each equation is weighted by the inverse of its first-order error bound, so an
ill-conditioned configuration counts little; a row proved outside its own bound is weighted
out. :func:`block_lstsq` solves a block's :math:`2d-1` equations in closed form,
:func:`weighted_lstsq` any stack of weighted problems.
"""

from dataclasses import dataclass

import mpmath
import numpy as np

from ..._arith import solve, to_float
from ..tolerances import Tolerances
from ..heads import HeadMatrices
from ..heads import canonical_heads

__all__ = [
    "row_errors",
    "weighted_lstsq",
    "normal_pinv",
    "block_lstsq",
    "BlockSolution",
    "solve_blocks",
    "solve_v",
    "HeadMatrices",
    "assemble_W",
    "canonical_heads",
]

_POLICY = Tolerances.for_mode(exact=False)  # the least-squares fields are the same in both modes


def row_errors(errs, *, tol=_POLICY):
    """(B, m, H) error bounds as (B, H, m) row scales: non-finite ones weight their row out
    (``tol.huge``), zero ones are floored at ``tol.tiny`` (the weights stay finite)."""
    return np.where(np.isfinite(errs), np.maximum(errs, tol.tiny), tol.huge).transpose(0, 2, 1)


def normal_pinv(Aw, AwT):
    r""":math:`(A_w^\top A_w)^{-1}A_w^\top` for a stack of full-column-rank ``Aw`` (..., m, d).

    The inverse of the normal matrix times :math:`A_w^\top`: a batched matrix product,
    faster than a batched LU solve with m right-hand sides (measured at d = 64; a loop of
    LAPACK Cholesky solves was slower still, its threads contending with numpy's). The
    result serves the bounds and the refinement steps of :func:`weighted_lstsq`, which
    restore the solution's accuracy. A stack with a system left singular by its weights
    gets the SVD pseudo-inverse: that system's bounds come out huge, and the learner's
    checks raise.
    """
    try:
        return np.linalg.inv(AwT @ Aw) @ AwT
    except np.linalg.LinAlgError:
        return np.linalg.pinv(Aw)


def _refined_solve(Aw, pinv, bnd, b, *, tol):
    """Normal-equation solution with two refinement steps; QR (back substitution) for the
    systems where the steps do not contract, or with a residual to judge. Updates ``pinv``
    and ``bnd`` of those systems in place."""
    sol = (pinv @ b[..., None])[..., 0]
    step1 = (pinv @ (b - (Aw @ sol[..., None])[..., 0])[..., None])[..., 0]
    sol += step1
    step2 = (pinv @ (b - (Aw @ sol[..., None])[..., 0])[..., None])[..., 0]
    sol += step2
    # refinement contracts by about cond(A_w)^2 eps per step: where the second step is
    # not far below the solution's own error bound, the weights make A_w too
    # ill-conditioned for normal equations; QR for those systems
    slow = np.any(np.abs(step2) > tol.refinement * bnd, axis=-1)
    slow |= (np.abs(b - (Aw @ sol[..., None])[..., 0]) > 1.0).any(axis=-1)  # judged below: be exact
    if slow.any():
        Qf, R = np.linalg.qr(Aw[slow])
        pinv[slow] = np.linalg.solve(R, Qf.swapaxes(-1, -2))
        bnd[slow] = np.abs(pinv[slow]).sum(axis=-1)
        # the solution by back substitution: the explicit pinv product loses digits when
        # A_w is ill-conditioned (pinv serves only the bounds)
        sol[slow] = np.linalg.solve(R, Qf.swapaxes(-1, -2) @ b[slow][..., None])[..., 0]
    return sol


def _weighted_lstsq_mp(A, vals, e):
    """Exact mode: mpmath QR (LU when square) of every weighted system (weights from ``e``)."""
    B, m, H = vals.shape
    sol = np.empty((B, H, A.shape[2]), dtype=object)
    for b in range(B):
        for h in range(H):
            wgt = [1 / mpmath.mpf(float(x)) for x in e[b, h]]
            Am = mpmath.matrix([[A[b, i, j] * wgt[i] for j in range(A.shape[2])] for i in range(m)])
            ym = mpmath.matrix([vals[b, i, h] * wgt[i] for i in range(m)])
            x = mpmath.lu_solve(Am, ym) if m == A.shape[2] else mpmath.qr_solve(Am, ym)[0]
            sol[b, h] = [x[j] for j in range(A.shape[2])]
    return sol


def weighted_lstsq(A, vals, errs, *, tol=_POLICY):
    r"""Solve every :math:`A_b x = y_{b,h}` by least squares weighted by the rows' error bounds.

    ``A`` (B, m, d); ``vals`` and ``errs`` (B, m, H). Returns the solutions and their
    componentwise first-order error bounds, both (B, H, d): row :math:`i` is divided by
    ``errs[b, i, h]``, so each scaled row has error at most 1 and the bound is the row sum
    of :math:`|A_w^+|`. float64: batched normal equations with two refinement steps (QR
    where they do not contract); a row whose scaled residual exceeds what errors within the
    bounds allow, :math:`1+\sum_j|P_{ij}|` for the hat matrix :math:`P=A_wA_w^+`, is an
    outlier, weighted out, and the systems re-solved (at most twice). Exact mode: mpmath QR
    per system (the weights and bounds stay float64: they only rank the rows).
    """
    e = row_errors(errs, tol=tol)  # (B, H, m)
    Af = to_float(A)[:, None, :, :]
    for _ in range(tol.outlier_rounds):
        Aw = Af / e[..., None]  # (B, H, m, d)
        # normal equations (batched BLAS products, several times faster than batched QR here);
        # the rows u are random, so A_w is usually well conditioned and two steps of iterative
        # refinement recover the accuracy of QR; the systems where they do not, and those with
        # a residual to judge, are solved by QR (tests/test_learner.py compares)
        pinv = normal_pinv(Aw, Aw.swapaxes(-1, -2))  # (B, H, d, m)
        bnd = np.abs(pinv).sum(axis=-1)
        if vals.dtype == object:
            break
        b = vals.transpose(0, 2, 1) / e
        sol = _refined_solve(Aw, pinv, bnd, b, tol=tol)
        # with every scaled row error within 1, residual r = (I - P) e with the hat matrix
        # P = A_w A_w^+, so |r_i| <= 1 + sum_j |P_ij|: a row beyond that is provably outside
        # its own error bound (its first-order bound failed). It is weighted out and the
        # systems re-solved. P is formed only for systems with a residual above 1.
        res = np.abs(b - (Aw @ sol[..., None])[..., 0])
        cand = (res > 1.0).any(axis=-1)
        if not cand.any() or A.shape[1] <= A.shape[2]:
            break
        lim = 1.0 + np.abs(Aw[cand] @ pinv[cand]).sum(axis=-1)
        outlier = np.zeros(res.shape, dtype=bool)
        outlier[cand] = res[cand] > lim
        if not outlier.any():
            break
        e = np.where(outlier, e * tol.outlier_weight, e)
    if vals.dtype != object:
        return sol, bnd
    return _weighted_lstsq_mp(A, vals, e), bnd


@dataclass
class _ArrowWeights:
    """The closed form of :func:`block_lstsq` for error bounds ``e`` (B, H, 2d - 1)."""

    al: np.ndarray
    be: np.ndarray
    lam: np.ndarray
    S: np.ndarray


def _arrow_weights(e, d):
    s = e.min(axis=2, keepdims=True)  # weights relative to the best row: no overflow
    a1 = (s[..., 0] / e[..., 0]) ** 2
    aj, bj = (s / e[..., 1:d]) ** 2, (s / e[..., d:]) ** 2
    den = aj + bj
    with np.errstate(invalid="ignore", divide="ignore"):  # a row pair with no weight: no information
        al, be = np.where(den > 0, aj / den, 0.0), np.where(den > 0, bj / den, 0.0)
        c = aj * be
        S = a1 + c.sum(axis=2)
        lam = np.concatenate([a1[..., None], -c, c], axis=2) / S[..., None]  # row of theta_1 (B, H, m)
    return _ArrowWeights(al, be, lam, S)


def _arrow_theta(yv, wt, d, exact):
    r""":math:`\theta=Uw` of the weighted block problem: ``(theta1, thetaj)``."""
    B, H = yv.shape[:2]
    y1, yj, zj = yv[..., 0], yv[..., 1:d], yv[..., d:]
    lam, be = wt.lam, wt.be
    # theta_1 = y_1 + sum_j lam_j (z_j - y_j - y_1) and theta_j = y_j + be_j (z_j - theta_1 - y_j):
    # the formulas of block_lstsq rearranged so that rounded weights still give the exact solution of
    # consistent equations (exact mode: weights in float64, values in mpmath)
    r1 = zj - yj - y1[..., None]
    theta1 = y1 + ((lam[..., d:] * r1).sum(axis=2) if not exact else np.array(
        [[mpmath.fdot(lam[b, h, d:].tolist(), r1[b, h].tolist()) for h in range(H)] for b in range(B)],
        dtype=object).reshape(B, H))
    thetaj = yj + be * (zj - theta1[..., None] - yj)
    return theta1, thetaj


def _arrow_outliers(e, wt, le, E, res, d):
    """Rows whose scaled residual exceeds the hat-matrix limit :math:`1+\\sum_c|P_{rc}|` (closed
    form: rows of B L are lam (y_1), -be_j lam + al_j e_yj + be_j e_zj (y_j), al_j (lam + e_yj) +
    be_j e_zj (z_j))."""
    al, be, lam = wt.al, wt.be, wt.lam
    eyj, ezj = e[..., 1:d], e[..., d:]
    rest = E - le[..., 1:d] - le[..., d:]
    lim_y = be * rest + np.abs(al - be * lam[..., 1:d]) * eyj + np.abs(be - be * lam[..., d:]) * ezj
    lim_z = al * rest + np.abs(al + al * lam[..., 1:d]) * eyj + np.abs(be + al * lam[..., d:]) * ezj
    lim = 1.0 + np.concatenate([E, lim_y, lim_z], axis=2) / e
    return res > lim


def block_lstsq(U, vals, errs, *, tol=_POLICY):
    r"""Weighted least squares of each block's base and link equations, in closed form.

    ``U`` (B, d, d): a block's base rows :math:`u_1..u_d`; ``vals`` and ``errs`` (B, 2d-1, H):
    the values and error bounds of the d base equations :math:`u_j^\top w=y_j` then the d-1
    link equations :math:`(u_1+u_j)^\top w=z_j` (j = 2..d). Returns the solutions and their
    componentwise first-order error bounds, both (B, H, d): the weighted problem of
    :func:`weighted_lstsq`, in :math:`O(d^2)` per system instead of :math:`O(d^3)`, plus
    one inverse of :math:`U` per block shared by the heads.

    Notes
    -----
    In the coordinates :math:`\theta=Uw` (:math:`\theta_j=u_j^\top w`, a bijection since the
    :math:`u_j` are independent) the equations are :math:`\theta_j=y_j` and
    :math:`\theta_1+\theta_j=z_j`. With weights :math:`a_j=e_{y_j}^{-2}`,
    :math:`b_j=e_{z_j}^{-2}`, the normal equations have an arrow matrix; eliminating
    :math:`\theta_2..\theta_d`,

    .. math:: \theta_1=\frac{a_1y_1+\sum_{j\ge2}c_j(z_j-y_j)}{a_1+\sum_{j\ge2}c_j},\quad
              c_j=\frac{a_jb_j}{a_j+b_j},\qquad
              \theta_j=\alpha_jy_j+\beta_j(z_j-\theta_1),\quad
              \alpha_j=\frac{a_j}{a_j+b_j},\ \beta_j=\frac{b_j}{a_j+b_j}

    (:math:`z_j-y_j` measures :math:`\theta_1` with weight :math:`c_j`). So
    :math:`w=U^{-1}\theta=G\,(y,z)` with :math:`G=g\,\lambda^\top+[\,0\mid\alpha_j\bar u_j\mid
    \beta_j\bar u_j\,]`, where :math:`\bar u_j` are the columns of :math:`U^{-1}`,
    :math:`\lambda` the row of :math:`\theta_1` and :math:`g=\bar u_1-\sum_j\beta_j\bar u_j`;
    the bound of :math:`w_i` is :math:`\sum_r|G_{ir}|e_r`, here bounded by
    :math:`|g_i|\sum_r|\lambda_r|e_r+\sum_j|\bar u_{ij}|(\alpha_je_{y_j}+\beta_je_{z_j})`
    (matrix products; at most 1.6 times the exact sum, median 1.01, over the benchmark's
    runs). Outliers as in :func:`weighted_lstsq`: a row whose scaled residual exceeds
    :math:`1+\sum_c|P_{rc}|` (hat matrix :math:`P`, here in closed form) is weighted out and
    the systems re-solved. float64 and exact mode alike (the weights and bounds are float64;
    in exact mode :math:`\theta` and the solve with :math:`U` are in mpmath).
    """
    d = U.shape[1]
    exact = vals.dtype == object
    e = row_errors(errs, tol=tol)  # (B, H, m)
    Ui = np.linalg.inv(to_float(U))  # (B, d, d): columns ubar_j
    yv = vals.transpose(0, 2, 1)  # (B, H, m)
    y1, yj, zj = yv[..., 0], yv[..., 1:d], yv[..., d:]
    for _ in range(tol.outlier_rounds):
        wt = _arrow_weights(e, d)
        al, be = wt.al, wt.be
        theta1, thetaj = _arrow_theta(yv, wt, d, exact)
        theta = np.concatenate([theta1[..., None], thetaj], axis=2)  # (B, H, d)
        # first-order bounds: |G| e with G = g lam^T + [0 | al_j ubar_j | be_j ubar_j], bounded by
        # the triangle inequality on its two parts (matrix products instead of an (H, d, 2d-1)
        # array per block; at most 1.6x the exact row sums, median 1.01, over the benchmark runs)
        g = Ui[:, :, 0][:, None, :] - (Ui[:, :, 1:] @ be.transpose(0, 2, 1)).transpose(0, 2, 1)  # (B, H, d)
        le = np.abs(wt.lam) * e
        E = le.sum(axis=2, keepdims=True)
        bnd = np.abs(g) * E + (np.abs(Ui[:, :, 1:]) @ (al * e[..., 1:d] + be * e[..., d:]).transpose(0, 2, 1)
                               ).transpose(0, 2, 1)
        bnd = np.where(np.isfinite(wt.S)[..., None] & (wt.S > 0)[..., None], bnd, np.inf)
        # scaled residuals of every row
        res = np.concatenate([
            to_float(y1 - theta1)[..., None], to_float(yj - thetaj), to_float(zj - theta1[..., None] - thetaj)], axis=2)
        res = np.abs(res) / e
        if not (res > 1.0).any():
            break
        outlier = _arrow_outliers(e, wt, le, E, res, d)
        if not outlier.any():
            break
        e = np.where(outlier, e * tol.outlier_weight, e)
    if exact:
        w = np.empty((vals.shape[0], vals.shape[2], d), dtype=object)
        for b in range(len(w)):
            w[b] = solve(U[b], theta[b].T).T
    else:
        w = (Ui[:, None] @ theta[..., None])[..., 0]
        w = w + (Ui[:, None] @ (theta - (U[:, None] @ w[..., None])[..., 0])[..., None])[..., 0]  # one refinement
    return w, bnd


@dataclass
class BlockSolution:
    r"""The block solves: ``w`` (d, H, d) :math:`w_{h,k}=W_hq_k` in each block's labels, ``v1``
    (H, d) block 1's :math:`v_h`, and their componentwise first-order bounds ``err_w``, ``err_v1``."""

    w: np.ndarray
    v1: np.ndarray
    err_w: np.ndarray
    err_v1: np.ndarray


def solve_blocks(design, eq, *, tol):
    r"""Solve every block's labelled equations (:class:`~.labelling.BlockEquations`) for
    :math:`w_{h,k}`, and block 1's for :math:`v_h`.

    The links are d - 1 more equations :math:`(u_{k,1}+u_{k,j})^\top w=\ell_{link}` besides the
    paper's d base equations: weighted least squares (:func:`block_lstsq`), batched over
    blocks, heads and the two unknowns (w from :math:`\ell` in every block, v from
    :math:`\gamma` in block 1 only: the other blocks' v estimates are not needed, crosses
    label blocks by their w).
    """
    B = design.table.B  # blocks: d, or d + 1 with score biases
    U = design.U
    vals = np.concatenate([eq.ell, -eq.gamma[:1]])  # (B+1, 2d-1, H)
    errs = np.concatenate([eq.err_ell, eq.err_gamma[:1]])
    sol, bnd = block_lstsq(np.concatenate([U, U[:1]]), vals, errs, tol=tol)  # (B+1, H, d) each
    return BlockSolution(sol[:B], sol[B], bnd[:B], bnd[B])


def solve_v(design, eq, perm, state, observed, *, tol):
    r""":math:`v_h` from the residues of every configuration, :math:`\gamma=-u^\top v_h`.

    Block :math:`k`'s heads are labelled like block 1 by ``perm`` (from the crosses): the
    d(2d-1) base and link rows of the blocks plus the d-1 crosses (their heads ``observed``),
    weighted least squares. Returns ``v`` and its componentwise error bounds, both (H, d).
    """
    B, pb, H = eq.gamma.shape  # B blocks (d, or d + 1 with score biases), 2d - 1 rows each
    d = design.table.d
    kk = np.arange(B)[:, None, None]
    jj = np.arange(pb)[None, :, None]
    g = eq.gamma[kk, jj, perm[:, None, :]].reshape(-1, H)  # (B(2d-1), H) in block 1's labels
    eg = eq.err_gamma[kk, jj, perm[:, None, :]].reshape(-1, H)
    cr = design.table.cross(np.arange(1, B))
    r_ = np.arange(len(cr))[:, None]
    gc, egc = state.gamma[cr][r_, observed], state.err_gamma[cr][r_, observed]
    A = np.concatenate([design.u[: B * pb], design.u[cr]])
    y, e = -np.concatenate([g, gc]), np.concatenate([eg, egc])
    rows = tol.v_rows_per_dim * d
    if y.dtype != object and len(A) > rows:
        # float64: the most accurate rows of each head carry nearly all the weight
        keep = np.argsort(e, axis=0)[:rows].T  # (H, rows)
        sol, bnd = weighted_lstsq(A[keep], y.T[np.arange(H)[:, None], keep][..., None],
                                  e.T[np.arange(H)[:, None], keep][..., None], tol=tol)
        return sol[:, 0], bnd[:, 0]
    sol, bnd = weighted_lstsq(A[None], y[None], e[None], tol=tol)
    return sol[0], bnd[0]


def assemble_W(design, blocks, crosses):
    r""":math:`W_h=[w_{h,1}\cdots w_{h,d}]\,Q^{-1}`, block k's heads relabelled by the crosses."""
    d, H = design.table.d, crosses.perm.shape[1]
    w, ew, perm = blocks.w, blocks.err_w, crosses.perm
    Wcols = np.empty((H, d, d), dtype=w.dtype)  # [h, :, k]
    Ecols = np.zeros((H, d, d))
    for h in range(H):
        for k in range(d):
            Wcols[h, :, k] = w[k, perm[k, h]]
            Ecols[h, :, k] = ew[k, perm[k, h]]
    Q = design.Q
    Qinv = np.abs(np.linalg.inv(to_float(Q)))
    Wm = np.empty((H, d, d), dtype=w.dtype)
    for h in range(H):
        Wm[h] = solve(Q.T, Wcols[h].T).T
    return HeadMatrices(Wm, Ecols, Qinv)


