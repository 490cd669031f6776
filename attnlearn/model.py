"""The multi-head softmax-attention regressor (chapter 1).

Used in: every chapter (chapter 1 introduces it).
"""

import mpmath
import numpy as np

from ._arith import as_real_array, is_mp, mp_exp, to_mp

__all__ = ["MultiHeadAttention", "check_sequences", "random_model", "low_rank_model", "degenerate", "DEGENERACIES", "softmax_numerators",
           "mp_softmax_numerators"]


def check_sequences(Xs, d, *, batch):
    """Validate one sequence ``(N, d)`` (``batch=False``) or a batch ``(n, N, d)``.

    Returns a float64 array, or an object array when the input holds mpmath numbers.
    Used by the models and by :class:`attnlearn.Oracle`.
    """
    arr = np.asarray(Xs) if not isinstance(Xs, np.ndarray) else Xs
    want = 3 if batch else 2
    shape_txt = "(n, N, d)" if batch else "(N, d)"
    if arr.ndim != want:
        raise ValueError(
            f"a {'batch of sequences' if batch else 'sequence'} must have shape {shape_txt}, "
            f"got an array with shape {arr.shape}"
        )
    if arr.shape[-1] != d:
        raise ValueError(f"tokens have width {arr.shape[-1]}, but the model has d = {d}")
    if arr.shape[-2] == 0:
        raise ValueError("empty sequence: a query needs at least one token (N >= 1)")
    return as_real_array(arr, "sequence")


class _ReadAtFinalToken:
    """What the package's models share: heads ``W`` of shape (H, d, d), and evaluation of one
    sequence or of a batch, vectorised in float64 and in mpmath on object arrays (the subclass
    gives ``_batch_float`` and ``_batch_mp``)."""

    @property
    def H(self):
        """Number of attention heads."""
        return self.W.shape[0]

    @property
    def d(self):
        """Token width."""
        return self.W.shape[1]

    @property
    def exact(self):
        """True when the parameters are mpmath numbers."""
        return is_mp(self.W)

    def __call__(self, X):
        """Output for one sequence ``X`` of shape ``(N, d)``."""
        X = check_sequences(X, self.d, batch=False)
        out = self.batch(X[None])[0]
        return out if is_mp(out) else float(out)

    def batch(self, Xs):
        """Outputs for a batch ``Xs`` of shape ``(n, N, d)``; returns shape ``(n,)``.

        Vectorised over the batch in float64; in mpmath the same formula runs on object
        arrays (exact mode is for small problems).
        """
        Xs = check_sequences(Xs, self.d, batch=True)
        if self.exact or is_mp(Xs):
            return self._batch_mp(Xs)
        return self._batch_float(Xs)


class MultiHeadAttention(_ReadAtFinalToken):
    r"""Multi-head softmax attention read at the final token.

    Parameters
    ----------
    W : array_like, shape (H, d, d)
        Merged query-key matrices :math:`W_h`.
    v : array_like, shape (H, d)
        Merged value-output vectors :math:`v_h`.

    Notes
    -----
    For a sequence :math:`X=(x_1,\dots,x_N)` the model returns (chapter 1, the
    convention of [2]_)

    .. math:: f(X)=\sum_{h=1}^{H}\sum_{i=1}^{N}\alpha_{h,i}\,v_h^\top x_i,\qquad
              \alpha_h=\operatorname{softmax}_i\big(x_i^\top W_h x_N\big).

    ``H = 0`` is allowed (the zero function); ``W`` then has shape ``(0, d, d)``.
    Entries may be float64 or mpmath numbers (exact mode); a model with mpmath entries
    evaluates in mpmath at the current ``mpmath.mp`` precision.

    References
    ----------
    .. [1] S. Kim, I. Kim, J. Guo, "Provably Learning Multi-Head Attention with
           Queries", arXiv:2608.03294, 2026.
    .. [2] S. Bhattamishra, K. Shah, M. Hahn, V. Kanade, "Provably Learning Attention
           with Queries", arXiv:2601.16873, 2026.
    """

    def __init__(self, W, v):
        W = as_real_array(W, "W")
        v = as_real_array(v, "v")
        if W.ndim != 3 or W.shape[1] != W.shape[2]:
            raise ValueError(f"W must have shape (H, d, d), got {W.shape}")
        if v.ndim != 2:
            raise ValueError(f"v must have shape (H, d), got {v.shape}")
        if v.shape != W.shape[:2]:
            raise ValueError(
                f"inconsistent head count or width: W has shape {W.shape} "
                f"(H = {W.shape[0]}, d = {W.shape[1]}) but v has shape {v.shape}"
            )
        if W.shape[1] == 0:
            raise ValueError("the token width d must be at least 1")
        if is_mp(W) != is_mp(v):
            W, v = to_mp(W), to_mp(v)
        self.W = W
        self.v = v

    @property
    def V(self):
        r""":math:`V=\sum_h v_h`, what a single-token query reads: :math:`f((x))=V^\top x`."""
        if self.H == 0:
            return to_mp(np.zeros(self.d)) if self.exact else np.zeros(self.d)
        return self.v.sum(axis=0)

    def to_mpmath(self):
        """The same model with mpmath entries (float64 values are taken exactly)."""
        return MultiHeadAttention(to_mp(self.W), to_mp(self.v))

    def __repr__(self):
        kind = "mpmath" if self.exact else "float64"
        return f"MultiHeadAttention(H={self.H}, d={self.d}, {kind})"

    def _batch_float(self, Xs):
        if self.H == 0:
            return np.zeros(Xs.shape[0])
        e = softmax_numerators(Xs, self.W)
        vals = Xs @ self.v.T  # (n, N, H): v_h^T x_i
        return ((e * vals).sum(axis=1) / e.sum(axis=1)).sum(axis=1)

    def _batch_mp(self, Xs):
        Xs = to_mp(Xs)
        W = to_mp(self.W)
        v = to_mp(self.v)
        n = Xs.shape[0]
        out = np.empty(n, dtype=object)
        for k in range(n):
            X = Xs[k]
            total = mpmath.mpf(0)
            for h in range(self.H):
                e = mp_softmax_numerators(X, W[h])
                total += mpmath.fdot(e, X.dot(v[h])) / mpmath.fsum(e)
            out[k] = total
        return out


def random_model(H, d, *, seed=0, scale=1.0):
    r"""A random float64 model: :math:`W_h` entries :math:`\mathcal N(0,\mathrm{scale}^2/d)`, then
    :math:`v_h` entries :math:`\mathcal N(0,1)`, drawn in that order.

    ``seed`` is a seed or a :class:`numpy.random.Generator` (drawn from, as
    :func:`numpy.random.default_rng` passes it through). The models of the tests, the
    benchmarks and the book's chapters 4-6.
    """
    rng = np.random.default_rng(seed)
    return MultiHeadAttention(scale * rng.normal(size=(H, d, d)) / np.sqrt(d), rng.normal(size=(H, d)))


def low_rank_model(H, d, p, *, seed=0, exact=False):
    r"""A random model whose heads have rank ``p``: :math:`W_h=A_hB_h^\top` with
    :math:`A_h,B_h` of size :math:`d\times p`, entries :math:`\mathcal N(0,1/(dp))` and
    :math:`\mathcal N(0,1)` (drawn head by head, then :math:`v_h` entries :math:`\mathcal N(0,1)`),
    as a real layer's
    :math:`W_{k,h}^\top W_{q,h}/\sqrt p` (``design="rank"``).

    ``exact=True`` gives :math:`W_h` as mpmath numbers holding the product of the float64 factors
    exactly (each entry a sum of :math:`p` products of two float64 numbers, computed with every
    bit it needs: 106 per product and the span of their exponents), so the heads have rank ``p`` at any precision; in float64 the rounded product has
    singular values of :math:`10^{-16}` relative instead of 0, and an exact oracle's digits see them.

    Used in: chapter 9 (real sizes) and ``benchmarks/rank.py``."""
    if not 1 <= p <= d:
        raise ValueError(f"p must be between 1 and d = {d}, got {p}")
    rng = np.random.default_rng(seed)
    factors = [(rng.normal(size=(d, p)) / np.sqrt(d * p), rng.normal(size=(d, p))) for _ in range(H)]
    v = rng.normal(size=(H, d))
    if not exact:
        return MultiHeadAttention(np.array([A @ B.T for A, B in factors]).reshape(H, d, d), v)
    # every sum of p products of two float64 numbers exact: 106 bits per product, plus the span of
    # their exponents, plus the carries
    terms = np.abs(np.concatenate([(A[:, None, :] * B[None, :, :]).ravel() for A, B in factors]))
    terms = terms[terms > 0]
    span = (np.frexp(terms.max())[1] - np.frexp(terms.min())[1]) if terms.size else 0
    with mpmath.workprec(int(106 + span + int(p).bit_length() + 2)):
        W = np.array([[[mpmath.fsum(mpmath.mpf(A[i, j]) * mpmath.mpf(B[k, j]) for j in range(p))
                        for k in range(d)] for i in range(d)] for A, B in factors], dtype=object).reshape(H, d, d)
    return MultiHeadAttention(W, to_mp(v))


#: The degenerate models of chapter 2, what :func:`degenerate` makes of a model.
DEGENERACIES = ("merged", "zero-sum", "equal-v", "zero-v", "zero")


def degenerate(model, kind, *, head=0):
    r"""``model`` made degenerate (chapter 2), a new :class:`MultiHeadAttention`:

    * ``"merged"``: :math:`W_2=W_1` (heads 1 and 2 merge into one canonical head),
    * ``"zero-sum"``: :math:`W_2=W_1`, :math:`v_2=-v_1` (both vanish from the canonical form),
    * ``"equal-v"``: :math:`v_2=v_1` with different :math:`W` (two canonical heads with equal
      residues),
    * ``"zero-v"``: :math:`v_{\mathrm{head}}=0` (a head that outputs nothing; ``head`` indexes
      from 0, -1 the last),
    * ``"zero"``: every :math:`v_h=0` (the zero function).

    The first three need two heads.

    Raises
    ------
    ValueError
        An unknown ``kind``, or a two-head kind with fewer than two heads.

    Used in: ``benchmarks/lean.py --degenerate`` (chapter 8's degenerate rows) and the tests.
    """
    if kind not in DEGENERACIES:
        raise ValueError(f"kind must be one of {DEGENERACIES}, got {kind!r}")
    if kind in ("merged", "zero-sum", "equal-v") and model.H < 2:
        raise ValueError(f"kind={kind!r} needs two heads, the model has {model.H}")
    if kind == "zero-v" and not -model.H <= head < model.H:
        raise ValueError(f"head must index one of the model's {model.H} heads, got {head!r}")
    W, v = model.W.copy(), model.v.copy()
    if kind in ("merged", "zero-sum"):
        W[1] = W[0]
    if kind == "zero-sum":
        v[1] = -v[0]
    elif kind == "equal-v":
        v[1] = v[0]
    elif kind == "zero-v":
        v[head] = 0
    elif kind == "zero":
        v[:] = 0
    return MultiHeadAttention(W, v)


def softmax_numerators(Xs, W):
    r"""Unnormalised softmax weights :math:`e^{s_{h,i}-\max_is_{h,i}}`, :math:`s_{h,i}=x_i^\top W_hx_N`,
    for a float64 batch ``Xs`` (n, N, d) and heads ``W`` (H, d, d): array (n, N, H).

    Shared by :class:`MultiHeadAttention` and :class:`attnlearn.OneLayerTransformer`."""
    n, N, d = Xs.shape
    H = W.shape[0]
    q = Xs[:, -1, :]
    # W_h q for every head at once: one BLAS product (d, H*d)
    Wq = (q @ W.transpose(2, 0, 1).reshape(d, H * d)).reshape(n, H, d)
    s = np.matmul(Xs, Wq.transpose(0, 2, 1))  # (n, N, H): x_i^T W_h x_N
    s -= s.max(axis=1, keepdims=True)  # softmax shift, exact in exact arithmetic
    return np.exp(s)


def mp_softmax_numerators(X, Wh):
    r"""The same for one sequence ``X`` (N, d) and one head ``Wh`` in mpmath: object array (N,)."""
    s = X.dot(Wh.dot(X[-1]))
    return mp_exp(s - max(s))
