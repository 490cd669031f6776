r"""The learner's checks and its finish: head count, first-order range, significance, held-out queries.

Used in: chapter 4 (exact mode: every "probability one" event detected, never
passed silently) and chapter 5 (the first-order range of the error bounds, the error estimate
and the held-out check of float64 mode).
"""

import numpy as np

from ..._arith import to_float
from ...errors import IllConditionedError
from ..heads import check_significant
from ..finish import holdout_batches
from ..finish import finish
from ..finish import zero_function

__all__ = ["check_head_count", "check_first_order", "check_significant", "check_fits", "holdout_batches", "finish",
           "zero_function"]


def check_head_count(found, n, *, heads_given, output_error, eps_out):
    """With noisy outputs a head whose residue is below the output error is invisible: fewer
    heads than ``heads=n`` cannot be certified (with ``max_heads`` the count is the user's bound).

    Raises
    ------
    IllConditionedError
    """
    if output_error is not None and found < n and heads_given:
        raise IllConditionedError(
            f"found {found} canonical heads but heads={n}: with output error {eps_out:.1e} a head whose "
            "residue lies below the noise cannot be told from a merged or cancelled one"
        )


def check_first_order(state, labels, *, tol):
    """With a stated output error the bounds are first order: they mean something only while the
    perturbations are small (without one, the oracle's rounding is far below this).

    Raises
    ------
    IllConditionedError
        Some configuration's relative perturbation of :math:`(\\ell,\\gamma)` exceeds
        ``tol.first_order``.
    """
    rel_g = state.err_gamma / np.maximum(np.abs(to_float(state.gamma)), tol.tiny)
    worst = np.maximum(state.err_ell.max(axis=1), rel_g.max(axis=1))
    if worst.max() > tol.first_order:
        c = int(np.argmax(worst))
        raise IllConditionedError(
            f"{labels[c]}: first-order perturbation of (ell, gamma) is {worst[c]:.1e} > {tol.first_order:g}: "
            "the output error is beyond the range where the error bound holds"
        )


def check_fits(state, labels, n, *, heads_given, output_error, eps_out, tol):
    """The checks on every configuration's fit, in order: head count, first-order range (float64
    with a stated output error), significance (exact mode; in float64 an insignificant value
    shows up in the matching and the error estimate)."""
    check_head_count(state.H, n, heads_given=heads_given, output_error=output_error, eps_out=eps_out)
    if not tol.exact and state.H and output_error is not None:
        check_first_order(state, labels, tol=tol)
    if tol.exact:
        check_significant(to_float(state.ell), to_float(state.gamma), state.err_ell, state.err_gamma, labels,
                          S=tol.significance)


