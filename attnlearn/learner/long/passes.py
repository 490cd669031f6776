r"""The long design's passes over a group: the probe of the scale, the coarse (anchored) pass, the
random and placed passes, with their repairs (:func:`_repair`, :func:`_trim`).

Used in: chapter 5b (long queries), chapter 7 and chapter 9 (``rank=``: reduced groups, ``dim``).
"""

import itertools
from dataclasses import dataclass

import numpy as np
from scipy.optimize import linear_sum_assignment

from ...errors import IllConditionedError
from .fit import (RANDOM_STARTS, GroupFit, _aaa_start, _joint_positions, _label_to_reference, _positions_only, config_dof,
                  fit_config, fit_group, fit_stretches, resolution)

__all__ = ["probe_scale", "coarse_pass", "random_pass", "placed_pass"]


# ---------------------------------------------------------------- the stages
def probe_scale(ctx, *, rng):
    r"""Four configurations at :math:`|u|=|q|=d^{1/4}` (so :math:`c_h` has unit spread for
    :math:`W\sim\mathcal N(0,1/d)`); returns ``(s, reprobes)``: the scale :math:`s` of :math:`u`
    and :math:`q` that brings the root mean square of the :math:`c_h` seen to ``tol.spread`` nats
    (:math:`c` is bilinear in :math:`u,q`), the correction clipped to ``tol.scale_clip``, and the
    queries of the probes asked again. With score biases the positions also hold
    :math:`-\kappa_h=-u^\top c_h`, linear in :math:`u` alone, so that part of the measured spread
    moves as the square root of the correction: large biases leave the bilinear part below
    ``tol.spread`` (the anchor's stretch, measured from the group's origin, then spreads the steps).

    **Small layers.** When the correction exceeds ``tol.reprobe_above`` (256: sixteen times the
    clip, far beyond what PyTorch's default initialisation needs) the steps the probe saw lie
    within a few hundredths of a nat of each other, too close to measure their spread, as in a
    layer initialised :math:`\mathcal N(0,0.02^2)`: the probe is asked again at the clipped scale
    (:math:`|u||q|` times 16), at most ``tol.reprobe_rounds`` times, its queries reported in
    ``queries["scale"]`` (as the paper design's re-probes, not counted by ``max_queries``)."""
    d, tol = ctx.d, ctx.tol
    s, start, asked = d**0.25, ctx.ask.queries, 0
    for rounds in range(tol.reprobe_rounds + 1):
        factor = tol.spread / max(_probe_rms(ctx, s, rng=rng), 1e-12)
        if factor <= tol.reprobe_above or rounds == tol.reprobe_rounds:
            break
        asked = ctx.ask.queries - start  # every probe before the last is a re-probe's extra cost
        s *= np.sqrt(tol.scale_clip[1])
    return s * np.sqrt(np.clip(factor, *tol.scale_clip)), asked


def _probe_rms(ctx, s, *, rng):
    """The root mean square of the step positions seen by ``tol.probe_configs`` configurations
    with :math:`|u|=|q|=s` (0 when none shows a step)."""
    seen = []
    for _ in range(ctx.tol.probe_configs):
        u, q = _unit(rng, ctx.d) * s, _unit(rng, ctx.d) * s
        F, sd = ctx.config(u, q)
        _, c, g, _ = fit_config(ctx.z, F, sd, ctx.H, ends=ctx.ends(u, q))
        seen.extend(c[np.abs(g) > 1e-3 * np.max(np.abs(g))])
    return np.sqrt(np.mean(np.square(seen))) if seen else 0.0


def _unit(rng, d):
    v = rng.normal(size=d)
    return v / np.linalg.norm(v)


def _orthonormal(rng, d):
    """A random orthogonal matrix (Haar: the Q of a Gaussian matrix, column signs fixed by R, so
    that it does not depend on the sign convention of the LAPACK in use)."""
    Q, R = np.linalg.qr(rng.normal(size=(d, d)))
    return Q * np.where(np.diag(R) < 0, -1.0, 1.0)


def coarse_pass(ctx, u, scale, *, rng, dim=None):
    r"""The first pass of one group, anchored: labels by continuity, not by clustering heights.

    1. :func:`_anchor`: ``tol.base_tries`` random :math:`q` of norm ``scale``, each fitted
       alone and stretched (:math:`c` is linear in :math:`q`; with biases affine, measured from
       the group's origin) so that its farthest step sits ``tol.stretch`` nats out, and asked
       again: of those whose fit resolves their steps, the one with the widest closest gap is
       the anchor :math:`q_0` (the others, in that order, wait behind it); when none does,
       each is asked again at ``tol.restretch`` times its stretch and fitted with it.
    2. :math:`2d` nudged configurations :math:`q_0+\eta w_j` (:math:`w_j` two random orthonormal
       bases): :math:`\eta` moves the steps by about ``tol.nudge`` of the anchor's smallest gap;
       every configuration's fit starts at the anchor's positions moved under its heights, so
       each step keeps its head's height and label (chapter 5b: with the heights known, the
       closest two steps of eight are told apart by thousands of standard deviations, alone by
       a few); a configuration whose fit from there stays above the noise, or ends
       with a head's height more than ``tol.label_heights`` of their root mean square from the
       anchor's (two heads traded places on the way), is fitted
       from the other starts of :func:`~.fit.fit_config`, its heads labelled by the nearest
       anchor step (Hungarian on :math:`|c-c_0|`). When not one of the first
       ``tol.anchor_check`` is fitted within the noise from the anchor's start (a wrong
       anchor), the next anchor that resolves its steps is nudged instead (:func:`_nudged`),
       and with none left the group is drawn again.
    3. The joint fit of the group (:func:`fit_group`) with shared :math:`\gamma`, configurations
       above the noise repaired (:func:`_repair`).

    With random :math:`q` and :math:`H\ge4` most configurations have two steps within half a nat
    (four positions of root mean square 2 nats), and heights :math:`\gamma_h` of two heads are
    often alike: labels by clustering :math:`\gamma` fail there (chapter 5b). A nudged
    configuration's steps stay within a fraction of a gap of the anchor's.

    ``dim`` (default :math:`d`) is the dimension the group's regression solves for: a group of
    heads whose row spaces are known (:mod:`~.rank`, ``dim`` :math:`p`) asks ``tol.per_group(p)``
    nudged configurations.

    Returns ``(Q, F, sd, ends, fit)``."""
    d, H, tol = ctx.d, ctx.H, ctx.tol
    anchors = _anchor(ctx, u, scale, rng=rng)
    m = tol.per_group(d if dim is None else dim)
    Wd = np.vstack([_orthonormal(rng, d).T for _ in range(-(-m // d))])[:m]
    for anchor in anchors:
        before = ctx.ask.queries
        nudged = _nudged(ctx, u, anchor, Wd, rng=rng)
        if nudged is not None:
            break
        ctx.retried += ctx.ask.queries - before  # a wrong anchor's nudges: asked again, as a redraw is
    else:
        raise IllConditionedError(
            f"none of a group's anchors holds: not one of the first {tol.anchor_check} nudged configurations of each was "
            "fitted within the noise from its positions under its heights (a wrong local minimum resolved as an anchor)")
    Q, F, sd, ends, singles, perms = nudged
    chi2_ok = tol.chi2_factor * _dof(ctx, H)
    ok = np.array([sg[3] <= chi2_ok for sg in singles])
    c0 = np.array([sg[1][p] for sg, p in zip(singles, perms)])
    C0 = np.array([sg[0] for sg in singles])
    fit = _repair(ctx, F, sd, ends, _fit_kept(ctx, F, sd, ends, ok, anchor.fits[0][2], C0, c0))
    return Q, F, sd, ends, fit


def _nudged(ctx, u, anchor, Wd, *, rng):
    r""":func:`coarse_pass`'s nudged configurations :math:`q_0+\eta w` (``w`` the rows of ``Wd``)
    around ``anchor``, each asked and fitted from the anchor's positions under its heights
    (labelled), or from the other starts and labelled by the nearest anchor step. Returns the
    group's configurations so far, the anchor's first, as ``(Q, F, sd, ends, fits, perms)``
    (arrays, ``ends`` a tuple of arrays, ``fits`` every configuration's ``(C, c, g, chi2)`` and
    ``perms`` its heads in the anchor's order), or None when not one of the first
    ``tol.anchor_check`` is fitted within the noise from the anchor's positions under its
    heights: an anchor in a wrong local minimum that resolved its steps (measured at
    :math:`H=8`, :math:`d=16`, relative noise 6e-8: from such an anchor 0 of 32 nudged
    configurations were, the group's fit then 9e4 times its noise). Heights that end apart
    from the anchor's are no such sign: a correct anchor fitted as a pair left each of its
    first four nudged fits within the noise and 0.15 to 0.56 of their root mean square from its
    heights (labelled then by the nearest step, the group fitted within its noise)."""
    H, tol = ctx.H, ctx.tol
    chi2_ok = tol.chi2_factor * _dof(ctx, H)
    q0, (_, c_anchor, g_anchor, _) = anchor.Q[0], anchor.fits[0]
    gap = np.min(np.diff(c_anchor)) if H > 1 else np.inf
    move = min(tol.nudge * gap, tol.nudge_max)
    eta = move * np.linalg.norm(q0) / max(anchor.reach, 1e-12)
    g_scale = np.sqrt(np.mean(g_anchor ** 2))
    Q, Fs, sds, singles = list(anchor.Q), list(anchor.F), list(anchor.sd), list(anchor.fits)
    ends, perms = [tuple(e[k] for e in anchor.ends) for k in range(len(Q))], [np.arange(H)] * len(Q)
    reached = 0  # labelled fits within the noise: a wrong anchor's reach none
    for i, w in enumerate(Wd):
        if i == tol.anchor_check and not reached:
            return None
        q = q0 + eta * w
        F, sd = ctx.config(u, q)
        e = ctx.ends(u, q)
        # from the anchor's positions moved under its heights: every step keeps its head's label;
        # when that start does not reach the noise, the other starts, labelled by the nearest anchor step
        single, p = fit_config(ctx.z, F, sd, H, ends=e, c0=c_anchor, g0=g_anchor, chi2_ok=chi2_ok, labelled=True), None
        reached += single[3] <= chi2_ok
        if not (single[3] <= chi2_ok and np.max(np.abs(single[2] - g_anchor)) <= tol.label_heights * g_scale):
            single = fit_config(ctx.z, F, sd, H, ends=e, c0=c_anchor, g0=g_anchor, chi2_ok=chi2_ok, rng=rng)
            rows, cols = linear_sum_assignment(np.abs(single[1][:, None] - c_anchor[None, :]))
            p = np.empty(H, int)
            p[cols] = rows
        Q.append(q)
        Fs.append(F)
        sds.append(sd)
        ends.append(e)
        singles.append(single)
        perms.append(np.arange(H) if p is None else p)
    return np.array(Q), np.array(Fs), np.array(sds), tuple(np.array(x) for x in zip(*ends)), singles, perms


@dataclass
class Anchor:
    r"""A group's anchor (:func:`_anchor`): its configurations ``Q`` (K, d), the stretched
    candidate first and, when it was stretched again, that configuration second (K = 1 or 2);
    their answers ``F``, ``sd`` (K, R) and ``ends`` (arrays (K,)); every configuration's fit
    ``(C, c, g, chi2)``, its heads sorted by position (the same order in both: the positions
    of one are an increasing affine map of the other's); ``reach``, the root mean square of
    the part of the first's positions that is linear in :math:`q`; ``apart``, how far apart its
    closest two steps lie in standard deviations (:func:`~.fit.resolution`)."""

    Q: np.ndarray
    F: np.ndarray
    sd: np.ndarray
    ends: tuple
    fits: list
    reach: float
    apart: float


def _anchor(ctx, u, scale, *, rng):
    r""":func:`coarse_pass`'s anchor: ``tol.base_tries`` random configurations, those fitted
    within the noise each stretched to ``tol.stretch`` nats and asked again (:func:`_stretch`),
    the best separated first (smallest gap over largest :math:`|c_h|`, both over the steps of
    appreciable height); returns the anchors (:class:`Anchor`) that resolve their steps, the
    widest closest gap first (or the one pair that resolves).

    A stretched fit is judged on its own: its closest two steps at least
    ``tol.anchor_resolve`` standard deviations apart (:func:`~.fit.resolution`), and its
    :math:`\chi^2` within ``tol.trim_above`` times its degrees of freedom (a float32 layer's
    correct anchors reach 50 times, a wrong local minimum millions). Of those that resolve, the
    one whose closest two steps lie farthest apart in nats is the anchor (the nudges of
    :func:`coarse_pass` scale with that gap: a gap of 0.015 nat left a group's 257 nudged
    configurations within 0.002 nat of each other and its joint fit singular). When none
    resolves alone, each in turn is stretched again and fitted in a pair (:func:`_restretch`):
    the first pair that resolves is the only anchor. The queries of the stretched configurations
    after the first, and of every pair, are reported with the redraws (``ctx.retried``). The
    candidate's own positions are no test: its closest steps are the least known (float32
    layers, :math:`H=4`: candidates' positions up to 1.1 nats off where the stretched fit was
    within 0.01).

    Raises
    ------
    IllConditionedError
        No candidate fitted within the noise, the origin not fitted (:func:`_origin`), or no
        stretched candidate resolves its steps, alone or restretched.
    """
    d, H, tol = ctx.d, ctx.H, ctx.tol
    chi2_ok = tol.chi2_factor * _dof(ctx, H)
    candidates, chi2s = [], []
    for _ in range(tol.base_tries):
        q = _unit(rng, d) * scale
        F, sd = ctx.config(u, q)
        e = ctx.ends(u, q)
        C, c, g, chi2 = fit_config(ctx.z, F, sd, H, ends=e, chi2_ok=chi2_ok,
                                   rng=rng)
        chi2s.append(chi2)
        if chi2 <= chi2_ok:
            seen = _seen(g, tol)
            sep = (np.min(np.diff(c[seen])) if seen.sum() > 1 else 1.0) / max(np.max(np.abs(c[seen])), 1e-12)
            candidates.append((sep, q, c, g, (F, sd, e, C)))
    if not candidates:
        raise IllConditionedError(
            f"no configuration of a group was fitted within {tol.chi2_factor:g} x its noise (best chi2 per "
            f"degree of freedom {min(chi2s) / _dof(ctx, H):.3g}): the stated noise is too small, "
            "or the steps are beyond the window")
    candidates.sort(key=lambda t: -t[0])
    origin_answers, retried, stretched, origin_error = [], 0, [], None
    for _, q, c, g, fitted in candidates:
        before = ctx.ask.queries
        try:
            anchor, origin = _stretch(ctx, u, q, c, g, fitted, origin_answers, rng=rng)
        except IllConditionedError as exc:  # the origin not fitted under this candidate's heights
            origin_error = exc
            continue
        finally:  # the first stretched configuration asked (and the origin) are the design's
            retried += (ctx.ask.queries - before) if stretched else 0
        stretched.append((anchor, origin))
    if not stretched:
        raise origin_error
    resolved = [a for a, _ in stretched if a.apart >= tol.anchor_resolve]
    if resolved:  # of those that resolve their steps, the widest closest gap first: the nudges scale with it
        ctx.retried += retried
        return sorted(resolved, key=lambda a: -np.min(np.diff(a.fits[0][1])) if H > 1 else 0.0)
    best = max(a.apart for a, _ in stretched)
    for anchor, origin in stretched:  # none resolves alone: each with its steps stretched again
        before = ctx.ask.queries
        pair = _restretch(ctx, u, anchor, origin, rng=rng)
        retried += ctx.ask.queries - before
        if pair.apart >= tol.anchor_resolve:
            ctx.retried += retried
            return [pair]
        best = max(best, pair.apart)
    raise IllConditionedError(
        f"a group's anchor configuration, stretched, does not resolve its steps (of {len(stretched)} candidates, "
        f"alone and stretched again by {tol.restretch:g}, the closest two at best {best:.2g} standard deviations "
        "apart): its heads cannot be told apart at this output error")


def _seen(g, tol):
    """The steps of appreciable height, ``tol.faint_step`` of the largest or more."""
    return np.abs(g) >= tol.faint_step * np.max(np.abs(g))


def _stretch_factor(c, g, origin, tol):
    """The factor that puts the farthest step of appreciable height (:func:`_seen`) ``tol.stretch``
    nats from the origin's, clipped to ``tol.stretch_clip``."""
    return float(np.clip(tol.stretch / max(np.max(np.abs(c - origin)[_seen(g, tol)]), 1e-12), *tol.stretch_clip))


def _stretch(ctx, u, q, c, g, fitted, origin_answers, *, rng):
    r""":func:`_anchor`'s candidate ``q`` (its fit ``c``, ``g`` and ``fitted`` = its ``(F, sd,
    ends, C)``) stretched so that its farthest step sits ``tol.stretch`` nats out, asked and
    fitted; returns its :class:`Anchor` and the group's origin (the positions at :math:`q=0`).

    With score biases :math:`b_h` (here so named: :math:`c_h` is a step's position) a step sits
    at :math:`-y_h^\top q-\kappa_h`, :math:`\kappa_h=u^\top b_h`: affine in :math:`q`, not
    linear. The group's *origin* :math:`q=0` (:func:`_origin`, asked once per group:
    ``origin_answers`` keeps its answers) shows :math:`-\kappa_h`, and the stretch by
    :math:`\alpha` moves the candidate's steps from :math:`c_h` to
    :math:`\alpha(c_h+\kappa_h)-\kappa_h`: the start of the stretched configuration's fit."""
    H, tol = ctx.H, ctx.tol
    chi2_ok = tol.chi2_factor * _dof(ctx, H)
    origin = _origin(ctx, u, g, (*fitted, c), origin_answers) if ctx.family.affine else np.zeros(H)
    alpha = _stretch_factor(c, g, origin, tol)
    q0 = alpha * q
    F, sd = ctx.config(u, q0)
    e = ctx.ends(u, q0)
    pred = alpha * (c - origin) + origin
    order = np.argsort(pred)  # the candidate's heads, their heights with them
    single = fit_config(ctx.z, F, sd, H, ends=e, c0=pred[order], g0=g[order], chi2_ok=chi2_ok, rng=rng)
    # a fit far above its noise (a wrong local minimum) resolves nothing, however far apart its steps
    apart = resolution(ctx.z, sd, e, single[1], single[2], single[3]) if single[3] <= tol.trim_above * _dof(ctx, H) else 0.0
    reach = np.sqrt(np.mean((alpha * (c - origin)) ** 2)) if ctx.family.affine else np.sqrt(np.mean(single[1] ** 2))
    anchor = Anchor(Q=q0[None], F=F[None], sd=sd[None], ends=tuple(np.array([x]) for x in e), fits=[single],
                    reach=float(reach), apart=float(apart))
    return anchor, origin


def _restretch(ctx, u, anchor, origin, *, rng):
    r"""A stretched ``anchor`` that does not resolve its steps alone, stretched again: its
    :math:`q_0` rescaled so that its farthest step *of appreciable height* (``tol.faint_step``
    of the largest) sits ``tol.stretch`` nats out (a fit of crowded steps parks spare ones
    far out with no height, and the first stretch followed them), asked there and at
    ``tol.restretch`` times that, both fitted together with their positions tied and their
    heights shared (:func:`~.fit.fit_stretches`; the steps at :math:`a(c_h-o_h)+o_h`,
    ``origin`` :math:`o`), from the first fit's positions rescaled, AAA's of either
    configuration, evenly spread ones and ``RANDOM_STARTS`` random ones. Returns the pair's
    :class:`Anchor`. Every gap is wider in the second configuration, and the heights both share
    fix the positions of the first (chapter 5b: the information of eight steps)."""
    H, tol, a = ctx.H, ctx.tol, ctx.tol.restretch
    _, c, g, _ = anchor.fits[0]
    beta = _stretch_factor(c, g, origin, tol)
    Q = np.array([beta * anchor.Q[0], a * beta * anchor.Q[0]])
    asked = [ctx.config(u, q) for q in Q]
    F, sd = np.array([x[0] for x in asked]), np.array([x[1] for x in asked])
    ends = tuple(np.array(x) for x in zip(*(ctx.ends(u, q) for q in Q)))
    moved = beta * (c - origin) + origin
    pred, seen = np.sort(moved), moved[_seen(g, tol)]
    lo, hi = np.min(seen), np.max(seen)

    def starts():
        yield pred
        for k, f in enumerate((1.0, a)):
            yield np.sort((_aaa_start(ctx.z, F[k] - ends[0][k], H) - origin) / f + origin)
        for k, f in enumerate((1.0, a)):  # each fitted alone, from its own starts
            alone = fit_config(ctx.z, F[k], sd[k], H, ends=tuple(e[k] for e in ends), chi2_ok=chi2_ok / 2, rng=rng)
            yield np.sort((alone[1] - origin) / f + origin)
        yield np.linspace(lo, hi, H)
        yield from (np.sort(rng.uniform(-tol.stretch, tol.stretch, H)) for _ in range(RANDOM_STARTS))

    chi2_ok = tol.chi2_factor * 2 * _dof(ctx, H)
    C, c, g, chi2, apart = fit_stretches(ctx.z, F, sd, ends, (1.0, a), origin, starts(), chi2_ok=chi2_ok)
    if not np.sum(chi2) <= tol.trim_above * 2 * _dof(ctx, H):  # a wrong local minimum resolves nothing
        apart = 0.0
    fits = [(C[0], c, g, chi2[0]), (C[1], a * (c - origin) + origin, g, chi2[1])]
    reach = np.sqrt(np.mean((beta * (anchor.fits[0][1] - origin)) ** 2))
    return Anchor(Q=Q, F=F, sd=sd, ends=ends, fits=fits, reach=float(reach), apart=float(apart))


def _origin(ctx, u, g, candidate, answers=None):
    r"""With score biases: the positions :math:`-\kappa_h` of the group's steps at :math:`q=0`
    (the configuration :math:`x=-u`, :math:`q=0`), fitted with the heights ``g`` of the anchor's
    candidate fixed (so labelled as its heads), from the starts of :func:`_origin_starts` until
    one fits within the noise. When none does, the best is refitted jointly with the candidate
    (``candidate``: its ``(F, sd, ends, C, c)``; :func:`_joint_positions`, the heights shared
    and free): the candidate's heights carry their own error, and a float64 oracle's noise is so
    small that a height off in its sixth digit puts the origin's :math:`\chi^2` a hundred times
    above its noise (drawn biases, steps of opposite heights close together). ``answers``: a list
    holding the origin's answers once asked (:func:`_anchor`'s candidates share them).

    Raises
    ------
    IllConditionedError
        Neither fits within the noise."""
    tol = ctx.tol
    q = np.zeros(ctx.d)
    answers = [] if answers is None else answers
    if not answers:  # asked once per group: the caller's list keeps them for its next candidate
        answers.append(ctx.config(u, q))
    F, sd = answers[0]
    ends = tuple(np.array([x]) for x in ctx.ends(u, q))
    limit = tol.chi2_factor * (len(ctx.z) + 2)
    c, C, cost = _positions_only(ctx.z, F, sd, g, _origin_starts(ctx, F, sd, ends), ends, 0, limit=limit)
    if cost <= limit:
        return c
    Fc, sdc, ec, Cc, cc = candidate
    c, chi2 = _joint_positions(ctx.z, (Fc, F), (sdc, sd), (ec, tuple(e[0] for e in ends)), g, (Cc, C), (cc, c))
    if max(chi2) <= limit:
        return c[1]
    raise IllConditionedError(
        f"a group's origin (q = 0) is not fitted within {tol.chi2_factor:g} x its noise by the anchor's heights (chi2 "
        f"{cost:.3g}; jointly with the anchor's candidate {max(chi2):.3g}): its score biases cannot be placed")


def _origin_starts(ctx, F, sd, ends):
    r""":func:`_origin`'s starts (ranked by :func:`~.fit._positions_only` by their own
    :math:`\chi^2`): coinciding positions (zero biases), every order (at most
    ``tol.max_permutations``) of a one-nat grid and of the positions of a free fit of the same
    answers (:func:`fit_config`: drawn biases put the steps several nats apart, some beyond the
    window), and ``tol.repair_random`` random positions over one and a half windows."""
    H, tol = ctx.H, ctx.tol
    yield np.zeros(H)
    grid = np.arange(H) - (H - 1) / 2
    yield from (np.array(p) for p in itertools.islice(itertools.permutations(grid), tol.max_permutations))
    free = fit_config(ctx.z, F, sd, H, ends=tuple(x[0] for x in ends),
                      chi2_ok=tol.chi2_factor * _dof(ctx, H), rng=ctx.rng)[1]
    yield from (np.array(p) for p in itertools.islice(itertools.permutations(free), tol.max_permutations))
    half = 1.5 * ctx.z[-1]
    yield from (np.sort(ctx.rng.uniform(-half, half, H)) for _ in range(tol.repair_random))


def random_pass(ctx, u, scale, *, rng, dim=None):
    r"""The first pass of one group with at most ``tol.anchored_heads - 1`` heads (the
    measured choice there: 20/20 at :math:`H=2`, :math:`d=16`, where the anchored pass's
    nudged configurations, bunched around one :math:`q_0`, gave 14/20): :math:`2d` random
    :math:`q` of norm ``scale``; every
    configuration fitted alone (AAA start, weighted LM), the heads labelled against the
    sorted-median reference of :math:`\gamma`, then the joint fit (:func:`fit_group`); ``dim`` as
    :func:`coarse_pass`'s.

    Returns ``(Q, F, sd, ends, fit)``."""
    d, H = ctx.d, ctx.H
    m = ctx.tol.per_group(d if dim is None else dim)
    Q = np.array([_unit(rng, d) * scale for _ in range(m)])
    Fs, sds, ends, singles = [], [], [], []
    for q in Q:
        F, sd = ctx.config(u, q)
        e = ctx.ends(u, q)
        singles.append(fit_config(ctx.z, F, sd, H, ends=e,
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
    """Degrees of freedom of one configuration's fit (:func:`~.fit.config_dof`)."""
    return config_dof(len(ctx.z), H)


def _repair(ctx, F, sd, ends, fit):
    r"""Configurations whose χ² is far above the noise (a local minimum, a wrong labelling) are
    refitted alone with the group's heights fixed, from the orders of their own positions (H!
    starts, at most ``tol.max_permutations``) and random ones, the nearest the answers first
    (:func:`~.fit._positions_only`), then the group is refitted jointly. With the heights known,
    a configuration's only unknowns are its positions and constant. A refit is kept only where
    it lowers the configuration's :math:`\chi^2` (on a float64 layer of width 128 with eight
    heads, three configurations 'repaired' into wrong minima took a group from a reduced
    :math:`\chi^2` of 0.06 to 7e10)."""
    H, R = ctx.H, len(ctx.z)
    limit = ctx.tol.chi2_factor * (R + 2)
    bad = np.flatnonzero(~(fit.chi2 <= limit))
    c, C = fit.c.copy(), fit.C.copy()
    half = ctx.z[-1] * 0.75
    for j in bad:
        starts = [c[j]]  # its own positions, as labelled, then every order of them and random ones
        starts += [np.array(p) for p in itertools.islice(itertools.permutations(np.sort(c[j])), ctx.tol.max_permutations)]
        starts += [np.sort(ctx.rng.uniform(-half, half, H)) for _ in range(ctx.tol.repair_random)]
        cj, Cj, cost = _positions_only(ctx.z, F[j], sd[j], fit.g, starts, ends, j, limit=limit)
        if cost < fit.chi2[j]:  # a repair never leaves a configuration worse than it found it
            c[j], C[j] = cj, Cj
    return _fit_group_checked(ctx, F, sd, ends, fit.g, C, c)


def _trim(ctx, F, sd, ends, fit):
    r"""Heights freed from the configurations that pull them: when a group's joint fit stays
    far above the noise (reduced :math:`\chi^2` over ``tol.trim_above``) after :func:`_repair`,
    the configurations whose :math:`\chi^2` exceeds ``tol.trim_factor`` times the group's
    median are set aside, the heights are fitted from the others, the set-aside ones are
    repaired under those heights (:func:`_repair`: the orders of their positions) and the
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


def placed_pass(ctx, u, Y, scale, *, rng, dim=None):
    r"""The second pass of one group: :math:`2d` values of :math:`q=-Y^+t+Nr` whose predicted
    steps :math:`c=-Yq=t` sit on a grid ``tol.spacing`` nats apart (random order and offset),
    :math:`N` a basis of the null space of :math:`Y` and :math:`r` random (so the :math:`q`
    span :math:`\mathbb R^d`). When :math:`|Y^+t|` exceeds ``tol.placed_cap`` times the
    pass's scale (nearly collinear :math:`y_h`), the grid is shrunk until it fits. With
    :math:`H\ge d` there is no null space and the :math:`q` are random. With score biases
    (``Y`` of :func:`regress_y` with its intercept column :math:`\kappa`) the steps sit at
    :math:`-Yq-\kappa` and :math:`q=-Y^+(t+\kappa)+Nr` (the grid halved at most
    ``tol.placed_halvings`` times: :math:`-Y^+\kappa` alone may exceed the cap). ``dim`` as
    :func:`coarse_pass`'s.

    Returns ``(Q, F, sd, ends, c_pred)``."""
    d, H, tol = ctx.d, ctx.H, ctx.tol
    m = tol.per_group(d if dim is None else dim)
    kappa = Y[:, d] if Y.shape[1] > d else np.zeros(H)
    Y = Y[:, :d]
    pinv = np.linalg.pinv(Y)
    _, sv, Vt = np.linalg.svd(Y)
    N = Vt[H:].T if H < d else np.zeros((d, 0))
    Q, Fs, sds, ends, preds = [], [], [], [], []
    for _ in range(m):
        if H < d:
            t = tol.spacing * (rng.permutation(H) - (H - 1) / 2) + rng.uniform(-1, 1)
            if ctx.family.affine:
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
