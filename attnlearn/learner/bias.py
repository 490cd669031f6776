r"""Score biases and an output offset: ``learn(bias=True)`` (issue 14; chapter 7).

PyTorch's ``nn.MultiheadAttention(bias=True)`` read out at its last position is the scalar layer

.. math:: f(X)=\sum_{h}v_h^\top\sum_i\alpha_{h,i}x_i+\beta,\qquad
          \alpha_h=\operatorname{softmax}_i\big(x_i^\top(W_hx_N+c_h)\big)

(:class:`attnlearn.layer.AttentionLayer` with ``c`` and ``b``; :func:`attnlearn.torch.from_torch`).
On a configuration :math:`S(x,q,t)` (:math:`x=q-u`) head :math:`h`'s two scores differ by
:math:`u^\top(W_hq+c_h)`, so

.. math:: F(t)=V^\top q+\beta+\sum_h\frac{\gamma_h}{1+\rho_ht},\qquad
          \ell_h=u^\top\tilde w_h(q),\quad \tilde w_h(q)=W_hq+c_h,\quad\gamma_h=-u^\top v_h :

the paper's rational function, with :math:`W_hq` replaced by the *affine* map :math:`\tilde w_h(q)`
and the constant by :math:`V^\top q+\beta`. What changes in the design (DESIGN §4.4):

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

So the count is :math:`2n\big(2d^2-1+2d\big)+1=4nd^2+4nd-2n+1` (:func:`bias_budget`): the
paper's plus the extra block's :math:`d` base, :math:`d-1` link and one cross configuration,
longest query :math:`2n+1`; robust mode asks :math:`d` block constants (one more).

Used in: chapter 7 (biased layers: the derivation, the count, exact and float64 recoveries).
"""

import numpy as np

from .._arith import norm, solve, to_float, to_mp
from ..errors import IllConditionedError, NotIdentifiableError
from ..layer import AttentionLayer
from .asking import ask_constants, ask_design
from .checks import check_fits, finish
from .constants import VSolution, fit_calibrated, set_constants
from .design import build_design, draw_directions, node_pairs
from .fitting import ConfigState, collect_fits, fit_block_one, sample_errors
from .labelling import label_crosses, label_links
from .results import Diagnostics
from .robust import redraw
from .scale import find_scale
from .solves import solve_blocks, solve_v
from .tolerances import Tolerances
from .verify import verify_fits

#: Smallest denominator of a relative error (the Tolerances' ``tiny``; the same in every mode).
_TINY = Tolerances.for_mode(exact=False).tiny

__all__ = ["bias_budget", "solve_V_biased", "affine_heads", "biased_layer", "bias_error", "learn_biased"]


def bias_budget(d, n):
    r"""The biased design's count :math:`4nd^2+4nd-2n+1` and longest query :math:`2n+1` (module
    docstring).

    Parameters
    ----------
    d : int
        Token width.
    n : int
        Heads the design serves.

    Returns
    -------
    (int, int)
        The design's query count and its longest query.

    Used in: chapter 7."""
    return 4 * n * d * d + 4 * n * d - 2 * n + 1, 2 * n + 1


def solve_V_biased(design, fit1, idx1, *, H, eps_out):
    r""":math:`V` from block 1's residues, :math:`\sum_h\gamma_h=-u_{1,j}^\top V` (:math:`j=1..d`).

    The bound: the residues' sum is off by at most its sensitivity times the samples' and
    :math:`c_1`'s error (:math:`2\varepsilon`), so :math:`|dV|_\infty\le|U_1^{-1}|_\infty\max_j
    |d\sum_h\gamma_h|` to first order.

    Parameters
    ----------
    design : Design
        The biased design (:func:`.design.build_design` with ``bias=True``).
    fit1 : RationalFit
        Block 1's rational fits (:func:`.fitting.fit_block_one`): residues ``gamma``, their
        sensitivities ``sens``.
    idx1 : list of int
        Block 1's configurations (rows of ``design.table``), in the order of ``fit1``.
    H : int, keyword-only
        The canonical head count.
    eps_out : float, keyword-only
        The samples' absolute error.

    Returns
    -------
    VSolution
        :math:`V` and its first-order bound.

    Used in: chapter 7."""
    table = design.table
    base0 = [i for i in idx1 if table.kind[i] == "base"]
    pos = {i: p for p, i in enumerate(idx1)}
    U0 = -design.u[base0]
    S = np.array([sum(fit1.gamma[pos[i]]) if H else 0 * U0[0, 0] for i in base0], dtype=U0.dtype)
    V = solve(U0, S)
    inv_norm = float(np.abs(np.linalg.inv(to_float(U0))).sum(axis=1).max())
    dS = 2 * eps_out * float(np.max(np.asarray(fit1.sens)[:, 1, :].sum(axis=1))) if H else 0.0
    return VSolution(V, inv_norm * dS)


def affine_heads(design, blocks, crosses):
    r""":math:`[W_h\;c_h]=[\tilde w_{h,1}\cdots\tilde w_{h,d+1}]\,\hat Q^{-1}`, :math:`\hat Q=
    \begin{bmatrix}Q\\ \mathbf 1^\top\end{bmatrix}` (block k's heads relabelled by the crosses).
    Returns ``(W (H, d, d), c (H, d), err (H, d, d + 1))``, ``err`` the entrywise first-order
    bound :math:`|d\tilde w|\,|\hat Q^{-1}|`.

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
    W : array (H, d, d)
    c : array (H, d)
    err : array (H, d, d + 1)

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
    return Wc[:, :, :d], Wc[:, :, d], err


def biased_layer(W, c, v, err, err_v, c1, q1, *, eps_out, tol):
    r"""The recovered layer :math:`\{(W_h,c_h,v_h)\},\beta` and its error estimate.

    :math:`\beta=c_1-V^\top q_1` with :math:`V=\sum_hv_h`; its bound
    :math:`\varepsilon+|q_1|\cdot|dV|`. The estimate is ``tol.estimate_factor`` times the largest
    first-order relative error in the measure of :func:`bias_error`.

    Parameters
    ----------
    W : array (H, d, d)
        The heads' :math:`W_h`.
    c : array (H, d)
        Their score biases :math:`c_h`.
    v : array (H, d)
        Their :math:`v_h`.
    err : array (H, d, d + 1)
        First-order bounds on :math:`[W_h\;c_h]` (:func:`affine_heads`).
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
    from scipy.optimize import linear_sum_assignment

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
    worst = float(C[linear_sum_assignment(C)].max()) if truth.H else 0.0
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
    opt : Options
        ``learn``'s validated options (:func:`.pipeline._options`).
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
    rng = np.random.default_rng(opt.seed)
    ask = oracle
    start, d = oracle.queries, opt.d
    nodes = node_pairs(opt.n, opt.nodes)
    # ---- design: the shared query and the probe (block 1's constant is c_1 = V^T q_1 + beta)
    dirs = draw_directions(rng, d, bias=True)
    conv = to_mp if tol.exact else (lambda a: np.asarray(a, dtype=float))
    q1, u11 = conv(dirs.q[0]), conv(dirs.base[0, 0])
    probe = find_scale(ask, q1, u11, nodes, n=opt.n, heads_given=opt.heads_given, spread=opt.spread, rng=rng, tol=tol,
                       output_error=opt.output_error, method=opt.method, search=opt.scale == "search")
    c1, F11, H = probe.c1, probe.F11, probe.H
    design = build_design(dirs, probe.q1, probe.u11, probe.f, exact=tol.exact, bias=True)
    B = design.table.B
    state = ConfigState.start(ask_design(ask, design, F11, nodes))
    queries = {"design": oracle.queries - start - probe.queries, "constants": 0, "redraws": 0, "holdout": 0}
    if probe.queries:
        queries["scale"] = probe.queries
    # ---- robust mode: the block constants asked (V^T q_k + beta), ill-conditioned configurations redrawn
    cq, pre = None, None
    if opt.robust:
        cq = ask_constants(ask, c1, design.q)
        queries["constants"] = B - 1
        if H > 0:
            eps_in = 2 * sample_errors(state.F, opt.output_error, tol).output
            pre = redraw(design, state.F, cq, nodes, H=H, rng=rng, ask=ask, method=opt.method, eps_in=eps_in,
                         rounds=opt.redraw_rounds, tol=tol)
            queries["redraws"] = pre.queries
    # ---- constants and fits: V from block 1's residues, the other constants c_1 + V^T (q_k - q_1)
    errors = sample_errors(state.F, opt.output_error, tol)
    idx1, rest = state.split_block_one(design.table, c1, errors.output)
    fit_kw = dict(H=H, errors=errors, pre=None if pre is None else pre.fits, method=opt.method)
    fit1 = fit_block_one(nodes, state.F, c1, idx1, design.labels, **fit_kw)
    V = solve_V_biased(design, fit1, idx1, H=H, eps_out=errors.output)
    if cq is None:
        q0 = design.q[0]
        cq = np.array([c1] + [c1 + (design.q[k] - q0).dot(V.V) for k in range(1, B)], dtype=state.F.dtype)
    set_constants(state, design, cq, asked=opt.robust, Verr=V.err, eps_out=errors.output)
    fit_rest, calib = fit_calibrated(nodes, state, design, rest, tol=tol, calibrate=not opt.robust and H > 0 and d > 1,
                                     **fit_kw)
    collect_fits(state, [(fit1, idx1), (fit_rest, rest)], H, errors.output)
    check_fits(state, design.labels, opt.n, heads_given=opt.heads_given, output_error=opt.output_error,
               eps_out=errors.output, tol=tol)
    queries["holdout"] = verify_fits(ask, design, state, nodes, count=opt.holdout, eps_out=errors.output, tol=tol)
    diag = Diagnostics(
        labels=design.labels, pairs=nodes.pairs, interp_residual=state.residual,
        condition=state.sens.reshape(len(state.F), -1).max(axis=1) if H else np.zeros(len(state.F)),
        scale={"probe_max_abs_ell": probe.max_abs_ell, "factor": design.f, "probe_scales": probe.scales}, V=V.V,
        redrawn=pre.redrawn if pre is not None else [], redrawn_blocks=pre.blocks if pre is not None else [],
        calibration=None if calib is None else calib.summary())
    # ---- labelling and solves: links label each block, the midpoint crosses label the blocks
    if H == 0:
        if opt.output_error is not None:  # as the paper's learner: absence of heads not certifiable
            raise IllConditionedError(
                f"every configuration is within the output error ({errors.output:.1e}) of a constant: with noisy "
                "outputs no canonical head can be certified, nor their absence")
        dt = object if tol.exact else float
        model, estimate = biased_layer(np.zeros((0, d, d), dtype=dt), np.zeros((0, d), dtype=dt),
                                       np.zeros((0, d), dtype=dt), np.zeros((0, d, d + 1)), np.zeros((0, d)),
                                       c1, design.q[0], eps_out=errors.output, tol=tol)
    else:
        eq, links = label_links(state, design.table, design.labels, tol=tol,
                                pre_links=None if pre is None else pre.links)
        blocks = solve_blocks(design, eq, tol=tol)
        crosses = label_crosses(state, design, blocks, tol=tol)
        W, c, err = affine_heads(design, blocks, crosses)
        v, err_v = solve_v(design, eq, crosses.perm, state, crosses.matching.observed, tol=tol)
        model, estimate = biased_layer(W, c, v, err, err_v, c1, design.q[0], eps_out=errors.output, tol=tol)
        for name, mt in (("link", links), ("cross", crosses.matching)):
            if mt is not None:
                setattr(diag, f"{name}_residual", mt.residual)
                setattr(diag, f"{name}_margin", mt.margin)
    return finish(oracle, model, queries, diag, max_length=nodes.max_length, eps_out=errors.output,
                  stated=errors.stated, estimate=estimate, holdout=opt.holdout - queries["holdout"], rng=rng,
                  f=design.f, tol=tol, verified=opt.holdout > 0)
