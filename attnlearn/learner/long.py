r"""``learn(..., design="long")``: long ratio queries and statistical fits, for noisy oracles.

Used in: chapter 5b (``book/05b_long_queries.ipynb``: learning through float32 noise), chapter 7
(real layers: float32 layers, score biases, robust mode's fallback) and
``benchmarks/noise_design.py`` (its acceptance rows, issue 17).

A query of :math:`a` copies of :math:`x` followed by :math:`b` copies of :math:`q` (final token
:math:`q`, :math:`a+b=L`) has

.. math:: F = V^\top q + \sum_h \gamma_h\,\sigma(c_h - z),\qquad z=\log(b/a),\quad
          c_h=-(W_h^\top u)^\top q,\quad \gamma_h=-u^\top v_h,\quad u=q-x,

with :math:`\sigma` the logistic function: every head is a step of height :math:`\gamma_h` at
:math:`z=c_h`, seen over a window of :math:`2\log(L-1)` nats (16.6 at :math:`L=4096`), where
the paper's :math:`2H` copies see :math:`\log 2H`. The stages (``/work/shared/DESIGN-noise.md``):

1. :func:`ask_V`: :math:`V=\sum_hv_h` from :math:`d` one-token queries (both ends of every step
   curve are then known: :math:`F(z\to\infty)=V^\top q`, :math:`F(z\to-\infty)=V^\top x`).
2. :func:`probe_scale`: four configurations set :math:`|u|=|q|` so that the steps' root mean
   square position is ``LongTolerances.spread`` nats.
3. Groups :math:`k=1..d`, each with a fixed :math:`u_k` (the rows of a random orthogonal matrix
   times the scale: :func:`draw_groups`) and varying :math:`q`: :math:`\gamma_h` is
   the same in every configuration of a group (it labels the heads there) and :math:`c_h` is
   linear in :math:`q`, so :math:`y_{h,k}=W_h^\top u_k` comes from a weighted least-squares fit
   over the group (:func:`regress_y`).
4. :func:`coarse_pass`, anchored: the best separated of a few random :math:`q` (each fitted
   alone: AAA start, :class:`scipy.interpolate.AAA`, poles :math:`w=-e^{c_h}` in :math:`w=b/a`,
   then weighted Levenberg–Marquardt, :func:`scipy.optimize.least_squares`) is stretched so its
   steps span the window, then :math:`2d` nudged :math:`q_0+\eta w_j` are fitted from its
   positions and labelled by the nearest of them (continuity, not clustering of
   :math:`\gamma`: at :math:`H\ge4` random :math:`q` put two steps within half a nat in most
   configurations); then one joint fit of the group with shared :math:`\gamma`
   (:func:`fit_group`, a block Levenberg–Marquardt).
5. :func:`placed_pass`: :math:`2d` more :math:`q` per group, *placed* so that the predicted
   steps sit ``LongTolerances.spacing`` nats apart (the Cramér–Rao bound of a configuration is
   smallest near 2 nats); started at the prediction, fitted jointly with the first pass;
   configurations above the noise are repaired, and a group still above it after that is
   refitted without its worst configurations (:func:`_trim`: one configuration in a wrong
   local minimum pulls the shared heights and with them every configuration of the group).
6. :func:`link_groups`: link configurations :math:`u_1+u_k` (three :math:`q` each) match the
   heads of group :math:`k` to those of group 1: every pairing's predicted curve is compared
   with the answers (:math:`\chi^2`), the best must beat the runner-up by a margin.
7. :func:`solve_heads`: :math:`W_h=U^{-1}Y_h`, :math:`v_h=-U^{-1}\Gamma_h` (rows of
   :math:`U` the :math:`u_k`, rows of :math:`Y_h` the :math:`y_{h,k}^\top`).
8. :func:`estimate_error`: the inverse Fisher matrix of every group's fit propagated through
   the regression and the solves, then :func:`~attnlearn.learner.finish.finish` (held-out queries).

**Score biases** (``bias=True``, PyTorch's ``bias=True``: score :math:`x_i^\top(W_hx_N+c_h)`,
output offset :math:`\beta`). A step then sits at :math:`-y_h^\top q-\kappa_h` with
:math:`\kappa_h=u^\top c_h`, affine in :math:`q`, and the ends are :math:`V^\top q+\beta`,
:math:`V^\top x+\beta`. So :func:`ask_V` asks one more one-token query, the zero token
(:math:`F(0)=\beta`); each anchored group asks its *origin* :math:`q=0` (:func:`_origin`: the steps at
:math:`-\kappa_h`, fitted under the anchor's heights) so that the stretch predicts the affine
positions; :func:`regress_y` fits :math:`(y_h,\kappa_h)` with an intercept; the placed and link
positions carry :math:`\kappa`; and :func:`solve_heads` gives :math:`[W_h\;c_h]=U^{-1}[Y_h\;K_h]`
(:math:`\kappa` is linear in :math:`u`, as :math:`y` is). The model is an
:class:`~attnlearn.layer.AttentionLayer` with ``c`` and ``b``.

The noise model is :math:`\sigma_i = \sqrt{\varepsilon_a^2 + (\varepsilon_r F_i)^2} +
4\epsilon_{64}|F_i|` plus a float64 oracle's summation rounding (:func:`noise_sd`;
``output_error`` absolute, ``relative_error`` relative); every fit is
weighted by it and every covariance is scaled by :math:`\max(1,\chi^2/\mathrm{dof})`.

References
----------
.. [1] S. Kim, I. Kim, J. Guo, "Provably Learning Multi-Head Attention with Queries",
       arXiv:2608.03294, 2026.
.. [2] Y. Nakatsukasa, O. Sète, L. N. Trefethen, "The AAA algorithm for rational
       approximation", SIAM J. Sci. Comput. 40 (2018).
"""

import itertools
import warnings
from dataclasses import dataclass

import numpy as np
from scipy.interpolate import AAA
from scipy.optimize import least_squares, linear_sum_assignment
from scipy.special import expit

from ..canonical import canonical
from ..errors import CheckFailedError, IllConditionedError, UnmatchedHeadsError
from ..layer import AttentionLayer
from ..model import MultiHeadAttention
from .finish import finish
from .results import Diagnostics
from .tolerances import LongTolerances
from .cost import long_cost
from .nodes import ratio_grid
from .samples import noise_sd

__all__ = ["learn_long", "long_cost", "ratio_grid", "noise_sd", "ask_V", "probe_scale", "fit_config",
           "fit_group", "regress_y", "coarse_pass", "random_pass", "placed_pass", "link_groups", "solve_heads",
           "estimate_error", "check_V", "draw_groups", "GroupFit"]


#: Standard deviation of the weak prior on every step position (nats): the window's width at
#: L = 4096. It only holds a step beyond the window (whose position the data do not fix).
PRIOR = 16.0


def _ask_ratio(ask, x, q, b, L, chunk):
    """Answers to the ratio queries (x^(L-b), q^b) for every b; batched by ``chunk`` queries."""
    d = len(x)
    out = []
    pos = np.arange(L)
    for s in range(0, len(b), chunk):
        bb = b[s:s + chunk]
        is_q = pos[None, :] >= (L - bb)[:, None]  # the last b tokens are q
        Xs = np.where(is_q[:, :, None], q[None, None, :], x[None, None, :]).reshape(len(bb), L, d)
        out.append(ask(Xs, what="a ratio query"))
    return np.concatenate(out)


@dataclass
class _Ctx:
    """What every stage shares: the access, the ratios, the noise model, V and the counts."""

    ask: object
    d: int
    H: int
    L: int
    b: np.ndarray
    z: np.ndarray
    absolute: float
    relative: float
    tol: object
    rng: object
    V: np.ndarray = None
    V_sd: np.ndarray = None
    bias: bool = False
    beta: float = 0.0
    beta_sd: float = 0.0

    def chunk(self):
        return max(1, int(self.tol.batch_floats // (self.L * self.d)))

    def config(self, u, q):
        """Ask one configuration (x = q - u): answers, their noise and the known ends."""
        F = _ask_ratio(self.ask, q - u, q, self.b, self.L, self.chunk())
        return F, noise_sd(F, absolute=self.absolute, relative=self.relative, length=self.L,
                           rounding=self.tol.rounding)

    def ends(self, u, q):
        """:math:`V^\\top q` and :math:`V^\\top x` (plus :math:`\\beta` with ``bias``) with their
        standard deviations."""
        x = q - u
        if self.bias:
            return self.end(q) + self.end(x)
        return (self.V @ q, np.sqrt((self.V_sd**2) @ q**2) + 1e-300,
                self.V @ x, np.sqrt((self.V_sd**2) @ x**2) + 1e-300)

    def end(self, x):
        r"""With ``bias``: :math:`V^\top x+\beta=\sum_ix_iF(e_i)+(1-\sum_ix_i)F(0)` from the one-token
        answers (:func:`ask_V`), and its standard deviation."""
        return (self.V @ x + self.beta,
                np.sqrt((self.V_sd**2) @ x**2 + ((1 - x.sum()) * self.beta_sd) ** 2) + 1e-300)


def ask_V(ctx):
    r""":math:`V=\sum_hv_h` from the :math:`d` one-token queries :math:`(e_i)` (a one-token query
    answers :math:`V^\top x`), with the standard deviation of each entry. With ``ctx.bias`` a
    one-token query answers :math:`V^\top x+\beta`: one more, the zero token, gives
    :math:`\beta=F(0)`, stored in ``ctx.beta`` (``ctx.V_sd`` is then the noise of the answers
    :math:`F(e_i)`, :meth:`_Ctx.end` combines them)."""
    F = ctx.ask(np.eye(ctx.d)[:, None, :], what="a one-token query")
    sd = noise_sd(F, absolute=ctx.absolute, relative=ctx.relative)
    if ctx.bias:
        F0 = ctx.ask(np.zeros((1, 1, ctx.d)), what="a one-token query")
        ctx.beta, ctx.beta_sd = float(F0[0]), float(noise_sd(F0, absolute=ctx.absolute, relative=ctx.relative)[0])
        F = F - ctx.beta
    return F, sd


# ---------------------------------------------------------------- fitting one configuration
def _curve(z, C, c, g):
    return C + expit(c[None, :] - z[:, None]) @ g


def _aaa_start(z, G, H):
    """Starting steps from AAA in :math:`w=e^z`: :math:`\\sum_h\\gamma_hp_h/(p_h+w)` has poles
    :math:`-p_h=-e^{c_h}`; poles off the negative axis are moved onto it."""
    w = np.exp(z)
    try:
        with warnings.catch_warnings():  # AAA stops at max_terms by design: no convergence to report
            warnings.filterwarnings("ignore", ".*AAA failed to converge", RuntimeWarning)
            # spurious pole-zero pairs of noisy data: the H poles kept are chosen below
            warnings.filterwarnings("ignore", ".*Froissart doublets detected", RuntimeWarning)
            poles = AAA(w, G, max_terms=H + 1, rtol=0.0).poles()
    except (ValueError, np.linalg.LinAlgError, ZeroDivisionError):  # degenerate data
        poles = np.array([])
    # the H poles nearest the negative real axis (relative angle), then c = log|pole|
    poles = poles[np.isfinite(poles) & (np.abs(poles) > 0)]
    score = np.abs(poles.imag) / np.abs(poles) + (poles.real > 0)
    p = np.abs(poles[np.argsort(score)[:H]])
    c = np.sort(np.log(np.clip(p, np.exp(z[0] - 3), np.exp(z[-1] + 3))))
    if len(c) < H:  # spread the missing ones over the window
        c = np.sort(np.concatenate([c, np.linspace(z[0] / 2, z[-1] / 2, H - len(c))]))
    return c


def _linear_g(z, G, sd, c):
    """Heights (and the constant) by weighted linear least squares, positions fixed."""
    A = np.column_stack([np.ones_like(z), expit(c[None, :] - z[:, None])]) / sd[:, None]
    sol = np.linalg.lstsq(A, G / sd, rcond=None)[0]
    return sol[0], sol[1:]


def fit_config(z, F, sd, H, *, Vq, Vq_sd, Vx, Vx_sd, c0=None, chi2_ok=None, rng=None, tries=4, prior=PRIOR):
    r"""Fit one configuration, :math:`F\approx C+\sum_h\gamma_h\sigma(c_h-z)`, weighted by ``sd``,
    with the two ends as pseudo-observations (:math:`C=V^\top q`, :math:`C+\sum\gamma=V^\top x`)
    and a weak prior :math:`c_h\sim\mathcal N(0,\mathrm{prior}^2)` (a step beyond the window is
    then held instead of running off; in the window the data outweigh it by many decades).

    Starts from AAA (or ``c0``), then Levenberg–Marquardt (:func:`scipy.optimize.least_squares`,
    ``method="lm"``). When the :math:`\chi^2` exceeds ``chi2_ok`` (a local minimum), more starts
    are tried: the :math:`H`-subsets of AAA's :math:`H+1` poles, and ``tries`` random sorted
    positions in the middle of the window (from ``rng``); the best fit is kept. Returns
    ``(C, c, g, chi2)`` with heads sorted by ``c``.
    """
    def res(p):
        C, c, g = p[0], p[1:H + 1], p[H + 1:]
        return np.concatenate([(_curve(z, C, c, g) - F) / sd, [(C - Vq) / Vq_sd, (C + g.sum() - Vx) / Vx_sd],
                               c / prior])

    def jac(p):
        C, c, g = p[0], p[1:H + 1], p[H + 1:]
        s = expit(c[None, :] - z[:, None])
        J = np.column_stack([np.ones_like(z), s * (1 - s) * g[None, :], s]) / sd[:, None]
        ends = np.zeros((2 + H, 2 * H + 1))
        ends[0, 0] = 1 / Vq_sd
        ends[1, 0], ends[1, H + 1:] = 1 / Vx_sd, 1 / Vx_sd
        ends[2 + np.arange(H), 1 + np.arange(H)] = 1 / prior
        return np.vstack([J, ends])

    def run(c):
        C, g = _linear_g(z, F, sd, c)
        sol = least_squares(res, np.concatenate([[C], c, g]), jac=jac, method="lm", xtol=1e-15, ftol=1e-15,
                            gtol=1e-15, max_nfev=200 * (2 * H + 1))
        return sol.x, float(2 * sol.cost)

    starts = [_aaa_start(z, F - Vq, H) if c0 is None else np.asarray(c0, dtype=float)]
    best = run(starts[0])
    if chi2_ok is not None and best[1] > chi2_ok:
        more = [np.sort(c) for c in itertools.combinations(_aaa_start(z, F - Vq, H + 1), H)]
        half = z[-1] * 0.75
        more += [np.sort(rng.uniform(-half, half, H)) for _ in range(tries)] if rng is not None else []
        for c in more:
            trial = run(c)
            if np.isfinite(trial[1]) and trial[1] < best[1]:
                best = trial
            if best[1] <= chi2_ok:
                break
    x = best[0]
    C, c, g = x[0], x[1:H + 1], x[H + 1:]
    order = np.argsort(c)
    return C, c[order], g[order], best[1]


# ---------------------------------------------------------------- fitting a group jointly
@dataclass
class GroupFit:
    r"""A group's joint fit: shared heights ``g`` (H,), per configuration the constant ``C`` (m,)
    and positions ``c`` (m, H); their standard deviations from the inverse Fisher matrix (scaled
    by :math:`\max(1,\chi^2/\mathrm{dof})`), every configuration's :math:`\chi^2` and the
    group's reduced :math:`\chi^2`."""

    g: np.ndarray
    C: np.ndarray
    c: np.ndarray
    g_sd: np.ndarray
    c_sd: np.ndarray
    chi2: np.ndarray
    reduced: float


def _group_blocks(z, F, sd, ends, g, C, c, prior=None):
    """Residuals and Jacobian blocks of every configuration: ``r`` (m, R+2+H), ``Jg`` (m, R+2+H, H),
    ``Jt`` (m, R+2+H, H+1) (columns C, c_1..c_H); rows: the ratios, the two ends, the prior."""
    prior = PRIOR if prior is None else prior
    m, H = c.shape
    Vq, Vq_sd, Vx, Vx_sd = ends
    s = expit(c[:, None, :] - z[None, :, None])  # (m, R, H)
    r_data = (C[:, None] + s @ g - F) / sd
    r = np.concatenate([r_data, ((C - Vq) / Vq_sd)[:, None], ((C + g.sum() - Vx) / Vx_sd)[:, None], c / prior],
                       axis=1)
    R = len(z)
    Jg = np.zeros((m, R + 2 + H, H))
    Jg[:, :R] = s / sd[:, :, None]
    Jg[:, R + 1] = (1 / Vx_sd)[:, None]
    Jt = np.zeros((m, R + 2 + H, H + 1))
    Jt[:, :R, 0] = 1 / sd
    Jt[:, :R, 1:] = s * (1 - s) * g[None, None, :] / sd[:, :, None]
    Jt[:, R, 0] = 1 / Vq_sd
    Jt[:, R + 1, 0] = 1 / Vx_sd
    Jt[:, R + 2 + np.arange(H), 1 + np.arange(H)] = 1 / prior
    return r, Jg, Jt


def _schur_step(r, Jg, Jt, lam):
    """One damped Gauss–Newton step of the block system (shared g, per-configuration θ_j),
    solved through the Schur complement on g; returns (dg, dθ, S, Dinv, B)."""
    A = np.einsum("mrh,mrk->hk", Jg, Jg)
    B = np.einsum("mrh,mrk->mhk", Jg, Jt)  # (m, H, H+1)
    D = np.einsum("mrh,mrk->mhk", Jt, Jt)  # (m, H+1, H+1)
    ag = np.einsum("mrh,mr->h", Jg, r)
    at = np.einsum("mrh,mr->mh", Jt, r)
    Dd = D + lam * np.einsum("mii->mi", D)[:, :, None] * np.eye(D.shape[1])[None]
    Ad = A + lam * np.diag(np.diag(A))
    Dinv = np.linalg.inv(Dd)
    BDinv = np.einsum("mhk,mkl->mhl", B, Dinv)
    S = Ad - np.einsum("mhl,mkl->hk", BDinv, B)
    rhs = ag - np.einsum("mhl,ml->h", BDinv, at)
    dg = -np.linalg.solve(S, rhs)
    dt = -np.einsum("mkl,ml->mk", Dinv, at + np.einsum("mhk,h->mk", B, dg))
    return dg, dt, S, Dinv, B


def fit_group(z, F, sd, ends, g0, C0, c0, *, iterations=100):
    r"""Joint weighted fit of a group's configurations with shared heights :math:`\gamma` (a
    Levenberg–Marquardt iteration on the block system, solved through its Schur complement).

    Parameters
    ----------
    z : array (R,)
    F, sd : arrays (m, R)
        Answers and their standard deviations.
    ends : tuple of arrays (m,)
        :math:`V^\top q`, its sd, :math:`V^\top x`, its sd.
    g0, C0, c0 : arrays (H,), (m,), (m, H)
        Start.

    Returns
    -------
    GroupFit
    """
    g, C, c = np.array(g0, float), np.array(C0, float), np.array(c0, float)
    m, H = c.shape
    r, Jg, Jt = _group_blocks(z, F, sd, ends, g, C, c)
    cost, lam = float(np.sum(r**2)), 1e-3
    for _ in range(iterations):
        dg, dt, *_ = _schur_step(r, Jg, Jt, lam)
        g1, C1, c1 = g + dg, C + dt[:, 0], c + dt[:, 1:]
        r1, Jg1, Jt1 = _group_blocks(z, F, sd, ends, g1, C1, c1)
        cost1 = float(np.sum(r1**2))
        if np.isfinite(cost1) and cost1 <= cost:
            small = cost - cost1 <= 1e-10 * cost + 1e-12
            g, C, c, r, Jg, Jt, cost = g1, C1, c1, r1, Jg1, Jt1, cost1
            lam = max(lam / 5, 1e-12)
            if small:
                break
        else:
            lam *= 10
            if lam > 1e10:
                break
    chi2 = np.sum(r[:, :len(z) + 2] ** 2, axis=1)
    dof = max(1, m * (len(z) + 2) - (H + m * (H + 1)))
    reduced = float(np.sum(chi2)) / dof
    _, _, S, Dinv, B = _schur_step(r, Jg, Jt, 0.0)
    Sinv = np.linalg.inv(S)
    BD = np.einsum("mhk,mkl->mhl", B, Dinv)
    cov_t = Dinv + np.einsum("mhk,hj,mjl->mkl", BD, Sinv, BD)
    scale = max(1.0, reduced)
    g_var, c_var = np.diag(Sinv) * scale, np.einsum("mii->mi", cov_t)[:, 1:] * scale
    if not (np.all(np.isfinite(g_var)) and np.all(np.isfinite(c_var)) and g_var.min() > 0 and c_var.min() > 0):
        raise np.linalg.LinAlgError("the information matrix is singular to working precision")
    g_sd, c_sd = np.sqrt(g_var), np.sqrt(c_var)
    return GroupFit(g=g, C=C, c=c, g_sd=g_sd, c_sd=c_sd, chi2=chi2, reduced=reduced)


def _label_to_reference(g_list, ok):
    """Sorted-median reference of the heights over the well-fitted configurations, and every
    configuration's assignment of its heads to it (Hungarian on |γ - γ_ref|)."""
    G = np.array(g_list)
    use = G[ok] if ok.sum() else G
    ref = np.median(np.sort(use, axis=1), axis=0)
    perms = []
    for gj in G:
        rows, cols = linear_sum_assignment(np.abs(gj[:, None] - ref[None, :]))
        p = np.empty(len(ref), int)
        p[cols] = rows  # head cols of the reference is the config's head rows
        perms.append(p)
    return ref, perms


# ---------------------------------------------------------------- the stages
def probe_scale(ctx, *, rng):
    r"""Four configurations at :math:`|u|=|q|=d^{1/4}` (so :math:`c_h` has unit spread for
    :math:`W\sim\mathcal N(0,1/d)`); returns the scale :math:`s` of :math:`u` and :math:`q` that
    brings the root mean square of the :math:`c_h` seen to ``tol.spread`` nats (:math:`c` is
    bilinear in :math:`u,q`), the correction clipped to ``tol.scale_clip``. With score biases
    the positions also hold :math:`-\kappa_h=-u^\top c_h`, linear in :math:`u` alone, so that
    part of the measured spread moves as the square root of the correction: large biases leave
    the bilinear part below ``tol.spread`` (the anchor's stretch, measured from the group's
    origin, then spreads the steps)."""
    d, H, tol = ctx.d, ctx.H, ctx.tol
    s0 = d**0.25
    seen = []
    for _ in range(tol.probe_configs):
        u, q = _unit(rng, d) * s0, _unit(rng, d) * s0
        F, sd = ctx.config(u, q)
        Vq, Vq_sd, Vx, Vx_sd = ctx.ends(u, q)
        _, c, g, _ = fit_config(ctx.z, F, sd, H, Vq=Vq, Vq_sd=Vq_sd, Vx=Vx, Vx_sd=Vx_sd)
        seen.extend(c[np.abs(g) > 1e-3 * np.max(np.abs(g))])
    rms = np.sqrt(np.mean(np.square(seen))) if seen else 0.0
    factor = np.clip(tol.spread / max(rms, 1e-12), *tol.scale_clip)
    return s0 * np.sqrt(factor)


def _unit(rng, d):
    v = rng.normal(size=d)
    return v / np.linalg.norm(v)


def coarse_pass(ctx, u, scale, *, rng):
    r"""The first pass of one group, anchored: labels by continuity, not by clustering heights.

    1. :func:`_anchor`: ``tol.base_tries`` random :math:`q` of norm ``scale``, each fitted
       alone; the one whose steps are best separated relative to their extent (smallest gap
       over largest :math:`|c_h|`) is the anchor :math:`q_0`, stretched (:math:`c` is linear in
       :math:`q`; with biases affine, measured from the group's origin) so that its farthest step
       sits ``tol.stretch`` nats out (from the origin's), and asked again.
    2. :math:`2d` nudged configurations :math:`q_0+\eta w_j` (:math:`w_j` two random orthonormal
       bases): :math:`\eta` moves the steps by about ``tol.nudge`` of the anchor's smallest gap,
       so every configuration's fit starts at the anchor's positions and its heads are labelled
       by the nearest anchor step (Hungarian on :math:`|c-c_0|`).
    3. The joint fit of the group (:func:`fit_group`) with shared :math:`\gamma`, configurations
       above the noise repaired (:func:`_repair`).

    With random :math:`q` and :math:`H\ge4` most configurations have two steps within half a nat
    (four positions of root mean square 2 nats), and heights :math:`\gamma_h` of two heads are
    often alike: labels by clustering :math:`\gamma` fail there (``DESIGN-noise.md``). A nudged
    configuration's steps stay within a fraction of a gap of the anchor's.

    Returns ``(Q, F, sd, ends, fit)``."""
    d, H, tol = ctx.d, ctx.H, ctx.tol
    chi2_ok = tol.chi2_factor * _dof(ctx, H)
    q0, F0, sd0, e0, single0, reach = _anchor(ctx, u, scale, rng=rng)
    c_anchor = single0[1]
    gap = np.min(np.diff(c_anchor)) if H > 1 else np.inf
    rms = max(reach, 1e-12)
    move = min(tol.nudge * gap, tol.nudge_max)
    eta = move * np.linalg.norm(q0) / rms
    m = tol.per_group(d)
    Wd = np.vstack([np.linalg.qr(rng.normal(size=(d, d)))[0].T for _ in range(-(-m // d))])[:m]
    Q, Fs, sds, ends, singles, perms = [q0], [F0], [sd0], [e0], [single0], [np.arange(H)]
    for w in Wd:
        q = q0 + eta * w
        F, sd = ctx.config(u, q)
        e = ctx.ends(u, q)
        single = fit_config(ctx.z, F, sd, H, Vq=e[0], Vq_sd=e[1], Vx=e[2], Vx_sd=e[3], c0=c_anchor,
                            chi2_ok=chi2_ok, rng=rng)
        rows, cols = linear_sum_assignment(np.abs(single[1][:, None] - c_anchor[None, :]))
        p = np.empty(H, int)
        p[cols] = rows
        Q.append(q)
        Fs.append(F)
        sds.append(sd)
        ends.append(e)
        singles.append(single)
        perms.append(p)
    Q, F, sd = np.array(Q), np.array(Fs), np.array(sds)
    ends = tuple(np.array(x) for x in zip(*ends))
    ok = np.array([sg[3] <= chi2_ok for sg in singles])
    c0 = np.array([sg[1][p] for sg, p in zip(singles, perms)])
    C0 = np.array([sg[0] for sg in singles])
    fit = _repair(ctx, F, sd, ends, _fit_kept(ctx, F, sd, ends, ok, single0[2], C0, c0))
    return Q, F, sd, ends, fit


def _anchor(ctx, u, scale, *, rng):
    r""":func:`coarse_pass`'s anchor: the best separated of ``tol.base_tries`` random
    configurations, stretched to ``tol.stretch`` nats and asked again; returns ``(q0, F, sd,
    ends, (C, c, g, chi2), reach)`` of the stretched configuration, its heads sorted by
    position, ``reach`` the root mean square of the part of its positions that is linear in
    :math:`q` (all of them without biases).

    With score biases :math:`b_h` (here so named: :math:`c_h` is a step's position) a step sits
    at :math:`-y_h^\top q-\kappa_h`, :math:`\kappa_h=u^\top b_h`: affine in :math:`q`, not
    linear. The group's *origin* :math:`q=0` (:func:`_origin`) shows :math:`-\kappa_h`, and the
    stretch by :math:`\alpha` moves the candidate's steps from :math:`c_h` to
    :math:`\alpha(c_h+\kappa_h)-\kappa_h`.

    Raises
    ------
    IllConditionedError
        No candidate fitted within the noise, the origin not fitted (:func:`_origin`), or the
        stretched configuration's steps are not where the candidate's, stretched, predict them
        (positions not affine in :math:`q`, or a head mislabelled).
    """
    d, H, tol = ctx.d, ctx.H, ctx.tol
    chi2_ok = tol.chi2_factor * _dof(ctx, H)
    best, chi2s = None, []
    for _ in range(tol.base_tries):
        q = _unit(rng, d) * scale
        F, sd = ctx.config(u, q)
        e = ctx.ends(u, q)
        C, c, g, chi2 = fit_config(ctx.z, F, sd, H, Vq=e[0], Vq_sd=e[1], Vx=e[2], Vx_sd=e[3], chi2_ok=chi2_ok,
                                   rng=rng)
        chi2s.append(chi2)
        if not chi2 <= chi2_ok:
            continue
        sep = (np.min(np.diff(c)) if H > 1 else 1.0) / max(np.max(np.abs(c)), 1e-12)
        if best is None or sep > best[0]:
            best = (sep, q, c, g, (F, sd, e, C))
    if best is None:
        raise IllConditionedError(
            f"no configuration of a group was fitted within {tol.chi2_factor:g} x its noise (best chi2 per "
            f"degree of freedom {min(chi2s) / _dof(ctx, H):.3g}): the stated noise is too small, "
            "or the steps are beyond the window")
    _, q, c, g, seen = best
    origin = _origin(ctx, u, g, (*seen, c)) if ctx.bias else np.zeros(H)  # the steps at q = 0: -kappa_h
    alpha = float(np.clip(tol.stretch / max(np.max(np.abs(c - origin)), 1e-12), *tol.stretch_clip))
    q0 = alpha * q
    F, sd = ctx.config(u, q0)
    e = ctx.ends(u, q0)
    pred = np.sort(alpha * (c - origin) + origin) if ctx.bias else alpha * c
    single = fit_config(ctx.z, F, sd, H, Vq=e[0], Vq_sd=e[1], Vx=e[2], Vx_sd=e[3], c0=pred, chi2_ok=chi2_ok,
                        rng=rng)
    gap = np.min(np.diff(pred)) if H > 1 else np.inf
    if not (single[3] <= chi2_ok and np.max(np.abs(single[1] - pred)) <= 0.5 * min(gap, 2.0)):
        raise IllConditionedError(
            "a group's anchor configuration, stretched, does not show its steps where the stretch puts them "
            f"(chi2 per degree of freedom {single[3] / _dof(ctx, H):.3g}): its heads cannot be told apart at "
            "this output error")
    reach = np.sqrt(np.mean((alpha * (c - origin)) ** 2)) if ctx.bias else np.sqrt(np.mean(single[1] ** 2))
    return q0, F, sd, e, single, reach


def _origin(ctx, u, g, candidate):
    r"""With score biases: the positions :math:`-\kappa_h` of the group's steps at :math:`q=0`
    (the configuration :math:`x=-u`, :math:`q=0`), fitted with the heights ``g`` of the anchor's
    candidate fixed (so labelled as its heads), from the starts of :func:`_origin_starts` until
    one fits within the noise. When none does, the best is refitted jointly with the candidate
    (``candidate``: its ``(F, sd, ends, C, c)``; :func:`_joint_positions`, the heights shared
    and free): the candidate's heights carry their own error, and a float64 oracle's noise is so
    small that a height off in its sixth digit puts the origin's :math:`\chi^2` a hundred times
    above its noise (drawn biases, steps of opposite heights close together).

    Raises
    ------
    IllConditionedError
        Neither fits within the noise."""
    tol = ctx.tol
    q = np.zeros(ctx.d)
    F, sd = ctx.config(u, q)
    ends = tuple(np.array([x]) for x in ctx.ends(u, q))
    limit = tol.chi2_factor * (len(ctx.z) + 2)
    best = (np.inf, None, None)
    for start in _origin_starts(ctx, F, sd, ends):
        c, C, cost = _positions_only(ctx.z, F, sd, g, start, ends, 0)
        if cost < best[0]:
            best = (cost, c, C)
        if cost <= limit:
            return c
    cost, c, C = best
    Fc, sdc, ec, Cc, cc = candidate
    c, chi2 = _joint_positions(ctx.z, (Fc, F), (sdc, sd), (ec, tuple(e[0] for e in ends)), g, (Cc, C), (cc, c))
    if max(chi2) <= limit:
        return c[1]
    raise IllConditionedError(
        f"a group's origin (q = 0) is not fitted within {tol.chi2_factor:g} x its noise by the anchor's heights (chi2 "
        f"{cost:.3g}; jointly with the anchor's candidate {max(chi2):.3g}): its score biases cannot be placed")


def _joint_positions(z, Fs, sds, ends, g, Cs, cs):
    r"""Two configurations fitted together with shared, free heights (weighted LM from ``g``,
    ``Cs``, ``cs``; the ends as pseudo-observations, as in :func:`fit_config`, without its prior on
    the positions). Returns both configurations' positions and :math:`\chi^2`."""
    H = len(g)

    def res(p):
        out = []
        for j in range(2):
            C, c = p[H + j * (H + 1)], p[H + j * (H + 1) + 1:H + (j + 1) * (H + 1)]
            Vq, Vq_sd, Vx, Vx_sd = ends[j]
            out.append(np.concatenate([(_curve(z, C, c, p[:H]) - Fs[j]) / sds[j],
                                       [(C - Vq) / Vq_sd, (C + p[:H].sum() - Vx) / Vx_sd]]))
        return np.concatenate(out)

    p0 = np.concatenate([g, [Cs[0]], cs[0], [Cs[1]], cs[1]])
    sol = least_squares(res, p0, method="lm", x_scale="jac", max_nfev=200 * len(p0))
    r = sol.fun.reshape(2, -1)
    c = [sol.x[H + j * (H + 1) + 1:H + (j + 1) * (H + 1)] for j in range(2)]
    return c, [float(np.sum(rj ** 2)) for rj in r]


def _origin_starts(ctx, F, sd, ends):
    """:func:`_origin`'s starts, lazily, cheapest first: coinciding positions (zero biases), every
    order (at most ``tol.max_permutations``) of a one-nat grid and of the positions of a free fit
    of the same answers (:func:`fit_config`: drawn biases put the steps several nats apart, some
    beyond the window), then ``tol.repair_random`` random positions over one and a half windows."""
    H, tol = ctx.H, ctx.tol
    yield np.zeros(H)
    grid = np.arange(H) - (H - 1) / 2
    yield from (np.array(p) for p in itertools.islice(itertools.permutations(grid), tol.max_permutations))
    free = fit_config(ctx.z, F, sd, H, Vq=ends[0][0], Vq_sd=ends[1][0], Vx=ends[2][0], Vx_sd=ends[3][0],
                      chi2_ok=tol.chi2_factor * _dof(ctx, H), rng=ctx.rng)[1]
    yield from (np.array(p) for p in itertools.islice(itertools.permutations(free), tol.max_permutations))
    half = 1.5 * ctx.z[-1]
    yield from (np.sort(ctx.rng.uniform(-half, half, H)) for _ in range(tol.repair_random))


def random_pass(ctx, u, scale, *, rng):
    r"""The first pass of one group with at most ``tol.anchored_heads - 1`` heads (the
    measured choice there: 20/20 at :math:`H=2`, :math:`d=16`, where the anchored pass's
    nudged configurations, bunched around one :math:`q_0`, gave 14/20): :math:`2d` random
    :math:`q` of norm ``scale``; every
    configuration fitted alone (AAA start, weighted LM), the heads labelled against the
    sorted-median reference of :math:`\gamma`, then the joint fit (:func:`fit_group`).

    Returns ``(Q, F, sd, ends, fit)``."""
    d, H = ctx.d, ctx.H
    m = ctx.tol.per_group(d)
    Q = np.array([_unit(rng, d) * scale for _ in range(m)])
    Fs, sds, ends, singles = [], [], [], []
    for q in Q:
        F, sd = ctx.config(u, q)
        e = ctx.ends(u, q)
        singles.append(fit_config(ctx.z, F, sd, H, Vq=e[0], Vq_sd=e[1], Vx=e[2], Vx_sd=e[3],
                                  chi2_ok=ctx.tol.chi2_factor * _dof(ctx, H), rng=rng))
        Fs.append(F)
        sds.append(sd)
        ends.append(e)
    F, sd = np.array(Fs), np.array(sds)
    ends = tuple(np.array(x) for x in zip(*ends))
    ok = np.array([s[3] <= ctx.tol.chi2_factor * _dof(ctx, H) for s in singles])
    if not ok.any():
        raise IllConditionedError(
            f"no configuration of a group was fitted within {ctx.tol.chi2_factor:g} x its noise (best chi2 per "
            f"degree of freedom {min(s[3] for s in singles) / _dof(ctx, H):.3g}): the stated noise is too small, "
            "or the steps are beyond the window")
    ref, perms = _label_to_reference([s[2] for s in singles], ok)
    c0 = np.array([s[1][p] for s, p in zip(singles, perms)])
    C0 = np.array([s[0] for s in singles])
    # the heights from the configurations fitted within the noise, then the others placed under them
    fit = _repair(ctx, F, sd, ends, _fit_kept(ctx, F, sd, ends, ok, ref, C0, c0))
    return Q, F, sd, ends, fit


def _dof(ctx, H):
    """Degrees of freedom of one configuration's fit (ratios + 2 ends - 2H - 1 parameters)."""
    return max(len(ctx.z) + 2 - (2 * H + 1), 1)


def _repair(ctx, F, sd, ends, fit):
    """Configurations whose χ² is far above the noise (a local minimum, a wrong labelling) are
    refitted alone with the group's heights fixed, from every order of their own positions (H!
    starts, at most ``tol.max_permutations``) and random ones, then the group is refitted jointly.
    With the heights known, a configuration's only unknowns are its positions and constant."""
    H, R = ctx.H, len(ctx.z)
    limit = ctx.tol.chi2_factor * (R + 2)
    bad = np.flatnonzero(~(fit.chi2 <= limit))
    c, C = fit.c.copy(), fit.C.copy()
    half = ctx.z[-1] * 0.75
    for j in bad:
        best = (np.inf, None)
        starts = list(itertools.islice(itertools.permutations(np.sort(c[j])), ctx.tol.max_permutations))
        starts += [np.sort(ctx.rng.uniform(-half, half, H)) for _ in range(ctx.tol.repair_random)]
        for perm in starts:
            cj, Cj, cost = _positions_only(ctx.z, F[j], sd[j], fit.g, np.array(perm), ends, j)
            if cost < best[0]:
                best = (cost, (cj, Cj))
            if cost <= limit:
                break
        c[j], C[j] = best[1]
    return _fit_group_checked(ctx, F, sd, ends, fit.g, C, c)


def _trim(ctx, F, sd, ends, fit):
    r"""Heights freed from the configurations that pull them: when a group's joint fit stays
    far above the noise (reduced :math:`\chi^2` over ``tol.trim_above``) after :func:`_repair`,
    the configurations whose :math:`\chi^2` exceeds ``tol.trim_factor`` times the group's
    median are set aside, the heights are fitted from the others, the set-aside ones are
    repaired under those heights (:func:`_repair`: every order of their positions) and the
    group is fitted jointly again; at most ``tol.trim_rounds`` rounds, each kept only if it
    lowers the group's :math:`\chi^2`.

    Notes
    -----
    A configuration left in a wrong local minimum (two close steps of unequal heights passed
    through each other) pulls the shared heights :math:`\gamma` off; then *every*
    configuration of the group sits above the noise, and :func:`_repair` refits them all under
    those heights, which are off. Measured on the float64 oracle (:math:`H=4`, :math:`d=32`,
    :math:`\varepsilon=10^{-16}`, ``benchmarks/noise_design.py`` seed 0): after one repair,
    three such configurations of 129 left one group at reduced :math:`\chi^2` :math:`10^{14}`,
    its :math:`\gamma` 3e-5 off and the returned model 5e-5 off while the other 31 groups were
    within 1e-11; the culprits had the three largest :math:`\chi^2`, 100 to 10^4 times the
    median. With this stage: that group at reduced :math:`\chi^2` 0.16, the model 6e-11 off.

    Used in: chapter 5b (through ``learn(..., design="long")``)."""
    tol = ctx.tol
    for _ in range(tol.trim_rounds):
        if fit.reduced <= tol.trim_above:
            break
        suspect = ~(fit.chi2 <= tol.trim_factor * np.median(fit.chi2))
        keep = ~suspect
        if not suspect.any() or keep.sum() < tol.trim_keep * len(keep):
            break
        trial = _repair(ctx, F, sd, ends, _fit_kept(ctx, F, sd, ends, keep, fit.g, fit.C, fit.c))
        if not np.sum(trial.chi2) < np.sum(fit.chi2):
            break
        fit = trial
    return fit


def _fit_kept(ctx, F, sd, ends, keep, g, C, c):
    r"""The group's joint fit on the configurations ``keep`` only (heights started at ``g``),
    returned for the whole group: the others keep their positions ``C``, ``c`` and a
    :math:`\chi^2` of infinity, so that :func:`_repair` places them under the fitted heights.
    Used by both first passes and by :func:`_trim`."""
    sub = _fit_group_checked(ctx, F[keep], sd[keep], tuple(e[keep] for e in ends), g, C[keep], c[keep])
    fit = GroupFit(g=sub.g, C=C.copy(), c=c.copy(), g_sd=sub.g_sd, c_sd=np.zeros_like(c),
                   chi2=np.where(keep, 0.0, np.inf), reduced=sub.reduced)
    fit.C[keep], fit.c[keep] = sub.C, sub.c
    return fit


def _fit_group_checked(ctx, F, sd, ends, g, C, c):
    """:func:`fit_group`, a singular information matrix turned into :class:`IllConditionedError`."""
    try:
        return fit_group(ctx.z, F, sd, ends, g, C, c)
    except np.linalg.LinAlgError:
        raise IllConditionedError(
            "a group's fit has a singular information matrix (a vanishing step height or two coinciding "
            "steps): the heads cannot be told apart in this group") from None


def _positions_only(z, F, sd, g, c0, ends, j):
    """One configuration's positions and constant with the heights fixed (weighted LM)."""
    Vq, Vq_sd, Vx, Vx_sd = (e[j] for e in ends)
    H = len(g)

    def res(p):
        return np.concatenate([(_curve(z, p[0], p[1:], g) - F) / sd, [(p[0] - Vq) / Vq_sd,
                                                                    (p[0] + g.sum() - Vx) / Vx_sd], p[1:] / PRIOR])

    def jac(p):
        s = expit(p[1:][None, :] - z[:, None])
        J = np.zeros((len(z) + 2 + H, H + 1))
        J[:len(z), 0] = 1 / sd
        J[:len(z), 1:] = s * (1 - s) * g[None, :] / sd[:, None]
        J[len(z), 0], J[len(z) + 1, 0] = 1 / Vq_sd, 1 / Vx_sd
        J[len(z) + 2 + np.arange(H), 1 + np.arange(H)] = 1 / PRIOR
        return J

    sol = least_squares(res, np.concatenate([[Vq], c0]), jac=jac, method="lm", max_nfev=100 * (H + 1))
    return sol.x[1:], sol.x[0], float(np.sum(sol.fun[:len(z) + 2] ** 2))


def regress_y(Q, fit, *, tol, intercept=False):
    r""":math:`y_h=W_h^\top u` from :math:`c_{h,j}=-y_h^\top q_j` over the group's configurations,
    weighted by the positions' standard deviations; rows beyond ``tol.outlier_sigma`` standard
    deviations are dropped (at most ``tol.outlier_rounds`` times). Returns ``(Y, covs, used)``:
    ``Y`` (H, d), the covariance of every row (H, d, d) and the rows used (H, m) bool. With
    ``intercept`` (score biases: :math:`c_{h,j}=-y_h^\top q_j-\kappa_h`,
    :math:`\kappa_h=u^\top c_h`) every row of ``Y`` is :math:`(y_h,\kappa_h)`, (H, d + 1), and its
    covariance (H, d + 1, d + 1).

    Raises
    ------
    IllConditionedError
        Fewer than :math:`d+1` configurations (:math:`d+2` with the intercept) left for some head, fewer than
        ``tol.regression_keep`` of them kept, or a reduced :math:`\chi^2` above
        ``tol.regression_chi2`` (mislabelled heads: the positions are not linear in :math:`q`).
    """
    m, H = fit.c.shape
    if intercept:
        Q = np.column_stack([Q, np.ones(m)])
    d = Q.shape[1]
    Y, covs, used = np.zeros((H, d)), np.zeros((H, d, d)), np.zeros((H, m), bool)
    for h in range(H):
        keep = np.ones(m, bool)
        for _ in range(tol.outlier_rounds):
            A = -Q[keep] / fit.c_sd[keep, h, None]
            bvec = fit.c[keep, h] / fit.c_sd[keep, h]
            y, *_ = np.linalg.lstsq(A, bvec, rcond=None)
            resid = np.abs(-Q @ y - fit.c[:, h]) / fit.c_sd[:, h]
            new = resid <= tol.outlier_sigma * max(1.0, np.sqrt(np.median(resid[keep] ** 2)))
            if np.array_equal(new, keep):
                break
            keep = new
            if keep.sum() < d + 1:
                raise IllConditionedError(
                    f"only {keep.sum()} of {m} configurations of a group agree on head {h + 1}'s steps "
                    f"(need {d + 1}): the fits are unreliable at this output error")
        A = -Q[keep] / fit.c_sd[keep, h, None]
        cov = np.linalg.inv(A.T @ A)
        red = float(np.sum((A @ y - fit.c[keep, h] / fit.c_sd[keep, h]) ** 2)) / max(1, keep.sum() - d)
        if red > tol.regression_chi2 or keep.sum() < tol.regression_keep * m:
            raise IllConditionedError(
                f"head {h + 1}'s step positions in a group are not linear in q (reduced chi2 {red:.3g} over "
                f"{keep.sum()} of {m} configurations): some configurations' heads are mislabelled")
        Y[h], covs[h], used[h] = y, cov * max(1.0, red), keep
    return Y, covs, used


def placed_pass(ctx, u, Y, scale, *, rng):
    r"""The second pass of one group: :math:`2d` values of :math:`q=-Y^+t+Nr` whose predicted
    steps :math:`c=-Yq=t` sit on a grid ``tol.spacing`` nats apart (random order and offset),
    :math:`N` a basis of the null space of :math:`Y` and :math:`r` random (so the :math:`q`
    span :math:`\mathbb R^d`). When :math:`|Y^+t|` exceeds ``tol.placed_cap`` times the
    pass's scale (nearly collinear :math:`y_h`), the grid is shrunk until it fits. With
    :math:`H\ge d` there is no null space and the :math:`q` are random. With score biases
    (``Y`` of :func:`regress_y` with its intercept column :math:`\kappa`) the steps sit at
    :math:`-Yq-\kappa` and :math:`q=-Y^+(t+\kappa)+Nr` (the grid halved at most
    ``tol.placed_halvings`` times: :math:`-Y^+\kappa` alone may exceed the cap).

    Returns ``(Q, F, sd, ends, c_pred)``."""
    d, H, tol = ctx.d, ctx.H, ctx.tol
    m = tol.per_group(d)
    kappa = Y[:, d] if Y.shape[1] > d else np.zeros(H)
    Y = Y[:, :d]
    pinv = np.linalg.pinv(Y)
    _, sv, Vt = np.linalg.svd(Y)
    N = Vt[H:].T if H < d else np.zeros((d, 0))
    Q, Fs, sds, ends, preds = [], [], [], [], []
    for _ in range(m):
        if H < d:
            t = tol.spacing * (rng.permutation(H) - (H - 1) / 2) + rng.uniform(-1, 1)
            if ctx.bias:
                qt = -pinv @ (t + kappa)
                for _ in range(tol.placed_halvings):
                    if np.linalg.norm(qt) <= tol.placed_cap * scale:
                        break
                    t = t / 2
                    qt = -pinv @ (t + kappa)
                qt = qt * min(1.0, tol.placed_cap * scale / max(np.linalg.norm(qt), 1e-300))
            else:
                qt = -pinv @ t
                while np.linalg.norm(qt) > tol.placed_cap * scale:
                    t, qt = t / 2, qt / 2
            r = rng.normal(size=N.shape[1])
            room = max(scale**2 - qt @ qt, 0.25 * scale**2)
            q = qt + N @ (r / np.linalg.norm(r) * np.sqrt(room)) if N.shape[1] else qt
        else:
            q = _unit(rng, d) * scale
        F, sd = ctx.config(u, q)
        Q.append(q)
        Fs.append(F)
        sds.append(sd)
        ends.append(ctx.ends(u, q))
        preds.append(-Y @ q - kappa)
    return np.array(Q), np.array(Fs), np.array(sds), tuple(np.array(x) for x in zip(*ends)), np.array(preds)


def link_groups(ctx, U, groups, scale, *, rng):
    r"""Match every group's heads to group 1's: three configurations with :math:`u=u_1+u_k`; for
    every pairing :math:`\pi` the predicted curve :math:`V^\top q+\sum_h(\gamma_{h,1}+
    \gamma_{\pi(h),k})\sigma(-(y_{h,1}+y_{\pi(h),k})^\top q-z)` is compared with the answers
    (weighted :math:`\chi^2`); with score biases the positions add
    :math:`-(\kappa_{h,1}+\kappa_{\pi(h),k})` (:math:`\kappa` is linear in :math:`u`) and the
    constant :math:`\beta`. Returns the permutations (d, H) and the margins (runner-up χ² over
    the best's, inf with one head).

    Raises
    ------
    UnmatchedHeadsError
        The best pairing does not beat the runner-up by ``tol.link_margin``.
    """
    d, H, tol = ctx.d, ctx.H, ctx.tol
    if H == 1:  # one head: nothing to match, no link asked
        return np.zeros((d, 1), int), np.full(d, np.inf)
    perms, margins = [np.arange(H)], [np.inf]
    all_perms = np.array(list(itertools.permutations(range(H))))
    g1, Y1 = groups[0]["g"], groups[0]["Y"]
    for k in range(1, d):
        u = U[0] + U[k]
        gk, Yk = groups[k]["g"], groups[k]["Y"]
        chi = np.zeros(len(all_perms))
        for _ in range(tol.link_configs):
            q = _unit(rng, d) * scale
            F, sd = ctx.config(u, q)
            Vq = ctx.ends(u, q)[0]
            heights = g1[None, :] + gk[all_perms]  # (P, H)
            qb = np.append(q, 1.0) if ctx.bias else q  # with biases a row of Y is (y, kappa)
            pos = -(Y1 @ qb)[None, :] - (Yk @ qb)[all_perms]  # (P, H)
            pred = Vq + np.einsum("prh,ph->pr", expit(pos[:, None, :] - ctx.z[None, :, None]), heights)
            chi += np.sum(((pred - F[None, :]) / sd[None, :]) ** 2, axis=1)
        order = np.argsort(chi)
        margin = chi[order[1]] / max(chi[order[0]], 1e-300) if H > 1 else np.inf
        if margin < tol.link_margin:
            raise UnmatchedHeadsError(
                f"link(1,{k + 1}): the best pairing of the heads of groups 1 and {k + 1} (chi2 {chi[order[0]]:.3g}) "
                f"is within a factor {tol.link_margin:g} of the runner-up ({chi[order[1]]:.3g}): heads too alike")
        perms.append(all_perms[order[0]])
        margins.append(margin)
    return np.array(perms), np.array(margins)


def solve_heads(U, groups, perms):
    r""":math:`W_h=U^{-1}Y_h` and :math:`v_h=-U^{-1}\Gamma_h`, the rows of :math:`Y_h` and
    :math:`\Gamma_h` being group :math:`k`'s :math:`y` and :math:`\gamma` of the head matched to
    head :math:`h` of group 1. With score biases the rows of :math:`Y_h` are
    :math:`(y_{h,k},\kappa_{h,k})` and :math:`U^{-1}Y_h=[W_h\;c_h]` (:math:`\kappa_{h,k}=u_k^\top c_h`).
    Returns ``(W, v, Uinv)``, ``W`` (H, d, d) or with biases (H, d, d + 1)."""
    d = U.shape[0]
    H = perms.shape[1]
    Uinv = np.linalg.inv(U)
    Yh = np.array([[groups[k]["Y"][perms[k][h]] for k in range(d)] for h in range(H)])  # (H, d, d[+1])
    Gh = np.array([[groups[k]["g"][perms[k][h]] for k in range(d)] for h in range(H)])  # (H, d)
    W = np.einsum("ij,hjk->hik", Uinv, Yh)  # with biases (H, d, d + 1): [W_h  c_h]
    v = -Gh @ Uinv.T
    return W, v, Uinv


def estimate_error(W, v, Uinv, groups, perms, *, tol, beta=None, beta_sd=0.0):
    r"""The relative parameter error to expect: the covariances of :math:`y_{h,k}` (regression)
    and :math:`\gamma_{h,k}` (the group fits' inverse Fisher matrices) propagated through
    :math:`W_h=U^{-1}Y_h`, :math:`v_h=-U^{-1}\Gamma_h` (groups independent):
    :math:`E\|\Delta W_h\|_F^2=\sum_k\|U^{-1}e_k\|^2\operatorname{tr}\operatorname{cov}y_{h,k}`,
    :math:`E\|\Delta v_h\|^2=\sum_k\|U^{-1}e_k\|^2\operatorname{var}\gamma_{h,k}`; the largest
    over heads of the two relative root-mean-square errors, times ``tol.estimate_factor``.

    With score biases (``W`` of :func:`solve_heads`, (H, d, d + 1)) also
    :math:`E\|\Delta c_h\|^2=\sum_k\|U^{-1}e_k\|^2\operatorname{var}\kappa_{h,k}` relative to
    :math:`\max(\|c_h\|,\|W_h\|)` and the offset's standard deviation ``beta_sd`` relative to
    :math:`\max(|\beta|,\max_h\|v_h\|)`, the measure of :func:`~attnlearn.learner.paper.bias.bias_error`."""
    d, H = len(groups), perms.shape[1]
    col = np.sum(Uinv**2, axis=0)  # ||U^-1 e_k||^2
    worst = 0.0
    for h in range(H):
        covs = [groups[k]["covY"][perms[k][h]] for k in range(d)]
        trW = sum(col[k] * np.trace(covs[k][:d, :d]) for k in range(d))
        trv = sum(col[k] * groups[k]["g_sd"][perms[k][h]] ** 2 for k in range(d))
        nW = np.linalg.norm(W[h, :, :d])
        worst = max(worst, np.sqrt(trW) / nW, np.sqrt(trv) / max(np.linalg.norm(v[h]), 1e-300))
        if W.shape[2] > d:  # the score bias c_h
            trc = sum(col[k] * covs[k][d, d] for k in range(d))
            worst = max(worst, np.sqrt(trc) / max(np.linalg.norm(W[h, :, d]), nW))
    if beta is not None:
        worst = max(worst, beta_sd / max(abs(beta), np.max(np.linalg.norm(v, axis=1)), 1e-300))
    return tol.estimate_factor * worst


def check_V(v, V, estimate):
    r"""The heads must add up to the :math:`V=\sum_hv_h` of the one-token queries (asked apart):
    :math:`\|\sum_h\hat v_h-V\|\le` 10 times the estimate times :math:`\max_h\|\hat v_h\|`
    (the held-out check's factor).

    Raises
    ------
    CheckFailedError
    """
    gap = np.linalg.norm(v.sum(axis=0) - V) / max(np.max(np.linalg.norm(v, axis=1)), 1e-300)
    if not gap <= 10 * estimate:
        raise CheckFailedError(f"the recovered v_h add up to V only within {gap:.2e} (relative), more than 10 x the "
                               f"error estimate {estimate:.1e}: some heads are mislabelled")


# ---------------------------------------------------------------- the pipeline
def _group(ctx, u, scale, rng):
    """Both passes of one group, the regression after each; the group's heights, y and covariances."""
    try:
        return _passes(ctx, u, scale, rng)
    except np.linalg.LinAlgError as exc:  # a fit or a solve without information
        raise IllConditionedError(f"a group's fits are degenerate ({exc}): two heads cannot be told apart "
                                  "there at this output error") from None


def _passes(ctx, u, scale, rng):
    """:func:`_group`'s stages."""
    tol = ctx.tol
    first = coarse_pass if ctx.H >= tol.anchored_heads else random_pass
    Q1, F1, sd1, e1, fit1 = first(ctx, u, scale, rng=rng)
    Y1, _, _ = regress_y(Q1, fit1, tol=tol, intercept=ctx.bias)
    Q2, F2, sd2, e2, pred = placed_pass(ctx, u, Y1, scale, rng=rng)
    Q = np.vstack([Q1, Q2])
    F, sd = np.vstack([F1, F2]), np.vstack([sd1, sd2])
    ends = tuple(np.concatenate([a, b]) for a, b in zip(e1, e2))
    C0 = np.concatenate([fit1.C, e2[0]])
    c0 = np.vstack([fit1.c, pred])
    fit = _fit_group_checked(ctx, F, sd, ends, fit1.g, C0, c0)
    fit = _trim(ctx, F, sd, ends, _repair(ctx, F, sd, ends, fit))
    Y, covY, used = regress_y(Q, fit, tol=tol, intercept=ctx.bias)
    return {"g": fit.g, "g_sd": fit.g_sd, "Y": Y, "covY": covY, "reduced": fit.reduced,
            "used": int(used.sum()), "configs": len(Q)}


def _orthonormal(rng, d):
    """A random orthogonal matrix (Haar: the Q of a Gaussian matrix, column signs fixed by R)."""
    Q, R = np.linalg.qr(rng.normal(size=(d, d)))
    return Q * np.where(np.diag(R) < 0, -1.0, 1.0)


def draw_groups(ctx, scale, *, rng):
    r"""The :math:`d` groups, their :math:`u_k` the rows of ``scale`` times a random orthogonal
    matrix; a group whose fits are degenerate (a head whose :math:`\gamma_h=-u_k^\top v_h`
    vanishes, two coinciding heads) is drawn again with a new :math:`u_k`, a random direction
    orthogonal to the groups before it (for the last group, a random direction), at most
    ``tol.group_redraws`` times (its queries are reported as ``queries["redraws"]``). Returns ``(U, groups, redrawn, redraw_queries)``.

    Raises
    ------
    IllConditionedError
        A group still degenerate after its redraws.

    Notes
    -----
    :func:`solve_heads` multiplies every group's errors by :math:`U^{-1}`, so the expected
    squared error of :math:`W_h` is :math:`\sum_k\|U^{-1}e_k\|^2\operatorname{tr}
    \operatorname{cov}y_{h,k}` (:func:`estimate_error`). With rows of norm :math:`s`,
    :math:`\sum_k\|U^{-1}e_k\|^2=\sum_i\sigma_i(U)^{-2}\ge d/s^2`, equality exactly when
    :math:`U` is :math:`s` times an orthogonal matrix. Independent random rows are far from it:
    the smallest singular value of a square matrix of independent random rows has a density
    positive at 0, so :math:`\|U^{-1}\|_F` has infinite mean, and the factor
    :math:`\|U^{-1}\|_Fs/\sqrt d` by which it exceeds orthogonal rows is heavy-tailed
    (chapter 5b, 2000 draws: at :math:`d=16` a median of 7.1, a 90th percentile of 34 and a
    99th of 300; at :math:`d=32` 11, 50 and 460). Measured on chapter 7's float32 layers
    (``benchmarks/torch_layers.py --dtype float32 --modes "long, L=64"``), orthogonal rows
    against independent ones, the code otherwise the same: one head 20/20 to 1e-3, median
    1.1e-5 (against 17/20, 8.8e-5); two heads 19/20, median 4.1e-5 (against 17/20, 2.9e-4;
    those runs are not archived).

    A known gap: the last group, when it must be drawn again, has no orthogonal direction
    left and takes a random one, whose factor is heavy-tailed again (it is
    :math:`\sqrt{(d-1+1/a^2)/d}`, :math:`a` the new direction's component orthogonal to the
    earlier rows).
    A direction tilted at a fixed angle into the span of the earlier rows would bound it;
    not done, since it would change the committed benchmark runs that redrew a last group.
    """
    U, groups, redrawn, spent = [], [], [], 0
    O = _orthonormal(rng, ctx.d)
    for k in range(ctx.d):
        for attempt in range(ctx.tol.group_redraws + 1):
            before = ctx.ask.queries
            if attempt and k < ctx.d - 1:  # a new direction orthogonal to the groups before
                O[k:] = _orthonormal(rng, ctx.d - k) @ O[k:]
            elif attempt:  # the last group: no other orthogonal direction is left
                O[k] = _unit(rng, ctx.d)
            u = O[k] * scale
            try:
                groups.append(_group(ctx, u, scale, rng))
                U.append(u)
                break
            except IllConditionedError as exc:
                spent += ctx.ask.queries - before
                redrawn.append(f"group({k + 1})")
                if attempt == ctx.tol.group_redraws:
                    raise IllConditionedError(f"group {k + 1}, after {attempt} redraws: {exc}") from None
    return np.array(U), groups, redrawn, spent


def learn_long(ask, opt, tol):
    """The stages of ``learn(..., design="long")`` in order (module docstring); returns the
    :class:`~.results.Recovery` checked by :func:`~attnlearn.learner.finish.finish`."""
    lt = LongTolerances()
    rng = np.random.default_rng(opt.seed)
    d, H, L = opt.d, opt.n, opt.max_length
    b, z = ratio_grid(L, lt.ratios(H))
    absolute = 0.0 if opt.output_error is None else float(opt.output_error)
    ctx = _Ctx(ask=ask, d=d, H=H, L=L, b=b, z=z, absolute=absolute, relative=float(opt.relative_error or 0.0),
               tol=lt, rng=rng, bias=opt.bias)
    start = ask.queries
    ctx.V, ctx.V_sd = ask_V(ctx)
    scale = probe_scale(ctx, rng=rng)
    U, groups, redrawn, redraw_queries = draw_groups(ctx, scale, rng=rng)
    perms, margins = link_groups(ctx, U, groups, scale, rng=rng)
    W, v, Uinv = solve_heads(U, groups, perms)
    estimate = estimate_error(W, v, Uinv, groups, perms, tol=lt, beta=ctx.beta if ctx.bias else None,
                              beta_sd=ctx.beta_sd)
    check_V(v, ctx.V, estimate)
    model = (AttentionLayer(W[:, :, :d], v, c=W[:, :, d], b=np.asarray(ctx.beta)) if ctx.bias
             else canonical(MultiHeadAttention(W, v)))
    queries = {"design": ask.queries - start - redraw_queries, "constants": 0, "redraws": redraw_queries,
               "holdout": 0}
    Fscale = max(np.max(np.abs(ctx.V)) * scale + abs(ctx.beta), 1e-300)  # beta = 0 without biases
    eps_out = absolute + ctx.relative * Fscale + 4 * np.finfo(float).eps * Fscale
    diag = Diagnostics(labels=[f"group({k + 1})" for k in range(d)], pairs=[(int(L - bb), int(bb)) for bb in b],
                       interp_residual=np.array([g["reduced"] for g in groups]),
                       condition=np.array([np.linalg.cond(U)] * d), scale={"factor": scale, "probe_max_abs_ell": None},
                       V=ctx.V, redrawn=redrawn, redrawn_blocks=[], link_margin=margins[1:] if d > 1 else None)
    return finish(ask, model, queries, diag, max_length=L, eps_out=eps_out, estimate=estimate,
                  holdout=opt.holdout, rng=rng, f=scale**2, tol=tol, holdout_length=lt.holdout_length,
                  verified=opt.holdout > 0)
