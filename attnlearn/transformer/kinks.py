"""Step 2 of :func:`attnlearn.learn_transformer`: the kinks of the single-token restriction along a
half circle, located by refining a grid and confirmed by queries; the learner's scalar arithmetic.

Used in: chapter 6 (claim C9).
"""

import math

import mpmath
import numpy as np

from .._arith import orthonormal_columns, to_mp
from ..errors import RecoveryError
from .orientations import OrientationError

__all__ = [
    "KinkError",
]


class KinkError(RecoveryError):
    """The kinks of the single-token restriction could not be isolated along the line."""


class _Num:
    """Scalar arithmetic of the learner: mpmath (exact mode) or Python floats."""

    def __init__(self, exact):
        self.exact = exact
        if exact:
            self.cos, self.sin, self.atan, self.pi = mpmath.cos, mpmath.sin, mpmath.atan, +mpmath.pi
            self.num = mpmath.mpf
        else:
            self.cos, self.sin, self.atan, self.pi = math.cos, math.sin, math.atan, math.pi
            self.num = float

    def arr(self, a):
        return to_mp(a) if self.exact else np.asarray(a, dtype=float)


def _line(t1, y1, t2, y2, N):
    r"""Coefficients :math:`(\alpha,\beta)` of :math:`\alpha\cos\theta+\beta\sin\theta` through two points."""
    den = N.sin(t2 - t1)
    return (y1 * N.sin(t2) - y2 * N.sin(t1)) / den, (y2 * N.cos(t1) - y1 * N.cos(t2)) / den


def _at(p, t, N):
    return p[0] * N.cos(t) + p[1] * N.sin(t)


def _find_kinks(g, N, tol, grid, *, min_width, hstep, max_rounds=60, max_samples=2000):
    r"""Kinks of :math:`\theta\mapsto T(q(\theta))` on :math:`[-\pi/2,\pi/2]` and the pieces between.

    ``g(thetas)`` returns the values (one query each); ``tol()`` the current absolute
    tolerance of the collinearity and kink checks; ``hstep`` the offset of the two probes that
    confirm a kink. Returns ``(kinks, pieces, stats)``:
    ``kinks`` increasing, ``pieces`` the ``len(kinks) + 1`` pairs :math:`(\alpha,\beta)`.
    """
    half = N.pi / 2
    vals = {}
    start = [-half + N.pi * i / grid for i in range(grid + 1)]
    start[-1] = half
    for t, y in zip(start, g(start)):
        vals[t] = y
    confirmed = {}  # (lo, hi) -> theta* (confirmed single kink between these samples)
    verify_queries = 0
    for _ in range(max_rounds):
        th = sorted(vals)
        y = [vals[t] for t in th]
        runs = _collinear_runs(th, y, N, tol)
        kinks, pieces, split, new_verify = _kink_candidates(runs, th, y, confirmed, N)
        if new_verify:
            found, unresolved, spent = _verify_kinks(new_verify, th, vals, confirmed, g=g, N=N, tol=tol, hstep=hstep)
            kinks.extend(found)
            split.extend(unresolved)
            verify_queries += spent
        if not split and len(kinks) == len(runs) - 1:
            kinks.sort()
            return kinks, pieces, {"samples": len(vals), "verify": verify_queries}
        new = _bisection(split, th, vals, min_width=min_width, max_samples=max_samples)
        for t, yv in zip(new, g(new)):
            vals[t] = yv
    raise KinkError(f"kinks not resolved after {max_rounds} refinement rounds")


def _collinear_runs(th, y, N, tol):
    """Maximal runs ``(s, e)`` of samples on one piece :math:`\\alpha\\cos\\theta+\\beta\\sin\\theta`
    (each inner sample on the line through its neighbours, within ``tol()``)."""
    n = len(th)
    col = [False] * n
    for i in range(1, n - 1):
        p = _line(th[i - 1], y[i - 1], th[i + 1], y[i + 1], N)
        col[i] = abs(_at(p, th[i], N) - y[i]) <= tol()
    runs = []
    i = 0
    while i <= n - 3:
        if col[i + 1]:
            e = i + 2
            while e <= n - 2 and col[e]:
                e += 1
            runs.append((i, e))
            i = e + 1
        else:
            i += 1
    return runs


def _kink_candidates(runs, th, y, confirmed, N):
    """The pieces of the runs, the kinks already confirmed between neighbouring runs, the index
    ranges to bisect (in order: ends, then pairs of runs with no single kink between them) and the
    kink candidates to verify (the intersection of two neighbouring pieces)."""
    n = len(th)
    split = []  # index ranges [lo, hi] whose intervals are bisected
    if not runs:
        return [], [], [(0, n - 1)], []
    if runs[0][0] != 0:
        split.append((0, runs[0][0]))
    if runs[-1][1] != n - 1:
        split.append((runs[-1][1], n - 1))
    lines = [_line(th[s], y[s], th[e], y[e], N) for s, e in runs]
    kinks, new_verify = [], []
    for r in range(len(runs) - 1):
        eA, sB = runs[r][1], runs[r + 1][0]
        key = (th[eA], th[sB])
        if key in confirmed:
            kinks.append(confirmed[key])
            continue
        pA, pB = lines[r], lines[r + 1]
        da, db = pA[0] - pB[0], pA[1] - pB[1]
        cand = N.atan(-da / db) if db != 0 else None
        if sB == eA + 1 and cand is not None and th[eA] < cand < th[sB]:
            new_verify.append((key, cand, pA, pB, eA, sB))
        else:
            split.append((eA, sB))
    return kinks, lines, split, new_verify


def _verify_kinks(new_verify, th, vals, confirmed, *, g, N, tol, hstep):
    """Confirm each candidate kink by two probes: a kink at theta* must have piece A just left of
    it and piece B just right of it (the intersection alone can fall inside A's or B's own region
    when an interval holds several kinks; the probes at theta* -+ h rule that out, unless a kink
    lies within h of theta*). A confirmed kink is recorded in ``confirmed``; the probes of an
    unconfirmed one become ordinary samples in ``vals``. Returns ``(kinks, split, queries)``: the
    confirmed kinks, the intervals to split further and the queries spent."""
    kinks, split = [], []
    probes = []
    for key, cand, pA, pB, eA, sB in new_verify:
        h = min(hstep, (cand - th[eA]) / 4, (th[sB] - cand) / 4)
        probes.extend([cand - h, cand + h])
    ys = g(probes)
    for i, (key, cand, pA, pB, eA, sB) in enumerate(new_verify):
        yl, yr = ys[2 * i], ys[2 * i + 1]
        on_a = abs(_at(pA, probes[2 * i], N) - yl) <= tol()
        if on_a and abs(_at(pB, probes[2 * i + 1], N) - yr) <= tol():
            confirmed[key] = cand
            kinks.append(cand)
        else:
            vals[probes[2 * i]] = yl  # ordinary samples: more than one kink in between
            vals[probes[2 * i + 1]] = yr
            split.append((eA, sB))
    return kinks, split, len(probes)


def _bisection(split, th, vals, *, min_width, max_samples):
    """Midpoints of every interval of the ranges ``split`` not yet sampled.

    Raises
    ------
    KinkError
        Two kinks closer than ``min_width``, or more than ``max_samples`` samples.
    """
    new = []
    for lo, hi in split:
        for i in range(lo, hi):
            if th[i + 1] - th[i] < min_width:
                raise KinkError(
                    f"kinks closer than {float(min_width):.1e} rad along the line near theta = "
                    f"{float(th[i]):.6f} could not be separated (nearly parallel nu_j, or a kink too "
                    "close to the line's end)"
                )
            new.append((th[i] + th[i + 1]) / 2)
    new = [t for t in new if t not in vals]
    if len(vals) + len(new) > max_samples:
        raise KinkError(
            f"more than {max_samples} samples on the line and the kinks are still not isolated: the "
            "single-token function is not piecewise linear along the line at this tolerance (not a "
            "bias-free ReLU layer, or too noisy)"
        )
    return new


def _point(line, t, N):
    r""":math:`q(\theta)=\cos\theta\,q_0+\sin\theta\,\delta` on the half circle of ``line`` = ``(q0, delta)``."""
    return line[0] * N.cos(t) + line[1] * N.sin(t)


def _kink_step(ctx, *, grid, max_units):
    r"""Step 2: kinks along the half circle :math:`q(\theta)`. Returns the line ``(q0, delta)``, the
    kinks, the pieces, the search's statistics and the scale :math:`\max|T|` seen on the line."""
    N = ctx.N
    Z = orthonormal_columns(ctx.rng.normal(size=(ctx.d, 2)))  # not LAPACK: the same queries on every CPU
    line = (N.arr(Z[:, 0]), N.arr(Z[:, 1]))
    scale_pts = [0.0]  # |T| seen so far on the half circle: the unit of the kink tolerance

    def g_scaled(thetas):
        ys = ctx.ask(np.stack([_point(line, t, N) for t in thetas])[:, None, :]) if thetas else []
        scale_pts.extend(abs(float(v)) for v in ys)
        return ys

    def ktol():
        return ctx.tol.rel * max(1e-300, max(scale_pts))

    kinks, pieces, kstats = _find_kinks(g_scaled, N, ktol, grid, min_width=ctx.tol.min_width, hstep=ctx.tol.hstep)
    if len(kinks) > max_units:
        raise OrientationError(
            f"{len(kinks)} kinks found: the 2^k' orientation search is limited to max_units = {max_units}")
    return line, kinks, pieces, kstats, max(1e-300, max(scale_pts))
