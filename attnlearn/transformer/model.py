"""The one-layer Transformer: multi-head attention, value-output matrices, a bias-free ReLU layer.

Used in: chapter 6 (claim C9).
"""

import mpmath
import numpy as np

from .._arith import as_real_array, is_mp, to_float, to_mp
from ..canonical import canonical
from ..model import MultiHeadAttention, mp_softmax_numerators, softmax_numerators, _ReadAtFinalToken

__all__ = [
    "OneLayerTransformer",
]


class OneLayerTransformer(_ReadAtFinalToken):
    r"""Multi-head attention followed by a bias-free ReLU layer, read at the final token.

    Parameters
    ----------
    W : array_like, shape (H, d, d)
        Query-key matrices :math:`W_h` (scores :math:`x_i^\top W_hx_N`).
    O : array_like, shape (H, d, d)
        Value-output matrices :math:`O_h`.
    B : array_like, shape (k, d)
        Hidden layer (rows :math:`b_j`).
    a : array_like, shape (k,)
        Output weights.

    Notes
    -----
    .. math:: T(X)=a^\top\mathrm{ReLU}\Big(B\sum_{h=1}^H\sum_{i=1}^N\alpha_{h,i}O_hx_i\Big),
              \qquad \alpha_h=\operatorname{softmax}_i(x_i^\top W_hx_N).

    ``H = 0`` or ``k = 0`` give the zero function. Entries may be float64 or mpmath numbers
    (exact mode); evaluation is vectorised in float64 and runs in mpmath on object arrays.
    """

    def __init__(self, W, O, B, a):
        W = as_real_array(W, "W")
        O = as_real_array(O, "O")
        B = as_real_array(B, "B")
        a = as_real_array(a, "a")
        if W.ndim != 3 or W.shape[1] != W.shape[2]:
            raise ValueError(f"W must have shape (H, d, d), got {W.shape}")
        if W.shape[1] == 0:
            raise ValueError("the token width d must be at least 1")
        if O.shape != W.shape:
            raise ValueError(f"O must have the shape of W, (H, d, d) = {W.shape}, got {O.shape}")
        if B.ndim != 2 or B.shape[1] != W.shape[1]:
            raise ValueError(f"B must have shape (k, d) with d = {W.shape[1]}, got {B.shape}")
        if a.ndim != 1 or a.shape[0] != B.shape[0]:
            raise ValueError(f"a must have shape (k,) with k = {B.shape[0]} (the rows of B), got {a.shape}")
        if any(is_mp(x) for x in (W, O, B, a)):
            W, O, B, a = (to_mp(x) for x in (W, O, B, a))
        self.W, self.O, self.B, self.a = W, O, B, a

    @property
    def k(self):
        """Number of hidden units."""
        return self.B.shape[0]

    def to_mpmath(self):
        """The same model with mpmath entries (float64 values are taken exactly)."""
        return OneLayerTransformer(to_mp(self.W), to_mp(self.O), to_mp(self.B), to_mp(self.a))

    def to_float(self):
        """The same model rounded to float64."""
        return OneLayerTransformer(to_float(self.W), to_float(self.O), to_float(self.B), to_float(self.a))

    @classmethod
    def random(cls, d, H, k, *, seed=0):
        r"""A random model: :math:`W,O` entries :math:`\mathcal N(0,1/d)`, :math:`B` entries
        :math:`\mathcal N(0,1/d)`, :math:`a` entries :math:`\mathcal N(0,1)` (float64)."""
        rng = np.random.default_rng(seed)
        s = 1.0 / np.sqrt(d)
        return cls(rng.normal(size=(H, d, d)) * s, rng.normal(size=(H, d, d)) * s,
                   rng.normal(size=(k, d)) * s, rng.normal(size=k))

    def unit_vectors(self):
        r""":math:`\pi_{j,h}=O_h^\top b_j`, shape ``(k, H, d)``: unit :math:`j` reads
        :math:`\sum_h\pi_{j,h}^\top m_h(X)`."""
        return np.einsum("hij,ki->khj", self.O, self.B)

    def difference_model(self):
        r"""The attention model :math:`D(X)=T(X)-T(-X)`: heads :math:`(W_h,\,O_h^\top B^\top a)`."""
        v = np.einsum("hij,i->hj", self.O, self.B.T.dot(self.a)) if self.H else self.W[:, 0, :]
        return MultiHeadAttention(self.W, v)

    def conditions(self):
        r"""Quantities behind the learner's conditions (chapter 6), as floats.

        ``min_abs_a``: :math:`\min_j|a_j|`; ``min_nu``: :math:`\min_j\|\nu_j\|` with
        :math:`\nu_j=\sum_hO_h^\top b_j`; ``max_cos_nu``: largest :math:`|\cos|` between two
        :math:`\nu_j` (1 means parallel); ``min_v``: smallest norm of a canonical head's value
        vector in :meth:`difference_model` (merging heads with equal :math:`W`), and
        ``heads_dropped``: how many merged heads have :math:`v_h=0` there. Computed in the
        model's arithmetic (mpmath with at least 50 digits for exact models), then rounded.
        """
        with mpmath.workdps(max(mpmath.mp.dps, 50)):  # exact zeros stay zeros
            return self._conditions()

    def _conditions(self):
        P = to_float(self.unit_vectors())
        nu = P.sum(axis=1) if self.H else np.zeros((self.k, self.d))
        nn = np.linalg.norm(nu, axis=1)
        maxcos = 0.0
        for i in range(self.k):
            for j in range(i + 1, self.k):
                if nn[i] > 0 and nn[j] > 0:
                    maxcos = max(maxcos, abs(float(nu[i] @ nu[j])) / (nn[i] * nn[j]))
        D = self.difference_model()
        merged = canonical(D, atol=0.0)
        # heads with equal W merge; count the merged groups to see how many were dropped
        groups = canonical(MultiHeadAttention(D.W, np.ones(D.v.shape)), atol=0.0).H
        return {
            "min_abs_a": float(np.min(np.abs(to_float(self.a)))) if self.k else float("inf"),
            "min_nu": float(nn.min()) if self.k else float("inf"),
            "max_cos_nu": maxcos,
            "min_v": float(np.linalg.norm(to_float(merged.v), axis=1).min()) if merged.H else 0.0,
            "heads_dropped": groups - merged.H,
        }

    def __repr__(self):
        kind = "mpmath" if self.exact else "float64"
        return f"OneLayerTransformer(H={self.H}, d={self.d}, k={self.k}, {kind})"

    def _batch_float(self, Xs):
        if self.H == 0 or self.k == 0:
            return np.zeros(Xs.shape[0])
        e = softmax_numerators(Xs, self.W)
        alpha = e / e.sum(axis=1, keepdims=True)
        m = np.einsum("nih,nid->nhd", alpha, Xs)  # m_h(X)
        z = np.einsum("hij,nhj->ni", self.O, m)
        return np.maximum(z @ self.B.T, 0.0) @ self.a

    def _batch_mp(self, Xs):
        Xs = to_mp(Xs)
        W, O, B, a = (to_mp(x) for x in (self.W, self.O, self.B, self.a))
        n = Xs.shape[0]
        out = np.empty(n, dtype=object)
        zero = mpmath.mpf(0)
        for r in range(n):
            X = Xs[r]
            z = np.array([zero] * self.d, dtype=object)
            for h in range(self.H):
                e = mp_softmax_numerators(X, W[h])
                m = e.dot(X) / mpmath.fsum(e)
                z = z + O[h].dot(m)
            hid = B.dot(z) if self.k else []
            out[r] = mpmath.fsum(a[j] * hid[j] for j in range(self.k) if hid[j] > 0)
        return out
