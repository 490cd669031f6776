r"""The lean design's phase 2: every other final token's configurations solved for their roots
(:mod:`.roots`), the combination kept by a check query, and the heads solved
(:func:`solve_heads`).

Used in: chapter 8.
"""

import math
from dataclasses import dataclass

import mpmath
import numpy as np

from ..._arith import mp_solve, to_float
from ...errors import IllConditionedError, PoleError, UnmatchedHeadsError
from ..heads import HeadMatrices
from ..nodes import extra_node, lean_nodes
from .ask import ask_queries, ask_configs
from .roots import complete_roots

__all__ = ["FinalToken", "BlockRoots", "phase_two_block", "screen_extra", "choose_combination", "root_errors", "solve_heads",
           "MAX_COMBINATIONS"]

#: Most combinations of candidate roots one check query may have to examine (a cost limit,
#: not a tolerance: the prototype met up to 92,160 at H = 4, d = 6; each is a few float64
#: operations).
MAX_COMBINATIONS = 5_000_000


@dataclass(frozen=True)
class FinalToken:
    r"""Phase 2's block of the final token :math:`q_j`: its index ``j``, ``qj``, phase 1's final
    token ``q0``, the directions ``U`` (d, d) of its configurations, the check query's ``weights``
    :math:`w_i`, and ``eps``, the error of a sample less the constant's (twice the output error).

    Used in: chapter 8."""

    j: int
    qj: np.ndarray
    q0: np.ndarray
    U: np.ndarray
    weights: np.ndarray
    eps: float


@dataclass
class BlockRoots:
    r"""Phase 2 for one final token :math:`q_j`: ``U`` (d, d) its directions, ``ell`` (m, d)
    the chosen :math:`\log\rho_h` per configuration, ``candidates`` per configuration,
    ``combinations`` examined by the check (0 when not asked), ``margin`` (the best wrong
    combination's residual over the answer's scale), ``tries`` and ``separation`` of the
    root sets, ``G``/``tau``/``gamma`` kept for the error bounds."""

    U: np.ndarray
    ell: np.ndarray
    candidates: list
    combinations: int
    margin: float
    tries: int
    separation: float
    gamma: np.ndarray
    tau: list


def phase_two_block(ask, block, p1, *, rng, tol, extra_sample=False):
    r"""Phase 2 for the final token :math:`q_j` (``block``, a :class:`FinalToken`): :math:`m`
    samples of each of the :math:`d` configurations (rows of ``block.U``), every root of each configuration's system, and (when some
    configuration has several real positive roots) the check query with final token
    :math:`q_0+q_j` that chooses the combination. Returns :class:`BlockRoots`.

    With ``extra_sample`` (the variant of chapter 8 with :math:`m+1` samples per configuration)
    each configuration is also asked at :func:`extra_node`, and only the roots that reproduce
    that sample stay candidates (:func:`screen_extra`); the check query is asked only when some
    configuration keeps several.

    Raises
    ------
    PoleError
        A configuration with no real positive root.
    IllConditionedError
        An incomplete root set (:func:`~.roots.complete_roots`) or too many combinations.
    UnmatchedHeadsError
        No combination, or more than one, reproduces the check query.

    Used in: chapter 8."""
    j, qj, U, eps = block.j, block.qj, block.U, block.eps
    d, m = len(qj), p1.m
    pairs = lean_nodes(m) + ([extra_node(m)] if extra_sample else [])
    tau = [mpmath.mpf(t) / s for s, t in pairs]
    F = ask_configs(ask, U, qj, pairs, f"block q_{j}")
    cj = mpmath.fsum(p1.V * qj)
    gamma = np.array([[-mpmath.fsum(U[i] * p1.v[h]) for h in range(m)] for i in range(d)], dtype=object)
    dG = eps + np.abs(to_float(qj)) @ np.abs(p1.err_v).sum(axis=0)
    cands, tries, seps = [], 0, []
    for i in range(d):
        label = f"block q_{j}, configuration {i + 1}"
        rs = complete_roots(list(gamma[i]), tau[:m], [F[i, k] - cj for k in range(m)], rng=rng, label=label)
        found = rs.candidates
        if extra_sample and found:
            found = screen_extra(found, list(gamma[i]), tau[m], F[i, m] - cj, tau=tau[:m], dG=dG,
                                 dgam=np.abs(to_float(U[i])) @ p1.err_v.T, tol=tol)
        if not found:
            raise PoleError(f"{label}: none of the {len(rs.roots)} roots of its system is real and positive"
                            + (" and reproduces the extra sample" if extra_sample else "")
                            + ": the samples are not of the model's form at this precision")
        cands.append(found)
        tries, seps = tries + rs.tries, seps + [rs.separation]
    if all(len(c) == 1 for c in cands):
        ell = np.array([[mpmath.log(cands[i][0][h]) for i in range(d)] for h in range(m)], dtype=object)
        return BlockRoots(U, ell, cands, 0, math.inf, tries, min(seps), gamma, tau[:m])
    choice, n_comb, margin = choose_combination(ask, block, cands, p1, gamma=gamma, tau=tau[:m], tol=tol)
    ell = np.array([[mpmath.log(cands[i][choice[i]][h]) for i in range(d)] for h in range(m)], dtype=object)
    return BlockRoots(U, ell, cands, n_comb, margin, tries, min(seps), gamma, tau[:m])


def choose_combination(ask, block, cands, p1, *, gamma, tau, tol):
    r"""The check query of block :math:`q_j` (``block``, a :class:`FinalToken`): final token :math:`q_c=q_0+q_j`, direction
    :math:`u_c=\sum_iw_iu_{j,i}` (one sample, :math:`t=1`), and the one combination of the
    configurations' candidate roots whose prediction
    :math:`V^\top q_c+\sum_h\gamma_h/(1+e^{\ell_h})`, with
    :math:`\ell_h=u_c^\top W_hq_0+\sum_iw_i\log\rho^{(i)}_h`, reproduces it. Every combination
    is screened in float64 (vectorised). Exact mode: those within :math:`10^{-8}` of the
    answer's scale are checked at the working precision, and exactly one must pass within
    ``tol.exact_residual``. float64: exactly one must lie within ``tol.match_safety`` times
    its first-order error bound (the roots' bounds :func:`root_errors` under the sample error
    ``eps``, phase 1's bounds on :math:`W_hq_0`, :math:`v_h` and :math:`V`), or, when several
    do, the best one if the runner-up's residual is ``tol.lean_separation`` times larger.

    Returns ``(choice, combinations, margin)``.

    Used in: chapter 8."""
    j, qj, q0, U, eps = block.j, block.qj, block.q0, block.U, block.eps
    d, m = len(qj), p1.m
    sizes = [len(c) for c in cands]
    n_comb = int(np.prod(sizes, dtype=object))
    if n_comb > MAX_COMBINATIONS:
        raise IllConditionedError(f"block q_{j}: {n_comb:,} combinations of candidate roots exceed "
                                  f"MAX_COMBINATIONS = {MAX_COMBINATIONS:,}")
    w = block.weights
    uc = np.array([mpmath.fsum(w[i] * U[i, k] for i in range(d)) for k in range(d)], dtype=object)
    qc = q0 + qj
    obs = ask_queries(ask, np.stack([qc - uc, qc])[None], f"the check query of block q_{j}")[0]
    gc = [-mpmath.fsum(uc * p1.v[h]) for h in range(m)]
    base = [mpmath.fsum(uc * p1.w0[h]) for h in range(m)]
    const = mpmath.fsum(p1.V * qc)
    logs = [np.array([[float(mpmath.log(r[h])) for h in range(m)] for r in c]) for c in cands]
    S = np.array([float(b) for b in base])[None, :]
    for i in range(d):
        S = (S[:, None, :] + w[i] * logs[i][None, :, :]).reshape(-1, m)
    gf = np.array([float(g) for g in gc])
    with np.errstate(over="ignore"):
        pred = float(const) + (gf[None, :] / (1 + np.exp(S))).sum(axis=1)
    res = np.abs(pred - float(obs))
    scale = max(abs(float(obs)), 1.0)
    order = np.argsort(res)
    if not tol.exact:
        bound = _combination_bounds(S, gf, uc, block, cands, p1, gamma=gamma, tau=tau)
        passed = np.flatnonzero(res <= tol.match_safety * bound)
        if len(passed) > 1 and res[order[1]] >= tol.lean_separation * max(res[order[0]], eps / 2):
            # the first-order bounds are worst-case sums: when several combinations lie within
            # them, the best is kept only if every other misses the answer by far more
            passed = order[:1]
        if len(passed) != 1:
            raise UnmatchedHeadsError(
                f"block q_{j}: {len(passed)} of the {n_comb:,} combinations of candidate roots reproduce the check "
                f"query within {tol.match_safety:g} x their error bounds (best residual {res[order[0]]:.1e}, "
                f"its bound {bound[order[0]]:.1e})")
        wrong = res[order[1]] / scale if n_comb > 1 else math.inf
        return [int(x) for x in np.unravel_index(int(passed[0]), sizes)], n_comb, float(wrong)
    screened = [int(k) for k in order[:64] if res[k] <= 1e-8 * scale]
    limit = tol.exact_residual * scale
    passed = []
    for k in screened:
        idx = np.unravel_index(k, sizes)
        ell = [base[h] + mpmath.fsum(w[i] * mpmath.log(cands[i][idx[i]][h]) for i in range(d)) for h in range(m)]
        pred_mp = const + mpmath.fsum(gc[h] / (1 + mpmath.exp(ell[h])) for h in range(m))
        if abs(pred_mp - obs) <= limit:
            passed.append(idx)
    if len(passed) != 1:
        raise UnmatchedHeadsError(
            f"block q_{j}: {len(passed)} of the {n_comb:,} combinations of candidate roots reproduce the check "
            f"query within {float(limit):.1e} (best float64 residual {res[order[0]]:.1e})")
    wrong = res[order[1]] / scale if n_comb > 1 else math.inf
    return [int(x) for x in passed[0]], n_comb, float(wrong)


def root_errors(gamma, rho, tau, dG, dgam):
    r"""First-order bound of :math:`|\delta\ell_h|` of one phase-2 configuration's root
    :math:`\rho`: :math:`|J_\ell^{-1}|(\delta G+|B|\,\delta\gamma)`, with
    :math:`J_\ell[i,h]=-\gamma_h\rho_h\tau_i/(1+\rho_h\tau_i)^2` and
    :math:`B[i,h]=1/(1+\rho_h\tau_i)` the derivatives of the samples (float64 arrays in, out).

    Used in: chapter 8."""
    A = 1 + rho[None, :] * tau[:, None]
    Jl = -gamma[None, :] * rho[None, :] * tau[:, None] / A ** 2
    with np.errstate(all="ignore"):
        try:
            Jinv = np.abs(np.linalg.inv(Jl))
        except np.linalg.LinAlgError:
            return np.full(len(rho), np.inf)
    return Jinv @ (dG + np.abs(1 / A) @ dgam)


def _combination_bounds(S, gf, uc, block, cands, p1, *, gamma, tau):
    r"""float64: the first-order bound of every combination's predicted check answer (in the
    order of the combinations in ``S``, the :math:`\ell_h` of each): the answer's error, the
    constant's :math:`|q_c|^\top\delta V`, and per head
    :math:`\delta\gamma_h\sigma_h+|\gamma_h|\sigma_h(1-\sigma_h)\delta\ell_h` with
    :math:`\sigma_h=1/(1+e^{\ell_h})` and :math:`\delta\ell_h` summed over phase 1's
    :math:`|u_c|^\top\delta(W_hq_0)` and the configurations' :math:`|w_i|` times
    :func:`root_errors` (``block``: the :class:`FinalToken`, its check query's final token
    :math:`q_c=q_0+q_j`).

    Used in: chapter 8."""
    qc, qj, U, w, eps = block.q0 + block.qj, block.qj, block.U, block.weights, block.eps
    d, m = len(cands), p1.m
    tauf = np.array([float(t) for t in tau])
    dV = np.abs(p1.err_v).sum(axis=0)
    Uf, ucf = to_float(U), np.abs(to_float(uc))
    dG = eps + np.abs(to_float(qj)) @ dV
    E = (ucf @ p1.err_w0.T)[None, :]
    for i in range(d):
        dgam = np.abs(Uf[i]) @ p1.err_v.T
        g = to_float(gamma[i])
        Di = np.array([root_errors(g, np.array([float(x) for x in c]), tauf, dG, dgam) for c in cands[i]])
        E = (E[:, None, :] + abs(w[i]) * Di[None, :, :]).reshape(-1, m)
    with np.errstate(over="ignore"):
        sig = 1 / (1 + np.exp(S))
    dgc = ucf @ p1.err_v.T
    heads = dgc[None, :] * sig + np.abs(gf)[None, :] * sig * (1 - sig) * E
    return eps / 2 + np.abs(to_float(qc)) @ dV + heads.sum(axis=1)


def _block_errors(p1, blk, qj, eps):
    r"""First-order bounds of block :math:`q_j`'s :math:`W_hq_j`: per configuration
    :math:`|\delta\ell|\le|J_\ell^{-1}|(\delta G+|B|\,\delta\gamma)`, :math:`J_\ell` and
    :math:`B` the derivatives of the samples in :math:`\ell_h` and :math:`\gamma_h`, with
    :math:`\delta G` the answer's and the constant's error and :math:`\delta\gamma_h` from
    :math:`\delta v_h`; then :math:`|U_j^{-1}|`."""
    d, m = blk.U.shape[0], p1.m
    Uf = to_float(blk.U)
    dV = np.abs(p1.err_v).sum(axis=0)
    dG = eps + np.abs(to_float(qj)) @ dV
    dl = np.empty((m, d))
    tau = np.array([float(t) for t in blk.tau])
    for i in range(d):
        dl[:, i] = root_errors(to_float(blk.gamma[i]), np.exp(to_float(blk.ell[:, i])), tau, dG,
                               np.abs(Uf[i]) @ p1.err_v.T)
    return np.abs(np.linalg.inv(Uf)) @ dl.T  # (d, m): column h bounds W_h q_j


def solve_heads(p1, blocks, Q, eps):
    r""":math:`W_hq_j=U_j^{-1}\ell_h` for every block, :math:`W_h=[W_hq_0\cdots W_hq_{d-1}]Q^{-1}`
    (``Q`` columns :math:`q_j`), with the first-order bounds of the columns. Returns
    :class:`~attnlearn.learner.heads.HeadMatrices`.

    Used in: chapter 8."""
    d, m = Q.shape[0], p1.m
    Wcols = np.empty((m, d, d), dtype=object)
    Ecols = np.zeros((m, d, d))
    for h in range(m):
        Wcols[h, :, 0] = p1.w0[h]
        Ecols[h, :, 0] = p1.err_w0[h]
    for j, blk in enumerate(blocks, start=1):
        cols = mp_solve(blk.U, blk.ell.T)  # (d, m)
        err = _block_errors(p1, blk, Q[:, j], eps)
        for h in range(m):
            Wcols[h, :, j] = cols[:, h]
            Ecols[h, :, j] = err[:, h]
    W = np.empty((m, d, d), dtype=object)
    for h in range(m):
        W[h] = mp_solve(Q.T, Wcols[h].T).T
    return HeadMatrices(W, Ecols, np.abs(np.linalg.inv(to_float(Q))))


def screen_extra(cands, gamma, tau_e, G_e, *, tau, dG, dgam, tol):
    r"""The candidate roots of one configuration that also reproduce its extra sample
    :math:`G_e=\sum_h\gamma_h/(1+\rho_h\tau_e)` (variant with :math:`m+1` samples): in exact
    mode within ``tol.exact_residual`` times :math:`\max(|G_e|,1)`; in float64 within
    ``tol.match_safety`` times the prediction's first-order bound
    :math:`\delta G+\sum_h|B_{eh}|\delta\gamma_h+|\partial_{\ell_h}G_e|\,\delta\ell_h`
    (:math:`\delta\ell` from :func:`root_errors` on the :math:`m` nodes ``tau``).

    Used in: chapter 8."""
    out = []
    te = float(tau_e)
    for c in cands:
        pred = mpmath.fsum(g / (1 + r * tau_e) for g, r in zip(gamma, c))
        res = abs(pred - G_e)
        if tol.exact:
            limit = tol.exact_residual * max(abs(G_e), 1)
        else:
            rho, g = np.array([float(x) for x in c]), to_float(np.array(gamma, dtype=object))
            dl = root_errors(g, rho, np.array([float(t) for t in tau]), dG, dgam)
            A = 1 + rho * te
            limit = tol.match_safety * (dG + np.abs(1 / A) @ dgam + np.abs(g * rho * te / A ** 2) @ dl)
        if res <= limit:
            out.append(c)
    return out
