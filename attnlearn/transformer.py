r"""A one-layer Transformer (multi-head attention, then a bias-free ReLU layer) and its learner.

Used in: chapter 6 (claim C9).

The paper's construction for the Transformer extension is not public; what follows is this
companion's own construction, built only from the public multi-head learner
(:func:`attnlearn.learn`) and oracle queries.

Model. With the attention of DESIGN §1 (scores :math:`x_i^\top W_hx_N`, softmax over
:math:`i`), value-output matrices :math:`O_h\in\mathbb R^{d\times d}`, :math:`B\in\mathbb
R^{k\times d}` and :math:`a\in\mathbb R^k`,

.. math:: z(X)=\sum_h\sum_i\alpha_{h,i}O_hx_i,\qquad T(X)=a^\top\mathrm{ReLU}(Bz(X)).

With :math:`m_h(X)=\sum_i\alpha_{h,i}x_i` and :math:`\pi_j=[O_1^\top b_j;\dots;O_H^\top b_j]`,
:math:`T(X)=\sum_ja_j\,\mathrm{ReLU}(\pi_j^\top m(X))`.

Learner (:func:`learn_transformer`), five steps:

1. *Attention.* :math:`D(X)=T(X)-T(-X)` is a multi-head attention model with value vectors
   :math:`v_h=O_h^\top B^\top a` (scores are even in :math:`X`, :math:`\mathrm{ReLU}(y)-
   \mathrm{ReLU}(-y)=y`); :func:`attnlearn.learn` recovers its canonical heads, each value of
   :math:`D` costing two queries.
2. *Kinks.* On single-token queries all attention weights are 1, so
   :math:`T((q))=\sum_ja_j\mathrm{ReLU}(\nu_j^\top q)` with :math:`\nu_j=\sum_hO_h^\top b_j`.
   Along the half circle :math:`q(\theta)=\cos\theta\,q_0+\sin\theta\,\delta`,
   :math:`\theta\in[-\pi/2,\pi/2]` (the line :math:`q_0+s\delta`, :math:`s=\tan\theta`, seen
   through positive homogeneity) each unit has exactly one kink; between kinks
   :math:`T=\alpha\cos\theta+\beta\sin\theta`. Kinks are located by refining a grid and
   intersecting neighbouring pieces, and confirmed by one query at the intersection.
3. *Local gradients.* In each region, at a point :math:`q` of the half circle and with
   :math:`x=q-u` for a small :math:`u`, the copies family gives
   :math:`F(t)=c+\sum_h\gamma_h/(1+\rho_ht)` with :math:`\rho_h=e^{u^\top W_hq}` known from
   step 1, :math:`c` known from step 2 and :math:`\gamma_h=-u^\top g_h`, where
   :math:`g_h=\sum_{j\text{ active}}a_jO_h^\top b_j`. :math:`t=0,\dots,H'` (one more sample
   than unknowns: a residual check) for :math:`d` orthogonal :math:`u` give :math:`G_r=[g_1;
   \dots;g_{H'}]`. A residual above tolerance means a unit changed sign: the perturbation is
   shrunk and the region asked again.
4. *Units.* Jumps :math:`J_i=G_i-G_{i-1}=\varepsilon_ia_j\pi_j`; the units active in region 0
   are those that switch off (:math:`\varepsilon=-1`), so :math:`G_0=-\sum_{\varepsilon_i=-1}
   J_i`: a subset-sum over :math:`2^{k'}` sign patterns, unique for generic models. The sign
   of each :math:`a_j` is the sign of the slope change along the line. Check:
   :math:`G_0+G_{k'}=[v_1;\dots;v_{H'}]` (the values of :math:`D`).
5. *Equivalent Transformer.* :math:`a'_j=\pm1`, :math:`\pi'_j=a_j\pi_j/a'_j`; the
   :math:`k'\times H'd` matrix of the :math:`\pi'_j` (rank at most :math:`d`) is factored as
   :math:`B'[O'_1\cdots O'_{H'}]` by an SVD; the learned :math:`W_h` are kept.
"""

import math
import numbers
from dataclasses import dataclass

import mpmath
import numpy as np

from ._arith import as_real_array, is_mp, orthonormal_columns, to_float, to_mp, working_precision
from .arguments import check_count, check_flag, check_oracle, check_real, check_seed
from ._checks import heldout_discrepancy
from .canonical import canonical
from .errors import CheckFailedError, RecoveryError
from .learner.learn import learn
from .learner.cost import check_cost, learn_cost
from .learner.tolerances import MAX_LENGTH, MAX_QUERIES, Tolerances
from .model import MultiHeadAttention, _ReadAtFinalToken, check_sequences, mp_softmax_numerators, softmax_numerators
from .protocol import Access
from .rational import copies_sequences

__all__ = [
    "OneLayerTransformer",
    "learn_transformer",
    "TransformerRecovery",
    "KinkError",
    "RegionFitError",
    "OrientationError",
]


class KinkError(RecoveryError):
    """The kinks of the single-token restriction could not be isolated along the line."""


class RegionFitError(RecoveryError):
    """Samples around a region point do not fit the known-pole form at any perturbation size."""


class OrientationError(RecoveryError):
    """No unique sign pattern of the jumps reproduces the first region's gradient."""


# ----------------------------------------------------------------------------- model
class OneLayerTransformer(_ReadAtFinalToken):
    r"""Multi-head attention followed by a bias-free ReLU layer, read at the final token.

    Parameters
    ----------
    W : array_like, shape (H, d, d)
        Query-key matrices :math:`W_h` (scores :math:`x_i^\top W_hx_N`).
    O : array_like, shape (H, d, d)
        Value-output matrices :math:`O_h`.
    B : array_like, shape (k, d)
        Hidden layer (rows :math:`b_j`).
    a : array_like, shape (k,)
        Output weights.

    Notes
    -----
    .. math:: T(X)=a^\top\mathrm{ReLU}\Big(B\sum_{h=1}^H\sum_{i=1}^N\alpha_{h,i}O_hx_i\Big),
              \qquad \alpha_h=\operatorname{softmax}_i(x_i^\top W_hx_N).

    ``H = 0`` or ``k = 0`` give the zero function. Entries may be float64 or mpmath numbers
    (exact mode); evaluation is vectorised in float64 and runs in mpmath on object arrays.
    """

    def __init__(self, W, O, B, a):
        W = as_real_array(W, "W")
        O = as_real_array(O, "O")
        B = as_real_array(B, "B")
        a = as_real_array(a, "a")
        if W.ndim != 3 or W.shape[1] != W.shape[2]:
            raise ValueError(f"W must have shape (H, d, d), got {W.shape}")
        if W.shape[1] == 0:
            raise ValueError("the token width d must be at least 1")
        if O.shape != W.shape:
            raise ValueError(f"O must have the shape of W, (H, d, d) = {W.shape}, got {O.shape}")
        if B.ndim != 2 or B.shape[1] != W.shape[1]:
            raise ValueError(f"B must have shape (k, d) with d = {W.shape[1]}, got {B.shape}")
        if a.ndim != 1 or a.shape[0] != B.shape[0]:
            raise ValueError(f"a must have shape (k,) with k = {B.shape[0]} (the rows of B), got {a.shape}")
        if any(is_mp(x) for x in (W, O, B, a)):
            W, O, B, a = (to_mp(x) for x in (W, O, B, a))
        self.W, self.O, self.B, self.a = W, O, B, a

    @property
    def k(self):
        """Number of hidden units."""
        return self.B.shape[0]

    def to_mpmath(self):
        """The same model with mpmath entries (float64 values are taken exactly)."""
        return OneLayerTransformer(to_mp(self.W), to_mp(self.O), to_mp(self.B), to_mp(self.a))

    def to_float(self):
        """The same model rounded to float64."""
        return OneLayerTransformer(to_float(self.W), to_float(self.O), to_float(self.B), to_float(self.a))

    @classmethod
    def random(cls, d, H, k, *, seed=0):
        r"""A random model: :math:`W,O` entries :math:`\mathcal N(0,1/d)`, :math:`B` entries
        :math:`\mathcal N(0,1/d)`, :math:`a` entries :math:`\mathcal N(0,1)` (float64)."""
        rng = np.random.default_rng(seed)
        s = 1.0 / np.sqrt(d)
        return cls(rng.normal(size=(H, d, d)) * s, rng.normal(size=(H, d, d)) * s,
                   rng.normal(size=(k, d)) * s, rng.normal(size=k))

    def unit_vectors(self):
        r""":math:`\pi_{j,h}=O_h^\top b_j`, shape ``(k, H, d)``: unit :math:`j` reads
        :math:`\sum_h\pi_{j,h}^\top m_h(X)`."""
        return np.einsum("hij,ki->khj", self.O, self.B)

    def difference_model(self):
        r"""The attention model :math:`D(X)=T(X)-T(-X)`: heads :math:`(W_h,\,O_h^\top B^\top a)`."""
        v = np.einsum("hij,i->hj", self.O, self.B.T.dot(self.a)) if self.H else self.W[:, 0, :]
        return MultiHeadAttention(self.W, v)

    def conditions(self):
        r"""Quantities behind the learner's conditions (chapter 6), as floats.

        ``min_abs_a``: :math:`\min_j|a_j|`; ``min_nu``: :math:`\min_j\|\nu_j\|` with
        :math:`\nu_j=\sum_hO_h^\top b_j`; ``max_cos_nu``: largest :math:`|\cos|` between two
        :math:`\nu_j` (1 means parallel); ``min_v``: smallest norm of a canonical head's value
        vector in :meth:`difference_model` (merging heads with equal :math:`W`), and
        ``heads_dropped``: how many merged heads have :math:`v_h=0` there. Computed in the
        model's arithmetic (mpmath with at least 50 digits for exact models), then rounded.
        """
        with mpmath.workdps(max(mpmath.mp.dps, 50)):  # exact zeros stay zeros
            return self._conditions()

    def _conditions(self):
        P = to_float(self.unit_vectors())
        nu = P.sum(axis=1) if self.H else np.zeros((self.k, self.d))
        nn = np.linalg.norm(nu, axis=1)
        maxcos = 0.0
        for i in range(self.k):
            for j in range(i + 1, self.k):
                if nn[i] > 0 and nn[j] > 0:
                    maxcos = max(maxcos, abs(float(nu[i] @ nu[j])) / (nn[i] * nn[j]))
        D = self.difference_model()
        merged = canonical(D, atol=0.0)
        # heads with equal W merge; count the merged groups to see how many were dropped
        groups = canonical(MultiHeadAttention(D.W, np.ones(D.v.shape)), atol=0.0).H
        return {
            "min_abs_a": float(np.min(np.abs(to_float(self.a)))) if self.k else float("inf"),
            "min_nu": float(nn.min()) if self.k else float("inf"),
            "max_cos_nu": maxcos,
            "min_v": float(np.linalg.norm(to_float(merged.v), axis=1).min()) if merged.H else 0.0,
            "heads_dropped": groups - merged.H,
        }

    def __repr__(self):
        kind = "mpmath" if self.exact else "float64"
        return f"OneLayerTransformer(H={self.H}, d={self.d}, k={self.k}, {kind})"

    def _batch_float(self, Xs):
        if self.H == 0 or self.k == 0:
            return np.zeros(Xs.shape[0])
        e = softmax_numerators(Xs, self.W)
        alpha = e / e.sum(axis=1, keepdims=True)
        m = np.einsum("nih,nid->nhd", alpha, Xs)  # m_h(X)
        z = np.einsum("hij,nhj->ni", self.O, m)
        return np.maximum(z @ self.B.T, 0.0) @ self.a

    def _batch_mp(self, Xs):
        Xs = to_mp(Xs)
        W, O, B, a = (to_mp(x) for x in (self.W, self.O, self.B, self.a))
        n = Xs.shape[0]
        out = np.empty(n, dtype=object)
        zero = mpmath.mpf(0)
        for r in range(n):
            X = Xs[r]
            z = np.array([zero] * self.d, dtype=object)
            for h in range(self.H):
                e = mp_softmax_numerators(X, W[h])
                m = e.dot(X) / mpmath.fsum(e)
                z = z + O[h].dot(m)
            hid = B.dot(z) if self.k else []
            out[r] = mpmath.fsum(a[j] * hid[j] for j in range(self.k) if hid[j] > 0)
        return out


# ----------------------------------------------------------------------------- step 1
class _DifferenceOracle:
    r"""Oracle-like access to :math:`D(X)=T(X)-T(-X)`: each value costs two real queries.

    ``queries``/``max_length``/``lengths`` count values of :math:`D` (so :func:`learn`
    reports its own design count); the real cost is read on the wrapped oracle.
    """

    def __init__(self, oracle):
        self._oracle = oracle
        self.d = oracle.d
        self.dps = oracle.dps
        self.queries = 0
        self.max_length = 0

    @property
    def exact(self):
        return self._oracle.exact

    def batch(self, Xs):
        Xs = check_sequences(Xs, self.d, batch=True)
        both = self._oracle.batch(np.concatenate([Xs, -Xs], axis=0))
        n = Xs.shape[0]
        self.queries += n
        self.max_length = max(self.max_length, Xs.shape[1])
        if self.exact:
            with mpmath.workdps(self.dps + 20):  # the difference of two dps-digit numbers, exactly
                return np.array([both[i] - both[n + i] for i in range(n)], dtype=object)
        return both[:n] - both[n:]

    def __call__(self, X):
        X = check_sequences(X, self.d, batch=False)
        return self.batch(X[None])[0]


# ----------------------------------------------------------------------------- arithmetic
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


# ----------------------------------------------------------------------------- step 2
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
            verify_queries += _verify_kinks(new_verify, th, vals, confirmed, kinks, split, g=g, N=N, tol=tol,
                                            hstep=hstep)
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


def _verify_kinks(new_verify, th, vals, confirmed, kinks, split, *, g, N, tol, hstep):
    """Confirm each candidate kink by two probes: a kink at theta* must have piece A just left of
    it and piece B just right of it (the intersection alone can fall inside A's or B's own region
    when an interval holds several kinks; the probes at theta* -+ h rule that out, unless a kink
    lies within h of theta*). Appends to ``kinks`` and ``split``; returns the queries spent."""
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
    return len(probes)


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


# ----------------------------------------------------------------------------- learner
class TransformerRecovery:
    r"""What :func:`learn_transformer` recovered, and the checks it passed.

    Attributes
    ----------
    model : OneLayerTransformer
        The equivalent Transformer (mpmath entries in exact mode): learned :math:`W_h`,
        :math:`O'_h`, :math:`B'`, :math:`a'\in\{\pm1\}^{k'}`.
    attention : Recovery
        Step 1's result (canonical heads of :math:`D`).
    heads, units : int
        :math:`H'` canonical heads and :math:`k'` units found (kinks).
    line : tuple
        ``(q0, delta)`` spanning the half circle of step 2.
    kinks : list
        Kink angles :math:`\theta` (increasing).
    pieces : list of (alpha, beta)
        Single-token function on each region: :math:`\alpha\cos\theta+\beta\sin\theta`.
    gradients : array, shape (k' + 1, H', d)
        Region gradients :math:`G_r` (blocks :math:`g_h`).
    jumps : array, shape (k', H', d)
        :math:`J_i=G_i-G_{i-1}`.
    orientation : array of int, shape (k',)
        :math:`\varepsilon_i=+1` when unit :math:`i` switches on as :math:`\theta` increases.
    signs : array of int, shape (k',)
        :math:`a'_i`: the sign of the slope change at kink :math:`i`.
    queries : dict
        Real oracle queries per step: ``attention`` (two per value of :math:`D`),
        ``kinks``, ``gradients``, ``holdout`` and ``total``.
    residuals : dict
        ``kink`` (tolerance of the kink checks), ``region_fit`` (largest refit residual of
        step 3, relative), ``shrinks`` (perturbation halvings per region),
        ``orientation`` (best and runner-up relative residual of the subset sum),
        ``value_check`` (relative :math:`\|G_0+G_{k'}-[v_h]\|`), ``rank`` (relative
        singular value :math:`d+1` of the factored matrix), ``holdout`` (relative output
        discrepancy on held-out sequences).
    verified : bool
        True when both verifications ran: step 1's (:func:`attnlearn.learn`'s check queries
        and held-out queries on :math:`D`) and the held-out sequences of the Transformer
        (``holdout > 0``).
    """

    def __init__(self, **kw):
        self.__dict__.update(kw)

    def __repr__(self):
        return (f"TransformerRecovery(heads={self.heads}, units={self.units}, d={self.model.d}, "
                f"queries={self.queries['total']}, holdout={self.residuals['holdout']:.1e})")


def learn_transformer(oracle, d, *, heads=None, max_heads=None, seed=0, robust=False, holdout=32,
                      grid=16, perturbation=0.25, max_shrinks=6, max_units=20, holdout_tol=None,
                      max_queries=MAX_QUERIES, max_length=MAX_LENGTH):
    r"""Recover a Transformer functionally equivalent to a one-layer Transformer oracle.

    Parameters
    ----------
    oracle : Oracle
        Value-query access to a :class:`OneLayerTransformer` (float64 or exact mode).
    d : int
        Token width, at least 2 (in :math:`d=1` every :math:`\nu_j` is parallel).
    heads, max_heads : int, keyword-only
        Exactly one: the number of attention heads or an upper bound (passed to
        :func:`attnlearn.learn`). The number of hidden units is not needed.
    seed : int, keyword-only
        Seed of every random choice, a non-negative integer (also passed to
        :func:`attnlearn.learn`).
    robust : bool, keyword-only
        float64: passed to :func:`attnlearn.learn` for step 1.
    holdout : int, keyword-only
        Held-out random sequences (lengths 1-6) on which the result is checked.
    grid : int, keyword-only
        Initial number of intervals on the half circle (step 2).
    perturbation : float, keyword-only
        Initial size of :math:`u` relative to :math:`q` in each region, times the sine of the
        region's half-width (step 3).
    max_shrinks : int, keyword-only
        How many times (factor 8 each) the perturbation may shrink before
        :class:`RegionFitError`.
    max_units : int, keyword-only
        Largest :math:`k'` for the :math:`2^{k'}` orientation search.
    holdout_tol : float, optional, keyword-only
        Largest accepted relative held-out discrepancy; default :math:`10^{-\mathrm{dps}/2}`
        in exact mode, :math:`10^{-5}` in float64 (step 1's float64 accuracy decides what is
        reachable; chapter 6 measures it). A positive finite number.
    max_queries, max_length : int, keyword-only
        Refuse, before any query, a request needing more queries than ``max_queries`` or a query
        longer than ``max_length`` tokens (as :func:`attnlearn.learn` does; defaults
        :data:`~attnlearn.learner.tolerances.MAX_QUERIES` and
        :data:`~attnlearn.learner.tolerances.MAX_LENGTH`). Counted: step 1's queries (two
        per value of :math:`D`: the design, robust mode's constants, :func:`attnlearn.learn`'s
        default held-out queries), step 2's initial grid of ``grid + 1`` and ``holdout``; the
        refinements of steps 2-3 depend on the answers and are not counted.

    Returns
    -------
    TransformerRecovery

    Raises
    ------
    TypeError
        An argument of the wrong type, naming it (before any query).
    ValueError
        An argument out of range, naming it, or a request above ``max_queries`` or
        ``max_length`` with its count (before any query).
    RecoveryError
        :class:`KinkError`, :class:`RegionFitError`, :class:`OrientationError`,
        :class:`attnlearn.CheckFailedError` (a check failed: the conditions of chapter 6 do not
        hold, or float64 is not accurate enough), or the errors of :func:`attnlearn.learn`.
    """
    d = check_oracle(oracle, d)
    if d < 2:
        raise ValueError("learn_transformer needs d >= 2: in d = 1 all nu_j are parallel (one kink at 0)")
    oracle = Access(oracle, d)  # every answer checked (count, type, finiteness) and counted here
    if (heads is None) == (max_heads is None):
        raise ValueError("give exactly one of heads=H (the number of heads) or max_heads=H0 (an upper bound)")
    n = check_count(heads if heads is not None else max_heads, "heads" if heads is not None else "max_heads")
    seed = check_seed(seed, generator=False)
    robust = check_flag(robust, "robust")
    holdout = check_count(holdout, "holdout", 0)
    grid = check_count(grid, "grid", 2)
    max_shrinks = check_count(max_shrinks, "max_shrinks", 0)
    max_units = check_count(max_units, "max_units", 1)
    if isinstance(perturbation, (bool, np.bool_)) or not isinstance(perturbation, numbers.Real):
        raise TypeError(f"perturbation must be a number in (0, 1), got {type(perturbation).__name__} {perturbation!r}")
    if not 0 < perturbation < 1:
        raise ValueError(f"perturbation must be a number in (0, 1), got {perturbation!r}")
    exact = oracle.exact
    if holdout_tol is None:
        holdout_tol = 10.0 ** (-oracle.dps / 2) if exact else 1e-5
    holdout_tol = check_real(holdout_tol, "holdout_tol", positive=True)
    max_queries = check_count(max_queries, "max_queries")
    max_length = check_count(max_length, "max_length")
    # step 1 asks learn's queries of D, two real queries each; step 2 starts with grid + 1
    step1, longest = learn_cost(d, n, robust=robust and not exact, holdout=Tolerances.for_mode(
        exact=exact, dps=oracle.dps).holdout)
    parts = {f"step 1 ({k})": 2 * v for k, v in step1.items()}
    parts.update({"kink grid": grid + 1, "held-out": holdout})
    check_cost(parts, longest, max_queries=max_queries, max_length=max_length, n=n)
    before = oracle.queries
    # ---- step 1: attention from D(X) = T(X) - T(-X) ------------------------------------
    Dor = _DifferenceOracle(oracle)
    kw = {"robust": robust} if not exact else {}
    att = learn(Dor, d, heads=heads, max_heads=max_heads, seed=seed, max_queries=max_queries, max_length=max_length,
                **kw)
    q_att = oracle.queries - before
    with working_precision(oracle):
        return _steps(oracle, att, q_att, seed=seed, holdout=holdout, grid=grid, perturbation=perturbation,
                      max_shrinks=max_shrinks, max_units=max_units, holdout_tol=holdout_tol)


@dataclass(frozen=True)
class _Tolerances:
    """Steps 2-5's tolerances: ``rel`` (kink checks, relative to :math:`\\max|T|` on the line), ``fit``
    (region refits), ``check`` (structural checks: orientation, rank, value check), ``min_width``
    (closest kinks, rad) and ``hstep`` (offset of the probes that confirm a kink)."""

    rel: float
    fit: float
    check: float
    min_width: object
    hstep: object

    @classmethod
    def of(cls, oracle, N):
        if oracle.exact:
            rel = 10.0 ** (-oracle.dps / 2)
            return cls(rel, rel, 10.0 ** (-oracle.dps / 3), 10.0 ** (-oracle.dps / 4), N.num(10.0 ** (-oracle.dps / 4)))
        # float64: the learned poles carry step 1's error (measured 1e-12..1e-10 relative refit
        # residuals at (d, H) = (3, 2)); a unit changing sign gave 1e-5 and more where seen. The
        # structural checks' thresholds are loose: the held-out check decides the accuracy
        return cls(1e-9, 1e-7, 1e-3, 1e-9, 1e-5)


@dataclass
class _Context:
    """What every step reads: the oracle and its arithmetic, the random stream, the tolerances,
    the learned heads of step 1 (``W``, ``v``, their number ``H`` and :math:`\\max_h\\|W_h\\|_2`)."""

    oracle: object
    N: _Num
    rng: np.random.Generator
    tol: _Tolerances
    W: np.ndarray
    v: np.ndarray

    @property
    def exact(self):
        return self.N.exact

    @property
    def d(self):
        return self.oracle.d

    @property
    def H(self):
        return self.W.shape[0]

    def ask(self, Xs):
        y = self.oracle.batch(Xs)
        return list(y) if self.exact else [float(v) for v in y]


def _steps(oracle, att, q_att, *, seed, holdout, grid, perturbation, max_shrinks, max_units, holdout_tol):
    """Steps 2-5 and the checks, in the learner's working precision."""
    N = _Num(oracle.exact)
    Wl, vl = (to_mp(att.model.W), to_mp(att.model.v)) if oracle.exact else (att.model.W, att.model.v)
    ctx = _Context(oracle, N, np.random.default_rng([seed, 6]), _Tolerances.of(oracle, N), Wl, vl)
    b0 = oracle.queries
    line, kinks, pieces, kstats, fscale = _kink_step(ctx, grid=grid, max_units=max_units)
    q_kinks = oracle.queries - b0
    b0 = oracle.queries
    Gs, shrinks, fit_res, sum_res = _region_gradients(ctx, line, kinks, pieces, perturbation=perturbation,
                                                      max_shrinks=max_shrinks, fscale=fscale)
    q_grad = oracle.queries - b0
    J, signs, eps_orient, orientation = _orientations(ctx, Gs, pieces)
    value_res = _value_check(ctx, Gs)
    model, rank_res = _equivalent_transformer(ctx, J, signs, eps_orient)
    b0 = oracle.queries
    hold = 0.0
    if holdout:
        hold, _ = heldout_discrepancy(oracle, model, _holdout_batches(ctx, holdout), rounded=False)
    q_hold = oracle.queries - b0
    residuals = {"kink": ctx.tol.rel, "region_fit": fit_res, "region_sum": sum_res, "shrinks": shrinks,
                 "orientation": orientation, "value_check": value_res, "rank": rank_res, "holdout": hold}
    queries = {"attention": q_att, "kinks": q_kinks, "gradients": q_grad, "holdout": q_hold}
    queries["total"] = sum(queries.values())
    rec = TransformerRecovery(model=model, attention=att, heads=ctx.H, units=len(kinks), line=line, kinks=kinks,
                              pieces=pieces, gradients=Gs, jumps=J, orientation=eps_orient, signs=signs,
                              queries=queries, residuals=residuals, kink_stats=kstats,
                              verified=bool(holdout) and att.verified)
    if ctx.H and value_res > ctx.tol.check:
        raise CheckFailedError(
            f"G_0 + G_k' misses the value vectors of T(X) - T(-X) by {value_res:.1e} (relative) > {ctx.tol.check:.0e}"
        )
    if hold > holdout_tol:
        raise CheckFailedError(
            f"the recovered Transformer misses the oracle on {q_hold} held-out sequences: relative discrepancy "
            f"{hold:.1e} > {holdout_tol:.0e} (the conditions of chapter 6 do not hold, e.g. parallel nu_j)"
        )
    return rec


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


def _holdout_batches(ctx, holdout):
    """Held-out random sequences of lengths 1-6 (lazily, one batch per length)."""
    lengths = ctx.rng.integers(1, 7, size=holdout)
    for L in sorted(set(lengths.tolist())):
        m = int((lengths == L).sum())
        Xs = ctx.rng.normal(size=(m, L, ctx.d))
        yield to_mp(Xs) if ctx.exact else Xs


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
        from ._arith import mp_solve

        return mp_solve(U, G)
    return np.linalg.solve(np.asarray(U, float), np.asarray(G, float))


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
