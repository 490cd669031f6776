"""Noise sweep for claim C8 (chapter 5): parameter error against the learner's own bound K*eps.

    python benchmarks/noise.py                 # quick grid (20 trials per cell), prints the table
    python benchmarks/noise.py --save          # full sweep (200 trials per cell) -> benchmarks/results/noise_sweep.json
    python benchmarks/noise.py --trials 50     # any number of trials, printed only

Settings: H in {1, 2, 3} x d in {2, 4, 8}; noise models UniformNoise(eps), GaussianNoise(eps / 5)
(the learner is told eps = 5 sigma) and Float32Rounding() (told eps = 2**-24 max|F|, max|F|
measured on a first pass). eps runs over 1e-14, 1e-13, ..., 1e-8, 1e-6, 1e-4, 1e-2 and the sweep of one setting stops at
the first eps where every trial raises (breakdown). H = 1, 2 use the paper's query budget
(robust=False); H = 3 uses robust=True, because with the paper's budget float64 raises in almost
every trial at H = 3 (chapter 4's frontier).

Trial s of setting (d, H): model seed 100_000 H + 1_000 d + s, learner seed s, noise seed s; the
same models are used at every eps. For each trial the record holds the outcome ("ok" or the
RecoveryError class), the measured parameter error e against canonical(model), the learner's
error estimate b = recovery.error_estimate (the certificate of the refitted model, chapter 5),
the design's own first-order bound k = K * eps_used before the refit, eps_used u =
recovery.output_error, and the smallest matching margin (links and crosses). A *silent failure*
is a returned model whose error exceeds its estimate (safety factor 1). Deterministic on one machine: every number depends only on the
seeds (BLAS is pinned to one thread). Another CPU's BLAS kernel changes the last bits of the
oracle's float64 answers and of the learner's own arithmetic, so two machines' sweeps agree only
to the tolerance of :func:`same_record` (module constants below; chapter 5 and
tests/test_noise.py use it to check fresh runs against the committed file).

    python benchmarks/noise.py --out PATH      # full sweep written to PATH (the tracked file untouched)
    python benchmarks/noise.py --compare OLD.json NEW.json   # outcomes, errors, conclusions
    python benchmarks/noise.py --workers 8     # local processes (joblib/loky); records do not change
    python benchmarks/noise.py --scheduler tcp://host:8786   # the trials on a Dask cluster

Every trial is one task of :func:`attnlearn.sweeps.run_trials`, seeded by its key (d, H, noise,
eps, seed), so the records are the same for any number of workers and either engine.
"""

import os

for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402

from attnlearn import (  # noqa: E402
    Float32Rounding,
    GaussianNoise,
    Oracle,
    RecoveryError,
    UniformNoise,
    canonical,
    learn,
    param_error,
)
from attnlearn.model import random_model  # noqa: E402
from attnlearn.sweeps import run_trials  # noqa: E402

HS = (1, 2, 3)
DS = (2, 4, 8)
# every decade where H >= 2 breaks down, every second decade above
EPS = (1e-14, 1e-13, 1e-12, 1e-11, 1e-10, 1e-9, 1e-8, 1e-6, 1e-4, 1e-2)
NOISES = ("uniform", "gaussian", "float32")
PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "noise_sweep.json")


def robust_mode(H):
    """The query budget used for H heads: the paper's for H <= 2, robust=True for H = 3."""
    return H >= 3


class _Recording(Oracle):
    """An oracle that remembers the largest |answer| (to measure the float32 rounding level)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.ymax = 0.0

    def batch(self, Xs):
        y = super().batch(Xs)
        self.ymax = max(self.ymax, float(np.max(np.abs(y))))
        return y


def _g(x):
    """Four significant digits (JSON stays small; every stored check is on buckets of these)."""
    return None if x is None or not np.isfinite(x) else float(f"{x:.4g}")


def trial(d, H, noise, eps, s):
    """One seeded learning run; returns the record described in the module docstring."""
    model = random_model(H, d, seed=100_000 * H + 1_000 * d + s)
    robust = robust_mode(H)
    if noise == "float32":
        # first pass: the output scale the learner's queries reach (noise-free, same seed)
        probe = _Recording(model)
        try:
            learn(probe, d, heads=H, seed=s, robust=robust, holdout=32)
        except RecoveryError:
            pass
        told = 2.0**-24 * probe.ymax * 1.25
        nz = Float32Rounding()
    elif noise == "uniform":
        told, nz = eps, UniformNoise(eps)
    else:
        told, nz = eps, GaussianNoise(eps / 5)
    oracle = Oracle(model, noise=nz, seed=s)
    try:
        rec = learn(oracle, d, heads=H, seed=s, robust=robust, output_error=told)
    except RecoveryError as exc:
        return {"o": type(exc).__name__, "t": _g(told)}
    except Warning as w:  # warnings are errors here (see keyed_trial): recorded, never silent
        return {"o": "warning: " + type(w).__name__, "t": _g(told)}
    err = param_error(rec.model, canonical(model))
    margins = [np.min(rec.diagnostics[k]) for k in ("link_margin", "cross_margin") if rec.diagnostics[k] is not None]
    margin = float(min(margins)) if margins else float("inf")
    # e is None when the error is infinite (a wrong head count): always a silent failure
    # k: the design's own first-order bound K * eps_used, before the refit (chapter 5)
    k = rec.certificate.design_estimate if rec.certificate is not None else rec.error_estimate
    return {"o": "ok", "t": _g(told), "h": rec.heads, "e": _g(err), "b": _g(rec.error_estimate), "u": _g(rec.output_error),
            "k": _g(k), "m": _g(margin)}


# ---- comparing two runs of the same trial (another machine, BLAS kernel or perturbation) ----------
#: float64 unit roundoff (2**-52).
EPS64 = float(np.finfo(float).eps)
#: The oracle's own float64 rounding, per answer, in units of EPS64 * max|F|: what another BLAS
#: kernel changes in an answer (measured on the queries of 45 learning runs, H <= 3, d <= 8:
#: at most 0.64 units between OpenBLAS's Haswell and SkylakeX kernels, 3.5 between Sandybridge
#: and SkylakeX), what Oracle's perturbation mode applies (PERTURB_ULPS = 4), and the floor that
#: learn() itself adds to the told output error (u >= 4 EPS64 max|F|). The learner's own float64
#: arithmetic also changes with the kernel; being backward stable, it acts like a perturbation
#: of its data of the same order.
ROUND_ULPS = 4
#: Largest |F| the sweep's queries reach: 33.7 measured over the 1,800 float32 first passes of the
#: committed sweep (every model of the sweep, noise-free); rounded up.
FMAX = 40.0
#: Relative rounding of a stored figure (4 significant digits, see _g): half a unit of the 4th digit.
DIGITS = 5e-4
#: Relative change of the bound b allowed on top of 2 rho (see record_tolerance).
B_REL = 1e-2


def _positive(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0


def record_tolerance(new, old):
    """Allowed differences ``(tol_e, tol_b)`` of the error and the bound between two records of
    one trial that both returned, on two machines (BLAS kernels, perturbation mode).

    *Error.* The learner's own sensitivity is at most K = b / u (``b = error_estimate``, the
    certificate): moving every oracle answer by at most delta moves the recovered parameters,
    relative to their norm, by about K delta or less, and the measured error e with them. Another kernel moves an answer
    by at most ROUND_ULPS EPS64 |F| <= ROUND_ULPS EPS64 FMAX, and learn() counts that rounding
    into u (u >= ROUND_ULPS EPS64 max|F|), so the change is also at most b. With
    ``rho = min(1, ROUND_ULPS EPS64 FMAX / u)``, the ratio of the rounding to the output error:

        tol_e = b rho + 2 DIGITS max(e_new, e_old)

    (the second term: both figures are stored to 4 digits). Tight where the told error dominates
    the rounding (eps >= 1e-10: the stored digits), vacuous at the float64 floor (eps = 1e-14,
    rho = 1: the error there *is* rounding, and only e <= b is certain).

    *Bound.* b is computed from the same rounded data: the refit's residuals (the measured
    noise), its last step, the point where the first-order propagation is evaluated and, with
    robust=True, which configurations are redrawn all move with the rounding. Where the rounding is comparable to the output error (rho near 1) b may change by
    any factor; elsewhere it changes by a small fraction, which no conclusion depends on (b is
    used only in ``e <= b``, and the sweep's largest e / b is 0.60):

        tol_b = (2 rho + B_REL) max(b_new, b_old),   B_REL = 1 %  (includes the 4-digit rounding)

    Measured with ``--compare`` (it prints the largest fraction of each tolerance used): the
    full sweep with OpenBLAS's SkylakeX kernel against the committed one (made with its Haswell
    kernel, which reproduces it bit for bit), 29,400 trials: 18 outcomes differ (one
    RecoveryError for another near the threshold, or a raise for a return at eps = 1e-14), and
    of the pairs that both returned, 3 differ by more than tol_e (errors 1-4 % apart at
    eps = 1e-11..1e-9: the certificate's refit stopped one Gauss-Newton step apart); the others
    use at most 0.97 of tol_e and 0.36 of tol_b. The reduced re-run of tests/test_noise.py and
    chapter 5's light re-run use cells where none of these occurred.
    """
    for r in (new, old):
        if r.get("o") != "ok" or not all(_positive(r.get(k)) for k in "bu"):
            raise ValueError(f"record_tolerance needs two returned records with b, u > 0, got {r!r}")
    b = max(new["b"], old["b"])
    rho = min(1.0, ROUND_ULPS * EPS64 * FMAX / min(new["u"], old["u"]))
    es = [r["e"] for r in (new, old) if r["e"] is not None]
    return b * rho + 2 * DIGITS * max(es, default=0.0), (2 * rho + B_REL) * b


def same_record(new, old):
    """True when two records of one trial agree as far as the arithmetic guarantees on another
    machine: the same outcome (returned, or the same RecoveryError class), and when returned the
    same head count (or both a wrong one: e None), e and b within :func:`record_tolerance`.

    Used by tests/test_noise.py (a reduced re-run against the committed sweep), chapter 5 (its
    light re-run) and ``--compare``.
    """
    if new["o"] != old["o"]:
        return False
    if new["o"] != "ok":
        return True
    if (new["e"] is None) != (old["e"] is None) or new["h"] != old["h"]:
        return False
    tol_e, tol_b = record_tolerance(new, old)
    e_ok = new["e"] is None or abs(new["e"] - old["e"]) <= tol_e
    return e_ok and abs(new["b"] - old["b"]) <= tol_b


def keyed_trial(key):
    """The trial of ``key = (d, H, noise, eps, s)``, with warnings turned into records (a warning
    would be a bug: surfaced, never silent). Run by :func:`attnlearn.sweeps.run_trials`."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return trial(*key)


def silent(r):
    """A returned model outside its own bound (or with the wrong head count: error None = inf)."""
    return r["o"] == "ok" and (r["e"] is None or r["e"] > r["b"])


def ratio_of(r):
    return float("inf") if r["e"] is None else r["e"] / r["b"]


def summarise(recs):
    ok = [r for r in recs if r["o"] == "ok"]
    good = [r for r in ok if r["e"] is not None]
    ratio = [ratio_of(r) for r in good]
    return {
        "trials": len(recs),
        "returned": len(ok),
        "raised": len(recs) - len(ok),
        "silent": sum(silent(r) for r in ok),
        "wrong_heads": len(ok) - len(good),
        "median_error": _g(float(np.median([r["e"] for r in good]))) if good else None,
        "median_ratio": _g(float(np.median(ratio))) if ratio else None,
        # over the returned models with the right head count (the others: "wrong_heads")
        "max_ratio": _g(max(ratio_of(r) for r in good)) if good else None,
    }


def slope(cells):
    """Least-squares slope of log10(median error) against log10(eps) over the cells where at least
    half the trials returned (below the threshold). The median is over one fixed population, the
    trials that returned in all of those cells: near the threshold the ill-conditioned trials raise,
    and a median over the survivors alone would bend the curve down. None with fewer than 2 cells
    or fewer than 10 such trials."""
    use = [c for c in cells if c["summary"]["returned"] >= c["summary"]["trials"] / 2]
    if len(use) < 2:
        return None
    keep = [s for s in range(len(use[0]["records"]))
            if all(c["records"][s]["o"] == "ok" and c["records"][s]["e"] is not None for c in use)]
    if len(keep) < 10:
        return None
    x = np.log10([c["eps"] for c in use])
    y = np.log10([np.median([c["records"][s]["e"] for s in keep]) for c in use])
    return float(np.polyfit(x, y, 1)[0])


def threshold(cells):
    """Breakdown threshold: the smallest eps of the grid where fewer than half the trials return."""
    for c in cells:
        if c["summary"]["returned"] < c["summary"]["trials"] / 2:
            return c["eps"]
    return None


def sweep(trials, hs=HS, ds=DS, noises=NOISES, eps_grid=EPS, workers=2, scheduler=None, verbose=True, path=None):
    """The sweep: every cell's trials through :func:`attnlearn.sweeps.run_trials` (local
    processes, or a Dask cluster at ``scheduler``); the records depend on the seeds only, not
    on ``workers`` or the engine."""
    seeds = list(range(trials))
    out = {"trials": trials, "eps_grid": list(eps_grid), "settings": []}
    for H in hs:
        for d in ds:
            for noise in noises:
                grid = [None] if noise == "float32" else list(eps_grid)
                cells = []
                for eps in grid:
                    label = f"H={H} d={d} {noise} eps={'f32' if eps is None else f'{eps:.0e}'}"
                    recs = run_trials(keyed_trial, [(d, H, noise, eps, s) for s in seeds], workers=workers,
                                      scheduler=scheduler, desc=label)
                    summ = summarise(recs)
                    cells.append({"eps": eps, "summary": summ, "records": recs})
                    if summ["returned"] == 0:
                        break  # breakdown: larger eps raise too
                st = {"d": d, "H": H, "noise": noise, "robust": robust_mode(H), "cells": cells}
                if noise != "float32":
                    st["slope"] = _g(slope(cells))
                    st["slope_points"] = sum(c["summary"]["returned"] >= c["summary"]["trials"] / 2 for c in cells)
                    st["threshold"] = threshold(cells)
                out["settings"].append(st)
                if verbose:
                    report(st)
                if path:  # partial results survive an interrupted run
                    _write(out, path)
    allok = [r for st in out["settings"] for c in st["cells"] for r in c["records"] if r["o"] == "ok"]
    out["total"] = {
        "trials": sum(len(c["records"]) for st in out["settings"] for c in st["cells"]),
        "returned": len(allok),
        "silent": sum(silent(r) for r in allok),
        "wrong_heads": sum(r["e"] is None for r in allok),
        "max_ratio": _g(max((ratio_of(r) for r in allok if r["e"] is not None), default=float("nan"))),
    }
    return out


def _cells(out):
    return {(st["H"], st["d"], st["noise"], c["eps"]): c["records"] for st in out["settings"]
            for c in st["cells"]}


def _conclusions(out):
    """What chapter 5 concludes from a sweep: silent failures, slope verdicts, thresholds."""
    ks = [(st["H"], st["d"], st["noise"]) for st in out["settings"] if st["noise"] != "float32"]
    sts = [st for st in out["settings"] if st["noise"] != "float32"]
    return {"silent failures": out["total"]["silent"],
            "slope within 0.1 of 1": {k: st["slope"] is not None and abs(st["slope"] - 1) <= 0.1
                                      for k, st in zip(ks, sts) if st["slope_points"] >= 3},
            "thresholds": {k: st["threshold"] for k, st in zip(ks, sts)}}


def compare(old, new):
    """Compare two sweeps (dicts as written by --save/--out) record by record with
    :func:`same_record` over the cells and seeds both hold; prints a short report and returns
    ``(outcome_flips, beyond_tolerance, conclusions_agree)``."""
    a, b = _cells(old), _cells(new)
    common = [k for k in a if k in b]
    flips, beyond, n, used = [], [], 0, [0.0, 0.0]
    for k in common:
        for s, (ro, rn) in enumerate(zip(a[k], b[k])):
            n += 1
            if ro["o"] != rn["o"]:
                flips.append((k, s, ro["o"], rn["o"]))
            elif not same_record(rn, ro):
                beyond.append((k, s))
            elif ro["o"] == "ok" and ro["e"] is not None:
                tol = record_tolerance(rn, ro)
                used = [max(used[0], abs(rn["e"] - ro["e"]) / tol[0]),
                        max(used[1], abs(rn["b"] - ro["b"]) / tol[1])]
    print(f"{n} records compared ({len(common)} cells; only in one file: {len(a) + len(b) - 2 * len(common)})")
    print(f"outcome differs: {len(flips)}")
    for (H, d, noise, eps), s, o1, o2 in flips:
        eps = "2^-24|F|" if eps is None else f"{eps:.0e}"
        print(f"  H={H} d={d} {noise:<8} eps={eps:>8} seed {s:>3}: {o1} -> {o2}")
    print(f"same outcome, e or b beyond the tolerance of same_record: {len(beyond)} (largest change "
          f"within it: {used[0]:.2g} of tol_e, {used[1]:.2g} of tol_b)")
    for (H, d, noise, eps), s in beyond[:10]:
        print(f"  H={H} d={d} {noise} eps={eps} seed {s}: {a[H, d, noise, eps][s]} -> {b[H, d, noise, eps][s]}")
    agree = True
    if old["trials"] != new["trials"]:
        print(f"conclusions not compared: {old['trials']} against {new['trials']} trials per cell")
    else:
        c1, c2 = _conclusions(old), _conclusions(new)
        for k in c1:
            same = c1[k] == c2[k]
            agree &= same
            diff = "" if same or not isinstance(c1[k], dict) else \
                ": " + ", ".join(f"{key}: {c1[k].get(key)} -> {c2[k].get(key)}"
                                 for key in sorted(set(c1[k]) | set(c2[k]))
                                 if c1[k].get(key) != c2[k].get(key))
            print(f"conclusions, {k}: {'agree' if same else 'DIFFER'}{diff}")
    return flips, beyond, agree


def _write(out, path):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(out, fh, separators=(",", ":"), allow_nan=False)
        fh.write("\n")
    os.replace(tmp, path)  # readers never see a half-written file


def report(st):
    mode = "robust" if st["robust"] else "paper"
    head = f"H={st['H']} d={st['d']} {st['noise']:<8} ({mode})"
    for c in st["cells"]:
        s = c["summary"]
        eps = "2^-24|F|" if c["eps"] is None else f"{c['eps']:.0e}"
        med = "-" if s["median_ratio"] is None else f"{s['median_ratio']:.1e}"
        mx = "-" if s["max_ratio"] is None else f"{s['max_ratio']:.1e}"
        print(f"{head}  eps={eps:>9}  returned {s['returned']:>3}/{s['trials']:<3}  err/(K eps): median {med:>8}"
              f"  max {mx:>8}  silent {s['silent']} (wrong head count {s['wrong_heads']})", flush=True)
    if st["noise"] != "float32":
        sl = "n/a" if st["slope"] is None else f"{st['slope']:.2f}"
        th = "none on the grid" if st["threshold"] is None else f"{st['threshold']:.0e}"
        print(f"{head}  slope {sl}, threshold {th}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--save", action="store_true", help=f"full sweep (200 trials) and write {PATH}")
    ap.add_argument("--trials", type=int, default=None, help="trials per cell (default 20; 200 with --save)")
    ap.add_argument("--workers", "--processes", type=int, default=2, dest="workers",
                    help="local worker processes (joblib/loky; the results do not depend on it)")
    ap.add_argument("--scheduler", metavar="ADDRESS",
                    help="run the trials on a Dask cluster (e.g. tcp://host:8786) instead of local processes")
    ap.add_argument("--out", metavar="PATH", help="full sweep (200 trials) written to PATH (not the tracked file)")
    ap.add_argument("--compare", nargs=2, metavar=("OLD", "NEW"),
                    help="compare two saved sweeps (exit status 1 if a conclusion or a returned error differs)")
    args = ap.parse_args()
    if args.compare:
        old, new = (json.loads(open(p).read()) for p in args.compare)
        flips, beyond, agree = compare(old, new)
        # outcome flips are listed, not failed (20 of 29,400 between OpenBLAS's Haswell and
        # SkylakeX kernels: 3 return/raise, all at eps = 1e-14 where the rounding sets the
        # checked statistic; 15 swap two RecoveryErrors; 2 a RuntimeWarning); changed
        # conclusions or errors beyond the tolerance fail
        raise SystemExit(0 if agree and not beyond else 1)
    dest = PATH if args.save else args.out
    trials = args.trials or (200 if dest else 20)
    t0 = time.perf_counter()
    out = sweep(trials, workers=args.workers, scheduler=args.scheduler, path=dest)
    tot = out["total"]
    print(f"\ntotal: {tot['trials']} trials, {tot['returned']} returned, silent failures {tot['silent']} "
          f"(of which wrong head count {tot['wrong_heads']}), max err/(K eps) over the others {tot['max_ratio']}")
    print(f"wall time: {time.perf_counter() - t0:.0f} s")
    if dest:
        _write(out, dest)
        print(f"wrote {dest}")


if __name__ == "__main__":
    main()
