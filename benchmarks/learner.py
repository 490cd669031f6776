"""Benchmark of attnlearn.learn (a script, not a test).

    python benchmarks/learner.py              # timings: float64 (medians of 5 runs) and exact mode
    python benchmarks/learner.py --quick      # fast smoke run (small sizes)
    python benchmarks/learner.py --frontier   # float64 frontier table (chapter 4's full sweep)
    python benchmarks/learner.py --frontier --json out.json   # ... and save it
    python benchmarks/learner.py --exact-grid [--seeds 6] [--nodes copies]  # issue 3's exact grid, 60 digits

Timings: the learner's wall time (oracle included), the oracle's own evaluation time
(``oracle.elapsed``), the learner's own time (the difference) and its ratio to the oracle's,
and the relative parameter error against ``canonical(model)`` (or the class name of the
RecoveryError raised). float64 modes: ``paper`` (the paper's budget and DESIGN §4.1's nodes,
learn's default), ``ratios`` (the same budget, ratio nodes), ``robust`` (robust=True). The
ratios are measured in one run, as these machines are noisy. Everything is seeded.
"""

import argparse
import json
import time
import warnings

import mpmath
import numpy as np

from attnlearn import Oracle, RecoveryError, canonical, learn, param_error, progress, query_budget
from attnlearn.model import random_model


# float64 modes: (name, robust, nodes). "paper" is the paper's budget with DESIGN §4.1's nodes
# (learn's float64 default); "ratios" the same budget with the ratio nodes; "robust" = robust=True.
MODES = [("paper", False, "copies"), ("ratios", False, "ratios"), ("robust", True, "ratios")]


def run(d, H, *, precision="float64", robust=False, nodes=None, seed=0, model_seed=None):
    model = random_model(H, d, seed=10_000 + 100 * d + seed if model_seed is None else model_seed)
    oracle = Oracle(model, precision=precision)
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            rec = learn(oracle, d, heads=H, seed=seed, robust=robust, nodes=nodes)
        wall = time.perf_counter() - t0
        if oracle.exact:
            with mpmath.workdps(oracle.dps):
                err = param_error(rec.model, canonical(model.to_mpmath()))
        else:
            err = param_error(rec.model, canonical(model))
        outcome, queries = f"{err:.1e}", rec.queries["total"]
    except RecoveryError as exc:
        wall = time.perf_counter() - t0
        err, outcome, queries = float("inf"), type(exc).__name__, oracle.queries
    return {"wall": wall, "oracle": oracle.elapsed, "error": err, "outcome": outcome, "queries": queries}


def timings(quick, repeat):
    f64 = [(4, 2), (8, 2)] if quick else [(16, 2), (64, 2), (32, 3)]
    exact = [(2, 2)] if quick else [(4, 4), (6, 6)]
    print(f"float64 (each run {repeat} times, same seeds: medians; own/or range in brackets)")
    print("own s = wall - oracle (the learner's own work); own/or = own / oracle, the issue's ratio (target <= 1)")
    print(f"{'d':>3} {'H':>2} {'mode':<7} {'queries':>7} {'wall s':>8} {'oracle s':>9} {'own s':>8} {'own/or':>6}"
          f" {'[min - max]':>13}  error")
    for d, H in f64:
        for mode, robust, nodes in MODES:
            runs = [run(d, H, robust=robust, nodes=nodes, model_seed=d * 10 + H) for _ in range(repeat)]
            wall = np.array([r["wall"] for r in runs])
            orc = np.array([r["oracle"] for r in runs])
            ratio = (wall - orc) / np.maximum(orc, 1e-12)  # measured within each run
            r = runs[-1]  # seeded: every run gives the same result
            print(f"{d:>3} {H:>2} {mode:<7} {r['queries']:>7} {np.median(wall):>8.3f} {np.median(orc):>9.3f}"
                  f" {np.median(wall - orc):>8.3f} {np.median(ratio):>6.2f} [{ratio.min():.2f} - {ratio.max():.2f}]"
                  f"  {r['outcome']}", flush=True)
    print("\nexact mode, 60 digits")
    print(f"{'d':>3} {'H':>2} {'nodes':<7} {'queries':>7} {'wall s':>8} {'oracle s':>9}  error")
    for d, H in exact:
        for nodes in ("ratios", "copies"):
            r = run(d, H, precision=60, nodes=nodes, model_seed=d * 10 + H)
            print(f"{d:>3} {H:>2} {nodes:<7} {r['queries']:>7} {r['wall']:>8.3f} {r['oracle']:>9.3f}  {r['outcome']}",
                  flush=True)


def frontier(quick, seeds, path):
    ds = [2, 4, 8] if quick else [2, 4, 8, 16, 32, 64]
    Hs = [1, 2] if quick else [1, 2, 3, 4]
    out = {"ds": ds, "Hs": Hs, "seeds": seeds, "threshold": 1e-6, "modes": {}}
    t0 = time.perf_counter()
    for mode, robust, nodes in MODES:
        print(f"{mode}: median error over {seeds} seeds (raised runs in parentheses)")
        print(f"{'H':>2} | " + " ".join(f"{'d=' + str(d):>13}" for d in ds) + " | frontier (median <= 1e-6)")
        table, raised = {}, 0
        for H in Hs:
            cells, best = [], None
            for d in ds:
                errs = np.array([run(d, H, robust=robust, nodes=nodes, seed=s)["error"]
                                 for s in progress(range(seeds), desc=f"{mode} H={H} d={d}")])
                med = float(np.median(errs))
                n_raised = int(np.sum(~np.isfinite(errs)))
                raised += n_raised
                table[f"{H},{d}"] = {"median": med if np.isfinite(med) else None, "raised": n_raised}
                cells.append(f"{med:.0e} ({n_raised})" if np.isfinite(med) else f"raised ({n_raised})")
                if med <= 1e-6:
                    best = d
            table[f"{H},frontier"] = best
            print(f"{H:>2} | " + " ".join(f"{c:>13}" for c in cells) + f" | d = {best if best else 'none'}", flush=True)
        out["modes"][mode] = table
        print(f"raised RecoveryError: {raised} of {len(ds) * len(Hs) * seeds} runs\n")
    print(f"frontier sweep wall time: {time.perf_counter() - t0:.1f} s")
    if path:
        with open(path, "w") as fh:
            json.dump(out, fh, indent=1)
        print(f"wrote {path}")


def exact_grid(seeds, nodes):
    """The issue's exact-mode grid: d in {1,2,3,5}, H in {1,2,3,5}, heads=H and max_heads=H+2,
    60 digits; per cell the worst and median error over the seeds and the count within 1e-40.
    Query count and longest query are checked against the paper's formulas in every run."""
    print(f"exact mode, 60 digits, nodes={nodes or 'default (ratios)'}: {seeds} random models per cell")
    print(f"{'H':>2} {'d':>2} {'bound':<10} | {'worst':>7} {'median':>7} | <= 1e-40 | counts exact")
    worst_all, t0 = 0.0, time.perf_counter()
    for H in (1, 2, 3, 5):
        for d in (1, 2, 3, 5):
            for bound in ("heads", "max_heads"):
                n = H if bound == "heads" else H + 2
                errs, exact_counts = [], True
                for s in progress(range(seeds), desc=f"H={H} d={d} {bound}"):
                    model = random_model(H, d, seed=1000 * H + 10 * d + s)
                    oracle = Oracle(model, precision=60)
                    try:
                        rec = learn(oracle, d, **{bound: n}, seed=s, nodes=nodes)
                        with mpmath.workdps(60):
                            errs.append(param_error(rec.model, canonical(model.to_mpmath())))
                    except RecoveryError:
                        errs.append(float("inf"))
                    exact_counts &= (oracle.queries, oracle.max_length) == query_budget(d, n)
                errs = np.array(errs)
                worst_all = max(worst_all, errs.max())
                print(f"{H:>2} {d:>2} {bound:<10} | {errs.max():>7.0e} {np.median(errs):>7.0e} | {int(np.sum(errs <= 1e-40)):>3}/{seeds:<4}"
                      f" | {exact_counts}", flush=True)
    print(f"worst over the grid: {worst_all:.1e}; wall time {time.perf_counter() - t0:.0f} s")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes: a smoke run in a few seconds")
    ap.add_argument("--frontier", action="store_true", help="the float64 frontier table instead of timings")
    ap.add_argument("--seeds", type=int, default=None, help="seeds per frontier cell (default 10; 3 with --quick)")
    ap.add_argument("--json", default=None, help="with --frontier: write the table to this JSON file")
    ap.add_argument("--repeat", type=int, default=5, help="timings: runs per float64 case (medians; default 5)")
    ap.add_argument("--exact-grid", action="store_true", help="the issue's exact-mode grid at 60 digits instead")
    ap.add_argument("--nodes", default=None, choices=["copies", "ratios"], help="with --exact-grid: the node family")
    args = ap.parse_args()
    if args.exact_grid:
        exact_grid(args.seeds or 3, args.nodes)
    elif args.frontier:
        frontier(args.quick, args.seeds or (3 if args.quick else 10), args.json)
    else:
        timings(args.quick, args.repeat)


if __name__ == "__main__":
    main()
