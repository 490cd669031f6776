"""Steps 4-5 of :func:`attnlearn.learn_transformer`: the units' orientations from the jumps between
regions, the value check, and the equivalent Transformer factored from the units.

Used in: chapter 6 (claim C9).
"""

import mpmath
import numpy as np

from .._arith import to_float
from ..errors import CheckFailedError, RecoveryError
from .model import OneLayerTransformer

__all__ = [
    "OrientationError",
]


class OrientationError(RecoveryError):
    """No unique sign pattern of the jumps reproduces the first region's gradient."""


def _orientations(ctx, Gs, pieces):
    r"""Step 4: jumps :math:`J_i=G_i-G_{i-1}`, the signs :math:`a'_i` (slope changes), and the
    orientations :math:`\varepsilon_i` from the subset sum :math:`G_0=-\sum_{\varepsilon_i=-1}J_i`.
    Returns ``(J, signs, orientations, (best residual, runner-up))``.

    Raises
    ------
    OrientationError
        No sign pattern fits, or two do.
    """
    kn, Hn, d = len(Gs) - 1, ctx.H, ctx.d
    J = np.stack([Gs[i + 1] - Gs[i] for i in range(kn)]) if kn else np.zeros((0, Hn, d))
    signs = np.array([1 if (pieces[i + 1][1] - pieces[i][1]) > 0 else -1 for i in range(kn)], dtype=int)
    Gscale = max(1e-300, max(float(np.max(np.abs(to_float(G)))) if G.size else 0.0 for G in Gs))
    Jf = to_float(J).reshape(kn, Hn * d)
    target = -to_float(Gs[0]).reshape(-1)
    sums = np.zeros((1, Hn * d))
    for i in range(kn):
        sums = np.concatenate([sums, sums + Jf[i]], axis=0)  # bit i of the row index: i in the subset
    res = np.linalg.norm(sums - target, axis=1) / Gscale
    order = np.argsort(res)
    best = int(order[0])
    second = float(res[order[1]]) if len(order) > 1 else float("inf")
    subset = [(best >> i) & 1 for i in range(kn)]
    eps_orient = np.array([-1 if s else 1 for s in subset], dtype=int)
    if Hn and kn:
        exact_res = sum(((J[i] if subset[i] else 0 * J[i]) for i in range(kn)), Gs[0] * 0) + Gs[0]
        best_res = float(np.max(np.abs(to_float(exact_res)))) / Gscale
    else:
        best_res = float(res[best])
    if Hn and not best_res <= ctx.tol.check:
        raise OrientationError(
            f"no sign pattern of the {kn} jumps reproduces the first region's gradient: best relative residual "
            f"{best_res:.1e} > {ctx.tol.check:.0e} (units with parallel nu_j share a kink, or a unit was missed)"
        )
    if Hn and kn and second <= ctx.tol.check:
        raise OrientationError(
            f"two sign patterns of the {kn} jumps fit the first region's gradient (residuals {best_res:.1e} and "
            f"{second:.1e}): orientations not determined"
        )
    return J, signs, eps_orient, (best_res, second)


def _value_check(ctx, Gs):
    r"""Relative :math:`\|G_0+G_{k'}-[v_h]\|` (the values of :math:`D`; 0 without a head)."""
    if not ctx.H:
        return 0.0
    vres = Gs[0] + Gs[len(Gs) - 1] - ctx.v
    return float(np.max(np.abs(to_float(vres)))) / max(1e-300, float(np.max(np.abs(to_float(ctx.v)))))


def _equivalent_transformer(ctx, J, signs, eps_orient):
    r"""Step 5: :math:`a'_j=\pm1`, :math:`\pi'_j=a_j\pi_j/a'_j`, factored as :math:`B'[O'_1\cdots O'_{H'}]`;
    the learned :math:`W_h` kept. Returns the model and the rank residual of :func:`_factor`."""
    N, d, Hn, kn = ctx.N, ctx.d, ctx.H, len(J)
    P = np.stack([signs[i] * eps_orient[i] * J[i].reshape(-1) for i in range(kn)]) if kn else np.zeros((0, Hn * d))
    Bp, Ocat, rank_res = _factor(P, d, ctx.exact, ctx.tol.check)
    Op = np.stack([Ocat[:, h * d:(h + 1) * d] for h in range(Hn)]) if Hn else np.zeros((0, d, d))
    a_p = N.arr(signs.astype(float)) if kn else N.arr(np.zeros(0))
    model = OneLayerTransformer(ctx.W if Hn else N.arr(np.zeros((0, d, d))), Op if Hn else N.arr(np.zeros((0, d, d))),
                                Bp, a_p)
    return model, rank_res


def _factor(P, d, exact, tol):
    r"""Factor ``P`` (k, H d), rank at most d, as ``B' @ Ocat`` with ``B'`` (k, d), ``Ocat`` (d, H d).

    :math:`k\le d`: :math:`B'=[I_k\;0]`, ``Ocat`` = ``P`` padded with zero rows (exact).
    :math:`k>d`: truncated SVD (mpmath in exact mode). Returns ``(B', Ocat, s_{d+1}/s_1)``.
    """
    k, n = P.shape
    dt = object if exact else float
    zero = mpmath.mpf(0) if exact else 0.0
    one = mpmath.mpf(1) if exact else 1.0
    if k <= d:
        Bp = np.full((k, d), zero, dtype=dt)
        for j in range(k):
            Bp[j, j] = one
        Ocat = np.full((d, n), zero, dtype=dt)
        Ocat[:k] = P
        return Bp, Ocat, 0.0
    if exact:
        Um, S, Vm = mpmath.svd_r(mpmath.matrix(P.tolist()))
        r = len(S)
        Uarr = np.array([[Um[i, j] for j in range(r)] for i in range(k)], dtype=object)
        Varr = np.array([[Vm[i, j] for j in range(n)] for i in range(r)], dtype=object)
        S = [S[i] for i in range(r)]
    else:
        Uarr, S, Varr = np.linalg.svd(np.asarray(P, float), full_matrices=False)
        S = list(S)
        r = len(S)
    rank_res = float(S[d] / S[0]) if r > d and S[0] != 0 else 0.0
    m = min(r, d)
    Bp = np.full((k, d), zero, dtype=dt)
    Ocat = np.full((d, n), zero, dtype=dt)
    for j in range(m):
        Bp[:, j] = Uarr[:, j] * S[j]
        Ocat[j] = Varr[j]
    if rank_res > tol:
        raise CheckFailedError(
            f"the {k} unit vectors span more than d = {d} dimensions (singular value ratio s_{d + 1}/s_1 = "
            f"{rank_res:.1e}): not the unit vectors of a Transformer of width d"
        )
    return Bp, Ocat, rank_res
