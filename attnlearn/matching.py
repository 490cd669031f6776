r"""Cross-query matching: label the same head across configurations (chapter 4; claim C4).

Used in: chapter 4 (introduced, with a picture of one matching), inside
:func:`attnlearn.learn` (chapters 4-6).

Both the pole position :math:`\ell=u^\top W_hq` and the residue :math:`\gamma=-u^\top v_h`
are linear in :math:`u`. A *link* configuration with :math:`u=u_1+u_j` therefore shows the
set :math:`\{(\ell^{(1)}_a+\ell^{(j)}_{\pi(a)},\gamma^{(1)}_a+\gamma^{(j)}_{\pi(a)})\}` for the
true pairing :math:`\pi`, and a *cross* configuration with final token :math:`q_1+q_k`
shows :math:`\{(u^\top(w_{a,1}+w_{\pi(a),k}),-u^\top v_a)\}`. Either way: candidate pairs
:math:`P_{ab}` are predicted, one observed set :math:`O` is seen, and the pairing is the
assignment that puts every matched candidate on an observed point.
"""

import itertools

import numpy as np
from scipy.optimize import linear_sum_assignment

from ._arith import to_float
from .errors import UnmatchedHeadsError

__all__ = ["Matching", "match_candidates"]

_ENUMERATE = 4  # up to 4! = 24 permutations are enumerated in one vectorised step


class Matching:
    """Result of :func:`match_candidates` for C configurations.

    Attributes
    ----------
    perm : int array, shape (C, n)
        ``perm[c, a]`` is the label ``b`` paired with reference head ``a``.
    residual : array, shape (C,)
        Largest scaled distance from a matched candidate to its observed point.
    observed : int array, shape (C, n)
        ``observed[c, a]``: the observed point that the matched candidate of ``a`` landed on.
    margin : array, shape (C,)
        Smallest scaled distance from a *wrong* candidate (any ``b != perm[a]``) to the
        nearest observed point: a pairing is trustworthy while residual << margin.
    """

    def __init__(self, perm, residual, margin, observed):
        self.perm = perm
        self.observed = observed
        self.residual = residual
        self.margin = margin

    def check(self, tol, *, ambiguity=4.0, labels=None):
        """Raise :class:`UnmatchedHeadsError` where the residual exceeds ``tol`` (scalar or (C,))
        or a wrong candidate comes within ``ambiguity`` times it (see :func:`match_candidates`)."""
        C = len(self.residual)
        tol = np.broadcast_to(np.asarray(tol, dtype=float), (C,))
        bad = (self.residual > tol) | (self.margin <= ambiguity * self.residual)
        if np.any(bad):
            c = int(np.argmax(bad))
            name = labels[c] if labels is not None else f"configuration {c}"
            what = "no pairing fits" if self.residual[c] > tol[c] else "two pairings fit"
            raise UnmatchedHeadsError(
                f"{name}: {what} - scaled residual {self.residual[c]:.2e}, margin to the nearest wrong "
                f"pairing {self.margin[c]:.2e}, tolerance {tol[c]:.2e}"
            )
        return self


def match_candidates(P, O, scale, *, tol=None, ambiguity=4.0, labels=None):
    r"""Pair reference heads with labels so that every candidate lands on an observed point.

    Parameters
    ----------
    P : array, shape (C, n, n, 2)
        ``P[c, a, b]`` is the predicted :math:`(\ell,\gamma)` if reference head ``a`` is
        paired with label ``b``.
    O : array, shape (C, n, 2)
        The observed :math:`(\ell,\gamma)` set of each configuration (unordered).
    scale : array, shape (C, 2) or (2,)
        Units for the :math:`\ell` and :math:`\gamma` components (distances are measured
        as :math:`\max(|\Delta\ell|/s_\ell,|\Delta\gamma|/s_\gamma)`).
    tol : float or array (C,), optional, keyword-only
        Largest acceptable scaled residual; ``None`` skips the checks.
    ambiguity : float, keyword-only
        A pairing is accepted only if every wrong candidate stays farther than
        ``ambiguity`` times the residual from the observed points.
    labels : list of str, optional
        Configuration names for error messages.

    Returns
    -------
    Matching

    Raises
    ------
    UnmatchedHeadsError
        If some configuration's best pairing leaves a residual above ``tol``, or if a wrong
        candidate comes within ``ambiguity`` times that residual of an observed point (two
        pairings explain the data about equally well).

    Notes
    -----
    The cost of pairing ``a`` with ``b`` is the scaled distance from :math:`P_{ab}` to the
    nearest observed point; the pairing minimising the total cost is found with
    :func:`scipy.optimize.linear_sum_assignment` (the Hungarian method, Kuhn 1955), one
    small problem per configuration (for :math:`n\le4` by enumerating the :math:`n!`
    permutations for all configurations at once, which gives the same optimum faster). Distances are evaluated in float64 after the
    differences are formed in the input arithmetic, so exact-mode residuals of
    :math:`10^{-50}` are reported as such.
    """
    P = np.asarray(P)
    O = np.asarray(O)
    C, n = O.shape[:2]
    scale = np.broadcast_to(np.asarray(scale, dtype=float), (C, 2))
    # dist[c, a, b, l]: scaled distance from candidate (a, b) to observed point l (component by
    # component, and the minimum over l as a loop over l: elementwise operations on whole arrays
    # instead of reductions over axes of length 2 and n, several times faster)
    dist = None
    for comp in range(2):
        diff = to_float(P[:, :, :, None, comp] - O[:, None, None, :, comp])
        with np.errstate(over="ignore"):  # a huge value from a failed fit: inf, which loses below
            dc = np.abs(diff) / scale[:, None, None, None, comp]
        dist = dc if dist is None else np.maximum(dist, dc)
    cost = dist[..., 0] if n else np.zeros((C, 0, 0))
    for l in range(1, n):
        cost = np.minimum(cost, dist[..., l])  # (C, n, n)
    # a failed fit upstream (NaN/inf values) must lose every comparison, not break the solver
    cost = np.where(np.isfinite(cost), cost, 1e300)
    if n <= _ENUMERATE:
        # small n: every permutation at once, vectorised over configurations; the same
        # optimum as linear_sum_assignment (checked by
        # tests/test_matching.py::test_enumeration_agrees_with_linear_sum_assignment)
        perms = np.array(list(itertools.permutations(range(n))), dtype=int).reshape(-1, n)
        total = cost[:, np.arange(n)[None, :], perms].sum(axis=2)  # (C, n!)
        perm = perms[np.argmin(total, axis=1)]
    else:
        perm = np.empty((C, n), dtype=int)
        for c in range(C):
            rows, cols = linear_sum_assignment(cost[c])
            perm[c, rows] = cols
    rows = np.arange(n)[None, :]
    cidx = np.arange(C)[:, None]
    matched = cost[cidx, rows, perm]  # (C, n)
    residual = matched.max(axis=1) if n else np.zeros(C)
    observed = dist[cidx, rows, perm].argmin(axis=2) if n else np.zeros((C, 0), dtype=int)
    # each observed point must be used exactly once by the matched candidates
    if n:
        srt = np.sort(observed, axis=1)
        residual = np.where(np.all(srt == np.arange(n)[None, :], axis=1), residual, np.inf)
    wrong = np.ones((C, n, n), dtype=bool)
    wrong[cidx, rows, perm] = False
    margin = np.where(wrong, cost, np.inf).min(axis=(1, 2)) if n > 1 else np.full(C, np.inf)
    mt = Matching(perm, residual, margin, observed)
    return mt if tol is None else mt.check(tol, ambiguity=ambiguity, labels=labels)
