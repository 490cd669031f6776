r"""The oracle protocol, checked at the door: what a learner may assume of any oracle object.

An oracle is any object with

* ``d``: the token width, a positive integer;
* ``exact``: ``True`` for exact mode (answers are ``mpmath.mpf`` at ``dps`` digits), else ``False``
  (answers are float64);
* ``dps``: the working precision in decimal digits, a positive integer when ``exact`` (ignored
  otherwise);
* ``batch(Xs)``: ``Xs`` of shape ``(n, N, d)`` in, ``n`` real finite answers out.

A *vector oracle* (an extension, chapter 7) also has ``outputs``, a positive integer :math:`k`,
and returns answers of shape ``(n, k)``: e.g. :class:`attnlearn.torch.TorchOracle` without a
read-out. ``outputs`` absent or None means one number per query. A learner that needs scalar
answers refuses a vector oracle at the door (:class:`Access` with ``vector=False``).

:class:`attnlearn.Oracle` is one; :class:`attnlearn.torch.TorchOracle` another; a user's own
model wrapped in a few lines is a third. Every learner (:func:`attnlearn.learn`,
:func:`attnlearn.learn_single_head`, :func:`attnlearn.learn_transformer`) talks to its oracle only
through :class:`Access`, which checks the object once (:func:`check_oracle`) and every answer as
it arrives, and counts the queries itself: a learner never reads ``oracle.queries``.

Used in: chapter 1 (the protocol, introduced with the first oracle) and every learner.
"""

import numbers
from collections import Counter

import mpmath
import numpy as np

__all__ = ["check_oracle", "oracle_outputs", "Access", "OracleProtocolError", "OracleAnswerError", "OracleRefusedError"]


class OracleProtocolError(TypeError):
    """The object given as an oracle does not follow the protocol (a missing or malformed
    attribute). What it *returns* is checked by :class:`OracleAnswerError`."""


class OracleAnswerError(ValueError):
    """The oracle returned answers that the protocol does not allow (count, shape, type, NaN/inf)."""


class OracleRefusedError(RuntimeError):
    """The oracle raised an exception of its own for a batch of queries, for example a served model
    whose context is shorter than the queries. The message names the batch and its length;
    ``__cause__`` is the oracle's exception.

    Attributes
    ----------
    length : int
        The length :math:`N` of the refused queries.

    Used in: every learner, through :class:`Access`; robust mode's fallback
    (:mod:`attnlearn.learner.fallback`) keeps the paper's recovery when it is raised there. No chapter
    shows it yet.
    """

    def __init__(self, message, *, length):
        super().__init__(message)
        self.length = length


def check_oracle(oracle, d=None):
    """Check an oracle object against the protocol (see the module docstring); return
    ``(d, exact, dps)``.

    Parameters
    ----------
    oracle : object
        The oracle.
    d : int, optional
        The token width the caller expects; must equal ``oracle.d``.

    Raises
    ------
    OracleProtocolError
        (a ``TypeError``) naming the missing or malformed attribute.
    ValueError
        If ``d`` does not match ``oracle.d``.
    """
    missing = [a for a in ("d", "exact", "dps", "batch") if not hasattr(oracle, a)]
    if missing:
        raise OracleProtocolError(
            f"oracle must have .d, .exact, .dps and .batch(Xs) (an attnlearn.Oracle or an object following "
            f"its protocol, attnlearn.protocol); {type(oracle).__name__} has no {', '.join('.' + a for a in missing)}")
    if not callable(oracle.batch):
        raise OracleProtocolError(f"the oracle's .batch must be callable, got {type(oracle.batch).__name__}")
    od = oracle.d
    if isinstance(od, bool) or not isinstance(od, numbers.Integral) or od < 1:
        raise OracleProtocolError(f"the oracle's .d must be a positive integer, got {od!r}")
    exact = oracle.exact
    if not isinstance(exact, (bool, np.bool_)):
        raise OracleProtocolError(f"the oracle's .exact must be True or False, got {exact!r}")
    dps = getattr(oracle, "dps", None)
    if exact and (isinstance(dps, bool) or not isinstance(dps, numbers.Integral) or dps < 1):
        raise OracleProtocolError(
            f"the oracle is exact (.exact = True) but its .dps is {dps!r}: an exact oracle must state its "
            "working precision as a positive number of decimal digits")
    if d is not None and d != od:
        raise ValueError(f"d = {d} does not match the oracle's token width {od}")
    return int(od), bool(exact), (int(dps) if exact else None)


def oracle_outputs(oracle):
    """The number :math:`k` of outputs per query of a vector oracle, or None for a scalar one
    (``oracle.outputs`` absent or None).

    Raises
    ------
    OracleProtocolError
        ``oracle.outputs`` is neither None nor a positive integer.
    """
    k = getattr(oracle, "outputs", None)
    if k is None:
        return None
    if isinstance(k, (bool, np.bool_)) or not isinstance(k, numbers.Integral) or k < 1:
        raise OracleProtocolError(f"the oracle's .outputs must be None or a positive integer, got {k!r}")
    return int(k)


class Access:
    """A learner's access to an oracle: checked once, every answer checked, queries counted here.

    Parameters
    ----------
    oracle : object
        Any object following the protocol (:func:`check_oracle`).
    d : int, optional
        Expected token width.
    vector : bool, keyword-only
        Accept a vector oracle (``oracle.outputs = k``: answers of shape ``(n, k)``); without it a
        vector oracle is refused (:class:`OracleProtocolError`).

    Attributes
    ----------
    d, exact, dps
        As checked.
    outputs : int or None
        :math:`k` of a vector oracle, None for a scalar one.
    queries : int
        Number of sequences asked through this access.
    max_length : int
        Longest sequence asked (0 before the first).
    lengths : collections.Counter
        Queries per length.
    log : object or None
        When set (an :class:`attnlearn.learner.certificate.QueryLog`), every answered batch is
        recorded there with its answers (the float64 paper and lean designs set it; the long
        design's finish, for its held-out queries only).
    """

    def __init__(self, oracle, d=None, *, vector=False):
        if isinstance(oracle, Access):  # already checked (a learner calling another)
            oracle = oracle.oracle
        self.oracle = oracle
        self.d, self.exact, self.dps = check_oracle(oracle, d)
        self.outputs = oracle_outputs(oracle)
        if self.outputs is not None and not vector:
            raise OracleProtocolError(
                f"the oracle returns {self.outputs} numbers per query (.outputs = {self.outputs}) and this learner "
                "needs one: give it a read-out (e.g. TorchOracle(module, readout=r)), or use a vector learner "
                "(attnlearn.vector.learn_vector)")
        self.queries = 0
        self.max_length = 0
        self.lengths = Counter()
        self.log = None

    def batch(self, Xs):
        """The protocol's ``batch``, checked and counted: an :class:`Access` is itself an oracle."""
        return self(Xs)

    def __call__(self, Xs, what="a query"):
        """Ask ``Xs`` (n, N, d); return the n answers (shape (n, k) from a vector oracle) as float64 or
        an object array of ``mpf``.

        Raises :class:`OracleAnswerError` (a ``ValueError``) naming ``what`` when the oracle returns
        the wrong number of answers, non-real or non-numeric ones, or NaN/inf, and
        :class:`OracleRefusedError` when the oracle raises an exception of its own (the queries
        are not counted: none was answered).
        """
        Xs = np.asarray(Xs) if not isinstance(Xs, np.ndarray) else Xs
        if Xs.ndim != 3 or Xs.shape[2] != self.d:
            raise ValueError(f"queries must have shape (n, N, {self.d}), got {Xs.shape}")
        n, N = Xs.shape[0], Xs.shape[1]
        try:
            y = self.oracle.batch(Xs)
        except Exception as exc:  # the oracle's own refusal (a short context, a fault): named, never lost
            raise OracleRefusedError(f"the oracle raised {type(exc).__name__} for {what} ({n:,} queries of {N:,} "
                                     f"tokens): {exc}", length=N) from exc
        self.queries += n
        self.lengths[N] += n
        self.max_length = max(self.max_length, N)
        try:
            arr = np.asarray(y, dtype=object if self.exact else None)
        except Exception as exc:  # a ragged or exotic return value
            raise OracleAnswerError(f"the oracle's answers for {what} are not an array of numbers ({exc})") from None
        want = (n,) if self.outputs is None else (n, self.outputs)
        if arr.shape != want:
            per = "one number" if self.outputs is None else f"{self.outputs} numbers"
            raise OracleAnswerError(
                f"the oracle returned answers of shape {arr.shape} for {what}: expected {want}, {per} per query")
        if self.exact:
            return self._exact(arr, what)
        arr = self._float(arr, what)
        if self.log is not None:
            self.log.add(Xs, arr)
        return arr

    @staticmethod
    def _float(arr, what):
        if arr.dtype == object or not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
            kind = "complex" if np.issubdtype(arr.dtype, np.complexfloating) else f"dtype {arr.dtype}"
            raise OracleAnswerError(f"the oracle returned {kind} answers for {what}: expected real float64 numbers")
        arr = arr.astype(float)
        bad = ~np.isfinite(arr)
        if bad.any():
            i = int(np.argwhere(bad)[0][0])
            raise OracleAnswerError(
                f"the oracle returned a non-finite value (NaN or inf) for {what} (query {i} of the batch: {arr[i]})")
        return arr

    @staticmethod
    def _exact(arr, what):
        out = np.empty(arr.shape, dtype=object)
        flat = out.reshape(-1)
        per = arr[0].size if arr.ndim == 2 and len(arr) else 1
        for j, v in enumerate(arr.reshape(-1).tolist()):
            i = j // per
            if isinstance(v, (mpmath.mpc, complex, np.complexfloating)) or not isinstance(
                    v, (mpmath.mpf, numbers.Real)) or isinstance(v, bool):
                raise OracleAnswerError(
                    f"the oracle returned a {type(v).__name__} answer for {what} (query {i}): expected real numbers")
            v = v if isinstance(v, mpmath.mpf) else mpmath.mpf(v)
            if not mpmath.isfinite(v):
                raise OracleAnswerError(
                    f"the oracle returned a non-finite value (NaN or inf) for {what} (query {i} of the batch: {v})")
            flat[j] = v
        return out
