r"""The rank design's blocks after the first: configurations asked and fitted at a known constant
(:func:`fit_block`), then labelled by their heights (:func:`label_by_heights`).

Used in: chapter 9 (real sizes) and ``benchmarks/rank.py``.

Once block 1 has given every :math:`v_h`, a configuration :math:`(u,q)` needs no link: its
step heights are :math:`\gamma_h=-u^\top v_h`, known before it is asked, so matching the fitted
heights to the predicted ones labels its heads. Each block asks its constant :math:`V^\top q`
(one query).
"""

from dataclasses import dataclass

import numpy as np

from ..._arith import to_float
from ...matching import match_candidates
from ...rational.degree import fit_checked
from ..asking import ask_nodes
from ..heads import check_significant
from ..paper.labelling import scales
from ..samples import sample_errors

__all__ = ["BlockFit", "fit_block", "LabelledPoles", "label_by_heights"]


@dataclass
class BlockFit:
    r"""One block's configurations (rows of ``U``, final token ``q``) fitted: poles ``ell`` and
    heights ``gamma`` (C, m), unlabelled (increasing :math:`\ell`), with their first-order bounds
    ``err_ell``, ``err_gamma``; ``eps_out`` the samples' output error."""

    U: np.ndarray
    q: np.ndarray
    ell: np.ndarray
    gamma: np.ndarray
    err_ell: np.ndarray
    err_gamma: np.ndarray
    eps_out: float


def fit_block(ask, U, q, *, m, nodes, output_error, tol, name):
    r"""Ask the block's constant :math:`V^\top q` (the one-token query :math:`(q)`) and the
    configurations ``U`` (C, d) with final token ``q`` at the ``nodes``, and fit each at degree
    ``m`` after the constant.

    The constant is asked, not computed from block 1's :math:`V`: a derived constant carries
    :math:`V`'s error into every sample, and the fits amplify it (in exact mode it dominated the
    samples' own error by ten decades); one query per block removes it.

    Raises
    ------
    InconsistentHeadCountError
        A fit's residual beyond its tolerance (more heads than ``m``; the samples overdetermine
        the fit only when :math:`m<n`).
    IllConditionedError
        Exact mode: a vanishing height or two coinciding poles
        (:func:`~attnlearn.learner.heads.check_significant`)."""
    C = len(U)
    labels = [f"{name}, configuration {i + 1}" for i in range(C)]
    c = ask(q[None, None, :], f"{name}'s constant (q)")[0]
    F = ask_nodes(ask, U, q[None], np.zeros(C, dtype=int), nodes.pairs, name)
    errors = sample_errors(F, output_error, tol)
    c_err = errors.output
    fit = fit_checked(nodes.ts, F - c, m, tol=errors.residual + tol.fit_tolerance(nodes.m, c_err), labels=labels)
    err_in = errors.output + c_err
    err_ell, err_gamma = fit.sens[:, 0, :] * err_in, fit.sens[:, 1, :] * err_in
    if tol.exact:
        check_significant(to_float(fit.ell), to_float(fit.gamma), err_ell, err_gamma, labels, S=tol.significance)
    return BlockFit(U, q, fit.ell, fit.gamma, err_ell, err_gamma, errors.output)


@dataclass
class LabelledPoles:
    r"""A block's poles in the heads' order: ``ell`` (C, m), ``err_ell`` (C, m); the height
    matching's largest scaled ``residual`` and ``margin`` to the nearest wrong assignment."""

    ell: np.ndarray
    err_ell: np.ndarray
    residual: float
    margin: float


def label_by_heights(fit, v, err_v, *, tol, name):
    r"""Label a block's heads by their heights: head :math:`a` is the fitted pair whose height is
    nearest :math:`-u^\top v_a` (an assignment, :func:`~attnlearn.matching.match_candidates`),
    within ``tol.match_safety`` times the first-order bounds of both, with every wrong
    assignment farther than ``tol.ambiguity`` times the residual.

    Raises
    ------
    UnmatchedHeadsError
        No assignment within the tolerance, or two."""
    C, m = fit.ell.shape
    pred = -(fit.U @ v.T)  # (C, m): head a's height in each configuration
    err_pred = np.abs(to_float(fit.U)) @ err_v.T
    P = np.empty((C, m, m, 2), dtype=fit.ell.dtype)
    P[..., 0] = fit.ell[:, None, :]  # candidate (a, b): the fitted pole b with head a's height
    P[..., 1] = pred[:, :, None]
    O = np.stack([fit.ell, fit.gamma], axis=2)
    sc = scales(O, tol=tol)
    within = tol.match_safety * ((err_pred + fit.err_gamma.max(axis=1, keepdims=True)) / sc[:, 1:]).max(axis=1)
    mt = match_candidates(P, O, sc, tol=within, ambiguity=tol.ambiguity,
                          labels=[f"{name}, configuration {i + 1}" for i in range(C)])
    rows = np.arange(C)[:, None]
    return LabelledPoles(fit.ell[rows, mt.perm], fit.err_ell[rows, mt.perm], float(np.max(mt.residual)),
                         float(np.min(mt.margin)))
