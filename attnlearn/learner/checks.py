r"""The learner's checks and its finish: head count, first-order range, significance, held-out queries.

Used in: chapter 4 (exact mode: every "probability one" event of DESIGN §4.5 detected, never
passed silently) and chapter 5 (the first-order range of the error bounds, the error estimate
and the held-out check of float64 mode).
"""

import numpy as np

from .._arith import to_float, to_mp
from .._checks import heldout_discrepancy
from ..errors import CheckFailedError, IllConditionedError
from .fitting import scale_back
from ..model import MultiHeadAttention
from .results import Recovery

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


def check_significant(ell, gam, err_ell, err_gam, labels, *, S):
    """Every residue must stand out of ``S`` times its error bound, and every pair of poles apart.

    Raises
    ------
    IllConditionedError
    """
    C, H = ell.shape
    if H == 0:
        return
    small = np.abs(gam) <= S * err_gam
    if np.any(small):
        c, h = np.argwhere(small)[0]
        raise IllConditionedError(
            f"{labels[c]}: residue gamma = {gam[c, h]:.2e} is within {S:g} x its error bound "
            f"{err_gam[c, h]:.1e} (a vanishing residue: a head invisible in this configuration)"
        )
    if H > 1:
        gap = np.abs(ell[:, :, None] - ell[:, None, :])
        allowed = S * (err_ell[:, :, None] + err_ell[:, None, :])
        close = (gap <= allowed) & ~np.eye(H, dtype=bool)[None]
        if np.any(close):
            c, a, b = np.argwhere(close)[0]
            raise IllConditionedError(
                f"{labels[c]}: poles ell = {ell[c, a]:.4g} and {ell[c, b]:.4g} are closer than {S:g} x their "
                f"error bounds ({err_ell[c, a]:.1e}, {err_ell[c, b]:.1e}): two heads cannot be told apart here"
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


def holdout_batches(rng, holdout, max_length, d, *, f, exact):
    """The held-out queries, lazily: about ``holdout / max_length`` random sequences of every length
    1..max_length (at least one each), tokens of the design's scale."""
    for N in range(1, max_length + 1):
        m = max(1, holdout // max_length + (1 if N <= holdout % max_length else 0))
        Xs = rng.normal(size=(m, N, d)) * np.sqrt(f) / np.sqrt(d)
        yield to_mp(Xs) if exact else Xs


def finish(oracle, model, queries, diagnostics, *, max_length, eps_out, estimate, holdout, rng, f, tol,
           verified=True, stated=None, holdout_length=None):
    """Check the recovered ``model`` on ``holdout`` held-out queries and return the :class:`Recovery`.

    ``eps_out`` and ``estimate`` are the float64 bounds; with ``stated`` (exact mode: the output error
    itself, an mpmath number) below ``eps_out`` (beyond 100 digits, see
    :attr:`~.tolerances.Tolerances.bound_floor`) the returned ``error_estimate`` and ``output_error``
    are scaled back to it (:func:`~.fitting.scale_back`).

    The held-out queries have every length up to ``holdout_length`` (default ``max_length``, the
    design's longest; ``design="long"`` asks shorter ones, see
    :class:`~.tolerances.LongTolerances`).

    Raises
    ------
    CheckFailedError
        The held-out discrepancy exceeds ``tol.holdout_output`` times the relative output error and
        ``tol.holdout_estimate`` times the error estimate.
    IllConditionedError
        The error estimate exceeds ``tol.estimate_limit`` (a relative error above 100% is no result).
    """
    holdout_error = None
    if holdout:
        before = oracle.queries
        batches = holdout_batches(rng, holdout, holdout_length or max_length, model.d, f=f, exact=tol.exact)
        holdout_error, scale_ref = heldout_discrepancy(oracle, model, batches, rounded=True)
        queries["holdout"] = queries.get("holdout", 0) + oracle.queries - before
        limit = max(tol.holdout_output * eps_out / max(scale_ref, tol.tiny), tol.holdout_estimate * estimate)
        if holdout_error > limit:
            raise CheckFailedError(
                f"the recovered model misses the oracle on {queries['holdout']} held-out queries: relative "
                f"discrepancy {holdout_error:.2e} > {limit:.2e} ({tol.holdout_estimate:g} x the error estimate "
                f"{estimate:.1e})"
            )
    if not estimate <= tol.estimate_limit:
        raise IllConditionedError(
            f"first-order error estimate {estimate:.1e} exceeds 1 (100% relative error): the interpolation is "
            f"too ill-conditioned for this model at output error {eps_out:.1e} ("
            + ("a smaller output_error, more digits or more heads=" if tol.exact
               else "use exact mode, robust=True (design=\"paper\"), or fewer heads") + ")"
        )
    queries["total"] = (queries["design"] + queries["constants"] + queries["redraws"] + queries["holdout"]
                        + queries.get("scale", 0))
    sensitivity = estimate / eps_out if eps_out > 0 else float("inf")
    return Recovery(model=model, heads=model.H, queries=queries, max_length=max_length,
                    output_error=scale_back(eps_out, eps_out, stated),
                    error_estimate=scale_back(estimate, eps_out, stated), sensitivity=sensitivity,
                    holdout_error=holdout_error, diagnostics=diagnostics, verified=bool(verified))


def zero_function(d, *, output_error, eps_out, exact):
    """No canonical head: the zero function of width ``d``, unless the user stated an output error,
    which makes its certification impossible (every design: paper, lean).

    Raises
    ------
    IllConditionedError
        With ``output_error`` stated: neither a head nor its absence can be certified.
    """
    if output_error is not None:
        raise IllConditionedError(
            f"every configuration is within the output error ({eps_out:.1e}) of the zero function: with "
            "noisy outputs no canonical head can be certified, nor their absence"
        )
    dt = object if exact else float
    return MultiHeadAttention(np.zeros((0, d, d), dtype=dt), np.zeros((0, d), dtype=dt))
