"""Arithmetic helpers shared by the modules: float64 arrays or mpmath object arrays.

The package works in two arithmetics (chapter 5): numpy ``float64`` arrays, and
numpy ``object`` arrays whose entries are :class:`mpmath.mpf` numbers ("exact mode",
the paper's exact setting emulated at a working precision). The helpers below let the
rest of the package write one formula for both. Private: not part of the API.
"""

import contextlib
import numbers

import mpmath
import numpy as np

__all__ = []


def is_mp(a):
    """True if ``a`` is an mpmath number or an object array (of mpmath numbers)."""
    if isinstance(a, np.ndarray):
        return a.dtype == object
    return isinstance(a, (mpmath.mpf, mpmath.mpc))


def to_mp(a):
    """Object array of ``mpf`` (float64 values are converted exactly)."""
    a = np.asarray(a)
    if a.dtype == object:
        # keep mpf entries as they are: mpmath.mpf(x) would round x to the current precision
        keep = np.frompyfunc(lambda x: x if isinstance(x, mpmath.mpf) else mpmath.mpf(x), 1, 1)
        return keep(a).astype(object) if a.size else a
    if not np.issubdtype(a.dtype, np.number) or np.issubdtype(a.dtype, np.complexfloating):
        raise TypeError(f"expected real numbers, got dtype {a.dtype}")
    out = np.empty(a.shape, dtype=object)
    flat = out.reshape(-1)
    for i, x in enumerate(a.reshape(-1).tolist()):
        flat[i] = mpmath.mpf(x)
    return out


def to_float(a):
    """float64 array (rounding mpmath numbers to nearest); a float64 array is returned as is,
    not copied (callers only read it)."""
    a = np.asarray(a)
    if a.dtype == object:
        return np.array([float(x) for x in a.reshape(-1)], dtype=float).reshape(a.shape)
    return a.astype(float, copy=False)


def as_real_array(a, name):
    """Validate ``a`` as a real array; float64 unless it holds mpmath numbers.

    Raises ``TypeError`` for non-numeric input and ``ValueError`` for NaN or inf.
    """
    arr = np.asarray(a)
    if arr.dtype == object:
        out = np.empty(arr.shape, dtype=object)
        flat = out.reshape(-1)
        for i, x in enumerate(arr.reshape(-1)):
            if isinstance(x, mpmath.mpf):
                flat[i] = x
            elif isinstance(x, numbers.Real):
                flat[i] = mpmath.mpf(float(x)) if not isinstance(x, numbers.Integral) else mpmath.mpf(x)
            else:
                raise TypeError(f"{name} must hold real numbers, got {type(x).__name__}")
            if not mpmath.isfinite(flat[i]):
                raise ValueError(f"{name} has a non-finite entry (NaN or inf)")
        return out
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.number):
        raise TypeError(f"{name} must be a real numeric array, got dtype {arr.dtype}")
    if np.issubdtype(arr.dtype, np.complexfloating):
        raise TypeError(f"{name} must be real, got complex dtype {arr.dtype}")
    arr = np.asarray(arr, dtype=float)  # no copy when already float64
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} has a non-finite entry (NaN or inf)")
    return arr


def mp_exp(a):
    return np.frompyfunc(mpmath.exp, 1, 1)(a)


def mp_log(a):
    return np.frompyfunc(mpmath.log, 1, 1)(a)


def absmax(a):
    """Largest absolute entry as a Python float (0.0 for an empty array)."""
    a = np.asarray(a)
    if a.size == 0:
        return 0.0
    if a.dtype == object:
        return float(max(abs(x) for x in a.reshape(-1)))
    return float(np.max(np.abs(a)))


def norm(a):
    """Frobenius norm as a Python float, computed in the array's own arithmetic."""
    a = np.asarray(a)
    if a.dtype == object:
        return float(mpmath.sqrt(mpmath.fsum(x * x for x in a.reshape(-1))))
    return float(np.linalg.norm(a.reshape(-1)))


def eps_of(a):
    """Unit roundoff of the arithmetic that ``a`` is in (float64, or mpmath's current)."""
    if is_mp(a):
        return float(mpmath.mpf(2) ** (1 - mpmath.mp.prec))
    return float(np.finfo(float).eps)


def mp_solve(A, B):
    """Solve ``A X = B`` for object arrays of mpf (mpmath LU; raises on singular A)."""
    A = np.asarray(A, dtype=object)
    B = np.asarray(B, dtype=object)
    vec = B.ndim == 1
    Bm = B.reshape(B.shape[0], -1)
    Am = mpmath.matrix(A.tolist())
    out = np.empty(Bm.shape, dtype=object)
    # one LU factorisation, reused for every right-hand side
    LU, p = mpmath.mp.LU_decomp(Am)
    for j in range(Bm.shape[1]):
        b = mpmath.matrix(Bm[:, j].tolist())
        b = mpmath.mp.L_solve(LU, b, p)
        x = mpmath.mp.U_solve(LU, b)
        out[:, j] = [x[i] for i in range(Bm.shape[0])]
    return out[:, 0] if vec else out


def solve(A, B):
    """``A^{-1} B`` in the arithmetic of ``A`` (float64 LAPACK or mpmath LU)."""
    if is_mp(A) or is_mp(B):
        return mp_solve(to_mp(A), to_mp(B))
    return np.linalg.solve(A, B)


def working_precision(oracle):
    """The learners' working precision for ``oracle``: in exact mode the oracle's ``dps`` digits
    plus guard digits, :math:`\\max(20, \\mathrm{dps}/2)`, so that the learner's own rounding
    stays below the oracle's (chapter 5); in float64 no change. A context manager."""
    if oracle.exact:
        return mpmath.workdps(oracle.dps + max(20, oracle.dps // 2))
    return contextlib.nullcontext()


def orthonormal_columns(A):
    """Orthonormal columns spanning those of ``A`` (n x k, float64, full column rank), computed
    the same way on every machine.

    Modified Gram-Schmidt, twice, in Python floats with ``math.fsum`` dot products: unlike
    ``np.linalg.qr`` (LAPACK over the CPU's BLAS kernel) the result does not change in its last
    bits with the CPU, the BLAS library or the thread count, so queries built from it are the
    same everywhere (chapter 6's exact-mode figures depend on them).
    """
    import math

    A = np.asarray(A, dtype=float)
    cols = [list(map(float, A[:, j])) for j in range(A.shape[1])]
    out = []
    for c in cols:
        for _ in range(2):  # re-orthogonalisation: the second pass removes what rounding left
            for b in out:
                dot = math.fsum(x * y for x, y in zip(c, b))
                c = [x - dot * y for x, y in zip(c, b)]
        nrm = math.sqrt(math.fsum(x * x for x in c))
        if not nrm > 0:
            raise ValueError("orthonormal_columns: the columns are linearly dependent")
        out.append([x / nrm for x in c])
    return np.array(out, dtype=float).T.reshape(A.shape)
