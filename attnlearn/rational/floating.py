"""Rational interpolation in float64: the linearised and Loewner pole estimates, residues, the polish.

Used in: chapter 3 (through :func:`attnlearn.rational.fit_known_degree`), chapters 4-5 (masked fits
of the robust mode).
"""

import functools

import mpmath
import numpy as np

from ..errors import PoleError
from .family import RationalFit, _jacobian_inverse_square, _model_and_jacobian, jacobian

__all__ = [
    "fit_masked",
    "loewner_matrix",
]


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
