"""Benchmark: the rank design (``learn(..., design="rank")``) in exact mode on models whose heads have
rank p = d / H: queries read off the oracle against the formula, the information floor and the
paper's count; the rank found; the error at 50 digits. A script, not a test.

    python benchmarks/rank.py --json benchmarks/results/rank_exact.json
    python benchmarks/rank.py --d 8 12 16 --heads 2 4 --models 10 --json PATH

Model ``i`` of a cell is ``low_rank_model(H, d, d // H, seed=1000 * H + 100 * d + i, exact=True)``
(:math:`W_h=A_hB_h^\\top` held exactly: rank p at any precision), its oracle
``Oracle(model, precision=50)``, learned by ``learn(oracle, d, heads=H, design="rank", seed=i)``
(the rank not given: found from the answers) and scored with ``param_error`` against the canonical
form of the exact model (at 100 digits).

A record: ``d``, ``H``, ``p``, ``seed``, ``outcome`` ("returned" or the exception's class name),
``message``, ``error``, ``error_estimate``, ``ranks`` (found), ``queries`` (the oracle's own
count), ``design_queries`` (``rec.queries["design"]``), ``formula``
(:func:`~attnlearn.learner.cost.rank_budget` at p), ``floor`` (:func:`~attnlearn.learner.cost.rank_floor`),
``paper`` (:math:`4Hd^2-2H+1`), ``cpu_s``, ``commit``, ``date``.
"""

import argparse
import datetime
import json
import time

import mpmath

from scale import _commit  # the commit a record was measured at, as benchmarks/scale.py records it


def one(d, H, i, *, dps):
    """Learn model ``i`` of cell (d, H); return its record."""
    from attnlearn import Oracle, canonical, learn, param_error
    from attnlearn.learner.cost import query_budget, rank_budget, rank_floor
    from attnlearn.model import low_rank_model

    p = d // H
    M = low_rank_model(H, d, p, seed=1000 * H + 100 * d + i, exact=True)
    oracle = Oracle(M, precision=dps)
    rec = dict(d=d, H=H, p=p, seed=i, formula=rank_budget(d, H, p)[0], floor=rank_floor(d, H, p),
               paper=query_budget(d, H)[0])
    c0 = time.process_time()
    try:
        r = learn(oracle, d, heads=H, design="rank", seed=i)
    except Exception as exc:  # noqa: BLE001 - every failure is a measurement
        rec.update(outcome=type(exc).__name__, message=str(exc), error=None, error_estimate=None, ranks=None,
                   design_queries=None)
    else:
        with mpmath.workdps(2 * dps):
            err = float(param_error(r.model, canonical(M, atol=0)))
        rec.update(outcome="returned", message=None, error=err, error_estimate=float(r.error_estimate),
                   ranks=list(r.diagnostics.ranks), design_queries=int(r.queries["design"]))
    rec.update(queries=int(oracle.queries), cpu_s=time.process_time() - c0)
    return rec


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--d", type=int, nargs="+", default=[8, 12, 16])
    ap.add_argument("--heads", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--models", type=int, default=10)
    ap.add_argument("--dps", type=int, default=50)
    ap.add_argument("--json", default=None, help="write every record to this JSON list")
    args = ap.parse_args()
    meta = dict(commit=_commit(), date=datetime.date.today().isoformat(), dps=args.dps)
    records = []
    print("| d | H | p | models | returned | max error | ranks right | design queries | formula | 2 x floor | paper |")
    print("|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for d in args.d:
        for H in args.heads:
            cell = [dict(one(d, H, i, dps=args.dps), **meta) for i in range(args.models)]
            records += cell
            ok = [r for r in cell if r["outcome"] == "returned"]
            qs = sorted({r["design_queries"] for r in ok})
            print(f"| {d} | {H} | {d // H} | {len(cell)} | {len(ok)} | "
                  f"{max((r['error'] for r in ok), default=float('nan')):.1e} | "
                  f"{sum(r['ranks'] == [d // H] * H for r in ok)} | {', '.join(map(str, qs))} | {cell[0]['formula']} | "
                  f"{2 * cell[0]['floor']} | {cell[0]['paper']} |", flush=True)
            for r in cell:
                if r["message"]:
                    print(f"    seed {r['seed']}: {r['outcome']}: {r['message'][:300]}", flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(records, fh, indent=1)


if __name__ == "__main__":
    main()
