r"""What the learner returns: :class:`Recovery` and its typed :class:`Diagnostics`.

Used in: chapter 4 (the counts and the diagnostics of one run), chapter 5 (the error estimate,
the sensitivity :math:`K` of claim C8, the margins of the matchings) and chapter 6 (step 1 of the
Transformer learner).
"""

from dataclasses import dataclass, fields

import mpmath
from .cost import query_budget

__all__ = ["Diagnostics", "Recovery", "query_budget"]


@dataclass
class Diagnostics:
    r"""Per-configuration diagnostics of :func:`attnlearn.learn`, the same fields on every path.

    A field that a path does not produce is None: the matchings' fields with no head or in
    :math:`d=1`, ``calibration`` outside the paper's budget. Also readable as
    ``diagnostics["labels"]`` (the mapping style of earlier versions).

    Attributes
    ----------
    labels : Sequence of str
        Configuration names, ``base(k,j)``, ``link(k,j)``, ``cross(k)`` (counted from 1).
    pairs : list of (int, int)
        The node pairs :math:`(s,t)` of every configuration.
    interp_residual : array (C,)
        Largest refit residual of each configuration.
    condition : array (C,)
        Largest row sum of :math:`|J^{-1}|` of each configuration.
    scale : dict
        The query scale: ``probe_max_abs_ell`` (the probe's :math:`\max_h|\ell_h|`) and ``factor``;
        the paper's design adds ``probe_scales`` (each probe's scale) and ``rule``, ``"search"``
        when the probe found the layer small (or ``scale="search"``), else ``"probe"``
        (:mod:`~.paper.scale`).
    V : array (d,)
        :math:`V=\sum_hv_h` learned from block 1.
    calibration : dict or None
        The constants' calibration (paper budget): Newton ``steps``, total ``change`` and ``bound``.
    redrawn : Sequence of str
        Robust mode: the configurations redrawn (in the order redrawn; empty otherwise).
    redrawn_blocks : list of str
        Robust mode: the blocks redrawn with a new final token.
    link_residual, link_margin : array or None
        Per link: scaled matching residual and margin to the nearest wrong pairing.
    cross_residual, cross_margin : array or None
        The same per cross configuration.
    fallback : str or None
        Robust mode with long queries allowed: the paper design's error when the recovery fell
        back to the long design (``learn``'s ``max_length``); None otherwise.
    holdout_chi2 : float or None
        ``design="long"``: :math:`T/m`, the held-out answers' squared residuals over the
        variances the design's covariance predicts, averaged (its mean is 1 when the covariance
        holds, but the residuals share the parameters' errors, so it spreads far more than a
        :math:`\chi^2_m/m`; a significant excess raised the estimate,
        :func:`~attnlearn.learner.certificate.confront_spread`); None on the other designs,
        whose ``Recovery.certificate`` holds theirs.
    ranks : list of int or None
        ``design="long"`` with ``rank=``: each head's rank, certified from the groups
        (:class:`~attnlearn.learner.long.rank.RowSpans`); None otherwise.
    """

    labels: object
    pairs: list
    interp_residual: object
    condition: object
    scale: dict
    V: object
    redrawn: object
    redrawn_blocks: list
    calibration: dict = None
    link_residual: object = None
    link_margin: object = None
    cross_residual: object = None
    cross_margin: object = None
    fallback: str = None
    holdout_chi2: float = None
    ranks: list = None

    def record_matchings(self, *, link, cross):
        """Fill in the matchings' residuals and margins (``link``, ``cross``: a
        :class:`attnlearn.matching.Matching` or None), once there are heads to match.

        Used in: chapters 4 and 7 (through ``learn``)."""
        for name, mt in (("link", link), ("cross", cross)):
            if mt is not None:
                setattr(self, f"{name}_residual", mt.residual)
                setattr(self, f"{name}_margin", mt.margin)

    def __getitem__(self, key):
        if key not in self:
            raise KeyError(key)
        return getattr(self, key)

    def __contains__(self, key):
        return key in self.keys()

    def keys(self):
        """Every field name (a field absent on this path is None)."""
        return [f.name for f in fields(self)]


@dataclass(repr=False)
class Recovery:
    r"""What :func:`learn` recovered, and how far to trust it.

    Attributes
    ----------
    model : MultiHeadAttention or AttentionLayer
        The canonical model recovered (mpmath entries in exact mode), heads in
        :func:`canonical` order; with ``learn(bias=True)`` a scalar
        :class:`attnlearn.layer.AttentionLayer` with score biases ``c`` and offset ``b``.
    heads : int
        Number of canonical heads found (possibly 0).
    queries : dict
        ``design`` (the paper's :math:`4nd^2-2n+1`; the long design's count of
        :func:`~attnlearn.learner.cost.long_cost`, with ``rank=`` at most that), ``constants`` (robust mode's extra
        constant queries), ``redraws`` (robust mode's redrawn configurations and block
        constants; the long design's groups drawn again and its anchors' later candidates),
        ``holdout`` (verification queries) and ``total``; after robust mode's
        fallback to the long design also ``abandoned`` (the queries of the attempt whose result
        is not returned, in the total).
    max_length : int
        Longest query asked by the design.
    output_error : float or mpmath.mpf
        The absolute output error :math:`\varepsilon` assumed for every oracle answer (an
        mpmath number in exact mode beyond 100 digits, where float64 would underflow).
    error_estimate : float or mpmath.mpf
        Estimate of the relative parameter error (as measured by :func:`param_error`; by
        :func:`~attnlearn.learner.paper.bias.bias_error` with ``bias=True``). What it guarantees
        depends on the path (chapter 5):

        * float64, ``design="paper"`` or ``"lean"``: the model is refitted over every answer
          asked and the estimate is a **high-probability bound under the linearised model**
          (:mod:`attnlearn.learner.certificate`): with the answers' errors independent, of the
          spread measured from the refit's residuals, the error exceeds it with probability at
          most :math:`10^{-6}` to first order; held-out queries check the model and raise it when
          they disagree. Chapter 5 measures how often it holds and how close it is (``certificate``
          says how it was made).
        * exact mode: a **first-order bound**, twice the design's error bounds propagated
          stage by stage with absolute values (an mpmath number beyond 100 digits).
        * ``design="long"``: an **estimate**, three times the root-mean-square error that the
          inverse Fisher information of its fits gives, then confronted with the held-out
          answers (:func:`~attnlearn.learner.certificate.confront_spread`): when their residuals
          exceed the spread that covariance predicts (a :math:`\chi^2` beyond its upper
          :math:`10^{-3}` quantile, ``diagnostics.holdout_chi2``), the estimate is raised by the
          excess. Chapters 5b and 7 measure how often it holds.

        With a stated ``output_error``, ``learn`` raises instead of returning when some
        configuration's first-order perturbation exceeds 0.1, where first-order reasoning stops
        meaning anything, and any path raises when the estimate exceeds 1.
    sensitivity : float
        ``error_estimate / output_error``: the constant :math:`K` of claim C8.
    holdout_error : float or None
        Largest relative discrepancy between the recovered model and the oracle on
        held-out random queries (float64 mode).
    diagnostics : Diagnostics
        Per-configuration diagnostics (:class:`Diagnostics`).
    verified : bool
        True when the result passed the verification stage: check queries predicted by the
        fits (:mod:`attnlearn.learner.verify`) and held-out random sequences, together
        ``holdout`` queries; False when ``holdout=0`` was asked for.
    certificate : Certificate or None
        How the estimate was made (:class:`attnlearn.learner.certificate.Certificate`): every
        float64 recovery of the paper's and the lean design is refitted over all its answers;
        None in exact mode, for the long design, and where the refit does not apply (no head,
        a problem beyond ``CertificateTolerances.max_work``, a rank-deficient Jacobian).
    """

    model: object
    heads: int
    queries: dict
    max_length: int
    output_error: float
    error_estimate: float
    sensitivity: float
    holdout_error: float
    diagnostics: Diagnostics
    verified: bool = False
    certificate: object = None

    def __repr__(self):
        return (
            f"Recovery(heads={self.heads}, d={self.model.d}, queries={self.queries['total']}, "
            f"max_length={self.max_length}, error_estimate={mpmath.nstr(self.error_estimate, 2)})"
        )
