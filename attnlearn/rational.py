r"""Rational head separation: poles and residues of the copies family (DESIGN §4.1-4.2).

Used in: chapter 3 (introduced: the rational function, interpolation, the rank that
reveals the canonical head count), chapters 4-6 (inside :func:`attnlearn.learn`).

For tokens :math:`x, q` and :math:`t\ge 1` copies of :math:`q`, the query
:math:`S(x,q,t)=(x,q,\dots,q)` returns

.. math:: F(t)=V^\top q+\sum_h\frac{\gamma_h}{1+\rho_h t},\qquad
          \rho_h=e^{\ell_h},\ \ell_h=u^\top W_h q,\ \gamma_h=-u^\top v_h,\ u=q-x.

With :math:`c=V^\top q` known, :math:`G=F-c=P/Q`, :math:`\deg P\le n-1`,
:math:`Q(t)=\prod_h(1+\rho_h t)`, :math:`Q(0)=1`: :math:`2n` unknowns fixed by the
samples :math:`t=1,\dots,2n`. With :math:`s` copies of :math:`x` in front the same function is
sampled at :math:`t/s`; :func:`ratio_nodes` uses this for better-conditioned nodes (chapter 3).
The fitting functions take any positive nodes (ints, floats or fractions).
"""

import functools
from fractions import Fraction

import mpmath
import numpy as np

from ._arith import to_float
from .errors import InconsistentHeadCountError, PoleError

__all__ = [
    "copies_sequences",
    "ratio_nodes",
    "RationalFit",
    "fit_known_degree",
    "fit_min_degree",
    "fit_checked",
    "check_residuals",
    "loewner_matrix",
    "jacobian",
    "gauss_newton_mp",
]


def copies_sequences(x, q, t, *, s=1):
    r"""The queries :math:`S(x,q,t)` for many configurations at once.

    Parameters
    ----------
    x, q : array, shape (C, d)
        First token and final (repeated) token of each configuration.
    t : int
        Number of copies of ``q``.
    s : int, keyword-only
        Number of copies of ``x`` in front (1 in the paper's family; the ratio nodes of
        :func:`ratio_nodes` use more).

    Returns
    -------
    array, shape (C, s + t, d)

    Notes
    -----
    With :math:`s` copies of :math:`x` the same algebra as for :math:`s=1` gives
    :math:`F=V^\top q+\sum_h\gamma_h/(1+\rho_h\,t/s)`: the node is the ratio
    :math:`\tau=t/s` (chapter 3).
    """
    x = np.asarray(x)
    q = np.asarray(q)
    out = np.empty((x.shape[0], s + t, x.shape[1]), dtype=np.result_type(x, q))
    out[:, :s] = x[:, None, :]
    out[:, s:] = q[:, None, :]  # broadcast: one pass over the output
    return out


def ratio_nodes(n):
    r"""``2n`` nodes :math:`\tau=t/s` (``(s, t)`` pairs, :math:`s+t\le 2n+1`) spread evenly in
    :math:`\log\tau` around 1.

    The poles sit at :math:`\tau=-e^{-\ell_h}` with :math:`\ell_h` spread symmetrically
    around 0, so nodes symmetric in :math:`\log\tau` see every pole; the paper's
    :math:`\tau=1..2n` see only :math:`\ell\lesssim 0` well. Same number of queries, none
    longer than the paper's :math:`2n+1` (the pair :math:`n/(n+1)`, :math:`(n+1)/n` has exactly that
    length); measured in chapter 3 (about :math:`10^2` times
    smaller errors at :math:`n=3` and :math:`10^4` at :math:`n=4` in float64). Used by
    :func:`attnlearn.learn` with ``nodes="ratios"`` (the default in exact mode and with
    ``robust=True``).
    """
    cands = sorted({Fraction(t, s) for s in range(1, 2 * n + 1) for t in range(1, 2 * n + 1) if s + t <= 2 * n + 1})
    # the two nodes closest to 1, n/(n+1) and (n+1)/n, are the longest queries: 2n + 1 as in the paper
    out = [Fraction(n, n + 1), Fraction(n + 1, n)]
    target = np.exp(np.linspace(-1, 1, 2 * n) * np.log(n + 0.5))
    for x in np.concatenate([target[: n - 1], target[n + 1:]]):
        out.append(min((c for c in cands if c not in out), key=lambda c: abs(np.log(float(c)) - np.log(x))))
    return [(c.denominator, c.numerator) for c in sorted(out)]


class RationalFit:
    r"""Poles and residues of :math:`G(t)=\sum_h\gamma_h/(1+e^{\ell_h}t)` for C configurations.

    Attributes
    ----------
    ell, gamma : array, shape (C, n)
        :math:`\ell_h=\log\rho_h` sorted increasingly per configuration, and the residues.
    sens : array, shape (C, 2, n)
        First-order sensitivity: ``sens[c, 0, h]`` bounds :math:`|\delta\ell_h|` and
        ``sens[c, 1, h]`` bounds :math:`|\delta\gamma_h|` per unit of the largest sample
        error (row sums of :math:`|J^{-1}|`, :func:`jacobian`).
    residual : array, shape (C,)
        Largest refit residual :math:`|G(t_i)-\sum_h\gamma_h/(1+\rho_h t_i)|`.
    shift : array, shape (C, 2, n), float64
        First-order change of :math:`(\ell,\gamma)` per unit increase of the subtracted
        constant :math:`c` in :math:`G=F-c`, i.e. :math:`-J^{+}\mathbf 1` (used to calibrate
        the block constants from the links, chapter 4).
    """

    def __init__(self, ell, gamma, sens, residual, shift=None):
        self.ell = ell
        self.gamma = gamma
        self.sens = sens
        self.residual = residual
        self.shift = np.zeros(np.shape(sens)) if shift is None else shift

    @property
    def n(self):
        return self.ell.shape[1]


def jacobian(t, ell, gamma):
    r"""Jacobian of the samples :math:`G(t_i)` with respect to :math:`(\ell_1..\ell_n,\gamma_1..\gamma_n)`.

    .. math:: \frac{\partial G(t_i)}{\partial\gamma_h}=\frac1{1+\rho_h t_i},\qquad
              \frac{\partial G(t_i)}{\partial\ell_h}=-\frac{\gamma_h\rho_h t_i}{(1+\rho_h t_i)^2}.

    Shapes: ``t`` (m,), ``ell`` and ``gamma`` (C, n); returns (C, m, 2n), float64.
    """
    return _model_and_jacobian(t, ell, gamma)[1]


def _model_and_jacobian(t, ell, gamma, *, jac=True):
    r""":math:`\sum_h\gamma_h/(1+\rho_ht_i)` (C, m) and, if ``jac``, :func:`jacobian` (C, m, 2n).

    A loop over the n heads of operations on (C, m) arrays: faster than broadcasting over a
    short trailing axis of length n and reducing it."""
    t = np.asarray(t, dtype=float)[None, :]
    rho = np.exp(ell)
    C, n = ell.shape
    model = np.zeros((C, t.shape[1]))
    J = np.empty((C, t.shape[1], 2 * n)) if jac else None
    for h in range(n):
        rt = rho[:, h:h + 1] * t
        den = 1.0 + rt
        gd = gamma[:, h:h + 1] / den  # one rounding: the residual G - model limits the polish
        model += gd
        if jac:
            J[:, :, n + h] = 1.0 / den
            J[:, :, h] = -gd * rt / den
    return model, J


@functools.lru_cache(maxsize=32)
def _lagrange_denominators(t):
    r""":math:`\prod_{k\ne i}(t_i-t_k)` for every node (cached per node set)."""
    t = np.asarray(t, dtype=float)
    return np.array([np.prod([t[i] - t[k] for k in range(len(t)) if k != i]) for i in range(len(t))])


def _jacobian_inverse_square(t, ell, gamma):
    r""":math:`J^{-1}` of :func:`jacobian` in closed form when the samples fix the fit (m = 2n).

    Returns (C, 2n, 2n): rows :math:`\ell_1..\ell_n,\gamma_1..\gamma_n`, columns the samples.

    Notes
    -----
    With :math:`a_h(t)=1/(1+\rho_ht)`, :math:`\partial G/\partial\gamma_h=a_h` and
    :math:`\partial G/\partial\ell_h=-\gamma_h\rho_hta_h^2=\gamma_h(a_h^2-a_h)`, so
    :math:`J=KT` with :math:`K=[a_1^2..a_n^2,a_1..a_n]` at the nodes and
    :math:`T^{-1}=\begin{bmatrix}\operatorname{diag}(1/\gamma)&0\\I&I\end{bmatrix}`.
    :math:`K^{-1}` maps samples :math:`y_i` to the coefficients of
    :math:`f=\sum_hc_ha_h^2+d_ha_h=N(t)/\Pi(t)`, :math:`\Pi(t)=\prod_g(1+\rho_gt)^2`: the
    numerator :math:`N` (degree :math:`2n-1`) interpolates :math:`y_i\Pi(t_i)`, so
    :math:`N=\sum_iy_i\Pi(t_i)L_i` with the Lagrange basis :math:`L_i` of the nodes, and at the
    double pole :math:`\tau_h=-1/\rho_h`, with :math:`R_h=\prod_{g\ne h}(1+\rho_g\tau_h)^2`
    and :math:`\sigma_h=\sum_{g\ne h}2\rho_g/(1+\rho_g\tau_h)`,

    .. math:: \frac{\partial c_h}{\partial y_i}=\frac{\Pi(t_i)L_i(\tau_h)}{R_h},\qquad
              \frac{\partial d_h}{\partial y_i}=\frac{\partial c_h}{\partial y_i}\,
              \frac{1}{\rho_h}\Big(\sum_{k\ne i}\frac1{\tau_h-t_k}-\sigma_h\Big)

    (:math:`L_i'=L_i\sum_{k\ne i}1/(x-t_k)`). Products and same-signed sums only, where
    LU of the rounded :math:`J` loses :math:`\operatorname{cond}(J)\,\epsilon`: measured
    against mpmath inverses of the exact Jacobian (n = 2, 3), median error 5e-16 against
    3e-14 for LAPACK, and 2e-12 against O(1) for nearly double poles, at half the time.
    """
    tf = np.asarray(t, dtype=float)
    den = _lagrange_denominators(tuple(tf.tolist()))[None, :]
    C, n = ell.shape
    rho = np.exp(ell)
    Pi = np.ones((C, len(tf)))
    for g in range(n):
        e = 1.0 + rho[:, g:g + 1] * tf[None, :]
        Pi *= e * e
    out = np.empty((C, 2 * n, len(tf)))
    for h in range(n):
        tau = -1.0 / rho[:, h:h + 1]  # (C, 1)
        inv_dif = 1.0 / (tau - tf[None, :])  # (C, m): 1 / (tau_h - t_k)
        prod_all = np.prod(tau - tf[None, :], axis=1, keepdims=True)
        R = np.ones((C, 1))
        sig = np.zeros((C, 1))
        for g in range(n):
            if g != h:
                e = 1.0 + rho[:, g:g + 1] * tau
                R = R * (e * e)
                sig = sig + 2.0 * rho[:, g:g + 1] / e
        kc = Pi * (prod_all / R) * (inv_dif / den)  # Pi(t_i) L_i(tau_h) / R_h
        S = inv_dif.sum(axis=1, keepdims=True)
        out[:, h] = kc / gamma[:, h:h + 1]
        out[:, n + h] = kc + kc * (S - inv_dif - sig) / rho[:, h:h + 1]
    return out


def _solve_ls(A, b):
    """Batched least squares ``A x = b`` for stacks of small matrices (LU if square, else QR).

    A singular member makes LAPACK reject the whole stack; then the SVD pseudo-inverse is
    used for all (slower, never raises; the singular member gets a meaningless answer
    that the callers' checks reject).
    """
    try:
        if A.shape[-1] == A.shape[-2]:
            return np.linalg.solve(A, b)
        Qf, R = np.linalg.qr(A)
        return np.linalg.solve(R, Qf.swapaxes(-1, -2) @ b)
    except np.linalg.LinAlgError:
        return np.linalg.pinv(np.where(np.isfinite(A), A, 0.0)) @ np.where(np.isfinite(b), b, 0.0)


def _pinv_small(A):
    """Batched pseudo-inverse of full-column-rank stacks (inverse if square)."""
    try:
        if A.shape[-1] == A.shape[-2]:
            return np.linalg.inv(A)
        Qf, R = np.linalg.qr(A)
        return np.linalg.solve(R, Qf.swapaxes(-1, -2))
    except np.linalg.LinAlgError:
        return np.linalg.pinv(np.where(np.isfinite(A), A, 0.0))


@functools.lru_cache(maxsize=32)
def _vandermonde_split(t, n):
    """Orthonormal bases of the column space of the fixed block :math:`V=[t_i^k]_{k<n}` and of
    its complement, and :math:`R_1` of :math:`V=Q_1R_1` (cached per node set)."""
    powers = np.asarray(t, dtype=float)[:, None] ** np.arange(n)[None, :]
    Qf, R = np.linalg.qr(powers, mode="complete")
    return Qf[:, :n], Qf[:, n:], R[:n]


def _linearised_float(t, G, n):
    r"""Coefficients of :math:`P, Q` from :math:`P(t_i)-G_i(Q(t_i)-1)=G_i` (least squares if overdetermined).

    Returns ``(p, qc)`` with ``p`` (C, n) for :math:`t^0..t^{n-1}`, ``qc`` (C, n) for
    :math:`t^1..t^n`.

    The system is :math:`Vp+Dq=G` with the fixed Vandermonde block :math:`V=[t_i^k]_{k<n}`
    and :math:`D=[-G_it_i^k]_{1\le k\le n}`. With :math:`V=Q_1R_1` and :math:`Q_2` an
    orthonormal basis of the complement (computed once per node set), the least-squares
    solution is :math:`q` from :math:`Q_2^\top Dq=Q_2^\top G` and
    :math:`p=R_1^{-1}Q_1^\top(G-Dq)`: an :math:`n\times n` system per configuration when
    :math:`m=2n` (closed form for :math:`n\le2`) instead of a :math:`2n\times2n` one.
    Orthogonal transformations: the conditioning is the system's own.
    """
    tf = np.asarray(t, dtype=float)
    C, m = G.shape
    Q1, Q2, R1 = _vandermonde_split(tuple(tf.tolist()), n)
    # D transposed, (C, n, m): Q_2^T D for every configuration is then one matrix product
    Dt = -G[:, None, :] * (tf[None, :] ** np.arange(1, n + 1)[:, None])[None]
    M = (Dt.reshape(-1, m) @ Q2).reshape(C, n, m - n).transpose(0, 2, 1)  # (C, m - n, n)
    r = G @ Q2  # (C, m - n)
    if m == 2 * n and n == 1:
        qc = r / M[:, :, 0]
    elif m == 2 * n and n == 2:
        # Cramer's rule, vectorised (2x2: forward stable); det = 0 gives non-finite values
        # that the callers reject
        a, b, c, d = M[:, 0, 0], M[:, 0, 1], M[:, 1, 0], M[:, 1, 1]
        det = a * d - b * c
        qc = np.stack([d * r[:, 0] - b * r[:, 1], a * r[:, 1] - c * r[:, 0]], axis=1) / det[:, None]
    else:
        scale = np.linalg.norm(M, axis=1, keepdims=True)
        scale[scale == 0] = 1.0
        qc = _solve_ls(M / scale, r[:, :, None])[:, :, 0] / scale[:, 0, :]
    resid = G - np.einsum("ckm,ck->cm", Dt, qc)
    p = np.linalg.solve(R1, Q1.T @ resid.T).T
    return p, qc


def _poles_float(qc):
    r"""Roots :math:`-\rho_h` of :math:`s^n+q_1s^{n-1}+\dots+q_n` via batched companion eigenvalues.

    For :math:`n\le2` the closed forms, vectorised (several times faster than the batched
    eigenvalue calls at thousands of configurations); the quadratic uses the cancellation-free
    pair :math:`s_1=-(q_1+\operatorname{sign}(q_1)\sqrt{q_1^2-4q_2})/2`, :math:`s_2=q_2/s_1`.
    """
    C, n = qc.shape
    if n == 1:
        return qc.astype(float)
    if n == 2:
        q1, q2 = qc[:, 0], qc[:, 1]
        sq = np.sqrt((q1 * q1 - 4 * q2).astype(complex))
        s1 = -(q1 + np.where(q1 >= 0, 1.0, -1.0) * sq) / 2
        with np.errstate(divide="ignore", invalid="ignore"):  # s1 = 0 only for q = 0: rho = 0, rejected later
            s2 = q2 / s1
        rho = -np.stack([s1, s2], axis=1)
        return rho.real if np.all(rho.imag == 0) else rho
    comp = np.zeros((C, n, n))
    comp[:, 0, :] = -qc
    if n > 1:
        comp[:, np.arange(1, n), np.arange(n - 1)] = 1.0
    return -np.linalg.eigvals(comp)


def _residues_float(t, rho, G):
    t = np.asarray(t, dtype=float)
    B = 1.0 / (1.0 + rho[:, None, :] * t[None, :, None])
    return _solve_ls(B, G[:, :, None])[:, :, 0]


def _residues_partial_fractions(p, rho):
    r"""Residues from the linearised :math:`P`: :math:`\gamma_h=P(t_h)/\prod_{g\ne h}(1-\rho_g/\rho_h)`,
    :math:`t_h=-1/\rho_h` (the partial fractions of :math:`P/Q`). A starting point for the
    Gauss-Newton polish, without a least-squares solve per configuration."""
    C, n = rho.shape
    th = -1.0 / rho  # (C, n)
    Pth = np.zeros_like(th)
    for k in range(n - 1, -1, -1):  # Horner
        Pth = Pth * th + p[:, k : k + 1]
    den = np.ones_like(rho)
    for g in range(n):  # prod over g != h of (1 - rho_g / rho_h), for every h at once
        term = 1.0 - rho[:, g:g + 1] / rho
        term[:, g] = 1.0
        den *= term
    return Pth / den


def _polish_float(t, G, ell, gamma, iters=None):
    """Gauss-Newton steps on the nonlinear least-squares fit in (ell, gamma).

    Returns ``(ell, gamma, Jinv)`` with :math:`J^{+}` from the last step (at a point within
    that step of the result: the first-order bounds of :func:`_finish_float` reuse it).
    When the samples fix the fit exactly (m = 2n) one step reaches the rounding level
    (more changed nothing in a measurement over 12 000 fits, n = 2..4); overdetermined
    fits take three.
    """
    t = np.asarray(t, dtype=float)
    n = ell.shape[1]
    square = len(t) == 2 * n
    if iters is None:
        iters = 1 if square else 3
    Jinv = None
    for _ in range(iters):
        model, J = _model_and_jacobian(t, ell, gamma, jac=not square)
        Jinv = _jacobian_inverse_square(t, ell, gamma) if square else _pinv_small(J)
        step = np.einsum("ckm,cm->ck", Jinv, G - model)
        ell = ell + step[:, :n]
        gamma = gamma + step[:, n:]
    return ell, gamma, Jinv


def _finish_float(t, G, ell, gamma, Jinv=None):
    n = ell.shape[1]
    if n > 1 and np.any(ell[:, 1:] < ell[:, :-1]):  # callers pass sorted heads; a step may swap two
        order = np.argsort(ell, axis=1)
        ell = np.take_along_axis(ell, order, axis=1)
        gamma = np.take_along_axis(gamma, order, axis=1)
        if Jinv is not None:  # rows (ell_1..n, gamma_1..n) of the unsorted heads: sort them alike
            rows = np.concatenate([order, order + n], axis=1)
            Jinv = np.take_along_axis(Jinv, rows[:, :, None], axis=1)
    if Jinv is None:
        Jinv = _jacobian_inverse_square(t, ell, gamma) if len(t) == 2 * n else _pinv_small(jacobian(t, ell, gamma))
    C, k = Jinv.shape[:2]
    ones = np.ones(Jinv.shape[2])
    absrows = (np.abs(Jinv).reshape(-1, Jinv.shape[2]) @ ones).reshape(C, k)  # row sums (C, 2n)
    sh = -(Jinv.reshape(-1, Jinv.shape[2]) @ ones).reshape(C, k)
    sens = np.stack([absrows[:, :n], absrows[:, n:]], axis=1)
    shift = np.stack([sh[:, :n], sh[:, n:]], axis=1)
    model, _ = _model_and_jacobian(t, ell, gamma, jac=False)
    residual = np.max(np.abs(G - model), axis=1) if G.shape[1] else np.zeros(len(G))
    return RationalFit(ell, gamma, sens, residual, shift)


def _sorted_heads(ell, gamma):
    """Heads ordered by ell in every row (before the polish, so that its J^+ needs no reordering)."""
    if ell.shape[1] == 2:  # a swap where needed: cheaper than argsort and gathers
        sw = ell[:, 0] > ell[:, 1]
        return np.where(sw[:, None], ell[:, ::-1], ell), np.where(sw[:, None], gamma[:, ::-1], gamma)
    order = np.argsort(ell, axis=1)
    return np.take_along_axis(ell, order, axis=1), np.take_along_axis(gamma, order, axis=1)


def _fit_float(t, G, n, *, method="linearised", polish=True, labels=None):
    C = G.shape[0]
    if n == 0:
        return RationalFit(np.zeros((C, 0)), np.zeros((C, 0)), np.zeros((C, 2, 0)), np.max(np.abs(G), axis=1))
    if method == "linearised":
        pc, qc = _linearised_float(t, G, n)
        rho = _poles_float(qc)
    elif method == "loewner":
        rho = _loewner_poles_float(t, G, n)
    else:
        raise ValueError(f'method must be "linearised" or "loewner", got {method!r}')
    _check_poles(rho, np.finfo(float).eps ** 0.5, labels)
    rho = rho.real
    ell = np.log(rho)
    if method == "linearised" and polish:
        gamma = _residues_partial_fractions(pc, rho)
    else:
        gamma = _residues_float(t, rho, G)
    ell, gamma = _sorted_heads(ell, gamma)
    if polish:
        ell, gamma, Jinv = _polish_float(t, G, ell, gamma)
        return _finish_float(t, G, ell, gamma, Jinv)
    return _finish_float(t, G, ell, gamma)


def fit_masked(t, G, n, *, method="linearised"):
    """float64 :func:`fit_known_degree` that never raises: returns ``(fit, ok)``.

    ``ok[c]`` is False where configuration ``c`` has a non-real or non-positive
    :math:`\rho`, or a non-finite value or sensitivity; its entries are then placeholders.
    Used by the robust learner to find the configurations to redraw.
    """
    G = np.asarray(G, dtype=float)
    C = G.shape[0]
    t = list(t)
    if n == 0:
        return _fit_float(t, G, 0), np.ones(C, dtype=bool)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):  # bad rows are masked
        if method == "linearised":
            pc, qc = _linearised_float(t, G, n)
            rho = _poles_float(qc)
        else:
            rho = _loewner_poles_float(t, G, n)
        scale = np.maximum(np.abs(rho), 1e-300)
        ok = np.all((np.abs(np.imag(rho)) <= np.finfo(float).eps ** 0.5 * scale) & (np.real(rho) > 0)
                    & np.isfinite(rho), axis=1)
        rho = np.where(ok[:, None], np.real(rho), np.linspace(0.5, 2.0, n)[None, :])
        ell = np.log(rho)
        gamma = _residues_partial_fractions(pc, rho) if method == "linearised" else _residues_float(t, rho, G)
        ell, gamma = _sorted_heads(ell, gamma)
        ell, gamma, Jinv = _polish_float(t, G, ell, gamma)
        fit = _finish_float(t, G, ell, gamma, Jinv)
    ok &= np.all(np.isfinite(fit.ell), axis=1) & np.all(np.isfinite(fit.gamma), axis=1)
    ok &= np.all(np.isfinite(fit.sens.reshape(C, -1)), axis=1)
    return fit, ok


def loewner_matrix(t, G):
    r"""Loewner matrix :math:`\mathbb L_{ij}=(G(\mu_i)-G(\lambda_j))/(\mu_i-\lambda_j)` [1]_.

    The nodes are split alternately: :math:`\mu` = odd-indexed, :math:`\lambda` =
    even-indexed samples. For a rational :math:`G` of McMillan degree :math:`H'` sampled
    at :math:`2n\ge 2H'` generic nodes, its rank is :math:`H'` (chapter 3).
    Works on one configuration: ``t`` (m,), ``G`` (m,); float64 or mpmath.

    References
    ----------
    .. [1] A. J. Mayo, A. C. Antoulas, "A framework for the solution of the generalized
           realization problem", Linear Algebra Appl. 425 (2007) 634-662.
    """
    t = list(t)
    mu, lam = t[0::2], t[1::2]
    Gm, Gl = list(G[0::2]), list(G[1::2])
    L = np.empty((len(mu), len(lam)), dtype=object if isinstance(G[0], mpmath.mpf) else float)
    for i in range(len(mu)):
        for j in range(len(lam)):
            L[i, j] = (Gm[i] - Gl[j]) / (mu[i] - lam[j])
    return L


def _loewner_poles_float(t, G, n):
    r"""Poles from the Loewner pencil :math:`(\sigma\mathbb L,\mathbb L)` (shifted Loewner).

    With :math:`\mathbb L_s` the shifted Loewner matrix
    :math:`(\mu_iG(\mu_i)-\lambda_jG(\lambda_j))/(\mu_i-\lambda_j)`, the generalised
    eigenvalues of :math:`(\mathbb L_s,\mathbb L)` are the poles :math:`-1/\rho_h`.
    """
    t = np.asarray(t, dtype=float)
    mu, lam = t[0::2], t[1::2]
    Gm, Gl = G[:, 0::2], G[:, 1::2]
    dm = mu[:, None] - lam[None, :]
    L = (Gm[:, :, None] - Gl[:, None, :]) / dm
    Ls = (mu[None, :, None] * Gm[:, :, None] - lam[None, None, :] * Gl[:, None, :]) / dm
    # square n x n pencil on the first n nodes of each half (exactly determined when m = 2n)
    L, Ls = L[:, :n, :n], Ls[:, :n, :n]
    poles = np.linalg.eigvals(_solve_ls(L, Ls))
    return -1.0 / poles


def _check_poles(rho, tol, labels):
    r"""Every :math:`\rho_h` must be real and positive (a negative real pole :math:`-1/\rho_h`)."""
    rho = np.asarray(rho)
    scale = np.maximum(np.abs(rho), 1e-300)
    bad_imag = np.abs(np.imag(rho)) > tol * scale
    bad_sign = np.real(rho) <= 0
    bad = np.any(bad_imag | bad_sign, axis=1)
    if np.any(bad):
        c = int(np.argmax(bad))
        name = labels[c] if labels is not None else f"configuration {c}"
        raise PoleError(
            f"{name}: interpolated poles -1/rho with rho = {np.round(rho[c], 6).tolist()} are "
            "not all real and negative (rho must be real and > 0): the samples are not of the "
            "copies-family form at this precision (noise, ill-conditioning, or a wrong head count)"
        )


# ----------------------------------------------------------------------------- mpmath
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


# ----------------------------------------------------------------------------- API
def fit_known_degree(t, G, n, *, method="linearised", polish=True, labels=None):
    r"""Poles and residues of :math:`G=P/Q` of degree ``n`` for each row of ``G``.

    Parameters
    ----------
    t : sequence of int, length m >= 2n
        The copy counts (the learner uses :math:`1,\dots,2n`).
    G : array, shape (C, m)
        :math:`F(t)-V^\top q` for C configurations; float64, or mpmath objects (exact mode:
        everything is computed with mpmath at the current precision).
    n : int
        Number of poles (canonical heads).
    method : {"linearised", "loewner"}, keyword-only
        float64 only: the linearised system :math:`P(t_i)-G_iQ(t_i)=0`, projected off its
        fixed Vandermonde block (:func:`_linearised_float`), or the shifted Loewner pencil
        [1]_. Chapter 3 compares them.
    polish : bool, keyword-only
        float64 only: finish with Gauss-Newton steps on :math:`(\ell,\gamma)`.
    labels : list of str, optional
        Configuration names used in error messages.

    Returns
    -------
    RationalFit

    Raises
    ------
    PoleError
        If a pole is not real and negative.

    References
    ----------
    .. [1] A. J. Mayo, A. C. Antoulas, Linear Algebra Appl. 425 (2007) 634-662.
    """
    G = np.asarray(G)
    if G.ndim != 2 or G.shape[1] != len(t):
        raise ValueError(f"G must have shape (C, {len(t)}), got {G.shape}")
    if len(t) < 2 * n:
        raise ValueError(f"{len(t)} samples cannot fix {2 * n} unknowns (n = {n} poles)")
    t = list(t)
    try:
        if G.dtype == object:
            return _fit_mp(t, G, n, labels)
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):  # singular cases raise below
            fit = _fit_float(t, G, n, method=method, polish=polish, labels=labels)
        if not (np.all(np.isfinite(fit.ell)) and np.all(np.isfinite(fit.gamma)) and np.all(np.isfinite(fit.sens))):
            raise np.linalg.LinAlgError("non-finite fit")
        return fit
    except (ZeroDivisionError, np.linalg.LinAlgError, ValueError) as exc:
        if type(exc) is ValueError and G.dtype != object:  # LinAlgError is a ValueError too
            raise
        if len(G) > 1:  # name the configuration
            for c in range(len(G)):
                fit_known_degree(t, G[c : c + 1], n, method=method, polish=polish,
                                 labels=[labels[c]] if labels is not None else [f"configuration {c}"])
        name = labels[0] if labels is not None and len(G) == 1 else "a configuration"
        raise InconsistentHeadCountError(
            f"{name}: the degree-{n} interpolation is singular ({exc}): the samples have fewer than {n} "
            "poles here (a vanishing residue or two coinciding poles) though other configurations need "
            f"{n}"
        ) from None


def _fit_residuals(t, G, k, method):
    """Refit residual of a degree-k fit for every configuration; inf where the fit fails."""
    try:
        return np.array([float(r) for r in fit_known_degree(t, G, k, method=method).residual])
    except (PoleError, InconsistentHeadCountError):
        out = np.empty(len(G))
        for c in range(len(G)):
            try:
                out[c] = float(fit_known_degree(t, G[c : c + 1], k, method=method).residual[0])
            except (PoleError, InconsistentHeadCountError):
                out[c] = np.inf
        return out


def fit_min_degree(t, G, max_degree, *, tol, labels=None, method="linearised"):
    r"""The minimal-degree interpolant, when only an upper bound on the degree is known.

    The degree :math:`k^*` is the smallest :math:`k\le` ``max_degree`` whose fit reproduces
    the first configuration's samples to ``tol`` (absolute). Every configuration must then
    be fitted at degree :math:`k^*` and *not* at :math:`k^*-1`: the canonical head count
    :math:`H'` is a property of the model, not of the configuration.

    Returns
    -------
    (int, RationalFit)
        :math:`k^*` and the fit of every configuration at that degree.

    Raises
    ------
    InconsistentHeadCountError
        If the configurations disagree, or no degree up to ``max_degree`` fits.

    Notes
    -----
    A degree-:math:`k` rational function has :math:`2k` free parameters, so with
    :math:`2n>2k` samples of a degree-:math:`H'` function (:math:`H'>k`) no fit is exact;
    at :math:`k=H'` the fit is exact. Equivalently the Loewner matrix
    (:func:`loewner_matrix`) of the samples has rank :math:`H'` (chapter 3). With
    :math:`k=n` the system is square and fits anything: the top degree is accepted
    without a residual test.
    """
    G = np.asarray(G)
    C, m = G.shape

    def name(c):
        return labels[c] if labels is not None else f"configuration {c}"

    kstar = None
    for k in range(max_degree + 1):
        if 2 * k >= m or _fit_residuals(t, G[:1], k, method)[0] <= np.ravel(tol)[0]:
            kstar = k
            break
    if kstar is None:  # pragma: no cover - 2 * max_degree >= m always stops the loop
        raise InconsistentHeadCountError(f"{name(0)}: no degree up to {max_degree} fits")
    return kstar, fit_checked(t, G, kstar, tol=tol, labels=labels, method=method)


def fit_checked(t, G, k, *, tol, labels=None, method="linearised"):
    r""":func:`fit_known_degree` at degree ``k``, then check every refit residual against ``tol``.

    When the samples overdetermine the fit (:math:`2k<m`), a configuration whose residual
    exceeds its ``tol`` (scalar or one per configuration) has more than ``k`` heads.

    Raises
    ------
    InconsistentHeadCountError
    """
    G = np.asarray(G)
    fit = fit_known_degree(t, G, k, method=method, labels=labels)
    check_residuals(fit, tol, G.shape[1], k, labels=labels)
    return fit


def check_residuals(fit, tol, m, k, *, labels=None):
    """Raise if a degree-``k`` fit from ``m`` samples leaves a residual above ``tol``.

    Only meaningful when the samples overdetermine the fit (:math:`2k<m`); ``tol`` is a scalar
    or one value per configuration. Used by :func:`fit_checked` and by the robust learner, whose
    fits were made while redrawing.

    Raises
    ------
    InconsistentHeadCountError
    """
    if 2 * k >= m:
        return
    res = to_float(fit.residual)
    tol = np.broadcast_to(np.asarray(tol, dtype=float), res.shape)
    if np.any(res > tol):
        c = int(np.argmax(res > tol))
        name = labels[c] if labels is not None else f"configuration {c}"
        raise InconsistentHeadCountError(
            f"{name} needs more than the {k} canonical heads found in the first configuration: refit "
            f"residual {res[c]:.2e} > tol {tol[c]:.2e} (configurations disagree on the head count)"
        )
