"""The canonical form of a multi-head model, and comparing models up to it.

Used in: chapter 2 (introduced), chapters 3-6 (every recovery is scored with
:func:`param_error` against :func:`canonical` of the true model).
"""

import mpmath
import numpy as np
from scipy.optimize import linear_sum_assignment

from ._arith import absmax, eps_of, is_mp, norm, to_float, to_mp
from .model import MultiHeadAttention

__all__ = ["canonical", "param_error", "matched_error", "default_atol"]


def _input_prec(*arrays):
    r"""Working precision (bits) that carries every mpmath entry of ``arrays`` exactly.

    An ``mpf`` does not record the precision it was computed at, but its mantissa is
    stored exactly (``x._mpf_[3]`` is its bit count), and a value computed at ``p`` bits has
    at most ``p`` of them. The largest bit count over the inputs is therefore the precision
    the inputs carry (a value with trailing zero bits reports fewer, so the maximum over a
    model's entries is used); mpmath's current precision is kept when it is larger, so a
    caller's ``mpmath.workdps`` still raises it, and inputs that carry no more bits than the
    current precision are compared and measured as before.
    """
    prec = mpmath.mp.prec
    for a in arrays:
        a = np.asarray(a)
        if a.dtype != object:
            continue
        for x in a.reshape(-1):
            if isinstance(x, mpmath.mpf):
                prec = max(prec, x._mpf_[3])
    return prec


# how far beyond the inputs' precision an exact-mode sum of v vectors may grow to stay exact
_EXACT_SUM_EXTRA_BITS = 1100


def _exact_sum(xs):
    r"""Sum of mpf numbers without rounding while their magnitudes are within about
    :math:`2^{1000}` of each other (beyond that, rounded at 1100 bits more than the working
    precision, far below the inputs' own rounding).

    Summed at the bit count the exact sum needs: from the top bit of the largest summand to
    the bottom bit of the smallest, plus carries.
    """
    parts = [x._mpf_ for x in xs if x]
    if not parts:
        return mpmath.mpf(0)
    top = max(exp + bc for _, _, exp, bc in parts)
    bottom = min(exp for _, _, exp, _ in parts)
    need = top - bottom + len(parts).bit_length() + 1
    prec = mpmath.mp.prec  # canonical has already raised it to the inputs' precision
    with mpmath.workprec(max(prec, min(need, prec + _EXACT_SUM_EXTRA_BITS))):
        return mpmath.fsum(xs)


def default_atol(model):
    r"""The default tolerance of :func:`canonical`: :math:`\epsilon^{3/4}\,s`.

    :math:`\epsilon` is the unit roundoff of the model's arithmetic (float64, or for an
    mpmath model the precision its entries carry: the larger of mpmath's current precision
    and the largest mantissa of an entry, see :func:`canonical`) and
    :math:`s=\max(1,\max|W|,\max|v|)` the model's scale.
    """
    scale = max(1.0, absmax(model.W), absmax(model.v))
    with mpmath.workprec(_input_prec(model.W, model.v)):
        return eps_of(model.W) ** 0.75 * scale


def _sort_key(W, v):
    return tuple(to_float(W).ravel().tolist()) + tuple(to_float(v).ravel().tolist())


def canonical(model, *, atol=None):
    r"""The canonical form: merge heads with equal :math:`W_h`, sum their :math:`v_h`, drop zero sums.

    Parameters
    ----------
    model : MultiHeadAttention
    atol : float, optional, keyword-only
        Two heads are merged when :math:`\max_{ij}|(W_a-W_b)_{ij}|\le` ``atol``; a merged
        head is dropped when :math:`\max_i|(\sum v_h)_i|\le` ``atol``. Default
        :func:`default_atol` (``eps**0.75`` times the model's scale). Use ``atol=0`` to
        merge only exactly equal matrices.

    Returns
    -------
    MultiHeadAttention
        The canonical model, heads in lexicographic order of ``(W_h, v_h)`` (so the
        result does not depend on the order of the input heads), possibly with ``H = 0``.
        In the arithmetic of the input.

    Notes
    -----
    Merging is by single linkage: a head joins the group of any head within ``atol``.
    Heads with the same :math:`W` have the same attention weights, so their outputs add
    as one head with value vector :math:`\sum v_h`; a head with :math:`v=0` outputs zero.
    Chapter 2 shows that two models define the same function exactly when their
    canonical forms agree up to a permutation of heads (chapter 2).

    An mpmath model is merged in the precision of its entries, never at mpmath's global
    one: comparisons (and :func:`default_atol`) use the larger of ``mpmath.mp.prec`` and the
    largest mantissa, in bits, of an entry of ``W`` or ``v`` (an ``mpf`` does not record
    the precision it was computed at, but a value computed at :math:`p` bits has at most
    :math:`p` mantissa bits, so this holds every entry exactly), and each merged
    :math:`\sum_h v_h` is the *exact* sum of the inputs (summed at the bit count it needs;
    rounded only when the summands differ by more than a factor :math:`2^{1000}`). So a
    60-digit model has the same canonical form at the default 15 digits as inside
    ``mpmath.workdps(60)``, and ``canonical(model.to_mpmath())`` of a float64 model sums
    its value vectors without the float64 rounding. A float64 model is merged in float64.
    """
    if not isinstance(model, MultiHeadAttention):
        raise TypeError(f"canonical expects a MultiHeadAttention, got {type(model).__name__}")
    with mpmath.workprec(_input_prec(model.W, model.v)):
        return _canonical(model, atol)


def _canonical(model, atol):
    if atol is None:
        atol = default_atol(model)
    if not (np.isfinite(atol) and atol >= 0):
        raise ValueError(f"atol must be a finite number >= 0, got {atol!r}")
    H, d = model.H, model.d
    # union-find over heads whose W agree within atol
    parent = list(range(H))

    def find(a):
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for a in range(H):
        for b in range(a + 1, H):
            if absmax(model.W[a] - model.W[b]) <= atol:
                parent[find(b)] = find(a)
    groups = {}
    for h in range(H):
        groups.setdefault(find(h), []).append(h)
    heads = []
    for members in groups.values():
        # order the members by their own (W, v), not by input position, so the chosen
        # W and the rounding of the sum of v do not depend on the order of the heads
        members = sorted(members, key=lambda h: _sort_key(model.W[h], model.v[h]))
        W = model.W[members[0]]
        if model.exact:
            v = np.array([_exact_sum(model.v[members, i]) for i in range(d)], dtype=object)
        else:
            v = model.v[members].sum(axis=0)
        if absmax(v) <= atol:
            continue
        heads.append((W, v))
    heads.sort(key=lambda wv: _sort_key(*wv))
    if model.exact:
        W = np.empty((len(heads), d, d), dtype=object)
        v = np.empty((len(heads), d), dtype=object)
        for i, (Wh, vh) in enumerate(heads):
            W[i], v[i] = Wh, vh
    else:
        W = np.array([wv[0] for wv in heads]).reshape(len(heads), d, d)
        v = np.array([wv[1] for wv in heads]).reshape(len(heads), d)
    return MultiHeadAttention(W, v)


def matched_error(cost):
    r"""The largest per-pair error of the head matching ``cost`` (``(H_a, H_b)``: the error of
    pairing head ``i`` with head ``j``) finds with :func:`scipy.optimize.linear_sum_assignment`
    (the Hungarian method, smallest total error); ``0.0`` without heads. The parameter errors of
    :func:`param_error`, :func:`attnlearn.layer.layer_error` and
    :func:`attnlearn.learner.bias.bias_error` differ only in their ``cost``.

    Used in: chapters 2, 7 (through those three)."""
    cost = np.asarray(cost, dtype=float)
    if cost.size == 0:
        return 0.0
    rows, cols = linear_sum_assignment(cost)
    return float(cost[rows, cols].max())


def _rel(diff, ref):
    r = norm(ref)
    return norm(diff) / r if r > 0 else norm(diff)


def param_error(a, b):
    r"""Largest relative parameter error over heads after the optimal head matching.

    Parameters
    ----------
    a, b : MultiHeadAttention
        ``b`` is the reference (e.g. ``canonical(true_model)``); float64 or mpmath.

    Returns
    -------
    float
        :math:`\min_\pi\max_h\max\big(\|W^a_{\pi(h)}-W^b_h\|_F/\|W^b_h\|_F,\;
        \|v^a_{\pi(h)}-v^b_h\|/\|v^b_h\|\big)`, the matching found with
        :func:`scipy.optimize.linear_sum_assignment` on these per-pair errors [1]_ (a
        zero reference norm makes that term absolute). ``inf`` when the head counts
        differ; ``0.0`` when both models have no heads. Differences are taken in mpmath
        when either model is, so errors far below float64 resolution are reported.

    Notes
    -----
    In mpmath the differences and norms are computed at the precision the inputs carry
    (the larger of ``mpmath.mp.prec`` and the largest mantissa of an entry of either
    model, as in :func:`canonical`), never below it: the error of a 60-digit recovery
    is measured to 60 digits whatever mpmath's global precision.

    References
    ----------
    .. [1] H. W. Kuhn, "The Hungarian method for the assignment problem", Naval Research
           Logistics Quarterly 2 (1955) 83-97.
    """
    for m in (a, b):
        if not isinstance(m, MultiHeadAttention):
            raise TypeError(f"param_error expects MultiHeadAttention models, got {type(m).__name__}")
    if a.d != b.d:
        raise ValueError(f"models have different widths d = {a.d} and d = {b.d}")
    if a.H != b.H:
        return float("inf")
    if a.H == 0:
        return 0.0
    Wa, va, Wb, vb = a.W, a.v, b.W, b.v
    with mpmath.workprec(_input_prec(Wa, va, Wb, vb)):
        if is_mp(Wa) or is_mp(Wb):
            Wa, va, Wb, vb = (to_mp(x) for x in (Wa, va, Wb, vb))
        H = a.H
        cost = np.empty((H, H))
        for i in range(H):
            for j in range(H):
                cost[i, j] = max(_rel(Wa[i] - Wb[j], Wb[j]), _rel(va[i] - vb[j], vb[j]))
    return matched_error(cost)
