"""Benchmark: the range of layer scales the paper's design serves in float64 with ``scale="auto"``
(chapter 7). A script, not a test.

    python benchmarks/scale_range.py                      # prints the table
    python benchmarks/scale_range.py --json benchmarks/results/scale_range.json

Every model is ``random_model(H, d, seed=s, scale=10**k)`` (:math:`W_h` entries
:math:`\\mathcal N(0,10^{2k}/d)`, so :math:`\\ell=u^\\top W_hq` of unit :math:`u,q` has standard
deviation :math:`10^k/\\sqrt d`), :math:`d=8`, :math:`H=2` and 4, ``--models`` seeds per scale,
learned by ``learn(Oracle(m), d, heads=H, seed=s, robust=True)`` (the default
``scale="auto"``; no fallback) and scored with :func:`attnlearn.param_error` against
``canonical(m)``. A record: ``H``, ``d``, ``k`` (the decade of the scale), ``seed``, ``outcome``
("returned" or the exception's class name), ``error``, ``estimate``, ``rule``
(``diagnostics.scale["rule"]``), ``probe_scale`` (the last probe's scale), ``factor``, ``queries``.
Columns: ``recovered`` (error at most 1e-6 for H = 2, 1e-4 for H = 4), ``searched`` (returns whose
rule was the search), ``silent`` (a return whose error exceeds 10 times its estimate: must be 0).

Run with ``OPENBLAS_NUM_THREADS=1``. Measured (2026-12-06, this machine, 10 models per row, about
two minutes): see ``benchmarks/results/scale_range.json`` and chapter 7's table.
"""

import argparse
import json
import warnings

import numpy as np

from attnlearn import Oracle, RecoveryError, canonical, learn, param_error
from attnlearn.model import random_model

DECADES = (-7, -6, -5, -4, -3, -2, -1, 0, 1, 1.5, 2, 3)


def target(H):
    return 1e-6 if H <= 2 else 1e-4


def run(H, d, k, s):
    m = random_model(H, d, seed=s, scale=10.0**k)
    out = {"H": H, "d": d, "k": k, "seed": s}
    oracle = Oracle(m)
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            rec = learn(oracle, d, heads=H, seed=s, robust=True)
    except RecoveryError as exc:
        return dict(out, outcome=type(exc).__name__, error=None, estimate=None, rule=None, probe_scale=None,
                    factor=None, queries=oracle.queries)
    sc = rec.diagnostics.scale
    return dict(out, outcome="returned", error=float(param_error(rec.model, canonical(m))),
                estimate=float(rec.error_estimate), rule=sc["rule"], probe_scale=float(sc["probe_scales"][-1]),
                factor=float(sc["factor"]), queries=int(rec.queries["total"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=int, default=10)
    ap.add_argument("--d", type=int, default=8)
    ap.add_argument("--heads", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--json", default=None, help="write every run to this JSON file")
    args = ap.parse_args()
    records = []
    print("| H | scale | recovered | searched | raised | silent |\n|---|---|---|---|---|---|")
    for H in args.heads:
        for k in DECADES:
            rs = [run(H, args.d, k, s) for s in range(args.models)]
            records.extend(rs)
            ret = [r for r in rs if r["outcome"] == "returned"]
            good = sum(r["error"] <= target(H) for r in ret)
            print(f"| {H} | 1e{k:g} | {good}/{len(rs)} | {sum(r['rule'] == 'search' for r in ret)} | "
                  f"{len(rs) - len(ret)} | {sum(r['error'] > 10 * r['estimate'] for r in ret)} |", flush=True)
            if args.json:
                with open(args.json, "w") as fh:
                    json.dump(records, fh, indent=1)


if __name__ == "__main__":
    main()
