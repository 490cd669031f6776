"""attnlearn.sweeps: seeded trials give the same records on any number of workers and engines."""

import numpy as np
import pytest

from attnlearn import Oracle, RecoveryError, UniformNoise, canonical, learn, param_error
from attnlearn.model import random_model
from attnlearn.sweeps import default_workers, run_trials


def noisy_trial(key):
    """A small learning run seeded by its key alone (model, learner and noise seeds)."""
    H, d, s = key
    model = random_model(H, d, seed=1_000 * d + s)
    oracle = Oracle(model, noise=UniformNoise(1e-10), seed=s)
    try:
        rec = learn(oracle, d, heads=H, seed=s, output_error=1e-10)
    except RecoveryError as exc:
        return {"key": key, "o": type(exc).__name__, "msg": str(exc)}
    return {"key": key, "o": "ok", "e": param_error(rec.model, canonical(model)), "b": rec.error_estimate,
            "total": rec.queries["total"], "draw": float(np.random.default_rng(s).normal())}


def failing_trial(key):
    if key == 2:
        raise ZeroDivisionError("trial 2 fails")
    return key


KEYS = [(1, 2, s) for s in range(4)] + [(2, 2, s) for s in range(3)]


def test_one_worker_and_two_give_identical_records():
    one = run_trials(noisy_trial, KEYS, workers=1)
    two = run_trials(noisy_trial, KEYS, workers=2)
    assert one == two  # bit for bit, in the order of the keys
    assert [r["key"] for r in two] == KEYS
    ok = [r for r in one if r["o"] == "ok"]
    assert len(ok) >= 4 and all(r["e"] <= r["b"] for r in ok)


def test_dask_cluster_gives_the_same_records():
    distributed = pytest.importorskip("dask.distributed")
    keys = KEYS[:3]
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                  dashboard_address=None) as cluster:
        on_cluster = run_trials(noisy_trial, keys, scheduler=cluster.scheduler_address)
    assert on_cluster == run_trials(noisy_trial, keys, workers=1)


def test_a_trials_exception_propagates():
    with pytest.raises(ZeroDivisionError, match="trial 2 fails"):
        run_trials(failing_trial, range(4), workers=2)
    with pytest.raises(ZeroDivisionError, match="trial 2 fails"):
        run_trials(failing_trial, range(4), workers=1)


def test_progress_bar_when_asked(monkeypatch, capsys):
    monkeypatch.setenv("ATTNLEARN_PROGRESS", "1")
    assert run_trials(failing_trial, [0, 1], workers=1, desc="demo") == [0, 1]
    assert "demo" in capsys.readouterr().err
    monkeypatch.setenv("ATTNLEARN_PROGRESS", "0")
    assert run_trials(failing_trial, [0, 1], workers=1, desc="demo") == [0, 1]
    assert capsys.readouterr().err == ""


def test_bad_arguments():
    with pytest.raises(TypeError, match="trial must be callable"):
        run_trials(3, [1])
    with pytest.raises(TypeError, match="keys must be an iterable"):
        run_trials(failing_trial, 5)
    with pytest.raises(TypeError, match="workers must be a positive integer"):
        run_trials(failing_trial, [1], workers=2.0)
    with pytest.raises(ValueError, match="workers must be a positive integer"):
        run_trials(failing_trial, [1], workers=0)
    with pytest.raises(TypeError, match="scheduler must be an address string"):
        run_trials(failing_trial, [1], scheduler=8786)


def test_default_workers(monkeypatch):
    monkeypatch.delenv("ATTNLEARN_WORKERS", raising=False)
    assert default_workers() == 2
    monkeypatch.setenv("ATTNLEARN_WORKERS", "3")
    assert default_workers() == 3
    for bad in ("0", "two"):
        monkeypatch.setenv("ATTNLEARN_WORKERS", bad)
        with pytest.raises(ValueError, match="ATTNLEARN_WORKERS must be a positive integer"):
            default_workers()
