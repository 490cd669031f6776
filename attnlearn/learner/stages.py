r"""The first stages of the paper's design, shared by ``learn`` and ``learn(bias=True)``.

Used in: chapter 4 (the design, its fits and checks, as :func:`attnlearn.learn` runs them) and
chapter 7 (the same stages for a biased layer: one more block, :math:`V` from the residues).

:func:`fit_design` runs, in order (DESIGN §4):

1. the shared query and the probe configuration set the scale (:func:`.scale.find_scale`), then
   every configuration of the design is asked (:func:`.design.build_design`,
   :func:`.asking.ask_design`);
2. robust mode: the block constants are asked and ill-conditioned configurations redrawn
   (:func:`.robust.redraw`);
3. block 1 is fitted at :math:`c_1`, which gives :math:`V` (:func:`.constants.solve_V`, or from the
   residues with biases, :func:`.constants.solve_V_biased`), hence every other constant, and the
   rest is fitted (:func:`.constants.fit_calibrated`);
4. the fits are checked (:func:`.checks.check_fits`) and must predict check queries
   (:func:`.verify.verify_fits`, counted as held out).

What follows -- labelling, solves, the model -- differs between the two (``pipeline._pipeline``,
``bias.learn_biased``) and reads the :class:`FittedDesign` this returns.
"""

from dataclasses import dataclass

import numpy as np

from .._arith import to_mp
from .asking import ask_constants, ask_design
from .checks import check_fits
from .constants import fit_calibrated, set_constants, solve_V, solve_V_biased
from .design import build_design, draw_directions, node_pairs
from .fitting import ConfigState, collect_fits, fit_block_one, sample_errors
from .results import Diagnostics
from .robust import redraw
from .scale import find_scale
from .verify import verify_fits

__all__ = ["FittedDesign", "fit_design"]


@dataclass
class FittedDesign:
    r"""What the first stages know: the design and every configuration's checked fit.

    Attributes
    ----------
    rng : numpy.random.Generator
        The learner's random stream (the held-out queries draw from it next).
    nodes : NodePairs
        The nodes :math:`t` and the longest query (:func:`.design.node_pairs`).
    design : Design
        Directions, final tokens, the configuration table and the scale ``f``.
    state : ConfigState
        Every configuration's samples, constant and fit.
    H : int
        Canonical heads found by the probe.
    c1 : float or mpf
        The shared query's answer (block 1's constant).
    V : VSolution
        :math:`V=\sum_hv_h` and its bound.
    errors : SampleErrors
        The samples' output error (``errors.output``) and what the user stated.
    queries : dict
        The counts so far (``design``, ``constants``, ``redraws``, ``holdout``, and ``scale``
        when the scale search re-probed).
    pre : Redraws or None
        Robust mode's redrawn fits and link equations.
    diagnostics : Diagnostics
        Per-configuration diagnostics (the matchings' fields are filled in later).

    Used in: chapters 4 and 7 (through ``learn``).
    """

    rng: np.random.Generator
    nodes: object
    design: object
    state: ConfigState
    H: int
    c1: object
    V: object
    errors: object
    queries: dict
    pre: object
    diagnostics: Diagnostics


def fit_design(oracle, opt, tol):
    r"""Stages 1-4 of the paper's design (module docstring) for ``learn``'s options ``opt``
    (``opt.bias``: the biased design of :mod:`.bias`).

    Parameters
    ----------
    oracle : Access
        The checked, counted oracle access (:class:`attnlearn.protocol.Access`).
    opt : Options
        ``learn``'s validated options (:func:`.pipeline._options`).
    tol : Tolerances
        The mode's tolerances (:meth:`.tolerances.Tolerances.for_mode`).

    Returns
    -------
    FittedDesign

    Raises
    ------
    RecoveryError
        A fit, the head count or a check query fails (as :func:`attnlearn.learn`).

    Used in: chapters 4 and 7 (through ``learn``).
    """
    rng = np.random.default_rng(opt.seed)
    start, d = oracle.queries, opt.d
    nodes = node_pairs(opt.n, opt.nodes)
    # ---- design: the shared query and a probe configuration set the scale, then every configuration
    dirs = draw_directions(rng, d, bias=opt.bias)
    conv = to_mp if tol.exact else (lambda a: np.asarray(a, dtype=float))
    q1, u11 = conv(dirs.q[0]), conv(dirs.base[0, 0])
    probe = find_scale(oracle, q1, u11, nodes, n=opt.n, heads_given=opt.heads_given, spread=opt.spread, rng=rng,
                       tol=tol, output_error=opt.output_error, method=opt.method, search=opt.scale == "search")
    c1, F11, H = probe.c1, probe.F11, probe.H
    design = build_design(dirs, probe.q1, probe.u11, probe.f, exact=tol.exact, bias=opt.bias)
    B = design.table.B  # blocks: d, or d + 1 with biases
    state = ConfigState.start(ask_design(oracle, design, F11, nodes))
    queries = {"design": oracle.queries - start - probe.queries, "constants": 0, "redraws": 0, "holdout": 0}
    if probe.queries:  # re-probes of the scale search (attnlearn.learner.scale), beyond the paper's count
        queries["scale"] = probe.queries
    # ---- robust mode: block constants asked, ill-conditioned configurations redrawn
    cq, pre = None, None
    if opt.robust and B > 1:
        cq = ask_constants(oracle, c1, design.q)
        queries["constants"] = B - 1
        if H > 0:
            eps_in = 2 * sample_errors(state.F, opt.output_error, tol).output  # the sample's and the constant's
            pre = redraw(design, state.F, cq, nodes, H=H, rng=rng, ask=oracle, method=opt.method, eps_in=eps_in,
                         rounds=opt.redraw_rounds, tol=tol)
            queries["redraws"] = pre.queries
    # ---- constants and fits: block 1 at c_1 gives V, hence every other constant
    errors = sample_errors(state.F, opt.output_error, tol)
    idx1, rest = state.split_block_one(design.table, c1, errors.output)
    fit_kw = dict(H=H, errors=errors, pre=None if pre is None else pre.fits, method=opt.method)
    fit1 = fit_block_one(nodes, state.F, c1, idx1, design.labels, **fit_kw)
    if opt.bias:  # V from block 1's residues (F(0) carries the offset); constants c_1 + V^T (q_k - q_1)
        V = solve_V_biased(design, fit1, idx1, H=H, eps_out=errors.output)
        if cq is None:
            cq = np.array([c1] + [c1 + (design.q[k] - design.q[0]).dot(V.V) for k in range(1, B)],
                          dtype=state.F.dtype)
    else:  # V from block 1's F(0) = V^T x; constants V^T q_k
        V = solve_V(design, fit1, idx1, c1, H=H, eps_out=errors.output)
        if cq is None:
            cq = np.array([design.Q[:, k].dot(V.V) for k in range(d)], dtype=state.F.dtype)
    set_constants(state, design, cq, asked=opt.robust, Verr=V.err, eps_out=errors.output)
    fit_rest, calib = fit_calibrated(nodes, state, design, rest, tol=tol, calibrate=not opt.robust and H > 0 and d > 1,
                                     **fit_kw) if len(rest) else (None, None)
    collect_fits(state, [(fit1, idx1), (fit_rest, rest)], H, errors.output)
    check_fits(state, design.labels, opt.n, heads_given=opt.heads_given, output_error=opt.output_error,
               eps_out=errors.output, tol=tol)
    # ---- verification, part 1: check queries that the fits must predict (counted as held out)
    queries["holdout"] = verify_fits(oracle, design, state, nodes, count=opt.holdout, eps_out=errors.output, tol=tol)
    diag = Diagnostics(
        labels=design.labels, pairs=nodes.pairs, interp_residual=state.residual,
        condition=state.sens.reshape(len(state.F), -1).max(axis=1) if H else np.zeros(len(state.F)),
        scale={"probe_max_abs_ell": probe.max_abs_ell, "factor": design.f, "probe_scales": probe.scales}, V=V.V,
        redrawn=pre.redrawn if pre is not None else [], redrawn_blocks=pre.blocks if pre is not None else [],
        calibration=None if calib is None else calib.summary())
    return FittedDesign(rng=rng, nodes=nodes, design=design, state=state, H=H, c1=c1, V=V, errors=errors,
                        queries=queries, pre=pre, diagnostics=diag)
