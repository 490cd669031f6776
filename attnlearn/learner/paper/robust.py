r"""Robust mode's redraws: replace ill-conditioned configurations by fresh random ones.

Used in: chapter 4 (``robust=True``: the float64 frontier, extra queries reported) and
chapter 5 (the noise sweep's :math:`H=3` runs).

A configuration is ill-conditioned when its fit fails (non-real or non-positive pole) or its
relative sensitivity is far above the design's median; a link is when its matching is
ambiguous or fails. Redrawing spends :math:`2n` queries per configuration (and one per
redrawn block constant), all counted in ``Recovery.queries["redraws"]``.
"""

from dataclasses import dataclass, field

import numpy as np

from ...errors import IllConditionedError
from ...matching import Matching, match_candidates
from ...rational.floating import fit_masked
from ..asking import ask_nodes
from ..nodes import unit_rows
from .design import scale_cross_u, scale_q, scale_u
from .labelling import link_sets, scaled_err, scales

__all__ = ["Redraws", "redraw"]


@dataclass
class Redraws:
    """What :func:`redraw` did: ``queries`` spent, the configurations ``redrawn`` (labels, in the
    order redrawn) and the ``blocks`` redrawn (names), the ``fits`` of every configuration (a
    :class:`~attnlearn.rational.RationalFit`) and ``links``, every link's matching on those fits
    (None when d = 1 or no head)."""

    queries: int
    redrawn: object
    blocks: list
    fits: object
    links: object


@dataclass
class _Round:
    """The state carried from one round of redraws to the next."""

    redo: np.ndarray
    const: np.ndarray
    fits: object = None
    ok: np.ndarray = None
    measure: np.ndarray = None
    unmatched: np.ndarray = None
    links: Matching = None
    spent: int = 0
    names: list = field(default_factory=list)
    blocks: list = field(default_factory=list)


def _block_constants(table, cq, idx):
    """The constant of each configuration's final token: c_k, or c_1 + c_k for a cross
    (:math:`(c_1+c_k)/2` for the midpoint crosses of score biases, ``table.mid``)."""
    c = cq[table.blk[idx]] + np.where(table.kind[idx] == "cross", cq[0], 0.0)
    return np.where(table.kind[idx] == "cross", table.family.midpoint(c), c)


def _refit(st, F, nodes, H, *, method, tol):
    """Fit the configurations ``st.redo`` (never raising) and update every configuration's
    relative sensitivity ``st.measure`` (infinite where the fit failed)."""
    redo = st.redo
    fit, ok = fit_masked(nodes.ts, F[redo] - st.const[redo, None], H, method=method)
    if st.fits is None:
        st.fits, st.ok, st.measure = fit, ok, np.empty(len(F))
    else:
        for name in ("ell", "gamma", "sens", "residual", "shift"):
            getattr(st.fits, name)[redo] = getattr(fit, name)
        st.ok[redo] = ok
    sg = fit.sens  # the relative sensitivity of the configurations just fitted
    rel = np.maximum(sg[:, 0, :], sg[:, 1, :] / np.maximum(np.abs(fit.gamma), tol.tiny))
    st.measure[redo] = np.where(ok, rel.max(axis=1), np.inf)


def _check_links(st, table, first, H, *, eps_in, tol):
    """The links' matching test of the learner, on the links whose configurations changed;
    keeps every link's matching current and marks the unmatched or ambiguous ones."""
    refs, oth, lnk = table.link_indices()
    if first:
        st.unmatched = np.zeros(len(lnk), dtype=bool)
        chk = np.arange(len(lnk))
        st.links = Matching(np.zeros((len(lnk), H), dtype=int), np.zeros(len(lnk)), np.zeros(len(lnk)),
                            np.zeros((len(lnk), H), dtype=int))
    else:
        changed = np.zeros(len(table), dtype=bool)
        changed[st.redo] = True
        chk = np.nonzero(changed[refs] | changed[oth] | changed[lnk])[0]
    fits = st.fits
    r, o, li = refs[chk], oth[chk], lnk[chk]
    P, O = link_sets(fits.ell, fits.gamma, r, o, li)
    sc = scales(O, tol=tol)
    etot = eps_in * sum(scaled_err(fits.sens[:, 0, :], fits.sens[:, 1, :], sc, idx) for idx in (r, o, li))
    mt = match_candidates(P, O, sc)
    st.unmatched[chk] = (mt.residual > tol.match_safety * etot) | (mt.margin <= tol.ambiguity * mt.residual)
    for name in ("perm", "observed", "residual", "margin"):  # every link's matching, kept current
        getattr(st.links, name)[chk] = getattr(mt, name)
    return oth[st.unmatched]  # redraws u_{k,j}: base (k,j) and link (k,j)


def _redraw_blocks(design, cq, bad_blocks, *, rng, ask):
    r"""Blocks whose median configuration is ill-conditioned: :math:`q_k` is to blame (two heads
    with nearly equal :math:`W_hq_k` have close poles for every :math:`u`). A new :math:`q_k`, its
    constant asked again, new :math:`u_{k,j}` and a new cross. Returns the positions affected
    and the queries spent."""
    table, f, q, d = design.table, design.f, design.q, design.table.d
    affected = []
    for k in bad_blocks:
        q[k] = scale_q(unit_rows(rng, 1, d)[0], f)
        cq[k] = ask(q[k][None, None, :], f"the constant of redrawn block {k + 1}")[0]
        design.U[k] = scale_u(unit_rows(rng, d, d), k, f)
        design.qtok[k] = q[k]
        i = table.cross(k)
        design.qtok[design.qidx[i]] = table.family.midpoint(q[0] + q[k])
        design.u[i] = scale_cross_u(unit_rows(rng, 1, d)[0], design.qtok[design.qidx[i]], f)
        affected += [table.block_rows()[k], [i]]
    return affected, len(bad_blocks)


def _redraw_rows(design, bad, bad_blocks, *, rng):
    """Fresh directions for the bad configurations outside the redrawn blocks, in the order:
    crosses by block, then :math:`u_{k,j}` by (k, j) (a new :math:`u_{k,1}` changes every link
    of block k). Returns the positions affected."""
    table, f, d = design.table, design.f, design.table.d
    kind, blk, jj = table.kind, table.blk, table.jj
    sel = np.nonzero(bad)[0]
    sel = sel[~np.isin(blk[sel], bad_blocks)]
    is_c = kind[sel] == "cross"
    cross_k = np.unique(blk[sel[is_c]])
    ukeys = np.unique(blk[sel[~is_c]] * d + jj[sel[~is_c]])
    fresh = unit_rows(rng, len(cross_k) + len(ukeys), d)
    ci = table.cross(cross_k)
    design.u[ci] = scale_cross_u(fresh[: len(cross_k)], design.qtok[design.qidx[ci]], f)
    uk, uj = np.divmod(ukeys, d)
    design.U[uk, uj] = scale_u(fresh[len(cross_k):], uk, f)
    nz = uj != 0
    parts = [ci, table.base(uk, uj), table.link(uk[nz], uj[nz])]
    return parts + [table.link(k, np.arange(1, d)) for k in uk[~nz]]


def _ask_again(st, design, F, nodes, cq, *, ask):
    """Re-lay the rows ``st.redo`` (base rows from ``U``, links as sums), reset their constants and
    ask them at every node."""
    table, U, redo = design.table, design.U, st.redo
    kind, blk, jj = table.kind, table.blk, table.jj
    bm, lm = redo[kind[redo] == "base"], redo[kind[redo] == "link"]
    design.u[bm] = U[blk[bm], jj[bm]]
    design.u[lm] = U[blk[lm], 0] + U[blk[lm], jj[lm]]
    st.const[redo] = _block_constants(table, cq, redo)
    F[redo] = ask_nodes(ask, design.u[redo], design.qtok, design.qidx[redo], nodes.pairs, "redrawn configurations")
    st.spent += len(redo) * nodes.m
    st.names.append(redo)


def redraw(asked, cq, nodes, *, ask, rng, opt, eps_in, tol):
    r"""Robust mode: replace ill-conditioned configurations by fresh random ones (extra queries).

    A configuration is ill-conditioned when its fit fails (non-real or non-positive pole)
    or its sensitivity (largest row sum of :math:`|J^{-1}|`, relative to the residues) is
    more than ``tol.redraw_factor`` times the median over the design. Redrawing ``u_{k,j}``
    changes the base configuration ``(k, j)`` and the link ``(k, j)``; redrawing ``u_{k,1}``
    changes the whole block's links; a cross configuration is redrawn alone. When the median
    of a block :math:`k\ge2` is itself ill-conditioned, the whole block is redrawn
    (:func:`_redraw_blocks`). A link whose matching is ambiguous or fails (the test of the
    learner, with the sample error ``eps_in``) has its ``u_{k,j}`` redrawn. The design
    ``asked.design``, the samples ``asked.state.F`` and the block constants ``cq`` are updated
    in place (``asked``: stage 1's :class:`~.stages.AskedDesign`, its probe's ``H`` heads). The
    last round replaces only failed fits and unmatched links (a fresh draw can be bad too, and no
    round follows to replace it). ``opt``: ``learn``'s options (``opt.method``, and
    ``opt.redraw_rounds`` rounds at most).

    Used in: chapters 4, 5 and 7 (``learn(robust=True)``).

    Returns
    -------
    Redraws

    Raises
    ------
    IllConditionedError
        Some configuration has no well-posed fit after ``opt.redraw_rounds`` rounds.
    """
    design, F, H = asked.design, asked.state.F, asked.probe.H
    method, rounds = opt.method, opt.redraw_rounds
    table = design.table
    d = table.d
    st = _Round(np.arange(len(table)), _block_constants(table, cq, np.arange(len(table))))
    for rnd in range(rounds + 1):
        _refit(st, F, nodes, H, method=method, tol=tol)
        limit = tol.redraw_factor * np.median(st.measure[st.ok])
        bad = st.measure > limit
        if rnd == rounds - 1:
            bad = ~st.ok
        if d > 1 and H:
            bad[_check_links(st, table, rnd == 0, H, eps_in=eps_in, tol=tol)] = True
        if not bad.any() or rnd == rounds:
            break
        bad_blocks = [k + 1 for k in np.nonzero(np.median(st.measure[table.block_rows()[1:]], axis=1) > limit)[0]]
        st.blocks.extend(f"block({k + 1})" for k in bad_blocks)
        affected, asked = _redraw_blocks(design, cq, bad_blocks, rng=rng, ask=ask)
        st.spent += asked
        st.redo = np.unique(np.concatenate(affected + _redraw_rows(design, bad, bad_blocks, rng=rng)).astype(int))
        _ask_again(st, design, F, nodes, cq, ask=ask)
    if not st.ok.all():
        i = int(np.argmin(st.ok))
        raise IllConditionedError(
            f"{design.labels[i]}: no well-posed interpolation after "
            f"{rounds} rounds of redrawing (non-real or non-positive poles)"
        )
    names = design.labels.take(np.concatenate(st.names) if st.names else [])
    return Redraws(st.spent, names, st.blocks, st.fits, st.links if d > 1 and H else None)
