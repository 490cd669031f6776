r"""The rank design: heads of rank :math:`p` in fewer than twice their information floor of queries.

Used in: chapter 9 (real sizes): ``learn(oracle, d, heads=H, design="rank", rank=p)``, and
``benchmarks/rank.py``.

In a real layer :math:`W_h=W_{k,h}^\top W_{q,h}/\sqrt p` has rank :math:`p=d/H`, the head
dimension. A rank-:math:`p` head has :math:`2dp-p^2+d` parameters
(:func:`~attnlearn.learner.cost.rank_floor`), far fewer than the :math:`d^2+d` every other
design learns. The rank design (:func:`~attnlearn.learner.cost.rank_budget` queries):

* **Block 1**, final token :math:`q_1`: the lean design's phase 1
  (:func:`~attnlearn.learner.lean.fit.phase_one`): :math:`d` base configurations of :math:`2n`
  ratio samples, labelled by :math:`d-1` one-sample links, give every :math:`v_h`, :math:`W_hq_1`
  and :math:`V=\sum_hv_h` (hence every later constant :math:`V^\top q`).
* **Labelling by heights**: afterwards a configuration :math:`(u,q)` has known heights
  :math:`\gamma_h=-u^\top v_h`; its fit's heights label its poles (:mod:`.blocks`), so no later
  configuration needs a link or a cross.
* **Full blocks** :math:`k=2,3,\dots`: :math:`d` configurations give every
  :math:`w_{h,k}=W_hq_k=U_k^{-1}\ell_h` whole. A column that lies in the span of the head's
  earlier ones certifies its rank :math:`r_h` (:mod:`.span`); full blocks stop once every head is
  certified, after :math:`\max_hr_h+1` final tokens.
* **Reduced blocks**, the remaining final tokens: :math:`p=\max_hr_h` configurations give the
  coordinates of :math:`w_{h,k}` in the head's span; then
  :math:`W_h=[w_{h,1}\cdots w_{h,d}][q_1\cdots q_d]^{-1}`.

Count, for :math:`n\ge2` heads of rank :math:`p<d`, with every later block's constant asked
(one query each): :math:`1+2nd+(d-1)+(d-1)+2np(2d-p-1)=2n(2dp-p^2+d)-2np+2d-1`, exactly
twice the floor less one at a layer's :math:`p=d/n`; :math:`2nd^2+2d-1` at full rank, half the
paper's :math:`4nd^2`. Longest query :math:`2n+1`.

========================  ==================================================================
module                    stage
========================  ==================================================================
:mod:`.blocks`            later blocks: asked, fitted, labelled by their heights
:mod:`.span`              each head's columns: the rank test, the reduced blocks' solves
:mod:`.run`               the run: block 1, full and reduced blocks, the heads, the finish
========================  ==================================================================
"""
