r"""The first stages of the paper's design, shared by ``learn`` and ``learn(bias=True)``.

Used in: chapter 4 (the design, its fits and checks, as :func:`attnlearn.learn` runs them) and
chapter 7 (the same stages for a biased layer: one more block, :math:`V` from the residues).

:func:`fit_design` runs, in order (chapters 3 and 4):

1. :func:`ask_scaled_design`: the shared query and the probe configuration set the scale
   (:func:`.scale.find_scale`), then every configuration of the design is asked
   (:func:`.design.build_design`, :func:`.asking.ask_design`);
2. :func:`ask_robust_constants`, robust mode: the block constants are asked and ill-conditioned
   configurations redrawn (:func:`.robust.redraw`);
3. :func:`fit_with_constants`: block 1 is fitted at :math:`c_1`, which gives :math:`V`
   (:func:`.constants.solve_V`, or from the residues with biases,
   :func:`.constants.solve_V_biased`), hence every other constant, and the rest is fitted
   (:func:`.constants.fit_calibrated`);
4. the fits are checked (:func:`.checks.check_fits`) and must predict check queries
   (:func:`.verify.verify_fits`, counted as held out).

What follows -- labelling, solves, the model -- differs between the two (``paper.run.run``,
``bias.learn_biased``) and reads the :class:`FittedDesign` this returns.
"""

from dataclasses import dataclass

import numpy as np

from ..._arith import to_mp
from ..asking import ask_constants, ask_design
from ..finish import Ending, finish
from .checks import check_fits
from .constants import fit_calibrated, set_constants, solve_V, solve_V_biased
from ..nodes import node_pairs
from .design import build_design, draw_directions
from .fitting import ConfigState, FitSpec, collect_fits, fit_block_one
from ..samples import sample_errors
from ..results import Diagnostics
from .robust import redraw
from .scale import find_scale
from .verify import verify_fits

__all__ = ["FittedDesign", "fit_design", "finish_design", "AskedDesign", "ask_scaled_design", "ask_robust_constants",
           "fit_with_constants"]


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
    (``opt.family`` affine: the biased design of :mod:`.bias`).

    Parameters
    ----------
    oracle : Access
        The checked, counted oracle access (:class:`attnlearn.protocol.Access`).
    opt : PaperOptions
        ``learn``'s validated options (:func:`..options.build_options`).
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
    nodes = node_pairs(opt.n, opt.nodes)
    asked = ask_scaled_design(oracle, opt, tol, rng=rng, nodes=nodes)
    cq, pre = ask_robust_constants(oracle, opt, tol, asked, rng=rng, nodes=nodes)
    errors, V, calib = fit_with_constants(opt, tol, asked, cq, pre, nodes=nodes)
    check_fits(asked.state, asked.design.labels, opt.n, heads_given=opt.heads_given, output_error=opt.output_error,
               eps_out=errors.output, tol=tol)
    # verification, part 1: check queries that the fits must predict (counted as held out)
    asked.queries["holdout"] = verify_fits(oracle, asked.design, asked.state, nodes, count=opt.holdout,
                                           eps_out=errors.output, tol=tol)
    return FittedDesign(rng=rng, nodes=nodes, design=asked.design, state=asked.state, H=asked.probe.H,
                        c1=asked.probe.c1, V=V, errors=errors, queries=asked.queries, pre=pre,
                        diagnostics=_diagnostics(asked, nodes, V=V, pre=pre, calib=calib))


def finish_design(oracle, fitted, model, estimate, *, opt, tol):
    """The last stage after :func:`fit_design`'s and the solves: :func:`.checks.finish` (held-out
    queries, the estimate's check, the :class:`~.results.Recovery`) with what ``fitted`` knows.

    Used in: chapters 4 and 7 (through ``learn``)."""
    ending = Ending(model, fitted.queries, fitted.diagnostics, estimate=estimate, eps_out=fitted.errors.output,
                    f=fitted.design.f, max_length=fitted.nodes.max_length, stated=fitted.errors.stated)
    return finish(oracle, ending, opt=opt, rng=fitted.rng, tol=tol)


@dataclass
class AskedDesign:
    """Stage 1's result: the probe (scale, :math:`c_1`, head count), the design, every
    configuration's samples (``state``) and the counts so far."""

    probe: object
    design: object
    state: ConfigState
    queries: dict


def ask_scaled_design(oracle, opt, tol, *, rng, nodes):
    """Stage 1: the shared query and a probe configuration set the scale
    (:func:`.scale.find_scale`), then every configuration of the design is asked.
    Returns an :class:`AskedDesign`. Used in: chapters 4 and 7 (through ``learn``)."""
    start = oracle.queries
    dirs = draw_directions(rng, opt.d, family=opt.family)
    conv = to_mp if tol.exact else (lambda a: np.asarray(a, dtype=float))
    q1, u11 = conv(dirs.q[0]), conv(dirs.base[0, 0])
    probe = find_scale(oracle, q1, u11, nodes, opt=opt, rng=rng, tol=tol)
    design = build_design(dirs, probe.q1, probe.u11, probe.f, exact=tol.exact, family=opt.family)
    state = ConfigState.start(ask_design(oracle, design, probe.F11, nodes))
    queries = {"design": oracle.queries - start - probe.queries, "constants": 0, "redraws": 0, "holdout": 0}
    if probe.queries:  # re-probes of the scale search (attnlearn.learner.scale), beyond the paper's count
        queries["scale"] = probe.queries
    return AskedDesign(probe=probe, design=design, state=state, queries=queries)


def ask_robust_constants(oracle, opt, tol, asked, *, rng, nodes):
    """Stage 2, robust mode only: every other block's constant asked, ill-conditioned
    configurations and blocks redrawn (:func:`.robust.redraw`). Returns ``(cq, pre)`` (None,
    None outside robust mode) and counts them in ``asked.queries``.
    Used in: chapters 4, 5 and 7 (through ``learn(robust=True)``)."""
    B, H = asked.design.table.B, asked.probe.H  # blocks: d, or d + 1 with biases
    if not (opt.robust and B > 1):
        return None, None
    cq = ask_constants(oracle, asked.probe.c1, asked.design.q)
    asked.queries["constants"] = B - 1
    if H == 0:
        return cq, None
    eps_in = 2 * sample_errors(asked.state.F, opt.output_error, tol).output  # the sample's and the constant's
    pre = redraw(asked, cq, nodes, ask=oracle, rng=rng, opt=opt, eps_in=eps_in, tol=tol)
    asked.queries["redraws"] = pre.queries
    return cq, pre


def fit_with_constants(opt, tol, asked, cq, pre, *, nodes):
    r"""Stage 3: block 1 fitted at :math:`c_1` gives :math:`V` (from :math:`F(0)=V^\top x`, or
    with biases from its residues), hence every other constant (unless robust mode asked
    them), and every other configuration is fitted (calibrated with the paper's budget).
    Returns ``(errors, V, calib)``; the fits are in ``asked.state``.
    Used in: chapters 4 and 7 (through ``learn``)."""
    design, state, H, c1, d = asked.design, asked.state, asked.probe.H, asked.probe.c1, opt.d
    errors = sample_errors(state.F, opt.output_error, tol)
    idx1, rest = state.split_block_one(design.table, c1, errors.output)
    spec, pre_fits = FitSpec(H, errors, opt.method), None if pre is None else pre.fits
    fit1 = fit_block_one(nodes, state.F, c1, idx1, design.labels, spec=spec, pre=pre_fits)
    if opt.family.affine:  # V from block 1's residues (F(0) carries the offset); constants c_1 + V^T (q_k - q_1)
        V = solve_V_biased(design, fit1, idx1, H=H, eps_out=errors.output)
        if cq is None:
            cq = np.array([c1] + [c1 + (design.q[k] - design.q[0]).dot(V.V) for k in range(1, design.table.B)],
                          dtype=state.F.dtype)
    else:  # V from block 1's F(0) = V^T x; constants V^T q_k
        V = solve_V(design, fit1, idx1, c1, H=H, eps_out=errors.output)
        if cq is None:
            cq = np.array([design.Q[:, k].dot(V.V) for k in range(d)], dtype=state.F.dtype)
    set_constants(state, design, cq, asked=opt.robust, Verr=V.err, eps_out=errors.output)
    fit_rest, calib = fit_calibrated(nodes, state, design, rest, spec=spec, tol=tol, pre=pre_fits,
                                     calibrate=not opt.robust and H > 0 and d > 1) if len(rest) else (None, None)
    collect_fits(state, [(fit1, idx1), (fit_rest, rest)], H, errors.output)
    return errors, V, calib


def _diagnostics(asked, nodes, *, V, pre, calib):
    """The :class:`~.results.Diagnostics` known once every configuration is fitted (the matchings'
    fields are filled in later, when there are heads to match)."""
    state, design, probe = asked.state, asked.design, asked.probe
    return Diagnostics(
        labels=design.labels, pairs=nodes.pairs, interp_residual=state.residual,
        condition=state.sens.reshape(len(state.F), -1).max(axis=1) if probe.H else np.zeros(len(state.F)),
        scale={"probe_max_abs_ell": probe.max_abs_ell, "factor": design.f, "probe_scales": probe.scales,
               "rule": "search" if probe.searched else "probe"}, V=V.V,
        redrawn=pre.redrawn if pre is not None else [], redrawn_blocks=pre.blocks if pre is not None else [],
        calibration=None if calib is None else calib.summary())
