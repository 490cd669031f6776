"""Black-box value-query access to a model, with counting, exact mode and noise.

Used in: every chapter (introduced in chapter 1; noise models in chapter 5).
"""

import numbers
import os
import time
from collections import Counter

import mpmath
import numpy as np

from ._arith import is_mp, to_float, to_mp
from .arguments import check_real, check_seed
from .model import check_sequences

__all__ = ["Oracle", "UniformNoise", "GaussianNoise", "RelativeNoise", "Float32Rounding", "PERTURB_ENV", "PERTURB_ULPS"]

#: Environment variable of the perturbation mode (see :class:`Oracle`): an integer seed.
PERTURB_ENV = "ATTNLEARN_PERTURB"
#: Largest perturbation of a float64 answer in that mode, in units of float64's eps.
PERTURB_ULPS = 4


def _perturbation_seed():
    """The seed of the perturbation mode from ``ATTNLEARN_PERTURB``, or None when unset/empty."""
    raw = os.environ.get(PERTURB_ENV, "").strip()
    if not raw:
        return None
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{PERTURB_ENV} must be an integer seed (or unset), got {raw!r}") from None


class UniformNoise:
    r"""Additive output error drawn uniformly from :math:`[-\varepsilon, \varepsilon]`.

    Parameters
    ----------
    epsilon : float
        A finite real number :math:`\ge 0` (not a bool): TypeError or ValueError naming it otherwise.
    """

    def __init__(self, epsilon):
        self.epsilon = float(check_real(epsilon, "epsilon"))

    def bound(self, y):
        """A bound on the absolute error of each output."""
        return self.epsilon

    def sample(self, rng, y):
        return rng.uniform(-self.epsilon, self.epsilon, size=len(y))

    def __repr__(self):
        return f"UniformNoise(epsilon={self.epsilon:.3g})"


class GaussianNoise:
    r"""Additive output error :math:`\mathcal N(0,\sigma^2)` (unbounded; ``bound`` is :math:`5\sigma`).

    Parameters
    ----------
    sigma : float
        A finite real number :math:`\ge 0` (not a bool): TypeError or ValueError naming it otherwise.
    """

    def __init__(self, sigma):
        self.sigma = float(check_real(sigma, "sigma"))

    def bound(self, y):
        return 5.0 * self.sigma

    def sample(self, rng, y):
        return rng.normal(0.0, self.sigma, size=len(y))

    def __repr__(self):
        return f"GaussianNoise(sigma={self.sigma:.3g})"


class RelativeNoise:
    r"""Output error relative to the answer, :math:`\varepsilon\,|F|\,\mathcal N(0,1)` (unbounded;
    ``bound`` is :math:`5\varepsilon\max|F|`): float32-level noise at :math:`\varepsilon=6\cdot10^{-8}`
    (chapter 5, ``learn(..., design="long", relative_error=...)``).

    Parameters
    ----------
    epsilon : float
        A finite real number :math:`\ge 0` (not a bool): TypeError or ValueError naming it otherwise.
    """

    def __init__(self, epsilon):
        self.epsilon = float(check_real(epsilon, "epsilon"))

    def bound(self, y):
        return 5.0 * self.epsilon * float(np.max(np.abs(to_float(y)))) if len(y) else 0.0

    def sample(self, rng, y):
        return self.epsilon * np.abs(to_float(y)) * rng.normal(size=len(y))

    def __repr__(self):
        return f"RelativeNoise(epsilon={self.epsilon:.3g})"


class Float32Rounding:
    """Outputs rounded to the nearest float32 (relative error at most 2**-24)."""

    def bound(self, y):
        return float(np.max(np.abs(to_float(y)))) * 2.0**-24 if len(y) else 0.0

    def sample(self, rng, y):
        yf = to_float(y)
        return yf.astype(np.float32).astype(float) - yf

    def __repr__(self):
        return "Float32Rounding()"


class Oracle:
    r"""Value-query access to ``model``: a sequence in, one scalar out, every query counted.

    Parameters
    ----------
    model : MultiHeadAttention or OneLayerTransformer
        Any object with ``.d`` and ``.batch(Xs)``; the learner never sees it.
    precision : "float64" or int, keyword-only
        ``"float64"`` evaluates in numpy. An integer ``p > 0`` is exact mode: the model's
        parameters are taken exactly as mpmath numbers and every output is computed with
        mpmath at ``p`` decimal digits and returned as ``mpmath.mpf``.
    noise : UniformNoise, GaussianNoise, RelativeNoise, Float32Rounding or None, keyword-only
        Additive output error model (chapter 5), drawn from ``seed``.
    seed : int, sequence of int, numpy Generator or None, keyword-only
        Seed of the noise generator (anything :func:`numpy.random.default_rng` takes, but not
        a bool or a float).

    Raises
    ------
    TypeError
        ``model`` without ``.d`` and ``.batch``, ``noise`` without ``.sample``, a ``precision``
        or ``seed`` of the wrong type (each named).
    ValueError
        ``precision`` not positive or an unknown string, a negative ``seed``.

    Notes
    -----
    **Perturbation mode** (portable reproduction, chapter 5 and ``.ci/run``): when the
    environment variable ``ATTNLEARN_PERTURB`` holds an integer seed, every float64 answer
    is multiplied by :math:`1+k\epsilon_{64}`, with an integer :math:`k` drawn uniformly from
    :math:`[-4, 4]` per answer (``PERTURB_ULPS``) by a generator seeded with that seed. This
    is what another CPU's BLAS kernel, another BLAS library or another thread count does to
    the model's own float64 evaluation: a few units in the last place. Every stored output
    of the book, every test and every learner decision must be the same with and without
    it; a decision that changes is a knife edge. Exact mode is not perturbed (mpmath does not
    depend on the CPU). The mode is read when the oracle is created.

    Attributes
    ----------
    queries : int
        Number of sequences asked so far (batched or not).
    max_length : int
        Longest sequence asked so far (0 before the first query).
    lengths : collections.Counter
        How many queries of each length were asked.
    elapsed : float
        Seconds spent inside :meth:`batch` (validation and evaluation; for the benchmarks).
    """

    def __init__(self, model, *, precision="float64", noise=None, seed=None):
        if not (hasattr(model, "batch") and hasattr(model, "d")):
            raise TypeError("model must have .d and .batch(Xs), e.g. a MultiHeadAttention")
        if isinstance(precision, str):
            if precision != "float64":
                raise ValueError(f'precision must be "float64" or a positive integer, got {precision!r}')
            self.dps = None
        else:
            if isinstance(precision, bool) or not isinstance(precision, numbers.Integral):
                raise TypeError(
                    f'precision must be "float64" or a positive integer number of digits, '
                    f"got {type(precision).__name__} {precision!r}"
                )
            if precision <= 0:
                raise ValueError(f"precision must be a positive number of digits, got {precision}")
            self.dps = int(precision)
        if noise is not None and not hasattr(noise, "sample"):
            raise TypeError("noise must be UniformNoise(...), GaussianNoise(...), Float32Rounding() or None")
        self._model = model.to_mpmath() if self.dps is not None else model
        self.d = model.d
        self.noise = noise
        self._rng = np.random.default_rng(check_seed(seed))
        pseed = _perturbation_seed() if self.dps is None else None
        self._perturb = None if pseed is None else np.random.default_rng(pseed)
        self.queries = 0
        self.max_length = 0
        self.lengths = Counter()
        self.elapsed = 0.0

    @property
    def exact(self):
        """True in exact mode (``precision`` an integer)."""
        return self.dps is not None

    def __repr__(self):
        prec = "float64" if self.dps is None else f"{self.dps} digits"
        return f"Oracle(d={self.d}, precision={prec}, noise={self.noise!r}, queries={self.queries})"

    def __call__(self, X):
        """Ask one sequence ``X`` of shape ``(N, d)``; returns a float (mpf in exact mode)."""
        X = check_sequences(X, self.d, batch=False)
        return self.batch(X[None])[0]

    def batch(self, Xs):
        """Ask ``n`` sequences of the same length at once; ``Xs`` has shape ``(n, N, d)``."""
        t0 = time.perf_counter()
        Xs = check_sequences(Xs, self.d, batch=True)
        n, N, _ = Xs.shape
        if self.dps is None:
            Xs = to_float(Xs) if is_mp(Xs) else Xs
            y = np.asarray(self._model.batch(Xs), dtype=float)
            if self.noise is not None:
                y = y + self.noise.sample(self._rng, y)
            if self._perturb is not None:
                k = self._perturb.integers(-PERTURB_ULPS, PERTURB_ULPS + 1, size=len(y))
                y = y * (1.0 + k * np.finfo(float).eps)
        else:
            with mpmath.workdps(self.dps):
                y = self._model.batch(to_mp(Xs))
                if self.noise is not None:
                    y = y + to_mp(self.noise.sample(self._rng, y))
                y = np.array([+yi for yi in y], dtype=object)  # round to the working precision
        self.elapsed += time.perf_counter() - t0
        self.queries += n
        self.lengths[N] += n
        self.max_length = max(self.max_length, N)
        return y
