r"""The lean design's directions: phase 1's basis and phase 2's random directions whose residues
stand out (:func:`phase_two_directions`).

Used in: chapter 8.
"""

from dataclasses import dataclass

import numpy as np

from ..._arith import to_float
from ...errors import IllConditionedError
from ..nodes import unit_rows

__all__ = ["LeanDirections", "draw_lean", "phase_two_directions", "MIN_COSINE", "MAX_DRAWS"]

#: Phase 2 draws each direction u at random until every known residue stands out:
#: :math:`|u^\top v_h|\ge` ``MIN_COSINE`` :math:`|u|\,|v_h|` for every head (a query-design
#: choice that costs no query; a residue near 0 leaves its :math:`\rho_h` barely determined and
#: its system nearly degenerate: d = 6, H = 3, seed 6 of the benchmark lost a root at
#: :math:`\gamma_1=2\cdot10^{-5}`).
MIN_COSINE = 0.1


#: Most random directions drawn for one phase-2 configuration before giving up.
MAX_DRAWS = 10_000


@dataclass
class LeanDirections:
    r"""The design's random vectors (float64, before scaling; rows): ``q`` (d, d) the final
    tokens :math:`q_0..q_{d-1}`; ``base`` (d, d) phase 1's :math:`u_1..u_d`; ``weights``
    (d - 1, d) the check queries' :math:`w`. Phase 2's directions are drawn once :math:`v` is
    known (:func:`phase_two_directions`)."""

    q: np.ndarray
    base: np.ndarray
    weights: np.ndarray


def draw_lean(rng, d):
    """Draw the lean design's directions from ``rng`` (in the order of :class:`LeanDirections`).

    Used in: chapter 8."""
    q = unit_rows(rng, d, d)
    base = unit_rows(rng, d, d)
    weights = rng.uniform(0.5, 1.0, size=(d - 1, d)) * rng.choice([-1.0, 1.0], size=(d - 1, d))
    return LeanDirections(q, base, weights)


def phase_two_directions(rng, v, d):
    r"""The :math:`d` directions of one phase-2 block (float64 rows, unit-ish length): random,
    each redrawn until :math:`|u^\top v_h|\ge` :data:`MIN_COSINE` :math:`|u|\,|v_h|` for every
    head, so that every known residue :math:`\gamma_h` stands out.

    Raises
    ------
    IllConditionedError
        No such direction in :data:`MAX_DRAWS` draws.

    Used in: chapter 8."""
    vf = to_float(v)
    vn = vf / np.linalg.norm(vf, axis=1, keepdims=True)
    rows = []
    for _ in range(MAX_DRAWS):
        u = unit_rows(rng, 1, d)[0]
        if np.all(np.abs(vn @ u) >= MIN_COSINE * np.linalg.norm(u)):
            rows.append(u)
            if len(rows) == d:
                return np.array(rows)
    raise IllConditionedError(f"no direction u with |u.v_h| >= {MIN_COSINE} |u| |v_h| for every head in "
                              f"{MAX_DRAWS} draws")
