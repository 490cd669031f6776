r"""Robust mode's fallback to the long design (:func:`with_fallback`), when long queries are allowed.

Used in: chapter 7 (a PyTorch layer at its default initialisation).
"""

from ..errors import ContextLimitError, RecoveryError
from ..protocol import OracleRefusedError
from .tolerances import LONG_MIN_LENGTH

__all__ = ["with_fallback"]


def with_fallback(pipeline):
    r"""Robust mode with long queries allowed (:func:`fallback_length`): ``pipeline`` (the paper's
    design), and when it raises a :class:`~attnlearn.errors.RecoveryError` or returns an error
    estimate above ``opt.fallback_above`` (``accuracy`` when asked, else
    :data:`~.tolerances.FALLBACK_ESTIMATE`), the long design (:func:`~.long.learn_long`,
    ``design="long"`` at ``opt.fallback`` tokens, with ``bias`` as asked, ``output_error`` as
    the absolute noise). The recovery reports the abandoned attempt's queries as
    ``queries["abandoned"]`` (in the total) and why as ``diagnostics.fallback``. When the long
    design fails too, the paper's recovery is returned if there was one (its estimate is honest,
    only poor; the long design's queries are then the abandoned ones), else the long design's
    error is raised with a note naming the first. When the long design's estimate is not below the
    paper's, the paper's recovery is returned too (the better certified of the two).

    ``max_length`` is the oracle's context: the long design asks nothing longer. When the oracle
    refuses the long queries all the same (its own exception, an
    :class:`~attnlearn.protocol.OracleRefusedError`), no longer query is asked: the paper's
    recovery is returned if there was one, its ``diagnostics.fallback`` naming the refusal,
    else a :class:`~attnlearn.errors.ContextLimitError` names the length and both outcomes.

    The paper's design separates the heads of a configuration by :math:`2n` nodes in a window of
    :math:`\log 2n` nats; PyTorch's default initialisation crowds the poles of four heads there
    (chapter 7), where the long design's window is :math:`2\log(L-1)`: 16.6 nats at
    :math:`L=4096`."""
    from .long.run import learn_long

    def run(oracle, opt, tol):
        start = oracle.queries
        paper = None
        try:
            paper = pipeline(oracle, opt, tol)
            if paper.error_estimate <= opt.fallback_above:
                return paper
            first = (f"the paper's design returned an error estimate {float(paper.error_estimate):.1e}, above "
                     f"{opt.fallback_above:g}")
        except RecoveryError as exc:
            first = f"{type(exc).__name__}: {exc}"
        mid = oracle.queries
        abandoned = mid - start
        oracle.log = None  # the long design's queries are long and keep their own estimate
        try:
            rec = learn_long(oracle, opt.long_options(), tol)
        except (RecoveryError, OracleRefusedError) as exc:
            refused = isinstance(exc, OracleRefusedError)
            second = (f"the oracle refused its queries of {exc.length:,} tokens ({exc.__cause__!r})" if refused
                      else f"then raised {type(exc).__name__}: {exc}")
            if paper is None and refused:
                raise ContextLimitError(
                    f"the paper's design failed ({first}); robust mode's fallback, design=\"long\" (queries of "
                    f"{opt.fallback:,} tokens), {second}: its context is shorter; pass its context as max_length (at "
                    f"least {LONG_MIN_LENGTH}) to fall back within it", length=exc.length) from exc
            if paper is None:
                exc.add_note(f'robust mode fell back to design="long" (queries of {opt.fallback} tokens) after '
                             f"this: {first}")
                raise
            # the paper's recovery stands, with its own (honest, if poor) estimate
            rec, first = paper, (f'{first}; design="long" (queries of {opt.fallback} tokens) {second}; the '
                                 "paper's recovery is returned")
            abandoned = oracle.queries - mid
        else:
            if paper is not None and not rec.error_estimate < paper.error_estimate:  # the better estimate stands
                rec, first = paper, (f'{first}; design="long" (queries of {opt.fallback} tokens) returned an error '
                                     f"estimate {float(rec.error_estimate):.1e}, not below it; the paper's recovery "
                                     "is returned")
                abandoned = oracle.queries - mid
        rec.queries["abandoned"] = abandoned
        rec.queries["total"] += abandoned
        rec.diagnostics.fallback = first
        return rec

    return run
