r"""Each head's column space, learned block by block (``design="rank"``): a *full* block gives
:math:`w_{h,k}=W_hq_k` whole and tests whether it lies in the span of the head's earlier
columns, which certifies the head's rank; a *reduced* block gives only the coordinates of
:math:`w_{h,k}` in that span (:class:`HeadSpan`).

Used in: chapter 9 (real sizes) and ``benchmarks/rank.py``.

For random final tokens :math:`q_1,q_2,\dots` the columns :math:`W_hq_1,\dots,W_hq_r` of a
rank-:math:`r` head are independent and span its column space (with probability 1), and
:math:`W_hq_{r+1}` lies in it: the first column that lies in the span of the earlier ones
gives the rank. "Lies in" is decided against the first-order error bound of the distance
(:func:`span_distance`), with a gap of ``tol.rank_gap`` between the two verdicts. After that a
block of :math:`p\ge r` configurations :math:`u_i` determines :math:`w=A c` (:math:`A` the
head's first :math:`r` columns) through :math:`u_i^\top Ac=\ell_i`, a least-squares problem of
:math:`p` equations in :math:`r` unknowns.
"""

from dataclasses import dataclass, field

import mpmath
import numpy as np

from ..._arith import to_float, to_mp
from ...errors import IllConditionedError, RankError

__all__ = ["HeadSpan", "span_distance", "lstsq"]


def lstsq(A, b):
    """Least-squares solution of ``A x = b`` in the arithmetic of ``A``: float64 LAPACK, or
    mpmath's Householder QR (not the normal equations: a head whose columns are nearly parallel
    squares their condition number there, and lost 10 of 75 digits in a test)."""
    if A.dtype == object or np.asarray(b).dtype == object:
        x, _ = mpmath.qr_solve(mpmath.matrix(to_mp(A).tolist()), mpmath.matrix(list(to_mp(b))))
        return np.array([x[i] for i in range(A.shape[1])], dtype=object)
    return np.linalg.lstsq(A, b, rcond=None)[0]


def span_distance(A, err_A, w, err_w):
    r"""Distance of ``w`` from the span of the columns of ``A`` and its first-order bound.

    Returns ``(distance, bound, coef)``: :math:`\|w-Ac\|` with :math:`c` the least-squares
    coefficients, and :math:`\|\delta w\|+\sum_i|c_i|\,\|\delta a_i\|`, which bounds it to first
    order when ``w`` lies in the span of the exact columns (``err_A`` (d, j) and ``err_w`` (d,):
    the columns' entrywise bounds)."""
    coef = lstsq(A, w)
    distance = float(np.linalg.norm(to_float(w - A @ coef)))
    bound = float(np.linalg.norm(err_w) + np.abs(to_float(coef)) @ np.linalg.norm(err_A, axis=0))
    return distance, bound, coef


@dataclass
class HeadSpan:
    r"""One head's columns :math:`w_{h,k}=W_hq_k` (in the order of the final tokens) and their
    entrywise first-order bounds; ``rank`` is the certified rank (None while every full column
    so far was new); ``tests`` the distance of each tested full column to the earlier span in
    units of its bound (what the verdicts read)."""

    cols: list
    errs: list
    rank: int = None
    tests: list = field(default_factory=list)

    @property
    def basis(self):
        """The head's first ``rank`` columns (d, r) and their bounds."""
        return np.stack(self.cols[:self.rank], axis=1), np.stack(self.errs[:self.rank], axis=1)

    def add_full(self, w, err_w, *, limit, tol, name):
        r"""Append a full block's column ``w`` (bound ``err_w``) and test it against the earlier
        ones: in their span (distance within ``tol.match_safety`` times its bound) certifies the
        rank; outside (beyond ``tol.rank_gap`` times that) it is a new direction.

        Raises
        ------
        RankError
            A new direction beyond the ``limit`` (``rank=`` given), or a column outside the span
            of an already certified rank.
        IllConditionedError
            A distance between the two verdicts: the rank cannot be told.
        """
        A, err_A = self.basis if self.rank is not None else (np.stack(self.cols, axis=1), np.stack(self.errs, axis=1))
        distance, bound, _ = span_distance(A, err_A, w, err_w)
        ratio = distance / bound if bound > 0 else (0.0 if distance == 0 else np.inf)
        self.tests.append(ratio)
        inside = ratio <= tol.match_safety
        if self.rank is not None and not inside:
            raise RankError(f"{name}: W_h q_k lies {ratio:.1e} times its error bound from the span of the "
                            f"head's first {self.rank} columns, whose rank was certified")
        if self.rank is None and inside:
            self.rank = len(self.cols)
        elif self.rank is None and ratio < tol.match_safety * tol.rank_gap:
            raise IllConditionedError(
                f"{name}: the distance of W_h q_k from the span of the head's {len(self.cols)} earlier columns is "
                f"{ratio:.1e} times its first-order bound: neither within {tol.match_safety:g} (rank "
                f"{len(self.cols)}) nor beyond {tol.match_safety * tol.rank_gap:g} (a new direction); the rank "
                "cannot be told")
        elif self.rank is None and limit is not None and len(self.cols) >= limit:
            raise RankError(f"{name}: the head has more than rank = {limit} independent columns (W_h q_k lies "
                            f"{ratio:.1e} times its error bound from the span of the first {limit})")
        self.cols.append(w)
        self.errs.append(err_w)

    def add_reduced(self, U, ell, err_ell, *, tol, name):
        r"""Append a reduced block's column :math:`w=Ac` from its :math:`p` configurations ``U``
        (p, d) and their labelled poles ``ell`` (p,) (bounds ``err_ell``): :math:`UAc=\ell` by
        least squares, checked when :math:`p>r` (the residual within ``tol.match_safety`` times
        its bound). The head of the largest rank (:math:`p=r`) has no such check: its reduced
        columns rest on the certified rank and the heights' labels, and the held-out queries of
        :func:`~attnlearn.learner.finish.finish` are what test them.

        Raises
        ------
        RankError
            The poles are not those of a column in the head's span."""
        A, err_A = self.basis
        M = U @ A
        coef = lstsq(M, ell)
        cabs = np.abs(to_float(coef))
        dl = err_ell + np.abs(to_float(U)) @ (err_A @ cabs)  # the poles' and the basis's errors
        if M.shape[0] > M.shape[1]:
            miss = np.abs(to_float(M @ coef - ell))
            if np.any(miss > tol.match_safety * dl):
                i = int(np.argmax(miss / dl))
                raise RankError(f"{name}: the poles are not those of a column in the span of the head's "
                                f"{self.rank} columns (configuration {i + 1} missed by {miss[i]:.1e}, "
                                f"{miss[i] / dl[i]:.1e} times its bound)")
        err_c = np.abs(np.linalg.pinv(to_float(M))) @ dl
        self.cols.append(A @ coef)
        self.errs.append(np.abs(to_float(A)) @ err_c + err_A @ cabs)
