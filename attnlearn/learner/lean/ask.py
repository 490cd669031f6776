r"""The lean design's asking: single queries and configurations of nodes, as mpmath values.

Used in: chapter 8.
"""

import numpy as np

from ..._arith import to_float, to_mp
from ..asking import ask_nodes

__all__ = ["ask_queries", "ask_configs"]


def ask_queries(access, X, what):
    """Ask ``X`` (float64 queries for a float64 oracle) and return the answers as mpf."""
    return to_mp(access(X if access.exact else to_float(X), what))


def ask_configs(access, U, q, pairs, what):
    """:func:`attnlearn.learner.asking.ask_nodes` for the configurations ``U`` with the one final token ``q``
    (float64 queries for a float64 oracle); answers as mpf, shape (len(U), len(pairs))."""
    conv = (lambda a: a) if access.exact else to_float
    F = ask_nodes(access, conv(U), conv(q)[None], np.zeros(len(U), dtype=int), pairs, what)
    return to_mp(F)
