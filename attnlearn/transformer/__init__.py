r"""A one-layer Transformer (multi-head attention, then a bias-free ReLU layer) and its learner.

Used in: chapter 6 (claim C9).

The paper's construction for the Transformer extension is not public; what follows is this
companion's own construction, built only from the public multi-head learner
(:func:`attnlearn.learn`) and oracle queries.

Model. With the attention of chapter 1 (scores :math:`x_i^\top W_hx_N`, softmax over
:math:`i`), value-output matrices :math:`O_h\in\mathbb R^{d\times d}`, :math:`B\in\mathbb
R^{k\times d}` and :math:`a\in\mathbb R^k`,

.. math:: z(X)=\sum_h\sum_i\alpha_{h,i}O_hx_i,\qquad T(X)=a^\top\mathrm{ReLU}(Bz(X)).

With :math:`m_h(X)=\sum_i\alpha_{h,i}x_i` and :math:`\pi_j=[O_1^\top b_j;\dots;O_H^\top b_j]`,
:math:`T(X)=\sum_ja_j\,\mathrm{ReLU}(\pi_j^\top m(X))`.

Learner (:func:`learn_transformer`), five steps:

1. *Attention.* :math:`D(X)=T(X)-T(-X)` is a multi-head attention model with value vectors
   :math:`v_h=O_h^\top B^\top a` (scores are even in :math:`X`, :math:`\mathrm{ReLU}(y)-
   \mathrm{ReLU}(-y)=y`); :func:`attnlearn.learn` recovers its canonical heads, each value of
   :math:`D` costing two queries.
2. *Kinks.* On single-token queries all attention weights are 1, so
   :math:`T((q))=\sum_ja_j\mathrm{ReLU}(\nu_j^\top q)` with :math:`\nu_j=\sum_hO_h^\top b_j`.
   Along the half circle :math:`q(\theta)=\cos\theta\,q_0+\sin\theta\,\delta`,
   :math:`\theta\in[-\pi/2,\pi/2]` (the line :math:`q_0+s\delta`, :math:`s=\tan\theta`, seen
   through positive homogeneity) each unit has exactly one kink; between kinks
   :math:`T=\alpha\cos\theta+\beta\sin\theta`. Kinks are located by refining a grid and
   intersecting neighbouring pieces, and confirmed by one query at the intersection.
3. *Local gradients.* In each region, at a point :math:`q` of the half circle and with
   :math:`x=q-u` for a small :math:`u`, the copies family gives
   :math:`F(t)=c+\sum_h\gamma_h/(1+\rho_ht)` with :math:`\rho_h=e^{u^\top W_hq}` known from
   step 1, :math:`c` known from step 2 and :math:`\gamma_h=-u^\top g_h`, where
   :math:`g_h=\sum_{j\text{ active}}a_jO_h^\top b_j`. :math:`t=0,\dots,H'` (one more sample
   than unknowns: a residual check) for :math:`d` orthogonal :math:`u` give :math:`G_r=[g_1;
   \dots;g_{H'}]`. A residual above tolerance means a unit changed sign: the perturbation is
   shrunk and the region asked again.
4. *Units.* Jumps :math:`J_i=G_i-G_{i-1}=\varepsilon_ia_j\pi_j`; the units active in region 0
   are those that switch off (:math:`\varepsilon=-1`), so :math:`G_0=-\sum_{\varepsilon_i=-1}
   J_i`: a subset-sum over :math:`2^{k'}` sign patterns, unique for generic models. The sign
   of each :math:`a_j` is the sign of the slope change along the line. Check:
   :math:`G_0+G_{k'}=[v_1;\dots;v_{H'}]` (the values of :math:`D`).
5. *Equivalent Transformer.* :math:`a'_j=\pm1`, :math:`\pi'_j=a_j\pi_j/a'_j`; the
   :math:`k'\times H'd` matrix of the :math:`\pi'_j` (rank at most :math:`d`) is factored as
   :math:`B'[O'_1\cdots O'_{H'}]` by an SVD; the learned :math:`W_h` are kept.

Modules: :mod:`.model` (the Transformer), :mod:`.learn` (:func:`learn_transformer`: step 1, the
context, steps 2-5 in order, the held-out check), :mod:`.kinks` (step 2), :mod:`.regions` (step 3),
:mod:`.orientations` (steps 4-5).
"""

from .model import OneLayerTransformer
from .kinks import KinkError
from .regions import RegionFitError
from .orientations import OrientationError
from .learn import learn_transformer, TransformerOptions, TransformerRecovery

__all__ = [
    "OneLayerTransformer",
    "learn_transformer",
    "TransformerOptions",
    "TransformerRecovery",
    "KinkError",
    "RegionFitError",
    "OrientationError",
]
