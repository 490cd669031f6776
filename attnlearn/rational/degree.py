"""Fits of a given or a minimal degree and their residual checks: the rank that reveals the head count.

Used in: chapter 3 (introduced), chapters 4-6 (inside :func:`attnlearn.learn`).
"""

import numpy as np

from .._arith import to_float
from ..errors import InconsistentHeadCountError, PoleError
from .floating import _fit_float
from .multiprecision import _fit_mp

__all__ = [
    "fit_known_degree",
    "fit_min_degree",
    "fit_checked",
    "check_residuals",
]


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
