r"""A real attention layer in the book's convention: vector outputs, score biases, an output offset.

The paper's model (:class:`attnlearn.MultiHeadAttention`) returns one number per query,
:math:`f(X)=\sum_h\sum_i\alpha_{h,i}v_h^\top x_i` with :math:`\alpha_h=\mathrm{softmax}_i(x_i^\top W_hx_N)`.
A layer such as PyTorch's ``nn.MultiheadAttention`` read at its last position returns a vector, and
with ``bias=True`` adds a per-head score term and an output offset:

.. math:: F(X)=\sum_{h=1}^{H}A_h\sum_{i=1}^{N}\alpha_{h,i}\,x_i+b,\qquad
          \alpha_h=\operatorname{softmax}_i\big(x_i^\top(W_hx_N+c_h)\big),

with value-output maps :math:`A_h\in\mathbb R^{k\times d}`, score biases :math:`c_h\in\mathbb R^d`
and offset :math:`b\in\mathbb R^k`. A read-out :math:`r\in\mathbb R^k` gives the scalar layer
:math:`r^\top F` with :math:`v_h=A_h^\top r` and offset :math:`r^\top b`
(:meth:`AttentionLayer.readout`); without biases that is exactly the paper's model
(:meth:`AttentionLayer.heads`).

Used in: chapter 7 (the ground truth of a PyTorch layer, :func:`attnlearn.torch.from_torch`).
"""

import mpmath
import numpy as np

from ._arith import as_real_array, is_mp, mp_exp, to_mp
from .canonical import matched_error
from .model import MultiHeadAttention, check_sequences

__all__ = ["AttentionLayer", "layer_error"]


class AttentionLayer:
    r"""Multi-head attention read at the final token, with vector outputs and optional biases.

    Parameters
    ----------
    W : array_like, shape (H, d, d)
        Merged query-key matrices :math:`W_h`.
    A : array_like, shape (H, k, d) or (H, d)
        Value-output maps :math:`A_h` (``k`` outputs per query); shape (H, d) is a scalar
        layer (:math:`A_h=v_h^\top`, one output per query).
    c : array_like, shape (H, d), optional, keyword-only
        Score biases :math:`c_h` (the score of token :math:`i` is :math:`x_i^\top(W_hx_N+c_h)`).
    b : array_like, shape (k,) or scalar, optional, keyword-only
        Output offset (a scalar for a scalar layer; stored as ``b`` of shape (k,) either way).

    Notes
    -----
    See the module docstring for the formula. ``batch`` returns shape ``(n, k)``, or ``(n,)``
    for a scalar layer; float64, or mpmath at the current precision when the parameters or the
    queries are mpmath numbers (:meth:`to_mpmath`; exact mode).

    References
    ----------
    .. [1] S. Kim, I. Kim, J. Guo, "Provably Learning Multi-Head Attention with
           Queries", arXiv:2608.03294, 2026.
    .. [2] A. Vaswani et al., "Attention Is All You Need", NeurIPS 2017 (the layer).

    Used in: chapter 7.
    """

    def __init__(self, W, A, *, c=None, b=None):
        W = as_real_array(W, "W")
        A = as_real_array(A, "A")
        if W.ndim != 3 or W.shape[1] != W.shape[2] or W.shape[1] == 0:
            raise ValueError(f"W must have shape (H, d, d) with d >= 1, got {W.shape}")
        H, d = W.shape[:2]
        self.scalar = A.ndim == 2
        if A.ndim not in (2, 3) or A.shape[0] != H or A.shape[-1] != d:
            raise ValueError(f"A must have shape (H, k, d) or (H, d) with H = {H}, d = {d}, got {A.shape}")
        k = 1 if self.scalar else A.shape[1]
        if c is not None:
            c = as_real_array(c, "c")
            if c.shape != (H, d):
                raise ValueError(f"c must have shape (H, d) = {(H, d)}, got {c.shape}")
        if b is not None:
            b = as_real_array(b, "b")
            if b.shape != (() if self.scalar else (k,)):
                raise ValueError(f"b must have shape {() if self.scalar else (k,)}, got {b.shape}")
            b = b.reshape(k)  # stored as (k,) either way
        parts = [W, A] + [p for p in (c, b) if p is not None]
        if any(is_mp(p) for p in parts) and not all(is_mp(p) for p in parts):
            W, A = to_mp(W), to_mp(A)
            c = None if c is None else to_mp(c)
            b = None if b is None else to_mp(b)
        self.W, self.A, self.c, self.b = W, A, c, b

    H = property(lambda self: self.W.shape[0], doc="Number of heads.")
    d = property(lambda self: self.W.shape[1], doc="Token width.")
    k = property(lambda self: 1 if self.scalar else self.A.shape[1], doc="Outputs per query.")
    exact = property(lambda self: is_mp(self.W), doc="True when the parameters are mpmath numbers.")

    def __repr__(self):
        kind = "mpmath" if self.exact else "float64"
        bias = ", biases" if self.c is not None or self.b is not None else ""
        return f"AttentionLayer(H={self.H}, d={self.d}, k={'scalar' if self.scalar else self.k}{bias}, {kind})"

    def to_mpmath(self):
        """The same layer with mpmath entries (float64 values are taken exactly).

        Returns
        -------
        AttentionLayer
            :math:`W_h`, the maps, :math:`c_h` and the offset as mpmath numbers (exact mode's
            oracle in chapter 7 reads this copy).

        Used in: chapter 7.
        """
        conv = lambda p: None if p is None else to_mp(p)  # noqa: E731
        b = None if self.b is None else conv(self.b).reshape(() if self.scalar else self.k)
        return AttentionLayer(to_mp(self.W), to_mp(self.A), c=conv(self.c), b=b)

    def readout(self, r):
        r"""The scalar layer :math:`r^\top F`: :math:`v_h=A_h^\top r`, offset :math:`r^\top b`.

        Parameters
        ----------
        r : array_like (k,)
            The read-out, one weight per output.

        Returns
        -------
        AttentionLayer
            A scalar layer with the same :math:`W_h` and :math:`c_h`.

        Raises
        ------
        ValueError
            The layer is already scalar, or ``r`` does not have shape ``(k,)``.

        Used in: chapter 7 (a vector layer read out by :math:`r`).
        """
        if self.scalar:
            raise ValueError("readout: this layer is already scalar (A of shape (H, d))")
        r = as_real_array(r, "readout")
        if r.shape != (self.k,):
            raise ValueError(f"readout must have shape ({self.k},), got {r.shape}")
        v = np.einsum("hkd,k->hd", self.A, r)
        b = None if self.b is None else np.asarray(self.b.dot(r))
        return AttentionLayer(self.W, v, c=self.c, b=b)

    def heads(self):
        r"""The paper's model :math:`\{(W_h,v_h)\}` of a scalar layer without biases (what
        :func:`attnlearn.learn` recovers and :func:`attnlearn.param_error` compares).

        Returns
        -------
        MultiHeadAttention

        Raises
        ------
        ValueError
            A vector layer (read it out first) or a layer with biases.

        Used in: chapter 7 (:func:`attnlearn.torch.from_torch` of a layer without biases).
        """
        if not self.scalar:
            raise ValueError("heads: a vector layer has no single v_h; take .readout(r) first")
        if self.c is not None or self.b is not None:
            raise ValueError("heads: this layer has score biases or an offset, which the paper's model cannot express")
        return MultiHeadAttention(self.W, self.A)

    def __call__(self, X):
        """Output for one sequence ``X`` of shape ``(N, d)``."""
        return self.batch(check_sequences(X, self.d, batch=False)[None])[0]

    def batch(self, Xs):
        """Outputs for a batch ``Xs`` of shape ``(n, N, d)``: shape ``(n, k)``, or ``(n,)`` if scalar."""
        Xs = check_sequences(Xs, self.d, batch=True)
        if self.exact or is_mp(Xs):
            return self._batch_mp(Xs)
        return self._batch_float(Xs)

    def _maps(self):
        return self.A[:, None, :] if self.scalar else self.A  # (H, k, d)

    def _batch_float(self, Xs):
        W, A = np.asarray(self.W, float), np.asarray(self._maps(), float)
        s = np.einsum("nid,hde,ne->nih", Xs, W, Xs[:, -1, :])  # x_i^T W_h x_N
        if self.c is not None:
            s = s + Xs @ np.asarray(self.c, float).T
        e = np.exp(s - s.max(axis=1, keepdims=True))
        mean = np.einsum("nih,nid->nhd", e / e.sum(axis=1, keepdims=True), Xs)  # sum_i alpha_hi x_i
        out = np.einsum("nhd,hkd->nk", mean, A)
        if self.b is not None:
            out = out + np.asarray(self.b, float)
        return out[:, 0] if self.scalar else out

    def _batch_mp(self, Xs):
        Xs, W, A = to_mp(Xs), to_mp(self.W), to_mp(self._maps())
        c = None if self.c is None else to_mp(self.c)
        n, k = Xs.shape[0], A.shape[1]
        out = np.empty((n, k), dtype=object)
        for m in range(n):
            X = Xs[m]
            total = np.array([mpmath.mpf(0)] * k, dtype=object)
            for h in range(self.H):
                s = X.dot(W[h].dot(X[-1]))
                if c is not None:
                    s = s + X.dot(c[h])
                e = mp_exp(s - max(s))
                mean = e.dot(X) / mpmath.fsum(e)
                total = total + A[h].dot(mean)
            if self.b is not None:
                total = total + to_mp(self.b)
            out[m] = total
        return out[:, 0] if self.scalar else out


def layer_error(a, b):
    r"""Largest relative parameter error of two float64 :class:`AttentionLayer` after the optimal
    head matching: as :func:`attnlearn.param_error`, over :math:`W_h`, :math:`A_h` (Frobenius)
    and, when ``b`` has them, :math:`c_h` and the offset. ``inf`` when the head counts differ.

    Used in: chapter 7 (scoring the vector and biased recoveries against :func:`attnlearn.torch.from_torch`)."""
    for m in (a, b):
        if not isinstance(m, AttentionLayer):
            raise TypeError(f"layer_error expects AttentionLayer models, got {type(m).__name__}")
    if a.d != b.d or a.k != b.k:
        raise ValueError(f"layers of different shapes: d = {a.d}, {b.d}; k = {a.k}, {b.k}")
    if a.H != b.H:
        return float("inf")
    rel = lambda x, y: float(np.linalg.norm(np.asarray(x, float) - np.asarray(y, float)) /  # noqa: E731
                             (np.linalg.norm(np.asarray(y, float)) or 1.0))
    cost = np.array([[max(rel(a.W[i], b.W[j]), rel(a.A[i], b.A[j]),
                          rel(a.c[i] if a.c is not None else np.zeros(a.d), b.c[j]) if b.c is not None else 0.0)
                      for j in range(b.H)] for i in range(a.H)]).reshape(a.H, b.H)
    worst = matched_error(cost)
    if b.b is not None:
        worst = max(worst, rel(a.b if a.b is not None else np.zeros_like(b.b), b.b))
    return worst
