r"""``learn(..., design="long")``: long ratio queries and statistical fits, for noisy oracles.

Used in: chapter 5b (``book/05b_long_queries.ipynb``: learning through float32 noise), chapter 7
(real layers: float32 layers, score biases, robust mode's fallback) and
``benchmarks/noise_design.py`` (its measured rows).

A query of :math:`s` copies of :math:`x` followed by :math:`t` copies of :math:`q` (final token
:math:`q`, :math:`s+t=L`) has

.. math:: F = V^\top q + \sum_h \gamma_h\,\sigma(c_h - z),\qquad z=\log(t/s),\quad
          c_h=-(W_h^\top u)^\top q=-\ell_h,\quad \gamma_h=-u^\top v_h,\quad u=q-x,

with :math:`\sigma` the logistic function: every head is a step of height :math:`\gamma_h` at
:math:`z=c_h`, seen over a window of :math:`2\log(L-1)` nats (16.6 at :math:`L=4096`), where
the paper's :math:`2H` copies see :math:`\log 2H`. The stages (chapter 5b):

1. :func:`~.ask.ask_V`: :math:`V=\sum_hv_h` from :math:`d` one-token queries (both ends of every step
   curve are then known: :math:`F(z\to\infty)=V^\top q`, :math:`F(z\to-\infty)=V^\top x`).
2. :func:`~.passes.probe_scale`: four configurations set :math:`|u|=|q|` so that the steps' root mean
   square position is ``LongTolerances.spread`` nats.
3. Groups :math:`k=1..d`, each with a fixed :math:`u_k` (the rows of a random orthogonal matrix
   times the scale: :func:`~.run.draw_groups`) and varying :math:`q`: :math:`\gamma_h` is
   the same in every configuration of a group (it labels the heads there) and :math:`c_h` is
   linear in :math:`q`, so :math:`y_{h,k}=W_h^\top u_k` comes from a weighted least-squares fit
   over the group (:func:`~.solve.regress_y`).
4. :func:`~.passes.coarse_pass`, anchored: a few random :math:`q` (each fitted alone: AAA start,
   :class:`scipy.interpolate.AAA`, poles :math:`w=-e^{c_h}` in :math:`w=t/s`, then weighted
   Levenberg–Marquardt, :func:`scipy.optimize.least_squares`) are stretched so their steps span
   the window, and of those whose own fit resolves them (:func:`~.fit.resolution`) the widest
   spaced is the anchor (when none does, each is asked again at twice its stretch and fitted
   with it, :func:`~.fit.fit_stretches`), then :math:`2d` nudged :math:`q_0+\eta w_j` are fitted from its
   positions and labelled by the nearest of them (continuity, not clustering of
   :math:`\gamma`: at :math:`H\ge4` random :math:`q` put two steps within half a nat in most
   configurations); then one joint fit of the group with shared :math:`\gamma`
   (:func:`~.fit.fit_group`, a block Levenberg–Marquardt).
5. :func:`~.passes.placed_pass`: :math:`2d` more :math:`q` per group, *placed* so that the predicted
   steps sit ``LongTolerances.spacing`` nats apart (the Cramér–Rao bound of a configuration is
   smallest near 2 nats); started at the prediction, fitted jointly with the first pass;
   configurations above the noise are repaired, and a group still above it after that is
   refitted without its worst configurations (:func:`~.passes._trim`: one configuration in a wrong
   local minimum pulls the shared heights and with them every configuration of the group).
6. :func:`~.solve.link_groups`: link configurations :math:`u_1+u_k` (three :math:`q` each) match the
   heads of group :math:`k` to those of group 1: every pairing's predicted curve is compared
   with the answers (:math:`\chi^2`), the best must beat the runner-up by a margin.
7. :func:`~.solve.solve_heads`: :math:`W_h=U^{-1}Y_h`, :math:`v_h=-U^{-1}\Gamma_h` (rows of
   :math:`U` the :math:`u_k`, rows of :math:`Y_h` the :math:`y_{h,k}^\top`).
8. :func:`~.solve.estimate_error`: the inverse Fisher matrix of every group's fit propagated through
   the regression and the solves, then :func:`~attnlearn.learner.finish.finish` (held-out queries),
   where :class:`~.solve.AnswerSpread` turns the same covariances into the spread of each held-out
   answer and :func:`~attnlearn.learner.certificate.confront_spread` raises the estimate when the
   residuals exceed it significantly (a float64 oracle's rounding is smooth along the ratio grid,
   not independent as the fits assume: chapter 5b).

**Score biases** (``bias=True``, PyTorch's ``bias=True``: score :math:`x_i^\top(W_hx_N+c_h)`,
output offset :math:`\beta`). A step then sits at :math:`-y_h^\top q-\kappa_h` with
:math:`\kappa_h=u^\top c_h`, affine in :math:`q`, and the ends are :math:`V^\top q+\beta`,
:math:`V^\top x+\beta`. So :func:`~.ask.ask_V` asks one more one-token query, the zero token
(:math:`F(0)=\beta`); each anchored group asks its *origin* :math:`q=0` (:func:`~.passes._origin`: the steps at
:math:`-\kappa_h`, fitted under the anchor's heights) so that the stretch predicts the affine
positions; :func:`~.solve.regress_y` fits :math:`(y_h,\kappa_h)` with an intercept; the placed and link
positions carry :math:`\kappa`; and :func:`~.solve.solve_heads` gives :math:`[W_h\;c_h]=U^{-1}[Y_h\;K_h]`
(:math:`\kappa` is linear in :math:`u`, as :math:`y` is). The model is an
:class:`~attnlearn.layer.AttentionLayer` with ``c`` and ``b``.

The noise model is :math:`\sigma_i = \sqrt{\varepsilon_a^2 + (\varepsilon_r F_i)^2} +
4\epsilon_{64}|F_i|` plus a float64 oracle's summation rounding (:func:`~attnlearn.learner.samples.noise_sd`;
``output_error`` absolute, ``relative_error`` relative); every fit is
weighted by it and every covariance is scaled by :math:`\max(1,\chi^2/\mathrm{dof})`.

The modules, one a stage:

========================  ==================================================================
module                    stage
========================  ==================================================================
:mod:`.ask`               ask: ratio queries, :math:`V` (:func:`~.ask.ask_V`), the context
:mod:`.fit`               fit: one configuration, a group with shared heights
:mod:`.passes`            design and fit: the scale, the coarse, random and placed passes
:mod:`.solve`             solve: regression, links, heads, the error estimate, the check of :math:`V`
:mod:`.run`               the run: the stages in order, then the shared finish
:mod:`.info`              the Cramér–Rao bound of a configuration, the information limit
========================  ==================================================================

Its cost, ratios and noise model are with the other designs' (:func:`attnlearn.learner.cost.long_cost`,
:func:`attnlearn.learner.nodes.ratio_grid`, :func:`attnlearn.learner.samples.noise_sd`).

References
----------
.. [1] S. Kim, I. Kim, J. Guo, "Provably Learning Multi-Head Attention with Queries",
       arXiv:2608.03294, 2026.
.. [2] Y. Nakatsukasa, O. Sète, L. N. Trefethen, "The AAA algorithm for rational
       approximation", SIAM J. Sci. Comput. 40 (2018).
"""
