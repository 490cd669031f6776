r"""Vector outputs: every head's value-output map from the queries that learn :math:`W_h` (chapter 7).

A vector oracle (:mod:`attnlearn.protocol`, ``.outputs = k``; e.g. a PyTorch layer read at its
last position, :class:`attnlearn.torch.TorchOracle` without a read-out) answers
:math:`F(X)=\sum_hA_h\sum_i\alpha_{h,i}x_i\in\mathbb R^k` with value-output maps
:math:`A_h\in\mathbb R^{k\times d}` (:class:`attnlearn.layer.AttentionLayer`).
:func:`learn_vector` learns them in two stages, without a query beyond the scalar learner's:

1. **W_h through a random read-out.** A random unit :math:`r\in\mathbb R^k` turns the oracle into
   the paper's scalar model :math:`r^\top F` with :math:`v_h=A_h^\top r`; :func:`attnlearn.learn`
   recovers its canonical heads :math:`W_h`. Every query it asks is recorded with its whole
   answer vector. (A head with :math:`A_h^\top r=0` would be invisible: with a random :math:`r`
   that has probability zero.)
2. **The maps by linear least squares.** Once :math:`W_h` is known, so are the softmax weights
   :math:`\alpha_{h,i}` of every recorded query, hence its attention means
   :math:`m_h(X)=\sum_i\alpha_{h,i}x_i`; the answers are linear in the maps,
   :math:`F(X)=\sum_hA_hm_h(X)`, so :math:`[A_1\cdots A_H]^\top` solves
   :math:`M B=Y` with :math:`M` the :math:`n\times Hd` matrix of the means and :math:`Y` the
   :math:`n\times k` answers. The scalar learner's design queries are the rows; its held-out
   queries check the result.

The query count is the scalar learner's whatever :math:`k` (the issue's "does not grow with
d_out").

Used in: chapter 7.
"""

from dataclasses import dataclass

import numpy as np

from .errors import CheckFailedError, IllConditionedError
from .layer import AttentionLayer
from .arguments import check_flag, check_seed
from .learner.learn import learn
from .learner.tolerances import Tolerances
from .model import softmax_numerators
from .protocol import Access

__all__ = ["learn_vector", "VectorRecovery", "attention_means"]

TOL = Tolerances.for_mode(exact=False)  # float64 only


@dataclass(repr=False)
class VectorRecovery:
    r"""What :func:`learn_vector` recovered (built by it; every parameter is kept as the
    attribute of the same name).

    Parameters
    ----------
    model : AttentionLayer
        Canonical heads :math:`W_h` and their maps :math:`A_h` (shape (H', k, d)).
    heads : int
        :math:`H'`.
    readout : array (k,)
        The random read-out :math:`r` of stage 1.
    scalar : Recovery
        Stage 1's recovery of :math:`r^\top F` (its queries are all the queries).
    queries : dict
        ``scalar.queries`` (no query is added).
    error_estimate : float
        Bound on the relative error of :math:`W_h` and :math:`A_h`: the larger of stage 1's
        estimate and the maps' first-order bound (Notes of :func:`learn_vector`).
    fit_residual : float
        Largest residual of the least squares relative to the largest answer.
    holdout_error : float or None
        Largest relative discrepancy on stage 1's held-out queries, every output.
    verified : bool
        True when stage 1 passed its verification stage (``scalar.verified``) and the maps
        reproduced every output of its verification queries (counted in
        ``queries["holdout"]``, apart from the design); False with ``holdout=0``.

    Used in: chapter 7.
    """

    model: AttentionLayer
    heads: int
    readout: np.ndarray
    scalar: object
    queries: dict
    error_estimate: float
    fit_residual: float
    holdout_error: float
    verified: bool = False

    def __repr__(self):
        return (f"VectorRecovery(heads={self.heads}, d={self.model.d}, k={self.model.k}, "
                f"queries={self.queries['total']}, error_estimate={self.error_estimate:.1e})")


class _Recorder:
    """The scalar oracle :math:`r^\\top F` over a vector access, recording every query and answer."""

    exact = False
    dps = None

    def __init__(self, access, r):
        self.access, self.r, self.d = access, r, access.d
        self.Xs, self.Y = [], []

    def batch(self, Xs):
        Y = self.access(Xs, "a query (vector answers)")
        self.Xs.append(np.asarray(Xs, dtype=float))
        self.Y.append(Y)
        return Y @ self.r


def attention_means(Xs, W):
    r""":math:`m_h(X)=\sum_i\alpha_{h,i}x_i` for a batch ``Xs`` (n, N, d) and heads ``W``
    (H, d, d): array (n, H, d).

    Used in: chapter 7."""
    e = softmax_numerators(Xs, W)
    return np.einsum("nih,nid->nhd", e / e.sum(axis=1, keepdims=True), Xs)


def learn_vector(oracle, d, *, heads=None, max_heads=None, seed=0, **options):
    r"""Learn a vector oracle's canonical heads :math:`W_h` and value-output maps :math:`A_h`.

    Parameters
    ----------
    oracle : object
        A float64 vector oracle (``.outputs = k``; :mod:`attnlearn.protocol`).
    d : int
        Token width.
    heads, max_heads, seed
        As :func:`attnlearn.learn` (``seed`` also draws the read-out :math:`r`, before the
        learner's own directions).
    **options
        Any other keyword of :func:`attnlearn.learn` (``robust``, ``output_error``, ...).

    Returns
    -------
    VectorRecovery

    Raises
    ------
    TypeError
        As :func:`attnlearn.learn`; ``bias`` not a bool.
    ValueError
        As :func:`attnlearn.learn`; a scalar oracle (no ``.outputs``) or an exact one;
        ``bias=True`` (the maps are learned for the paper's scores only); a ``design`` other
        than ``"paper"``.
    RecoveryError
        Stage 1's errors; :class:`~attnlearn.errors.CheckFailedError` when the maps miss the
        held-out answers; :class:`~attnlearn.errors.IllConditionedError` when the estimate
        exceeds 1.

    Notes
    -----
    Error estimate of the maps: with :math:`\delta` stage 1's relative estimate (errors of
    :math:`W_h`, hence of the means :math:`M`, of relative size about :math:`\delta`) and
    :math:`R` the residual of the least squares, first order gives
    :math:`\|\delta B\|/\|B\|\lesssim\kappa(M)\,\delta+\|M^+\|\,\|R\|/\|B\|`; twice that is
    reported (as :func:`attnlearn.learn` doubles its first-order bound).

    Used in: chapter 7.
    """
    if check_flag(options.get("bias", False), "bias"):
        raise ValueError("learn_vector does not learn score biases or an offset (bias=True): read the layer out "
                         "with a vector r and use attnlearn.learn(..., bias=True)")
    if options.get("design", "paper") != "paper":
        raise ValueError(f'learn_vector learns with design="paper" only, got design={options["design"]!r} (its '
                         "maps are solved from the paper design's queries)")
    access = Access(oracle, d, vector=True)
    if access.outputs is None:
        raise ValueError("learn_vector needs a vector oracle (.outputs = k answers per query); for one number "
                         "per query use attnlearn.learn")
    if access.exact:
        raise ValueError("learn_vector is a float64 learner: an exact oracle is not supported (read it out with "
                         "a vector r and use attnlearn.learn)")
    rng = np.random.default_rng(check_seed(seed))
    r = rng.normal(size=access.outputs)
    r /= np.linalg.norm(r)
    rec_oracle = _Recorder(access, r)
    scalar = learn(rec_oracle, d, heads=heads, max_heads=max_heads, seed=rng, **options)
    W = np.asarray(scalar.model.W, dtype=float)
    fit_rows, hold_rows = _split(rec_oracle.Xs, rec_oracle.Y, scalar.queries["holdout"])
    A, estimate, residual = _solve_maps(W, fit_rows, scalar.error_estimate)
    model = AttentionLayer(W, A)
    holdout_error = _check_holdout(model, hold_rows, scalar, estimate) if hold_rows else None
    if not estimate <= TOL.estimate_limit:
        raise IllConditionedError(f"the value-output maps' error estimate {estimate:.1e} exceeds 1: the attention "
                                  "means of the queries are too ill-conditioned to determine them")
    return VectorRecovery(model=model, heads=scalar.heads, readout=r, scalar=scalar, queries=dict(scalar.queries),
                          error_estimate=max(estimate, scalar.error_estimate), fit_residual=residual,
                          holdout_error=holdout_error, verified=bool(scalar.verified and hold_rows))


def _split(Xs, Y, n_hold):
    """The recorded batches: the rows of the fit, and the last ``n_hold`` queries (held out; the
    scalar learner asks them last, whole batches)."""
    sizes = np.cumsum([len(x) for x in Xs])
    cut = int(np.searchsorted(sizes, sizes[-1] - n_hold, side="right")) if n_hold else len(Xs)
    return list(zip(Xs[:cut], Y[:cut])), list(zip(Xs[cut:], Y[cut:]))


def _solve_maps(W, rows, delta):
    """Least squares for the maps from the design's rows (columns scaled to unit size); returns
    ``(A (H, k, d), estimate, relative residual)`` (estimate: Notes of :func:`learn_vector`)."""
    H, d = W.shape[0], W.shape[1]
    Y = np.concatenate([y for _, y in rows])
    k = Y.shape[1]
    if H == 0:
        return np.zeros((0, k, d)), 0.0, float(np.abs(Y).max())
    M = np.concatenate([attention_means(x, W).reshape(len(x), H * d) for x, _ in rows])
    scale = np.abs(M).max(axis=0)
    scale[scale == 0] = 1.0
    B, _, rank, sv = np.linalg.lstsq(M / scale, Y, rcond=None)
    if rank < H * d:
        raise IllConditionedError(f"the attention means of the {len(M)} queries span only {rank} of the {H * d} "
                                  "dimensions of the maps: the value-output maps are not determined")
    R = Y - (M / scale) @ B
    nb = max(np.linalg.norm(B), TOL.tiny)
    estimate = TOL.estimate_factor * (sv[0] / sv[-1] * delta + np.linalg.norm(R) / (sv[-1] * nb))
    A = (B / scale[:, None]).reshape(H, d, k).transpose(0, 2, 1)
    return A, float(estimate), float(np.abs(R).max() / max(np.abs(Y).max(), TOL.tiny))


def _check_holdout(model, rows, scalar, estimate):
    """Largest relative discrepancy of every output on the held-out queries; raise beyond the
    limit of :func:`attnlearn.learner.checks.finish` (output error or 10 x the estimate)."""
    worst = scale_ref = 0.0
    for x, y in rows:
        worst = max(worst, float(np.abs(model.batch(x) - y).max()))
        scale_ref = max(scale_ref, float(np.abs(y).max()))
    rel = worst / max(scale_ref, TOL.tiny)
    limit = max(TOL.holdout_output * scalar.output_error / max(scale_ref, TOL.tiny),
                TOL.holdout_estimate * max(estimate, scalar.error_estimate))
    if rel > limit:
        raise CheckFailedError(f"the value-output maps miss the oracle on the held-out queries: relative discrepancy "
                               f"{rel:.2e} > {limit:.2e}")
    return rel
