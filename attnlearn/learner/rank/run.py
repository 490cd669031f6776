r"""The rank design's run (``learn(..., design="rank")``): block 1, the full blocks until every
head's rank is certified, the reduced blocks, the heads, the shared finish (:func:`learn_rank`).

Used in: chapter 9 (real sizes) and ``benchmarks/rank.py``.
"""

import contextlib
import math
from dataclasses import dataclass

import mpmath
import numpy as np

from ..._arith import solve, to_float, to_mp
from ..finish import Ending, finish, zero_function
from ..heads import HeadMatrices, canonical_heads
from ..lean.fit import phase_one
from ..lean.run import FLOAT_WORK_DPS
from ..nodes import node_pairs, unit_rows
from .blocks import fit_block, label_by_heights
from .span import HeadSpan

__all__ = ["RankDiagnostics", "RankDirections", "learn_rank"]


@dataclass
class RankDiagnostics:
    r"""What the rank design saw (the same fields on every path).

    Attributes
    ----------
    visible_heads : int
        :math:`m`, the canonical head count found in block 1.
    ranks : list of int
        Each head's certified rank (:math:`d` when no full block found a column in the span).
    full_blocks : int
        Blocks whose columns were learned whole (block 1 included).
    scale : float
        The query scale factor set by the first configuration.
    link_margin : list of float
        Block 1's links: relative residual of the best wrong pairing.
    height_residual, height_margin : list of float
        Per later block: the height matching's largest scaled residual and its smallest margin
        to a wrong assignment (:func:`~.blocks.label_by_heights`).
    rank_tests : list of list of float
        Per head: each tested column's distance from the earlier span in units of its bound
        (the rank is certified at the first one within ``match_safety``).
    """

    visible_heads: int
    ranks: list
    full_blocks: int
    scale: float
    link_margin: list
    height_residual: list
    height_margin: list
    rank_tests: list


@dataclass
class RankDirections:
    """Block 1's random vectors (float64 rows, before scaling): ``q0`` (d,) its final token and
    ``base`` (d, d) its configurations; later blocks draw theirs as they go (their number
    depends on the ranks found)."""

    q0: np.ndarray
    base: np.ndarray


def learn_rank(access, opt, tol):
    r"""The rank design's pipeline: block 1 (the lean design's phase 1: every :math:`v_h` and
    :math:`W_hq_0`), :func:`full_blocks`, :func:`reduced_blocks`, :func:`assemble_heads`, the
    canonical form and :func:`~attnlearn.learner.finish.finish`. ``access`` is the checked, counting
    :class:`attnlearn.protocol.Access`; ``opt`` the :class:`~attnlearn.learner.options.RankOptions`.

    Used in: chapter 9 (real sizes) and ``benchmarks/rank.py``."""
    with contextlib.nullcontext() if tol.exact else mpmath.workdps(FLOAT_WORK_DPS):  # phase 1's solves
        rng = np.random.default_rng(opt.seed)
        start, d = access.queries, opt.d
        dirs = RankDirections(unit_rows(rng, 1, d)[0], unit_rows(rng, d, d))
        p1, errors = phase_one(access, dirs, to_mp(dirs.q0), opt.n, heads_given=opt.heads_given, spread=opt.spread,
                               output_error=opt.output_error, tol=tol)
    if p1.m == 0:
        diag = RankDiagnostics(0, [], 1, p1.f, [], [], [], [])
        model = zero_function(d, output_error=opt.output_error, eps_out=errors.output, exact=tol.exact)
        return finish(access, _ending(access, start, model, diag, 0.0, errors, p1, opt), opt=opt, rng=rng, tol=tol)
    conv = (lambda a: a) if tol.exact else to_float  # float64 mode: numpy from here on
    known = Known(v=conv(p1.v), err_v=p1.err_v, f=p1.f,
                  nodes=node_pairs(opt.n, "ratios"), eps_out=errors.output, stated=errors.stated)
    spans = [HeadSpan([conv(p1.w0[h])], [p1.err_w0[h]]) for h in range(p1.m)]
    Q = [conv(to_mp(dirs.q0))]
    diag = RankDiagnostics(p1.m, [], 1, p1.f, list(p1.link_margin), [], [], [])
    full_blocks(access, spans, Q, known, diag, rng=rng, opt=opt, tol=tol)
    reduced_blocks(access, spans, Q, known, diag, rng=rng, opt=opt, tol=tol)
    diag.ranks = [s.rank if s.rank is not None else d for s in spans]
    diag.rank_tests = [s.tests for s in spans]
    model, estimate = canonical_heads(assemble_heads(spans, Q), known.v, known.err_v, tol=tol)
    return finish(access, _ending(access, start, model, diag, estimate, known, p1, opt), opt=opt, rng=rng, tol=tol)


@dataclass
class Known:
    r"""What block 1 fixed for the later blocks: ``v`` (m, d) in the run's arithmetic and its bounds
    ``err_v``; the scale ``f``; the ``nodes`` of every configuration;
    ``eps_out``, the largest output error of the samples so far, and ``stated`` the output error
    as stated (exact mode, :class:`~attnlearn.learner.samples.SampleErrors`)."""

    v: np.ndarray
    err_v: np.ndarray
    f: float
    nodes: object
    eps_out: float
    stated: object = None


def _block(access, rows, known, *, rng, opt, tol, name):
    """Draw a block's final token and ``rows`` configurations (scaled by :math:`\\sqrt f`), ask,
    fit and label them: ``(q, U, labelled poles)``."""
    d, s = opt.d, math.sqrt(known.f)
    q, U = unit_rows(rng, 1, d)[0] * s, unit_rows(rng, rows, d) * s
    if tol.exact:
        q, U = to_mp(q), to_mp(U)
    fit = fit_block(access, U, q, m=len(known.v), nodes=known.nodes,
                    output_error=opt.output_error, tol=tol, name=name)
    known.eps_out = max(known.eps_out, fit.eps_out)
    return q, U, label_by_heights(fit, known.v, known.err_v, tol=tol, name=name)


def full_blocks(access, spans, Q, known, diag, *, rng, opt, tol):
    r"""Blocks of :math:`d` configurations, each giving every head's :math:`w_{h,k}=U_k^{-1}\ell_h`
    whole, until every head's rank is certified (:meth:`~.span.HeadSpan.add_full`; a head with more
    than ``opt.rank`` independent columns raises :class:`~attnlearn.errors.RankError`) or the
    :math:`d` final tokens are spent.

    Used in: chapter 9 (real sizes)."""
    d = opt.d
    while len(Q) < d and any(s.rank is None for s in spans):
        k = len(Q) + 1
        q, U, lab = _block(access, d, known, rng=rng, opt=opt, tol=tol, name=f"block {k}")
        cols = solve(U, lab.ell)  # (d, m): column h is W_h q
        Uinv = np.abs(np.linalg.inv(to_float(U)))
        for h, span in enumerate(spans):
            span.add_full(cols[:, h], Uinv @ lab.err_ell[:, h], limit=opt.rank, tol=tol, name=f"block {k}, head {h + 1}")
        Q.append(q)
        diag.full_blocks, diag.height_residual, diag.height_margin = (
            len(Q), diag.height_residual + [lab.residual], diag.height_margin + [lab.margin])


def reduced_blocks(access, spans, Q, known, diag, *, rng, opt, tol):
    r"""The remaining final tokens, :math:`p=\max_h r_h` configurations each: every head's
    :math:`w_{h,k}` from its coordinates in the span of its first :math:`r_h` columns
    (:meth:`~.span.HeadSpan.add_reduced`).

    Used in: chapter 9 (real sizes)."""
    p = max((s.rank or opt.d) for s in spans)
    while len(Q) < opt.d:
        k = len(Q) + 1
        q, U, lab = _block(access, p, known, rng=rng, opt=opt, tol=tol, name=f"block {k}")
        for h, span in enumerate(spans):
            span.add_reduced(U, lab.ell[:, h], lab.err_ell[:, h], tol=tol, name=f"block {k}, head {h + 1}")
        Q.append(q)
        diag.height_residual.append(lab.residual)
        diag.height_margin.append(lab.margin)


def assemble_heads(spans, Q):
    r""":math:`W_h=[w_{h,1}\cdots w_{h,d}]\,[q_1\cdots q_d]^{-1}` with the columns' bounds.

    Used in: chapter 9 (real sizes)."""
    Qm = np.stack(Q, axis=1)  # columns q_k
    W = np.stack([solve(Qm.T, np.stack(s.cols, axis=1).T).T for s in spans])
    err_cols = np.stack([np.stack(s.errs, axis=1) for s in spans])
    return HeadMatrices(W, err_cols, np.abs(np.linalg.inv(to_float(Qm))))


def _ending(access, start, model, diag, estimate, errors, p1, opt):
    """The rank design's :class:`~attnlearn.learner.finish.Ending`: every query since ``start`` is the
    design's, but base(1) asked again at a small layer's scale; ``errors`` has the samples' output
    error (``eps_out`` or ``output``) and the ``stated`` one."""
    eps_out = errors.eps_out if isinstance(errors, Known) else errors.output
    queries = {"design": access.queries - start - p1.rescaled, "constants": 0, "redraws": 0, "holdout": 0}
    if p1.rescaled:
        queries["scale"] = p1.rescaled
    return Ending(model, queries, diag, estimate=estimate, eps_out=eps_out, f=p1.f, max_length=2 * opt.n + 1,
                  stated=errors.stated)
