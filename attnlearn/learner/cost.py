r"""What a request costs, known before any query: every design's query count and longest query,
the verification queries, and the refusal of an absurd cost (:func:`check_cost`).

Used in: chapter 4 (the paper's exact count, claims C6, C7), chapter 5b (the long design's),
chapter 7 (the biased design's and robust mode's fallback), chapter 8 (the lean design's) and
chapter 9 (the rank designs' and the floor of rank-:math:`p` heads).
"""

from .nodes import ratio_grid
from .tolerances import LONG_FALLBACK_LENGTH, LONG_MAX_HEADS, LONG_MIN_LENGTH, LongTolerances, Tolerances

__all__ = ["query_budget", "bias_budget", "lean_budget", "lean_holdout_count", "rank_floor", "rank_budget", "long_cost", "holdout_count", "check_cost", "learn_cost", "fallback_length", "fallback_cost",
           "long_holdout_count"]


def query_budget(d, n):
    r"""The paper's count :math:`4nd^2-2n+1` and maximum length :math:`2n+1` (claims C6, C7)."""
    return 4 * n * d * d - 2 * n + 1, 2 * n + 1


def bias_budget(d, n):
    r"""The biased design's count :math:`4nd^2+4nd-2n+1` and longest query :math:`2n+1` (module
    docstring).

    Parameters
    ----------
    d : int
        Token width.
    n : int
        Heads the design serves.

    Returns
    -------
    (int, int)
        The design's query count and its longest query.

    Used in: chapter 7."""
    return 4 * n * d * d + 4 * n * d - 2 * n + 1, 2 * n + 1


def holdout_count(holdout, n):
    """Queries asked for ``holdout`` verification queries with :math:`n` heads: the first
    ``min(holdout, Tolerances.check_configs)`` are check queries (:func:`~attnlearn.learner.paper.verify.verify_fits`), the
    rest random sequences of at least one of every length :math:`1..2n+1`
    (:func:`~attnlearn.learner.finish.holdout_batches`)."""
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


def learn_cost(d, n, *, robust, holdout, bias=False, design="paper", rank=None):
    """The queries :func:`learn` will ask (by kind) and its longest query, known before any is asked:
    the design's :math:`4nd^2-2n+1` of length at most :math:`2n+1` (claims C6, C7; with
    ``design="lean"`` at most :math:`n(d^2+d)+2d-1`, :func:`~.lean.lean_budget`; with ``bias`` the
    biased design's :math:`4nd^2+4nd-2n+1`, :func:`~attnlearn.learner.cost.bias_budget`), robust mode's :math:`d-1`
    constants (:math:`d` with ``bias``) and the verification queries (:func:`holdout_count`; the lean
    design's :func:`~.lean.lean_holdout_count`; with ``design="rank"`` :func:`rank_budget` at the
    ``rank`` given, or :math:`d`) (robust mode's redraws depend on the answers and are
    not counted; neither is robust mode's fallback, :func:`fallback_cost`)."""
    if design == "lean":
        (count, longest), held_out = lean_budget(d, n), lean_holdout_count(holdout, n)
    elif design == "rank":
        (count, longest), held_out = rank_budget(d, n, d if rank is None else rank), lean_holdout_count(holdout, n)
    else:
        (count, longest), held_out = (bias_budget(d, n) if bias else query_budget(d, n)), holdout_count(holdout, n)
    parts = {"design": count, "constants": (d if bias else d - 1) if robust else 0, "held-out": held_out}
    return parts, longest


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

    lt = LongTolerances()
    parts, _ = long_cost(d, n, L, tol=lt, bias=bias)
    return sum(parts.values()) + long_holdout_count(holdout, lt)


def long_holdout_count(holdout, tol):
    r"""Held-out queries the long design asks for ``holdout``: at least one of every length up to
    ``tol.holdout_length`` (:class:`~.tolerances.LongTolerances`), so
    :math:`\max(\text{holdout}, \text{holdout\_length})`, or 0 when ``holdout`` is 0.

    Used in: chapters 5b and 7."""
    return max(holdout, tol.holdout_length) if holdout else 0


def lean_budget(d, n):
    r"""The lean design's count :math:`n(d^2+d)+2d-1` (:math:`d^2+d+1` for :math:`n=1`) and its
    longest query :math:`2n+1`, when all :math:`n` heads are canonical and a check query is
    needed in every block (an upper bound otherwise).

    Used in: chapter 8 (and by :func:`learn_cost`)."""
    extra = 2 * (d - 1) if n >= 2 else 0  # the links and the checks
    return 1 + 2 * n * d + n * d * (d - 1) + extra, 2 * n + 1


def lean_holdout_count(holdout, n):
    r"""Verification queries the lean design asks for ``holdout``: held-out random sequences only
    (:func:`~attnlearn.learner.finish.finish`), at least one of every length :math:`1..2n+1`, so
    :math:`\max(\text{holdout}, 2n+1)`, or 0 when ``holdout`` is 0. (The paper design's first
    verification queries are check queries on its fits, :func:`holdout_count`; the
    lean design's own links and check queries already test its fits, inside its count.)

    Used in: chapter 8 (and by :func:`learn_cost`)."""
    return max(holdout, 2 * n + 1) if holdout else 0


def long_cost(d, H, L, *, tol, bias=False, rank=None):
    r"""The queries of the long design (by kind) and its longest query, known before any is asked:
    ``V`` (:math:`d`; :math:`d+1` with ``bias``), the probe, the anchors (with ``bias`` one more
    configuration per group, its origin), the two passes (:math:`2d` configurations per group
    each), the links (three per group after the first, none with one head); every configuration
    costs one query per ratio. With ``rank`` :math:`p` (:mod:`~.long.rank`) at most
    :math:`\min(p+1,d)` groups are full and the others ask
    ``tol.per_group(tol.reduced_dim(p, d))`` configurations per pass and no link (an upper bound:
    the count follows the ranks found).

    Used in: chapters 5b, 7 and 9 (the count before any query)."""
    R = len(ratio_grid(L, tol.ratios(H))[0])
    full = d if rank is None else min(rank + 1, d)
    per_pass = full * tol.per_group(d) + (d - full) * tol.per_group(tol.reduced_dim(rank or d, d))
    parts = {"V": d + bias, "probe": tol.probe_configs * R,
             "anchor": d * (tol.base_tries + 1 + bias) * R if H >= tol.anchored_heads else 0,
             "coarse": per_pass * R,
             "placed": per_pass * R, "links": (full - 1) * tol.link_configs * R if H > 1 else 0}
    return parts, L


def rank_floor(d, n, p):
    r"""The information floor of :math:`n` heads of rank :math:`p`: :math:`n(2dp-p^2+d)` real
    parameters.

    A rank-:math:`p` matrix :math:`W_h=A_hB_h^\top` (:math:`A_h,B_h` of size :math:`d\times p`)
    has :math:`2dp` entries in its factors, but :math:`(A_hG,B_hG^{-\top})` gives the same
    :math:`W_h` for every invertible :math:`G`: the :math:`p^2` entries of that gauge are not
    parameters of the function, so :math:`W_h` has :math:`2dp-p^2` (the dimension of the
    manifold of rank-:math:`p` matrices), and :math:`v_h` adds :math:`d`. A design that
    recovers an open set of such models asks at least this many queries (one real number
    each). At :math:`p=d`: :math:`n(d^2+d)`, the lean design's floor.

    Used in: chapter 9 (real sizes) and ``benchmarks/rank.py``."""
    return n * (2 * d * p - p * p + d)


def rank_budget(d, n, p):
    r"""The rank design's count and longest query for :math:`n` heads of rank at most :math:`p`
    (``learn(..., design="rank")``, :mod:`~.rank`): block 1 is the lean design's phase 1
    (:math:`1+2nd` queries, and :math:`d-1` one-sample links for :math:`n\ge2`); then
    :math:`\min(p,d-1)` full blocks of :math:`d` configurations and :math:`d-1-\min(p,d-1)`
    reduced blocks of :math:`p`, :math:`2n` queries each, and every later block's constant
    (one query). For :math:`n\ge2`:

    .. math:: 2d-1+2nd+2n\,p\,(2d-p-1)\quad(p<d),\qquad 2nd^2+2d-1\quad(p=d),

    i.e. :math:`2n_p-2np+2d-1` with :math:`n_p` the floor (:func:`rank_floor`) for :math:`p<d`:
    exactly :math:`2n_p-1` at a layer's head dimension :math:`p=d/n`, below :math:`2n_p` whenever
    :math:`np\ge d`. For one head there is no link (:math:`d-1` fewer). Longest query :math:`2n+1`.
    An upper bound when heads merge or some rank is below :math:`p` (the count then follows the
    largest rank found).

    Used in: chapter 9 (real sizes), and by :func:`learn_cost`."""
    full = min(p, d - 1)
    configs = d * full + p * (d - 1 - full)
    links = d - 1 if n >= 2 else 0
    return 1 + 2 * n * d + links + (d - 1) + 2 * n * configs, 2 * n + 1
