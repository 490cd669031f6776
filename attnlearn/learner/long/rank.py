r"""The long design for heads of rank at most :math:`p` (``learn(..., design="long", rank=p)``): each
head's row space learned from the first groups, every later group regressed in it.

Used in: chapter 9 (real sizes) and ``benchmarks/scale.py`` (real layers: their
:math:`W_h=W_{k,h}^\top W_{q,h}/\sqrt p` has rank the head dimension :math:`p`).

A group's :math:`y_{h,k}=W_h^\top u_k` lies in the row space of :math:`W_h`, of dimension
:math:`r_h\le p`. The groups come in two kinds:

* **full** groups, as the long design's (:math:`2d` configurations per pass, every :math:`y`
  in full), each labelled by its link as soon as it is fitted; a head's rank is certified by
  the first :math:`y_{h,k}` that lies in the span of its earlier ones (:class:`RowSpans`);
* once every head is certified, **reduced** groups of ``tol.per_group(tol.reduced_dim(p, d))``
  configurations per pass: each of the group's heads has its positions regressed on the coordinates
  :math:`B_h^\top q` of every head's basis :math:`B_h` (:func:`regress_in_spans`), and the
  assignment of heads to row spaces whose reduced :math:`\chi^2` are smallest together labels
  the group (no link).

With :math:`H` heads of rank :math:`p=d/H` the row spaces of different heads are independent
subspaces, so a head's positions fit another head's row space only as far as :math:`y` projects
on it: a wrong assignment leaves the positions far outside their errors (measured on a float64
four-head layer of width 16: the runner-up's reduced :math:`\chi^2` :math:`10^7` times the best's or
more).
"""

from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import linear_sum_assignment

from ...errors import IllConditionedError, RankError, UnmatchedHeadsError
from .solve import regress_positions

__all__ = ["RowSpans", "regress_in_spans"]


@dataclass
class RowSpans:
    r"""Every head's :math:`y_{h,k}` of the full groups (heads in group 1's labels) and their
    covariances; ``ranks`` the certified ranks (None while uncertified), ``tests`` each tested
    :math:`y`'s distance from the span of the earlier ones in standard deviations."""

    ys: list
    covs: list
    ranks: list
    tests: list = field(default_factory=list)

    @classmethod
    def start(cls, Y, covY):
        """The spans of group 1 (its rows ``Y`` (H, d) and covariances (H, d, d))."""
        H = len(Y)
        return cls([[Y[h]] for h in range(H)], [[covY[h]] for h in range(H)], [None] * H, [[] for _ in range(H)])

    @property
    def certified(self):
        """Every head's rank certified."""
        return all(r is not None for r in self.ranks)

    def basis(self, h):
        """Head ``h``'s basis (d, r_h): its first ``r_h`` rows."""
        return np.stack(self.ys[h][:self.ranks[h]], axis=1)

    def position_variance(self, h, a, Q):
        r"""Variance of the positions :math:`-(B_ha)^\top q` of the configurations ``Q`` (m, d) from
        the error of head ``h``'s basis alone: :math:`\sum_ia_i^2q^\top\operatorname{cov}(y_i)q`
        (its rows taken as independent)."""
        return sum(c * c * np.einsum("md,de,me->m", Q, C, Q) for c, C in zip(a, self.covs[h][:len(a)]))

    def distance(self, h, y, cov):
        r"""Distance of ``y`` from the span of head ``h``'s earlier rows (its basis once certified),
        in standard deviations: :math:`\|(I-P)y\|` over the square root of the trace of
        :math:`(I-P)(\operatorname{cov}y+\sum_ic_i^2\operatorname{cov}y_i)(I-P)`, :math:`c` the
        least-squares coefficients and :math:`P` the projector on the span."""
        n = self.ranks[h] if self.ranks[h] is not None else len(self.ys[h])
        A = np.stack(self.ys[h][:n], axis=1)
        coef, *_ = np.linalg.lstsq(A, y, rcond=None)
        Qa, _ = np.linalg.qr(A)
        Pc = np.eye(len(y)) - Qa @ Qa.T
        total = cov + sum(c * c * C for c, C in zip(coef, self.covs[h][:n]))
        sd = np.sqrt(max(np.trace(Pc @ total @ Pc), 1e-300))
        return float(np.linalg.norm(Pc @ y) / sd)

    def add_group(self, Y, covY, *, limit, tol, k):
        r"""Test a full group's rows ``Y`` (H, d), heads in group 1's labels, then append them:
        within ``tol.rank_inside`` standard deviations of the span certifies the head's rank,
        beyond ``tol.rank_outside`` is a new direction.

        Raises
        ------
        RankError
            A new direction beyond ``limit`` (``rank=``), or a row outside a certified span.
        IllConditionedError
            A distance between the two verdicts: the rank cannot be told (the group is drawn
            again, nothing appended)."""
        verdicts = []
        for h in range(len(Y)):
            ratio = self.distance(h, Y[h], covY[h])
            inside = ratio <= tol.rank_inside
            n = len(self.ys[h])
            if self.ranks[h] is not None and not inside:
                raise RankError(f"group {k + 1}, head {h + 1}: W_h^T u_k lies {ratio:.1e} standard deviations from "
                                f"the span of the head's first {self.ranks[h]} rows, whose rank was certified")
            if self.ranks[h] is None and not inside and ratio < tol.rank_outside:
                raise IllConditionedError(
                    f"group {k + 1}, head {h + 1}: W_h^T u_k lies {ratio:.1e} standard deviations from the span "
                    f"of the head's {n} earlier rows: neither within {tol.rank_inside:g} (rank {n}) nor beyond "
                    f"{tol.rank_outside:g} (a new direction); the rank cannot be told")
            if self.ranks[h] is None and not inside and limit is not None and n >= limit:
                raise RankError(f"group {k + 1}, head {h + 1}: the head has more than rank = {limit} independent "
                                f"rows (W_h^T u_k lies {ratio:.1e} standard deviations from the span of the first "
                                f"{limit})")
            verdicts.append((ratio, inside))
        for h, (ratio, inside) in enumerate(verdicts):
            self.tests[h].append(ratio)
            if self.ranks[h] is None and inside:
                self.ranks[h] = len(self.ys[h])
            self.ys[h].append(Y[h])
            self.covs[h].append(covY[h])


def regress_in_spans(Q, fit, spans, *, tol, intercept=False):
    r"""A reduced group's regression: each of its heads' positions :math:`c_{j,\cdot}` regressed on
    the coordinates :math:`B_h^\top q` of every head's basis (with an intercept :math:`\kappa` for
    score biases, :func:`~.solve.regress_positions`), then again with each position's variance
    raised by what the basis's own error moves it (:meth:`RowSpans.position_variance`: the
    positions of a float64 layer are resolved so finely that the basis's error, of the same
    order, showed as a reduced :math:`\chi^2` of 16 to 60); the assignment of the group's heads to the
    bases with the smallest sum of the logarithms of their reduced :math:`\chi^2` (Hungarian)
    labels them.

    Returns ``(Y, covY, used, perm, margin)``: ``Y`` (H, d[+1]) the rows :math:`B_{\pi(j)}a_j`
    (and :math:`\kappa_j`) in the group's order, their covariances (the coordinates' covariance
    through the basis, plus :math:`\sum_ia_i^2\operatorname{cov}y_i` for the basis's own error:
    the groups are taken as independent, as :func:`~.solve.estimate_error` does), the rows used,
    ``perm`` (H,) with ``perm[h]`` the group's head in row space ``h`` (as
    :func:`~.solve.link_groups`' permutations), and the margin: the smallest, over the group's heads,
    of the reduced :math:`\chi^2` in the head's best other row space over that in its own.

    Raises
    ------
    IllConditionedError
        A matched head's positions are not linear in its row space's coordinates (reduced
        :math:`\chi^2` above ``tol.regression_chi2``, or too few rows kept).
    UnmatchedHeadsError
        A head whose positions fit another row space within ``tol.link_margin`` of its own (a head
        barely seen in the group: :func:`~.run.draw_groups_ranked` draws the group again)."""
    m, H = fit.c.shape
    d = Q.shape[1]
    red = np.full((H, H), np.inf)
    sols = {}
    for j in range(H):
        for h in range(H):
            B = spans.basis(h)
            X = Q @ B
            if intercept:
                X = np.column_stack([X, np.ones(m)])
            what = f"head {j + 1}'s (in row space {h + 1})"
            try:
                a, cov, keep, r = regress_positions(X, fit.c[:, j], fit.c_sd[:, j], tol=tol, what=what)
                # the basis's own error moves every position by a^T dB^T q: its variance added, refitted
                sd = np.sqrt(fit.c_sd[:, j] ** 2 + spans.position_variance(h, a[:B.shape[1]], Q))
                a, cov, keep, r = regress_positions(X, fit.c[:, j], sd, tol=tol, what=what)
            except IllConditionedError:
                continue
            if keep.sum() >= tol.regression_keep * m:
                red[j, h], sols[j, h] = r, (a, cov, keep)
    cost = np.where(np.isfinite(red), red, 1e300)
    rows, cols = linear_sum_assignment(np.log(np.maximum(cost, 1e-300)))
    matched = red[rows, cols]
    if not np.all(matched <= tol.regression_chi2):
        j = int(rows[np.argmax(np.where(np.isfinite(matched), matched, 1e300))])
        raise IllConditionedError(
            f"head {j + 1}'s step positions in a group are not linear in any head's row space (reduced chi2 "
            f"{red[j, cols[j]]:.3g}): some configurations' heads are mislabelled")
    wrong = red.copy()
    wrong[rows, cols] = np.inf
    # each head's runner-up row space against its own: the positions must single one out
    margin = float(np.min(np.min(wrong, axis=1)[rows] / np.maximum(matched, 1.0))) if H > 1 else np.inf
    if margin < tol.link_margin:
        raise UnmatchedHeadsError(
            f"a group's head fits another head's row space nearly as well as its own (reduced chi2 {margin:.3g} "
            f"times its own's, less than {tol.link_margin:g}): heads too alike in this group")
    w = d + 1 if intercept else d
    Y, covY, used, perm = np.zeros((H, w)), np.zeros((H, w, w)), np.zeros((H, m), bool), np.zeros(H, int)
    for j, h in zip(rows, cols):
        a, cov, keep = sols[j, h]
        B = spans.basis(h)
        r = B.shape[1]
        T = np.zeros((w, len(a)))
        T[:d, :r] = B
        if intercept:
            T[d, r] = 1.0
        Y[j] = T @ a
        covY[j] = T @ cov @ T.T * max(1.0, red[j, h])
        covY[j][:d, :d] += sum(c * c * C for c, C in zip(a[:r], spans.covs[h][:r]))
        used[j], perm[h] = keep, j
    return Y, covY, used, perm, margin
