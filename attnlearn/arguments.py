"""The argument checks of the whole package: counts, flags, real numbers, seeds, the oracle.

Used in: every chapter (each learner checks its arguments with these before any query, and
:class:`attnlearn.Oracle` its own). Below everything else in the package: it imports only
:mod:`attnlearn.protocol`, so that :mod:`attnlearn.oracle` does not import the learner.
Loud failure: a bad argument raises ``TypeError`` (wrong type) or ``ValueError`` (out of
range) naming the parameter and the value given.
"""

import math
import numbers

import mpmath
import numpy as np

from .protocol import check_oracle as protocol_check

__all__ = ["check_count", "check_heads", "check_flag", "check_real", "check_seed", "check_oracle"]


def check_count(value, name, minimum=1):
    """``value`` as an ``int`` if it is an integer (not a bool) at least ``minimum``.

    Raises
    ------
    TypeError
        ``value`` is not an integer (a bool, a float such as ``2.0``, a string, None).
    ValueError
        ``value`` is below ``minimum``.
    """
    what = "a positive integer" if minimum == 1 else ("a non-negative integer" if minimum == 0
                                                      else f"an integer >= {minimum}")
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be {what}, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be {what}, got {value}")
    return int(value)



def check_heads(heads, max_heads):
    """The head count of a multi-head learner: exactly one of ``heads`` (the number of heads) and
    ``max_heads`` (an upper bound) given, a positive integer; returns it as an ``int``.

    Used in: chapters 3-8 (:func:`attnlearn.learn`) and chapter 6 (:func:`attnlearn.learn_transformer`).

    Raises
    ------
    ValueError
        Both or neither given, or the one given below 1.
    TypeError
        The one given is not an integer.
    """
    if (heads is None) == (max_heads is None):
        raise ValueError("give exactly one of heads=H (the number of heads) or max_heads=H0 (an upper bound)")
    return check_count(heads if heads is not None else max_heads, "heads" if heads is not None else "max_heads")

def check_flag(value, name):
    """``value`` as a ``bool`` if it is one (``True``/``False`` or a numpy bool); else TypeError."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__} {value!r}")
    return bool(value)


def check_real(value, name, *, positive=False):
    """``value`` unchanged if it is a finite real number (a Python, numpy or mpmath number, not a
    bool) that is ``> 0`` (``positive``) or ``>= 0``.

    Raises
    ------
    TypeError
        ``value`` is not a real number.
    ValueError
        ``value`` is not finite or out of range.
    """
    what = "a positive number (finite, > 0)" if positive else "a finite number >= 0"
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be {what}, got {type(value).__name__} {value!r}")
    finite = mpmath.isfinite(value) if isinstance(value, mpmath.mpf) else math.isfinite(value)
    if not (finite and (value > 0 if positive else value >= 0)):
        raise ValueError(f"{name} must be {what}, got {value!r}")
    return value


def check_seed(value, name="seed", *, generator=True):
    """``value`` unchanged if :func:`numpy.random.default_rng` takes it: None, a non-negative integer,
    a sequence of them or (with ``generator``) a ``Generator``, ``BitGenerator`` or ``SeedSequence``.

    Raises
    ------
    TypeError
        A bool, a float, a string or any other object.
    ValueError
        A negative integer.
    """
    kinds = (np.random.Generator, np.random.BitGenerator, np.random.SeedSequence)
    what = ("None, a non-negative integer, a sequence of them or a numpy Generator" if generator
            else "a non-negative integer")
    if generator and (value is None or isinstance(value, kinds)):
        return value
    ints = value if isinstance(value, (list, tuple, np.ndarray)) and generator else [value]
    if not (len(ints) and all(isinstance(i, numbers.Integral) and not isinstance(i, (bool, np.bool_))
                              for i in np.ravel(np.asarray(ints, dtype=object)))):
        raise TypeError(f"{name} must be {what}, got {type(value).__name__} {value!r}")
    if any(i < 0 for i in np.ravel(np.asarray(ints, dtype=object))):
        raise ValueError(f"{name} must be {what}, got {value!r}")
    return value


def check_oracle(oracle, d):
    """``d`` as an ``int`` if it is a positive integer equal to the token width of ``oracle``, an
    object following the oracle protocol (:func:`attnlearn.protocol.check_oracle`)."""
    d = check_count(d, "d")
    protocol_check(oracle, d)  # attributes, their types, the token width
    return d
