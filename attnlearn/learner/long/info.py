r"""The information limit of the long design: the Cramér–Rao bound of one ratio configuration.

Used in: chapter 5b (``book/05b_long_queries.ipynb``: why steps about 2 nats apart and why the
window :math:`2\log(L-1)`), and ``learn(..., design="long", accuracy=...)``, which refuses before
any query a request far below :func:`information_limit`.

A configuration of the long design (:mod:`~.long`) answers, at the ratios
:math:`z_i=\log(b_i/a_i)` of :func:`~attnlearn.learner.nodes.ratio_grid`,

.. math:: F(z) = C + \sum_{h=1}^H \gamma_h\,\sigma(c_h - z),

each answer with the standard deviation :math:`s_i` of :func:`~attnlearn.learner.samples.noise_sd`. Whatever the
fit, an unbiased estimate of the step positions :math:`c_h` and heights :math:`\gamma_h` has a
covariance of at least the inverse Fisher matrix :math:`I^{-1}` [1]_; this module computes it
for given steps (:func:`step_sd`), for :math:`H` evenly spaced unit steps (:func:`spacing_sd`),
and turns it into a floor on the relative parameter error of the whole design
(:func:`information_limit`).

References
----------
.. [1] S. M. Kay, *Fundamentals of Statistical Signal Processing: Estimation Theory*,
       Prentice Hall, 1993, ch. 3 (the Cramér–Rao bound for Gaussian noise).
.. [2] S. Kim, I. Kim, J. Guo, "Provably Learning Multi-Head Attention with Queries",
       arXiv:2608.03294, 2026.
"""

from dataclasses import dataclass

import numpy as np

from ..nodes import ratio_grid
from ..samples import noise_sd
from ..tolerances import LongTolerances
from .curve import step_curve, step_jacobian

__all__ = ["StepBound", "information", "step_sd", "spacing_sd", "information_limit", "SPACINGS"]

#: Step spacings (nats) over which :func:`information_limit` takes the most favourable one.
SPACINGS = np.arange(0.5, 6.01, 0.25)


@dataclass
class StepBound:
    r"""Cramér–Rao standard deviations of one configuration's fit: the constant ``C``, the step
    positions ``c`` (H,) and the heights ``g`` (H,) (``inf`` where the information is singular:
    a step the window does not see, or two coinciding steps). Used in: chapter 5b."""

    C: float
    c: np.ndarray
    g: np.ndarray


def information(z, c, g, sd):
    r"""The Fisher information matrix of :math:`(C,c_1..c_H,\gamma_1..\gamma_H)` from answers at
    ``z`` with independent Gaussian errors of standard deviations ``sd``.

    Notes
    -----
    :math:`I=J^\top\operatorname{diag}(s)^{-2}J` with the Jacobian columns
    :math:`\partial F/\partial C=1`, :math:`\partial F/\partial c_h=\gamma_h\sigma'(c_h-z)`,
    :math:`\partial F/\partial\gamma_h=\sigma(c_h-z)`, :math:`\sigma'=\sigma(1-\sigma)`.
    The noise of a relative model depends on :math:`F`, but only through the parameters'
    mean curve; its own information (from the variance) is neglected, as every fit of
    :mod:`~.long` neglects it.

    Used in: chapter 5b (through :func:`step_sd`).
    """
    z, c, g, sd = (np.asarray(a, dtype=float) for a in (z, c, g, sd))
    J = step_jacobian(z, sd, c, g)
    return J.T @ J


def _covariance_diagonal(J):
    """Diagonal of :math:`(J^\\top J)^{-1}` through the SVD of ``J`` (inf where singular)."""
    _, sv, Vt = np.linalg.svd(J, full_matrices=False)
    tiny = sv <= sv[0] * 1e-14 * J.shape[1]
    inv = np.where(tiny, np.inf, 1.0 / np.where(tiny, 1.0, sv) ** 2)
    weights = Vt.T**2  # (p, p): column k is the k-th right singular vector squared
    touched = weights > 1e-20  # a singular vector's rounding-level components leave a parameter alone
    with np.errstate(invalid="ignore"):
        return np.where(touched, weights * inv[None, :], 0.0).sum(axis=1)


def step_sd(c, g, *, L, R, relative, absolute=0.0, C=0.0, level=None):
    r"""Cramér–Rao standard deviations of one configuration with steps at ``c`` of heights ``g``.

    Parameters
    ----------
    c, g : array_like (H,)
        Step positions (nats) and heights :math:`\gamma_h`.
    L, R : int
        Query length and ratios per configuration: the grid :func:`~attnlearn.learner.nodes.ratio_grid` ``(L, R)``.
    relative, absolute : float
        The noise model of :func:`~attnlearn.learner.samples.noise_sd` (relative and absolute standard deviation;
        the float64 rounding of an :math:`L`-token query included, at the design's
        :attr:`LongTolerances.rounding <attnlearn.learner.tolerances.LongTolerances>`).
    C : float
        The constant :math:`C=V^\top q` (the answers' offset).
    level : float, optional
        Evaluate the noise at answers of this size instead of at the curve :math:`F` itself
        (``level=1`` with unit heights: noise at the scale of one step).

    Returns
    -------
    StepBound

    Used in: chapter 5b.
    """
    c, g = np.atleast_1d(np.asarray(c, dtype=float)), np.atleast_1d(np.asarray(g, dtype=float))
    _, z = ratio_grid(L, R)
    F = step_curve(z, C, c, g)
    at = F if level is None else np.full_like(F, float(level))
    sd = noise_sd(at, absolute=absolute, relative=relative, length=L, rounding=LongTolerances.rounding)
    var = _covariance_diagonal(step_jacobian(z, sd, c, g))
    H = len(c)
    return StepBound(C=float(np.sqrt(var[0])), c=np.sqrt(var[1:H + 1]), g=np.sqrt(var[H + 1:]))


def spacing_sd(H, spacing, *, L, relative, R=None, tol=None):
    r"""The worst head's Cramér–Rao standard deviations ``(c_sd, g_sd)`` for :math:`H` unit steps
    evenly spaced ``spacing`` nats apart around :math:`z=0`, the noise at the scale of one step
    (``level=1``); ``R`` defaults to the design's ratios ``tol.ratios(H)``.

    Notes
    -----
    The two limits of the configuration's information: steps closer than about :math:`\pi`
    (the poles of :math:`\sigma(c-z)` sit at :math:`z=c\pm i\pi`) look alike, so their
    positions trade off against each other; steps spread over more than the window
    :math:`[-\log(L-1),\log(L-1)]` leave it and are seen only through their tails. In
    between lies the best spacing, near 2 nats for :math:`H=8` at :math:`L=4096`.

    Used in: chapter 5b (the tables of the std against spacing and :math:`L`).
    """
    tol = LongTolerances() if tol is None else tol
    R = tol.ratios(H) if R is None else R
    c = spacing * (np.arange(H) - (H - 1) / 2)
    bound = step_sd(c, np.ones(H), L=L, R=R, relative=relative, level=1.0)
    return float(np.max(bound.c)), float(np.max(bound.g))


def information_limit(d, H, *, L, relative, tol=None, spacings=SPACINGS):
    r"""An estimated floor on the relative parameter error (of one head's :math:`W_h` or
    :math:`v_h`, as :func:`~attnlearn.param_error` measures each) that ``learn(...,
    design="long")`` can reach at relative output noise ``relative``: the Cramér–Rao bound of its
    configurations, propagated with the choices listed in the Notes made in the learner's
    favour. A heuristic floor, not a theorem: the noise is taken at the size of one step (near a
    zero of :math:`F` a relative noise is smaller), and the best spacings for positions and
    heights are taken separately. Known before any query.

    Parameters
    ----------
    d, H, L : int
        Token width, heads, query length (the design's ``max_length``).
    relative : float
        Relative standard deviation of each answer (``relative_error``).
    tol : LongTolerances, optional
        The design's ratios per configuration and configurations per group.
    spacings : array_like
        Step spacings (nats) tried; the most favourable is taken.

    Returns
    -------
    float

    Notes
    -----
    A group of the design has :math:`m=2\cdot2d+1` configurations with one :math:`u`
    (:func:`~.passes.coarse_pass` or :func:`~.passes.random_pass`, :func:`~.passes.placed_pass`).
    In the learner's favour:

    * each configuration's steps are evenly spaced at the best spacing of ``spacings``, unit
      heights, and its answers no larger than one step (the noise :math:`\varepsilon\gamma`;
      a real configuration's answers include :math:`V^\top q`, about :math:`\sqrt H` steps):
      :math:`\sigma_c`, :math:`\sigma_\gamma` from :func:`spacing_sd`;
    * :math:`y_h=W_h^\top u` is regressed from :math:`c_{h,j}=-y_h^\top q_j` over the
      :math:`m` configurations, :math:`|q_j|=s` in random directions: the covariance is
      :math:`\sigma_c^2(Q^\top Q)^{-1}\approx\sigma_c^2\,d/(ms^2)\,I` and
      :math:`|y_h|^2=d\,\bar c^2/s^2` with :math:`\bar c` the steps' root mean square
      position, so :math:`|\Delta y_h|/|y_h|=\sigma_c\sqrt{d/m}/\bar c`; :math:`\bar c` is
      taken as the window's half-width :math:`\log(L-1)` (the design spreads them over about
      2 nats);
    * the heights are shared by the group: :math:`|\Delta\gamma_h|/|\gamma_h|=\sigma_\gamma/\sqrt m`;
    * :math:`W_h=U^{-1}Y_h` and :math:`v_h=-U^{-1}\Gamma_h` carry these relative errors over
      unamplified (:math:`U` orthogonal, as :func:`~.run.draw_groups` takes it; rows drawn
      independently would amplify them by :math:`\|U^{-1}\|_Fs/\sqrt d`, chapter 5b).

    The floor is the larger of the two relative errors. The learner's ``error_estimate`` is
    three times its propagated root-mean-square error; on the committed rows of
    ``benchmarks/noise_design.py`` every returned error lies 5 times or more above this floor
    and every estimate 19 times or more (chapter 5b compares them): the evidence that a refusal
    at 10 times below the floor turns down only requests the learner could not meet.

    Used in: chapter 5b, and ``learn(..., design="long", accuracy=...)``
    (:func:`~.accuracy.refuse_out_of_reach`).
    """
    tol = LongTolerances() if tol is None else tol
    m = 2 * tol.per_group(d) + 1
    sds = np.array([spacing_sd(H, s, L=L, relative=relative, tol=tol) for s in np.atleast_1d(spacings)])
    c_sd, g_sd = np.min(sds[:, 0]), np.min(sds[:, 1])
    w_floor = c_sd * np.sqrt(d / m) / np.log(L - 1)
    v_floor = g_sd / np.sqrt(m)
    return float(max(w_floor, v_floor))
