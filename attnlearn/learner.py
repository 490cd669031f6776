r"""The multi-head learner: blocks, links and crosses (DESIGN §4.3-4.4; claims C3-C7).

Used in: chapter 4 (introduced, with the exact counts), chapters 5 and 6.
"""

import numbers
from collections.abc import Sequence
from fractions import Fraction

import mpmath
import numpy as np

from ._arith import absmax, norm, solve, to_float, to_mp
from .canonical import canonical
from .errors import CheckFailedError, IllConditionedError, NotIdentifiableError
from .matching import Matching, match_candidates
from .model import MultiHeadAttention
from .rational import check_residuals, fit_checked, fit_min_degree, ratio_nodes

__all__ = ["learn", "Recovery", "query_budget"]


def query_budget(d, n):
    r"""The paper's count :math:`4nd^2-2n+1` and maximum length :math:`2n+1` (claims C6, C7)."""
    return 4 * n * d * d - 2 * n + 1, 2 * n + 1


class Recovery:
    r"""What :func:`learn` recovered, and how far to trust it.

    Attributes
    ----------
    model : MultiHeadAttention
        The canonical model recovered (mpmath entries in exact mode), heads in
        :func:`canonical` order.
    heads : int
        Number of canonical heads found (possibly 0).
    queries : dict
        ``design`` (the paper's :math:`4nd^2-2n+1`), ``constants`` (robust mode's extra
        constant queries), ``holdout`` (verification queries) and ``total``.
    max_length : int
        Longest query asked by the design.
    output_error : float
        The absolute output error :math:`\varepsilon` assumed for every oracle answer.
    error_estimate : float
        Bound on the relative parameter error (as measured by :func:`param_error`): twice
        the first-order bound propagated through every step (chapter 5). With a stated
        ``output_error``, ``learn`` raises instead of returning when some configuration's
        first-order perturbation exceeds 0.1, where such bounds stop meaning anything.
    sensitivity : float
        ``error_estimate / output_error``: the constant :math:`K` of claim C8.
    holdout_error : float or None
        Largest relative discrepancy between the recovered model and the oracle on
        held-out random queries (float64 mode).
    diagnostics : dict
        Per-configuration arrays: ``interp_residual``, ``condition`` (largest row sum of
        :math:`|J^{-1}|`), ``link_residual``/``link_margin``, ``cross_residual``/
        ``cross_margin``, the query ``scale`` used, ``labels``, the node ``pairs``
        :math:`(s,t)`, and in robust mode the configurations and blocks redrawn
        (``redrawn``, ``redrawn_blocks``).
    """

    def __init__(self, **kw):
        self.__dict__.update(kw)

    def __repr__(self):
        return (
            f"Recovery(heads={self.heads}, d={self.model.d}, queries={self.queries['total']}, "
            f"max_length={self.max_length}, error_estimate={self.error_estimate:.1e})"
        )


def _check_count(value, name):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be a positive integer, got {type(value).__name__} {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value}")
    return int(value)


def _unit_rows(rng, n, d):
    """Random directions with random lengths in [0.8, 1.2] (in d = 1 unit vectors are only
    +-1, and q = u would give the token x = 0 with probability 1/2)."""
    z = rng.normal(size=(n, d))
    z *= rng.uniform(0.8, 1.2, size=(n, 1)) / np.sqrt(np.einsum("ij,ij->i", z, z))[:, None]
    return z


class _Table:
    """The design's configuration table and its layout (DESIGN §4.4), by arithmetic.

    Block by block (k = 0..d-1): base (k, j) for j = 0..d-1 at ``k(2d-1)+j``, then link
    (k, j) for j = 1..d-1 at ``k(2d-1)+d+j-1``; then cross k (k = 1..d-1) at
    ``d(2d-1)+k-1``. ``table[kind, k, j]`` is a position; ``kind``, ``blk``, ``jj`` hold
    every row's kind, block and j (0 for crosses)."""

    def __init__(self, d):
        self.d = d
        self.per_block = pb = 2 * d - 1
        self.kind = np.array(["base", "link", "cross"])[
            np.r_[np.tile(np.r_[np.zeros(d, int), np.ones(d - 1, int)], d), np.full(d - 1, 2)]]
        self.blk = np.concatenate([np.repeat(np.arange(d), pb), np.arange(1, d)])
        self.jj = np.concatenate([np.tile(np.r_[np.arange(d), np.arange(1, d)], d), np.zeros(d - 1, dtype=int)])
        self.C = d * pb + d - 1
        self.qidx = np.where(self.kind == "cross", d + self.blk - 1, self.blk)  # final token: row of [Q^T; q_1 + q_k]

    def __len__(self):
        return self.C

    def base(self, k, j):
        return np.asarray(k) * self.per_block + j

    def link(self, k, j):
        return np.asarray(k) * self.per_block + self.d + np.asarray(j) - 1

    def cross(self, k):
        return self.d * self.per_block + np.asarray(k) - 1

    def __getitem__(self, key):
        kind, k, j = key
        return int({"base": self.base, "link": self.link}[kind](k, j) if kind != "cross" else self.cross(k))

    def block_rows(self):
        """(d, 2d - 1): row k holds the positions of block k's base and link configurations."""
        return np.arange(self.d * self.per_block).reshape(self.d, self.per_block)

    def link_indices(self, blocks=None):
        """Positions of every link of ``blocks`` (default all; block by block, j = 2..d): its
        reference base (k,1), its other base (k,j), and the link (k,j) itself."""
        d = self.d
        k = np.repeat(np.arange(d) if blocks is None else np.asarray(blocks), d - 1)
        j = np.tile(np.arange(1, d), len(k) // max(d - 1, 1))
        return self.base(k, 0), self.base(k, j), self.link(k, j)


class _Labels(Sequence):
    """Configuration names (``base(k,j)``, ``link(k,j)``, ``cross(k)``, counted from 1), formatted
    only when read: a failing check names one, and tens of thousands of strings cost
    milliseconds the learner does not need. ``take`` selects positions."""

    def __init__(self, table, pos=None):
        self.table = table
        self.pos = pos

    def __len__(self):
        return len(self.table) if self.pos is None else len(self.pos)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[r] for r in range(*i.indices(len(self)))]
        c = int(i if self.pos is None else self.pos[i])
        if c < 0:
            c += len(self.table)
        if not 0 <= c < len(self.table):
            raise IndexError("configuration index out of range")
        t = self.table
        kind, k, j = t.kind[c], t.blk[c], t.jj[c]
        return f"cross({k + 1})" if kind == "cross" else f"{kind}({k + 1},{j + 1})"

    def take(self, idx):
        idx = np.asarray(idx, dtype=int)
        return _Labels(self.table, idx if self.pos is None else self.pos[idx])

    def __repr__(self):
        head = ", ".join(self[i] for i in range(min(len(self), 3)))
        return f"[{head}{', ...' if len(self) > 3 else ''}] ({len(self)} configurations)"


class _Asker:
    """Ask the oracle, check every answer is finite, and convert to the learner's arithmetic."""

    def __init__(self, oracle, exact):
        self.oracle = oracle
        self.exact = exact

    def __call__(self, Xs, what):
        y = self.oracle.batch(Xs)
        ok = [mpmath.isfinite(v) for v in y] if self.exact else np.isfinite(np.asarray(y, dtype=float))
        if not (all(ok) if self.exact else ok.all()):
            raise ValueError(f"the oracle returned a non-finite value (NaN or inf) for {what}")
        return np.asarray(y, dtype=object) if self.exact else np.asarray(y, dtype=float)


def learn(
    oracle,
    d,
    *,
    heads=None,
    max_heads=None,
    seed=0,
    robust=False,
    output_error=None,
    holdout=None,
    spread=None,
    method="linearised",
    redraw_rounds=4,
    nodes=None,
):
    r"""Recover the canonical heads :math:`\{(W_h,v_h)\}` of a multi-head attention oracle.

    Parameters
    ----------
    oracle : Oracle
        Value-query access (float64 or exact mode); the learner reads nothing else.
    d : int
        Token width (must match the oracle).
    heads, max_heads : int, keyword-only
        Exactly one: the model's number of heads :math:`H` (claim C6) or an upper bound
        :math:`H_0` (claim C7). Either way :math:`n` = that number sets the nodes
        :math:`t=1..2n`; the canonical count :math:`H'\le n` is detected.
    seed : int, keyword-only
        Seed of the learner's random query vectors.
    robust : bool, keyword-only
        float64 practice mode: query each block's constant :math:`V^\top q_k` directly
        (:math:`d-1` extra queries, reported) instead of deriving it from the learned
        :math:`V`, and redraw ill-conditioned configurations (reported).
    output_error : float, optional, keyword-only
        Bound :math:`\varepsilon` on the absolute error of each oracle output. Default:
        :math:`10^{-\mathrm{dps}}` times the output scale in exact mode, and
        :math:`4\,\epsilon_{64}` times it in float64 (the oracle's own rounding).
    holdout : int, optional, keyword-only
        Number of held-out random queries used to check the result. Default 0 in exact
        mode (so the count is exactly the paper's) and 32 in float64.
    spread : float, optional, keyword-only
        Target for :math:`\max_h|\ell_h|`: after the first configuration the query
        vectors are rescaled so that the pole positions spread about this much. Default
        3 in exact mode, where the oracle's rounding is far below float64's and
        wider-spread poles interpolate better; in float64 1 with the paper's nodes and 2
        with ``nodes="ratios"``, which see poles on both sides of :math:`\ell=0`
        (chapters 3 and 4 measure the choices).
    method : {"linearised", "loewner"}, keyword-only
        float64 interpolation formulation (chapter 3 compares them).
    redraw_rounds : int, keyword-only
        Robust mode: how many times ill-conditioned configurations are redrawn (each
        redraw costs :math:`2n` queries per configuration, reported in
        ``recovery.queries["redraws"]``, with one query per redrawn block constant).
    nodes : {"copies", "ratios"}, optional, keyword-only
        The :math:`2n` queries of a configuration: DESIGN §4.1's :math:`S(x,q,t)`,
        :math:`t=1..2n` (``"copies"``, the default in float64 without ``robust``), or
        :math:`s` copies of :math:`x` then :math:`t` of :math:`q` at the ratios :math:`t/s`
        of :func:`attnlearn.rational.ratio_nodes` (``"ratios"``, the default in exact mode
        and with ``robust=True``). Both give exactly the paper's count
        :math:`4nd^2-2n+1` and longest query :math:`2n+1`; the ratios are far better
        conditioned (chapter 3; chapter 4 compares the two in exact mode).

    Returns
    -------
    Recovery

    Raises
    ------
    RecoveryError
        A subclass naming the configuration and the residual when a check fails:
        :class:`PoleError`, :class:`InconsistentHeadCountError`,
        :class:`UnmatchedHeadsError`, :class:`IllConditionedError`,
        :class:`CheckFailedError`.

    Notes
    -----
    The design (DESIGN §4.4): random :math:`q_1..q_d`; block :math:`k` has final token
    :math:`q_k`, *base* configurations :math:`u_{k,j}` (:math:`j=1..d`) and *link*
    configurations :math:`u_{k,1}+u_{k,j}` (:math:`j=2..d`); *cross* configurations
    (:math:`k=2..d`) have final token :math:`q_1+q_k`. Each configuration costs the
    :math:`2n` queries :math:`S(x,q,t)`, :math:`t=1..2n`; one more query :math:`(q_1)`
    gives :math:`c_1=V^\top q_1`, and block 1's base configurations give :math:`V`
    through :math:`F(0)=V^\top x`. In all, :math:`2n(2d^2-1)+1=4nd^2-2n+1` queries of
    length at most :math:`2n+1` [1]_ (with ``nodes="ratios"`` the :math:`2n` queries are
    :math:`s` copies of :math:`x` then :math:`t` of :math:`q`, the same count and longest
    length). Then :math:`w_{h,k}=W_hq_k` from :math:`\ell=u^\top w_{h,k}` and
    :math:`W_h=[w_{h,1}\cdots w_{h,d}][q_1\cdots q_d]^{-1}`.

    Three refinements of the paper's square solves, none costing a query (chapter 4): each block's
    :math:`2d-1` base and link equations are solved by least squares weighted by their
    first-order error bounds (in closed form, :func:`_block_lstsq`), :math:`v_h` from the residues of every
    configuration once the crosses have labelled the blocks, and the derived constants
    :math:`V^\top q_k` are refined by Newton steps against the link equations
    (:func:`_calibrate_constants`).

    References
    ----------
    .. [1] S. Kim, I. Kim, J. Guo, "Provably Learning Multi-Head Attention with
           Queries", arXiv:2608.03294, 2026.
    """
    if (heads is None) == (max_heads is None):
        raise ValueError("give exactly one of heads=H (the number of heads) or max_heads=H0 (an upper bound)")
    n = _check_count(heads if heads is not None else max_heads, "heads" if heads is not None else "max_heads")
    d = _check_count(d, "d")
    if d != oracle.d:
        raise ValueError(f"d = {d} does not match the oracle's token width {oracle.d}")
    if method not in ("linearised", "loewner"):
        raise ValueError(f'method must be "linearised" or "loewner", got {method!r}')
    exact = oracle.exact
    if exact and robust:
        raise ValueError("robust=True is a float64 mode; exact mode needs no extra queries")
    if holdout is None:
        holdout = 0 if exact else 32
    if isinstance(holdout, bool) or not isinstance(holdout, numbers.Integral) or holdout < 0:
        raise ValueError(f"holdout must be a non-negative integer, got {holdout!r}")
    if nodes is None:
        nodes = "ratios" if robust or oracle.exact else "copies"
    if nodes not in ("copies", "ratios"):
        raise ValueError(f'nodes must be "copies" or "ratios", got {nodes!r}')
    if spread is None:
        spread = 3.0 if oracle.exact else (2.0 if nodes == "ratios" else 1.0)
    if not (np.isfinite(spread) and spread > 0):
        raise ValueError(f"spread must be a positive number, got {spread!r}")
    if exact:
        # guard digits: the learner's own rounding stays below the oracle's (DESIGN §5)
        with mpmath.workdps(oracle.dps + max(20, oracle.dps // 2)):
            return _learn(oracle, d, n, seed, robust, output_error, holdout, spread, method, True, redraw_rounds,
                          heads is not None, nodes)
    return _learn(oracle, d, n, seed, robust, output_error, holdout, spread, method, False, redraw_rounds,
                  heads is not None, nodes)


def _node_pairs(n, nodes):
    """(s, t) pairs of the 2n queries of a configuration and their nodes t / s."""
    if nodes == "copies":
        return [(1, t) for t in range(1, 2 * n + 1)], list(range(1, 2 * n + 1))
    pairs = ratio_nodes(n)
    return pairs, [Fraction(t, s) for s, t in pairs]


def _ask_nodes(ask, u, qtok, qi, pairs, what, chunk=1024):
    """F at every node for the configurations with final tokens ``qtok[qi]`` and rows ``u``
    (first token x = q - u): array (C, 2n).

    One array of ``smax`` copies of x then ``tmax`` of q (:func:`attnlearn.rational.copies_sequences`,
    filled in place here) holds every query as a slice
    (a view, no copy): s copies of x then t of q end at position smax + t. Built ``chunk``
    configurations at a time: a few MB, reused while still in cache, instead of one array of
    tens of MB whose fresh pages cost more to touch than the oracle takes to read them."""
    smax, tmax = max(s for s, _ in pairs), max(t for _, t in pairs)
    out = np.empty((len(u), len(pairs)), dtype=object if u.dtype == object else float)
    for a in range(0, len(u), chunk):
        ub = u[a: a + chunk]
        # copies_sequences(q - u, q, tmax, s=smax), filled in place: q into column smax, x = q - u
        # into column 0, then the copies (no temporaries)
        full = np.empty((len(ub), smax + tmax, u.shape[1]), dtype=u.dtype)
        full[:, smax] = qtok[qi[a: a + chunk]]
        np.subtract(full[:, smax], ub, out=full[:, 0])
        full[:, 1:smax] = full[:, :1]
        full[:, smax + 1:] = full[:, smax: smax + 1]
        for i, (s, t) in enumerate(pairs):
            out[a: a + chunk, i] = ask(full[:, smax - s: smax + t], f"{what}, s = {s}, t = {t}")
    return out


def _learn(oracle, d, n, seed, robust, output_error, holdout, spread, method, exact, redraw_rounds, heads_given,
           nodes):
    rng = np.random.default_rng(seed)
    ask = _Asker(oracle, exact)
    q0_before = oracle.queries
    conv = to_mp if exact else (lambda a: np.asarray(a, dtype=float))
    pairs, ts = _node_pairs(n, nodes)
    eps64 = np.finfo(float).eps

    # ---- random directions (scaled later) -------------------------------------------
    qdir = _unit_rows(rng, d, d)  # q_k directions
    base_dir = _unit_rows(rng, d * d, d).reshape(d, d, d)  # u_{k,j} directions
    cross_dir = _unit_rows(rng, max(d - 1, 0), d)  # u for cross configurations

    # ---- the one shared query (q_1) and the first configuration (probe for the scale) --
    q = [None] * d
    q[0] = conv(qdir[0])
    c0 = ask(q[0][None, None, :], "the shared query (q_1)")[0]
    u00 = conv(base_dir[0, 0])
    F00 = _ask_nodes(ask, u00[None], q[0][None], np.zeros(1, dtype=int), pairs, "configuration base(1,1)")
    labels00 = ["base(1,1)"]
    tol_probe, _ = _tolerances(F00, exact, output_error, eps64, oracle)
    kstar, fit00 = fit_min_degree(ts, F00 - c0, n, tol=tol_probe[0], labels=labels00, method=method)
    L = float(np.max(np.abs(to_float(fit00.ell)))) if kstar else 0.0
    f = spread / L if L > 0 else 1.0
    # one probe value can be small by chance: a bounded correction avoids extreme poles
    f = float(np.clip(f, 1 / 16, 4))
    scale_info = {"probe_max_abs_ell": L, "factor": f}

    # ---- the rest of the design ----------------------------------------------------------
    for k in range(1, d):
        q[k] = conv(qdir[k] * np.sqrt(f))
    Q = np.stack(q, axis=1)  # columns q_k
    qsum = np.stack(q[1:]) + q[0] if d > 1 else np.zeros((0, d))  # final tokens q_1 + q_k of the crosses
    cross_u = conv(cross_dir * f / np.linalg.norm(to_float(qsum), axis=1, keepdims=True))

    # configuration table, block by block: base (k, 1..d), link (k, 2..d); then the crosses
    table = _Table(d)
    per_block = table.per_block
    kind, blk, jj = table.kind, table.blk, table.jj
    uu = np.empty((table.C, d), dtype=object if exact else float)  # rows u of every configuration
    blocks = uu[: d * per_block].reshape(d, per_block, d)
    U = blocks[:, :d]  # U[k, j] = u_{k,j}: a view, so that updates of U are updates of uu
    # |u| * |q_k| = f so that ell = u^T W q spreads like f times the probe's (|q_1| = 1)
    U[...] = conv(base_dir * np.where(np.arange(d) == 0, f, np.sqrt(f))[:, None, None])
    U[0, 0] = u00
    blocks[:, d:] = U[:, :1] + U[:, 1:]
    uu[d * per_block:] = cross_u
    qtok = np.concatenate([Q.T, qsum])  # final tokens: q_k (row k), q_1 + q_k (row d + k - 1)
    qi = table.qidx  # each configuration's row of qtok
    labels = _Labels(table)
    C = len(kind)
    F = np.empty((C, len(ts)), dtype=object if exact else float)
    F[0] = F00[0]
    if C > 1:
        F[1:] = _ask_nodes(ask, uu[1:], qtok, qi[1:], pairs, "the design's queries")
    design_queries = oracle.queries - q0_before
    max_length = max(s + t for s, t in pairs)

    # ---- robust mode: constants asked directly, ill-conditioned configurations redrawn ------
    cq = None
    pre = None  # robust mode: the fits of every configuration, already done while redrawing
    pre_links = None  # ... and the matching of every link on those fits
    redraw_queries, redrawn, redrawn_blocks = 0, [], []
    if robust and d > 1:
        extra = ask(np.stack(q[1:])[:, None, :], "the block constants (q_k)")
        cq = np.concatenate([[c0], extra])
        if kstar > 0:
            _, eps_pre = _tolerances(F, exact, output_error, eps64, oracle)
            redraw_queries, redrawn, redrawn_blocks, pre, pre_links = _redraw(
                ts, pairs, F, labels, table, U, uu, qtok, q, cq, kstar, f, rng, ask, method, 2 * eps_pre,
                rounds=redraw_rounds)
            Q = np.stack(q, axis=1)  # redrawn blocks have new final tokens

    # ---- constants c = V^T q ---------------------------------------------------------------
    const_queries = 0
    in_block0 = (blk == 0) & (kind != "cross")
    tol, eps_out = _tolerances(F, exact, output_error, eps64, oracle)
    cvals = np.empty(C, dtype=object if exact else float)
    cerr = np.zeros(C)  # error bound of each constant
    cvals[in_block0] = c0
    cerr[in_block0] = eps_out
    # block 1: fit, then V from F(0) = c_1 + sum_h gamma_h = V^T x over the base configurations
    idx0 = np.nonzero(in_block0)[0]
    if pre is not None:
        fit_b0 = _subset(pre, idx0)
        check_residuals(fit_b0, tol, len(ts), kstar, labels=labels.take(idx0))
    else:
        fit_b0 = fit_checked(ts, F[idx0] - c0, kstar, tol=tol, labels=labels.take(idx0), method=method)
    base0 = [i for i in idx0 if kind[i] == "base"]
    pos = {i: p for p, i in enumerate(idx0)}
    X0 = qtok[0] - uu[base0]  # first tokens x = q_1 - u_{1,j}
    F0 = np.array([c0 + (sum(fit_b0.gamma[pos[i]]) if kstar else 0) for i in base0], dtype=X0.dtype)
    V = solve(X0, F0)
    if robust and d > 1:
        const_queries = d - 1
    else:
        cq = np.array([Q[:, k].dot(V) for k in range(d)], dtype=object if exact else float)
    # error bound of V (first order): |dV|_inf <= |X0^{-1}|_inf * max_j |d F(0)_j|
    X0inv_norm = float(np.abs(np.linalg.inv(to_float(X0))).sum(axis=1).max())
    sens_b0 = np.asarray(fit_b0.sens)
    dF0 = eps_out + (np.max(sens_b0[:, 1, :].sum(axis=1)) * eps_out if kstar else 0.0)
    dV = X0inv_norm * dF0
    other = ~in_block0
    is_cross = kind == "cross"
    cvals[other] = cq[blk[other]]
    cvals[is_cross] = cvals[is_cross] + cq[0]  # final token q_1 + q_k
    if robust:
        cerr[other] = np.where(is_cross[other], 2 * eps_out, eps_out)
    else:
        cerr[other] = np.abs(to_float(qtok)).sum(axis=1)[qi[other]] * dV
    rest = np.nonzero(~in_block0)[0]
    calib = None
    if len(rest):
        m = len(ts)
        if not robust and kstar > 0 and d > 1:
            # paper budget: V^T q_k inherits V's error; re-estimate each block's constant
            # from the link equations, which hold only at the true constant
            calib = _calibrate_constants(ts, F, cvals, cerr, table, kstar, eps_out, method)
        if pre is not None:
            fit_rest = _subset(pre, rest)
            check_residuals(fit_rest, tol + 30 * np.sqrt(m) * cerr[rest], m, kstar, labels=labels.take(rest))
        else:
            def fit_at_constants():  # every configuration but block 1's, at the current constants
                return fit_checked(ts, F[rest] - cvals[rest, None], kstar, tol=tol + 30 * np.sqrt(m) * cerr[rest],
                                   labels=labels.take(rest), method=method)

            fit_rest = fit_at_constants()
            for _ in range(3 if calib is not None else 0):
                if _calibrate_polish(fit_rest, rest, cvals, cerr, calib, table, kstar, eps_out):
                    break
                fit_rest = fit_at_constants()
    H = kstar
    ell = np.empty((C, H), dtype=object if exact else float)
    gam = np.empty((C, H), dtype=object if exact else float)
    sens = np.zeros((C, 2, H))
    resid = np.zeros(C)
    for src, idx in ((fit_b0, idx0), (fit_rest if len(rest) else None, rest)):
        if src is None:
            continue
        ell[idx], gam[idx], sens[idx], resid[idx] = src.ell, src.gamma, src.sens, to_float(src.residual)
    # first-order error bounds of every (ell, gamma): rows of |J^-1| times the sample error
    err_in = eps_out + cerr  # a constant's error shifts every sample
    err_ell = sens[:, 0, :] * err_in[:, None]
    err_gam = sens[:, 1, :] * err_in[:, None]
    if output_error is not None and kstar < n and heads_given:
        # with noisy outputs a head whose residue is below the output error is invisible: fewer
        # heads than the model has cannot be certified (with max_heads the count is the user's bound)
        raise IllConditionedError(
            f"found {kstar} canonical heads but heads={n}: with output error {eps_out:.1e} a head whose "
            "residue lies below the noise cannot be told from a merged or cancelled one"
        )
    if not exact and H and output_error is not None:
        # with a stated output error the bounds are first order: they mean something only while
        # the perturbations are small (without one, the oracle's rounding is far below this)
        rel_g = err_gam / np.maximum(np.abs(to_float(gam)), 1e-300)
        worst = np.maximum(err_ell.max(axis=1), rel_g.max(axis=1))
        if worst.max() > _FIRST_ORDER:
            c = int(np.argmax(worst))
            raise IllConditionedError(
                f"{labels[c]}: first-order perturbation of (ell, gamma) is {worst[c]:.1e} > {_FIRST_ORDER:g}: "
                "the output error is beyond the range where the error bound holds"
            )
    if exact:  # in float64 an insignificant value shows up in the matching and the error estimate
        _check_significant(to_float(ell), to_float(gam), err_ell, err_gam, labels, 10.0)

    diagnostics = {
        "labels": labels,
        "pairs": pairs,
        "interp_residual": resid,
        "condition": sens.reshape(C, -1).max(axis=1) if H else np.zeros(C),
        "scale": scale_info,
        "V": V,
        "calibration": None if calib is None else {k: calib[k] for k in ("steps", "change", "bound")},
    }
    queries = {"design": design_queries, "constants": const_queries, "redraws": redraw_queries, "holdout": 0}
    diagnostics["redrawn"] = redrawn
    diagnostics["redrawn_blocks"] = redrawn_blocks
    if H == 0:
        if output_error is not None:
            raise IllConditionedError(
                f"every configuration is within the output error ({eps_out:.1e}) of the zero function: with "
                "noisy outputs no canonical head can be certified, nor their absence"
            )
        model = MultiHeadAttention(
            np.zeros((0, d, d), dtype=object if exact else float), np.zeros((0, d), dtype=object if exact else float)
        )
        return _finish(oracle, model, queries, max_length, eps_out, 0.0, holdout, diagnostics, rng, f, exact)

    # ---- links: label each block's base configurations like its first one --------------
    lab_ell = np.empty((d, d, H), dtype=ell.dtype)  # [k, j, h] labelled by base (k,1)
    lab_gam = np.empty((d, d, H), dtype=ell.dtype)
    lab_eell = np.zeros((d, d, H))
    lab_egam = np.zeros((d, d, H))
    # link values labelled like the block's base (k,1): [k, j, h] for j >= 1
    link_ell = np.empty((d, d, H), dtype=ell.dtype)
    link_gam = np.empty((d, d, H), dtype=ell.dtype)
    link_eell = np.zeros((d, d, H))
    link_egam = np.zeros((d, d, H))
    i0 = table.base(np.arange(d), 0)
    lab_ell[:, 0], lab_gam[:, 0] = ell[i0], gam[i0]
    lab_eell[:, 0], lab_egam[:, 0] = err_ell[i0], err_gam[i0]
    if d > 1:
        refs, oth, lnk = table.link_indices()
        sc = _scales(np.stack([ell[lnk], gam[lnk]], axis=2))
        etot = sum(_scaled_err(err_ell, err_gam, sc, idx) for idx in (refs, oth, lnk))
        if pre_links is not None:  # robust mode: the redraw matched these very fits; check its result
            mt = pre_links.check(_safety(exact) * etot, labels=labels.take(lnk))
        else:
            P, O = _link_sets(ell, gam, refs, oth, lnk)
            mt = match_candidates(P, O, sc, tol=_safety(exact) * etot, labels=labels.take(lnk))
        diagnostics["link_residual"], diagnostics["link_margin"] = mt.residual, mt.margin
        # fancy indexing over all links at once: row r is block k = r // (d-1), j = 1 + r % (d-1)
        oth_a, lnk_a = np.array(oth), np.array(lnk)
        rr = np.arange(len(oth))[:, None]
        pi, ob = mt.perm, mt.observed
        kk, jj = np.divmod(np.arange(len(oth)), d - 1)
        jj = jj + 1
        lab_ell[kk, jj], lab_gam[kk, jj] = ell[oth_a][rr, pi], gam[oth_a][rr, pi]
        lab_eell[kk, jj], lab_egam[kk, jj] = err_ell[oth_a][rr, pi], err_gam[oth_a][rr, pi]
        link_ell[kk, jj], link_gam[kk, jj] = ell[lnk_a][rr, ob], gam[lnk_a][rr, ob]
        link_eell[kk, jj], link_egam[kk, jj] = err_ell[lnk_a][rr, ob], err_gam[lnk_a][rr, ob]

    # ---- per-block solves: w_{h,k} = W_h q_k and v_h ------------------------------------------
    w = np.empty((d, H, d), dtype=ell.dtype)  # [k, h, :]
    vk = np.empty((d, H, d), dtype=ell.dtype)
    ew = np.zeros((d, H, d))  # componentwise first-order error bounds of w_{h,k}
    ev = np.zeros((d, H, d))
    # the links are d - 1 more equations (u_{k,1} + u_{k,j})^T w = ell_link besides the
    # paper's d base equations: weighted least squares (each row scaled by its own error
    # bound, so an ill-conditioned configuration counts little), batched over blocks, heads
    # and the two unknowns (w from ell in every block, v from gamma in block 1 only: the
    # other blocks' v estimates are not needed, crosses label blocks by their w)
    rows = uu[: d * per_block]  # u of every base and link configuration, block by block
    vals = np.concatenate([np.concatenate([lab_ell, link_ell[:, 1:]], axis=1),
                           -np.concatenate([lab_gam[:1], link_gam[:1, 1:]], axis=1)])  # (d+1, 2d-1, H)
    errs = np.concatenate([np.concatenate([lab_eell, link_eell[:, 1:]], axis=1),
                           np.concatenate([lab_egam[:1], link_egam[:1, 1:]], axis=1)])
    sol, bnd = _block_lstsq(np.concatenate([U, U[:1]]), vals, errs)  # (d+1, H, d) each
    w[:], vk[0] = sol[:d], sol[d]
    ew[:], ev[0] = bnd[:d], bnd[d]

    # ---- crosses: label block k like block 1 ------------------------------------------------
    perm_k = np.zeros((d, H), dtype=int)
    perm_k[0] = np.arange(H)
    if d > 1:
        cr = table.cross(np.arange(1, d))
        # candidates P[r, a, b] = (u^T (w_{a,1} + w_{b,k}), -u^T v_a) for cross r (block k = r + 1)
        ucr = uu[cr]  # (d - 1, d)
        P = np.empty((d - 1, H, H, 2), dtype=ell.dtype)
        P[..., 0] = ((w[0][None, :, None, None, :] + w[1:][:, None, :, None, :]) @ ucr[:, None, None, :, None])[..., 0, 0]
        P[..., 1] = -(vk[0][None] @ ucr[:, :, None])[:, :, None, 0]
        a1 = np.abs(to_float(ucr)).sum(axis=1)[:, None, None]
        pe = np.zeros((d - 1, H, H, 2))
        pe[..., 0] = a1 * (ew[0].max(axis=1)[None, :, None] + ew[1:].max(axis=2)[:, None, :])
        pe[..., 1] = a1 * ev[0].max(axis=1)[None, :, None]
        O = np.stack([ell[cr], gam[cr]], axis=2)
        sc = _scales(O)
        etot = (pe[..., 0] / sc[:, None, None, 0]).max(axis=(1, 2)) + (pe[..., 1] / sc[:, None, None, 1]).max(axis=(1, 2))
        etot = etot + _scaled_err(err_ell, err_gam, sc, cr)
        mt = match_candidates(P, O, sc, tol=_safety(exact) * etot, labels=labels.take(cr))
        diagnostics["cross_residual"], diagnostics["cross_margin"] = mt.residual, mt.margin
        perm_k[1:] = mt.perm
        cross_obs = mt.observed

    # ---- assemble W_h = [w_{h,1} ... w_{h,d}] Q^{-1} -------------------------------------------
    Wcols = np.empty((H, d, d), dtype=ell.dtype)  # [h, :, k]
    Ecols = np.zeros((H, d, d))
    for h in range(H):
        for k in range(d):
            Wcols[h, :, k] = w[k, perm_k[k, h]]
            Ecols[h, :, k] = ew[k, perm_k[k, h]]
    Qinv = np.abs(np.linalg.inv(to_float(Q)))
    Wm = np.empty((H, d, d), dtype=ell.dtype)
    for h in range(H):
        Wm[h] = solve(Q.T, Wcols[h].T).T
    if d > 1:
        # every configuration's residues are equations -u^T v_h = gamma once its heads carry
        # block 1's labels: d(2d-1) base and link rows plus d-1 crosses, weighted least squares
        vm, Ev = _solve_v(rows, lab_gam, lab_egam, link_gam, link_egam, perm_k, uu[cr], gam[cr], err_gam[cr],
                          cross_obs)
    else:
        vm, Ev = vk[0], ev[0]
    # relative first-order bounds, in the Frobenius norms of param_error:
    # |dW_h| <= |dW_cols| |Q^{-1}| entrywise
    rel = []
    for h in range(H):
        nW, nv = norm(Wm[h]), norm(vm[h])
        eW = float(np.linalg.norm(Ecols[h] @ Qinv))
        evv = float(np.linalg.norm(Ev[h]))
        rel.append(max(eW / nW if nW > 0 else eW, evv / nv if nv > 0 else evv))
    estimate = _ESTIMATE_FACTOR * float(max(rel))
    for h in range(H):
        if norm(vm[h]) == 0:
            raise NotIdentifiableError(f"head {h} was recovered with v = 0 (not a canonical head)")
    model = canonical(MultiHeadAttention(Wm, vm), atol=0)
    return _finish(oracle, model, queries, max_length, eps_out, estimate, holdout, diagnostics, rng, f, exact)


def _solve_v(rows, lab_gam, lab_egam, link_gam, link_egam, perm_k, ucross, gcross, egcross, cross_obs):
    r""":math:`v_h` from the residues of every configuration, :math:`\gamma=-u^\top v_h`.

    Block :math:`k`'s heads are labelled like block 1 by ``perm_k`` (from the crosses);
    ``rows`` holds the base configurations' :math:`u_{k,j}` and the links'
    :math:`u_{k,1}+u_{k,j}` block by block, ``ucross`` the crosses'. Returns ``v`` and its
    componentwise error bounds, both (H, d).
    """
    d, _, H = lab_gam.shape
    g = np.concatenate([lab_gam, link_gam[:, 1:]], axis=1)  # (d, 2d-1, H) in block labels
    eg = np.concatenate([lab_egam, link_egam[:, 1:]], axis=1)
    kk = np.arange(d)[:, None, None]
    jj = np.arange(2 * d - 1)[None, :, None]
    g = g[kk, jj, perm_k[:, None, :]].reshape(-1, H)  # (d(2d-1), H) in block 1's labels
    eg = eg[kk, jj, perm_k[:, None, :]].reshape(-1, H)
    r_ = np.arange(len(ucross))[:, None]
    gc, egc = gcross[r_, cross_obs], egcross[r_, cross_obs]
    A = np.concatenate([rows, ucross])
    y, e = -np.concatenate([g, gc]), np.concatenate([eg, egc])
    if y.dtype != object and len(A) > 4 * d:
        # float64: the 4d most accurate rows of each head carry nearly all the weight; the
        # rest would multiply the cost by d/2 (at d = 64) for a negligible gain
        keep = np.argsort(e, axis=0)[: 4 * d].T  # (H, 4d)
        sol, bnd = _weighted_lstsq(A[keep], y.T[np.arange(H)[:, None], keep][..., None],
                                   e.T[np.arange(H)[:, None], keep][..., None])
        return sol[:, 0], bnd[:, 0]
    sol, bnd = _weighted_lstsq(A[None], y[None], e[None])
    return sol[0], bnd[0]


def _row_errors(errs):
    """(B, m, H) error bounds as (B, H, m) row scales: non-finite ones weight their row out
    (1e300), zero ones are floored at 1e-300 (the weights stay finite)."""
    return np.where(np.isfinite(errs), np.maximum(errs, 1e-300), 1e300).transpose(0, 2, 1)


def _weighted_lstsq(A, vals, errs):
    r"""Solve every :math:`A_b x = y_{b,h}` by least squares weighted by the rows' error bounds.

    ``A`` (B, m, d); ``vals`` and ``errs`` (B, m, H). Returns the solutions and their
    componentwise first-order error bounds, both (B, H, d): row :math:`i` is divided by
    ``errs[b, i, h]``, so each scaled row has error at most 1 and the bound is the row sum
    of :math:`|A_w^+|`. float64: batched normal equations with two refinement steps (QR
    where they do not contract); a row whose scaled residual exceeds what errors within the
    bounds allow, :math:`1+\sum_j|P_{ij}|` for the hat matrix :math:`P=A_wA_w^+`, is an
    outlier, weighted out, and the systems re-solved (at most twice). Exact mode: mpmath QR
    per system (the weights and bounds stay float64: they only rank the rows).
    """
    e = _row_errors(errs)  # (B, H, m)
    Af = to_float(A)[:, None, :, :]
    for _ in range(3):
        Aw = Af / e[..., None]  # (B, H, m, d)
        AwT = Aw.swapaxes(-1, -2)
        # normal equations (batched BLAS products, several times faster than batched QR here);
        # the rows u are random, so A_w is usually well conditioned and two steps of iterative
        # refinement recover the accuracy of QR; the systems where they do not, and those with
        # a residual to judge, are solved by QR (tests/test_learner.py compares)
        pinv = _normal_pinv(Aw, AwT)  # (B, H, d, m)
        bnd = np.abs(pinv).sum(axis=-1)
        if vals.dtype == object:
            break
        b = vals.transpose(0, 2, 1) / e
        sol = (pinv @ b[..., None])[..., 0]
        step1 = (pinv @ (b - (Aw @ sol[..., None])[..., 0])[..., None])[..., 0]
        sol += step1
        step2 = (pinv @ (b - (Aw @ sol[..., None])[..., 0])[..., None])[..., 0]
        sol += step2
        # refinement contracts by about cond(A_w)^2 eps per step: where the second step is
        # not far below the solution's own error bound, the weights make A_w too
        # ill-conditioned for normal equations; QR for those systems
        slow = np.any(np.abs(step2) > 1e-2 * bnd, axis=-1)
        slow |= (np.abs(b - (Aw @ sol[..., None])[..., 0]) > 1.0).any(axis=-1)  # judged below: be exact
        if slow.any():
            Qf, R = np.linalg.qr(Aw[slow])
            pinv[slow] = np.linalg.solve(R, Qf.swapaxes(-1, -2))
            bnd[slow] = np.abs(pinv[slow]).sum(axis=-1)
            # the solution by back substitution: the explicit pinv product loses digits when
            # A_w is ill-conditioned (pinv serves only the bounds)
            sol[slow] = np.linalg.solve(R, Qf.swapaxes(-1, -2) @ b[slow][..., None])[..., 0]
        # with every scaled row error within 1, residual r = (I - P) e with the hat matrix
        # P = A_w A_w^+, so |r_i| <= 1 + sum_j |P_ij|: a row beyond that is provably outside
        # its own error bound (its first-order bound failed). It is weighted out and the
        # systems re-solved. P is formed only for systems with a residual above 1.
        res = np.abs(b - (Aw @ sol[..., None])[..., 0])
        cand = (res > 1.0).any(axis=-1)
        if not cand.any() or A.shape[1] <= A.shape[2]:
            break
        lim = 1.0 + np.abs(Aw[cand] @ pinv[cand]).sum(axis=-1)
        outlier = np.zeros(res.shape, dtype=bool)
        outlier[cand] = res[cand] > lim
        if not outlier.any():
            break
        e = np.where(outlier, e * 1e8, e)
    if vals.dtype != object:
        return sol, bnd
    B, m, H = vals.shape
    sol = np.empty((B, H, A.shape[2]), dtype=object)
    for b in range(B):
        for h in range(H):
            wgt = [1 / mpmath.mpf(float(x)) for x in e[b, h]]
            Am = mpmath.matrix([[A[b, i, j] * wgt[i] for j in range(A.shape[2])] for i in range(m)])
            ym = mpmath.matrix([vals[b, i, h] * wgt[i] for i in range(m)])
            x = mpmath.lu_solve(Am, ym) if m == A.shape[2] else mpmath.qr_solve(Am, ym)[0]
            sol[b, h] = [x[j] for j in range(A.shape[2])]
    return sol, bnd


def _block_lstsq(U, vals, errs):
    r"""Weighted least squares of each block's base and link equations, in closed form.

    ``U`` (B, d, d): a block's base rows :math:`u_1..u_d`; ``vals`` and ``errs`` (B, 2d-1, H):
    the values and error bounds of the d base equations :math:`u_j^\top w=y_j` then the d-1
    link equations :math:`(u_1+u_j)^\top w=z_j` (j = 2..d). Returns the solutions and their
    componentwise first-order error bounds, both (B, H, d): the weighted problem of
    :func:`_weighted_lstsq`, in :math:`O(d^2)` per system instead of :math:`O(d^3)`, plus
    one inverse of :math:`U` per block shared by the heads.

    Notes
    -----
    In the coordinates :math:`\theta=Uw` (:math:`\theta_j=u_j^\top w`, a bijection since the
    :math:`u_j` are independent) the equations are :math:`\theta_j=y_j` and
    :math:`\theta_1+\theta_j=z_j`. With weights :math:`a_j=e_{y_j}^{-2}`,
    :math:`b_j=e_{z_j}^{-2}`, the normal equations have an arrow matrix; eliminating
    :math:`\theta_2..\theta_d`,

    .. math:: \theta_1=\frac{a_1y_1+\sum_{j\ge2}c_j(z_j-y_j)}{a_1+\sum_{j\ge2}c_j},\quad
              c_j=\frac{a_jb_j}{a_j+b_j},\qquad
              \theta_j=\alpha_jy_j+\beta_j(z_j-\theta_1),\quad
              \alpha_j=\frac{a_j}{a_j+b_j},\ \beta_j=\frac{b_j}{a_j+b_j}

    (:math:`z_j-y_j` measures :math:`\theta_1` with weight :math:`c_j`). So
    :math:`w=U^{-1}\theta=G\,(y,z)` with :math:`G=g\,\lambda^\top+[\,0\mid\alpha_j\bar u_j\mid
    \beta_j\bar u_j\,]`, where :math:`\bar u_j` are the columns of :math:`U^{-1}`,
    :math:`\lambda` the row of :math:`\theta_1` and :math:`g=\bar u_1-\sum_j\beta_j\bar u_j`;
    the bound of :math:`w_i` is :math:`\sum_r|G_{ir}|e_r`, here bounded by
    :math:`|g_i|\sum_r|\lambda_r|e_r+\sum_j|\bar u_{ij}|(\alpha_je_{y_j}+\beta_je_{z_j})`
    (matrix products; at most 1.6 times the exact sum, median 1.01, over the benchmark's
    runs). Outliers as in
    :func:`_weighted_lstsq`: a row whose scaled residual exceeds :math:`1+\sum_c|P_{rc}|`
    (hat matrix :math:`P`, here in closed form) is weighted out and the systems re-solved.
    float64 and exact mode alike (the weights and bounds are float64; in exact mode
    :math:`\theta` and the solve with :math:`U` are in mpmath).
    """
    B, m, H = vals.shape
    d = U.shape[1]
    exact = vals.dtype == object
    e = _row_errors(errs)  # (B, H, m)
    Ui = np.linalg.inv(to_float(U))  # (B, d, d): columns ubar_j
    yv = vals.transpose(0, 2, 1)  # (B, H, m)
    y1, yj, zj = yv[..., 0], yv[..., 1:d], yv[..., d:]
    for _ in range(3):
        ey1, eyj, ezj = e[..., 0], e[..., 1:d], e[..., d:]
        s = e.min(axis=2, keepdims=True)  # weights relative to the best row: no overflow
        a1 = (s[..., 0] / ey1) ** 2
        aj, bj = (s / eyj) ** 2, (s / ezj) ** 2
        den = aj + bj
        with np.errstate(invalid="ignore", divide="ignore"):  # a row pair with no weight: no information
            al, be = np.where(den > 0, aj / den, 0.0), np.where(den > 0, bj / den, 0.0)
            c = aj * be
            S = a1 + c.sum(axis=2)
            lam = np.concatenate([a1[..., None], -c, c], axis=2) / S[..., None]  # row of theta_1 (B, H, m)
        # theta_1 = y_1 + sum_j lam_j (z_j - y_j - y_1) and theta_j = y_j + be_j (z_j - theta_1 - y_j):
        # the formulas above rearranged so that rounded weights still give the exact solution of
        # consistent equations (exact mode: weights in float64, values in mpmath)
        r1 = zj - yj - y1[..., None]
        theta1 = y1 + ((lam[..., d:] * r1).sum(axis=2) if not exact else np.array(
            [[mpmath.fdot(lam[b, h, d:].tolist(), r1[b, h].tolist()) for h in range(H)] for b in range(B)],
            dtype=object).reshape(B, H))
        thetaj = yj + be * (zj - theta1[..., None] - yj)
        theta = np.concatenate([theta1[..., None], thetaj], axis=2)  # (B, H, d)
        # first-order bounds: |G| e with G = g lam^T + [0 | al_j ubar_j | be_j ubar_j], bounded by
        # the triangle inequality on its two parts (matrix products instead of an (H, d, 2d-1)
        # array per block; at most 1.6x the exact row sums, median 1.01, over the benchmark runs)
        g = Ui[:, :, 0][:, None, :] - (Ui[:, :, 1:] @ be.transpose(0, 2, 1)).transpose(0, 2, 1)  # (B, H, d)
        le = np.abs(lam) * e
        E = le.sum(axis=2, keepdims=True)
        bnd = np.abs(g) * E + (np.abs(Ui[:, :, 1:]) @ (al * eyj + be * ezj).transpose(0, 2, 1)).transpose(0, 2, 1)
        bnd = np.where(np.isfinite(S)[..., None] & (S > 0)[..., None], bnd, np.inf)
        # scaled residuals of every row, and the hat-matrix limit 1 + sum_c |P_rc| (closed form:
        # rows of B L are lam (y_1), -be_j lam + al_j e_yj + be_j e_zj (y_j), al_j (lam + e_yj) + be_j e_zj (z_j))
        res = np.concatenate([
            to_float(y1 - theta1)[..., None], to_float(yj - thetaj), to_float(zj - theta1[..., None] - thetaj)], axis=2)
        res = np.abs(res) / e
        if not (res > 1.0).any():
            break
        rest = E - le[..., 1:d] - le[..., d:]
        lim_y = be * rest + np.abs(al - be * lam[..., 1:d]) * eyj + np.abs(be - be * lam[..., d:]) * ezj
        lim_z = al * rest + np.abs(al + al * lam[..., 1:d]) * eyj + np.abs(be + al * lam[..., d:]) * ezj
        lim = 1.0 + np.concatenate([E, lim_y, lim_z], axis=2) / e
        outlier = res > lim
        if not outlier.any():
            break
        e = np.where(outlier, e * 1e8, e)
    if exact:
        w = np.empty((B, H, d), dtype=object)
        for b in range(B):
            w[b] = solve(U[b], theta[b].T).T
    else:
        w = (Ui[:, None] @ theta[..., None])[..., 0]
        w = w + (Ui[:, None] @ (theta - (U[:, None] @ w[..., None])[..., 0])[..., None])[..., 0]  # one refinement
    return w, bnd


def _normal_pinv(Aw, AwT):
    r""":math:`(A_w^\top A_w)^{-1}A_w^\top` for a stack of full-column-rank ``Aw`` (..., m, d).

    The inverse of the normal matrix times :math:`A_w^\top`: a batched matrix product,
    faster than a batched LU solve with m right-hand sides (measured at d = 64; a loop of
    LAPACK Cholesky solves was slower still, its threads contending with numpy's). The
    result serves the bounds and the refinement steps of :func:`_weighted_lstsq`, which
    restore the solution's accuracy. A stack with a system left singular by its weights
    gets the SVD pseudo-inverse: that system's bounds come out huge, and the learner's
    checks raise.
    """
    try:
        return np.linalg.inv(AwT @ Aw) @ AwT
    except np.linalg.LinAlgError:
        return np.linalg.pinv(Aw)


def _subset(fit, idx):
    from .rational import RationalFit

    return RationalFit(fit.ell[idx], fit.gamma[idx], fit.sens[idx], fit.residual[idx], fit.shift[idx])


def _redraw(ts, pairs, F, labels, table, U, uu, qtok, q, cq, H, f, rng, ask, method, eps_in, rounds):
    r"""Robust mode: replace ill-conditioned configurations by fresh random ones (extra queries).

    A configuration is ill-conditioned when its fit fails (non-real or non-positive pole)
    or its sensitivity (largest row sum of :math:`|J^{-1}|`, relative to the residues) is
    more than 100 times the median over the design. Redrawing ``u_{k,j}`` changes the
    base configuration ``(k, j)`` and the link ``(k, j)``; redrawing ``u_{k,1}`` changes the
    whole block's links; a cross configuration is redrawn alone. When the median of a
    block :math:`k\ge2` is itself ill-conditioned, the final token :math:`q_k` is to blame
    (two heads with nearly equal :math:`W_hq_k` have close poles for every :math:`u`): the
    whole block is redrawn with a new :math:`q_k`, its constant asked again, and its
    cross. A link whose matching is ambiguous or fails (the test of the learner, with the
    sample error ``eps_in``) has its ``u_{k,j}`` redrawn. Arrays are updated in place.
    Returns the number of extra queries, the configurations and the blocks redrawn, the
    fits of every configuration and the matching of every link on those fits (the learner
    checks it against its own tolerance instead of matching again).
    """
    from .rational import fit_masked

    d = len(q)
    kind, blk, jj, qi = table.kind, table.blk, table.jj, table.qidx
    C = len(kind)
    def constant(idx):  # V^T of each configuration's final token: c_k, or c_1 + c_k for a cross
        return cq[blk[idx]] + np.where(kind[idx] == "cross", cq[0], 0.0)

    cvec = constant(np.arange(C))
    block_rows = table.block_rows()
    refs, oth, lnk = table.link_indices()
    spent, names, blocks_redrawn = 0, [], []
    redo = np.arange(C)
    fit_all = None
    for rnd in range(rounds + 1):
        fit, ok = fit_masked(ts, F[redo] - cvec[redo, None], H, method=method)
        if fit_all is None:
            fit_all, ok_all = fit, ok
        else:
            for name in ("ell", "gamma", "sens", "residual", "shift"):
                getattr(fit_all, name)[redo] = getattr(fit, name)
            ok_all[redo] = ok
        if rnd == 0:
            measure = np.empty(C)
        sg = fit.sens  # the relative sensitivity of the configurations just fitted
        rel = np.maximum(sg[:, 0, :], sg[:, 1, :] / np.maximum(np.abs(fit.gamma), 1e-300))
        measure[redo] = np.where(ok, rel.max(axis=1), np.inf)
        limit = 100 * np.median(measure[ok_all])
        bad = measure > limit
        if rnd == rounds - 1:
            # the last redraw replaces only failed fits and unmatched links (few): a fresh draw
            # can be bad too, and no round follows to replace it
            bad = ~ok_all
        if d > 1 and H:
            # the links' matching test of the learner, on the links whose configurations changed
            if rnd == 0:
                unmatched = np.zeros(len(lnk), dtype=bool)
                chk = np.arange(len(lnk))
                links = Matching(np.zeros((len(lnk), H), dtype=int), np.zeros(len(lnk)), np.zeros(len(lnk)),
                                 np.zeros((len(lnk), H), dtype=int))
            else:
                changed = np.zeros(C, dtype=bool)
                changed[redo] = True
                chk = np.nonzero(changed[refs] | changed[oth] | changed[lnk])[0]
            r, o, li = refs[chk], oth[chk], lnk[chk]
            P, O = _link_sets(fit_all.ell, fit_all.gamma, r, o, li)
            sc = _scales(O)
            etot = eps_in * sum(_scaled_err(fit_all.sens[:, 0, :], fit_all.sens[:, 1, :], sc, idx) for idx in (r, o, li))
            mt = match_candidates(P, O, sc)
            unmatched[chk] = (mt.residual > _safety(False) * etot) | (mt.margin <= 4.0 * mt.residual)
            for name in ("perm", "observed", "residual", "margin"):  # every link's matching, kept current
                getattr(links, name)[chk] = getattr(mt, name)
            bad[oth[unmatched]] = True  # redraws u_{k,j}: base (k,j) and link (k,j)
        if not bad.any() or rnd == rounds:
            break
        bad_blocks = [k + 1 for k in np.nonzero(np.median(measure[block_rows[1:]], axis=1) > limit)[0]]
        affected = []
        blocks_redrawn.extend(f"block({k + 1})" for k in bad_blocks)
        for k in bad_blocks:
            q[k] = _unit_rows(rng, 1, d)[0] * np.sqrt(f)
            cq[k] = ask(q[k][None, None, :], f"the constant of redrawn block {k + 1}")[0]
            spent += 1
            U[k] = _unit_rows(rng, d, d) * np.sqrt(f)
            qtok[k] = q[k]
            i = table.cross(k)
            qtok[qi[i]] = q[0] + q[k]
            uu[i] = _unit_rows(rng, 1, d)[0] * f / np.linalg.norm(qtok[qi[i]])
            affected += [block_rows[k], [i]]
        # fresh directions, in the order: crosses by block, then u_{k,j} by (k, j); the
        # configuration table's layout gives every index by arithmetic (see _learn)
        sel = np.nonzero(bad)[0]
        sel = sel[~np.isin(blk[sel], bad_blocks)]
        is_c = kind[sel] == "cross"
        cross_k = np.unique(blk[sel[is_c]])
        ukeys = np.unique(blk[sel[~is_c]] * d + jj[sel[~is_c]])
        fresh = _unit_rows(rng, len(cross_k) + len(ukeys), d)
        ci = table.cross(cross_k)
        uu[ci] = fresh[: len(cross_k)] * f / np.linalg.norm(qtok[qi[ci]], axis=1, keepdims=True)
        uk, uj = np.divmod(ukeys, d)
        U[uk, uj] = fresh[len(cross_k):] * np.where(uk == 0, f, np.sqrt(f))[:, None]
        nz = uj != 0
        parts = affected + [ci, table.base(uk, uj), table.link(uk[nz], uj[nz])]
        parts += [table.link(k, np.arange(1, d)) for k in uk[~nz]]  # a new u_{k,1}: every link of block k
        redo = np.unique(np.concatenate(parts).astype(int))
        bm, lm = redo[kind[redo] == "base"], redo[kind[redo] == "link"]
        uu[bm] = U[blk[bm], jj[bm]]
        uu[lm] = U[blk[lm], 0] + U[blk[lm], jj[lm]]
        cvec[redo] = constant(redo)
        F[redo] = _ask_nodes(ask, uu[redo], qtok, qi[redo], pairs, "redrawn configurations")
        spent += len(redo) * len(ts)
        names.append(redo)
    if not ok_all.all():
        i = int(np.argmin(ok_all))
        raise IllConditionedError(
            f"{labels[i]}: no well-posed interpolation after "
            f"{rounds} rounds of redrawing (non-real or non-positive poles)"
        )
    return spent, labels.take(np.concatenate(names) if names else []), blocks_redrawn, fit_all, \
        (links if d > 1 and H else None)


def _calibrate_constants(ts, F, cvals, cerr, table, H, eps_out, method):
    r"""Refine :math:`c_k=V^\top q_k` for blocks :math:`k\ge2` from their link equations.

    Within block :math:`k` every configuration has the same constant. At the true constant
    the link configuration's set equals the pairwise sums of its two base sets; a wrong
    constant :math:`c_k+\delta` moves each fitted :math:`(\ell,\gamma)` by
    :math:`-\delta J^{+}\mathbf 1` to first order (``RationalFit.shift``), so the link
    mismatch is linear in :math:`\delta` and a weighted least-squares step (a Newton step)
    removes it. No query is spent. The derived constant's error is the error of :math:`V`
    times :math:`|q_k|_1`, amplified a second time by the interpolation; the calibrated
    one is limited by the links' own noise. In float64 and in exact mode alike.

    This function makes the first Newton step from a fit at the derived constants; the
    learner refits at the new constants and :func:`_calibrate_polish` makes the next step
    on that fit: to first order, without another fit, once the step is within the noise
    (usually the second step), else with a refit (at most three more). Updates ``cvals``
    and ``cerr`` in place (crosses use :math:`c_1+c_k`); returns a summary that
    :func:`_calibrate_polish` extends.
    """
    from .rational import fit_known_degree, fit_masked

    d = table.d
    lay = _link_layout(table)
    start = cvals[lay["first"]].copy()
    G = F[lay["all"]] - np.repeat(start, 2 * d - 1)[:, None]
    if G.dtype == object:
        fit, ok = fit_known_degree(ts, G, H, method=method), np.ones(len(G), dtype=bool)
    else:
        # a constant still off by V's error can make a fit fail (complex poles): such a
        # configuration's link equations get no weight; the final fit checks them all
        fit, ok = fit_masked(ts, G, H, method=method)
    delta, bound, perm, obs = _link_newton(fit, ok, lay, H, eps_out)
    _apply_constants(cvals, cerr, table, start + delta, bound, eps_out)
    return {"steps": [absmax(delta)], "change": to_float(delta), "bound": 3 * bound, "perm": perm, "obs": obs,
            "layout": lay}


def _calibrate_polish(fit_rest, rest, cvals, cerr, calib, table, H, eps_out):
    r"""Next Newton step of :func:`_calibrate_constants`, on the learner's fit of the
    configurations ``rest`` (every block but the first, and the crosses) at the current
    constants. If every block's step is within three times its noise bound, Newton has
    converged: the constants and the fitted :math:`(\ell,\gamma)` are moved to first order
    and True is returned. Otherwise (a configuration so sensitive that the first step left
    the linear regime) only the constants move, and the caller refits. Either way each
    constant's error bound becomes three times its noise bound plus the step just taken
    (Newton contracts, so the remaining error is below the last step)."""
    d = table.d
    lay = calib["layout"]
    where = np.full(len(table), -1)
    where[rest] = np.arange(len(rest))
    rows = where[lay["all"]]
    sub = _subset(fit_rest, rows)
    delta, bound, _, _ = _link_newton(sub, np.ones(len(rows), dtype=bool), lay, H, eps_out, calib["perm"], calib["obs"])
    step = np.abs(to_float(delta))
    converged = bool(np.all(step <= 3 * bound))
    if converged:
        per_config = np.repeat(delta, 2 * d - 1)
        cross_rows = where[table.cross(np.arange(1, d))]
        rows = np.concatenate([rows, cross_rows])
        per_config = np.concatenate([per_config, delta])
        fit_rest.ell[rows] = fit_rest.ell[rows] + per_config[:, None] * fit_rest.shift[rows, 0]
        fit_rest.gamma[rows] = fit_rest.gamma[rows] + per_config[:, None] * fit_rest.shift[rows, 1]
    _apply_constants(cvals, cerr, table, cvals[lay["first"]] + delta, bound + step / 3, eps_out)
    calib["steps"].append(float(step.max()) if len(step) else 0.0)
    calib["change"] = calib["change"] + to_float(delta)
    calib["bound"] = 3 * bound + step
    return converged


def _link_sets(ell, gam, ref, oth, lnk):
    """Candidates ``P[c, a, b]`` = reference head a plus other head b, and the observed link sets
    ``O`` (DESIGN §4.4), for :func:`attnlearn.matching.match_candidates`."""
    P = np.stack([ell[ref][:, :, None] + ell[oth][:, None, :], gam[ref][:, :, None] + gam[oth][:, None, :]], axis=3)
    O = np.stack([ell[lnk], gam[lnk]], axis=2)
    return P, O


def _link_layout(table):
    """Index arrays of the blocks k >= 2: their configurations block by block (``all``, 2d - 1
    each: d base then d - 1 links, contiguous in the table), the first base of each
    (``first``), and for every link its positions in ``all``: reference base (k,1), other
    base (k,j), link (k,j)."""
    d, pb = table.d, table.per_block
    ref, oth, lnk = table.link_indices(np.arange(1, d))
    return {
        "all": table.block_rows()[1:].ravel(),
        "first": table.base(np.arange(1, d), 0),
        "ref": ref - pb,
        "oth": oth - pb,
        "lnk": lnk - pb,
        "blocks": d - 1,
    }


def _link_newton(fit, ok, lay, H, eps_out, perm=None, obs=None):
    """One weighted least-squares Newton step on each block's constant from its link mismatches.

    Returns ``(delta, bound, perm, obs)``: the step per block, its first-order error bound,
    and the link pairing used (computed here unless given).
    """
    ref, oth, lnk = lay["ref"], lay["oth"], lay["lnk"]
    nb = lay["blocks"]
    ell, gam = fit.ell, fit.gamma
    usable = np.ones(len(lnk), dtype=bool)
    if perm is None:
        P, O = _link_sets(ell, gam, ref, oth, lnk)
        mt = match_candidates(P, O, _scales(O))
        perm, obs = mt.perm, mt.observed
        usable = np.isfinite(mt.residual)  # each observed point used once
    good = usable & ok[ref] & ok[oth] & ok[lnk]  # (L,)
    r_ = np.arange(len(ref))[:, None]
    a_ = np.arange(H)[None, :]
    sc = _scales(np.stack([ell[lnk], gam[lnk]], axis=2))  # (L, 2)
    res, der, err = [], [], []
    for comp, val in enumerate((ell, gam)):
        sh, ab = fit.shift[:, comp], fit.sens[:, comp]
        rr = val[lnk][r_, obs] - val[ref][r_, a_] - val[oth][r_, perm]
        dd = sh[lnk][r_, obs] - sh[ref][r_, a_] - sh[oth][r_, perm]
        ee = (ab[lnk][r_, obs] + ab[ref][r_, a_] + ab[oth][r_, perm]) * eps_out
        res.append(rr / sc[:, comp:comp + 1])
        der.append(dd / sc[:, comp:comp + 1])
        err.append(ee / sc[:, comp:comp + 1])
    res = np.concatenate(res, axis=1).reshape(nb, -1)
    der = np.concatenate(der, axis=1).reshape(nb, -1)
    err = np.concatenate(err, axis=1).reshape(nb, -1)
    # weighted least squares: each link equation counts by the inverse of its error bound
    mask = np.repeat(good, 2 * H).reshape(nb, -1)
    wgt = np.where(mask, 1.0 / np.maximum(err, 1e-150) ** 2, 0.0)  # floor: the square stays finite
    res = np.where(mask, res, 0)
    der = np.where(mask, der, 0.0)
    dd2 = (wgt * der**2).sum(axis=1)
    keep = dd2 > 0  # a block with no usable link keeps its constant
    dd2 = np.where(keep, dd2, 1.0)
    delta = np.where(keep, -(wgt * der * res).sum(axis=1) / dd2, 0)
    bound = np.where(keep, (wgt * np.abs(der) * err).sum(axis=1) / dd2, np.inf)  # first-order error
    return delta, bound, perm, obs


def _apply_constants(cvals, cerr, table, c, bound, eps_out):
    """Set every block k >= 2 configuration's constant to c[k-1] (crosses: c_1 + c_k); a block
    whose bound is not finite (no usable link) keeps its constant."""
    ks = np.nonzero(np.isfinite(bound))[0]  # block k = ks + 1
    rows = table.block_rows()[ks + 1]  # (len(ks), 2d - 1)
    cvals[rows] = np.asarray(c)[ks][:, None]
    cerr[rows] = 3 * np.asarray(bound)[ks][:, None]
    ic = table.cross(ks + 1)
    cvals[ic] = cvals[table.base(0, 0)] + np.asarray(c)[ks]
    cerr[ic] = eps_out + 3 * np.asarray(bound)[ks]


def _check_significant(ell, gam, err_ell, err_gam, labels, S):
    """Every residue must stand out of its error bound, and every pair of poles apart."""
    C, H = ell.shape
    if H == 0:
        return
    small = np.abs(gam) <= S * err_gam
    if np.any(small):
        c, h = np.argwhere(small)[0]
        raise IllConditionedError(
            f"{labels[c]}: residue gamma = {gam[c, h]:.2e} is within {S:g} x its error bound "
            f"{err_gam[c, h]:.1e} (a vanishing residue: a head invisible in this configuration)"
        )
    if H > 1:
        gap = np.abs(ell[:, :, None] - ell[:, None, :])
        allowed = S * (err_ell[:, :, None] + err_ell[:, None, :])
        close = (gap <= allowed) & ~np.eye(H, dtype=bool)[None]
        if np.any(close):
            c, a, b = np.argwhere(close)[0]
            raise IllConditionedError(
                f"{labels[c]}: poles ell = {ell[c, a]:.4g} and {ell[c, b]:.4g} are closer than {S:g} x their "
                f"error bounds ({err_ell[c, a]:.1e}, {err_ell[c, b]:.1e}): two heads cannot be told apart here"
            )


_FIRST_ORDER = 1e-1  # largest per-configuration relative perturbation the bounds are trusted for
_ESTIMATE_FACTOR = 2.0  # reported bound = 2 x the first-order bound (second-order terms, measured in chapter 5)


def _safety(exact):
    """Matching tolerance, in units of the first-order error bound of the compared points."""
    return 1e6 if exact else 3.0


def _scales(O):
    """Per-configuration units (C, 2) for the ell and gamma components of the observed sets."""
    s = np.abs(to_float(O)).max(axis=1)
    return np.maximum(s, 1e-300)


def _scaled_err(err_ell, err_gam, sc, idx):
    return np.maximum(err_ell[idx] / sc[:, None, 0], err_gam[idx] / sc[:, None, 1]).max(axis=1)


def _tolerances(F, exact, output_error, eps64, oracle):
    """Absolute output error eps (assumed or given) and the residual tolerance of the fits."""
    Fmax = float(np.abs(to_float(F)).max()) if F.size else 0.0
    if output_error is not None:
        # the oracle's own float64 rounding is there whatever the user's noise bound says
        eps_out = float(output_error) if exact else max(float(output_error), 4 * eps64 * Fmax)
    elif exact:
        eps_out = 10.0 ** (1 - oracle.dps) * max(Fmax, 1.0)
    else:
        eps_out = 4 * eps64 * max(Fmax, 1e-300)
    m = F.shape[1]
    tol = (10.0 ** (-oracle.dps / 2) * max(Fmax, 1.0)) if exact and output_error is None else 30 * np.sqrt(m) * eps_out
    return np.full(F.shape[0], tol) if F.shape[0] == 1 else tol, eps_out


def _finish(oracle, model, queries, max_length, eps_out, estimate, holdout, diagnostics, rng, f, exact):
    holdout_error = None
    if holdout:
        before = oracle.queries
        worst = 0.0
        scale_ref = 0.0
        d = model.d
        for N in range(1, max_length + 1):
            m = max(1, holdout // max_length + (1 if N <= holdout % max_length else 0))
            Xs = rng.normal(size=(m, N, d)) * np.sqrt(f) / np.sqrt(d)
            Xs = to_mp(Xs) if exact else Xs
            y = np.asarray(to_float(oracle.batch(Xs)))
            yhat = np.asarray(to_float(model.batch(Xs)))
            worst = max(worst, float(np.max(np.abs(y - yhat))))
            scale_ref = max(scale_ref, float(np.max(np.abs(y))))
        queries["holdout"] = oracle.queries - before
        holdout_error = worst / max(scale_ref, 1e-300)
        limit = max(1e3 * eps_out / max(scale_ref, 1e-300), 10 * estimate)
        if holdout_error > limit:
            raise CheckFailedError(
                f"the recovered model misses the oracle on {queries['holdout']} held-out queries: relative "
                f"discrepancy {holdout_error:.2e} > {limit:.2e} (10 x the error estimate {estimate:.1e})"
            )
    if not exact and not estimate <= 1.0:
        raise IllConditionedError(
            f"first-order error estimate {estimate:.1e} exceeds 1 (100% relative error): the interpolation is "
            "too ill-conditioned in float64 for this model (use exact mode, robust=True, or fewer heads)"
        )
    queries["total"] = queries["design"] + queries["constants"] + queries["redraws"] + queries["holdout"]
    sensitivity = estimate / eps_out if eps_out > 0 else float("inf")
    return Recovery(
        model=model,
        heads=model.H,
        queries=queries,
        max_length=max_length,
        output_error=eps_out,
        error_estimate=estimate,
        sensitivity=sensitivity,
        holdout_error=holdout_error,
        diagnostics=diagnostics,
    )

