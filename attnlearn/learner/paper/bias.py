r"""Score biases and an output offset: ``learn(bias=True)`` (chapter 7).

PyTorch's ``nn.MultiheadAttention(bias=True)`` read out at its last position is the scalar layer

.. math:: f(X)=\sum_{h}v_h^\top\sum_i\alpha_{h,i}x_i+\beta,\qquad
          \alpha_h=\operatorname{softmax}_i\big(x_i^\top(W_hx_N+c_h)\big)

(:class:`attnlearn.layer.AttentionLayer` with ``c`` and ``b``; :func:`attnlearn.torch.from_torch`).
On a configuration :math:`S(x,q,t)` (:math:`x=q-u`) head :math:`h`'s two scores differ by
:math:`u^\top(W_hq+c_h)`, so

.. math:: F(t)=V^\top q+\beta+\sum_h\frac{\gamma_h}{1+\rho_ht},\qquad
          \ell_h=u^\top\tilde w_h(q),\quad \tilde w_h(q)=W_hq+c_h,\quad\gamma_h=-u^\top v_h :

the paper's rational function, with :math:`W_hq` replaced by the *affine* map :math:`\tilde w_h(q)`
and the constant by :math:`V^\top q+\beta`. What changes in chapter 4's design:

* **The constants.** The shared query :math:`(q_1)` answers :math:`c_1=V^\top q_1+\beta`, exactly the
  constant of block 1. :math:`V` comes from block 1's residues,
  :math:`\sum_h\gamma_h=-u_{1,j}^\top V` over its :math:`d` base configurations (the paper's
  :math:`F(0)=V^\top x` would carry :math:`\beta`), and every other constant is
  :math:`c_1+V^\top(q-q_1)`: no query more. The offset is :math:`\beta=c_1-V^\top q_1`, with
  :math:`V=\sum_hv_h` from the final solve.
* **One more block.** :math:`(W_h,c_h)` has :math:`d^2+d` unknowns and a block gives :math:`d`
  (:math:`\tilde w_h(q_k)`): :math:`d+1` blocks with affinely independent final tokens
  :math:`q_1..q_{d+1}` (random) give :math:`[W_h\;c_h]=[\tilde w_{h,1}\cdots\tilde w_{h,d+1}]
  \begin{bmatrix}Q\\ \mathbf 1^\top\end{bmatrix}^{-1}`.
* **Midpoint crosses.** An affine map is additive only over weights summing to 1:
  :math:`\tilde w_h(q_1+q_k)=\tilde w_{h,1}+\tilde w_{h,k}-c_h` needs :math:`c_h` before the
  labelling, but :math:`\tilde w_h\big(\tfrac{q_1+q_k}2\big)=\tfrac12(\tilde w_{h,1}+\tilde w_{h,k})`
  does not. The crosses' final token is the midpoint and the matching predicts half the sum
  (:attr:`~.design.ConfigTable.mid`); their constant is :math:`(c_1+c_k)/2`.

So the count is :math:`2n\big(2d^2-1+2d\big)+1=4nd^2+4nd-2n+1` (:func:`~attnlearn.learner.cost.bias_budget`): the
paper's plus the extra block's :math:`d` base, :math:`d-1` link and one cross configuration,
longest query :math:`2n+1`; robust mode asks :math:`d` block constants (one more).

Used in: chapter 7 (biased layers: the derivation, the count, exact and float64 recoveries).
"""

from dataclasses import dataclass

import numpy as np

from ..._arith import norm, solve, to_float, to_mp
from ...canonical import matched_error
from ...errors import IllConditionedError, NotIdentifiableError
from ...layer import AttentionLayer
from .labelling import label_crosses, label_links
from .solves import solve_blocks, solve_v
from .stages import finish_design, fit_design
from ..tolerances import Tolerances

#: Smallest denominator of a relative error (the Tolerances' ``tiny``; the same in every mode).
_TINY = Tolerances.for_mode(exact=False).tiny

__all__ = ["AffineHeads", "affine_heads", "biased_layer", "bias_error", "learn_biased"]


@dataclass
class AffineHeads:
    r"""The heads' affine maps :math:`[W_h\;c_h]`: ``W`` (H, d, d), ``c`` (H, d) and ``err``
    (H, d, d + 1), the entrywise first-order bounds on :math:`[W_h\;c_h]`.

    Used in: chapter 7."""

    W: np.ndarray
    c: np.ndarray
    err: np.ndarray


def affine_heads(design, blocks, crosses):
    r""":math:`[W_h\;c_h]=[\tilde w_{h,1}\cdots\tilde w_{h,d+1}]\,\hat Q^{-1}`, :math:`\hat Q=
    \begin{bmatrix}Q\\ \mathbf 1^\top\end{bmatrix}` (block k's heads relabelled by the crosses).
    Returns the :class:`AffineHeads`, ``err`` the entrywise first-order bound :math:`|d\tilde w|\,|\hat Q^{-1}|`.

    Parameters
    ----------
    design : Design
        The biased design: its final tokens ``Q`` (:math:`d\times(d+1)`).
    blocks : BlockSolution
        Every block's :math:`\tilde w_{h,k}` (``w``) and bounds (``err_w``)
        (:func:`.solves.solve_blocks`).
    crosses : CrossLabels
        The crosses' relabelling ``perm`` of every block's heads (:func:`.labelling.label_crosses`).

    Returns
    -------
    AffineHeads

    Used in: chapter 7."""
    B, H = design.table.B, crosses.perm.shape[1]
    d = design.table.d
    w, ew, perm = blocks.w, blocks.err_w, crosses.perm
    cols = np.empty((H, d, B), dtype=w.dtype)
    ecols = np.zeros((H, d, B))
    for h in range(H):
        for k in range(B):
            cols[h, :, k] = w[k, perm[k, h]]
            ecols[h, :, k] = ew[k, perm[k, h]]
    Qh = np.concatenate([design.Q, np.ones((1, B), dtype=design.Q.dtype)])
    if Qh.dtype == object:
        Qh = to_mp(Qh)
    Wc = np.stack([solve(Qh.T, cols[h].T).T for h in range(H)])  # (H, d, d + 1)
    err = ecols @ np.abs(np.linalg.inv(to_float(Qh)))
    return AffineHeads(Wc[:, :, :d], Wc[:, :, d], err)


def biased_layer(heads, v, err_v, c1, q1, *, eps_out, tol):
    r"""The recovered layer :math:`\{(W_h,c_h,v_h)\},\beta` and its error estimate.

    :math:`\beta=c_1-V^\top q_1` with :math:`V=\sum_hv_h`; its bound
    :math:`\varepsilon+|q_1|\cdot|dV|`. The estimate is ``tol.estimate_factor`` times the largest
    first-order relative error in the measure of :func:`bias_error`.

    Parameters
    ----------
    heads : AffineHeads
        The heads' :math:`W_h`, their score biases :math:`c_h` and the first-order bounds on
        :math:`[W_h\;c_h]` (:func:`affine_heads`).
    v : array (H, d)
        Their :math:`v_h`.
    err_v : array (H, d)
        First-order bounds on :math:`v_h`.
    c1 : number
        The shared query's answer :math:`c_1=V^\top q_1+\beta`.
    q1 : array (d,)
        Its final token.
    eps_out : float, keyword-only
        The samples' absolute error.
    tol : Tolerances, keyword-only
        ``estimate_factor`` and ``tiny``.

    Returns
    -------
    (AttentionLayer, float)
        The layer (scalar, with ``c`` and ``b``) and its error estimate.

    Raises
    ------
    NotIdentifiableError
        A head recovered with :math:`v=0`.

    Used in: chapter 7."""
    W, c, err = heads.W, heads.c, heads.err
    H = len(W)
    for h in range(H):
        if norm(v[h]) == 0:
            raise NotIdentifiableError(f"head {h} was recovered with v = 0 (not a canonical head)")
    V = v.sum(axis=0) if H else np.zeros(len(q1), dtype=np.asarray(q1).dtype)
    beta = c1 - V.dot(q1)
    rel = [0.0]
    for h in range(H):
        nW, nc, nv = float(norm(W[h])), float(norm(c[h])), float(norm(v[h]))
        rel += [float(np.linalg.norm(err[h, :, :-1])) / nW, float(np.linalg.norm(err[h, :, -1])) / max(nc, nW),
                float(np.linalg.norm(err_v[h])) / nv]
    e_beta = eps_out + float(np.abs(to_float(q1)).dot(np.abs(err_v).sum(axis=0))) if H else eps_out
    vmax = max([float(norm(v[h])) for h in range(H)], default=0.0)
    rel.append(e_beta / max(abs(float(to_float(beta))), vmax, tol.tiny))
    return AttentionLayer(W, v, c=c, b=np.asarray(beta)), tol.estimate_factor * max(rel)


def bias_error(model, truth):
    r"""Relative error of a recovered biased scalar layer against ``truth`` (both
    :class:`~attnlearn.layer.AttentionLayer`, scalar read-out), after the optimal head matching:
    the largest of :math:`\|\Delta W_h\|/\|W_h\|`, :math:`\|\Delta v_h\|/\|v_h\|`,
    :math:`\|\Delta c_h\|/\max(\|c_h\|,\|W_h\|)` and :math:`|\Delta\beta|/\max(|\beta|,\max_h\|v_h\|)`
    (Frobenius norms; ``inf`` when the head counts differ). A bias is measured against the
    size of its head when it is smaller (a zero bias, PyTorch's initial value, has no relative
    error): :math:`c_h` enters the score beside :math:`W_hx_N`, :math:`\beta` the output beside
    :math:`v_h^\top x`.

    Parameters
    ----------
    model, truth : AttentionLayer
        Scalar layers (float64 or mpmath; in mpmath when either is), ``truth`` the reference.

    Returns
    -------
    float

    Raises
    ------
    TypeError
        Either is not a scalar :class:`~attnlearn.layer.AttentionLayer`.
    ValueError
        Their token widths differ.

    Used in: chapter 7."""
    for m in (model, truth):
        if not isinstance(m, AttentionLayer) or not m.scalar:
            raise TypeError(f"bias_error expects scalar AttentionLayer models, got {m!r}")
    if model.d != truth.d:
        raise ValueError(f"layers of different widths: d = {model.d}, {truth.d}")
    if model.H != truth.H:
        return float("inf")
    # in mpmath when either layer is (exact mode: the error far below float64's rounding)
    exact = model.exact or truth.exact
    f = (lambda a: to_mp(np.asarray(a))) if exact else (lambda a: np.asarray(a, dtype=float))  # noqa: E731
    zc = np.zeros((truth.H, truth.d))
    W1, v1, c1 = f(model.W), f(model.A), f(model.c if model.c is not None else zc)
    W2, v2, c2 = f(truth.W), f(truth.A), f(truth.c if truth.c is not None else zc)

    def cost(i, j):
        nW = norm(W2[j])
        return max(norm(W1[i] - W2[j]) / nW, norm(v1[i] - v2[j]) / norm(v2[j]),
                   norm(c1[i] - c2[j]) / max(norm(c2[j]), nW))

    C = np.array([[cost(i, j) for j in range(truth.H)] for i in range(model.H)]).reshape(model.H, truth.H)
    worst = matched_error(C)
    b1 = f(model.b if model.b is not None else [0.0])[0]
    b2 = f(truth.b if truth.b is not None else [0.0])[0]
    vmax = max([norm(v2[j]) for j in range(truth.H)], default=0.0)
    return max(worst, float(abs(b1 - b2)) / max(float(abs(b2)), vmax, _TINY))


def learn_biased(oracle, opt, tol):
    r"""The stages of ``learn(bias=True)`` (module docstring): the paper's pipeline with the
    extra block, midpoint crosses, :math:`V` from the residues, constants
    :math:`c_1+V^\top(q-q_1)`, the affine solve and the offset. Returns the
    :class:`~.results.Recovery` whose model is an :class:`~attnlearn.layer.AttentionLayer`
    (scalar, with ``c`` and ``b``).

    Parameters
    ----------
    oracle : Access
        The checked, counted oracle access (:class:`attnlearn.protocol.Access`).
    opt : PaperOptions
        ``learn``'s validated options (:func:`..options.build_options`).
    tol : Tolerances
        The mode's tolerances (:meth:`.tolerances.Tolerances.for_mode`).

    Returns
    -------
    Recovery

    Raises
    ------
    RecoveryError
        As :func:`attnlearn.learn` (a fit, a matching, a check or the held-out queries fail).

    Used in: chapter 7."""
    fitted = fit_design(oracle, opt, tol)  # affine positions: d + 1 blocks, V from the residues
    design, state, H, diag, errors, c1 = (fitted.design, fitted.state, fitted.H, fitted.diagnostics, fitted.errors,
                                          fitted.c1)
    d, pre = opt.d, fitted.pre
    # ---- labelling and solves: links label each block, the midpoint crosses label the blocks
    if H == 0:
        if opt.output_error is not None:  # as the paper's learner: absence of heads not certifiable
            raise IllConditionedError(
                f"every configuration is within the output error ({errors.output:.1e}) of a constant: with noisy "
                "outputs no canonical head can be certified, nor their absence")
        dt = object if tol.exact else float
        none = AffineHeads(np.zeros((0, d, d), dtype=dt), np.zeros((0, d), dtype=dt), np.zeros((0, d, d + 1)))
        model, estimate = biased_layer(none, np.zeros((0, d), dtype=dt), np.zeros((0, d)),
                                       c1, design.q[0], eps_out=errors.output, tol=tol)
    else:
        eq, links = label_links(state, design.table, design.labels, tol=tol,
                                pre_links=None if pre is None else pre.links)
        blocks = solve_blocks(design, eq, tol=tol)
        crosses = label_crosses(state, design, blocks, tol=tol)
        heads = affine_heads(design, blocks, crosses)
        v, err_v = solve_v(design, eq, crosses.perm, state, crosses.matching.observed, tol=tol)
        model, estimate = biased_layer(heads, v, err_v, c1, design.q[0], eps_out=errors.output, tol=tol)
        diag.record_matchings(link=links, cross=crosses.matching)
    return finish_design(oracle, fitted, model, estimate, opt=opt, tol=tol)
