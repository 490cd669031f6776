r"""The lean design: :math:`H(d^2+d)+2d-1` queries, within :math:`2d-1` of the information limit.

Used in: chapter 8 ("How few queries?"): ``learn(oracle, d, heads=H, design="lean")``.

A model has :math:`H(d^2+d)` real parameters and, generically, no continuous symmetry, so no
design recovers an open set of models with fewer queries; the paper's design spends
:math:`4Hd^2-2H+1`. The lean design (``shared/DESIGN-lean.md``):

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
  (:func:`~.lean_roots.complete_roots`); one *check* query with final token
  :math:`q_0+q_j` and direction :math:`u_c=\sum_iw_iu_{j,i}` predicts, for every combination
  of the configurations' real positive roots,
  :math:`\ell_h=u_c^\top W_hq_0+\sum_iw_i\log\rho_h^{(i)}`, and the combination that
  reproduces its answer is kept (it also labels heads with equal :math:`v`). Then
  :math:`W_hq_j=U_j^{-1}\ell_h` and :math:`W_h=[W_hq_0\cdots W_hq_{d-1}]\,Q^{-1}`.

Count: :math:`1+2nd+(d-1)+md(d-1)+(d-1)`, i.e. :math:`H(d^2+d)+2d-1` when :math:`m=n=H\ge2`
(:math:`d^2+d+1` for one head: no link and no check is needed); fewer when heads merge or
vanish, or when every configuration of a block has a single candidate. Longest query
:math:`2n+1` (phase 1's ratio nodes).
"""

import contextlib
import itertools
import math
from dataclasses import dataclass, field

import mpmath
import numpy as np

from .._arith import mp_solve, to_float, to_mp
from ..errors import IllConditionedError, PoleError, UnmatchedHeadsError
from ..rational import fit_checked, fit_min_degree
from .asking import ask_nodes
from .finish import finish, zero_function
from .heads import check_significant
from .nodes import node_pairs, scale_factor, unit_rows
from .samples import sample_errors
from .lean_roots import complete_roots
from .heads import HeadMatrices, canonical_heads
from .cost import lean_budget
from .cost import lean_holdout_count
from .nodes import lean_nodes
from .nodes import extra_node

__all__ = ["lean_budget", "lean_holdout_count", "lean_nodes", "extra_node", "LeanDirections", "draw_lean",
           "phase_two_directions", "PhaseOne", "phase_one", "match_links", "screen_extra", "BlockRoots",
           "phase_two_block", "choose_combination", "root_errors", "solve_heads", "LeanDiagnostics", "learn_lean",
           "MAX_COMBINATIONS"]

#: Most combinations of candidate roots one check query may have to examine (a cost limit,
#: not a tolerance: the prototype met up to 92,160 at H = 4, d = 6; each is a few float64
#: operations).
MAX_COMBINATIONS = 5_000_000

#: Phase 2 draws each direction u at random until every known residue stands out:
#: :math:`|u^\top v_h|\ge` ``MIN_COSINE`` :math:`|u|\,|v_h|` for every head (a query-design
#: choice that costs no query; a residue near 0 leaves its :math:`\rho_h` barely determined and
#: its system nearly degenerate: d = 6, H = 3, seed 6 of the benchmark lost a root at
#: :math:`\gamma_1=2\cdot10^{-5}`).
MIN_COSINE = 0.1
#: Most random directions drawn for one phase-2 configuration before giving up.
MAX_DRAWS = 10_000

#: float64 mode: the working precision (decimal digits) of everything after phase 1's fits (the
#: root finder's polishing, the solves): far above the data's 16 digits, so that the learner's
#: own rounding never adds to the oracle's.
FLOAT_WORK_DPS = 30


def _ask(access, X, what):
    """Ask ``X`` (float64 queries for a float64 oracle) and return the answers as mpf."""
    return to_mp(access(X if access.exact else to_float(X), what))


def _ask_nodes(access, U, q, pairs, what):
    """:func:`~.asking.ask_nodes` for the configurations ``U`` with the one final token ``q``
    (float64 queries for a float64 oracle); answers as mpf, shape (len(U), len(pairs))."""
    conv = (lambda a: a) if access.exact else to_float
    F = ask_nodes(access, conv(U), conv(q)[None], np.zeros(len(U), dtype=int), pairs, what)
    return to_mp(F)


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


@dataclass
class LeanDirections:
    r"""The design's random vectors (float64, before scaling; rows): ``q`` (d, d) the final
    tokens :math:`q_0..q_{d-1}`; ``base`` (d, d) phase 1's :math:`u_1..u_d`; ``weights``
    (d - 1, d) the check queries' :math:`w`. Phase 2's directions are drawn once :math:`v` is
    known (:func:`phase_two_directions`)."""

    q: np.ndarray
    base: np.ndarray
    weights: np.ndarray


def draw_lean(rng, d):
    """Draw the lean design's directions from ``rng`` (in the order of :class:`LeanDirections`).

    Used in: chapter 8."""
    q = unit_rows(rng, d, d)
    base = unit_rows(rng, d, d)
    weights = rng.uniform(0.5, 1.0, size=(d - 1, d)) * rng.choice([-1.0, 1.0], size=(d - 1, d))
    return LeanDirections(q, base, weights)


def phase_two_directions(rng, v, d):
    r"""The :math:`d` directions of one phase-2 block (float64 rows, unit-ish length): random,
    each redrawn until :math:`|u^\top v_h|\ge` :data:`MIN_COSINE` :math:`|u|\,|v_h|` for every
    head, so that every known residue :math:`\gamma_h` stands out.

    Raises
    ------
    IllConditionedError
        No such direction in :data:`MAX_DRAWS` draws.

    Used in: chapter 8."""
    vf = to_float(v)
    vn = vf / np.linalg.norm(vf, axis=1, keepdims=True)
    rows = []
    for _ in range(MAX_DRAWS):
        u = unit_rows(rng, 1, d)[0]
        if np.all(np.abs(vn @ u) >= MIN_COSINE * np.linalg.norm(u)):
            rows.append(u)
            if len(rows) == d:
                return np.array(rows)
    raise IllConditionedError(f"no direction u with |u.v_h| >= {MIN_COSINE} |u| |v_h| for every head in "
                              f"{MAX_DRAWS} draws")


@dataclass
class PhaseOne:
    r"""What phase 1 learned: ``m`` canonical heads; per head ``v`` (m, d), ``w0`` (m, d)
    :math:`W_hq_0`; their first-order error bounds ``err_v``, ``err_w0``; ``V``; the query
    scale ``f``; the links' ``link_margin`` (relative gap to the best wrong pairing)."""

    m: int
    v: np.ndarray
    w0: np.ndarray
    err_v: np.ndarray
    err_w0: np.ndarray
    V: np.ndarray
    f: float
    U: np.ndarray
    link_margin: list = field(default_factory=list)


def phase_one(ask, dirs, q0, n, *, spread, output_error, tol):
    r"""Phase 1: :math:`(q_0)`, the :math:`d` base configurations at :math:`2n` ratio nodes
    (the first one also sets the query scale, as in :func:`attnlearn.learn`), the
    minimal-degree fits, the :math:`d-1` links. Returns :class:`PhaseOne`.

    Raises
    ------
    InconsistentHeadCountError, PoleError
        A fit (:func:`attnlearn.rational.fit_checked`).
    IllConditionedError
        A vanishing residue or two coinciding poles (:func:`~attnlearn.learner.heads.check_significant`).
    UnmatchedHeadsError
        A link that no pairing, or more than one, reproduces.

    Used in: chapter 8."""
    d = len(q0)
    exact = tol.exact
    conv = to_mp if exact else (lambda a: np.asarray(a, dtype=float))
    nodes = node_pairs(n, "ratios")
    q0n = conv(to_float(q0))  # q0 is drawn in float64: exact either way
    c0 = ask(q0n[None, None, :], "the query (q_0)")[0]
    u1 = conv(dirs.base[0])
    F1 = ask_nodes(ask, u1[None], q0n[None], np.zeros(1, dtype=int), nodes.pairs, "configuration base(1)")
    err1 = sample_errors(F1, output_error, tol)
    m, fit1 = fit_min_degree(nodes.ts, F1 - c0, n, tol=err1.residual[0], labels=["base(1)"])
    probe = float(np.max(np.abs(to_float(fit1.ell)))) if m else 0.0
    f = scale_factor(probe, spread, tol)
    U = np.empty((d, d), dtype=object if exact else float)
    U[0] = u1
    U[1:] = conv(dirs.base[1:] * f)
    F = np.empty((d, nodes.m), dtype=object if exact else float)
    F[0] = F1[0]
    if d > 1:
        F[1:] = ask_nodes(ask, U[1:], q0n[None], np.zeros(d - 1, dtype=int), nodes.pairs, "the base configurations")
    errors = sample_errors(F, output_error, tol)
    labels = [f"base({k + 1})" for k in range(d)]
    if m == 0:
        fit = fit_checked(nodes.ts, F - c0, 0, tol=errors.residual, labels=labels)
        zero = np.zeros((0, d), dtype=object)
        return PhaseOne(0, zero, zero, np.zeros((0, d)), np.zeros((0, d)), np.zeros(d, dtype=object), f,
                        to_mp(U)), errors
    fit = fit_checked(nodes.ts, F - c0, m, tol=errors.residual, labels=labels)
    if exact:
        check_significant(to_float(fit.ell), to_float(fit.gamma), fit.sens[:, 0] * 2 * errors.output,
                          fit.sens[:, 1] * 2 * errors.output, labels, S=tol.significance)
    # from here on everything is in mpmath (float64 mode: at FLOAT_WORK_DPS digits)
    ell, gam, U, c0 = to_mp(fit.ell), to_mp(fit.gamma), to_mp(U), to_mp(np.array([c0]))[0]
    margins = []
    if m > 1 and d > 1:
        perms, margins = match_links(ask, q0, U, c0, ell, gam, errors, sens=fit.sens, tol=tol)
        for i in range(1, d):
            ell[i], gam[i] = ell[i][list(perms[i - 1])], gam[i][list(perms[i - 1])]
            fit.sens[i] = fit.sens[i][:, list(perms[i - 1])]
    Uinv = mp_solve(U, to_mp(np.eye(d)))
    Uabs = np.abs(to_float(Uinv))
    eps = 2 * errors.output  # a sample's error and the constant's
    v = np.array([[-x for x in mp_solve(U, gam[:, h])] for h in range(m)], dtype=object)
    w0 = np.array([mp_solve(U, ell[:, h]) for h in range(m)], dtype=object)
    err_v = np.array([Uabs @ (fit.sens[:, 1, h] * eps) for h in range(m)])
    err_w0 = np.array([Uabs @ (fit.sens[:, 0, h] * eps) for h in range(m)])
    V = np.array([mpmath.fsum(v[:, k]) for k in range(d)], dtype=object)
    return PhaseOne(m, v, w0, err_v, err_w0, V, f, U, margins), errors


def match_links(ask, q0, U, c0, ell, gam, errors, *, sens, tol):
    r"""The :math:`d-1` link queries :math:`x=q_0-u_1-u_i` (one sample, :math:`t=1`) and the
    pairing of configuration :math:`i`'s heads with configuration 1's that reproduces each:
    predicted :math:`c_0+\sum_h(\gamma_{1h}+\gamma_{i\pi(h)})/(1+\rho_{1h}\rho_{i\pi(h)})`.

    Returns the pairings (one tuple per link) and each link's relative margin (best wrong
    pairing's residual over the answer's scale).

    The tolerance: in exact mode ``tol.exact_residual`` times the answer's scale; in float64
    ``tol.match_safety`` times the pairing's first-order error bound (the fits' sensitivities
    ``sens`` times the sample error, through the prediction's derivatives).

    Raises
    ------
    UnmatchedHeadsError
        No pairing, or more than one, within the tolerance.

    Used in: chapter 8."""
    d, m = U.shape[0], ell.shape[1]
    X = np.empty((d - 1, 2, d), dtype=object)
    for i in range(1, d):
        X[i - 1, 0] = q0 - U[0] - U[i]
        X[i - 1, 1] = q0
    obs = _ask(ask, X, "the link queries")
    rho = np.vectorize(mpmath.exp, otypes=[object])(ell)
    eps = 2 * errors.output
    perms, margins = [], []
    for i in range(1, d):
        res = []
        for p in itertools.permutations(range(m)):
            pred = c0 + mpmath.fsum((gam[0, h] + gam[i, p[h]]) / (1 + rho[0, h] * rho[i, p[h]]) for h in range(m))
            if tol.exact:
                limit = tol.exact_residual * max(abs(obs[i - 1]), 1)
            else:  # first-order bound of the prediction under this pairing
                bound = errors.output
                for h in range(m):
                    r2, g2 = float(rho[0, h] * rho[i, p[h]]), float(gam[0, h] + gam[i, p[h]])
                    dg = (sens[0, 1, h] + sens[i, 1, p[h]]) * eps
                    dl = (sens[0, 0, h] + sens[i, 0, p[h]]) * eps
                    bound += dg / (1 + r2) + abs(g2) * r2 / (1 + r2) ** 2 * dl
                limit = tol.match_safety * bound
            res.append((abs(pred - obs[i - 1]), p, limit))
        res.sort(key=lambda r: r[0])
        scale = max(abs(obs[i - 1]), 1)
        good = [p for r, p, lim in res if r <= lim]
        limit = res[0][2]
        if len(good) != 1:
            raise UnmatchedHeadsError(
                f"link(1,{i + 1}): {len(good)} of the {len(res)} pairings of the heads reproduce the link query "
                f"within {float(limit):.1e} (best residual {float(res[0][0]):.1e}): the heads cannot be labelled")
        perms.append(good[0])
        margins.append(float(res[1][0] / scale) if len(res) > 1 else math.inf)
    return perms, margins


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


def phase_two_block(ask, j, qj, U, weights, p1, q0, *, rng, tol, eps, extra_sample=False):
    r"""Phase 2 for the final token :math:`q_j`: :math:`m` samples of each of the :math:`d`
    configurations (rows of ``U``), every root of each configuration's system, and (when some
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
        An incomplete root set (:func:`~.lean_roots.complete_roots`) or too many combinations.
    UnmatchedHeadsError
        No combination, or more than one, reproduces the check query.

    Used in: chapter 8."""
    d, m = len(qj), p1.m
    pairs = lean_nodes(m) + ([extra_node(m)] if extra_sample else [])
    tau = [mpmath.mpf(t) / s for s, t in pairs]
    F = _ask_nodes(ask, U, qj, pairs, f"block q_{j}")
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
    choice, n_comb, margin = choose_combination(ask, j, qj, q0, U, weights, cands, p1, gamma=gamma, tau=tau[:m],
                                                tol=tol, eps=eps)
    ell = np.array([[mpmath.log(cands[i][choice[i]][h]) for i in range(d)] for h in range(m)], dtype=object)
    return BlockRoots(U, ell, cands, n_comb, margin, tries, min(seps), gamma, tau[:m])


def choose_combination(ask, j, qj, q0, U, weights, cands, p1, *, gamma, tau, tol, eps):
    r"""The check query of block :math:`q_j`: final token :math:`q_c=q_0+q_j`, direction
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
    d, m = len(qj), p1.m
    sizes = [len(c) for c in cands]
    n_comb = int(np.prod(sizes, dtype=object))
    if n_comb > MAX_COMBINATIONS:
        raise IllConditionedError(f"block q_{j}: {n_comb:,} combinations of candidate roots exceed "
                                  f"MAX_COMBINATIONS = {MAX_COMBINATIONS:,}")
    w = weights
    uc = np.array([mpmath.fsum(w[i] * U[i, k] for i in range(d)) for k in range(d)], dtype=object)
    qc = q0 + qj
    obs = _ask(ask, np.stack([qc - uc, qc])[None], f"the check query of block q_{j}")[0]
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
        bound = _combination_bounds(S, gf, uc, qc, qj, U, w, cands, p1, gamma, tau, eps)
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


def _combination_bounds(S, gf, uc, qc, qj, U, w, cands, p1, gamma, tau, eps):
    r"""float64: the first-order bound of every combination's predicted check answer (in the
    order of the combinations in ``S``, the :math:`\ell_h` of each): the answer's error, the
    constant's :math:`|q_c|^\top\delta V`, and per head
    :math:`\delta\gamma_h\sigma_h+|\gamma_h|\sigma_h(1-\sigma_h)\delta\ell_h` with
    :math:`\sigma_h=1/(1+e^{\ell_h})` and :math:`\delta\ell_h` summed over phase 1's
    :math:`|u_c|^\top\delta(W_hq_0)` and the configurations' :math:`|w_i|` times
    :func:`root_errors`."""
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


@dataclass
class LeanDiagnostics:
    r"""What the lean design saw.

    Attributes
    ----------
    visible_heads : int
        :math:`m`, the canonical head count found in phase 1.
    scale : float
        The query scale factor set by the first configuration.
    candidates : list of list of int
        Per phase-2 block, the number of real positive roots of each configuration.
    combinations : list of int
        Per block, the combinations the check query examined (0: no check needed).
    check_margin, link_margin : list of float
        Relative residual of the best wrong combination (per check) and pairing (per link).
    root_tries : int
        Random start systems tracked over all configurations (one each when no path is lost).
    root_separation : float
        Smallest relative distance between two roots of one configuration.
    """

    visible_heads: int
    scale: float
    candidates: list
    combinations: list
    check_margin: list
    link_margin: list
    root_tries: int
    root_separation: float


def learn_lean(access, opt, tol, *, extra_sample=False):
    r"""The lean design's pipeline (``learn(..., design="lean")``): phase 1, phase 2 per final
    token, the solves, the canonical form, :func:`~attnlearn.learner.finish.finish` (held-out queries reported
    apart). ``access`` is the checked, counting :class:`attnlearn.protocol.Access`.

    ``extra_sample=True`` is the variant with :math:`m+1` samples per phase-2 configuration
    (:func:`phase_two_block`; at most :math:`(n+1)d^2+nd` queries, plus a check query for a block
    where the extra sample leaves several candidates); it is not an option of :func:`learn`:
    chapter 8 measures it (``python benchmarks/lean.py --float64 --designs lean+1``).

    Used in: chapter 8."""
    with contextlib.nullcontext() if tol.exact else mpmath.workdps(FLOAT_WORK_DPS):
        return _learn_lean(access, opt, tol, extra_sample)


def _learn_lean(access, opt, tol, extra_sample):
    rng = np.random.default_rng(opt.seed)
    start, d = access.queries, opt.d
    dirs = draw_lean(rng, d)
    q0 = to_mp(dirs.q[0])
    p1, errors = phase_one(access, dirs, q0, opt.n, spread=opt.spread, output_error=opt.output_error, tol=tol)
    if p1.m == 0:
        return _finish_zero(access, p1, errors, start, opt, rng, tol)
    Q = np.empty((d, d), dtype=object)
    Q[:, 0] = q0
    blocks = []
    for j in range(1, d):
        qj = to_mp(dirs.q[j] * math.sqrt(p1.f))
        Q[:, j] = qj
        Uj = to_mp(phase_two_directions(rng, p1.v, d) * math.sqrt(p1.f))
        blocks.append(phase_two_block(access, j, qj, Uj, dirs.weights[j - 1], p1, q0, rng=rng, tol=tol,
                                      eps=2 * errors.output, extra_sample=extra_sample))
    heads = solve_heads(p1, blocks, Q, 2 * errors.output)
    model, estimate = canonical_heads(heads, p1.v, p1.err_v, tol=tol)
    queries = {"design": access.queries - start, "constants": 0, "redraws": 0, "holdout": 0}
    diag = LeanDiagnostics(
        visible_heads=p1.m, scale=p1.f, candidates=[[len(c) for c in b.candidates] for b in blocks],
        combinations=[b.combinations for b in blocks], check_margin=[b.margin for b in blocks if b.combinations],
        link_margin=p1.link_margin, root_tries=sum(b.tries for b in blocks),
        root_separation=min((b.separation for b in blocks), default=math.inf))
    return finish(access, model, queries, diag, max_length=access.max_length, eps_out=errors.output,
                  stated=errors.stated, estimate=estimate, holdout=opt.holdout, rng=rng, f=p1.f, tol=tol,
                  verified=opt.holdout > 0)


def _finish_zero(access, p1, errors, start, opt, rng, tol):
    """No canonical head: the zero function (phase 1 alone), checked like any return."""
    queries = {"design": access.queries - start, "constants": 0, "redraws": 0, "holdout": 0}
    diag = LeanDiagnostics(0, p1.f, [], [], [], [], 0, math.inf)
    model = zero_function(opt.d, output_error=opt.output_error, eps_out=errors.output, exact=tol.exact)
    return finish(access, model, queries, diag, max_length=access.max_length, eps_out=errors.output,
                  stated=errors.stated, estimate=0.0, holdout=opt.holdout, rng=rng, f=p1.f, tol=tol,
                  verified=opt.holdout > 0)
