r"""The end of every design's run: held-out random sequences the model must reproduce, the
:class:`~.results.Recovery` (:func:`finish`) and the zero function when no head is found.

Used in: chapter 4 (the held-out check), chapter 5 (verification) and every design's run.
"""

from dataclasses import dataclass

import numpy as np

from .._arith import to_mp
from .._checks import heldout_discrepancy
from ..errors import CheckFailedError, IllConditionedError
from ..model import MultiHeadAttention
from .certificate import QueryLog, certify, confront, confront_spread
from .results import Recovery
from .samples import scale_back
from .tolerances import CertificateTolerances

__all__ = ["holdout_batches", "Ending", "finish", "zero_function"]

_CERT = CertificateTolerances()


def holdout_batches(rng, holdout, max_length, d, *, f, exact):
    """The held-out queries, lazily: about ``holdout / max_length`` random sequences of every length
    1..max_length (at least one each), tokens of the design's scale."""
    for N in range(1, max_length + 1):
        m = max(1, holdout // max_length + (1 if N <= holdout % max_length else 0))
        Xs = rng.normal(size=(m, N, d)) * np.sqrt(f) / np.sqrt(d)
        yield to_mp(Xs) if exact else Xs


@dataclass
class Ending:
    r"""What a design's run hands to :func:`finish`.

    Attributes
    ----------
    model : MultiHeadAttention or AttentionLayer
        The recovered model.
    queries : dict
        The counts so far (``design``, ``constants``, ``redraws``, ``holdout``, perhaps ``scale``).
    diagnostics : Diagnostics or LeanDiagnostics
        What the design saw.
    estimate : float
        The first-order relative error bound (float64).
    eps_out : float
        The samples' output error (float64).
    f : float
        The query scale: held-out tokens have standard deviation :math:`\sqrt{f/d}`.
    max_length : int
        The design's longest query.
    spread : AnswerSpread, optional
        ``design="long"``: the first-order spread of the model's answers from the design's own
        covariances (:class:`~.long.solve.AnswerSpread`), which the held-out answers confront
        (:func:`~.certificate.confront_spread`).
    stated : mpf, optional
        Exact mode: the output error itself; below ``eps_out`` (beyond 100 digits, see
        :attr:`~.tolerances.Tolerances.bound_floor`) the returned ``error_estimate`` and
        ``output_error`` are scaled back to it (:func:`~attnlearn.learner.samples.scale_back`).
    holdout_length : int, optional
        The held-out queries have every length up to this (default ``max_length``;
        ``design="long"`` asks shorter ones, see :class:`~.tolerances.LongTolerances`).

    Used in: chapters 4, 5b, 7 and 8 (every design's run).
    """

    model: object
    queries: dict
    diagnostics: object
    estimate: float
    eps_out: float
    f: float
    max_length: int
    spread: object = None
    stated: object = None
    holdout_length: int = None


def finish(oracle, ending, *, opt, rng, tol):
    """Check the recovered model on the held-out queries and return the :class:`Recovery`.

    A float64 paper or lean recovery is first refitted over every answer (:func:`~.certificate.certify`)
    and its estimate confronted with the held-out answers (:func:`~.certificate.confront`); a long
    design's run logs its held-out answers alone (a :class:`~.certificate.QueryLog` attached to
    the access for them, detached after) and confronts its own covariance with them
    (``ending.spread``, :func:`~.certificate.confront_spread`). Either only raises the estimate.

    Parameters
    ----------
    oracle : Access
        The checked, counted oracle access.
    ending : Ending
        The run's model, counts, diagnostics and bounds.
    opt : PaperOptions, LeanOptions or LongOptions
        ``learn``'s options: ``opt.holdout`` verification queries in all, less the check queries
        already asked (``ending.queries["holdout"]``); with ``opt.holdout`` 0 the recovery is
        unverified.
    rng : numpy.random.Generator
        The learner's random stream (the held-out queries draw from it).
    tol : Tolerances
        The mode's tolerances.

    Returns
    -------
    Recovery

    Raises
    ------
    CheckFailedError
        The held-out discrepancy exceeds ``tol.holdout_output`` times the relative output error and
        ``tol.holdout_estimate`` times the error estimate.
    IllConditionedError
        The error estimate exceeds ``tol.estimate_limit`` (a relative error above 100% is no result).

    Used in: chapters 4, 5b, 7 and 8 (every design's run).
    """
    model, queries, estimate, eps_out = ending.model, ending.queries, ending.estimate, ending.eps_out
    holdout, max_length = opt.holdout - queries["holdout"], ending.max_length
    log, cert = getattr(oracle, "log", None), None
    if log is not None:  # float64 paper or lean: the joint certificate (refit and bound)
        done = certify(model, log, eps_out=eps_out, design_estimate=estimate, tol=_CERT)
        if done is not None:
            model, estimate, cert = done
    holdout_error = None
    if holdout:
        before, mark = oracle.queries, (log.mark if log is not None else 0)
        batches = holdout_batches(rng, holdout, ending.holdout_length or max_length, model.d, f=ending.f,
                                  exact=tol.exact)
        if ending.spread is None:
            holdout_error, scale_ref = heldout_discrepancy(oracle, model, batches, rounded=True)
        else:  # the long design logs only its held-out answers, to confront its covariance with them
            log, mark = QueryLog(), 0
            oracle.log = log
            try:
                holdout_error, scale_ref = heldout_discrepancy(oracle, model, batches, rounded=True)
            finally:
                oracle.log = None
        queries["holdout"] = queries.get("holdout", 0) + oracle.queries - before
        if cert is not None:  # the held-out answers measure the noise again; the estimate only rises
            estimate = confront(cert, model, log, mark, estimate=estimate, tol=_CERT)
        elif ending.spread is not None:  # ... or test the long design's covariance; it only rises
            estimate, ending.diagnostics.holdout_chi2 = confront_spread(ending.spread, log, mark,
                                                                        estimate=estimate, tol=_CERT)
        limit = max(tol.holdout_output * eps_out / max(scale_ref, tol.tiny), tol.holdout_estimate * estimate)
        if holdout_error > limit:
            raise CheckFailedError(
                f"the recovered model misses the oracle on {queries['holdout']} held-out queries: relative "
                f"discrepancy {holdout_error:.2e} > {limit:.2e} ({tol.holdout_estimate:g} x the error estimate "
                f"{estimate:.1e})"
            )
    _check_estimate(estimate, cert, eps_out=eps_out, tol=tol)
    queries["total"] = (queries["design"] + queries["constants"] + queries["redraws"] + queries["holdout"]
                        + queries.get("scale", 0))
    sensitivity = estimate / eps_out if eps_out > 0 else float("inf")
    return Recovery(model=model, heads=model.H, queries=queries, max_length=max_length,
                    output_error=scale_back(eps_out, eps_out, ending.stated),
                    error_estimate=scale_back(estimate, eps_out, ending.stated), sensitivity=sensitivity,
                    holdout_error=holdout_error, diagnostics=ending.diagnostics, verified=opt.holdout > 0,
                    certificate=cert)


def _check_estimate(estimate, cert, *, eps_out, tol):
    """Refuse an error estimate above ``tol.estimate_limit`` (a relative error above 100% is no
    result), saying what the certificate ``cert`` (or the design's own bound, without one) shows."""
    if estimate <= tol.estimate_limit:
        return
    if cert is not None:
        raise IllConditionedError(
            f"error estimate {estimate:.1e} exceeds 1 (100% relative error): refitted over every answer, the model "
            f"leaves residuals of {cert.measured or cert.noise:.1e} (output error {eps_out:.1e}) and the answers do "
            "not determine its parameters (a wrong head count, noise above the one stated, or too ill-conditioned "
            "a design: use exact mode, robust=True (design=\"paper\"), or fewer heads)")
    raise IllConditionedError(
        f"first-order error estimate {estimate:.1e} exceeds 1 (100% relative error): the interpolation is "
        f"too ill-conditioned for this model at output error {eps_out:.1e} ("
        + ("a smaller output_error, more digits or more heads=" if tol.exact
           else "use exact mode, robust=True (design=\"paper\"), or fewer heads") + ")"
    )


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
