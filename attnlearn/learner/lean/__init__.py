r"""The lean design: :math:`H(d^2+d)+2d-1` queries, within :math:`2d-1` of the information limit.

Used in: chapter 8 ("How few queries?"): ``learn(oracle, d, heads=H, design="lean")``.

A model has :math:`H(d^2+d)` real parameters and, generically, no continuous symmetry, so no
design recovers an open set of models with fewer queries; the paper's design spends
:math:`4Hd^2-2H+1`. The lean design (chapter 8):

* **Phase 1**, one final token :math:`q_0`: the query :math:`(q_0)` gives :math:`c_0=V^\top q_0`;
  :math:`d` base configurations :math:`u_1..u_d` (a basis) of :math:`2n` samples each give,
  by the minimal-degree rational fit, :math:`m\le n` unlabelled pairs
  :math:`(\rho,\gamma)` (:math:`m` the canonical head count); :math:`d-1` one-sample *link*
  queries :math:`x=q_0-u_1-u_i` are predicted under each of the :math:`m!` pairings as
  :math:`c_0+\sum_h(\gamma_{1h}+\gamma_{ih})/(1+\rho_{1h}\rho_{ih})`, and the pairing that
  reproduces the answer labels configuration :math:`i`. Then
  :math:`v_h=-U^{-1}\gamma_h` and :math:`W_hq_0=U^{-1}\ell_h`.
* **Phase 2**, every other final token :math:`q_j`: :math:`V^\top q_j` and the residues
  :math:`\gamma_h=-u^\top v_h` of any direction are known, so :math:`m` samples of each of
  :math:`d` configurations give :math:`m` polynomial equations in the :math:`m` labelled
  unknowns :math:`\rho_h`, with :math:`m!` complex roots, all found
  (:func:`~.roots.complete_roots`); one *check* query with final token
  :math:`q_0+q_j` and direction :math:`u_c=\sum_iw_iu_{j,i}` predicts, for every combination
  of the configurations' real positive roots,
  :math:`\ell_h=u_c^\top W_hq_0+\sum_iw_i\log\rho_h^{(i)}`, and the combination that
  reproduces its answer is kept (it also labels heads with equal :math:`v`). Then
  :math:`W_hq_j=U_j^{-1}\ell_h` and :math:`W_h=[W_hq_0\cdots W_hq_{d-1}]\,Q^{-1}`.

Count: :math:`1+2nd+(d-1)+md(d-1)+(d-1)`, i.e. :math:`H(d^2+d)+2d-1` when :math:`m=n=H\ge2`
(:math:`d^2+d+1` for one head: no link and no check is needed); fewer when heads merge or
vanish, or when every configuration of a block has a single candidate. Longest query
:math:`2n+1` (phase 1's ratio nodes).

The stages, one module each (phase 1 is the design's fit, phase 2 its solve):

========================  ==================================================================
module                    stage
========================  ==================================================================
:mod:`.design`            design: phase 1's basis, phase 2's directions
:mod:`.ask`               ask: single queries and configurations of nodes
:mod:`.fit`               fit: phase 1's fits and the links that label them
:mod:`.solve`             solve: phase 2's roots, check queries, the heads
:mod:`.roots`             every root of a configuration's polynomial system (homotopy)
:mod:`.run`               the run: the stages in order, then the shared finish
========================  ==================================================================

Its count and nodes are with the other designs' (:func:`attnlearn.learner.cost.lean_budget`,
:func:`attnlearn.learner.nodes.lean_nodes`).
"""
