r"""The options of :func:`~attnlearn.learner.learn.learn`: validated, with the design's defaults, its
cost refused before any query when absurd (:func:`build_options`).

Used in: chapter 4 (the paper design's options and counts), chapters 5b, 7, 8 and 9 (the long,
biased, lean and rank designs' options).
"""

from dataclasses import dataclass
from typing import ClassVar

from ..arguments import check_count, check_flag, check_heads, check_oracle, check_real, check_seed
from .cost import check_cost, fallback_cost, fallback_length, learn_cost, long_cost, long_holdout_count
from .family import LINEAR, Family, family_of
from .tolerances import (FALLBACK_ESTIMATE, LONG_FALLBACK_LENGTH, LONG_MAX_HEADS, LONG_MIN_LENGTH, MAX_LENGTH, MAX_QUERIES, LongTolerances,
                         Tolerances)

__all__ = ["Request", "Options", "PaperOptions", "LeanOptions", "LongOptions", "RankOptions", "DESIGNS", "UNUSED", "refuse_unused",
           "build_options"]


#: The paper design's defaults of the options only it uses (``None`` in :func:`learn`'s signature,
#: so that a design that does not use them can tell them given).
PAPER_METHOD, PAPER_REDRAW_ROUNDS = "linearised", 4

#: The values of ``learn(fallback=...)``.
FALLBACKS = ("auto", "long", None)
#: ``learn``'s ``scale`` rules (:mod:`~.paper.scale`).
SCALES = ("auto", "probe", "search")


@dataclass(frozen=True)
class Request:
    """The arguments of :func:`~attnlearn.learner.learn.learn` as given (see there), before any
    check; its defaults are ``learn``'s. :func:`build_options` turns it into a design's options.

    Used in: chapter 4 (every call of :func:`~attnlearn.learner.learn.learn`), chapter 8 (the lean
    design's benchmark builds its options from one)."""

    heads: object = None
    max_heads: object = None
    seed: object = 0
    robust: object = False
    output_error: object = None
    holdout: object = None
    spread: object = None
    method: object = None
    redraw_rounds: object = None
    nodes: object = None
    max_queries: object = MAX_QUERIES
    max_length: object = None
    scale: object = "auto"
    bias: object = False
    design: object = "paper"
    relative_error: object = None
    fallback: object = "auto"
    rank: object = None


@dataclass(frozen=True)
class Options:
    """The validated options every design shares: ``d``, ``n`` (``heads`` or ``max_heads``,
    ``heads_given`` says which), ``seed``, ``holdout`` and ``output_error`` (see :func:`learn`).

    Used in: chapters 4, 5b, 7 and 8 (through ``learn``)."""

    d: int
    n: int
    heads_given: bool
    seed: object
    holdout: int
    output_error: object


@dataclass(frozen=True)
class PaperOptions(Options):
    """``design="paper"``'s options (see :func:`learn`): ``robust``, ``spread``, ``method``,
    ``redraw_rounds``, ``nodes``, ``scale``, ``family`` (from ``bias``,
    :class:`~.family.Family`); ``fallback`` is the length of the long
    design's queries robust mode falls back to (0: none; :func:`~.cost.fallback_length`), taken
    when the paper's estimate exceeds ``fallback_above``; ``fallback_hint`` says whether a failure
    may suggest the fallback (not with ``fallback=None``).

    Used in: chapters 4 and 7 (through ``learn``)."""

    design: ClassVar[str] = "paper"
    robust: bool = False
    spread: float = 1.0
    method: str = PAPER_METHOD
    redraw_rounds: int = PAPER_REDRAW_ROUNDS
    nodes: str = "copies"
    scale: str = "auto"
    family: Family = LINEAR
    fallback: int = 0
    fallback_above: float = FALLBACK_ESTIMATE
    fallback_hint: bool = True

    def long_options(self):
        """The :class:`LongOptions` of robust mode's fallback (:mod:`~.fallback`): queries of
        ``fallback`` tokens, the same ``family``, ``output_error`` as the absolute noise.

        Used in: chapter 7."""
        return LongOptions(self.d, self.n, True, seed=self.seed, holdout=self.holdout, family=self.family,
                           output_error=0.0 if self.output_error is None else float(self.output_error),
                           relative_error=0.0, max_length=self.fallback)


@dataclass(frozen=True)
class LeanOptions(Options):
    """``design="lean"``'s options (see :func:`learn`): its ``spread``.

    Used in: chapter 8."""

    design: ClassVar[str] = "lean"
    spread: float = 1.0


@dataclass(frozen=True)
class LongOptions(Options):
    """``design="long"``'s options (see :func:`learn`): ``max_length`` (every ratio query's
    length), ``relative_error``, ``family`` (from ``bias``, :class:`~.family.Family`) and ``rank``
    (an upper bound on every head's rank: the groups after the rank is certified are reduced,
    :mod:`~.long.rank`; None: every group full);
    ``output_error`` is a float (0: none beyond the
    oracle's rounding).

    Used in: chapters 5b and 7."""

    design: ClassVar[str] = "long"
    max_length: int = LONG_MIN_LENGTH
    relative_error: float = 0.0
    family: Family = LINEAR
    rank: int = None


@dataclass(frozen=True)
class RankOptions(Options):
    """``design="rank"``'s options (see :func:`learn`): its ``spread`` and ``rank`` (an upper bound
    on every head's rank, or None: found from the answers alone).

    Used in: chapter 9 (real sizes) and ``benchmarks/rank.py``."""

    design: ClassVar[str] = "rank"
    spread: float = 1.0
    rank: int = None


DESIGNS = ("paper", "lean", "long", "rank")

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
    "rank": {"method": "it fits with the linearised formulation",
             "redraw_rounds": "it redraws no configuration",
             "nodes": "its configurations are asked at the ratio nodes"},
}


def refuse_unused(design, given):
    """Refuse, before any query, an option that ``design`` does not use (:data:`UNUSED`).

    Used in: chapters 4, 5b and 8 (every call of :func:`~attnlearn.learner.learn.learn`).

    Parameters
    ----------
    design : {"paper", "lean", "long", "rank"}
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


def build_options(oracle, d, request):
    """Validate :func:`learn`'s arguments (in this order), fill the design's defaults, refuse an
    absurd cost, all before any query.

    Parameters
    ----------
    oracle : object following :mod:`attnlearn.protocol`
        The oracle (its ``d``, ``exact`` and ``dps`` are read, nothing is asked).
    d : int
        Token width.
    request : Request
        The arguments as given.

    Returns
    -------
    (PaperOptions or LeanOptions or LongOptions, Tolerances)
        The design's options and the mode's :class:`~.tolerances.Tolerances`.

    Raises
    ------
    TypeError, ValueError
        As :func:`learn` (an argument of the wrong type or out of range, an option the design
        does not use, a request above ``max_queries`` or ``max_length``), naming the argument.

    Used in: chapters 4, 5b, 7 and 8 (every call of :func:`~attnlearn.learner.learn.learn`).
    """
    req = request
    if not isinstance(req.design, str) or req.design not in DESIGNS:
        raise ValueError(f'design must be "paper", "lean", "long" or "rank", got {req.design!r}')
    if req.rank is not None and req.design not in ("rank", "long"):
        raise ValueError(f'rank is an option of design="rank" and design="long" (design="{req.design}" learns every '
                         "W_h as a full d x d matrix)")
    if not (req.fallback is None or (isinstance(req.fallback, str) and req.fallback in FALLBACKS)):
        raise ValueError(f'fallback must be "auto", "long" or None, got {req.fallback!r}')
    if req.fallback == "long" and req.design != "paper":
        raise ValueError(f'fallback="long" is robust mode\'s fallback, an option of design="paper" (got '
                         f'design="{req.design}")')
    refuse_unused(req.design, {"method": req.method, "nodes": req.nodes, "spread": req.spread,
                               "redraw_rounds": req.redraw_rounds})
    if not isinstance(req.scale, str) or req.scale not in SCALES:
        raise ValueError(f'scale must be "auto", "probe" or "search", got {req.scale!r}')
    if req.design != "paper" and req.scale != "auto":
        raise ValueError(f'scale={req.scale!r} is an option of design="paper" (design="{req.design}" finds its own '
                         'scale)')
    if req.design == "long":
        return _long_options(oracle, d, req)
    if req.relative_error is not None:
        raise ValueError(f'relative_error is an option of design="long" (design="{req.design}" takes output_error)')
    return _paper_or_lean_options(oracle, d, req)


def _paper_or_lean_options(oracle, d, req):
    """:func:`build_options` for ``design="paper"``, ``"lean"`` and ``"rank"`` (the checks in
    :func:`learn`'s order).

    Used in: chapters 4, 7 and 8."""
    design = req.design
    method = PAPER_METHOD if req.method is None else req.method
    redraw_rounds = PAPER_REDRAW_ROUNDS if req.redraw_rounds is None else req.redraw_rounds
    max_length = MAX_LENGTH if req.max_length is None else req.max_length
    n = check_heads(req.heads, req.max_heads)
    d = check_oracle(oracle, d)
    tol = Tolerances.for_mode(exact=oracle.exact, dps=oracle.dps)
    if method not in ("linearised", "loewner"):
        raise ValueError(f'method must be "linearised" or "loewner", got {method!r}')
    robust = check_flag(req.robust, "robust")
    if design == "lean" and robust:
        raise ValueError('robust=True is an option of design="paper"; design="lean" asks no block constant')
    if design == "rank" and robust:
        raise ValueError('robust=True is an option of design="paper"; design="rank" asks every block\'s constant and '
                         "redraws no configuration")
    if design == "lean" and req.nodes is not None:
        raise ValueError('nodes is an option of design="paper"; design="lean" chooses its own nodes')
    if oracle.exact and robust:
        raise ValueError("robust=True is a float64 mode; exact mode needs no extra queries")
    holdout = check_count(tol.holdout if req.holdout is None else req.holdout, "holdout", 0)
    nodes, spread = _nodes_and_spread(req.nodes, req.spread, robust=robust, exact=oracle.exact, tol=tol)
    seed = check_seed(req.seed)
    output_error = _output_error(req.output_error, oracle)
    redraw_rounds = check_count(redraw_rounds, "redraw_rounds", 0)
    if req.scale == "search" and oracle.exact:
        raise ValueError('scale="search" is a float64 mode: exact mode keeps the paper\'s count (scale="probe")')
    scale = "probe" if oracle.exact else req.scale  # exact mode's digits resolve crowded poles
    bias = check_flag(req.bias, "bias")
    max_queries = check_count(req.max_queries, "max_queries")
    max_length = check_count(max_length, "max_length")
    if design == "lean" and bias:
        raise ValueError('bias=True is an option of design="paper" (the lean design learns the paper\'s model, '
                         'without biases)')
    if design == "rank" and bias:
        raise ValueError('bias=True is an option of design="paper" (the rank design learns the paper\'s model, '
                         'without biases)')
    if design == "rank" and not oracle.exact:
        raise ValueError('design="rank" needs an exact oracle (Oracle(model, precision=...)): on a float64 oracle '
                         "its queries of 2n + 1 tokens separate at most two heads and its first-order error estimate "
                         'is far above the error (use design="long" or design="paper" with robust=True)')
    rank = None if req.rank is None else check_count(req.rank, "rank")
    if rank is not None and rank > d:
        raise ValueError(f"rank must be at most d = {d} (a head's W_h is d x d), got rank={rank}")
    parts, longest = learn_cost(d, n, robust=robust, holdout=holdout, bias=bias, design=design, rank=rank)
    fallback = _fallback(req, robust=robust, n=n, max_length=max_length)
    if fallback:  # the long design's queries too, should the paper's fail
        parts["fallback"] = fallback_cost(d, n, fallback, holdout=holdout, bias=bias)
        longest = max(longest, fallback)
    check_cost(parts, longest, max_queries=max_queries, max_length=max_length, n=n)
    if design == "lean":
        return LeanOptions(d, n, req.heads is not None, seed=seed, holdout=holdout, output_error=output_error,
                           spread=spread), tol
    if design == "rank":
        return RankOptions(d, n, req.heads is not None, seed=seed, holdout=holdout, output_error=output_error,
                           spread=spread, rank=rank), tol
    return PaperOptions(d, n, req.heads is not None, seed=seed, holdout=holdout, output_error=output_error,
                        robust=robust, spread=spread, method=method, redraw_rounds=redraw_rounds, nodes=nodes,
                        scale=scale, family=family_of(bias), fallback=fallback, fallback_hint=req.fallback is not None), tol


def _fallback(req, *, robust, n, max_length):
    """The length of robust mode's fallback queries (0: none) for ``learn(fallback=...)``:
    ``"auto"``, :func:`~.cost.fallback_length` (robust, ``heads`` given and at most
    :data:`~.tolerances.LONG_MAX_HEADS`, ``max_length`` given and at least
    :data:`~.tolerances.LONG_MIN_LENGTH`); ``"long"``, the same, every condition required;
    ``None``, never.

    Raises
    ------
    ValueError
        ``fallback="long"`` without one of its conditions, naming it.

    Used in: chapter 7."""
    if req.fallback is None:
        return 0
    if req.fallback == "long":
        if not robust:
            raise ValueError('fallback="long" is robust mode\'s fallback: it needs robust=True')
        if req.heads is None:
            raise ValueError('fallback="long" needs heads=H (the long design labels H heads; max_heads is not '
                             "supported)")
        if n > LONG_MAX_HEADS:
            raise ValueError(f'fallback="long" needs heads <= {LONG_MAX_HEADS} (the long design compares H! '
                             f"pairings), got heads={n}")
        if req.max_length is None or max_length < LONG_MIN_LENGTH:
            given = "not given" if req.max_length is None else f"got {max_length}"
            raise ValueError(f'fallback="long" needs max_length given explicitly and at least {LONG_MIN_LENGTH} '
                             f"(the long design's queries are that long, {LONG_FALLBACK_LENGTH} at most), {given}")
    return fallback_length(robust=robust, heads_given=req.heads is not None, n=n,
                           max_length=None if req.max_length is None else max_length)


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


def _long_options(oracle, d, req):
    """:func:`build_options` for ``design="long"`` (:mod:`~.long`): float64, ``heads`` given, both noise
    levels checked, ``max_length`` given explicitly (its queries are that long), the cost counted.

    Used in: chapter 5b."""
    bias = check_flag(req.bias, "bias")
    if req.heads is None:
        raise ValueError('design="long" needs heads=H (max_heads is not supported: the groups label H heads)')
    n = check_count(req.heads, "heads")
    if n > LONG_MAX_HEADS:
        raise ValueError(f'design="long" supports heads <= {LONG_MAX_HEADS} (its links compare H! pairings), '
                         f"got heads={n}")
    d = check_oracle(oracle, d)
    if oracle.exact:
        raise ValueError('design="long" is a float64 design for noisy oracles; an exact oracle needs design="paper"')
    if check_flag(req.robust, "robust"):
        raise ValueError('robust=True is an option of design="paper"; design="long" is robust by construction')
    if req.max_length is None:
        raise ValueError(f'design="long" asks queries of max_length tokens: pass max_length= explicitly (at least '
                         f"{LONG_MIN_LENGTH}; 4096 gives a window of 16.6 nats)")
    max_length = check_count(req.max_length, "max_length")
    if max_length < LONG_MIN_LENGTH:
        raise ValueError(f'max_length must be at least {LONG_MIN_LENGTH} with design="long", got {max_length}')
    output_error = 0.0 if req.output_error is None else float(check_real(req.output_error, "output_error"))
    relative_error = 0.0 if req.relative_error is None else float(check_real(req.relative_error, "relative_error"))
    tol = Tolerances.for_mode(exact=False)
    holdout = check_count(tol.holdout if req.holdout is None else req.holdout, "holdout", 0)
    seed = check_seed(req.seed)
    max_queries = check_count(req.max_queries, "max_queries")
    rank = None if req.rank is None else check_count(req.rank, "rank")
    if rank is not None and rank > d:
        raise ValueError(f"rank must be at most d = {d} (a head's W_h is d x d), got rank={rank}")
    lt = LongTolerances()
    parts, longest = long_cost(d, n, max_length, tol=lt, bias=bias, rank=rank)
    parts["held-out"] = long_holdout_count(holdout, lt)
    check_cost(parts, longest, max_queries=max_queries, max_length=max_length, n=n)
    return LongOptions(d, n, True, seed=seed, holdout=holdout, output_error=output_error, max_length=max_length,
                       relative_error=relative_error, family=family_of(bias), rank=rank), tol
