"""Benchmark of learn(..., design="lean") (a script, not a test; issue 15's acceptance grid).

    python benchmarks/lean.py                         # the grid: d in {2,3,4,6} x H in {1..4}, 10 models each
    python benchmarks/lean.py --d 6 --H 4             # one cell (the timing target: < 30 s per model)
    python benchmarks/lean.py --degenerate            # merged, zero-sum, zero-v and equal-v models
    python benchmarks/lean.py --json out.json         # ... and save every run
    python benchmarks/lean.py --float64               # float64: lean against the paper's design, d = 8, H = 2,
                                                      # 100 models (--d, --H, --seeds to change)
    python benchmarks/lean.py --float64 --designs lean+1   # the variant with H + 1 samples per phase-2
                                                      # configuration (learn_lean(..., extra_sample=True))

Exact mode at 50 digits. Per model: the relative parameter error against the canonical form of
the exact model (``canonical(model.to_mpmath())``), the design's queries read off the oracle's
own counter less the verification queries (exact mode's default 8 held-out sequences,
``max(8, 2H + 1)``, reported apart; the two agree with ``recovery.queries``), the lean budget
H(d^2+d)+2d-1 (d^2+d+1 for H = 1), the longest query, the learner's CPU time
(``time.process_time``: one core, whatever else the shared machine runs) and wall time, and
the root combinations the check queries examined. Per cell: models recovered to 1e-20, the
worst error, the counts against the budget, the median and worst CPU time, the most
combinations. ``--float64`` compares the designs on float64 oracles at equal settings (learn's
float64 defaults, 32 verification queries each: the paper's 4 check queries and 28 held-out
sequences, the lean design's 32 held-out sequences): median and worst error of the returned models,
share recovered to 1e-6, share raised, silent failures (a returned model whose error exceeds
its own ``error_estimate``), design queries. Everything is seeded (model seed
10_000 + 100 d + 10 H + seed, float64 20_000 + seed; learner seed = seed).
"""

import argparse
import json
import time
import warnings

import mpmath
import numpy as np

from attnlearn import Oracle, RecoveryError, canonical, learn, param_error
from attnlearn._arith import working_precision
from attnlearn.learner.certificate import QueryLog
from attnlearn.learner.cost import lean_budget
from attnlearn.learner.lean.run import learn_lean
from attnlearn.learner.options import Request, build_options as _options
from attnlearn.learner.tolerances import MAX_LENGTH
from attnlearn.protocol import Access
from attnlearn.model import degenerate, random_model

DPS = 50
KINDS = ("merged", "zero-sum", "zero-v", "equal-v")


def model_for(d, H, seed, kind=None):
    """A random model (W ~ N(0, 1/d), v ~ N(0, 1)), or a degenerate one: ``merged`` W_2 = W_1,
    ``zero-sum`` W_2 = W_1 and v_2 = -v_1 (both heads vanish), ``zero-v`` v_1 = 0, ``equal-v``
    v_2 = v_1 with different W (only the check queries can label the heads)."""
    M = random_model(H, d, seed=10_000 + 100 * d + 10 * H + seed)
    return M if kind is None else degenerate(M, kind)


def run(d, H, seed, kind=None):
    model = model_for(d, H, seed, kind)
    oracle = Oracle(model, precision=DPS)
    c0, t0 = time.process_time(), time.perf_counter()
    try:
        rec = learn(oracle, d, heads=H, seed=seed, design="lean")
        cpu, wall = time.process_time() - c0, time.perf_counter() - t0
        with mpmath.workdps(2 * DPS):
            err = param_error(rec.model, canonical(model.to_mpmath(), atol=0))
        comb = rec.diagnostics.combinations
        design_queries = oracle.queries - rec.queries["holdout"]  # the oracle's counter less the verification
        if design_queries != rec.queries["design"] or oracle.queries != rec.queries["total"]:
            raise RuntimeError(f"the learner's count {rec.queries} disagrees with the oracle's {oracle.queries}")
        out = {"outcome": "returned", "error": err, "heads": rec.heads, "design_queries": design_queries,
               "holdout_queries": rec.queries["holdout"], "verified": rec.verified, "combinations": int(sum(comb)),
               "max_combinations": int(max(comb, default=0)), "root_tries": rec.diagnostics.root_tries}
    except RecoveryError as exc:
        cpu, wall = time.process_time() - c0, time.perf_counter() - t0
        out = {"outcome": type(exc).__name__, "message": str(exc)[:200], "error": float("inf"),
               "design_queries": oracle.queries}  # design and any verification queries asked before the raise
    out.update(d=d, H=H, seed=seed, kind=kind or "random", oracle_queries=oracle.queries,
               max_length=oracle.max_length, budget=lean_budget(d, H)[0], paper=4 * H * d * d - 2 * H + 1,
               floor=H * (d * d + d), cpu=cpu, wall=wall)
    return out


def learn_extra_sample(oracle, d, H, seed):
    """``learn(oracle, d, heads=H, seed=seed, design="lean")`` with H + 1 samples per phase-2
    configuration (``learn_lean(..., extra_sample=True)``, not an option of ``learn``): the same
    validation, checked access, query log (the certificate, float64) and working precision as
    ``learn``, learn's defaults."""
    opt, tol = _options(oracle, d, Request(heads=H, seed=seed, max_length=MAX_LENGTH, design="lean"))
    access = Access(oracle, opt.d)
    if not access.exact:
        access.log = QueryLog()
    with working_precision(access):
        return learn_lean(access, opt, tol, extra_sample=True)


def run_float64(d, H, seed, design):
    """One float64 run of ``design`` ("lean", "paper" or "lean+1", the variant with H + 1 samples
    per phase-2 configuration) on model 20_000 + seed (the same models for every design)."""
    model = random_model(H, d, seed=20_000 + seed)
    oracle = Oracle(model)
    c0 = time.process_time()
    out = {"d": d, "H": H, "seed": seed, "design": design}
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            if design == "lean+1":
                rec = learn_extra_sample(oracle, d, H, seed)
            else:
                rec = learn(oracle, d, heads=H, seed=seed, design=design)
        err = param_error(rec.model, canonical(model))
        out.update(outcome="returned", error=err, estimate=rec.error_estimate, silent=bool(err > rec.error_estimate),
                   design_queries=rec.queries["design"], holdout_queries=rec.queries["holdout"])
    except RecoveryError as exc:
        out.update(outcome=type(exc).__name__, message=str(exc)[:200], error=float("inf"), silent=False)
    out["cpu"] = time.process_time() - c0
    return out


def float64_summary(runs):
    """The comparison table: one row per design."""
    print(f"{'design':<7}{'models':>7}{'returned':>9}{'median err':>11}{'worst err':>10}{'<=1e-6':>7}{'raised':>7}"
          f"{'silent':>7}{'queries':>8}{'cpu med':>8}")
    for design in ("lean", "lean+1", "paper"):
        rs = [r for r in runs if r["design"] == design]
        if not rs:
            continue
        ok = [r for r in rs if r["outcome"] == "returned"]
        e = np.array([r["error"] for r in ok])
        q = sorted({r["design_queries"] for r in ok})
        print(f"{design:<7}{len(rs):>7}{len(ok):>9}{np.median(e) if len(e) else np.nan:>11.1e}"
              f"{e.max() if len(e) else np.nan:>10.1e}{int((e <= 1e-6).sum()):>7}{len(rs) - len(ok):>7}"
              f"{sum(r['silent'] for r in rs):>7}{'/'.join(map(str, q)) if q else '-':>8}"
              f"{np.median([r['cpu'] for r in rs]):>8.2f}")
    kinds = {}
    for r in runs:
        if r["outcome"] != "returned":
            kinds[(r["design"], r["outcome"])] = kinds.get((r["design"], r["outcome"]), 0) + 1
    print("raised:", ", ".join(f"{d} {k} x{n}" for (d, k), n in sorted(kinds.items())) or "none")


def summary(runs):
    """One line per cell (d, H, kind)."""
    cells = {}
    for r in runs:
        cells.setdefault((r["kind"], r["d"], r["H"]), []).append(r)
    print(f"{'kind':<9}{'d':>3}{'H':>3}{'ok/n':>7}{'worst err':>11}{'queries':>10}{'budget':>7}{'floor':>6}"
          f"{'paper':>6}{'len':>4}{'cpu med':>8}{'cpu max':>8}{'wall max':>9}{'comb max':>9}")
    for (kind, d, H), rs in sorted(cells.items()):
        ok = sum(r["error"] < 1e-20 for r in rs)
        q = [r["design_queries"] for r in rs]
        qs = f"{min(q)}" if min(q) == max(q) else f"{min(q)}-{max(q)}"
        comb = max(r.get("max_combinations", 0) for r in rs)
        print(f"{kind:<9}{d:>3}{H:>3}{f'{ok}/{len(rs)}':>7}{max(r['error'] for r in rs):>11.1e}{qs:>10}"
              f"{rs[0]['budget']:>7}{rs[0]['floor']:>6}{rs[0]['paper']:>6}{max(r['max_length'] for r in rs):>4}"
              f"{np.median([r['cpu'] for r in rs]):>8.2f}{max(r['cpu'] for r in rs):>8.2f}"
              f"{max(r['wall'] for r in rs):>9.2f}{comb:>9}")
    bad = [r for r in runs if r["error"] >= 1e-20]
    for r in bad:
        print("NOT RECOVERED:", r)
    over = [r for r in runs if r["kind"] == "random" and r["design_queries"] > r["budget"]]
    longer = [r for r in runs if r["max_length"] > 2 * r["H"] + 1]
    print(f"{len(runs)} models: {len(runs) - len(bad)} recovered to 1e-20; {len(over)} random models over the "
          f"budget; {len(longer)} with a query longer than 2H + 1")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--d", type=int, nargs="+", default=[2, 3, 4, 6])
    ap.add_argument("--H", type=int, nargs="+", default=[1, 2, 3, 4])
    ap.add_argument("--seeds", type=int, default=10, help="models per cell (default 10; 2 with --degenerate)")
    ap.add_argument("--degenerate", action="store_true", help="the degenerate kinds (H >= 2) instead")
    ap.add_argument("--json", default=None, help="write every run to this JSON file")
    ap.add_argument("--float64", action="store_true", help="float64: lean against the paper's design")
    ap.add_argument("--designs", nargs="+", default=["lean", "paper"], choices=["lean", "paper", "lean+1"],
                    help="with --float64: the designs compared (lean+1: H + 1 samples per phase-2 configuration)")
    args = ap.parse_args()
    if args.float64:
        d, H = (args.d[0] if args.d != [2, 3, 4, 6] else 8), (args.H[0] if args.H != [1, 2, 3, 4] else 2)
        seeds = args.seeds if args.seeds != 10 else 100
        runs = []
        for seed in range(seeds):
            for design in args.designs:
                runs.append(run_float64(d, H, seed, design))
                r = runs[-1]
                print(f"  seed {seed}: {design} {r['outcome']} err {r['error']:.1e} cpu {r['cpu']:.2f}s", flush=True)
        float64_summary(runs)
        if args.json:
            with open(args.json, "w") as fh:
                json.dump(runs, fh, indent=1)
        return
    kinds = KINDS if args.degenerate else (None,)
    seeds = args.seeds if not args.degenerate or args.seeds != 10 else 2
    runs = []
    for kind in kinds:
        for d in args.d:
            for H in args.H:
                if kind is not None and H < 2:
                    continue
                for seed in range(seeds):
                    runs.append(run(d, H, seed, kind))
                    r = runs[-1]
                    print(f"  {r['kind']} d={d} H={H} seed={seed}: {r['outcome']} err {r['error']:.1e} "
                          f"queries {r['design_queries']} cpu {r['cpu']:.2f}s", flush=True)
    summary(runs)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(runs, fh, indent=1)


if __name__ == "__main__":
    main()
