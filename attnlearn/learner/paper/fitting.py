r"""Fitting the configurations: the rational fit of each, its residual check and its error.

Used in: chapter 3 (rational head separation: :math:`F(t)-c=\sum_h\gamma_h/(1+\rho_ht)`, the
head count from the first configuration, the residual tolerance) and chapter 5 (the
first-order error bounds of every :math:`(\ell,\gamma)`).

Every configuration's state lives in one :class:`ConfigState` (samples, constant, fitted
poles and residues, their error bounds), indexed like the :class:`~.design.ConfigTable`.
"""

from dataclasses import dataclass

import numpy as np

from ..._arith import to_float
from ...rational.degree import check_residuals, fit_checked, fit_min_degree
from ...rational.family import RationalFit
from ..samples import SampleErrors
from ..samples import sample_errors
from ..samples import scale_back

__all__ = [
    "SampleErrors",
    "sample_errors",
    "scale_back",
    "fit_probe",
    "subset_fit",
    "FitSpec",
    "fit_block_one",
    "fit_at_constants",
    "ConfigState",
    "collect_fits",
]


def fit_probe(nodes, F11, c1, n, *, tol, output_error, method):
    r"""The first configuration's fit at the known constant :math:`c_1`: the canonical head
    count :math:`H'\le n` (minimal degree) and :math:`\max_h|\ell_h|` (for the query scale)."""
    errors = sample_errors(F11, output_error, tol)
    kstar, fit = fit_min_degree(nodes.ts, F11 - c1, n, tol=errors.residual[0], labels=["base(1,1)"], method=method)
    return kstar, (float(np.max(np.abs(to_float(fit.ell)))) if kstar else 0.0)


def subset_fit(fit, idx):
    """The configurations ``idx`` of a :class:`~attnlearn.rational.RationalFit`."""
    return RationalFit(fit.ell[idx], fit.gamma[idx], fit.sens[idx], fit.residual[idx], fit.shift[idx])


@dataclass(frozen=True)
class FitSpec:
    """How the paper design's configurations are fitted: ``H`` heads (the probe's count), the sample
    ``errors`` (:func:`~..samples.sample_errors`: the residual tolerance) and the interpolation
    ``method`` (``learn``'s ``method``).

    Used in: chapters 4 and 7 (through ``learn``)."""

    H: int
    errors: object
    method: str


def fit_block_one(nodes, F, c1, idx, labels, *, spec, pre):
    r"""Fit block 1's configurations ``idx`` at :math:`c_1` as ``spec`` (:class:`FitSpec`) says (or
    check robust mode's fits ``pre``)."""
    if pre is not None:
        fit = subset_fit(pre, idx)
        check_residuals(fit, spec.errors.residual, nodes.m, spec.H, labels=labels.take(idx))
        return fit
    return fit_checked(nodes.ts, F[idx] - c1, spec.H, tol=spec.errors.residual, labels=labels.take(idx),
                       method=spec.method)


def fit_at_constants(nodes, state, idx, labels, *, spec, tol, pre=None):
    """Fit the configurations ``idx`` at their current constants ``state.const`` as ``spec``
    (:class:`FitSpec`) says (or check the fits ``pre``); the residual tolerance adds each
    constant's error bound."""
    m = nodes.m
    res_tol = spec.errors.residual + tol.fit_tolerance(m, state.const_err[idx])
    if pre is not None:
        fit = subset_fit(pre, idx)
        check_residuals(fit, res_tol, m, spec.H, labels=labels.take(idx))
        return fit
    return fit_checked(nodes.ts, state.F[idx] - state.const[idx, None], spec.H, tol=res_tol,
                       labels=labels.take(idx), method=spec.method)


@dataclass
class ConfigState:
    r"""Everything known about each configuration (C rows, in the table's order).

    Attributes
    ----------
    F : array (C, m)
        The samples at the nodes.
    const, const_err : array (C,)
        The constant :math:`c=V^\top q` subtracted from the samples, and its error bound.
    ell, gamma : array (C, H)
        Fitted poles :math:`\ell_h` (increasing) and residues :math:`\gamma_h`.
    sens : array (C, 2, H)
        Row sums of :math:`|J^{-1}|` (per unit of sample error) for :math:`\ell` and :math:`\gamma`.
    residual : array (C,)
        Largest refit residual.
    err_ell, err_gamma : array (C, H)
        First-order error bounds of every :math:`\ell` and :math:`\gamma`.
    """

    F: np.ndarray
    const: np.ndarray
    const_err: np.ndarray
    ell: np.ndarray = None
    gamma: np.ndarray = None
    sens: np.ndarray = None
    residual: np.ndarray = None
    err_ell: np.ndarray = None
    err_gamma: np.ndarray = None

    @classmethod
    def start(cls, F):
        """The state of freshly asked samples ``F``: constants not yet known."""
        return cls(F, np.empty(len(F), dtype=F.dtype), np.zeros(len(F)))

    @property
    def H(self):
        """Number of heads fitted."""
        return self.ell.shape[1]

    def split_block_one(self, table, c1, eps_out):
        r"""Give block 1's base and link configurations the shared query's answer :math:`c_1`
        (error ``eps_out``); returns their positions and those of every other configuration."""
        in1 = table.in_block_one()
        self.const[in1] = c1
        self.const_err[in1] = eps_out
        return np.nonzero(in1)[0], np.nonzero(~in1)[0]


def collect_fits(state, parts, H, eps_out):
    """Store the fits ``parts`` (pairs of a fit and its configurations) in ``state``, then every
    first-order error bound: rows of :math:`|J^{-1}|` times the sample error, where a constant's
    error shifts every sample."""
    C = len(state.F)
    dt = state.F.dtype
    state.ell = np.empty((C, H), dtype=dt)
    state.gamma = np.empty((C, H), dtype=dt)
    state.sens = np.zeros((C, 2, H))
    state.residual = np.zeros(C)
    for src, idx in parts:
        if src is None:
            continue
        state.ell[idx], state.gamma[idx], state.sens[idx] = src.ell, src.gamma, src.sens
        state.residual[idx] = to_float(src.residual)
    err_in = eps_out + state.const_err
    state.err_ell = state.sens[:, 0, :] * err_in[:, None]
    state.err_gamma = state.sens[:, 1, :] * err_in[:, None]
