r""":func:`learn`: the multi-head learner as a pipeline of its stages (DESIGN §4.3-4.4; claims C3-C7).

Used in: chapter 4 (introduced, with the exact counts), chapters 5 and 6.

The stages, in order (each a module of :mod:`attnlearn.learner`): the query design
(:mod:`~.design`), asking (:mod:`~.asking`), fitting the configurations (:mod:`~.fitting`),
robust mode's redraws (:mod:`~.robust`), the constants and their calibration
(:mod:`~.constants`), labelling across configurations (:mod:`~.labelling`), the solves for
:math:`W_h` and :math:`v_h` (:mod:`~.solves`), the checks and the held-out finish
(:mod:`~.checks`). Every tolerance is in :mod:`~.tolerances`.
"""

import math
import numbers
from dataclasses import dataclass, replace

import mpmath
import numpy as np

from .._arith import working_precision
from ..errors import RecoveryError
from ..protocol import Access
from ..protocol import check_oracle as protocol_check
from .accuracy import certifying, check_accuracy, refuse_out_of_reach
from .bias import bias_budget, learn_biased
from .checks import zero_function
from .labelling import label_crosses, label_links
from .lean import lean_budget, lean_holdout_count, learn_lean
from .results import query_budget
from .solves import assemble_W, canonical_heads, solve_blocks, solve_v
from .stages import finish_design, fit_design
from .tolerances import (FALLBACK_ESTIMATE, LONG_FALLBACK_LENGTH, LONG_MAX_HEADS, LONG_MIN_LENGTH, MAX_LENGTH, MAX_QUERIES,
                         LongTolerances, Tolerances)

__all__ = ["learn", "Options", "check_count", "check_flag", "check_real", "check_seed", "check_oracle",
           "check_cost", "learn_cost"]


def check_count(value, name, minimum=1):
    """``value`` as an ``int`` if it is an integer (not a bool) at least ``minimum``.

    Raises
    ------
    TypeError
        ``value`` is not an integer (a bool, a float such as ``2.0``, a string, None).
    ValueError
        ``value`` is below ``minimum``.
    """
    what = "a positive integer" if minimum == 1 else ("a non-negative integer" if minimum == 0
                                                      else f"an integer >= {minimum}")
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be {what}, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be {what}, got {value}")
    return int(value)


_check_count = check_count  # the name of earlier versions


def check_flag(value, name):
    """``value`` as a ``bool`` if it is one (``True``/``False`` or a numpy bool); else TypeError."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__} {value!r}")
    return bool(value)


def check_real(value, name, *, positive=False):
    """``value`` unchanged if it is a finite real number (a Python, numpy or mpmath number, not a
    bool) that is ``> 0`` (``positive``) or ``>= 0``.

    Raises
    ------
    TypeError
        ``value`` is not a real number.
    ValueError
        ``value`` is not finite or out of range.
    """
    what = "a positive number (finite, > 0)" if positive else "a finite number >= 0"
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be {what}, got {type(value).__name__} {value!r}")
    finite = mpmath.isfinite(value) if isinstance(value, mpmath.mpf) else math.isfinite(value)
    if not (finite and (value > 0 if positive else value >= 0)):
        raise ValueError(f"{name} must be {what}, got {value!r}")
    return value


def check_seed(value, name="seed", *, generator=True):
    """``value`` unchanged if :func:`numpy.random.default_rng` takes it: None, a non-negative integer,
    a sequence of them or (with ``generator``) a ``Generator``, ``BitGenerator`` or ``SeedSequence``.

    Raises
    ------
    TypeError
        A bool, a float, a string or any other object.
    ValueError
        A negative integer.
    """
    kinds = (np.random.Generator, np.random.BitGenerator, np.random.SeedSequence)
    what = ("None, a non-negative integer, a sequence of them or a numpy Generator" if generator
            else "a non-negative integer")
    if generator and (value is None or isinstance(value, kinds)):
        return value
    ints = value if isinstance(value, (list, tuple, np.ndarray)) and generator else [value]
    if not (len(ints) and all(isinstance(i, numbers.Integral) and not isinstance(i, (bool, np.bool_))
                              for i in np.ravel(np.asarray(ints, dtype=object)))):
        raise TypeError(f"{name} must be {what}, got {type(value).__name__} {value!r}")
    if any(i < 0 for i in np.ravel(np.asarray(ints, dtype=object))):
        raise ValueError(f"{name} must be {what}, got {value!r}")
    return value


def check_oracle(oracle, d):
    """``d`` as an ``int`` if it is a positive integer equal to the token width of ``oracle``, an
    object following the oracle protocol (:func:`attnlearn.protocol.check_oracle`)."""
    d = check_count(d, "d")
    protocol_check(oracle, d)  # attributes, their types, the token width
    return d


def holdout_count(holdout, n):
    """Queries asked for ``holdout`` verification queries with :math:`n` heads: the first
    ``min(holdout, Tolerances.check_configs)`` are check queries (:func:`~.verify.verify_fits`), the
    rest random sequences of at least one of every length :math:`1..2n+1`
    (:func:`~.checks.holdout_batches`)."""
    checks = min(holdout, Tolerances.check_configs)
    rest = holdout - checks
    return checks + (max(rest, 2 * n + 1) if rest else 0)


def check_cost(parts, longest, *, max_queries, max_length, n):
    """Refuse a request whose cost is absurd, before any query.

    Parameters
    ----------
    parts : dict of str to int
        The queries the request needs, by kind (e.g. ``design``, ``held-out``).
    longest : int
        Its longest query, in tokens.
    max_queries, max_length : int
        The limits (see :data:`~.tolerances.MAX_QUERIES` and :data:`~.tolerances.MAX_LENGTH`).
    n : int
        The number of heads (``heads`` or ``max_heads``) that sets the longest query.

    Raises
    ------
    ValueError
        More queries than ``max_queries`` or a query longer than ``max_length``, with the count.
    """
    total = sum(parts.values())
    cost = (f"{total:,} queries ({', '.join(f'{k} {v:,}' for k, v in parts.items() if v)}) of up to "
            f"{longest:,} tokens")
    if total > max_queries:
        raise ValueError(f"this request would ask {cost}, more than max_queries = {max_queries:,}: pass "
                         f"max_queries={total} to allow it")
    if longest > max_length:
        raise ValueError(f"this request would ask {cost}: its longest query (2n + 1 with n = {n:,}) is longer "
                         f"than max_length = {max_length:,}; pass max_length={longest} to allow it")


def learn_cost(d, n, *, robust, holdout, bias=False, design="paper"):
    """The queries :func:`learn` will ask (by kind) and its longest query, known before any is asked:
    the design's :math:`4nd^2-2n+1` of length at most :math:`2n+1` (claims C6, C7; with
    ``design="lean"`` at most :math:`n(d^2+d)+2d-1`, :func:`~.lean.lean_budget`; with ``bias`` the
    biased design's :math:`4nd^2+4nd-2n+1`, :func:`~.bias.bias_budget`), robust mode's :math:`d-1`
    constants (:math:`d` with ``bias``) and the verification queries (:func:`holdout_count`; the lean
    design's :func:`~.lean.lean_holdout_count`) (robust mode's redraws depend on the answers and are
    not counted; neither is robust mode's fallback, :func:`fallback_cost`)."""
    if design == "lean":
        (count, longest), held_out = lean_budget(d, n), lean_holdout_count(holdout, n)
    else:
        (count, longest), held_out = (bias_budget(d, n) if bias else query_budget(d, n)), holdout_count(holdout, n)
    parts = {"design": count, "constants": (d if bias else d - 1) if robust else 0, "held-out": held_out}
    return parts, longest


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


def _options(oracle, d, *, heads, max_heads, holdout, nodes, spread, method, robust, seed, output_error,
             redraw_rounds, max_queries, max_length, scale="probe", bias=False, design="paper", relative_error=None):
    """Validate :func:`learn`'s arguments (in this order), fill the mode's defaults, refuse an absurd
    cost; returns the :class:`Options` and the mode's :class:`~.tolerances.Tolerances`."""
    if not isinstance(design, str) or design not in DESIGNS:
        raise ValueError(f'design must be "paper", "lean" or "long", got {design!r}')
    if design == "long":
        if scale != "probe":
            raise ValueError('scale="search" is an option of design="paper" (design="long" finds its own scale)')
        return _long_options(oracle, d, heads=heads, max_heads=max_heads, holdout=holdout, robust=robust, seed=seed,
                             output_error=output_error, relative_error=relative_error, max_queries=max_queries,
                             max_length=max_length, bias=check_flag(bias, "bias"))
    if relative_error is not None:
        raise ValueError('relative_error is an option of design="long" (the paper design takes output_error)')
    given_length = max_length
    max_length = MAX_LENGTH if max_length is None else max_length
    if (heads is None) == (max_heads is None):
        raise ValueError("give exactly one of heads=H (the number of heads) or max_heads=H0 (an upper bound)")
    n = check_count(heads if heads is not None else max_heads, "heads" if heads is not None else "max_heads")
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
    if nodes is None:
        nodes = "ratios" if robust or oracle.exact else "copies"
    if nodes not in ("copies", "ratios"):
        raise ValueError(f'nodes must be "copies" or "ratios", got {nodes!r}')
    if spread is None:
        spread = tol.default_spread(nodes)
    spread = float(check_real(spread, "spread", positive=True))  # float arithmetic whatever the type given
    seed = check_seed(seed)
    if output_error is not None:
        output_error = check_real(output_error, "output_error")
        if oracle.exact and output_error == 0:
            raise ValueError(
                f"output_error must be > 0 in exact mode: the oracle's answers are rounded to {oracle.dps} digits "
                "(omit it for the default, one unit of the last digit)"
            )
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


def fallback_length(*, robust, heads_given, n, max_length):
    """The length of the long design's queries that robust mode falls back to (0: none): with
    ``robust``, ``heads`` given (at most :data:`~.tolerances.LONG_MAX_HEADS`) and ``max_length``
    given explicitly and at least :data:`~.tolerances.LONG_MIN_LENGTH`, the smaller of
    ``max_length`` and :data:`~.tolerances.LONG_FALLBACK_LENGTH`."""
    if not (robust and heads_given and n <= LONG_MAX_HEADS and max_length is not None
            and max_length >= LONG_MIN_LENGTH):
        return 0
    return min(max_length, LONG_FALLBACK_LENGTH)


def fallback_cost(d, n, L, *, holdout, bias):
    """Queries of the long design at length ``L`` (:func:`~.long.long_cost`) with its held-out
    queries: what robust mode's fallback may add."""
    from .long import long_cost

    lt = LongTolerances()
    parts, _ = long_cost(d, n, L, tol=lt, bias=bias)
    return sum(parts.values()) + (max(holdout, lt.holdout_length) if holdout else 0)


def _long_options(oracle, d, *, heads, max_heads, holdout, robust, seed, output_error, relative_error, max_queries,
                  max_length, bias=False):
    """:func:`_options` for ``design="long"`` (:mod:`~.long`): float64, ``heads`` given, both noise
    levels checked, ``max_length`` given explicitly (its queries are that long), the cost counted."""
    from .long import long_cost

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


def learn(oracle, d, *, heads=None, max_heads=None, seed=0, robust=False, output_error=None, holdout=None,
          spread=None, method="linearised", redraw_rounds=4, nodes=None, max_queries=MAX_QUERIES,
          max_length=None, scale="probe", bias=False, design="paper", relative_error=None, accuracy=None):
    r"""Recover the canonical heads :math:`\{(W_h,v_h)\}` of a multi-head attention oracle.

    Parameters
    ----------
    oracle : Oracle or any object following :mod:`attnlearn.protocol`
        Value-query access (float64 or exact mode): ``.d``, ``.exact``, ``.dps`` and
        ``.batch(Xs)``; the learner reads nothing else and counts the queries itself.
    d : int
        Token width (must match the oracle).
    heads, max_heads : int, keyword-only
        Exactly one: the model's number of heads :math:`H` (claim C6) or an upper bound
        :math:`H_0` (claim C7). Either way :math:`n` = that number sets the nodes
        :math:`t=1..2n`; the canonical count :math:`H'\le n` is detected.
    seed : int, sequence of int, numpy Generator or None, keyword-only
        Seed of the learner's random query vectors (anything :func:`numpy.random.default_rng`
        takes, but not a bool or a float).
    robust : bool, keyword-only
        float64 practice mode: query each block's constant :math:`V^\top q_k` directly
        (:math:`d-1` extra queries, :math:`d` with ``bias=True``, reported) instead of deriving
        it from the learned :math:`V`, and redraw ill-conditioned configurations (reported).
        ``design="paper"`` only. With ``heads`` given (at most
        :data:`~attnlearn.learner.tolerances.LONG_MAX_HEADS`) and ``max_length`` given explicitly and at
        least :data:`~attnlearn.learner.tolerances.LONG_MIN_LENGTH`, robust mode falls back to
        ``design="long"`` (queries of ``min(max_length, 4096)`` tokens) when the paper's design
        raises a :class:`RecoveryError` or returns an error estimate above ``accuracy`` (default
        :data:`~attnlearn.learner.tolerances.FALLBACK_ESTIMATE`, 1e-6): the abandoned queries
        are reported as ``queries["abandoned"]``, the reason as ``diagnostics.fallback``, and
        ``max_queries`` counts the long design's queries too (chapter 7). If the long design
        raises too, the paper's recovery is returned when there was one, else the error.
    output_error : float, optional, keyword-only
        Bound :math:`\varepsilon` on the absolute error of each oracle output. Default:
        :math:`10^{-\mathrm{dps}}` times the output scale in exact mode, and
        :math:`4\,\epsilon_{64}` times it in float64 (the oracle's own rounding). A finite
        number :math:`\ge 0`; in float64 the oracle's own rounding is added to it, so 0 says
        "no error beyond the oracle's rounding" (and turns on the checks of a stated output
        error); in exact mode it must be :math:`> 0`, the answers having ``dps`` digits.
    holdout : int, optional, keyword-only
        Number of verification queries, counted apart from the paper's design (whose count
        stays exact, ``recovery.queries["design"]``): first up to 4 check queries that the
        fits must predict (:mod:`attnlearn.learner.verify`), then held-out random sequences
        the model must reproduce. Default 8 in exact mode and 32 in float64; with 0 the
        result is returned unverified (``recovery.verified`` False). ``design="lean"`` asks
        held-out sequences only, :math:`\max(\text{holdout},2n+1)` of them (its links and
        check queries test its fits inside its count).
    spread : float, optional, keyword-only
        Target for :math:`\max_h|\ell_h|`: after the first configuration the query
        vectors are rescaled so that the pole positions spread about this much. Default
        3 in exact mode, where the oracle's rounding is far below float64's and
        wider-spread poles interpolate better; in float64 1 with the paper's nodes and 2
        with ``nodes="ratios"``, which see poles on both sides of :math:`\ell=0`
        (chapters 3 and 4 measure the choices). ``design="lean"`` takes the float64 default
        of the paper's nodes (1), with which chapter 8 measured it.
    method : {"linearised", "loewner"}, keyword-only
        float64 interpolation formulation (chapter 3 compares them); ``design="paper"`` only
        (``design="lean"`` fits with the default).
    redraw_rounds : int, keyword-only
        Robust mode: how many times (an integer :math:`\ge 0`) ill-conditioned configurations are redrawn (each
        redraw costs :math:`2n` queries per configuration, reported in
        ``recovery.queries["redraws"]``, with one query per redrawn block constant).
    nodes : {"copies", "ratios"}, optional, keyword-only
        The :math:`2n` queries of a configuration: DESIGN §4.1's :math:`S(x,q,t)`,
        :math:`t=1..2n` (``"copies"``, the default in float64 without ``robust``), or
        :math:`s` copies of :math:`x` then :math:`t` of :math:`q` at the ratios :math:`t/s`
        of :func:`attnlearn.rational.ratio_nodes` (``"ratios"``, the default in exact mode
        and with ``robust=True``). Both give exactly the paper's count
        :math:`4nd^2-2n+1` and longest query :math:`2n+1`; the ratios are far better
        conditioned (chapter 3; chapter 4 compares the two in exact mode).
    max_queries : int, keyword-only
        Refuse, before any query, a request that needs more queries than this: the design's
        :math:`4nd^2-2n+1`, robust mode's :math:`d-1` constants and the verification queries
        (:func:`holdout_count`: up to 4 check queries, then random sequences, at least one of
        every length up to :math:`2n+1`), and the long design's queries when robust mode may
        fall back to it (``robust``); robust mode's redraws
        depend on the answers and are not counted. Default
        :data:`~attnlearn.learner.tolerances.MAX_QUERIES` (:math:`10^7`).
    max_length : int, keyword-only
        Refuse, before any query, a request whose longest query (:math:`2n+1` tokens) is
        longer than this. Default :data:`~attnlearn.learner.tolerances.MAX_LENGTH` (129,
        i.e. :math:`n\le 64`). With ``design="long"`` it must be given (at least
        :data:`~attnlearn.learner.tolerances.LONG_MIN_LENGTH`): every ratio query is
        ``max_length`` tokens long. Given (at least that) with ``robust`` and ``heads``, it
        allows robust mode's fallback to the long design.
    scale : {"probe", "search"}, keyword-only
        How the query scale is found (:mod:`attnlearn.learner.scale`, chapter 7): ``"probe"``
        (default), the probe's factor clipped to :math:`[1/16,4]`; ``"search"`` (float64 only,
        for layers much smaller than the paper's random models, such as PyTorch's default
        initialisation), a factor up to 64 when the probe finds two or more heads, and
        re-probes at larger scales when the probe's fit fails (:math:`2n+1` queries each,
        reported in ``recovery.queries["scale"]``, not counted by ``max_queries``).
    bias : bool, keyword-only
        Learn score biases :math:`c_h` (score :math:`x_i^\top(W_hx_N+c_h)`) and an output
        offset :math:`\beta` besides the heads, as PyTorch's ``bias=True`` adds
        (:mod:`attnlearn.learner.bias`, chapter 7): one more block and midpoint crosses,
        :math:`4nd^2+4nd-2n+1` design queries; ``recovery.model`` is then a scalar
        :class:`attnlearn.layer.AttentionLayer` with ``c`` and ``b``. With ``design="long"``
        every step's position is affine in :math:`q` and each group's regression gains an
        intercept (:math:`d+1` one-token queries, and each anchored group one more
        configuration, :func:`~attnlearn.learner.long.long_cost`). Default False (the paper's
        model and design, unchanged).
    design : {"paper", "lean", "long"}, keyword-only
        The query design. ``"paper"`` (the default): the paper's block/link/cross design,
        :math:`4nd^2-2n+1` queries (claims C6, C7; everything above). ``"lean"``: the lean
        design of chapter 8, :math:`n(d^2+d)+2d-1` queries at most (:math:`d^2+d+1` for one
        head), longest :math:`2n+1`, exact mode or float64
        (:func:`attnlearn.learner.lean.learn_lean`); its verification queries are held-out
        random sequences only, :math:`\max(\text{holdout},2n+1)` of them (its links and check
        queries test its fits inside its count). ``"long"``: long ratio queries
        :math:`(x^a,q^b)`, :math:`a+b=` ``max_length``, and statistical fits weighted by the
        stated noise, for oracles with float32-level noise (:mod:`attnlearn.learner.long`,
        ``benchmarks/noise_design.py``); float64 oracles, ``heads`` given (at most
        :data:`~attnlearn.learner.tolerances.LONG_MAX_HEADS`), ``nodes``, ``spread``,
        ``method``, ``robust`` and ``redraw_rounds`` unused; its estimate comes from the fits'
        inverse Fisher matrices. ``nodes``, ``robust`` and ``scale`` are the paper design's
        options; ``bias`` serves both.
    relative_error : float, optional, keyword-only
        ``design="long"`` only: the standard deviation of each answer's error relative to the
        answer (e.g. ``6e-8`` for float32 arithmetic), added in quadrature to ``output_error``
        (then read as an absolute standard deviation).
    accuracy : float, optional, keyword-only
        The relative parameter error needed (a positive finite number): a recovery whose
        ``error_estimate`` exceeds it raises :class:`~attnlearn.errors.AccuracyError`, which
        states the accuracy the learner could certify (``.certified``) and carries the recovery.
        With ``design="long"`` a request is also refused before any query when the design's
        information limit (:func:`~attnlearn.learner.long_info.information_limit`, from
        ``relative_error``; an absolute ``output_error`` has no known scale before the
        queries) exceeds it ten times (:mod:`attnlearn.learner.accuracy`, chapter 5b). With
        ``accuracy`` asked, a recovery that fails raises ``AccuracyError`` too, certifying
        nothing (``.certified = inf``, the failure as its ``__cause__``).
        Default None: no requirement.

    Returns
    -------
    Recovery

    Raises
    ------
    TypeError
        An argument of the wrong type (e.g. ``robust="yes"``, ``output_error="a"``, an oracle
        without ``.d``/``.exact``/``.dps``/``.batch``), naming it.
    ValueError
        An argument out of range (e.g. ``redraw_rounds=-1``, ``output_error=nan``), naming it;
        options that do not go together (``design="lean"`` with ``robust=True``, ``nodes=``,
        ``bias=True`` or ``scale="search"``; ``scale="search"`` in exact mode); or a request
        costing more than ``max_queries`` queries or ``max_length`` tokens per query, with its
        count and longest query. All are raised before any query.
    RecoveryError
        A subclass naming the configuration and the residual when a check fails:
        :class:`PoleError`, :class:`InconsistentHeadCountError`,
        :class:`UnmatchedHeadsError`, :class:`IllConditionedError`,
        :class:`CheckFailedError`; :class:`AccuracyError` when ``accuracy`` is out of reach
        (before any query, after the recovery, or instead of any of these failures).

    Notes
    -----
    The design (DESIGN §4.4): random :math:`q_1..q_d`; block :math:`k` has final token
    :math:`q_k`, *base* configurations :math:`u_{k,j}` (:math:`j=1..d`) and *link*
    configurations :math:`u_{k,1}+u_{k,j}` (:math:`j=2..d`); *cross* configurations
    (:math:`k=2..d`) have final token :math:`q_1+q_k`. Each configuration costs the
    :math:`2n` queries :math:`S(x,q,t)`, :math:`t=1..2n`; one more query :math:`(q_1)`
    gives :math:`c_1=V^\top q_1`, and block 1's base configurations give :math:`V`
    through :math:`F(0)=V^\top x`. In all, :math:`2n(2d^2-1)+1=4nd^2-2n+1` queries of
    length at most :math:`2n+1` [1]_ (with ``nodes="ratios"`` the :math:`2n` queries are
    :math:`s` copies of :math:`x` then :math:`t` of :math:`q`, the same count and longest
    length). Then :math:`w_{h,k}=W_hq_k` from :math:`\ell=u^\top w_{h,k}` and
    :math:`W_h=[w_{h,1}\cdots w_{h,d}][q_1\cdots q_d]^{-1}`.

    Three refinements of the paper's square solves, none costing a query (chapter 4): each block's
    :math:`2d-1` base and link equations are solved by least squares weighted by their
    first-order error bounds (in closed form, :func:`attnlearn.learner.solves.block_lstsq`),
    :math:`v_h` from the residues of every configuration once the crosses have labelled the
    blocks, and the derived constants :math:`V^\top q_k` are refined by Newton steps against the
    link equations (:func:`attnlearn.learner.constants.calibrate_constants`).

    References
    ----------
    .. [1] S. Kim, I. Kim, J. Guo, "Provably Learning Multi-Head Attention with
           Queries", arXiv:2608.03294, 2026.
    """
    opt, tol = _options(oracle, d, heads=heads, max_heads=max_heads, holdout=holdout, nodes=nodes, spread=spread,
                        method=method, robust=robust, seed=seed, output_error=output_error,
                        redraw_rounds=redraw_rounds, max_queries=max_queries, max_length=max_length, scale=scale,
                        bias=bias, design=design, relative_error=relative_error)
    accuracy = None if accuracy is None else float(check_real(accuracy, "accuracy", positive=True))
    if accuracy is not None and opt.design == "long":  # the information limit, before any query
        refuse_out_of_reach(opt.d, opt.n, L=opt.max_length, relative=opt.relative_error, accuracy=accuracy)
    if accuracy is not None:  # robust mode's fallback keeps a paper recovery that meets it
        opt = replace(opt, fallback_above=accuracy)
    oracle = Access(oracle, opt.d)  # every answer checked (count, type, finiteness) and counted here
    with certifying(accuracy):  # with an accuracy asked, a failed recovery certifies none
        if opt.design == "long":
            from .long import learn_long

            return check_accuracy(learn_long(oracle, opt, tol), accuracy)
        with working_precision(oracle):
            pipeline = learn_lean if opt.design == "lean" else learn_biased if opt.bias else _pipeline
            if opt.fallback:
                pipeline = _with_fallback(pipeline)
            try:
                recovery = pipeline(oracle, opt, tol)
            except RecoveryError as exc:
                if opt.robust and not opt.fallback and opt.heads_given and opt.n <= LONG_MAX_HEADS:
                    exc.add_note(f'robust mode falls back to design="long" when max_length allows it: pass '
                                 f"max_length={LONG_FALLBACK_LENGTH} to let it")
                raise
            return check_accuracy(recovery, accuracy)


def _with_fallback(pipeline):
    r"""Robust mode with long queries allowed (:func:`fallback_length`): ``pipeline`` (the paper's
    design), and when it raises a :class:`~attnlearn.errors.RecoveryError` or returns an error
    estimate above ``opt.fallback_above`` (``accuracy`` when asked, else
    :data:`~.tolerances.FALLBACK_ESTIMATE`), the long design (:func:`~.long.learn_long`,
    ``design="long"`` at ``opt.fallback`` tokens, with ``bias`` as asked, ``output_error`` as
    the absolute noise). The recovery reports the abandoned attempt's queries as
    ``queries["abandoned"]`` (in the total) and why as ``diagnostics.fallback``. When the long
    design fails too, the paper's recovery is returned if there was one (its estimate is honest,
    only poor; the long design's queries are then the abandoned ones), else the long design's
    error is raised with a note naming the first.

    The paper's design separates the heads of a configuration by :math:`2n` nodes in a window of
    :math:`\log 2n` nats; PyTorch's default initialisation crowds the poles of four heads there
    (chapter 7), where the long design's window is :math:`2\log(L-1)`: 16.6 nats at
    :math:`L=4096`."""
    from .long import learn_long

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
        long_opt = replace(opt, design="long", max_length=opt.fallback, robust=False, nodes="ratios", spread=1.0,
                           method="linearised", redraw_rounds=0, scale="probe", relative_error=0.0,
                           output_error=0.0 if opt.output_error is None else float(opt.output_error))
        try:
            rec = learn_long(oracle, long_opt, tol)
        except RecoveryError as exc:
            if paper is None:
                exc.add_note(f'robust mode fell back to design="long" (queries of {opt.fallback} tokens) after '
                             f"this: {first}")
                raise
            # the paper's recovery stands, with its own (honest, if poor) estimate
            rec, first = paper, (f'{first}; design="long" (queries of {opt.fallback} tokens) then raised '
                                 f"{type(exc).__name__}: {exc}; the paper's recovery is returned")
            abandoned = oracle.queries - mid
        rec.queries["abandoned"] = abandoned
        rec.queries["total"] += abandoned
        rec.diagnostics.fallback = first
        return rec

    return run


def _pipeline(oracle, opt, tol):
    """The stages of :func:`learn`, in order: the design and its checked fits
    (:func:`.stages.fit_design`), then the links label each block, the crosses label the blocks, the
    solves give the heads, and :func:`.checks.finish` asks the held-out queries."""
    fitted = fit_design(oracle, opt, tol)
    design, state, H, diag, errors = fitted.design, fitted.state, fitted.H, fitted.diagnostics, fitted.errors
    if H == 0:
        model, estimate = zero_function(opt.d, output_error=opt.output_error, eps_out=errors.output,
                                        exact=tol.exact), 0.0
    else:
        eq, links = label_links(state, design.table, design.labels, tol=tol,
                                pre_links=None if fitted.pre is None else fitted.pre.links)
        blocks = solve_blocks(design, eq, tol=tol)
        crosses = label_crosses(state, design, blocks, tol=tol)
        heads = assemble_W(design, blocks, crosses)
        v, err_v = (solve_v(design, eq, crosses.perm, state, crosses.matching.observed, tol=tol) if opt.d > 1
                    else (blocks.v1, blocks.err_v1))
        model, estimate = canonical_heads(heads, v, err_v, tol=tol)
        diag.record_matchings(link=links, cross=crosses.matching)
    return finish_design(oracle, fitted, model, estimate, opt=opt, tol=tol)
