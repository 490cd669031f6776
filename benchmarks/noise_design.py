"""The long ratio design through float32-level noise (chapter 5b): its measured rows.

    python benchmarks/noise_design.py                  # the small rows (H = 1, 2, 4 at d = 4)
    python benchmarks/noise_design.py --rows accept    # the committed rows (hours on 2 cores)
    python benchmarks/noise_design.py --row 2,16,6e-8,20   # one row: H, d, eps, models
    python benchmarks/noise_design.py --workers 8      # local processes; --scheduler tcp://host:8786 for Dask
    python benchmarks/noise_design.py --out PATH       # the records as JSON
    python benchmarks/noise_design.py --row 4,16,6e-8,10 --first 10 --out b.json  # seeds 10..19
    python benchmarks/noise_design.py --merge a.json b.json --out row.json         # one row from parts

Every trial: model ``random_model(H, d, seed=MODEL_SEED + 1000 d + 100_000 H + s)`` (W_h ~ N(0, 1/d),
v_h ~ N(0, 1)), oracle answers times (1 + eps N(0, 1)) (:class:`attnlearn.RelativeNoise`, noise
seed s), ``learn(oracle, d, heads=H, design="long", relative_error=eps, max_length=4096, seed=s)``.
"ok" = relative parameter error <= 1e-3 (param_error against canonical(model)). A record: ``o`` (the
outcome: "ok", or the exception's name, then ``msg``), ``e`` (the error), ``b`` (its
``error_estimate``), ``q`` (queries), ``L`` (the longest), ``x2`` (``Diagnostics.holdout_chi2``:
the held-out answers against the design's covariance), ``r`` (how many times a group was drawn
again, ``len(Diagnostics.redrawn)``; the float64 rows' records lack it), ``t`` (CPU seconds). Every
trial is one task of :func:`attnlearn.sweeps.run_trials`, seeded by its key (H, d, eps, s): the
records are the same for any number of workers and any split of a row with ``--first`` (except the
CPU time ``t`` of each trial).

Printed per row: ok to 1e-3 and to 1e-6, the median error, returns beyond 10x their estimate
(error > 10 error_estimate: must be 0), the largest error / estimate, raised trials by class,
queries per 4 H d^2 (budget 25), the longest query (budget 4096) and the median CPU time per model
(time.process_time of the worker: one core).

Measured (2026-12-07, this machine: 2 shared cores, AMD EPYC; one process per run, ``--workers 1``,
beside two or three other runs; the learner of code 2aace8d, a group with no result drawn again up
to ``LongTolerances.group_redraws`` = 6 times; ``benchmarks/results/noise_design_<row>.json``):

    --row 1,64,6e-8,5 (noise_design_H1_d64.json):
    H=1 d=64 eps=6e-08 ok(1e-3) 5/5 ok(1e-6) 5/5 median 1.7e-07 beyond 10x est 0 max e/est 0.41
             queries/4Hd^2 20.0 longest 4096 230.4 s/model raised: none
    --row 2,16,6e-8,20 (noise_design_H2_d16.json):
    H=2 d=16 eps=6e-08 ok(1e-3) 20/20 ok(1e-6) 16/20 median 3.0e-07 beyond 10x est 0 max e/est 0.44
             queries/4Hd^2 12.6 longest 4096 19.5 s/model raised: none
    --row 4,16,6e-8,20 (noise_design_H4_d16.json; 18 of the 20 drew a group again, at most 5 times):
    H=4 d=16 eps=6e-08 ok(1e-3) 20/20 ok(1e-6) 9/20 median 1.1e-06 beyond 10x est 0 max e/est 0.48
             queries/4Hd^2 13.5 longest 4096 36.9 s/model raised: none
    --row 8,16,6e-8,20 (noise_design_H8_d16.json; one run per model, --row 8,16,6e-8,1 --first s,
    joined with --merge):
    H=8 d=16 eps=6e-08 ok(1e-3) 19/20 ok(1e-6) 0/20 median 2.4e-05 beyond 10x est 0 max e/est 0.69
             queries/4Hd^2 16.8 longest 4096 515.5 s/model raised: UnmatchedHeadsError 1
             (every returned model drew groups again, 8 to 23 times over its 16 groups, and asked
             10.2 to 16.8 times 4Hd^2 queries; seed 11 raised at link(1,11), two pairings of the
             groups' heads as bad as each other, chi2 8.5e18; CPU 322 to 801 s per model)
    --row 6,8,1e-16,20 (noise_design_H6_d8_f64.json; float64 rounding; 19 of the 20 drew a group
    again, at most 7 times):
    H=6 d=8 eps=1e-16 ok(1e-3) 20/20 ok(1e-6) 20/20 median 2.7e-11 beyond 10x est 0 max e/est 0.21
             queries/4Hd^2 18.5 longest 4096 17.4 s/model raised: none

The row of width 32 in float64 was run on code 9934694 (2026-12-06) and not since (about an hour
of CPU); the learner has changed for it in the anchored coarse pass (H >= 3) and the redraws:

    --row 4,32,1e-16,20 (noise_design_H4_d32_f64.json):
    H=4 d=32 eps=1e-16 ok(1e-3) 20/20 ok(1e-6) 19/20 median 5.1e-11 beyond 10x est 0 max e/est 0.55
             queries/4Hd^2 8.7 longest 4096 175.4 s/model raised: none

The rows of earlier codes are in the history of the records (``git log -p
benchmarks/results/noise_design_*.json`` and the commit messages).
"""

import os

for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
import collections  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402

from attnlearn import Oracle, RecoveryError, RelativeNoise, canonical, learn, param_error  # noqa: E402
from attnlearn.model import random_model  # noqa: E402
from attnlearn.sweeps import run_trials  # noqa: E402

MODEL_SEED = 170_000_000
L = 4096
F32 = 6e-8  # float32's relative rounding (2**-24 = 5.96e-8)
F64 = 1e-16
#: (H, d, eps, models)
SMALL = [(1, 4, F32, 20), (2, 4, F32, 20), (4, 4, F32, 20)]
ACCEPT = [(1, 64, F32, 5), (2, 16, F32, 20), (4, 16, F32, 20), (8, 16, F32, 20), (4, 32, F64, 20), (6, 8, F64, 20)]
OK, FINE = 1e-3, 1e-6


def trial(key):
    """One seeded run of the long design; the record of the module docstring."""
    H, d, eps, s = key
    model = random_model(H, d, seed=MODEL_SEED + 1000 * d + 100_000 * H + s)
    oracle = Oracle(model, noise=RelativeNoise(eps), seed=s)
    t0 = time.process_time()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a warning would be a bug: surfaced as a record
            rec = learn(oracle, d, heads=H, design="long", relative_error=eps, max_length=L, seed=s,
                        max_queries=10**8)
    except RecoveryError as exc:
        return {"o": type(exc).__name__, "msg": str(exc)[:160], "t": time.process_time() - t0}
    except Warning as w:
        return {"o": "warning: " + type(w).__name__, "msg": str(w)[:160], "t": time.process_time() - t0}
    err = param_error(rec.model, canonical(model))
    return {"o": "ok", "e": float(err), "b": float(rec.error_estimate), "q": rec.queries["total"],
            "L": int(oracle.max_length), "x2": rec.diagnostics.holdout_chi2, "r": len(rec.diagnostics.redrawn),
            "t": time.process_time() - t0}


def summary(H, d, eps, recs):
    ok = [r for r in recs if r["o"] == "ok"]
    errs = [r["e"] for r in ok]
    raised = collections.Counter(r["o"] for r in recs if r["o"] != "ok")
    unit = 4 * H * d * d
    return {"H": H, "d": d, "eps": eps, "models": len(recs), "returned": len(ok),
            "ok": sum(e <= OK for e in errs), "fine": sum(e <= FINE for e in errs),
            "median_error": float(np.median(errs)) if errs else None,
            "beyond_10x": sum(r["e"] > 10 * r["b"] for r in ok),
            "max_ratio": max((r["e"] / r["b"] for r in ok), default=None),
            "raised": dict(raised),
            "queries_per_4Hd2": max((r["q"] / unit for r in ok), default=None),
            "longest": max((r["L"] for r in ok), default=None),
            "median_seconds": float(np.median([r["t"] for r in recs]))}


def row(H, d, eps, models, *, workers, scheduler, first=0):
    recs = run_trials(trial, [(H, d, eps, s) for s in range(first, first + models)], workers=workers,
                      scheduler=scheduler, desc=f"H={H} d={d} eps={eps:.0e}")
    return summary(H, d, eps, recs), recs


def merged(paths):
    """The rows of several ``--out`` files (the same row's seeds split over runs) joined by (H, d, eps)."""
    rows = {}
    for path in paths:
        with open(path) as fh:
            for item in json.load(fh):
                s = item["summary"]
                rows.setdefault((s["H"], s["d"], s["eps"]), []).extend(item["records"])
    return [(key, recs) for key, recs in rows.items()]


def show(s):
    med = "-" if s["median_error"] is None else f"{s['median_error']:.1e}"
    ratio = "-" if s["max_ratio"] is None else f"{s['max_ratio']:.2f}"
    qpu = "-" if s["queries_per_4Hd2"] is None else f"{s['queries_per_4Hd2']:.1f}"
    raised = ", ".join(f"{k} {v}" for k, v in sorted(s["raised"].items())) or "none"
    print(f"H={s['H']} d={s['d']:<3} eps={s['eps']:.0e}  ok(1e-3) {s['ok']:>2}/{s['models']:<2} ok(1e-6) "
          f"{s['fine']:>2}/{s['models']:<2} median {med:>7}  beyond 10x est {s['beyond_10x']}  max e/est {ratio:>5}  "
          f"queries/4Hd^2 {qpu:>5}  longest {s['longest']}  {s['median_seconds']:.1f} s/model  raised: {raised}",
          flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", choices=("small", "accept", "all"), default="small")
    ap.add_argument("--row", action="append", metavar="H,d,eps,models", help="a row of your own (repeatable)")
    ap.add_argument("--workers", type=int, default=2, help="local worker processes (records do not depend on it)")
    ap.add_argument("--scheduler", metavar="ADDRESS", help="a Dask scheduler (tcp://host:8786) instead")
    ap.add_argument("--out", metavar="PATH", help="write the summaries and records as JSON")
    ap.add_argument("--first", type=int, default=0, help="first model seed of --row (split a row over runs)")
    ap.add_argument("--merge", nargs="+", metavar="JSON", help="join --out files of one row's parts and print it")
    args = ap.parse_args()
    if args.merge:
        out = []
        for (H, d, eps), recs in merged(args.merge):
            s = summary(H, d, eps, recs)
            show(s)
            out.append({"summary": s, "records": recs})
        if args.out:
            with open(args.out, "w") as fh:
                json.dump(out, fh, indent=1)
        return
    if args.row:
        rows = []
        for text in args.row:
            H, d, eps, models = text.split(",")
            rows.append((int(H), int(d), float(eps), int(models)))
    else:
        rows = {"small": SMALL, "accept": ACCEPT, "all": SMALL + ACCEPT}[args.rows]
    out = []
    for H, d, eps, models in rows:
        s, recs = row(H, d, eps, models, workers=args.workers, scheduler=args.scheduler, first=args.first)
        show(s)
        out.append({"summary": s, "records": recs})
        if args.out:
            with open(args.out, "w") as fh:
                json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
