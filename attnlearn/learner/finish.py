r"""The end of every design's run: held-out random sequences the model must reproduce, the
:class:`~.results.Recovery` (:func:`finish`) and the zero function when no head is found.

Used in: chapter 4 (the held-out check), chapter 5 (verification) and every design's run.
"""

import numpy as np

from .._arith import to_mp
from .._checks import heldout_discrepancy
from ..errors import CheckFailedError, IllConditionedError
from ..model import MultiHeadAttention
from .certificate import certify, confront
from .results import Recovery
from .tolerances import CertificateTolerances
from .samples import scale_back

__all__ = ["holdout_batches", "finish", "zero_function"]

_CERT = CertificateTolerances()


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
    are scaled back to it (:func:`~attnlearn.learner.samples.scale_back`).

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
    log, cert = getattr(oracle, "log", None), None
    if log is not None:  # float64 paper or lean: the joint certificate (refit and bound)
        done = certify(model, log, eps_out=eps_out, design_estimate=estimate, tol=_CERT)
        if done is not None:
            model, estimate, cert = done
    holdout_error = None
    if holdout:
        before, mark = oracle.queries, (log.mark if log is not None else 0)
        batches = holdout_batches(rng, holdout, holdout_length or max_length, model.d, f=f, exact=tol.exact)
        holdout_error, scale_ref = heldout_discrepancy(oracle, model, batches, rounded=True)
        queries["holdout"] = queries.get("holdout", 0) + oracle.queries - before
        if cert is not None:  # the held-out answers measure the noise again; the estimate only rises
            estimate = confront(cert, model, log, mark, estimate=estimate, tol=_CERT)
        limit = max(tol.holdout_output * eps_out / max(scale_ref, tol.tiny), tol.holdout_estimate * estimate)
        if holdout_error > limit:
            raise CheckFailedError(
                f"the recovered model misses the oracle on {queries['holdout']} held-out queries: relative "
                f"discrepancy {holdout_error:.2e} > {limit:.2e} ({tol.holdout_estimate:g} x the error estimate "
                f"{estimate:.1e})"
            )
    if not estimate <= tol.estimate_limit and cert is not None:
        raise IllConditionedError(
            f"error estimate {estimate:.1e} exceeds 1 (100% relative error): refitted over every answer, the model "
            f"leaves residuals of {cert.measured or cert.noise:.1e} (output error {eps_out:.1e}) and the answers do "
            "not determine its parameters (a wrong head count, noise above the one stated, or too ill-conditioned "
            "a design: use exact mode, robust=True (design=\"paper\"), or fewer heads)")
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
                    holdout_error=holdout_error, diagnostics=diagnostics, verified=bool(verified),
                    certificate=cert)


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
