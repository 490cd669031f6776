r"""Finding the query scale from what the probe observes (chapters 4 and 7).

Used in: chapter 4 (the query scale of the design) and chapter 7 (PyTorch's small default
initialisation).

The poles of a configuration sit at :math:`-1/\rho_h`, :math:`\rho_h=e^{\ell_h}`,
:math:`\ell_h=u^\top W_hq`; the learner wants them spread about ``spread``
(:math:`\max_h|\ell_h|\approx` ``spread``). The probe configuration base(1,1) (:math:`|u|,|q_1|
\approx1`) measures :math:`\max_h|\ell_h|` and the design is scaled by
:math:`f=\mathrm{spread}/\max_h|\ell_h|`.

A single probe at unit scale and a factor clipped to :math:`[1/16,4]` (the rule of
``learn(scale="probe")``) cannot serve a layer whose :math:`\ell` are tiny: PyTorch's default
initialisation gives :math:`\max|\ell|` of 0.001-0.08 at :math:`d=16`, the poles crowd at
:math:`-1`, and with :math:`H=4` the probe's own fit fails in float64. ``scale="search"``
changes the rule in two places:

* **a wide factor when the poles can crowd.** When the probe finds :math:`H'\ge2` heads the
  factor may reach ``tol.scale_wide`` (64) instead of 4. One head cannot crowd, and a single
  :math:`|\ell|` is small by chance far more often than the largest of two or more (a factor set
  by a chance-small one throws the typical configuration's poles far out): with
  :math:`H'\le1` the old clip stays.
* **re-probing when the probe's poles crowd**: its fit fails (a
  :class:`~attnlearn.errors.RecoveryError`) or, with ``heads=n`` given, it finds fewer than
  :math:`n` heads (two poles closer than the arithmetic resolves look like one): a fresh final token :math:`q_1` (unit scale; its shared query asked again)
  and a fresh :math:`u` at 16 times the scale (``tol.scale_step``; :math:`\ell` grows with
  :math:`|u|`, exactly), at most ``tol.scale_rounds`` times and never beyond
  ``tol.scale_max``; when none fits the last failure is raised, and when every probe finds
  fewer heads the last one is kept (a model with merged heads costs the re-probes, no more). A fresh :math:`q_1` because two
  heads with nearly equal :math:`W_hq_1` crowd every configuration of block 1, which robust
  mode's redraws cannot replace. The probe that fits is the design's base(1,1) and its shared
  query the design's (both part of the paper's count :math:`4nd^2-2n+1`); each failed probe
  costs :math:`2n+1` queries, reported in ``recovery.queries["scale"]``.

``learn``'s default, ``scale="auto"``, uses the search only for a layer the probe finds
**small**: the first probe's :math:`\max_h|\ell_h|` (at unit scale; when its fit fails, the
:math:`|\ell|` of a one-pole fit, :func:`probe_spread`) below ``spread`` / 256
(``tol.scale_small``), where even the clipped factor 4 would leave every pole within
``spread`` / 64 of the others, and resolved above the samples' error (:func:`is_small`: noise
that makes the probe's fit fail says nothing about the layer's scale). Layers initialised :math:`\mathcal N(0,0.02^2)` (GPT-2's and
BERT's convention) have :math:`\max|\ell|` of about :math:`10^{-4}`-:math:`2\cdot10^{-3}` at
:math:`d=16`; the paper's random models at :math:`d\le16` (chapter 4) at least 0.026 (100 probes
per :math:`(d,H)`, :math:`H\ge2`), and on them ``"auto"`` is ``"probe"``: the search everywhere would
cost them accuracy (its wide factor moved the paper budget's median of chapter 4's frontier at
:math:`(d,H)=(8,2)` from below :math:`10^{-6}` to :math:`4\cdot10^{-6}`). PyTorch's default
initialisation lies between (0.0025-0.09 at :math:`d=16`, :math:`H=2`): a few of its layers
are searched. ``scale="probe"`` is the clipped rule always, ``scale="search"`` the search
always. Exact mode always keeps the clipped rule (its digits resolve crowded poles, and the
count stays exactly the paper's, claim C6).
"""

from dataclasses import dataclass

import numpy as np

from ..._arith import to_float
from ...errors import RecoveryError
from ...rational.degree import fit_known_degree
from ..asking import ask_probe
from ..nodes import unit_rows
from .fitting import fit_probe, sample_errors

__all__ = ["Probe", "find_scale", "is_small", "probe_spread", "small_layer"]


@dataclass(frozen=True)
class Probe:
    r"""What the scale search leaves to the design (built by :func:`find_scale`; every
    parameter is kept as the attribute of the same name).

    Parameters
    ----------
    c1 : number
        :math:`c_1=V^\top q_1`, the shared query's answer.
    q1 : array (d,)
        The design's first final token :math:`q_1` (the last probe's).
    F11 : array (1, 2n)
        The last probe's samples: the design's configuration base(1,1).
    u11 : array (d,)
        Its :math:`u` (as asked).
    H : int
        Canonical head count of the last probe's fit.
    max_abs_ell : float
        Its :math:`\max_h|\ell_h|`.
    f : float
        The design's scale factor.
    scales : list of float
        The scale :math:`s` of every probe, in order (``[1.0]`` without re-probing).
    queries : int
        Queries of the probes before the last (0 without re-probing).
    searched : bool
        Whether the search rule was used (``scale="search"``, or ``"auto"`` on a small layer).

    Used in: chapter 4 (``scale="probe"``) and chapter 7 (``scale="search"``).
    """

    c1: object
    q1: np.ndarray
    F11: np.ndarray
    u11: np.ndarray
    H: int
    max_abs_ell: float
    f: float
    scales: list
    queries: int
    searched: bool


def find_scale(ask, q1, u11, nodes, *, opt, rng, tol):
    r"""Ask the shared query and the probe; with the search (``scale="search"``, or ``"auto"`` once a
    probe finds the layer small, :func:`is_small`), re-probe at larger scales while the probe's poles
    crowd (its fit fails, or it finds fewer than ``n`` heads with ``heads`` given) and allow a wide
    factor (module docstring). Returns the :class:`Probe`.

    Parameters
    ----------
    ask : callable
        The counted oracle access (``ask(Xs)``: answers of a batch), as the pipeline's.
    q1, u11 : array (d,)
        The first probe's final token and direction (unit scale).
    nodes : Nodes
        The sample points :math:`t` of a configuration (:func:`.design.node_pairs`).
    opt : PaperOptions, keyword-only
        ``learn``'s options: ``opt.n``, the number of heads the design serves (``heads`` or
        ``max_heads``); ``opt.heads_given``, True when ``heads=n`` was given (a probe finding
        fewer heads counts as crowded); ``opt.spread``, the wanted :math:`\max_h|\ell_h|` of a
        configuration; ``opt.output_error``, the stated output error, for the probe's fit;
        ``opt.method``, the rational fit's method; ``opt.scale``: ``"search"`` re-probes and allows
        the wide factor, ``"probe"`` keeps the clipped rule, ``"auto"`` searches once a probe finds
        the layer small.
    rng : numpy.random.Generator, keyword-only
        Draws the fresh :math:`q_1`, :math:`u` of the re-probes.
    tol : Tolerances, keyword-only
        ``scale_clip``, ``scale_wide``, ``scale_step``, ``scale_rounds``, ``scale_max``, and for
        ``"auto"`` ``scale_small``, ``scale_resolved``.

    Returns
    -------
    Probe

    Raises
    ------
    RecoveryError
        The last probe's fit fails (after the allowed re-probes).

    Used in: chapter 4 (``scale="probe"``, every run) and chapter 7 (``scale="search"``).
    """
    n, heads_given = opt.n, opt.heads_given
    search = opt.scale == "search"  # "auto" turns it on once a probe finds the layer small
    log = getattr(ask, "log", None)  # the joint certificate's record of answers (float64 only)
    mark = log.mark if log is not None else 0
    c1, F11 = ask_probe(ask, q1, u11, nodes)
    s, scales, extra = 1.0, [1.0], 0
    while True:
        try:
            H, ell = fit_probe(nodes, F11, c1, n, tol=tol, output_error=opt.output_error, method=opt.method)
            failure = None
        except RecoveryError as exc:
            H, ell, failure = 0, None, exc
        if opt.scale == "auto" and not search:  # only the first probe (s = 1): later ones follow a search
            search = is_small(nodes, F11, c1, ell, opt=opt, tol=tol)
        crowded = failure is not None or (heads_given and H < n)
        if not (search and crowded) or len(scales) > tol.scale_rounds or s >= tol.scale_max:
            break
        s = min(s * tol.scale_step, tol.scale_max)
        if log is not None:  # an abandoned probe's scale is not the design's: the refit leaves its answers out
            log.truncate(mark)
        extra += 1 + nodes.m
        q1, u11 = unit_rows(rng, 2, len(q1)) * [[1.0], [s]]
        c1, F11 = ask_probe(ask, q1, u11, nodes)
        scales.append(s)
    if failure is not None:
        raise failure
    top = tol.scale_wide if search and H >= 2 else tol.scale_clip[1]
    f = s * opt.spread / ell if ell > 0 else s
    f = float(np.clip(f, tol.scale_clip[0], top * s))
    return Probe(c1, q1, F11, u11, H, ell, f, scales, extra, search)


def is_small(nodes, F11, c1, ell, *, opt, tol):
    r"""``scale="auto"``'s test on the paper design's first probe (unit scale): :func:`small_layer` of
    its :func:`probe_spread`."""
    return small_layer(probe_spread(nodes, F11, c1, ell, method=opt.method), F11, c1, spread=opt.spread,
                       output_error=opt.output_error, tol=tol)


def small_layer(max_abs_ell, F, c, *, spread, output_error, tol):
    r"""Whether a probe at unit scale whose poles spread ``max_abs_ell`` (:math:`\max_h|\ell_h|`)
    finds the layer small: below ``spread * tol.scale_small``, and resolved above its output
    error: a pole :math:`\ell` moves the samples ``F`` by about :math:`|\ell|\max|F-c|`, which must
    exceed ``tol.scale_resolved`` times the samples' error bound. Noise that hides the heads says
    nothing about their scale: a probe whose :math:`\ell` is small only within the noise keeps the
    clipped rule.

    Used in: chapter 7 (the paper's design, :func:`is_small`) and chapter 8 (the lean design's
    first configuration)."""
    if not max_abs_ell < spread * tol.scale_small:
        return False
    G = np.abs(np.asarray(to_float(F), dtype=float) - float(to_float(c)))
    return bool(max_abs_ell * G.max() > tol.scale_resolved * sample_errors(F, output_error, tol).output)


def probe_spread(nodes, F11, c1, ell, *, method):
    r"""How far apart the probe's poles are, for ``scale="auto"``: its fit's :math:`\max_h|\ell_h|`
    (``ell``), or when that fit failed (``ell`` None) the :math:`|\ell|` of a one-pole fit of
    its samples: poles crowded at :math:`-1` (:math:`\ell_h\approx0`) are fitted well by one pole
    near them, which a fit of :math:`n` poles cannot resolve. :math:`\infty` when even that fit
    fails, or when the probe found no head at all (a zero function: nothing says the layer is
    small, and no scale makes a head appear)."""
    if ell is not None:
        return ell if ell > 0 else np.inf
    try:
        fit = fit_known_degree(nodes.ts, F11 - c1, 1, method=method)
    except RecoveryError:
        return np.inf
    return float(np.abs(fit.ell[0, 0]))
