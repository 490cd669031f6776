r"""The options of :func:`~attnlearn.learner.learn.learn`: validated, with the design's defaults, its
cost refused before any query when absurd (:func:`build_options`).

Used in: chapter 4 (the paper design's options and counts), chapters 5b, 7 and 8 (the long, biased
and lean designs' options).
"""

from dataclasses import dataclass

from ..arguments import check_count, check_flag, check_heads, check_oracle, check_real, check_seed
from .cost import check_cost, fallback_cost, fallback_length, learn_cost, long_cost
from .tolerances import FALLBACK_ESTIMATE, LONG_MAX_HEADS, LONG_MIN_LENGTH, MAX_LENGTH, LongTolerances, Tolerances

__all__ = ["Options", "DESIGNS", "UNUSED", "refuse_unused", "build_options"]


@dataclass(frozen=True)
class Options:
    """The validated arguments of :func:`learn` (see there); ``n`` is ``heads`` or ``max_heads``
    and ``heads_given`` says which."""

    d: int
    n: int
    heads_given: bool
    seed: object
    robust: bool
    output_error: object
    holdout: int
    spread: float
    method: str
    redraw_rounds: int
    nodes: str
    scale: str = "probe"
    bias: bool = False
    design: str = "paper"
    relative_error: float = None
    max_length: int = MAX_LENGTH
    fallback: int = 0
    fallback_above: float = FALLBACK_ESTIMATE


DESIGNS = ("paper", "lean", "long")

#: The paper design's defaults of the options only it uses (``None`` in :func:`learn`'s signature,
#: so that a design that does not use them can tell them given).
PAPER_METHOD, PAPER_REDRAW_ROUNDS = "linearised", 4

#: The options a design does not use, and why: each is refused before any query when given (not
#: None), naming the option and the design (:func:`refuse_unused`). ``robust``, ``nodes`` (lean),
#: ``scale``, ``bias`` (lean), ``max_heads`` (long) and ``relative_error`` have their own refusals
#: in :func:`build_options`.
UNUSED = {
    "paper": {},
    "lean": {"method": "it fits with the linearised formulation",
             "redraw_rounds": "it asks no block constant and redraws no configuration"},
    "long": {"method": "its fits are weighted Levenberg-Marquardt fits of step curves",
             "nodes": "its queries are ratio queries of max_length tokens",
             "spread": "it sets its own scale (LongTolerances.spread)",
             "redraw_rounds": "it redraws its groups itself (LongTolerances.group_redraws)"},
}


def refuse_unused(design, given):
    """Refuse, before any query, an option that ``design`` does not use (:data:`UNUSED`).

    Used in: chapters 4, 5b and 8 (every call of :func:`~attnlearn.learner.learn.learn`).

    Parameters
    ----------
    design : {"paper", "lean", "long"}
        The design asked.
    given : dict of str to object
        The options as passed to :func:`~attnlearn.learner.learn.learn` (None: not given).

    Raises
    ------
    ValueError
        An option the design does not use was given, naming it and the design.
    """
    for name, why in UNUSED[design].items():
        if given.get(name) is not None:
            raise ValueError(f'{name} is not an option of design="{design}": {why} (omit {name}=)')


def build_options(oracle, d, *, heads, max_heads, holdout, nodes, spread, method, robust, seed, output_error,
             redraw_rounds, max_queries, max_length, scale="probe", bias=False, design="paper", relative_error=None):
    """Validate :func:`learn`'s arguments (in this order), fill the mode's defaults, refuse an absurd
    cost; returns the :class:`Options` and the mode's :class:`~.tolerances.Tolerances`."""
    if not isinstance(design, str) or design not in DESIGNS:
        raise ValueError(f'design must be "paper", "lean" or "long", got {design!r}')
    refuse_unused(design, {"method": method, "nodes": nodes, "spread": spread, "redraw_rounds": redraw_rounds})
    method = PAPER_METHOD if method is None else method
    redraw_rounds = PAPER_REDRAW_ROUNDS if redraw_rounds is None else redraw_rounds
    if design == "long":
        if scale != "probe":
            raise ValueError('scale="search" is an option of design="paper" (design="long" finds its own scale)')
        return _long_options(oracle, d, heads=heads, max_heads=max_heads, holdout=holdout, robust=robust, seed=seed,
                             output_error=output_error, relative_error=relative_error, max_queries=max_queries,
                             max_length=max_length, bias=check_flag(bias, "bias"))
    if relative_error is not None:
        raise ValueError(f'relative_error is an option of design="long" (design="{design}" takes output_error)')
    given_length = max_length
    max_length = MAX_LENGTH if max_length is None else max_length
    n = check_heads(heads, max_heads)
    d = check_oracle(oracle, d)
    tol = Tolerances.for_mode(exact=oracle.exact, dps=oracle.dps)
    if method not in ("linearised", "loewner"):
        raise ValueError(f'method must be "linearised" or "loewner", got {method!r}')
    robust = check_flag(robust, "robust")
    if design == "lean" and robust:
        raise ValueError('robust=True is an option of design="paper"; design="lean" asks no block constant')
    if design == "lean" and nodes is not None:
        raise ValueError('nodes is an option of design="paper"; design="lean" chooses its own nodes')
    if oracle.exact and robust:
        raise ValueError("robust=True is a float64 mode; exact mode needs no extra queries")
    holdout = check_count(tol.holdout if holdout is None else holdout, "holdout", 0)
    nodes, spread = _nodes_and_spread(nodes, spread, robust=robust, exact=oracle.exact, tol=tol)
    seed = check_seed(seed)
    output_error = _output_error(output_error, oracle)
    redraw_rounds = check_count(redraw_rounds, "redraw_rounds", 0)
    if scale not in ("probe", "search"):
        raise ValueError(f'scale must be "probe" or "search", got {scale!r}')
    if scale == "search" and oracle.exact:
        raise ValueError('scale="search" is a float64 mode: exact mode keeps the paper\'s count (scale="probe")')
    bias = check_flag(bias, "bias")
    max_queries = check_count(max_queries, "max_queries")
    max_length = check_count(max_length, "max_length")
    if design == "lean" and (bias or scale != "probe"):
        raise ValueError('bias=True and scale="search" are options of design="paper" (the lean design learns '
                         "the paper's model at the probe's scale)")
    parts, longest = learn_cost(d, n, robust=robust, holdout=holdout, bias=bias, design=design)
    fallback = fallback_length(robust=robust, heads_given=heads is not None, n=n, max_length=given_length)
    if fallback:  # the long design's queries too, should the paper's fail
        parts["fallback"] = fallback_cost(d, n, fallback, holdout=holdout, bias=bias)
        longest = max(longest, fallback)
    check_cost(parts, longest, max_queries=max_queries, max_length=max_length, n=n)
    return Options(d, n, heads is not None, holdout=holdout, spread=spread, method=method, robust=robust,
                   nodes=nodes, seed=seed, output_error=output_error, redraw_rounds=redraw_rounds, scale=scale,
                   bias=bias, design=design, fallback=fallback), tol


def _nodes_and_spread(nodes, spread, *, robust, exact, tol):
    """The paper design's ``nodes`` and ``spread``, checked, with the mode's defaults (``"ratios"`` in
    exact or robust mode, else ``"copies"``; :meth:`~.tolerances.Tolerances.default_spread`).

    Used in: chapters 3 and 4 (copies and ratios), chapter 8 (the lean design's spread)."""
    if nodes is None:
        nodes = "ratios" if robust or exact else "copies"
    if nodes not in ("copies", "ratios"):
        raise ValueError(f'nodes must be "copies" or "ratios", got {nodes!r}')
    if spread is None:
        spread = tol.default_spread(nodes)
    return nodes, float(check_real(spread, "spread", positive=True))  # float arithmetic whatever the type given


def _output_error(output_error, oracle):
    """``output_error`` checked (None: the mode's default, left to the run); > 0 in exact mode.

    Used in: chapters 4 and 5."""
    if output_error is not None:
        output_error = check_real(output_error, "output_error")
        if oracle.exact and output_error == 0:
            raise ValueError(
                f"output_error must be > 0 in exact mode: the oracle's answers are rounded to {oracle.dps} digits "
                "(omit it for the default, one unit of the last digit)"
            )
    return output_error


def _long_options(oracle, d, *, heads, max_heads, holdout, robust, seed, output_error, relative_error, max_queries,
                  max_length, bias=False):
    """:func:`build_options` for ``design="long"`` (:mod:`~.long`): float64, ``heads`` given, both noise
    levels checked, ``max_length`` given explicitly (its queries are that long), the cost counted."""

    if heads is None:
        raise ValueError('design="long" needs heads=H (max_heads is not supported: the groups label H heads)')
    n = check_count(heads, "heads")
    if n > LONG_MAX_HEADS:
        raise ValueError(f'design="long" supports heads <= {LONG_MAX_HEADS} (its links compare H! pairings), '
                         f"got heads={n}")
    d = check_oracle(oracle, d)
    if oracle.exact:
        raise ValueError('design="long" is a float64 design for noisy oracles; an exact oracle needs design="paper"')
    if check_flag(robust, "robust"):
        raise ValueError('robust=True is an option of design="paper"; design="long" is robust by construction')
    if max_length is None:
        raise ValueError(f'design="long" asks queries of max_length tokens: pass max_length= explicitly (at least '
                         f"{LONG_MIN_LENGTH}; 4096 gives a window of 16.6 nats)")
    max_length = check_count(max_length, "max_length")
    if max_length < LONG_MIN_LENGTH:
        raise ValueError(f'max_length must be at least {LONG_MIN_LENGTH} with design="long", got {max_length}')
    output_error = 0.0 if output_error is None else float(check_real(output_error, "output_error"))
    relative_error = 0.0 if relative_error is None else float(check_real(relative_error, "relative_error"))
    tol = Tolerances.for_mode(exact=False)
    holdout = check_count(tol.holdout if holdout is None else holdout, "holdout", 0)
    seed = check_seed(seed)
    max_queries = check_count(max_queries, "max_queries")
    lt = LongTolerances()
    parts, longest = long_cost(d, n, max_length, tol=lt, bias=bias)
    parts["held-out"] = max(holdout, lt.holdout_length) if holdout else 0
    check_cost(parts, longest, max_queries=max_queries, max_length=max_length, n=n)
    return Options(d, n, True, holdout=holdout, spread=1.0, method="linearised", robust=False, nodes="ratios",
                   seed=seed, output_error=output_error, redraw_rounds=0, design="long", bias=bias,
                   relative_error=relative_error, max_length=max_length), tol
