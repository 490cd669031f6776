r"""Asking the oracle: batched queries of whole configurations, finite answers, counts.

Used in: chapter 4 (the exact query count :math:`4nd^2-2n+1` is read off the oracle, never
computed) and chapter 3 (the queries :math:`S(x,q,t)` of the copies family and the ratio
nodes).
"""

import numpy as np

__all__ = ["ask_nodes", "ask_probe", "ask_design", "ask_constants"]

# ``ask`` below is the learner's :class:`attnlearn.protocol.Access`: ``ask(Xs, what)`` returns the
# checked answers (float64, or mpf in exact mode) and counts the queries.


def ask_nodes(ask, u, qtok, qi, pairs, what, *, chunk=1024):
    """F at every node for the configurations with final tokens ``qtok[qi]`` and rows ``u``
    (first token x = q - u): array (C, 2n).

    One array of ``smax`` copies of x then ``tmax`` of q (:func:`attnlearn.rational.copies_sequences`,
    filled in place here) holds every query as a slice
    (a view, no copy): s copies of x then t of q end at position smax + t. Built ``chunk``
    configurations at a time: a few MB, reused while still in cache, instead of one array of
    tens of MB whose fresh pages cost more to touch than the oracle takes to read them."""
    smax, tmax = max(s for s, _ in pairs), max(t for _, t in pairs)
    out = np.empty((len(u), len(pairs)), dtype=object if u.dtype == object else float)
    for a in range(0, len(u), chunk):
        ub = u[a: a + chunk]
        # copies_sequences(q - u, q, tmax, s=smax), filled in place: q into column smax, x = q - u
        # into column 0, then the copies (no temporaries)
        full = np.empty((len(ub), smax + tmax, u.shape[1]), dtype=u.dtype)
        full[:, smax] = qtok[qi[a: a + chunk]]
        np.subtract(full[:, smax], ub, out=full[:, 0])
        full[:, 1:smax] = full[:, :1]
        full[:, smax + 1:] = full[:, smax: smax + 1]
        for i, (s, t) in enumerate(pairs):
            out[a: a + chunk, i] = ask(full[:, smax - s: smax + t], f"{what}, s = {s}, t = {t}")
    return out


def ask_probe(ask, q1, u11, nodes):
    r"""The one shared query :math:`(q_1)` (its answer :math:`c_1=V^\top q_1`, chapter 4), then the
    first configuration base(1,1) at every node. Returns ``(c1, F (1, 2n))``."""
    c1 = ask(q1[None, None, :], "the shared query (q_1)")[0]
    F = ask_nodes(ask, u11[None], q1[None], np.zeros(1, dtype=int), nodes.pairs, "configuration base(1,1)")
    return c1, F


def ask_design(ask, design, F11, nodes):
    """Every configuration of ``design`` at every node (base(1,1)'s samples ``F11`` already asked)."""
    C = len(design.table)
    F = np.empty((C, nodes.m), dtype=object if design.u.dtype == object else float)
    F[0] = F11[0]
    if C > 1:
        F[1:] = ask_nodes(ask, design.u[1:], design.qtok, design.qidx[1:], nodes.pairs, "the design's queries")
    return F


def ask_constants(ask, c1, q):
    r"""Robust mode: the constants :math:`c_k=V^\top q_k` asked directly (one query each, k >= 2)."""
    extra = ask(np.stack(q[1:])[:, None, :], "the block constants (q_k)")
    return np.concatenate([[c1], extra])
