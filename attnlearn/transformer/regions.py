"""Step 3 of :func:`attnlearn.learn_transformer`: each region's gradients from the copies family with
the poles known from step 1.

Used in: chapter 6 (claim C9).
"""

import math

import mpmath
import numpy as np

from .._arith import orthonormal_columns, to_float
from ..errors import RecoveryError
from ..rational import copies_sequences
from .kinks import _at, _point

__all__ = [
    "RegionFitError",
]


class RegionFitError(RecoveryError):
    """Samples around a region point do not fit the known-pole form at any perturbation size."""


def _region_gradients(ctx, line, kinks, pieces, *, perturbation, max_shrinks, fscale):
    r"""Step 3: the gradient :math:`G_r` of every region (between consecutive kinks). Returns the
    gradients (k' + 1, H', d), the shrinks per region and the largest refit and gradient-sum
    residuals (relative)."""
    N = ctx.N
    bounds = [-N.pi / 2] + kinks + [N.pi / 2]
    Gs = np.empty((len(kinks) + 1, ctx.H, ctx.d), dtype=object if ctx.exact else float)
    shrinks, fit_res, sum_res = [], 0.0, 0.0
    Wnorm = max([float(np.linalg.norm(to_float(ctx.W[h]), 2)) for h in range(ctx.H)] + [1e-300])
    for r in range(len(kinks) + 1):
        lo, hi = bounds[r], bounds[r + 1]
        rel = perturbation * float(abs(N.sin((hi - lo) / 2)))
        Urot = orthonormal_columns(ctx.rng.normal(size=(ctx.d, ctx.d)))
        region = dict(line=line, tm=(lo + hi) / 2, piece=pieces[r], Urot=Urot, Wnorm=Wnorm, fscale=fscale)
        for attempt in range(max_shrinks + 1):
            Gr, worst_rel, srel = _region_fit(ctx, rel, **region)
            if worst_rel <= ctx.tol.fit and srel <= ctx.tol.fit:
                break
            rel /= 8.0
        else:
            raise RegionFitError(
                f"region {r} (theta in [{float(lo):.4f}, {float(hi):.4f}]): the copies samples do not fit "
                f"c + sum_h gamma_h/(1 + rho_h t) with the {ctx.H} learned poles even with a perturbation shrunk "
                f"{max_shrinks} times (relative residual {worst_rel:.1e}, gradient-sum residual {srel:.1e}): "
                "a unit sits on its kink for every single token (nu_j = 0) or a head is invisible in "
                "T(X) - T(-X) (v_h = 0)"
            )
        shrinks.append(attempt)
        fit_res = max(fit_res, worst_rel)
        sum_res = max(sum_res, srel)
        Gs[r] = Gr
    return Gs, shrinks, fit_res, sum_res


def _region_fit(ctx, rel, *, line, tm, piece, Urot, Wnorm, fscale):
    r"""One attempt of step 3 at the region's midpoint ``tm`` with perturbation size ``rel``: the
    copies family with known poles at :math:`q=R\,q(\theta_m)` and :math:`x=q-u_i` for the
    orthogonal rows :math:`u_i` of ``Urot`` scaled. Returns the gradient :math:`G_r`, the relative
    refit residual and the gradient-sum residual (the piece of step 2, no query spent)."""
    N, d, Hn = ctx.N, ctx.d, ctx.H
    ts = list(range(Hn + 1))
    R = math.sqrt(1.0 / (rel * Wnorm)) if Hn else 1.0
    R = min(max(R, 1.0), 1e6)
    q = _point(line, tm, N) * N.num(R)
    c = N.num(R) * _at(piece, tm, N)
    U = N.arr(Urot * (rel * R))  # rows u_i, orthogonal, |u| = rel |q|
    xs = np.stack([q - U[i] for i in range(d)])
    qs = np.stack([q] * d)
    F = np.empty((d, len(ts)), dtype=object if ctx.exact else float)
    for i, t in enumerate(ts):
        seqs = xs[:, None, :] if t == 0 else copies_sequences(xs, qs, t)
        F[:, i] = ctx.ask(seqs)
    gam, worst = _known_pole_fit(F, c, U, q, ctx.W, ts=ts, exact=ctx.exact)
    fscale_r = max(1e-300, float(np.max(np.abs(to_float(F)))))
    # gamma[i, h] = -u_i^T g_h  ->  g_h = -U^{-1} gamma[:, h]
    Gr = (-_solve(U, gam, ctx.exact)).T if Hn else np.zeros((0, d))
    # check: sum_h g_h must give the piece (alpha, beta) of step 2 (no query spent)
    S = Gr.sum(axis=0) if Hn else np.zeros(d)
    srel = float(max(abs(S.dot(line[0]) - piece[0]), abs(S.dot(line[1]) - piece[1]))) / fscale
    return Gr, worst / fscale_r, srel


def _known_pole_fit(F, c, U, q, W, *, ts, exact):
    r"""Residues :math:`\gamma_{i,h}` of :math:`F_i(t)-c=\sum_h\gamma_{i,h}/(1+\rho_{i,h}t)` with
    :math:`\rho_{i,h}=e^{u_i^\top W_hq}` known; least squares over the samples ``ts``.

    Returns ``(gamma (C, H), worst absolute refit residual)``.
    """
    C, H = F.shape[0], W.shape[0]
    gam = np.empty((C, H), dtype=object if exact else float)
    worst = 0.0
    for i in range(C):
        rhs = [F[i, j] - c for j in range(len(ts))]
        if H == 0:
            worst = max(worst, max(abs(float(r)) for r in rhs))
            continue
        ell = [U[i].dot(W[h].dot(q)) for h in range(H)]
        if exact:
            rho = [mpmath.exp(e) for e in ell]
            Bm = mpmath.matrix([[1 / (1 + rho[h] * t) for h in range(H)] for t in ts])
            sol, _ = mpmath.qr_solve(Bm, mpmath.matrix(rhs))
            x = [sol[h] for h in range(H)]
            r = max(abs(rhs[j] - mpmath.fsum(x[h] * Bm[j, h] for h in range(H))) for j in range(len(ts)))
            gam[i] = x
            worst = max(worst, float(r))
        else:
            rho = np.exp(np.array(ell, dtype=float))
            Bm = 1.0 / (1.0 + rho[None, :] * np.asarray(ts, float)[:, None])
            x = np.linalg.lstsq(Bm, np.array(rhs, dtype=float), rcond=None)[0]
            gam[i] = x
            worst = max(worst, float(np.max(np.abs(Bm @ x - np.array(rhs, dtype=float)))))
    return gam, worst


def _solve(U, G, exact):
    """``U^{-1} G`` in the learner's arithmetic."""
    if exact:
        from .._arith import mp_solve

        return mp_solve(U, G)
    return np.linalg.solve(np.asarray(U, float), np.asarray(G, float))
