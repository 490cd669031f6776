r"""The long design's run (``learn(..., design="long")``): :math:`V`, the scale, the groups, the
links, the solves, the shared finish (:func:`learn_long`).

Used in: chapter 5b (long queries), chapter 7 (real layers, robust mode's fallback) and chapter 9
(``rank=``: :func:`draw_groups_ranked`).
"""

import numpy as np

from ...canonical import canonical
from ...errors import IllConditionedError, UnmatchedHeadsError
from ...layer import AttentionLayer
from ...model import MultiHeadAttention
from ...progress import LONG_RUN, progress
from ..finish import Ending, finish
from ..nodes import ratio_grid
from ..results import Diagnostics
from ..tolerances import LongTolerances
from .ask import Context, ask_V
from .passes import _fit_group_checked, _orthonormal, _repair, _trim, coarse_pass, placed_pass, probe_scale, random_pass
from .rank import RowSpans, regress_in_spans
from .solve import AnswerSpread, check_V, estimate_error, link_group, link_groups, regress_y, solve_heads

__all__ = ["draw_groups", "draw_groups_ranked", "learn_long"]


# ---------------------------------------------------------------- the pipeline
def _group(ctx, u, scale, rng, *, spans=None):
    """Both passes of one group, the regression after each; the group's heights, y and covariances
    (regressed in the heads' row spaces, :func:`~.rank.regress_in_spans`, when ``spans`` is given:
    then with its assignment ``perm`` and ``margin``). A group whose joint fit stays above
    ``tol.trim_above`` times its noise after the repairs raises :class:`IllConditionedError` (it
    is drawn again)."""
    try:
        return _passes(ctx, u, scale, rng, spans)
    except np.linalg.LinAlgError as exc:  # a fit or a solve without information
        raise IllConditionedError(f"a group's fits are degenerate ({exc}): two heads cannot be told apart "
                                  "there at this output error") from None


def _passes(ctx, u, scale, rng, spans):
    """:func:`_group`'s stages."""
    tol, affine = ctx.tol, ctx.family.affine
    if spans is None:
        dim, regress = None, lambda Q, fit: regress_y(Q, fit, tol=tol, intercept=affine) + (None, None)
    else:  # a reduced group: as many configurations as its heads' row spaces need
        dim = tol.reduced_dim(max(spans.ranks), ctx.d)
        regress = lambda Q, fit: regress_in_spans(Q, fit, spans, tol=tol, intercept=affine)  # noqa: E731
    first = coarse_pass if ctx.H >= tol.anchored_heads else random_pass
    Q1, F1, sd1, e1, fit1 = first(ctx, u, scale, rng=rng, dim=dim)
    Y1 = regress(Q1, fit1)[0]
    Q2, F2, sd2, e2, pred = placed_pass(ctx, u, Y1, scale, rng=rng, dim=dim)
    Q = np.vstack([Q1, Q2])
    F, sd = np.vstack([F1, F2]), np.vstack([sd1, sd2])
    ends = tuple(np.concatenate([a, b]) for a, b in zip(e1, e2))
    C0 = np.concatenate([fit1.C, e2[0]])
    c0 = np.vstack([fit1.c, pred])
    fit = _fit_group_checked(ctx, F, sd, ends, fit1.g, C0, c0)
    fit = _trim(ctx, F, sd, ends, _repair(ctx, F, sd, ends, fit))
    if not fit.reduced <= tol.trim_above:  # a wrong local minimum the repairs did not undo: drawn again
        raise IllConditionedError(
            f"a group's joint fit stays at {fit.reduced:.3g} times its noise (reduced chi2) after its repairs: a "
            "configuration in a wrong local minimum or heads mislabelled")
    Y, covY, used, perm, margin = regress(Q, fit)
    return {"g": fit.g, "g_sd": fit.g_sd, "Y": Y, "covY": covY, "reduced": fit.reduced,
            "used": int(used.sum()), "configs": len(Q), "perm": perm, "margin": margin}


def draw_groups(ctx, scale, *, rng):
    r"""The :math:`d` groups, their :math:`u_k` the rows of ``scale`` times a random orthogonal
    matrix; a group whose fits are degenerate (a head whose :math:`\gamma_h=-u_k^\top v_h`
    vanishes, two coinciding heads) or stay far above the noise (:func:`_group`), or that sees
    one head far less well than the others (:func:`_faintness` over ``tol.faint_head``), is drawn again
    with a new :math:`u_k`, a random direction
    orthogonal to the groups before it (for the last group, :func:`_tilt`), at most
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

    The last group, when it must be drawn again, has no orthogonal direction left. A random
    direction would make the factor heavy-tailed again: it is :math:`\sqrt{(d-2+2/a^2)/d}`,
    :math:`a` the new direction's component orthogonal to the earlier rows (:math:`U^{-1}` is
    block triangular in a basis of those rows, its last row of squared norm
    :math:`(1+(1-a^2))/a^2`). :func:`_tilt` fixes :math:`a=\cos` ``tol.last_tilt``, so the factor
    stays :math:`\sqrt{(d+2)/d}` at 45°.
    """
    U, groups, redrawn, spent = [], [], [], 0
    O = _orthonormal(rng, ctx.d)
    for k in progress(range(ctx.d), desc="groups", delay=LONG_RUN):
        u, group, cost = _draw_group(ctx, O, k, scale, rng, lambda u: _group(ctx, u, scale, rng), redrawn,
                                     faintness=_faintness)
        U.append(u)
        groups.append(group)
        spent += cost
    return np.array(U), groups, redrawn, spent


def _draw_group(ctx, O, k, scale, rng, attempt, redrawn, *, retry=IllConditionedError, faintness=None):
    r"""Group ``k`` of :func:`draw_groups` and :func:`draw_groups_ranked`: ``attempt(u)`` at
    :math:`u=` ``O[k] * scale``; on a ``retry`` error the direction is drawn again (orthogonal to
    the groups before; for the last group :func:`_tilt`), at most ``tol.group_redraws`` times, the
    group's name appended to ``redrawn``. With ``faintness`` (of an attempt's result; 0 when every
    head is seen well), a result fainter than ``tol.faint_head`` is drawn again too, within the
    first ``tol.faint_redraws`` redraws; after those, the least faint result returned so far is
    kept (its direction put back in ``O[k]``, the later rows turned orthogonal to it), and only a
    group with no result at all goes on to its remaining redraws. Returns ``(u, attempt's result,
    queries spent on the attempts not kept)``.

    Raises
    ------
    IllConditionedError (or the ``retry`` error met)
        Still failing after the redraws, no faint result kept."""
    spent, first, kept = 0, O[k].copy(), None  # kept: (faintness, u, result, queries, retried)
    for a in range(ctx.tol.group_redraws + 1):
        if kept is not None and a > ctx.tol.faint_redraws:
            break  # a faint result in hand: later failures are not drawn again
        before, retried = ctx.ask.queries, ctx.retried
        if a:
            redrawn.append(f"group({k + 1})")
        if a and k < ctx.d - 1:  # a new direction orthogonal to the groups before
            O[k:] = _orthonormal(rng, ctx.d - k) @ O[k:]
        elif a:  # the last group: no other orthogonal direction is left
            O[k] = _tilt(first, O[:k], ctx.tol.last_tilt, rng=rng)
        u = O[k] * scale
        try:
            result = attempt(u)
        except retry as exc:
            spent += ctx.ask.queries - before  # all of a failed attempt, its anchor's retries too
            ctx.retried = retried
            if a == ctx.tol.group_redraws and kept is None:
                raise type(exc)(f"group {k + 1}, after {a} redraws: {exc}") from None
            continue
        faint = 0.0 if faintness is None else faintness(result)
        if not faint > ctx.tol.faint_head:
            return u, result, spent
        # a head barely seen: drawn again while redraws are left, the least faint kept
        cost = ctx.ask.queries - before
        spent += cost
        if kept is None or faint < kept[0]:
            kept = (faint, u, result, cost, ctx.retried - retried)
        ctx.retried = retried
    faint, u, result, cost, extra = kept
    _put_back(O, k, u / scale)
    ctx.retried += extra
    return u, result, spent - cost


def _put_back(O, k, e):
    """``O[k]`` set to the unit direction ``e`` (a combination of ``O[k:]``, or the last group's
    tilt), the rows after it turned to an orthonormal basis of what ``O[:k+1]`` leaves."""
    O[k] = e
    if k < len(O) - 1:
        Q = np.linalg.qr(np.vstack([O[:k + 1], O[k + 1:]]).T)[0]  # Gram–Schmidt in order
        O[k + 1:] = (Q[:, k + 1:] * np.where(np.sum(Q[:, k + 1:] * O[k + 1:].T, axis=0) < 0, -1.0, 1.0)).T


def _faintness(group):
    r"""How faintly a group sees its faintest head: the largest standard deviation of a head's
    :math:`y` (:math:`\sqrt{\operatorname{tr}\operatorname{cov}y_h}`) over the median of its
    heads' (1 with one head, below 2 with two)."""
    sd = np.sqrt(np.trace(group["covY"], axis1=1, axis2=2))
    return float(np.max(sd) / np.median(sd))


def _tilt(e, before, angle, *, rng):
    r"""The last group's redrawn direction: its own unit direction ``e`` (orthogonal to the
    rows ``before``) tilted by ``angle`` towards a random unit direction in their span, so that
    its component orthogonal to them is :math:`\cos` ``angle`` (:func:`draw_groups`'s Notes). With
    no rows before (:math:`d=1`), the other sign of ``e``: the only other direction, so every
    redraw of a one-dimensional group asks the same one."""
    if not len(before):
        return -e
    w = rng.normal(size=len(before)) @ before
    return np.cos(angle) * e + np.sin(angle) * w / np.linalg.norm(w)


def draw_groups_ranked(ctx, scale, *, rng, limit):
    r"""``learn(..., design="long", rank=p)``: the groups of :func:`draw_groups` (the same directions
    and redraws, but none for a faint head), full ones labelled by their links as they come and their rows tested against
    each head's row space (:class:`~.rank.RowSpans`), then, once every head's rank is certified,
    reduced groups regressed in the row spaces (:func:`~.rank.regress_in_spans`, no link).
    Returns ``(U, groups, perms, margins, redrawn, redraw_queries, spans)``.

    A group whose link or row-space assignment has no margin (:class:`~attnlearn.errors.UnmatchedHeadsError`:
    a head barely seen in it) is drawn again like a degenerate one.

    Raises
    ------
    IllConditionedError
        A group still degenerate, or its rank test undecided, after its redraws.
    RankError
        A head of rank above ``limit``.
    UnmatchedHeadsError
        A link, or a reduced group's assignment, still without a margin after the redraws."""
    d, H = ctx.d, ctx.H
    U, groups, perms, margins, redrawn, spent = [], [], [], [], [], 0
    spans = None
    O = _orthonormal(rng, d)
    for k in progress(range(d), desc="groups", delay=LONG_RUN):

        def attempt(u, k=k):
            reduced = spans is not None and spans.certified
            group = _group(ctx, u, scale, rng, spans=spans if reduced else None)
            if reduced:
                return group, group["perm"], group["margin"], None
            if k == 0 or H == 1:
                perm, margin = np.arange(H), np.inf
            else:
                perm, margin = link_group(ctx, U[0] + u, groups[0], group, scale, k=k, rng=rng)
            Y, covY = group["Y"][perm][:, :d], group["covY"][perm][:, :d, :d]
            if spans is None:
                return group, perm, margin, RowSpans.start(Y, covY)
            spans.add_group(Y, covY, limit=limit, tol=ctx.tol, k=k)
            return group, perm, margin, None

        # a link or an assignment without margin is drawn again too
        u, (group, perm, margin, first), cost = _draw_group(ctx, O, k, scale, rng, attempt, redrawn,
                                                            retry=(IllConditionedError, UnmatchedHeadsError))
        spans = first if first is not None else spans
        U.append(u)
        groups.append(group)
        perms.append(perm)
        margins.append(margin)
        spent += cost
    return np.array(U), groups, np.array(perms), np.array(margins), redrawn, spent, spans


def learn_long(ask, opt, tol):
    """The stages of ``learn(..., design="long")`` in order (module docstring); returns the
    :class:`~attnlearn.learner.results.Recovery` checked by :func:`~attnlearn.learner.finish.finish`."""
    lt = LongTolerances()
    rng = np.random.default_rng(opt.seed)
    d, H, L = opt.d, opt.n, opt.max_length
    b, z = ratio_grid(L, lt.ratios(H))
    absolute = 0.0 if opt.output_error is None else float(opt.output_error)
    ctx = Context(ask=ask, d=d, H=H, L=L, b=b, z=z, absolute=absolute, relative=float(opt.relative_error or 0.0),
               tol=lt, rng=rng, family=opt.family)
    start = ask.queries
    ctx.V, ctx.V_sd = ask_V(ctx)
    scale, reprobes = probe_scale(ctx, rng=rng)
    if opt.rank is None:
        U, groups, redrawn, redraw_queries = draw_groups(ctx, scale, rng=rng)
        perms, margins = link_groups(ctx, U, groups, scale, rng=rng)
        ranks = None
    else:
        U, groups, perms, margins, redrawn, redraw_queries, spans = draw_groups_ranked(ctx, scale, rng=rng,
                                                                                        limit=opt.rank)
        ranks = [r if r is not None else d for r in spans.ranks]
    W, v, Uinv = solve_heads(U, groups, perms)
    estimate = estimate_error(W, v, Uinv, groups, perms, tol=lt, beta=ctx.beta if ctx.family.affine else None,
                              beta_sd=ctx.beta_sd)
    check_V(v, ctx.V, estimate)
    heads = (AttentionLayer(W[:, :, :d], v, c=W[:, :, d], b=np.asarray(ctx.beta)) if ctx.family.affine
             else MultiHeadAttention(W, v))
    spread = AnswerSpread(heads, Uinv, groups, perms, beta_sd=ctx.beta_sd if ctx.family.affine else 0.0,
                          absolute=absolute, relative=ctx.relative, rounding=lt.rounding)
    model = heads if ctx.family.affine else canonical(heads)
    redraw_queries += ctx.retried  # an anchor's later candidates: asked again, as a redraw is
    queries = {"design": ask.queries - start - redraw_queries - reprobes, "constants": 0, "redraws": redraw_queries,
               "holdout": 0}
    if reprobes:
        queries["scale"] = reprobes
    Fscale = max(np.max(np.abs(ctx.V)) * scale + abs(ctx.beta), 1e-300)  # beta = 0 without biases
    eps_out = absolute + ctx.relative * Fscale + 4 * np.finfo(float).eps * Fscale
    diag = Diagnostics(labels=[f"group({k + 1})" for k in range(d)], pairs=[(int(L - bb), int(bb)) for bb in b],
                       interp_residual=np.array([g["reduced"] for g in groups]),
                       condition=np.array([np.linalg.cond(U)] * d), scale={"factor": scale, "probe_max_abs_ell": None},
                       V=ctx.V, redrawn=redrawn, redrawn_blocks=[], link_margin=margins[1:] if d > 1 else None,
                       ranks=ranks)
    ending = Ending(model, queries, diag, estimate=estimate, eps_out=eps_out, f=scale**2, max_length=L,
                    spread=spread, holdout_length=lt.holdout_length)
    return finish(ask, ending, opt=opt, rng=rng, tol=tol)
