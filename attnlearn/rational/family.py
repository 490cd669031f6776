"""The copies family and its rational model: the queries, the nodes, the fit object, the Jacobian.

Used in: chapter 3 (the copies family, the Jacobian of the samples), chapters 4-6 (inside
:func:`attnlearn.learn`).
"""

import functools
from fractions import Fraction

import numpy as np

__all__ = [
    "copies_sequences",
    "ratio_nodes",
    "RationalFit",
    "jacobian",
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
