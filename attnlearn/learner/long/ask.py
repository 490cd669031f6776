r"""The long design's asking: ratio queries of :math:`L` tokens, and the context every stage reads
(:class:`Context`: the access, the ratios, the noise, :math:`V`).

Used in: chapter 5b (long queries) and chapter 7 (robust mode's fallback).
"""

from dataclasses import dataclass

import numpy as np

from ..family import LINEAR, Family
from ..samples import noise_sd

__all__ = ["Context", "ask_V"]


def _ask_ratio(ask, x, q, b, L, chunk):
    """Answers to the ratio queries (x^(L-b), q^b) for every b; batched by ``chunk`` queries."""
    d = len(x)
    out = []
    pos = np.arange(L)
    for s in range(0, len(b), chunk):
        bb = b[s:s + chunk]
        is_q = pos[None, :] >= (L - bb)[:, None]  # the last b tokens are q
        Xs = np.where(is_q[:, :, None], q[None, None, :], x[None, None, :]).reshape(len(bb), L, d)
        out.append(ask(Xs, what="a ratio query"))
    return np.concatenate(out)


@dataclass
class Context:
    """What every stage shares: the access, the ratios, the noise model, V and the counts."""

    ask: object
    d: int
    H: int
    L: int
    b: np.ndarray
    z: np.ndarray
    absolute: float
    relative: float
    tol: object
    rng: object
    V: np.ndarray = None
    V_sd: np.ndarray = None
    family: Family = LINEAR
    beta: float = 0.0
    beta_sd: float = 0.0
    retried: int = 0  # queries asked again within a group that returned (an anchor's later candidates)

    def chunk(self):
        return max(1, int(self.tol.batch_floats // (self.L * self.d)))

    def config(self, u, q):
        """Ask one configuration (x = q - u): answers, their noise and the known ends."""
        F = _ask_ratio(self.ask, q - u, q, self.b, self.L, self.chunk())
        return F, noise_sd(F, absolute=self.absolute, relative=self.relative, length=self.L,
                           rounding=self.tol.rounding)

    def ends(self, u, q):
        """:math:`V^\\top q` and :math:`V^\\top x` (plus :math:`\\beta` with ``bias``) with their
        standard deviations."""
        x = q - u
        if self.family.affine:
            return self.end(q) + self.end(x)
        return (self.V @ q, np.sqrt((self.V_sd**2) @ q**2) + 1e-300,
                self.V @ x, np.sqrt((self.V_sd**2) @ x**2) + 1e-300)

    def end(self, x):
        r"""With ``bias``: :math:`V^\top x+\beta=\sum_ix_iF(e_i)+(1-\sum_ix_i)F(0)` from the one-token
        answers (:func:`ask_V`), and its standard deviation."""
        return (self.V @ x + self.beta,
                np.sqrt((self.V_sd**2) @ x**2 + ((1 - x.sum()) * self.beta_sd) ** 2) + 1e-300)


def ask_V(ctx):
    r""":math:`V=\sum_hv_h` from the :math:`d` one-token queries :math:`(e_i)` (a one-token query
    answers :math:`V^\top x`), with the standard deviation of each entry. With affine positions (``ctx.family``) a
    one-token query answers :math:`V^\top x+\beta`: one more, the zero token, gives
    :math:`\beta=F(0)`, stored in ``ctx.beta`` (``ctx.V_sd`` is then the noise of the answers
    :math:`F(e_i)`, :meth:`Context.end` combines them)."""
    F = ctx.ask(np.eye(ctx.d)[:, None, :], what="a one-token query")
    sd = noise_sd(F, absolute=ctx.absolute, relative=ctx.relative)
    if ctx.family.affine:
        F0 = ctx.ask(np.zeros((1, 1, ctx.d)), what="a one-token query")
        ctx.beta, ctx.beta_sd = float(F0[0]), float(noise_sd(F0, absolute=ctx.absolute, relative=ctx.relative)[0])
        F = F - ctx.beta
    return F, sd
