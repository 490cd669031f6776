r"""Labelling across configurations: the links label each block, the crosses label the blocks.

Used in: chapter 4 (cross-query matching: links :math:`u_{k,1}+u_{k,j}` and crosses
with final token :math:`q_1+q_k`) and chapter 5 (the matching's tolerance from the first-order
bounds; its residual and margin in ``Recovery.diagnostics``).

Each configuration's fit is an *unlabelled* set of :math:`H'` pairs :math:`(\ell,\gamma)`. A
link's set is the pairwise sums of its two bases' sets for the true pairing; an assignment
problem (:func:`attnlearn.matching.match_candidates`) finds it. The result is
:class:`BlockEquations`: every base and link equation of each block with its heads in the
labels of the block's first base configuration.
"""

from dataclasses import dataclass

import numpy as np

from ..._arith import to_float
from ...matching import match_candidates

__all__ = ["link_sets", "scales", "scaled_err", "BlockEquations", "label_links", "CrossLabels", "label_crosses"]


def link_sets(ell, gam, ref, oth, lnk):
    """Candidates ``P[c, a, b]`` = reference head a plus other head b, and the observed link sets
    ``O`` (chapter 4), for :func:`attnlearn.matching.match_candidates`."""
    P = np.stack([ell[ref][:, :, None] + ell[oth][:, None, :], gam[ref][:, :, None] + gam[oth][:, None, :]], axis=3)
    O = np.stack([ell[lnk], gam[lnk]], axis=2)
    return P, O


def scales(O, *, tol):
    """Per-configuration units (C, 2) for the ell and gamma components of the observed sets
    (floored at ``tol.tiny``)."""
    s = np.abs(to_float(O)).max(axis=1)
    return np.maximum(s, tol.tiny)


def scaled_err(err_ell, err_gam, sc, idx):
    """Largest error bound of the configurations ``idx`` in the units ``sc``."""
    return np.maximum(err_ell[idx] / sc[:, None, 0], err_gam[idx] / sc[:, None, 1]).max(axis=1)


@dataclass
class BlockEquations:
    r"""Every block's equations in the labels of its base (k,1), arrays (B, 2d - 1, H) (B = d
    blocks, d + 1 with score biases).

    Row ``j < d`` of block ``k`` is base (k, j+1) (:math:`u_{k,j}^\top w=\ell`,
    :math:`-u_{k,j}^\top v=\gamma`), row ``d + j - 1`` the link (k, j+1)
    (:math:`(u_{k,1}+u_{k,j})^\top w=\ell`). ``err_*`` are the first-order error bounds.
    """

    ell: np.ndarray
    gamma: np.ndarray
    err_ell: np.ndarray
    err_gamma: np.ndarray

    @classmethod
    def empty(cls, d, H, dtype, *, blocks=None):
        shape = (d if blocks is None else blocks, 2 * d - 1, H)
        return cls(np.empty(shape, dtype=dtype), np.empty(shape, dtype=dtype), np.zeros(shape), np.zeros(shape))

    def put(self, k, col, state, idx, heads):
        """Rows ``col`` of blocks ``k`` from the configurations ``idx`` of ``state``, heads in the
        order ``heads`` (one row of head indices per configuration)."""
        r = np.arange(len(idx))[:, None]
        self.ell[k, col], self.gamma[k, col] = state.ell[idx][r, heads], state.gamma[idx][r, heads]
        self.err_ell[k, col], self.err_gamma[k, col] = state.err_ell[idx][r, heads], state.err_gamma[idx][r, heads]


def label_links(state, table, labels, *, tol, pre_links=None):
    r"""Label each block's base configurations like its first one, through the links.

    Returns the :class:`BlockEquations` and the links' :class:`~attnlearn.matching.Matching`
    (None when d = 1). With ``pre_links`` (robust mode: the redraws matched these very fits)
    that matching is checked against the tolerance instead of matched again.

    Raises
    ------
    UnmatchedHeadsError
        A link whose set is not the pairwise sums of its bases' sets within the tolerance
        (``tol.match_safety`` times the first-order bounds), or two pairings fit.
    """
    d, H = table.d, state.H
    eq = BlockEquations.empty(d, H, state.ell.dtype, blocks=table.B)
    i0 = table.base(np.arange(table.B), 0)
    eq.ell[:, 0], eq.gamma[:, 0] = state.ell[i0], state.gamma[i0]
    eq.err_ell[:, 0], eq.err_gamma[:, 0] = state.err_ell[i0], state.err_gamma[i0]
    if d == 1:
        return eq, None
    refs, oth, lnk = table.link_indices()
    sc = scales(np.stack([state.ell[lnk], state.gamma[lnk]], axis=2), tol=tol)
    etot = sum(scaled_err(state.err_ell, state.err_gamma, sc, idx) for idx in (refs, oth, lnk))
    if pre_links is not None:
        mt = pre_links.check(tol.match_safety * etot, labels=labels.take(lnk))
    else:
        P, O = link_sets(state.ell, state.gamma, refs, oth, lnk)
        mt = match_candidates(P, O, sc, tol=tol.match_safety * etot, labels=labels.take(lnk))
    # fancy indexing over all links at once: row r is block k = r // (d-1), j = 1 + r % (d-1)
    kk, jj = np.divmod(np.arange(len(oth)), d - 1)
    jj = jj + 1
    eq.put(kk, jj, state, np.array(oth), mt.perm)
    eq.put(kk, d + jj - 1, state, np.array(lnk), mt.observed)
    return eq, mt


@dataclass
class CrossLabels:
    r"""The crosses' result: ``perm`` (B, H) labels block k's heads like block 1's
    (``perm[k, h]`` is block k's label of block 1's head h), ``matching`` the crosses'
    :class:`~attnlearn.matching.Matching` (None when d = 1)."""

    perm: np.ndarray
    matching: object = None


def label_crosses(state, design, blocks, *, tol):
    r"""Label every block like block 1 through the crosses (final token :math:`q_1+q_k`).

    ``blocks`` is the :class:`~.solves.BlockSolution` (:math:`w_{h,k}`, block 1's :math:`v_h` and
    their bounds): cross k's observed set must be
    :math:`\{(u^\top(w_{a,1}+w_{\pi(a),k}),-u^\top v_a)\}`.

    Raises
    ------
    UnmatchedHeadsError
    """
    table, H = design.table, state.H
    B = table.B  # blocks: d, or d + 1 with score biases (crosses at midpoints, table.mid)
    perm = np.zeros((B, H), dtype=int)
    perm[0] = np.arange(H)
    if B == 1:
        return CrossLabels(perm)
    w, v1, ew, ev1 = blocks.w, blocks.v1, blocks.err_w, blocks.err_v1
    cr = table.cross(np.arange(1, B))
    # candidates P[r, a, b] = (u^T (w_{a,1} + w_{b,k}), -u^T v_a) for cross r (block k = r + 1)
    ucr = design.u[cr]  # (B - 1, d)
    P = np.empty((B - 1, H, H, 2), dtype=state.ell.dtype)
    P[..., 0] = ((w[0][None, :, None, None, :] + w[1:][:, None, :, None, :]) @ ucr[:, None, None, :, None])[..., 0, 0]
    P[..., 1] = -(v1[None] @ ucr[:, :, None])[:, :, None, 0]
    a1 = np.abs(to_float(ucr)).sum(axis=1)[:, None, None]
    pe = np.zeros((B - 1, H, H, 2))
    pe[..., 0] = a1 * (ew[0].max(axis=1)[None, :, None] + ew[1:].max(axis=2)[:, None, :])
    # midpoint crosses (affine positions): ell = u^T (w_{a,1} + w_{b,k}) / 2
    P[..., 0] = table.family.midpoint(P[..., 0])
    pe[..., 0] = table.family.midpoint(pe[..., 0])
    pe[..., 1] = a1 * ev1.max(axis=1)[None, :, None]
    O = np.stack([state.ell[cr], state.gamma[cr]], axis=2)
    sc = scales(O, tol=tol)
    etot = (pe[..., 0] / sc[:, None, None, 0]).max(axis=(1, 2)) + (pe[..., 1] / sc[:, None, None, 1]).max(axis=(1, 2))
    etot = etot + scaled_err(state.err_ell, state.err_gamma, sc, cr)
    mt = match_candidates(P, O, sc, tol=tol.match_safety * etot, labels=design.labels.take(cr))
    perm[1:] = mt.perm
    return CrossLabels(perm, mt)
