r"""The long design's solves: each group's regression (:func:`regress_y`), the links between groups,
the heads (:func:`solve_heads`), their error estimate and the check of :math:`V`.

Used in: chapter 5b (long queries), chapter 7 and chapter 9 (:func:`regress_positions` and
:func:`link_group` serve ``rank=`` too).
"""

import itertools
from dataclasses import dataclass

import numpy as np
from scipy.special import expit

from ...errors import CheckFailedError, IllConditionedError, UnmatchedHeadsError
from ..certificate import Parameters
from ..samples import noise_sd
from .passes import _unit

__all__ = ["regress_y", "regress_positions", "link_groups", "link_group", "solve_heads", "estimate_error", "AnswerSpread", "check_V"]


def regress_y(Q, fit, *, tol, intercept=False):
    r""":math:`y_h=W_h^\top u` from :math:`c_{h,j}=-y_h^\top q_j` over the group's configurations,
    weighted by the positions' standard deviations; rows beyond ``tol.outlier_sigma`` standard
    deviations are dropped (at most ``tol.outlier_rounds`` times). Returns ``(Y, covs, used)``:
    ``Y`` (H, d), the covariance of every row (H, d, d) and the rows used (H, m) bool. With
    ``intercept`` (score biases: :math:`c_{h,j}=-y_h^\top q_j-\kappa_h`,
    :math:`\kappa_h=u^\top c_h`) every row of ``Y`` is :math:`(y_h,\kappa_h)`, (H, d + 1), and its
    covariance (H, d + 1, d + 1).

    Raises
    ------
    IllConditionedError
        Fewer than :math:`d+1` configurations (:math:`d+2` with the intercept) left for some head, fewer than
        ``tol.regression_keep`` of them kept, or a reduced :math:`\chi^2` above
        ``tol.regression_chi2`` (mislabelled heads: the positions are not linear in :math:`q`).
    """
    m, H = fit.c.shape
    X = np.column_stack([Q, np.ones(m)]) if intercept else Q
    Y, covs, used = np.zeros((H, X.shape[1])), np.zeros((H, X.shape[1], X.shape[1])), np.zeros((H, m), bool)
    for h in range(H):
        y, cov, keep, red = regress_positions(X, fit.c[:, h], fit.c_sd[:, h], tol=tol, what=f"head {h + 1}'s")
        if red > tol.regression_chi2 or keep.sum() < tol.regression_keep * m:
            raise IllConditionedError(
                f"head {h + 1}'s step positions in a group are not linear in q (reduced chi2 {red:.3g} over "
                f"{keep.sum()} of {m} configurations): some configurations' heads are mislabelled")
        Y[h], covs[h], used[h] = y, cov * max(1.0, red), keep
    return Y, covs, used


def regress_positions(X, c, c_sd, *, tol, what):
    r"""One head's weighted least squares :math:`c_j\approx-x_j^\top y` over the rows ``X`` (m, w)
    (the configurations' :math:`q`, with a column of ones for an intercept, or their coordinates
    in a row space, :mod:`~.rank`), rows beyond ``tol.outlier_sigma`` standard deviations dropped
    (at most ``tol.outlier_rounds`` times). Returns ``(y, cov, keep, reduced)``: the solution, its
    covariance (unscaled), the rows kept and the reduced :math:`\chi^2`.

    Raises
    ------
    IllConditionedError
        Fewer than :math:`w+1` rows left (``what`` names the head in the message)."""
    m, w = X.shape
    keep = np.ones(m, bool)
    for _ in range(tol.outlier_rounds):
        A = -X[keep] / c_sd[keep, None]
        y, *_ = np.linalg.lstsq(A, c[keep] / c_sd[keep], rcond=None)
        resid = np.abs(-X @ y - c) / c_sd
        new = resid <= tol.outlier_sigma * max(1.0, np.sqrt(np.median(resid[keep] ** 2)))
        if np.array_equal(new, keep):
            break
        keep = new
        if keep.sum() < w + 1:
            raise IllConditionedError(
                f"only {keep.sum()} of {m} configurations of a group agree on {what} steps "
                f"(need {w + 1}): the fits are unreliable at this output error")
    A = -X[keep] / c_sd[keep, None]
    red = float(np.sum((A @ y - c[keep] / c_sd[keep]) ** 2)) / max(1, keep.sum() - w)
    return y, np.linalg.inv(A.T @ A), keep, red


def link_groups(ctx, U, groups, scale, *, rng):
    r"""Match every group's heads to group 1's: three configurations with :math:`u=u_1+u_k`; for
    every pairing :math:`\pi` the predicted curve :math:`V^\top q+\sum_h(\gamma_{h,1}+
    \gamma_{\pi(h),k})\sigma(-(y_{h,1}+y_{\pi(h),k})^\top q-z)` is compared with the answers
    (weighted :math:`\chi^2`); with score biases the positions add
    :math:`-(\kappa_{h,1}+\kappa_{\pi(h),k})` (:math:`\kappa` is linear in :math:`u`) and the
    constant :math:`\beta`. Returns the permutations (d, H) and the margins (runner-up χ² over
    the best's, inf with one head).

    Raises
    ------
    UnmatchedHeadsError
        The best pairing does not beat the runner-up by ``tol.link_margin``.
    """
    d, H = ctx.d, ctx.H
    if H == 1:  # one head: nothing to match, no link asked
        return np.zeros((d, 1), int), np.full(d, np.inf)
    perms, margins = [np.arange(H)], [np.inf]
    for k in range(1, d):
        perm, margin = link_group(ctx, U[0] + U[k], groups[0], groups[k], scale, k=k, rng=rng)
        perms.append(perm)
        margins.append(margin)
    return np.array(perms), np.array(margins)


def link_group(ctx, u, first, group, scale, *, k, rng):
    r"""One link of :func:`link_groups`: ``tol.link_configs`` configurations with :math:`u=u_1+u_k`
    (``u``) matched to the heads of group 1 (``first``) and group :math:`k` (``group``, its ``g``
    and ``Y``). Returns ``(perm, margin)``.

    Raises
    ------
    UnmatchedHeadsError
        The best pairing does not beat the runner-up by ``tol.link_margin``."""
    d, H, tol = ctx.d, ctx.H, ctx.tol
    all_perms = np.array(list(itertools.permutations(range(H))))
    g1, Y1, gk, Yk = first["g"], first["Y"], group["g"], group["Y"]
    chi = np.zeros(len(all_perms))
    for _ in range(tol.link_configs):
        q = _unit(rng, d) * scale
        F, sd = ctx.config(u, q)
        Vq = ctx.ends(u, q)[0]
        heights = g1[None, :] + gk[all_perms]  # (P, H)
        qb = ctx.family.row(q)  # with affine positions a row of Y is (y, kappa)
        pos = -(Y1 @ qb)[None, :] - (Yk @ qb)[all_perms]  # (P, H)
        pred = Vq + np.einsum("prh,ph->pr", expit(pos[:, None, :] - ctx.z[None, :, None]), heights)
        chi += np.sum(((pred - F[None, :]) / sd[None, :]) ** 2, axis=1)
    order = np.argsort(chi)
    margin = chi[order[1]] / max(chi[order[0]], 1e-300) if H > 1 else np.inf
    if margin < tol.link_margin:
        raise UnmatchedHeadsError(
            f"link(1,{k + 1}): the best pairing of the heads of groups 1 and {k + 1} (chi2 {chi[order[0]]:.3g}) "
            f"is within a factor {tol.link_margin:g} of the runner-up ({chi[order[1]]:.3g}): heads too alike")
    return all_perms[order[0]], margin


def solve_heads(U, groups, perms):
    r""":math:`W_h=U^{-1}Y_h` and :math:`v_h=-U^{-1}\Gamma_h`, the rows of :math:`Y_h` and
    :math:`\Gamma_h` being group :math:`k`'s :math:`y` and :math:`\gamma` of the head matched to
    head :math:`h` of group 1. With score biases the rows of :math:`Y_h` are
    :math:`(y_{h,k},\kappa_{h,k})` and :math:`U^{-1}Y_h=[W_h\;c_h]` (:math:`\kappa_{h,k}=u_k^\top c_h`).
    Returns ``(W, v, Uinv)``, ``W`` (H, d, d) or with biases (H, d, d + 1)."""
    d = U.shape[0]
    H = perms.shape[1]
    Uinv = np.linalg.inv(U)
    Yh = np.array([[groups[k]["Y"][perms[k][h]] for k in range(d)] for h in range(H)])  # (H, d, d[+1])
    Gh = np.array([[groups[k]["g"][perms[k][h]] for k in range(d)] for h in range(H)])  # (H, d)
    W = np.einsum("ij,hjk->hik", Uinv, Yh)  # with biases (H, d, d + 1): [W_h  c_h]
    v = -Gh @ Uinv.T
    return W, v, Uinv


def estimate_error(W, v, Uinv, groups, perms, *, tol, beta=None, beta_sd=0.0):
    r"""The relative parameter error to expect: the covariances of :math:`y_{h,k}` (regression)
    and :math:`\gamma_{h,k}` (the group fits' inverse Fisher matrices) propagated through
    :math:`W_h=U^{-1}Y_h`, :math:`v_h=-U^{-1}\Gamma_h` (groups independent):
    :math:`E\|\Delta W_h\|_F^2=\sum_k\|U^{-1}e_k\|^2\operatorname{tr}\operatorname{cov}y_{h,k}`,
    :math:`E\|\Delta v_h\|^2=\sum_k\|U^{-1}e_k\|^2\operatorname{var}\gamma_{h,k}`; the largest
    over heads of the two relative root-mean-square errors, times ``tol.estimate_factor``.

    With score biases (``W`` of :func:`solve_heads`, (H, d, d + 1)) also
    :math:`E\|\Delta c_h\|^2=\sum_k\|U^{-1}e_k\|^2\operatorname{var}\kappa_{h,k}` relative to
    :math:`\max(\|c_h\|,\|W_h\|)` and the offset's standard deviation ``beta_sd`` relative to
    :math:`\max(|\beta|,\max_h\|v_h\|)`, the measure of :func:`~attnlearn.learner.paper.bias.bias_error`."""
    d, H = len(groups), perms.shape[1]
    col = np.sum(Uinv**2, axis=0)  # ||U^-1 e_k||^2
    worst = 0.0
    for h in range(H):
        covs = [groups[k]["covY"][perms[k][h]] for k in range(d)]
        trW = sum(col[k] * np.trace(covs[k][:d, :d]) for k in range(d))
        trv = sum(col[k] * groups[k]["g_sd"][perms[k][h]] ** 2 for k in range(d))
        nW = np.linalg.norm(W[h, :, :d])
        worst = max(worst, np.sqrt(trW) / nW, np.sqrt(trv) / max(np.linalg.norm(v[h]), 1e-300))
        if W.shape[2] > d:  # the score bias c_h
            trc = sum(col[k] * covs[k][d, d] for k in range(d))
            worst = max(worst, np.sqrt(trc) / max(np.linalg.norm(W[h, :, d]), nW))
    if beta is not None:
        worst = max(worst, beta_sd / max(abs(beta), np.max(np.linalg.norm(v, axis=1)), 1e-300))
    return tol.estimate_factor * worst


@dataclass
class AnswerSpread:
    r"""The covariances behind :func:`estimate_error`, as the joint spread of the model's answers:
    what the held-out queries confront (:func:`~attnlearn.learner.certificate.confront_spread`).

    Attributes
    ----------
    model : MultiHeadAttention or AttentionLayer
        The heads of :func:`solve_heads` (before :func:`~attnlearn.canonical.canonical` orders them).
    Uinv : ndarray (d, d)
        :func:`solve_heads`' :math:`U^{-1}`.
    groups : list of dict
        The groups, their ``covY`` (H, w, w), w = d or d + 1 with score biases, and ``g_sd`` (H,).
    perms : ndarray (d, H)
        :func:`link_groups`' permutations: ``perms[k][h]`` is group k's head matched to head h.
    beta_sd : float
        The offset's standard deviation (score biases; 0 without).
    absolute, relative : float
        The answers' noise model (:func:`~attnlearn.learner.samples.noise_sd`).
    rounding : float
        ``LongTolerances.rounding``.

    Notes
    -----
    An answer's gradient with respect to :math:`W_h` is a :math:`d\times d` matrix :math:`G`
    (with score biases :math:`[G\;g_c]`, :math:`d\times(d+1)`, for :math:`[W_h\;c_h]`); with
    :math:`W_h=U^{-1}Y_h`, :math:`\langle G,\Delta W_h\rangle=\sum_kb_k^\top\Delta y_{h,k}`,
    :math:`b_k` the rows of :math:`B=U^{-\top}G`; with :math:`v_h=-U^{-1}\Gamma_h` the
    gradient :math:`g_v` enters through :math:`a=U^{-\top}g_v`. Every held-out answer carries
    the same parameter errors, so their errors are correlated; with the groups independent and,
    within a group, the heads' :math:`y` and :math:`\gamma` independent (what
    :func:`estimate_error` assumes too: the group fits keep only their standard deviations), the
    covariance of answers :math:`i,i'` is

    .. math:: K_{ii'}=\sum_h\sum_k\Big(b_{i,h,k}^\top\operatorname{cov}(y_{h,k})\,b_{i',h,k}
              +a_{i,h,k}a_{i',h,k}\operatorname{var}\gamma_{h,k}\Big)+\operatorname{var}\beta
              +\delta_{ii'}s_i^2,

    :math:`s_i` the answer's own noise (:func:`~attnlearn.learner.samples.noise_sd` at its length).

    Used in: chapters 5b and 7 (through ``finish``).
    """

    model: object
    Uinv: np.ndarray
    groups: list
    perms: np.ndarray
    beta_sd: float
    absolute: float
    relative: float
    rounding: float

    def residuals(self, data):
        """The residuals of the model on ``data`` and their covariance.

        Parameters
        ----------
        data : list of (ndarray (n, N, d), ndarray (n,))
            Queries and the oracle's answers (:meth:`~attnlearn.learner.certificate.QueryLog.batches`).

        Returns
        -------
        r : ndarray (m,)
            Answer minus the model's, over every batch in order.
        K : ndarray (m, m)
            Their first-order covariance (Notes).
        """
        family = Parameters(self.model)
        theta = family.pack(self.model)
        r, J, noise = [], [], []
        for Xs, y in data:
            f, Jb = family.answers(theta, Xs)
            r.append(y - f)
            J.append(Jb)
            noise.append(noise_sd(f, absolute=self.absolute, relative=self.relative, length=Xs.shape[1],
                                  rounding=self.rounding) ** 2)
        r, J = np.concatenate(r), np.concatenate(J)
        n, (H, d) = len(r), (family.H, family.d)
        K = np.diag(np.concatenate(noise)) + self.beta_sd**2
        for h in range(H):
            block = J[:, h * family.per:(h + 1) * family.per]
            G = block[:, :d * d].reshape(n, d, d)
            if family.biased:  # [W_h c_h]: the score bias' gradient is the last column
                G = np.concatenate([G, block[:, d * d + d:, None]], axis=2)
            B = np.einsum("ik,nij->nkj", self.Uinv, G)  # (n, d, w): row k is b_k
            a = block[:, d * d:d * d + d] @ self.Uinv  # (n, d)
            for k in range(d):
                j = self.perms[k][h]
                K += B[:, k] @ self.groups[k]["covY"][j] @ B[:, k].T
                K += np.outer(a[:, k], a[:, k]) * self.groups[k]["g_sd"][j] ** 2
        return r, K


def check_V(v, V, estimate):
    r"""The heads must add up to the :math:`V=\sum_hv_h` of the one-token queries (asked apart):
    :math:`\|\sum_h\hat v_h-V\|\le` 10 times the estimate times :math:`\max_h\|\hat v_h\|`
    (the held-out check's factor).

    Raises
    ------
    CheckFailedError
    """
    gap = np.linalg.norm(v.sum(axis=0) - V) / max(np.max(np.linalg.norm(v, axis=1)), 1e-300)
    if not gap <= 10 * estimate:
        raise CheckFailedError(f"the recovered v_h add up to V only within {gap:.2e} (relative), more than 10 x the "
                               f"error estimate {estimate:.1e}: some heads are mislabelled")
