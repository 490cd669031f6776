r"""The query design: nodes, random directions, their scale, and the configuration table.

Used in: chapter 3 (the nodes of a configuration: copies or ratios) and chapter 4 (the
blocks, links and crosses and the query scale of chapter 4).

A *configuration* is a pair :math:`(u, q)`: first token :math:`x=q-u`, final token
:math:`q`, asked at the :math:`2n` nodes. Block :math:`k` has final token :math:`q_k`, base
configurations :math:`u_{k,j}` and links :math:`u_{k,1}+u_{k,j}`; the crosses have final
token :math:`q_1+q_k`. :func:`draw_directions` draws every random direction first (the
learner's random stream is fixed by the seed); :func:`build_design` scales them once the
probe has measured the spread of the poles.

With score biases (``learn(bias=True)``, :mod:`attnlearn.learner.bias`, chapter 7) the table has
one more block (final token :math:`q_{d+1}`, stored last) and the crosses' final token is the
midpoint :math:`(q_1+q_k)/2` (``ConfigTable.mid``): :math:`W_hq+c_h` is affine in :math:`q`, so
it is additive only over weights that sum to 1.
"""

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..._arith import to_float, to_mp
from ..family import LINEAR, family_of
from ..nodes import Nodes
from ..nodes import node_pairs
from ..nodes import unit_rows
from ..nodes import scale_factor

__all__ = [
    "Nodes",
    "node_pairs",
    "unit_rows",
    "Directions",
    "draw_directions",
    "scale_factor",
    "scale_q",
    "scale_u",
    "scale_cross_u",
    "ConfigTable",
    "ConfigLabels",
    "Design",
    "build_design",
]

@dataclass
class Directions:
    """The design's random directions, before scaling: ``q`` (B, d) rows :math:`q_k`,
    ``base`` (B, d, d) :math:`u_{k,j}`, ``cross`` (B - 1, d) the crosses' :math:`u` (B = d
    blocks, d + 1 with score biases)."""

    q: np.ndarray
    base: np.ndarray
    cross: np.ndarray


def draw_directions(rng, d, *, family=LINEAR):
    """Draw every direction of the design from ``rng`` (in this order: q, base, cross); for the
    affine ``family`` (:class:`~attnlearn.learner.family.Family`: one more block, chapter 7) the
    extra block's q, base and cross are drawn after them."""
    q = unit_rows(rng, d, d)
    base = unit_rows(rng, d * d, d).reshape(d, d, d)
    cross = unit_rows(rng, max(d - 1, 0), d)
    for _ in range(family.extra):  # the extra block of affine positions
        q, base, cross = (np.concatenate([q, unit_rows(rng, 1, d)]),
                          np.concatenate([base, unit_rows(rng, d, d)[None]]),
                          np.concatenate([cross, unit_rows(rng, 1, d)]))
    return Directions(q, base, cross)


def scale_q(directions, f):
    """Final tokens :math:`q_k` (k >= 2) from their directions: length times :math:`\\sqrt f`."""
    return directions * np.sqrt(f)


def scale_u(directions, k, f):
    """:math:`u_{k,j}` from directions of blocks ``k`` (broadcast over the leading axis):
    times :math:`f` in block 1 (:math:`|q_1|\\approx1`), times :math:`\\sqrt f` elsewhere."""
    s = np.where(np.asarray(k) == 0, f, np.sqrt(f))
    return directions * s.reshape(s.shape + (1,) * (directions.ndim - s.ndim))


def scale_cross_u(directions, qsum, f):
    r"""The crosses' :math:`u` from directions: :math:`|u|\,|q_1+q_k|=f`. One row (1-D) or a
    stack; a single row's norm is :func:`numpy.linalg.norm` of the vector (a BLAS dot, not the
    row-wise sum: kept as it was, since the two may differ in the last bit)."""
    if np.ndim(qsum) == 1:
        return directions * f / np.linalg.norm(qsum)
    return directions * f / np.linalg.norm(to_float(qsum), axis=1, keepdims=True)


class ConfigTable:
    """The design's configuration table and its layout (chapter 4), by arithmetic.

    Block by block (k = 0..B-1, B = d blocks): base (k, j) for j = 0..d-1 at ``k(2d-1)+j``,
    then link (k, j) for j = 1..d-1 at ``k(2d-1)+d+j-1``; then cross k (k = 1..B-1) at
    ``B(2d-1)+k-1``. ``table[kind, k, j]`` is a position; ``kind``, ``blk``, ``jj`` hold
    every row's kind, block and j (0 for crosses), ``qidx`` its final token's row in
    ``[Q^T; mid (q_1 + q_k)]``. For the affine ``family`` (score biases, :mod:`~.bias`) there are
    :math:`B=d+1` blocks and the crosses' final tokens are midpoints, ``mid`` = 1/2 (else 1;
    :class:`~attnlearn.learner.family.Family`)."""

    def __init__(self, d, *, family=LINEAR):
        self.d = d
        self.B = B = family.blocks(d)
        self.mid = family.mid
        self.per_block = pb = 2 * d - 1
        self.kind = np.array(["base", "link", "cross"])[
            np.r_[np.tile(np.r_[np.zeros(d, int), np.ones(d - 1, int)], B), np.full(B - 1, 2)]]
        self.blk = np.concatenate([np.repeat(np.arange(B), pb), np.arange(1, B)])
        self.jj = np.concatenate([np.tile(np.r_[np.arange(d), np.arange(1, d)], B), np.zeros(B - 1, dtype=int)])
        self.C = B * pb + B - 1
        self.qidx = np.where(self.kind == "cross", B + self.blk - 1, self.blk)

    @property
    def family(self):
        """The design's :class:`~attnlearn.learner.family.Family` (its extra block says which: the
        table keeps only its block count and ``mid``). Used in: chapters 4 and 7."""
        return family_of(self.B > self.d)

    def __len__(self):
        return self.C

    def base(self, k, j):
        return np.asarray(k) * self.per_block + j

    def link(self, k, j):
        return np.asarray(k) * self.per_block + self.d + np.asarray(j) - 1

    def cross(self, k):
        return self.B * self.per_block + np.asarray(k) - 1

    def __getitem__(self, key):
        kind, k, j = key
        return int({"base": self.base, "link": self.link}[kind](k, j) if kind != "cross" else self.cross(k))

    def block_rows(self):
        """(B, 2d - 1): row k holds the positions of block k's base and link configurations."""
        return np.arange(self.B * self.per_block).reshape(self.B, self.per_block)

    def link_indices(self, blocks=None):
        """Positions of every link of ``blocks`` (default all; block by block, j = 2..d): its
        reference base (k,1), its other base (k,j), and the link (k,j) itself."""
        d = self.d
        k = np.repeat(np.arange(self.B) if blocks is None else np.asarray(blocks), d - 1)
        j = np.tile(np.arange(1, d), len(k) // max(d - 1, 1))
        return self.base(k, 0), self.base(k, j), self.link(k, j)

    def in_block_one(self):
        """Mask of block 1's base and link configurations (their constant is :math:`c_1`)."""
        return (self.blk == 0) & (self.kind != "cross")


class ConfigLabels(Sequence):
    """Configuration names (``base(k,j)``, ``link(k,j)``, ``cross(k)``, counted from 1), formatted
    only when read: a failing check names one, and tens of thousands of strings cost
    milliseconds the learner does not need. ``take`` selects positions."""

    def __init__(self, table, pos=None):
        self.table = table
        self.pos = pos

    def __len__(self):
        return len(self.table) if self.pos is None else len(self.pos)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[r] for r in range(*i.indices(len(self)))]
        c = int(i if self.pos is None else self.pos[i])
        if c < 0:
            c += len(self.table)
        if not 0 <= c < len(self.table):
            raise IndexError("configuration index out of range")
        t = self.table
        kind, k, j = t.kind[c], t.blk[c], t.jj[c]
        return f"cross({k + 1})" if kind == "cross" else f"{kind}({k + 1},{j + 1})"

    def take(self, idx):
        idx = np.asarray(idx, dtype=int)
        return ConfigLabels(self.table, idx if self.pos is None else self.pos[idx])

    def __repr__(self):
        head = ", ".join(self[i] for i in range(min(len(self), 3)))
        return f"[{head}{', ...' if len(self) > 3 else ''}] ({len(self)} configurations)"


@dataclass
class Design:
    r"""The scaled design: every configuration's :math:`u` and final token.

    Attributes
    ----------
    table : ConfigTable
    labels : ConfigLabels
    q : list of arrays
        :math:`q_1..q_d` (robust mode's redraws replace some); with score biases also
        :math:`q_{d+1}`, last.
    u : array (C, d)
        The row :math:`u` of every configuration (object array in exact mode).
    U : array (B, d, d)
        ``U[k, j]`` = :math:`u_{k,j}`: a view of ``u``, so updates of ``U`` are updates of ``u``.
    qtok : array (2B - 1, d)
        Final tokens: :math:`q_k` (row k), :math:`\mu(q_1+q_k)` (row B + k - 1; :math:`\mu` =
        ``table.mid``).
    f : float
        Query scale factor (chapter 4).
    """

    table: ConfigTable
    labels: ConfigLabels
    q: list
    u: np.ndarray
    U: np.ndarray
    qtok: np.ndarray
    f: float

    @property
    def Q(self):
        """Columns :math:`q_k`."""
        return np.stack(self.q, axis=1)

    @property
    def qidx(self):
        return self.table.qidx


def build_design(directions, q1, u11, f, *, exact, family=LINEAR):
    r"""Scale the directions by ``f`` around the probe's :math:`q_1` and :math:`u_{1,1}` (kept
    as asked) and lay out every configuration of chapter 4's design (for the affine ``family``:
    the extra block and midpoint crosses, :mod:`~.bias`)."""
    conv = to_mp if exact else (lambda a: np.asarray(a, dtype=float))
    d = directions.base.shape[1]
    table = ConfigTable(d, family=family)
    B = table.B
    q = [q1] + [conv(scale_q(directions.q[k], f)) for k in range(1, B)]
    qsum = np.stack(q[1:]) + q[0] if B > 1 else np.zeros((0, d))  # final tokens q_1 + q_k of the crosses
    qsum = family.midpoint(qsum)  # midpoints with affine positions (exact in binary arithmetic)
    cross_u = conv(scale_cross_u(directions.cross, qsum, f))
    u = np.empty((table.C, d), dtype=object if exact else float)
    blocks = u[: B * table.per_block].reshape(B, table.per_block, d)
    U = blocks[:, :d]
    U[...] = conv(scale_u(directions.base, np.arange(B), f))
    U[0, 0] = u11
    blocks[:, d:] = U[:, :1] + U[:, 1:]
    u[B * table.per_block:] = cross_u
    qtok = np.concatenate([np.stack(q, axis=1).T, qsum])
    return Design(table, ConfigLabels(table), q, u, U, qtok, f)
