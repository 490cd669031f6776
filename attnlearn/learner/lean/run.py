r"""The lean design's run (``learn(..., design="lean")``): phase 1, phase 2 per final token, the
solves, the canonical form, the shared finish (:func:`learn_lean`).

Used in: chapter 8.
"""

import contextlib
import math
from dataclasses import dataclass

import mpmath
import numpy as np

from ..._arith import to_mp
from ..finish import Ending, finish, zero_function
from ..heads import canonical_heads
from .design import draw_lean, phase_two_directions
from .fit import phase_one
from .solve import FinalToken, phase_two_block, solve_heads

__all__ = ["LeanDiagnostics", "learn_lean", "FLOAT_WORK_DPS"]

#: float64 mode: the working precision (decimal digits) of everything after phase 1's fits (the
#: root finder's polishing, the solves): far above the data's 16 digits, so that the learner's
#: own rounding never adds to the oracle's.
FLOAT_WORK_DPS = 30


@dataclass
class LeanDiagnostics:
    r"""What the lean design saw.

    Attributes
    ----------
    visible_heads : int
        :math:`m`, the canonical head count found in phase 1.
    scale : float
        The query scale factor set by the first configuration.
    candidates : list of list of int
        Per phase-2 block, the number of real positive roots of each configuration.
    combinations : list of int
        Per block, the combinations the check query examined (0: no check needed).
    check_margin, link_margin : list of float
        Relative residual of the best wrong combination (per check) and pairing (per link).
    root_tries : int
        Random start systems tracked over all configurations (one each when no path is lost).
    root_separation : float
        Smallest relative distance between two roots of one configuration.
    """

    visible_heads: int
    scale: float
    candidates: list
    combinations: list
    check_margin: list
    link_margin: list
    root_tries: int
    root_separation: float


def learn_lean(access, opt, tol, *, extra_sample=False):
    r"""The lean design's pipeline (``learn(..., design="lean")``): phase 1, phase 2 per final
    token, the solves, the canonical form, :func:`~attnlearn.learner.finish.finish` (held-out queries reported
    apart). ``access`` is the checked, counting :class:`attnlearn.protocol.Access`.

    ``extra_sample=True`` is the variant with :math:`m+1` samples per phase-2 configuration
    (:func:`phase_two_block`; at most :math:`(n+1)d^2+nd` queries, plus a check query for a block
    where the extra sample leaves several candidates); it is not an option of :func:`learn`:
    chapter 8 measures it (``python benchmarks/lean.py --float64 --designs lean+1``).

    Used in: chapter 8."""
    with contextlib.nullcontext() if tol.exact else mpmath.workdps(FLOAT_WORK_DPS):
        return _learn_lean(access, opt, tol, extra_sample)


def _learn_lean(access, opt, tol, extra_sample):
    rng = np.random.default_rng(opt.seed)
    start, d = access.queries, opt.d
    dirs = draw_lean(rng, d)
    q0 = to_mp(dirs.q[0])
    p1, errors = phase_one(access, dirs, q0, opt.n, heads_given=opt.heads_given, spread=opt.spread,
                           output_error=opt.output_error, tol=tol)
    if p1.m == 0:
        return _finish_zero(access, p1, errors, start, opt, rng, tol)
    Q = np.empty((d, d), dtype=object)
    Q[:, 0] = q0
    blocks = []
    for j in range(1, d):
        qj = to_mp(dirs.q[j] * math.sqrt(p1.f))
        Q[:, j] = qj
        Uj = to_mp(phase_two_directions(rng, p1.v, d) * math.sqrt(p1.f))
        block = FinalToken(j, qj, q0, Uj, dirs.weights[j - 1], eps=2 * errors.output)
        blocks.append(phase_two_block(access, block, p1, rng=rng, tol=tol, extra_sample=extra_sample))
    heads = solve_heads(p1, blocks, Q, 2 * errors.output)
    model, estimate = canonical_heads(heads, p1.v, p1.err_v, tol=tol)
    diag = LeanDiagnostics(
        visible_heads=p1.m, scale=p1.f, candidates=[[len(c) for c in b.candidates] for b in blocks],
        combinations=[b.combinations for b in blocks], check_margin=[b.margin for b in blocks if b.combinations],
        link_margin=p1.link_margin, root_tries=sum(b.tries for b in blocks),
        root_separation=min((b.separation for b in blocks), default=math.inf))
    return finish(access, _ending(access, start, model, diag, estimate, errors, p1.f, p1.rescaled), opt=opt,
                  rng=rng, tol=tol)


def _finish_zero(access, p1, errors, start, opt, rng, tol):
    """No canonical head: the zero function (phase 1 alone), checked like any return."""
    diag = LeanDiagnostics(0, p1.f, [], [], [], [], 0, math.inf)
    model = zero_function(opt.d, output_error=opt.output_error, eps_out=errors.output, exact=tol.exact)
    return finish(access, _ending(access, start, model, diag, 0.0, errors, p1.f, p1.rescaled), opt=opt,
                  rng=rng, tol=tol)


def _ending(access, start, model, diag, estimate, errors, f, rescaled):
    """The lean design's :class:`~attnlearn.learner.finish.Ending`: every query since ``start`` is
    the design's, but the ``rescaled`` ones of a small layer's base(1) asked again. Used in:
    chapter 8."""
    queries = {"design": access.queries - start - rescaled, "constants": 0, "redraws": 0, "holdout": 0}
    if rescaled:  # base(1) asked again at a small layer's scale (chapter 7), apart from the design's count
        queries["scale"] = rescaled
    return Ending(model, queries, diag, estimate=estimate, eps_out=errors.output, f=f,
                  max_length=access.max_length, stated=errors.stated)
