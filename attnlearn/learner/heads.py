r"""The heads a design's fits give: their significance (:func:`check_significant`) and the
canonical model they form (:class:`HeadMatrices`, :func:`canonical_heads`), shared by the paper and
lean designs.

Used in: chapter 4 (canonical heads), chapter 5 (significance) and chapter 8 (the lean design).
"""

from dataclasses import dataclass

import numpy as np

from .._arith import norm
from ..canonical import canonical
from ..errors import IllConditionedError, NotIdentifiableError
from ..model import MultiHeadAttention

__all__ = ["check_significant", "HeadMatrices", "canonical_heads"]


@dataclass
class HeadMatrices:
    r"""``W`` (H, d, d) the recovered :math:`W_h`; ``err_cols`` (H, d, d) the bounds of
    :math:`[w_{h,1}\cdots w_{h,d}]`; ``Qinv`` :math:`|Q^{-1}|` (float64)."""

    W: np.ndarray
    err_cols: np.ndarray
    Qinv: np.ndarray


def canonical_heads(heads, v, err_v, *, tol):
    r"""The canonical model of the heads :math:`(W_h, v_h)` and its relative first-order error
    estimate in the Frobenius norms of :func:`attnlearn.param_error`
    (:math:`|dW_h|\le|dW_{cols}|\,|Q^{-1}|` entrywise), times ``tol.estimate_factor``.
    Returns ``(model, estimate)``.

    Raises
    ------
    NotIdentifiableError
        A head recovered with :math:`v=0`.
    """
    rel = []
    for h in range(len(heads.W)):
        nW, nv = norm(heads.W[h]), norm(v[h])
        eW = float(np.linalg.norm(heads.err_cols[h] @ heads.Qinv))
        evv = float(np.linalg.norm(err_v[h]))
        rel.append(max(eW / nW if nW > 0 else eW, evv / nv if nv > 0 else evv))
    estimate = tol.estimate_factor * float(max(rel))
    for h in range(len(heads.W)):
        if norm(v[h]) == 0:
            raise NotIdentifiableError(f"head {h} was recovered with v = 0 (not a canonical head)")
    return canonical(MultiHeadAttention(heads.W, v), atol=0), estimate


def check_significant(ell, gam, err_ell, err_gam, labels, *, S):
    """Every residue must stand out of ``S`` times its error bound, and every pair of poles apart.

    Raises
    ------
    IllConditionedError
    """
    C, H = ell.shape
    if H == 0:
        return
    small = np.abs(gam) <= S * err_gam
    if np.any(small):
        c, h = np.argwhere(small)[0]
        raise IllConditionedError(
            f"{labels[c]}: residue gamma = {gam[c, h]:.2e} is within {S:g} x its error bound "
            f"{err_gam[c, h]:.1e} (a vanishing residue: a head invisible in this configuration)"
        )
    if H > 1:
        gap = np.abs(ell[:, :, None] - ell[:, None, :])
        allowed = S * (err_ell[:, :, None] + err_ell[:, None, :])
        close = (gap <= allowed) & ~np.eye(H, dtype=bool)[None]
        if np.any(close):
            c, a, b = np.argwhere(close)[0]
            raise IllConditionedError(
                f"{labels[c]}: poles ell = {ell[c, a]:.4g} and {ell[c, b]:.4g} are closer than {S:g} x their "
                f"error bounds ({err_ell[c, a]:.1e}, {err_ell[c, b]:.1e}): two heads cannot be told apart here"
            )
