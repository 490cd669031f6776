"""``python -m attnlearn reproduce [--quick]``: the claims' checks without Jupyter.

Each check re-runs, at a reduced size, the experiment of the chapter that reproduces the
claim and returns a :class:`ClaimResult` (a figure and a status). The ledger of the book
(``book/claims.md``) shows the figures the notebooks computed; this command recomputes
figures of the same kind from scratch.

Used in: the book's claims ledger page (which names this command).
"""

import argparse
import sys
import time

import mpmath
import numpy as np

from .model import random_model

__all__ = ["ClaimResult", "CHECKS", "run_checks", "main"]


class ClaimResult:
    """One row of the ledger: claim id, what was measured, the figure, pass/fail."""

    def __init__(self, claim, measured, figure, ok, chapter):
        self.claim = claim
        self.measured = measured
        self.figure = figure
        self.ok = bool(ok)
        self.chapter = chapter

    def __repr__(self):
        return f"ClaimResult({self.claim}, {self.figure!r}, ok={self.ok})"


def check_c1(quick):
    from .canonical import param_error
    from .oracle import Oracle
    from .single_head import learn_single_head

    worst, counts_ok = 0.0, True
    for d in (1, 2, 4) if quick else (1, 2, 4, 8, 16):
        m = random_model(1, d, seed=d)
        o = Oracle(m, precision=60)
        worst = max(worst, param_error(learn_single_head(o, d, holdout=4), m))
        counts_ok &= o.queries - 4 == d * d + d  # the algorithm's queries; 4 verify the head
    return ClaimResult("C1", "single head, exact mode 60 digits: max error; queries = d^2+d",
                       f"{worst:.1e}; counts exact: {counts_ok}", worst <= 1e-40 and counts_ok, 1)


def check_c2(quick):
    from .canonical import canonical, param_error
    from .model import MultiHeadAttention
    from .oracle import Oracle

    rng = np.random.default_rng(2)
    d = 3
    W = rng.normal(size=(2, d, d))
    v = rng.normal(size=(2, d))
    split = MultiHeadAttention(np.stack([W[0], W[0], W[1], W[1], W[1]]),
                               np.stack([0.5 * v[0], 0.5 * v[0], v[1], v[0], -v[0]]))  # halves: exact in binary
    base = MultiHeadAttention(W, v)
    Xs = rng.normal(size=(50 if quick else 200, 4, d))
    with mpmath.workdps(60):
        diff = np.max(np.abs((Oracle(split, precision=60).batch(Xs) - Oracle(base, precision=60).batch(Xs))))
        err = param_error(canonical(split.to_mpmath()), canonical(base.to_mpmath()))
    return ClaimResult("C2", "split + cancelling heads: max output difference (60 digits); canonical forms' error",
                       f"{float(diff):.1e}; {err:.1e}", float(diff) <= 1e-50 and err <= 1e-50, 2)


def check_c3(quick):
    from .canonical import canonical
    from .oracle import Oracle
    from .rational import copies_sequences, fit_min_degree

    rng = np.random.default_rng(3)
    d, H = 3, 3
    m = random_model(H, d, seed=3)
    W = np.stack([m.W[0], m.W[0], m.W[1], m.W[2]])
    v = np.stack([m.v[0], m.v[0], m.v[1], np.zeros(d)])  # merged pair and a zero head: H' = 2
    from .model import MultiHeadAttention

    mm = MultiHeadAttention(W, v)
    o = Oracle(mm, precision=60)
    x, q = rng.normal(size=(1, d)), rng.normal(size=(1, d))
    n = 4
    with mpmath.workdps(60):
        F = np.stack([o.batch(copies_sequences(x, q, t)) for t in range(1, 2 * n + 1)], axis=1)
        c = o.batch(q[:, None, :])[0]
        k, fit = fit_min_degree(list(range(1, 2 * n + 1)), F - c, n, tol=1e-40)
        cm = canonical(mm.to_mpmath())
        u = [mpmath.mpf(a) - mpmath.mpf(b) for a, b in zip(q[0], x[0])]
        qq = [mpmath.mpf(a) for a in q[0]]
        true = sorted(mpmath.fdot(u, cm.W[h].dot(qq)) for h in range(cm.H))
        err = max(abs(a - b) for a, b in zip(sorted(fit.ell[0]), true)) if k == cm.H else float("inf")
    return ClaimResult("C3", "copies family, 4 heads (2 merged, 1 zero), H0 = 4: poles found; pole error",
                       f"{k} poles (canonical {cm.H}); {float(err):.1e}", k == cm.H and err <= 1e-40, 3)


def check_c4(quick):
    from .learner.learn import learn
    from .oracle import Oracle

    m = random_model(3, 3, seed=4)
    rec = learn(Oracle(m, precision=60), 3, heads=3, seed=4)
    res = max(rec.diagnostics["link_residual"].max(), rec.diagnostics["cross_residual"].max())
    margin = min(rec.diagnostics["link_margin"].min(), rec.diagnostics["cross_margin"].min())
    return ClaimResult("C4", "links and crosses (d = 3, H = 3, 60 digits): largest matching residual; smallest margin",
                       f"{res:.1e}; {margin:.1e}", res <= 1e-30 and margin > 1e-3, 4)


def check_c5(quick):
    from .canonical import canonical, param_error
    from .learner.learn import learn
    from .oracle import Oracle

    trials = 8 if quick else 30
    ok = 0
    for s in range(trials):
        d, H = 1 + s % 3, 1 + (s // 3) % 3
        m = random_model(H, d, seed=500 + s)
        rec = learn(Oracle(m, precision=60), d, heads=H, seed=s)
        ok += rec.heads == canonical(m).H and param_error(rec.model, m) <= 1e-40
    return ClaimResult("C5", "random models, exact mode 60 digits: recovered to 1e-40",
                       f"{ok}/{trials}", ok == trials, 4)


def _count_check(quick, bound):
    from .learner.cost import query_budget
    from .learner.learn import learn
    from .oracle import Oracle

    grid = [(d, H) for d in (1, 2, 3) for H in (1, 2)] if quick else [(d, H) for d in (1, 2, 3, 4) for H in (1, 2, 3)]
    good = 0
    for d, H in grid:
        o = Oracle(random_model(H, d, seed=600 + 10 * d + H), precision=60)
        n = H if bound == "heads" else H + 2
        rec = learn(o, d, **{bound: n})
        # the design's queries: the oracle's count less the verification queries, reported apart
        good += ((o.queries - rec.queries["holdout"], o.max_length) == query_budget(d, n)
                 and o.queries == rec.queries["total"])
    return good, len(grid)


def check_c6(quick):
    good, total = _count_check(quick, "heads")
    return ClaimResult("C6", "heads = H: oracle count less verification = 4Hd^2-2H+1, length = 2H+1",
                       f"{good}/{total} (d, H) exact", good == total, 4)


def check_c7(quick):
    good, total = _count_check(quick, "max_heads")
    return ClaimResult("C7", "max_heads = H0 = H+2: count = 4H0d^2-2H0+1 and length = 2H0+1",
                       f"{good}/{total} (d, H) exact", good == total, 4)


def check_c8(quick):
    from .canonical import param_error
    from .errors import RecoveryError
    from .learner.learn import learn
    from .oracle import Oracle, UniformNoise

    eps_grid = (1e-12, 1e-10, 1e-8)
    trials = 6 if quick else 25
    silent, logs = 0, []
    for eps in eps_grid:
        errs = []
        for s in range(trials):
            m = random_model(1, 2, seed=800 + s)
            try:
                rec = learn(Oracle(m, noise=UniformNoise(eps), seed=s), 2, heads=1, seed=s, output_error=eps)
            except RecoveryError:
                continue
            e = param_error(rec.model, m)
            silent += e > rec.error_estimate
            errs.append(e)
        logs.append(np.log10(np.median(errs)))
    slope = np.polyfit(np.log10(eps_grid), logs, 1)[0]
    return ClaimResult("C8", "uniform output noise (d = 2, H = 1): slope of log error vs log eps; silent failures",
                       f"{slope:.2f}; {silent}", abs(slope - 1) <= 0.1 and silent == 0, 5)


def check_c9(quick):
    try:
        from .transformer import OneLayerTransformer, learn_transformer
    except ImportError:  # pragma: no cover - the chapter is part of the package
        return ClaimResult("C9", "one-layer Transformer", "not available", False, 6)
    from .oracle import Oracle

    rng = np.random.default_rng(9)
    d, H, k = 2, 1, 3
    T = OneLayerTransformer(rng.normal(size=(H, d, d)) / np.sqrt(d), rng.normal(size=(H, d, d)),
                            rng.normal(size=(k, d)), rng.normal(size=k))
    rec = learn_transformer(Oracle(T, precision=60), d, heads=H, seed=0)
    worst = 0.0
    with mpmath.workdps(60):
        Tm = T.to_mpmath()
        for N in range(1, 7):
            Xs = rng.normal(size=(10, N, d))
            a = Tm.batch(Xs)
            b = rec.model.batch(Xs)
            scale = max(abs(x) for x in a)
            worst = max(worst, float(max(abs(x - y) for x, y in zip(a, b)) / scale))
    return ClaimResult("C9", "one-layer Transformer (d = 2, H = 1, k = 3, 60 digits): relative output error",
                       f"{worst:.1e}", worst <= 1e-30, 6)


CHECKS = [check_c1, check_c2, check_c3, check_c4, check_c5, check_c6, check_c7, check_c8, check_c9]


def run_checks(*, quick=True):
    """Run every claim's check; a check that raises is a failed row naming the exception."""
    out = []
    for check in CHECKS:
        claim = check.__name__[-2:].upper()
        try:
            out.append(check(quick))
        except Exception as exc:  # reported as a failed claim, never swallowed silently
            out.append(ClaimResult(claim, "check raised", f"{type(exc).__name__}: {exc}"[:120], False, "-"))
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m attnlearn", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rep = sub.add_parser("reproduce", help="run the claims' checks and print the ledger")
    rep.add_argument("--quick", action="store_true", help="reduced sizes (under two minutes)")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    rows = run_checks(quick=args.quick)
    print(f"{'claim':<6}{'status':<8}{'chapter':<9}{'figure':<34}measured")
    for r in rows:
        print(f"{r.claim:<6}{'PASS' if r.ok else 'FAIL':<8}{str(r.chapter):<9}{r.figure:<34}{r.measured}")
    print(f"{sum(r.ok for r in rows)} passed, {sum(not r.ok for r in rows)} failed "
          f"(wall time {time.perf_counter() - t0:.0f} s)")
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
