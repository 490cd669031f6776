r"""Sweeps of independent seeded trials: local cores through joblib/loky, or a Dask cluster.

A sweep is a list of *keys* (tuples of plain numbers and strings) and one function
``trial(key)`` that draws everything it uses from its key: the model's seed, the learner's
seed, the noise seed. Trials share nothing and their order does not matter, so a sweep runs
on any number of workers and gives the same records, in the order of the keys, whatever the
number of workers or the engine (a test compares one worker with two).

Engines:

* local (the default): :class:`joblib.Parallel` with the ``loky`` backend on ``workers``
  processes (``workers=1`` runs in this process, with no pool);
* a Dask cluster, when a scheduler address is given (``scheduler="tcp://host:8786"``):
  :meth:`distributed.Client.map` on that cluster. Dask is imported only then, so it is an
  optional dependency (``pip install attnlearn[cluster]``).

The function must be importable by the workers (a module-level function; loky and Dask
pickle ``__main__`` functions by value with cloudpickle). A worker process inherits this
process's environment: a benchmark that pins BLAS to one thread (``OPENBLAS_NUM_THREADS=1``)
before importing numpy pins its workers too.

Used in: chapter 5 (``benchmarks/noise.py``, the noise sweep, and
``benchmarks/noise_design.py``, the long-query design's acceptance rows).
"""

import os

from .progress import progress

__all__ = ["run_trials", "default_workers"]


def default_workers():
    """Local worker processes when none are given: ``ATTNLEARN_WORKERS`` if set, else 2 (the
    CI machine's cores; a larger machine is used by passing ``workers=``)."""
    value = os.environ.get("ATTNLEARN_WORKERS", "2")
    try:
        n = int(value)
    except ValueError:
        raise ValueError(f"ATTNLEARN_WORKERS must be a positive integer, got {value!r}") from None
    if n < 1:
        raise ValueError(f"ATTNLEARN_WORKERS must be a positive integer, got {value!r}")
    return n


def _check(trial, keys, workers, scheduler):
    if not callable(trial):
        raise TypeError(f"trial must be callable, got {type(trial).__name__}")
    try:
        keys = list(keys)
    except TypeError:
        raise TypeError(f"keys must be an iterable of trial keys, got {type(keys).__name__}") from None
    if workers is None:
        workers = default_workers()
    if isinstance(workers, bool) or not isinstance(workers, int):
        raise TypeError(f"workers must be a positive integer, got {type(workers).__name__} {workers!r}")
    if workers < 1:
        raise ValueError(f"workers must be a positive integer, got {workers}")
    if scheduler is not None and not isinstance(scheduler, str):
        raise TypeError(f"scheduler must be an address string such as 'tcp://host:8786', got "
                        f"{type(scheduler).__name__}")
    return keys, workers


def _local(trial, keys, workers, desc):
    if workers == 1 or len(keys) <= 1:
        return [trial(k) for k in progress(keys, desc=desc, total=len(keys))]
    from joblib import Parallel, delayed

    run = Parallel(n_jobs=workers, backend="loky", return_as="generator")
    return list(progress(run(delayed(trial)(k) for k in keys), desc=desc, total=len(keys)))


def _dask(trial, keys, scheduler, desc):
    try:
        from dask.distributed import Client, as_completed
    except ImportError:  # pragma: no cover - depends on the installation
        raise ImportError("scheduler= needs Dask's distributed scheduler: pip install 'attnlearn[cluster]'") from None
    with Client(scheduler) as client:
        futures = client.map(trial, keys, pure=False)
        index = {f.key: i for i, f in enumerate(futures)}
        out = [None] * len(keys)
        for fut in progress(as_completed(futures), desc=desc, total=len(keys)):
            out[index[fut.key]] = fut.result()  # re-raises a trial's exception here
        return out


def run_trials(trial, keys, *, workers=None, scheduler=None, desc=None):
    """Run ``trial(key)`` for every key; return the results in the order of ``keys``.

    Parameters
    ----------
    trial : callable
        A module-level function of one key, seeded by its key alone (it draws no randomness
        from anywhere else), returning a picklable record.
    keys : iterable
        The trials' keys (picklable; tuples of numbers and strings in the benchmarks).
    workers : int, optional, keyword-only
        Local worker processes (joblib's loky backend); 1 runs the trials in this process.
        Default :func:`default_workers`. Ignored with ``scheduler``.
    scheduler : str, optional, keyword-only
        Address of a Dask scheduler (``"tcp://host:8786"``): the trials run on that cluster
        (:mod:`dask.distributed`, imported only here).
    desc : str, optional, keyword-only
        Label of the progress bar (:func:`attnlearn.progress.progress`: tqdm on standard
        error, off with ``ATTNLEARN_PROGRESS=0``).

    Returns
    -------
    list
        ``[trial(k) for k in keys]``, whatever the engine and the number of workers.

    Raises
    ------
    TypeError
        ``trial`` not callable, ``keys`` not iterable, ``workers`` not an integer,
        ``scheduler`` not a string.
    ValueError
        ``workers < 1``.

    Notes
    -----
    A trial's exception propagates (the sweep stops): a benchmark that records failures
    catches them inside its trial. Same records for any number of workers holds because
    each record is a function of its key: no worker state, no shared generator. On one
    machine the records are bit-identical; on another CPU the BLAS kernel may change the
    last bits of float64 results (``benchmarks/noise.py`` documents the tolerance).

    References
    ----------
    .. [1] joblib, https://joblib.readthedocs.io (``Parallel``, loky backend).
    .. [2] Dask.distributed, https://distributed.dask.org (``Client.map``).
    """
    keys, workers = _check(trial, keys, workers, scheduler)
    if scheduler is not None:
        return _dask(trial, keys, scheduler, desc)
    return _local(trial, keys, workers, desc)
