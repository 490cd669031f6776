r"""The complete root set of a lean configuration's polynomial system (design="lean", chapter 8).

Used in: chapter 8 (the lean design's phase 2: :math:`H` samples of a configuration whose
residues are known give :math:`H` polynomial equations in the :math:`H` unknown
:math:`\rho_h`; their :math:`H!` complex roots are all found, the real positive ones are the
candidates).

A configuration with final token :math:`q`, direction :math:`u` and known residues
:math:`\gamma_h=-u^\top v_h` gives at the nodes :math:`\tau_1..\tau_m`

.. math:: G_i=F(\tau_i)-V^\top q=\sum_{h=1}^{m}\frac{\gamma_h}{1+\rho_h\tau_i},\qquad i=1..m.

Cleared of denominators, equation :math:`i` is
:math:`f_i(\rho)=\sum_h\gamma_h\prod_{k\ne h}(1+\rho_k\tau_i)-G_i\prod_k(1+\rho_k\tau_i)=0`,
multilinear in :math:`\rho`: degree one in each unknown. Its multihomogeneous Bézout number
is the number of ways to give each equation its own unknown, :math:`m!`; so a set of
:math:`m!` distinct, simple roots is *every* root (the certificate that none was missed).

The roots are found by a linear-product homotopy [1]_ from the start system
:math:`g_i(\rho)=\prod_k(\rho_k-a_{ik})`, whose :math:`m!` roots are the permutations
:math:`\rho_{\sigma(i)}=a_{i\sigma(i)}` (same multilinear support as :math:`f`), with the
"gamma trick" :math:`h(\rho,s)=(1-s)\,\Gamma g(\rho)+s\,f(\rho)` for a random complex
:math:`\Gamma`, tracked in complex float64 (Euler predictor, Newton corrector, adaptive
step), then polished by Newton's method in mpmath at the working precision. Paths lost or
merged are retried from a new random start system; the union of the endpoints must hold
:math:`m!` distinct roots, else :class:`~attnlearn.errors.IllConditionedError`.

References
----------
.. [1] A. J. Sommese, C. W. Wampler, *The Numerical Solution of Systems of Polynomials
       Arising in Engineering and Science*, World Scientific, 2005, ch. 8 (linear-product
       homotopies) and §7.1 (the gamma trick).
"""

import itertools
import math
from dataclasses import dataclass

import mpmath
import numpy as np

from ...errors import IllConditionedError

__all__ = ["RootSet", "lean_system", "track_paths", "complete_roots"]

# homotopy tracking (complex float64): relative Newton tolerance of the corrector, step limits
_CORRECT_TOL = 1e-6
_MIN_STEP = 1e-7
_MAX_STEP = 0.25
_CORRECTOR_STEPS = 2
_JUMP = 1e-3  # largest relative correction of a predicted point (larger: the step may have jumped paths)
_MAX_STEPS = 4000
_REAL_SCREEN = 1e-3  # a float root with |Im| above this (relative) in some unknown is not real
_FLOAT_CONVERGED = 1e-11  # relative last Newton step of a float root taken as converged
_DISTINCT = 1e-8  # float roots closer than this (relative) are the same root unless polished apart
_TRIES = 4  # random start systems tried before the root set is declared incomplete


@dataclass
class RootSet:
    r"""Every root of one configuration's system.

    Attributes
    ----------
    roots : list of list of mpc
        The :math:`m!` distinct roots :math:`\rho` (polished at the working precision).
    candidates : list of list of mpf
        The real positive roots (the candidates for the true :math:`\rho`), labelled as
        the residues :math:`\gamma_h` are.
    separation : float
        Smallest relative distance between two roots (the certificate's margin).
    tries : int
        Start systems tracked.
    """

    roots: list
    candidates: list
    separation: float
    tries: int


def lean_system(gamma, tau, G):
    r"""The cleared system :math:`f(\rho)` and its Jacobian, vectorised over points (complex
    float64). Returns ``f(rho)`` with ``rho`` of shape (P, m) -> ((P, m), (P, m, m)).

    Used in: chapter 8 (through :func:`complete_roots`)."""
    gamma = np.asarray(gamma, dtype=complex)
    tau = np.asarray(tau, dtype=complex)
    G = np.asarray(G, dtype=complex)
    m = len(gamma)

    pairs = [(h, k) for h in range(m) for k in range(h + 1, m)]

    def f(rho):
        cols = [1 + rho[:, k, None] * tau[None, :] for k in range(m)]  # (P, i): 1 + rho_k tau_i
        one = np.ones_like(cols[0])
        but = [_product(cols, (k,), one) for k in range(m)]  # all factors but k
        but2 = {hk: _product(cols, hk, one) for hk in pairs}  # all but h and k
        F = sum(gamma[h] * but[h] for h in range(m)) - G[None, :] * but[0] * cols[0]
        J = np.empty((len(rho), m, m), dtype=complex)
        for k in range(m):
            col = -G[None, :] * but[k]
            for h in range(m):
                if h != k:
                    col = col + gamma[h] * but2[(min(h, k), max(h, k))]
            J[:, :, k] = col * tau[None, :]
        return F, J

    return f


def _product(cols, skip, one):
    """The product of the entries of ``cols`` (columns, or one row's mpmath numbers) but those in ``skip``
    (``one`` if none is left)."""
    out = one
    for k, c in enumerate(cols):
        if k not in skip:
            out = out * c
    return out


def _start(rng, m):
    """A random linear-product start system: ``a`` (m, m) complex and its m! roots (m!, m)."""
    a = (rng.uniform(0.5, 2.0, size=(m, m)) * np.exp(2j * np.pi * rng.uniform(size=(m, m))))
    perms = list(itertools.permutations(range(m)))
    roots = np.empty((len(perms), m), dtype=complex)
    for p, sigma in enumerate(perms):
        for i, k in enumerate(sigma):
            roots[p, k] = a[i, k]
    return a, roots


def _start_system(a):
    m = a.shape[0]

    def g(rho):
        cols = [rho[:, k, None] - a[None, :, k] for k in range(m)]  # (P, i): rho_k - a_ik
        one = np.ones_like(cols[0])
        J = np.empty((len(rho), m, m), dtype=complex)
        for k in range(m):
            J[:, :, k] = _product(cols, (k,), one)
        return J[:, :, 0] * cols[0], J

    return g


def track_paths(f, a, start, Gamma):
    r"""Track the paths of :math:`h(\rho,s)=(1-s)\Gamma g(\rho)+s f(\rho)` from ``start`` (s = 0)
    to s = 1 (complex float64, every path at once, each with its own step).

    Returns the last points (P, m), the mask of the paths that reached s = 1 and the value of
    :math:`s` each path reached (a path stopped near 1 is still polished: near-double roots).

    Used in: chapter 8 (through :func:`complete_roots`)."""
    g = _start_system(a)
    P, m = start.shape
    x = start.copy()
    s = np.zeros(P)
    ds = np.full(P, 0.02)
    alive = np.ones(P, dtype=bool)
    done = np.zeros(P, dtype=bool)

    def hom(xx, ss):
        fv, fj = f(xx)
        gv, gj = g(xx)
        w = ss[:, None]
        return ((1 - w) * Gamma * gv + w * fv, (1 - w[..., None]) * Gamma * gj + w[..., None] * fj,
                fv - Gamma * gv)

    def tangent(xx, ss):
        _, Jx, Hs = hom(xx, ss)
        return -np.linalg.solve(Jx, Hs[..., None])[..., 0]

    for _ in range(_MAX_STEPS):
        act = alive & ~done
        if not act.any():
            break
        idx = np.flatnonzero(act)
        xs, ss, hs = x[idx], s[idx], np.minimum(ds[idx], 1 - s[idx])
        with np.errstate(all="ignore"):
            # fourth-order Runge-Kutta predictor along dx/ds = -J^{-1} dh/ds, then Newton
            k1 = tangent(xs, ss)
            k2 = tangent(xs + 0.5 * hs[:, None] * k1, ss + 0.5 * hs)
            k3 = tangent(xs + 0.5 * hs[:, None] * k2, ss + 0.5 * hs)
            k4 = tangent(xs + hs[:, None] * k3, ss + hs)
            pred = xs + hs[:, None] / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
            xn, sn = pred, ss + hs
            for it in range(_CORRECTOR_STEPS):
                Hv, Jx, _ = hom(xn, sn)
                dx = np.linalg.solve(Jx, Hv[..., None])[..., 0]
                xn = xn - dx
                rel = np.linalg.norm(dx, axis=1) / np.maximum(1.0, np.linalg.norm(xn, axis=1))
            ok = np.isfinite(rel) & (rel < _CORRECT_TOL) & np.all(np.isfinite(xn), axis=1)
            # the predictor's error must be small too: a step that jumps paths corrects far away
            jump = np.linalg.norm(xn - pred, axis=1) / np.maximum(1.0, np.linalg.norm(xs, axis=1))
            ok &= jump < _JUMP
        acc, rej = idx[ok], idx[~ok]
        x[acc], s[acc] = xn[ok], sn[ok]
        ds[acc] = np.minimum(ds[acc] * 2, _MAX_STEP)
        ds[rej] *= 0.5
        done[acc] = s[acc] >= 1 - 1e-15
        alive[rej] = ds[rej] >= _MIN_STEP
        alive &= np.all(np.abs(x) < 1e12, axis=1)  # a path to infinity: not a finite root
    return x, done & alive, s


def _newton_float(f, x, iters=8):
    """A few plain Newton steps on the target system (complex float64); returns the points and
    the relative size of each one's last step (its convergence)."""
    step = np.full(len(x), np.inf)
    with np.errstate(all="ignore"):
        for _ in range(iters):
            F, J = f(x)
            dx = np.linalg.solve(J, F[..., None])[..., 0]
            x = x - dx
            step = np.linalg.norm(dx, axis=1) / np.maximum(1.0, np.linalg.norm(x, axis=1))
    return x, step


def _polish_mp(gamma, tau, G, x0, tol):
    r"""Newton's method on the cleared system :math:`f(\rho)` (the polynomial form: a root near a
    pole :math:`\rho_h=-1/\tau_i` of the rational form is as well conditioned as any other)
    in mpmath (complex) from ``x0``; returns the root (list of mpc) or None when it does not
    converge to ``tol``."""
    m = len(gamma)
    x = [mpmath.mpc(complex(c)) for c in x0]
    one = mpmath.mpf(1)
    for it in range(60):
        A = [[1 + x[k] * tau[i] for k in range(m)] for i in range(m)]
        F, J = [], []
        for i in range(m):
            but = [_product(A[i], (k,), one) for k in range(m)]
            F.append(mpmath.fsum(gamma[h] * but[h] for h in range(m)) - G[i] * but[0] * A[i][0])
            J.append([tau[i] * (mpmath.fsum(gamma[h] * _product(A[i], (h, k), one) for h in range(m) if h != k)
                                - G[i] * but[k]) for k in range(m)])
        try:
            dx = mpmath.lu_solve(mpmath.matrix(J), mpmath.matrix(F))
        except ZeroDivisionError:
            return None
        x = [x[h] - dx[h] for h in range(m)]
        size = max(abs(c) for c in x)
        step = max(abs(dx[h]) for h in range(m))
        if step <= tol * max(size, 1):
            return x
    return None


def complete_roots(gamma, tau, G, *, rng, label="a configuration"):
    r"""Every root of the lean system of one configuration, certified complete by their count.

    Parameters
    ----------
    gamma : sequence of mpf, length m
        The known residues :math:`\gamma_h` (labelled: head :math:`h`).
    tau : sequence of mpf, length m
        The nodes :math:`\tau_i` (distinct, positive).
    G : sequence of mpf, length m
        The samples :math:`F(\tau_i)-V^\top q`.
    rng : numpy.random.Generator
        Draws the random start systems and :math:`\Gamma`.
    label : str
        The configuration's name, for error messages.

    Returns
    -------
    RootSet

    Raises
    ------
    IllConditionedError
        Fewer than :math:`m!` distinct roots after ``_TRIES`` start systems (a path lost, or
        a near-double root that float64 tracking cannot separate).

    Notes
    -----
    Bézout's bound for multilinear systems (Sommese-Wampler, Thm 8.4.5): at most :math:`m!`
    isolated roots. :math:`m!` distinct roots, each a simple root to which Newton's method
    converged at the working precision, are therefore all of them.

    Used in: chapter 8.
    """
    m = len(gamma)
    need = math.factorial(m)
    f = lean_system([complex(g) for g in gamma], [complex(t) for t in tau], [complex(g) for g in G])
    dps = mpmath.mp.dps
    tol = mpmath.mpf(10) ** (-(dps - 5))
    found, tries = [], 0
    while len(found) < need and tries < _TRIES:
        tries += 1
        a, start = _start(rng, m)
        Gamma = np.exp(2j * np.pi * rng.uniform())
        ends, ok, reached = track_paths(f, a, start, Gamma)
        ends, steps = _newton_float(f, ends[ok | (reached > 0.9)])
        for e, step in zip(ends, steps):
            if not np.all(np.isfinite(e)):
                continue
            # a root far from the real positive orthant that float64 Newton has converged to
            # is certain as it is; the others (the candidates, the ill-conditioned) are polished
            off_real = np.any(np.abs(e.imag) > _REAL_SCREEN * np.abs(e)) or np.any(e.real <= 0)
            root = None
            if not (off_real and step <= _FLOAT_CONVERGED):
                root = _polish_mp(gamma, tau, G, e, tol)
                if root is None:
                    continue
                e = np.array([complex(c) for c in root])
            if any(_same(root, e, r, dps) for r in found):
                continue
            found.append((root, e))
    if len(found) < need:
        raise IllConditionedError(
            f"{label}: found {len(found)} of the {need} roots of the lean system after {tries} start systems "
            "(a lost path or a near-double root): the root set cannot be certified complete")
    if len(found) > need:  # pragma: no cover - more than the Bezout bound: a polishing bug
        raise IllConditionedError(f"{label}: {len(found)} distinct roots exceed the Bezout bound {need}")
    roots = [r[0] if r[0] is not None else [mpmath.mpc(complex(c)) for c in r[1]] for r in found]
    sep = min((_fdistance(a[1], b[1]) for a, b in itertools.combinations(found, 2)), default=math.inf)
    imag_tol = mpmath.mpf(10) ** (-dps // 2)
    candidates = [[mpmath.re(c) for c in r[0]] for r in found if r[0] is not None
                  and all(abs(mpmath.im(c)) <= imag_tol * max(abs(c), 1) and mpmath.re(c) > 0 for c in r[0])]
    return RootSet(roots, candidates, sep, tries)


def _fdistance(a, b):
    """Relative distance between two float roots (max norm)."""
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(a)), 1.0))


def _same(root, e, other, dps):
    """Is the root (mp ``root`` or None, float ``e``) the same as ``other`` (a found pair)?"""
    if _fdistance(e, other[1]) > _DISTINCT:
        return False
    if root is not None and other[0] is not None:
        return _distance(root, other[0]) <= mpmath.mpf(10) ** (-dps // 2)
    return True


def _distance(a, b):
    """Relative distance between two roots (max norm)."""
    return max(abs(x - y) for x, y in zip(a, b)) / max(max(abs(x) for x in a), 1)
