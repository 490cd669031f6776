r"""``learn(..., accuracy=...)``: the relative parameter error the user needs, checked twice.

Used in: chapter 5b (``book/05b_long_queries.ipynb``: an out-of-reach request raised live).

1. Before any query, ``design="long"`` only (:func:`refuse_out_of_reach`): the design's
   information limit (:func:`~attnlearn.learner.long.info.information_limit`, the Cramér–Rao bound of its
   configurations propagated with choices in the learner's favour, an estimated floor) must not exceed the
   accuracy asked ``LongTolerances.refuse_factor`` times.
2. After the recovery, every design (:func:`check_accuracy`): its ``error_estimate`` must not
   exceed the accuracy asked.
3. A recovery that fails (any other :class:`~attnlearn.errors.RecoveryError`: a fit, a matching,
   a check) certifies no accuracy at all (:func:`certifying`).

Either way :class:`~attnlearn.errors.AccuracyError` states the accuracy the learner could
certify and carries it (``.certified``: the information limit, the estimate, or ``inf``).
"""

import math
from contextlib import contextmanager

from ..errors import AccuracyError, RecoveryError
from .long.info import information_limit
from .tolerances import LongTolerances

__all__ = ["refuse_out_of_reach", "check_accuracy", "certifying"]


def refuse_out_of_reach(d, H, *, L, relative, accuracy, tol=None):
    r"""Refuse, before any query, an accuracy far below the long design's information limit.

    Parameters
    ----------
    d, H, L : int
        Token width, heads and query length (``max_length``) of the request.
    relative : float
        ``relative_error``: the answers' relative standard deviation.
    accuracy : float
        The relative parameter error asked.
    tol : LongTolerances, optional

    Returns
    -------
    float
        The information limit (the request is met only if it is at most ``refuse_factor``
        times ``accuracy``).

    Raises
    ------
    AccuracyError
        ``information_limit > refuse_factor * accuracy``; ``.certified`` is the limit.

    Used in: chapter 5b (through ``learn``).
    """
    tol = LongTolerances() if tol is None else tol
    limit = information_limit(d, H, L=L, relative=relative, tol=tol)
    if limit > tol.refuse_factor * accuracy:
        raise AccuracyError(
            f"accuracy={accuracy:.1e} is out of reach of design=\"long\" at relative_error={relative:.1e} "
            f"(heads={H}, d={d}, max_length={L}): the Cramer-Rao bound of its configurations (an estimated floor, "
            f"chapter 5b) allows no better than {limit:.1e}, more than {tol.refuse_factor:g}x the accuracy "
            "asked; the accuracy it could certify is at best that. No query was asked.",
            certified=limit, requested=accuracy)
    return limit


def check_accuracy(recovery, accuracy):
    """``recovery`` unchanged when ``accuracy`` is None or its ``error_estimate`` is within it.

    Raises
    ------
    AccuracyError
        ``recovery.error_estimate > accuracy``; ``.certified`` is the estimate and
        ``.recovery`` the recovery (its model reproduces the oracle within that estimate).

    Used in: chapter 5b (through ``learn``).
    """
    if accuracy is None:
        return recovery
    estimate = float(recovery.error_estimate)
    if estimate > accuracy:
        raise AccuracyError(
            f"accuracy={accuracy:.1e} is out of reach: the learner could certify {estimate:.2e} (the recovery's "
            f"error estimate), not {accuracy:.1e}; the recovery is attached as .recovery",
            certified=estimate, requested=accuracy, recovery=recovery)
    return recovery


@contextmanager
def certifying(accuracy):
    """Within it, when ``accuracy`` is not None, a :class:`~attnlearn.errors.RecoveryError` other than
    :class:`~attnlearn.errors.AccuracyError` becomes an ``AccuracyError`` certifying nothing
    (``.certified = inf``), raised from it: the message names the failure, ``__cause__`` is it.

    An oracle's fault (:class:`attnlearn.protocol.OracleProtocolError`, not a ``RecoveryError``)
    and a bad argument pass through unchanged.

    Used in: chapter 5b (through ``learn``).
    """
    try:
        yield
    except AccuracyError:
        raise
    except RecoveryError as exc:
        if accuracy is None:
            raise
        raise AccuracyError(
            f"accuracy={accuracy:.1e} is out of reach: the recovery failed, so the learner could certify no "
            f"accuracy ({type(exc).__name__}: {exc})", certified=math.inf, requested=accuracy) from exc
