r"""The model family a design fits (:class:`Family`), decided once from ``learn(bias=...)``.

Used in: chapter 4 (the paper's model: positions linear in the final token) and chapter 7 (score
biases: positions affine in it).

A head's score of token :math:`x_i` is :math:`x_i^\top W_hq` in the paper's model and
:math:`x_i^\top(W_hq+c_h)` with score biases, so a configuration's step positions are *linear* in
the final token :math:`q` or *affine* in it. What the stages need to know of the family is here:
how many blocks the paper's design has, where its crosses put their final token (at
:math:`q_1+q_k`, or at the midpoint :math:`(q_1+q_k)/2`, where an affine map takes the mean of
its values), and the row of :math:`q` in the long design's regressions (with a 1 for the
intercept).
"""

from dataclasses import dataclass

import numpy as np

__all__ = ["Family", "LINEAR", "AFFINE", "family_of"]


@dataclass(frozen=True)
class Family:
    """Linear positions (``affine`` False, the paper's model) or affine positions (score biases).

    Attributes
    ----------
    affine : bool
        Positions affine in the final token (score biases :math:`c_h` and an output offset).
    mid : float
        The factor of a cross's final token :math:`q_1+q_k`: 1/2 (the midpoint) for the affine
        family, else 1.
    extra : int
        Parameters a position gains (the intercept), hence blocks the paper's design gains: 1 or 0.

    Used in: chapters 4 and 7.
    """

    affine: bool
    mid: float
    extra: int

    def blocks(self, d):
        """The paper design's blocks: :math:`d`, or :math:`d+1` for affine positions.

        Used in: chapters 4 and 7."""
        return d + self.extra

    def midpoint(self, x):
        """A cross's value ``x`` (final token, constant or position at :math:`q_1+q_k`) taken to
        the family's cross token: ``x * mid`` for affine positions, ``x`` itself (unchanged, not
        multiplied) for linear ones.

        Used in: chapters 4 and 7."""
        return x * self.mid if self.affine else x

    def row(self, q):
        """The row of the final token ``q`` in a regression of positions: ``q``, or ``(q, 1)``
        for affine positions (the intercept).

        Used in: chapters 5b and 7."""
        return np.append(q, 1.0) if self.affine else q


#: The paper's model: positions linear in the final token.
LINEAR = Family(affine=False, mid=1, extra=0)
#: Score biases: positions affine in the final token.
AFFINE = Family(affine=True, mid=0.5, extra=1)


def family_of(bias):
    """The family of ``learn(bias=...)`` (a checked bool).

    Used in: chapters 4 and 7 (:func:`~attnlearn.learner.options.build_options`)."""
    return AFFINE if bias else LINEAR
