r"""Rational head separation: poles and residues of the copies family (chapter 3).

Used in: chapter 3 (introduced: the rational function, interpolation, the rank that
reveals the canonical head count), chapters 4-6 (inside :func:`attnlearn.learn`).

For tokens :math:`x, q` and :math:`t\ge 1` copies of :math:`q`, the query
:math:`S(x,q,t)=(x,q,\dots,q)` returns

.. math:: F(t)=V^\top q+\sum_h\frac{\gamma_h}{1+\rho_h t},\qquad
          \rho_h=e^{\ell_h},\ \ell_h=u^\top W_h q,\ \gamma_h=-u^\top v_h,\ u=q-x.

With :math:`c=V^\top q` known, :math:`G=F-c=P/Q`, :math:`\deg P\le n-1`,
:math:`Q(t)=\prod_h(1+\rho_h t)`, :math:`Q(0)=1`: :math:`2n` unknowns fixed by the
samples :math:`t=1,\dots,2n`. With :math:`s` copies of :math:`x` in front the same function is
sampled at :math:`t/s`; :func:`ratio_nodes` uses this for better-conditioned nodes (chapter 3).
The fitting functions take any positive nodes (ints, floats or fractions).

Modules: :mod:`.family` (the queries, the nodes, the fit object, the Jacobian), :mod:`.floating`
(float64 interpolation: linearised and Loewner poles, residues, the polish), :mod:`.multiprecision`
(mpmath interpolation and Gauss-Newton), :mod:`.degree` (fits of a given or minimal degree and their
residual checks).
"""

from .family import copies_sequences, ratio_nodes, RationalFit, jacobian
from .floating import loewner_matrix
from .multiprecision import gauss_newton_mp
from .degree import fit_known_degree, fit_min_degree, fit_checked, check_residuals

__all__ = [
    "copies_sequences",
    "ratio_nodes",
    "RationalFit",
    "fit_known_degree",
    "fit_min_degree",
    "fit_checked",
    "check_residuals",
    "loewner_matrix",
    "jacobian",
    "gauss_newton_mp",
]
