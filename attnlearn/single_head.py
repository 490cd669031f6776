"""The prior work's elementary single-head algorithm (chapter 1).

Used in: chapter 1 (claim C1, and why it fails per head on multi-head models).
"""

from contextlib import nullcontext

import mpmath
import numpy as np

from ._arith import is_mp, mp_log, norm, to_mp
from ._checks import heldout_discrepancy
from .arguments import check_count, check_oracle, check_seed
from .errors import CheckFailedError, NotIdentifiableError, RecoveryError
from .model import MultiHeadAttention
from .protocol import Access

__all__ = ["learn_single_head", "balanced_basis", "verify_head"]


def balanced_basis(v):
    r"""An orthonormal basis :math:`u_1,\dots,u_d` with :math:`v^\top u_i=\|v\|/\sqrt d` for all :math:`i`.

    The Householder reflection that maps :math:`v/\|v\|` to :math:`s\mathbf 1/\sqrt d`, times
    :math:`s`; its columns are the :math:`u_i`. The sign :math:`s=-\operatorname{sign}(v^\top\mathbf 1)`
    keeps the reflection vector :math:`w=v/\|v\|-s\mathbf 1/\sqrt d` of length at least
    :math:`\sqrt2`, the usual choice that avoids cancellation: with :math:`s=+1` a :math:`v` a few
    ulps away from :math:`\mathbf 1` (as another machine's rounding makes it) gives a :math:`w`
    made of rounding errors and a basis that is not balanced at all. Symmetric and orthogonal up
    to the sign, so perfectly conditioned, and no :math:`v^\top u_i` vanishes: the degenerate
    directions of chapter 1 are avoided by construction. Works in float64 and mpmath.
    """
    exact = is_mp(v)
    d = len(v)
    one = mpmath.mpf(1) if exact else 1.0
    sqrt = mpmath.sqrt if exact else np.sqrt
    vhat = v / (mpmath.sqrt(sum(x * x for x in v)) if exact else np.linalg.norm(v))
    s = -one if (sum(vhat) if exact else float(np.sum(vhat))) >= 0 else one
    w = vhat - np.full(d, s / sqrt(d), dtype=object if exact else float)
    ww = sum(x * x for x in w) if exact else float(w @ w)  # >= 2
    eye = to_mp(np.eye(d)) if exact else np.eye(d)
    return s * (eye - 2 * np.outer(w, w) / ww)


def learn_single_head(oracle, d, *, holdout=4, seed=0):
    r"""Recover a single head :math:`(W, v)` with :math:`d^2+d` value queries [1]_, then verify it.

    Parameters
    ----------
    oracle : Oracle
        Access to a single-head model (float64 or exact mode).
    d : int
        Token width; must match the oracle.
    holdout : int, keyword-only
        Verification queries after the :math:`d^2+d` of the algorithm: random sequences of 2
        tokens (the algorithm's longest) that the recovered head must reproduce (the algorithm itself has no
        redundant query, so a model with more heads, or noise, would otherwise pass). 0 skips
        the check.
    seed : int, keyword-only
        Seed of the verification queries.

    Returns
    -------
    MultiHeadAttention
        One head; mpmath entries when the oracle is in exact mode.

    Raises
    ------
    TypeError
        ``d`` is not an integer, or ``oracle`` lacks ``.d``, ``.exact``, ``.dps`` or ``.batch``
        (checked as :func:`attnlearn.learn` checks them, before any query).
    ValueError
        ``d`` is not positive or differs from the oracle's token width.
    NotIdentifiableError
        If :math:`v=0` (the model is the zero function; :math:`W` is not determined).
    RecoveryError
        If a log-ratio argument is not positive (noise, or not a single-head model).
    CheckFailedError
        The recovered head misses the oracle on a verification query by more than
        :func:`verify_tolerance` (half the digits of the arithmetic) relative to the largest
        answer: the oracle is not a single noiseless head.

    Notes
    -----
    Step 1: the singleton query :math:`(e_i)` returns :math:`v_i`. Step 2: for a query
    :math:`(x, q)` with scores :math:`a=x^\top Wq`, :math:`b=q^\top Wq`,

    .. math:: f=\frac{e^{a}v^\top x+e^{b}v^\top q}{e^{a}+e^{b}}
       \;\Longrightarrow\; (x-q)^\top W q = a-b=\log\frac{v^\top q-f}{f-v^\top x}

    whenever :math:`v^\top x\ne v^\top q` (derived in sympy in chapter 1). With
    :math:`q=e_j` and :math:`x=e_j+u_i` for the balanced basis :math:`u_i` of
    :func:`balanced_basis` (:math:`v^\top u_i=\|v\|/\sqrt d\neq0`), the :math:`d^2` queries
    give :math:`R=U^\top W`, so :math:`W=UR`.

    References
    ----------
    .. [1] S. Bhattamishra, K. Shah, M. Hahn, V. Kanade, "Provably Learning Attention
           with Queries", arXiv:2601.16873, 2026.
    """
    d = check_oracle(oracle, d)
    holdout, seed = check_count(holdout, "holdout", 0), check_seed(seed)
    oracle = Access(oracle, d)  # every answer checked (count, type, finiteness) and counted here
    exact = oracle.exact
    ctx = mpmath.workdps(oracle.dps) if exact else nullcontext()
    with ctx:
        eye = to_mp(np.eye(d)) if exact else np.eye(d)
        v = oracle.batch(eye[:, None, :])  # (e_i): v_i
        if norm(v) == 0:
            raise NotIdentifiableError(
                "every singleton query returned 0, so v = 0: the model is the zero function "
                "and W is not identifiable"
            )
        U = balanced_basis(v)
        vu = U.T.dot(v)  # v^T u_i, all equal to |v|/sqrt(d)
        # queries (e_j + u_i, e_j) for all i, j: index [j, i]
        q = np.repeat(eye[:, None, :], d, axis=1)  # (j, i, d)
        x = q + U.T[None, :, :]
        Xs = np.stack([x, q], axis=2).reshape(d * d, 2, d)
        f = oracle.batch(Xs).reshape(d, d)
        vq = v[:, None]  # v^T e_j
        vx = v[:, None] + vu[None, :]
        num, den = vq - f, f - vx
        ratio = num / den
        bad = [(j, i) for j in range(d) for i in range(d) if not ratio[j, i] > 0]
        if bad:
            j, i = bad[0]
            raise RecoveryError(
                f"log-ratio argument (v^T q - f)/(f - v^T x) = {float(ratio[j, i]):.3g} is not "
                f"positive for column {j}, direction {i}: the outputs are not those of a "
                "single noiseless head"
            )
        R = (mp_log(ratio) if exact else np.log(ratio)).T  # R[i, j] = u_i^T W e_j
        W = U.dot(R)
        model = MultiHeadAttention(W[None], v[None])
        if holdout:
            verify_head(oracle, model, holdout, seed=seed)
    return model


def verify_tolerance(oracle):
    r"""The verification tolerance of :func:`learn_single_head`: half the digits of the oracle's
    arithmetic (:math:`\sqrt{\epsilon_{64}}` in float64, :math:`10^{-\mathrm{dps}/2}` in exact
    mode), relative to the largest answer. A correct head misses by about the rounding (measured
    in chapter 1: below :math:`10^{-12}` in float64 up to :math:`d=16`); a missing head by order one."""
    return 10.0 ** (-oracle.dps / 2) if oracle.exact else float(np.sqrt(np.finfo(float).eps))


def verify_head(oracle, model, holdout, *, seed):
    """Ask ``holdout`` random sequences of 2 tokens and compare the answers with ``model``.

    Raises
    ------
    CheckFailedError
        The largest discrepancy relative to the largest answer exceeds :func:`verify_tolerance`.
    """
    rng = np.random.default_rng(seed)
    d, exact = model.d, oracle.exact
    Xs = rng.normal(size=(holdout, 2, d)) / np.sqrt(d)
    worst, _ = heldout_discrepancy(oracle, model, [to_mp(Xs) if exact else Xs], rounded=False)
    limit = verify_tolerance(oracle)
    if not worst <= limit:
        raise CheckFailedError(
            f"the recovered head misses the oracle on {holdout} verification queries: relative discrepancy "
            f"{worst:.1e} > {limit:.0e}: the oracle is not a single noiseless attention head (more heads? "
            "use attnlearn.learn)"
        )
