"""Checks shared by the learners: the held-out comparison of a recovered model with its oracle.

Used in: chapters 4 and 5 (:func:`attnlearn.learn`'s held-out check) and chapter 6
(:func:`attnlearn.learn_transformer`'s). Private: not part of the API.
"""

import numpy as np

from ._arith import to_float

__all__ = ["heldout_discrepancy"]

TINY = 1e-300  # floor of the output scale (the zero function has scale 0)


def heldout_discrepancy(oracle, model, batches, *, rounded):
    r"""Largest :math:`|f(X)-\hat f(X)|` over held-out queries, relative to the largest :math:`|f(X)|`.

    Parameters
    ----------
    oracle : Oracle
        Value-query access (each batch is asked once, counted by the oracle).
    model : object with ``batch``
        The recovered model.
    batches : iterable of arrays (m, N, d)
        The held-out queries, one array per length (drawn lazily: the caller's random
        stream is consumed in the order asked).
    rounded : bool, keyword-only
        Round both answers to float64 before the difference (:func:`attnlearn.learn`), or
        take it in the answers' own arithmetic (:func:`attnlearn.learn_transformer`: mpmath
        in exact mode).

    Returns
    -------
    relative : float
        The largest discrepancy over the largest answer (floored at :math:`10^{-300}`).
    scale : float
        The largest answer :math:`\max|f(X)|`.
    """
    worst = scale = 0.0
    for Xs in batches:
        y, yhat = oracle.batch(Xs), model.batch(Xs)
        if rounded:
            y, yhat = to_float(y), to_float(yhat)
        y, yhat = np.asarray(y), np.asarray(yhat)
        worst = max(worst, float(np.max(np.abs(y - yhat))))
        scale = max(scale, float(np.max(np.abs(y))))
    return worst / max(scale, TINY), scale
