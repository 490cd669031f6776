"""Benchmark: the learner's frontier on PyTorch layers of real size: robust mode and its fallback (the
baseline), or with ``--rank`` the long design with the head dimension as rank bound (chapter 9). A
script, not a test.

    python benchmarks/scale.py --d 64 --heads 4 --models 20 --rank --json benchmarks/results/scale_rank.json

    python benchmarks/scale.py --d 16 --heads 2 4 --models 5 --json benchmarks/results/scale_baseline.json
    python benchmarks/scale.py --d 32 --heads 2 4 --models 5 --timeout 1800 --json PATH
    python benchmarks/scale.py --d 64 --heads 2 --models 2 --timeout 1800 --json PATH

Every layer is ``torch.nn.MultiheadAttention(d, H, bias=True, batch_first=True,
dtype=torch.float64).eval()`` with PyTorch's default initialisation after
``torch.manual_seed(1000 * H + 100_000 * d + i)`` for layer ``i`` (biases PyTorch's default:
zero), read out by :math:`r` = ``np.random.default_rng(i).normal(size=d)``; learned by
``attnlearn.learn(TorchOracle(m, readout=r), d, heads=H, seed=i, bias=True, robust=True,
max_length=4096)`` (robust mode: the paper's design, falling back to ``design="long"`` at 4096
tokens when it raises or its estimate exceeds 1e-6) and scored with
:func:`attnlearn.learner.paper.bias.bias_error` against ``from_torch(m, readout=r)``.

Each layer runs in its own process (``multiprocessing``, spawn), killed after ``--timeout``
seconds of wall time: a timed-out layer is recorded as outcome ``"timeout"`` with its elapsed
wall time, its CPU time (read from ``/proc``, the child's imports included) and the queries,
oracle time and longest query up to its last answered batch; if it had asked queries longer than
129 tokens (the paper's design asks at most :math:`2H+1`), ``fallback`` says after how many
queries the long design began (the paper's reason is not known to a killed run). ``--json PATH``
is rewritten (atomically) after every layer, keeping the records already in it: a killed run
keeps what it measured, and several runs append to one file.

A record: ``d``, ``H``, ``p`` (= d // H), ``seed``, ``outcome`` ("returned", "timeout", or the
exception's class name), ``message`` (a raise's text), ``error`` (``bias_error``), ``error_estimate``,
``queries`` (``rec.queries["total"]``, or the oracle's count on a raise or a timeout),
``queries_by_kind`` (``rec.queries``), ``fallback`` (``rec.diagnostics.fallback``: why robust mode
fell back to the long design, None if it did not), ``longest`` (``rec.max_length``), ``cpu_s``
(``time.process_time`` around ``learn``), ``wall_s``, ``oracle_cpu_s`` (``process_time`` inside
``TorchOracle.batch``) and ``learner_cpu_s`` (``cpu_s - oracle_cpu_s``), ``timeout_s``,
``commit`` (of the package measured), ``date``, ``torch``.

Run with ``OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONHASHSEED=0
ATTNLEARN_PROGRESS=0`` (one thread: ``torch.set_num_threads(1)`` here), one measurement process
at a time on a shared 2-core machine, under ``nice -n 10``.

Measured (2026-12-05/06, code b0b4af5, torch 2.13.0+cpu, float64, one thread under ``nice -n
10`` on a 2-core machine shared with other jobs (load average 3 to 7: wall times are inflated,
CPU times are the figures to compare); ``benchmarks/results/scale_baseline.json``, every command
with ``--json benchmarks/results/scale_baseline.json``):

    python benchmarks/scale.py --d 16 --heads 2 4 --models 5 --timeout 1800
    python benchmarks/scale.py --d 32 --heads 2 --models 5 --timeout 1800
    python benchmarks/scale.py --d 32 --heads 4 --models 5 --timeout 1800   # stopped after 4 layers (time)
    python benchmarks/scale.py --d 64 --heads 2 --models 1 --timeout 1800
    python benchmarks/scale.py --d 64 --heads 4 --models 1 --timeout 1140   # the time left in the budget

| d | H | layers | to 1e-6 | median error | median estimate/error | median queries | median CPU s | learner's share of CPU | fell back |
|---|---|---|---|---|---|---|---|---|---|
| 16 | 2 | 5 | 5/5 | 4.5e-13 | 3.0 | 3341 | 1 | 98% | 0 |
| 16 | 4 | 5 | 5/5 | 5.0e-11 | 1.4 | 52162 | 60 | 36% | 5 |
| 32 | 2 | 5 | 5/5 | 4.4e-12 | 2.8 | 12697 | 18 | 100% | 0 |
| 32 | 4 | 4 | 4/4 | 4.2e-11 | 2.8 | 182898 | 399 | 28% | 4 |
| 64 | 2 | 1 | 0/1 (timeout) | - | - | 240068 so far | 1171 at the kill | 10% | 1 |
| 64 | 4 | 1 | 0/1 (timeout) | - | - | 160802 so far | 1057 at the kill | 17% | 1 |

Every H = 4 layer fell back after a raise of the paper's design in its first block's base
configurations: a ``PoleError`` at ``base(1,1)`` (a pole :math:`\rho<0` in the very first
configuration, 9 queries abandoned; d = 16 seeds 1, 3; d = 32 seeds 1, 2) or an
``IllConditionedError`` ("no well-posed interpolation after 4 rounds of redrawing", ``base(4,2)``,
``base(1,9)``, ``base(1,3)`` at d = 16, ``base(1,8)``, ``base(1,3)`` at d = 32; 13-21 thousand
queries abandoned at d = 16, 82 thousand at d = 32); the long design then returned every one (largest
estimate/error 6.0, smallest 0.88). H = 2 never fell back at d = 16 and 32 (robust mode's redraws:
about 1100 and 4000-5000 queries). The d = 64, H = 2 layer (seed 0) left the paper's design after
48762 queries (its reason is not known to a killed run) and was killed at 1800 s wall with 240068
queries asked (191306 of the long design's 397913); the d = 64, H = 4 layer (seed 0) left it after 74
queries (reason unknown) and was killed at 1140 s wall with 160802 queries (160728 of the long
design's 542817): at d = 64 the fallback does not finish in these times. Where the CPU goes: the
paper's design is nearly all learner (d = 32, H = 2: median 18 s learner, 0.05 s oracle); the
long design mostly oracle (d = 32, H = 4: median 288 s oracle, 111 s learner; 4096-token float64
queries). Recovered to 1e-4: the same counts as to 1e-6 (every return is below 1e-9).


With ``--rank`` every layer is learned by ``attnlearn.learn(TorchOracle(m, readout=r), d, heads=H,
seed=i, bias=True, design="long", max_length=--length (512), rank=d // H)``; records add ``ranks``
(the ranks certified), ``design`` and ``length``. Measured (2026-12-07; d = 16 and 32 on code 2aace8d,
d = 64 on 72b0596, which differs from 2aace8d only where a group fails after two redraws, and
raises there: every d = 64 layer returned), ``benchmarks/results/scale_rank.json``, one thread per process under
``nice``, on a 2-core machine shared with other runs (the CPU times are the figures to compare):

    python benchmarks/scale.py --d 16 --heads 4 --models 20 --rank
    python benchmarks/scale.py --d 32 --heads 4 --models 10 --rank
    python benchmarks/scale.py --d 64 --heads 4 --models 10 --first 0 --rank    # and --first 10

| d | H | p | layers | returned | to 1e-6 | median error | worst error | median est/err | largest err/est | median queries | median CPU s | oracle's share |
|---|---|---|---|---|---|---|---|---|---|---|---|---|
| 16 | 4 | 4 | 20 | 20 | 20/20 | 7.8e-12 | 1.9e-10 | 10.2 | 0.39 | 24,889 | 6 | 37% |
| 32 | 4 | 8 | 10 | 10 | 10/10 | 3.0e-11 | 2.0e-10 | 9.6 | 0.25 | 76,625 | 27 | 54% |
| 64 | 4 | 16 | 20 | 20 | 20/20 | 1.4e-10 | 1.4e-08 | 9.9 | 0.34 | 262,252 | 198 | 73% |

Every rank was certified at p. At d = 64 the redraws (groups drawn again, and an anchor's later
candidates) took 13,380 to 21,900 queries of a layer's 260,677 to 269,197, and the CPU time per
layer ranged over 152 to 244 s. On code ba8988a (2026-12-06) the same cells gave 19,609, 67,550 and
241,222 queries at medians of 11, 53 and 308 s, the learner's share of the time larger (d = 64: 46 %,
now 27 %).

Eight heads, in the same file (code 2aace8d):

    python benchmarks/scale.py --d 16 --heads 8 --models 20 --rank
    python benchmarks/scale.py --d 64 --heads 8 --models 1 --rank --length 128
    python benchmarks/scale.py --d 128 --heads 8 --models 5 --first 0 --rank --length 128 --timeout 7200  # and --first 5

d = 16 (p = 2, 512 tokens): 20/20 returned, all to 1e-6 (median 1.1e-8, worst 3.7e-7), largest
error/estimate 0.28, 27,109 to 31,641 queries, median 25 s of CPU (learner 23). d = 64 (p = 8, 128
tokens): 1/1, error 2.2e-9 (estimate 1.2e-8), 215,497 queries, 114 s of CPU (learner 91, oracle
23). d = 128 (p = 16, 128 tokens; seed 4 run on its own, ``--models 1 --first 4``): 10/10
returned, all to 1e-6, errors 4.2e-10 to 6.7e-8 (median 7.2e-9), the largest error/estimate 0.19,
729,121 to 757,481 queries, 628 to 755 s of CPU (median 692 s; the learner 66 to 70 % of it).

At 128 tokens the learner's own fits cost more than the oracle's answers (at 512 tokens and d = 128
the oracle alone would take about 35 minutes a layer). Nearly all of the learner's time is
``fit_config``'s Levenberg-Marquardt fits of the anchor's candidates and of the nudged
configurations (cProfile on code 7eb6b6f, d = 32, H = 8, seed 0: 47 s of learner CPU, 18 s of it
the anchor's candidates, fitted with no known heights; a nudged configuration starts from its
anchor's positions moved under the anchor's heights, 4.6 starts per fit).

d = 256, H = 4 (p = 64, 128 tokens), code bc88993, ``--d 256 --heads 4 --models 1 --rank --length
128 --timeout 2700 --json benchmarks/results/scale_rank_d256.json`` (a file of its own: chapter 9
loads returned rows only): killed after 2700 s of wall time, 1,840,865 queries asked of the
design's 3,302,913 (``long_cost``), 2471 s of CPU, of it the oracle 2108 s and the learner 363 s:
at this width the oracle's answers are 85 % of the time, and the whole layer would take about
75 CPU minutes.

"""

import argparse
import datetime
import json
import multiprocessing as mp
import os
import subprocess
import time
import warnings

import numpy as np


def layer(d, H, i):
    """The layer ``i`` of a cell and its read-out (the ground truth's inputs)."""
    import torch

    torch.manual_seed(1000 * H + 100_000 * d + i)
    m = torch.nn.MultiheadAttention(d, H, bias=True, batch_first=True, dtype=torch.float64).eval()
    r = np.random.default_rng(i).normal(size=d)
    return m, r


def _child(d, H, i, progress, conn, how=None):
    """Learn layer ``i`` in this (spawned) process; send its record through ``conn``.
    ``progress`` (shared doubles): queries and oracle CPU seconds after every answered batch."""
    import torch

    from attnlearn import learn
    from attnlearn.learner.paper.bias import bias_error
    from attnlearn.torch import TorchOracle, from_torch

    torch.set_num_threads(1)

    class TimedOracle(TorchOracle):
        """TorchOracle whose ``batch`` accumulates the process time spent inside it."""
        oracle_cpu = 0.0

        def batch(self, Xs):
            t = time.process_time()
            try:
                return super().batch(Xs)
            finally:
                self.oracle_cpu += time.process_time() - t
                progress[0], progress[1] = float(self.queries), self.oracle_cpu
                if len(progress) > 3:  # the longest query so far; the queries before the first long one
                    N = np.shape(Xs)[1] if np.ndim(Xs) == 3 else 0
                    if N > 129 and progress[3] <= 129:
                        progress[2] = float(self.queries - len(Xs))
                    progress[3] = max(progress[3], float(N))

    m, r = layer(d, H, i)
    oracle = TimedOracle(m, readout=r)
    out = {}
    w0, c0 = time.perf_counter(), time.process_time()
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            if how is None:  # the baseline: robust mode and its fallback
                rec = learn(oracle, d, heads=H, seed=i, bias=True, robust=True, max_length=4096)
            else:  # the long design with the head dimension as rank bound
                rec = learn(oracle, d, heads=H, seed=i, bias=True, design="long", max_length=how["length"],
                            rank=how["rank"])
    except Exception as exc:  # noqa: BLE001 - every failure is a measurement
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        out.update(outcome=type(exc).__name__, message=str(exc), error=None, error_estimate=None,
                   queries=int(oracle.queries), queries_by_kind=None, fallback=None, longest=None, ranks=None)
    else:
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        err = bias_error(rec.model, from_torch(m, readout=r))
        out.update(outcome="returned", message=None, error=float(err), error_estimate=float(rec.error_estimate),
                   queries=int(rec.queries["total"]), queries_by_kind={k: int(v) for k, v in rec.queries.items()},
                   fallback=rec.diagnostics.fallback, longest=int(rec.max_length), ranks=rec.diagnostics.ranks)
    out.update(cpu_s=cpu, wall_s=wall, oracle_cpu_s=oracle.oracle_cpu, learner_cpu_s=cpu - oracle.oracle_cpu)
    conn.send(out)
    conn.close()


def _proc_cpu(pid):
    """CPU seconds (user + system) of a live process, from /proc (None where unavailable)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def run(d, H, i, *, timeout, how=None):
    """One layer in a spawned process, killed after ``timeout`` seconds of wall time (``how``: None
    for the baseline, else the long design's ``length`` and ``rank``)."""
    ctx = mp.get_context("spawn")
    progress = ctx.Array("d", 4, lock=False)
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(d, H, i, progress, child, how), daemon=True)
    w0 = time.perf_counter()
    proc.start()
    child.close()
    got = parent.poll(timeout)
    if got:
        try:
            out = parent.recv()
        except EOFError:
            got = False
    if got:
        proc.join()
        return out
    wall, cpu = time.perf_counter() - w0, _proc_cpu(proc.pid)
    alive = proc.is_alive()
    proc.kill()
    proc.join()
    q, ocpu = int(progress[0]), float(progress[1])
    longest = int(progress[3]) or None
    fell = None if longest is None or longest <= 129 else f"(long queries after {int(progress[2])} queries)"
    if alive:
        return dict(outcome="timeout", message=f"killed after {wall:.0f} s of wall time", error=None,
                    error_estimate=None, queries=q, queries_by_kind=None, fallback=fell, longest=longest, ranks=None,
                    cpu_s=cpu, wall_s=wall, oracle_cpu_s=ocpu, learner_cpu_s=None if cpu is None else cpu - ocpu)
    return dict(outcome="died", message=f"exit code {proc.exitcode}", error=None, error_estimate=None, queries=q,
                queries_by_kind=None, fallback=None, longest=None, ranks=None, cpu_s=None, wall_s=wall, oracle_cpu_s=ocpu,
                learner_cpu_s=None)


def _commit():
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        return subprocess.run(["git", "-C", here, "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def _save(path, record):
    records = []
    if os.path.exists(path):
        with open(path) as fh:
            records = json.load(fh)
    records.append(record)
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(records, fh, indent=1)
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--d", type=int, default=16)
    ap.add_argument("--heads", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--models", type=int, default=5)
    ap.add_argument("--first", type=int, default=0, help="seed of the first layer (default 0)")
    ap.add_argument("--json", default=None, help="append every layer's record to this JSON list")
    ap.add_argument("--timeout", type=float, default=1800.0, help="wall seconds per layer (default 1800)")
    ap.add_argument("--rank", action="store_true",
                    help='design="long" with rank = d // H (the head dimension) instead of robust mode')
    ap.add_argument("--length", type=int, default=512, help="with --rank: the long queries' length (default 512)")
    args = ap.parse_args()
    import torch

    import attnlearn

    meta = dict(commit=_commit(), date=datetime.date.today().isoformat(), torch=torch.__version__,
                timeout_s=args.timeout, design="long, rank" if args.rank else "robust",
                length=args.length if args.rank else None)
    print(f"attnlearn from {attnlearn.__file__}, commit {meta['commit']}, torch {meta['torch']}", flush=True)
    print("| d | H | seed | outcome | error | estimate | queries | fallback | longest | CPU s | oracle s | wall s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for H in args.heads:
        for i in range(args.first, args.first + args.models):
            how = dict(length=args.length, rank=args.d // H) if args.rank else None
            out = run(args.d, H, i, timeout=args.timeout, how=how)
            rec = dict(d=args.d, H=H, p=args.d // H, seed=i, **out, **meta)
            f = lambda x, s=".1e": "-" if x is None else format(x, s)  # noqa: E731
            print(f"| {args.d} | {H} | {i} | {rec['outcome']} | {f(rec['error'])} | {f(rec['error_estimate'])} "
                  f"| {rec['queries']} | {'yes' if rec['fallback'] else 'no'} | {rec['longest']} "
                  f"| {f(rec['cpu_s'], '.0f')} | {f(rec['oracle_cpu_s'], '.0f')} | {f(rec['wall_s'], '.0f')} |",
                  flush=True)
            if rec["message"]:
                print(f"    {rec['outcome']}: {rec['message'][:300]}", flush=True)
            if args.json:
                _save(args.json, rec)


if __name__ == "__main__":
    main()
