r"""The error of each sampled answer: the paper and lean designs' first-order bounds
(:func:`sample_errors`) and the long design's standard deviations (:func:`noise_sd`).

Used in: chapter 5 (approximate oracles), chapter 5b (the long design's noise) and chapter 8.
"""

from dataclasses import dataclass

import mpmath
import numpy as np

from .._arith import to_float

__all__ = ["SampleErrors", "scale_back", "sample_errors", "noise_sd"]


@dataclass(frozen=True)
class SampleErrors:
    r"""The error model of the samples.

    Attributes
    ----------
    output : float
        Absolute output error :math:`\varepsilon` assumed (or stated) for every answer, as the
        float64 error bounds use it (exact mode: at least ``tol.bound_floor`` times the output
        scale).
    residual : float or array
        Residual tolerance of a fit at an exactly known constant (one entry per
        configuration when there is one configuration).
    """

    output: float
    residual: object
    stated: object = None  # the output error itself (mpmath in exact mode); None: ``output``


def scale_back(bound, output, stated):
    """A first-order ``bound`` computed at the output error ``output`` (a :attr:`SampleErrors.output`),
    scaled to the output error ``stated`` when that is smaller (exact mode beyond 100 digits: an
    mpmath number; first-order bounds are linear in the output error)."""
    if stated is None or float(stated) >= output:  # not raised to the floor
        return bound
    return mpmath.mpf(bound) * (stated / output)


def sample_errors(F, output_error, tol):
    """The :class:`SampleErrors` of samples ``F`` (C, m) under policy ``tol`` (a
    :class:`~.tolerances.Tolerances`), with the user's ``output_error`` or the oracle's rounding."""
    Fmax = float(np.abs(to_float(F)).max()) if F.size else 0.0
    stated = None
    if tol.exact:
        # the oracle's dps digits (or the stated error) exactly; the bounds at no less than bound_floor
        stated = (mpmath.mpf(output_error) if output_error is not None
                  else mpmath.mpf(10) ** (1 - tol.dps) * max(Fmax, tol.output_floor))
        eps_out = max(float(stated), tol.bound_floor * max(Fmax, tol.output_floor))
    elif output_error is not None:
        # the oracle's own float64 rounding is there whatever the user's noise bound says
        eps_out = max(float(output_error), tol.output_rounding * Fmax)
    else:
        eps_out = tol.output_rounding * max(Fmax, tol.output_floor)
    m = F.shape[1]
    if tol.exact and output_error is None:
        res = tol.exact_residual * max(Fmax, tol.output_floor)
    else:
        res = tol.fit_tolerance(m, eps_out)
    return SampleErrors(eps_out, np.full(F.shape[0], res) if F.shape[0] == 1 else res, stated)


def noise_sd(F, *, absolute, relative, length=1, rounding=1 / 2):
    r"""Standard deviation of each answer's error: :math:`\sqrt{\varepsilon_a^2+(\varepsilon_rF)^2}`
    plus the oracle's float64 rounding, :math:`4\epsilon_{64}|F|` and, for a query of ``length``
    tokens (one configuration's answers ``F``), ``rounding`` times the sequential-summation
    bound :math:`N\epsilon_{64}\max|F|` (a floor of :math:`10^{-300}`).

    Notes
    -----
    An oracle sums :math:`N` softmax terms; in float64 the error of a sequential sum is at most
    :math:`(N-1)\epsilon_{64}\sum|t_i|`, and for a ratio query (the same two tokens repeated)
    it does not average out: measured at :math:`N=4096` (``Oracle``) the root mean square
    error of a configuration's answers is 0.07 to 0.09 of :math:`N\epsilon_{64}\max|F|` in
    the median, 0.6 in the 99th percentile (2e-14 relative where ``4 eps |F|`` says 9e-16);
    ``rounding`` (``LongTolerances.rounding``, 1/2) lies between the 90th and the 99th
    percentile (0.17 to 0.30 and 0.56 to 0.67). Negligible
    beside float32-level noise; it sets the floor of a float64 oracle."""
    F = np.abs(np.asarray(F, dtype=float))
    eps = np.finfo(float).eps
    floor = rounding * length * eps * (np.max(F) if F.size else 0.0)
    return np.sqrt(absolute**2 + (relative * F) ** 2) + 4 * eps * F + floor + 1e-300
