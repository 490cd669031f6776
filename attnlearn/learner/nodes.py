r"""The nodes and directions every design builds its queries from: the paper design's node pairs
(copies or ratios), random unit rows and the query scale, the lean design's nodes and the long
design's ratio grid.

Used in: chapter 3 (copies and ratios), chapter 4 (the paper design), chapter 5b (the long
design's ratios) and chapter 8 (the lean design's nodes).
"""

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from scipy.special import expit

from ..rational.family import ratio_nodes

__all__ = ["LENGTHS", "Nodes", "node_pairs", "unit_rows", "scale_factor", "lean_nodes", "extra_node", "ratio_grid"]


LENGTHS = (0.8, 1.2)  # random lengths of the directions (a design choice, not a tolerance: see unit_rows)


@dataclass(frozen=True)
class Nodes:
    r"""The :math:`2n` queries of one configuration.

    Attributes
    ----------
    pairs : list of (int, int)
        :math:`(s, t)`: :math:`s` copies of :math:`x` then :math:`t` of :math:`q`.
    ts : list
        The nodes :math:`t/s` (ints for the copies, :class:`fractions.Fraction` for ratios).
    """

    pairs: list
    ts: list

    @property
    def max_length(self):
        """Longest query of a configuration, :math:`\\max(s+t)`."""
        return max(s + t for s, t in self.pairs)

    @property
    def m(self):
        """Number of samples per configuration."""
        return len(self.ts)


def node_pairs(n, nodes):
    """The :class:`Nodes` of family ``nodes`` (``"copies"`` or ``"ratios"``) for ``n`` heads."""
    if nodes == "copies":
        return Nodes([(1, t) for t in range(1, 2 * n + 1)], list(range(1, 2 * n + 1)))
    pairs = ratio_nodes(n)
    return Nodes(pairs, [Fraction(t, s) for s, t in pairs])


def unit_rows(rng, n, d):
    """``n`` random directions in :math:`\\mathbb R^d` with random lengths in [0.8, 1.2].

    In d = 1 unit vectors are only :math:`\\pm1`, and :math:`q=u` would give the token
    :math:`x=0` with probability 1/2: the random length avoids it."""
    z = rng.normal(size=(n, d))
    z *= rng.uniform(*LENGTHS, size=(n, 1)) / np.sqrt(np.einsum("ij,ij->i", z, z))[:, None]
    return z


# ---- the query scale (chapter 4): |u| |q_k| = f, so that ell = u^T W q spreads like f times the probe's
def scale_factor(max_abs_ell, spread, tol, *, top=None):
    r"""Scale factor :math:`f` of the queries from the probe's :math:`\max_h|\ell_h|`.

    The probe has :math:`|u|,|q_1|\approx1`; scaling :math:`|u|\,|q_k|` by :math:`f` spreads
    the poles about ``spread``, within ``tol.scale_clip`` (its upper end ``top`` when given: the
    lean design's small layer, chapter 8)."""
    f = spread / max_abs_ell if max_abs_ell > 0 else 1.0
    return float(np.clip(f, tol.scale_clip[0], tol.scale_clip[1] if top is None else top))


def lean_nodes(m):
    r"""The :math:`m` nodes :math:`\tau=t/s` of a phase-2 configuration, as ``(s, t)`` pairs with
    :math:`s+t\le m+1` (:math:`s+t=2` for :math:`m=1`), spread evenly in :math:`\log\tau` about 1.

    Used in: chapter 8."""
    if m == 1:
        return [(1, 1)]
    cands = sorted({Fraction(t, s) for s in range(1, m + 1) for t in range(1, m + 1) if s + t <= m + 1})
    out = []
    for x in np.exp(np.linspace(-1, 1, m) * np.log(m / 2 + 1)):
        out.append(min((c for c in cands if c not in out), key=lambda c: abs(math.log(float(c) / x))))
    return [(c.denominator, c.numerator) for c in sorted(out)]


def extra_node(m):
    r"""The :math:`(m+1)`-th node ``(s, t)`` of a phase-2 configuration in the variant with
    :math:`m+1` samples (``extra_sample=True``): the ratio :math:`t/s` with :math:`s+t\le m+2`
    not among :func:`lean_nodes` nearest to 1 (in :math:`\log\tau`), so no query is longer
    than phase 1's :math:`2n+1`.

    Used in: chapter 8."""
    used = {Fraction(t, s) for s, t in lean_nodes(m)}
    cands = sorted({Fraction(t, s) for s in range(1, m + 2) for t in range(1, m + 2) if s + t <= m + 2} - used)
    c = min(cands, key=lambda c: (abs(math.log(float(c))), c))
    return c.denominator, c.numerator


# ---------------------------------------------------------------- the design and its cost
def ratio_grid(L, R):
    r"""The ratios of a configuration: integers :math:`t` (copies of :math:`q`, returned as ``b``) with
    :math:`s=L-t` and :math:`z=\log(t/s)` nearly evenly spaced over the window
    :math:`[-\log(L-1),\log(L-1)]`; returns ``(b, z)`` (at most ``R`` distinct values)."""
    zmax = np.log(L - 1)
    b = np.unique(np.clip(np.rint(L * expit(np.linspace(-zmax, zmax, R))), 1, L - 1).astype(int))
    return b, np.log(b / (L - b))
