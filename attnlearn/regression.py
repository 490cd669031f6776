r"""Fitting a multi-head attention model to random queries by least squares (the practical baseline).

Used in: appendix ("Why not just fit it?", ``book/appendix_regression.ipynb``).

The learner of chapters 3-4 *designs* its queries. The obvious alternative asks the same
number of *random* queries and fits the parameters :math:`\{(W_h,v_h)\}` by minimising the
squared loss with L-BFGS [1]_ from several random starts. This module provides that
baseline: :func:`random_queries` draws the query set from an :class:`~attnlearn.Oracle`,
:func:`loss_and_grad` is the loss with its analytic gradient (vectorised over the
sequences of each length), and :func:`fit_regression` runs the restarts.

References
----------
.. [1] D. C. Liu, J. Nocedal, "On the limited memory BFGS method for large scale
       optimization", Mathematical Programming 45 (1989) 503-528.
"""

import numbers
import warnings

import numpy as np
from scipy.optimize import minimize

from .model import MultiHeadAttention, check_sequences

__all__ = ["random_queries", "loss_and_grad", "fit_regression", "RegressionFit"]


def _check_int(value, name, minimum):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value}")
    return int(value)


def random_queries(oracle, d, n_queries, max_length, seed):
    r"""Ask ``oracle`` random sequences of random lengths; return them grouped by length.

    Parameters
    ----------
    oracle : Oracle
        Value-query access in float64 mode (the answers are converted to float64).
    d : int
        Token width (must match the oracle).
    n_queries : int
        Number of sequences to ask, e.g. the learner's budget :math:`4Hd^2-2H+1`
        (:func:`attnlearn.query_budget`).
    max_length : int
        Each sequence has a length drawn uniformly from :math:`1,\dots,` ``max_length``
        (the learner's longest query is :math:`2H+1`).
    seed : int
        Seed of the lengths and of the tokens, which are i.i.d. :math:`\mathcal N(0, I_d)`.

    Returns
    -------
    Xs_by_length : list of ndarray
        One array of shape ``(n_N, N, d)`` per length ``N`` that was drawn, in increasing
        order of ``N``; ``sum(n_N) == n_queries``.
    ys : list of ndarray
        The oracle's answers, shape ``(n_N,)`` each, aligned with ``Xs_by_length``.

    Notes
    -----
    Every sequence is asked exactly once, one :meth:`Oracle.batch` call per length, so
    ``oracle.queries`` grows by exactly ``n_queries``.
    """
    if not (hasattr(oracle, "batch") and hasattr(oracle, "d")):
        raise TypeError("oracle must be an attnlearn.Oracle (with .d and .batch)")
    d = _check_int(d, "d", 1)
    if d != oracle.d:
        raise ValueError(f"d = {d} does not match the oracle's token width {oracle.d}")
    n_queries = _check_int(n_queries, "n_queries", 1)
    max_length = _check_int(max_length, "max_length", 1)
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, max_length + 1, size=n_queries)
    Xs_by_length, ys = [], []
    for N in range(1, max_length + 1):
        n = int(np.sum(lengths == N))
        if n == 0:
            continue
        Xs = rng.normal(size=(n, N, d))
        Xs_by_length.append(Xs)
        ys.append(np.asarray(oracle.batch(Xs), dtype=float))
    return Xs_by_length, ys


def _check_data(Xs_by_length, ys, d):
    if isinstance(Xs_by_length, np.ndarray):
        Xs_by_length = [Xs_by_length]
    if isinstance(ys, np.ndarray):
        ys = [ys]
    Xs_by_length, ys = list(Xs_by_length), list(ys)
    if len(Xs_by_length) != len(ys):
        raise ValueError(
            f"Xs_by_length has {len(Xs_by_length)} groups of sequences but ys has {len(ys)} groups of outputs"
        )
    if not Xs_by_length:
        raise ValueError("no data: Xs_by_length is empty")
    out_X, out_y = [], []
    for g, (Xs, y) in enumerate(zip(Xs_by_length, ys)):
        Xs = np.asarray(check_sequences(Xs, d, batch=True), dtype=float)
        y = np.asarray(y, dtype=float)
        if y.shape != (Xs.shape[0],):
            raise ValueError(
                f"group {g}: {Xs.shape[0]} sequences (shape {Xs.shape}) but outputs of shape {y.shape}"
            )
        if not (np.all(np.isfinite(Xs)) and np.all(np.isfinite(y))):
            raise ValueError(f"group {g}: sequences and outputs must be finite")
        out_X.append(Xs)
        out_y.append(y)
    return out_X, out_y


def _unpack(theta, d, H):
    W = theta[: H * d * d].reshape(H, d, d)
    v = theta[H * d * d :].reshape(H, d)
    return W, v


def _loss_grad(theta, Xs_by_length, ys, d, H, n_total):
    W, v = _unpack(theta, d, H)
    gW = np.zeros((H, d, d))
    gv = np.zeros((H, d))
    sse = 0.0
    # einsum (no BLAS): these arrays are tiny, and a threaded BLAS on a busy machine
    # costs more than the arithmetic; the sums are also independent of the BLAS build
    for Xs, y in zip(Xs_by_length, ys):
        q = Xs[:, -1, :]  # (n, d) final tokens
        Wq = np.einsum("hab,nb->nha", W, q)  # W_h q
        s = np.einsum("nia,nha->nih", Xs, Wq)  # (n, N, H): x_i^T W_h q
        z = np.einsum("nia,ha->nih", Xs, v)  # (n, N, H): v_h^T x_i
        s -= s.max(axis=1, keepdims=True)
        a = np.exp(s)
        a /= a.sum(axis=1, keepdims=True)  # softmax over the tokens i
        fh = (a * z).sum(axis=1)  # (n, H) head outputs
        r = fh.sum(axis=1) - y  # residuals
        sse += float(np.sum(r * r))
        # d f / d v_h = sum_i a_hi x_i ;  d f / d W_h = (sum_i a_hi (z_hi - f_h) x_i) q^T
        ra = a * r[:, None, None]
        gv += np.einsum("nih,nia->ha", ra, Xs)
        rg = ra * (z - fh[:, None, :])
        A = np.einsum("nih,nia->nha", rg, Xs)  # (n, H, d)
        gW += np.einsum("nha,nb->hab", A, q)
    scale = 1.0 / n_total
    return 0.5 * sse * scale, np.concatenate([gW.ravel(), gv.ravel()]) * scale


def loss_and_grad(model, Xs_by_length, ys):
    r"""The squared loss of ``model`` on the data and its gradient in :math:`(W, v)`.

    Parameters
    ----------
    model : MultiHeadAttention
        float64 parameters.
    Xs_by_length : sequence of ndarray
        Arrays of shape ``(n_k, N_k, d)``, one per sequence length (one length per array).
    ys : sequence of ndarray
        Targets, shape ``(n_k,)`` each, aligned with ``Xs_by_length``.

    Returns
    -------
    loss : float
        :math:`L=\frac{1}{2n}\sum_{j=1}^{n}\big(f(X_j)-y_j\big)^2` over all :math:`n`
        sequences.
    grad_W : ndarray, shape (H, d, d)
    grad_v : ndarray, shape (H, d)

    Notes
    -----
    With :math:`s_{h,i}=x_i^\top W_hq`, :math:`q=x_N`, :math:`\alpha_h=\mathrm{softmax}(s_h)`,
    :math:`z_{h,i}=v_h^\top x_i` and :math:`f_h=\sum_i\alpha_{h,i}z_{h,i}`, the softmax
    Jacobian :math:`\partial\alpha_{h,i}/\partial s_{h,k}=\alpha_{h,i}(\delta_{ik}-\alpha_{h,k})`
    gives :math:`\partial f/\partial s_{h,i}=\alpha_{h,i}(z_{h,i}-f_h)`, hence

    .. math:: \frac{\partial f}{\partial v_h}=\sum_i\alpha_{h,i}x_i,\qquad
              \frac{\partial f}{\partial W_h}=\Big(\sum_i\alpha_{h,i}(z_{h,i}-f_h)\,x_i\Big)q^\top,

    and :math:`\nabla L=\frac1n\sum_j r_j\nabla f(X_j)` with residuals
    :math:`r_j=f(X_j)-y_j`. Each length group is one vectorised pass.
    """
    if not isinstance(model, MultiHeadAttention):
        raise TypeError(f"model must be a MultiHeadAttention, got {type(model).__name__}")
    if model.exact:
        raise ValueError("loss_and_grad is a float64 computation; the model has mpmath entries")
    d, H = model.d, model.H
    Xs_by_length, ys = _check_data(Xs_by_length, ys, d)
    n_total = sum(len(y) for y in ys)
    theta = np.concatenate([np.asarray(model.W, float).ravel(), np.asarray(model.v, float).ravel()])
    loss, g = _loss_grad(theta, Xs_by_length, ys, d, H, n_total)
    gW, gv = _unpack(g, d, H)
    return loss, gW.copy(), gv.copy()


class RegressionFit:
    """What :func:`fit_regression` found.

    Attributes
    ----------
    model : MultiHeadAttention
        The fitted model of the best restart (``H`` heads, not canonicalised).
    loss : float
        Its loss :math:`\\frac{1}{2n}\\sum_j(f(X_j)-y_j)^2`.
    restarts_losses : ndarray, shape (restarts,)
        Final loss of every restart, in the order they were run.
    nit : ndarray of int, shape (restarts,)
        L-BFGS iterations of every restart.
    best : int
        Index of the best restart.
    messages : list of str
        L-BFGS termination message of every restart.
    """

    def __init__(self, **kw):
        self.__dict__.update(kw)

    def __repr__(self):
        return (
            f"RegressionFit(H={self.model.H}, d={self.model.d}, loss={self.loss:.1e}, "
            f"restarts={len(self.restarts_losses)}, best={self.best})"
        )


#: Standard deviation of :func:`fit_regression`'s initial :math:`W` entries times :math:`\sqrt d`:
#: 1, the scale of the book's random models.
INIT_SCALE = 1.0


def fit_regression(Xs_by_length, ys, d, H, *, restarts=5, maxiter=3000, seed=0, tol=1e-15):
    r"""Fit an ``H``-head attention model to ``(sequence, output)`` pairs by least squares.

    Parameters
    ----------
    Xs_by_length : sequence of ndarray
        Arrays of shape ``(n_k, N_k, d)``, one per sequence length (e.g. from
        :func:`random_queries`).
    ys : sequence of ndarray
        Targets, shape ``(n_k,)`` each, aligned with ``Xs_by_length``.
    d : int
        Token width.
    H : int
        Number of heads of the fitted model (>= 1).
    restarts : int, keyword-only
        Number of random initialisations; the best final loss wins.
    maxiter : int, keyword-only
        L-BFGS iteration budget per restart.
    seed : int, keyword-only
        Seed of the initialisations.
    tol : float, keyword-only
        L-BFGS stops when the largest gradient entry of the loss divided by the targets'
        mean square is below ``tol`` (``gtol``), or when one iteration lowers that relative
        loss by less than ``tol**2`` (``ftol``). The default runs a realizable fit down to
        rounding level.

    Returns
    -------
    RegressionFit

    Notes
    -----
    Minimises :math:`L(W,v)=\frac{1}{2n}\sum_j(f(X_j)-y_j)^2` with
    ``scipy.optimize.minimize(method="L-BFGS-B", jac=True)`` and the analytic gradient of
    :func:`loss_and_grad`. The loss is not convex: a restart can stop in a local minimum
    or a saddle region, and the heads of the result are only defined up to the
    non-identifiabilities of chapter 2 (order, split, cancelling heads). The initial :math:`W`
    entries are :math:`\mathcal N(0,\mathrm{INIT\_SCALE}^2/d)` (:data:`INIT_SCALE`, the scale of the
    book's random models), the initial :math:`v` entries :math:`\mathcal N(0,\sigma^2)` with
    :math:`\sigma=\mathrm{rms}(y)/\sqrt{Hd}` (read from the data). L-BFGS
    warnings (e.g. overflow in a line search) are caught and not re-emitted; their
    effect shows in the restart's loss.
    """
    d = _check_int(d, "d", 1)
    H = _check_int(H, "H", 1)
    restarts = _check_int(restarts, "restarts", 1)
    maxiter = _check_int(maxiter, "maxiter", 1)
    if not (isinstance(tol, numbers.Real) and np.isfinite(tol) and tol > 0):
        raise ValueError(f"tol must be a positive number, got {tol!r}")
    Xs_by_length, ys = _check_data(Xs_by_length, ys, d)
    n_total = sum(len(y) for y in ys)
    y_all = np.concatenate(ys)
    msq = float(np.mean(y_all**2))
    ref = msq if msq > 0 else 1.0
    sigma_v = np.sqrt(ref / (H * d))
    rng = np.random.default_rng(seed)

    def fun(theta):
        loss, g = _loss_grad(theta, Xs_by_length, ys, d, H, n_total)
        return loss / ref, g / ref  # scale-free objective: ftol/gtol act on relative values

    losses, nits, msgs, thetas = [], [], [], []
    for _ in range(restarts):
        theta0 = np.concatenate(
            [rng.normal(size=H * d * d) * INIT_SCALE / np.sqrt(d), rng.normal(size=H * d) * sigma_v]
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with np.errstate(all="ignore"):
                res = minimize(
                    fun, theta0, jac=True, method="L-BFGS-B",
                    options={"maxiter": maxiter, "maxfun": 2 * maxiter, "ftol": tol**2, "gtol": tol},
                )
        theta = res.x
        loss = float(fun(theta)[0] * ref) if np.all(np.isfinite(theta)) else np.inf
        losses.append(loss if np.isfinite(loss) else np.inf)
        nits.append(int(res.nit))
        msgs.append(str(res.message))
        thetas.append(theta)
    losses = np.array(losses)
    best = int(np.argmin(losses))
    W, v = _unpack(thetas[best], d, H)
    return RegressionFit(
        model=MultiHeadAttention(W.copy(), v.copy()),
        loss=float(losses[best]),
        restarts_losses=losses,
        nit=np.array(nits),
        best=best,
        messages=msgs,
    )
