r"""Portable printing for the book: tables, bounds and verdicts that mean the same on every machine.

A stored notebook output is checked by strict nbval on other CPUs, BLAS kernels and thread
counts, where every float64 result may change in its last bits (and an ill-conditioned one in
more). So the book prints what the arithmetic guarantees:

* a **verdict** against a bound fixed in the text (:func:`below`: ``"below 1e-08"``, or
  :func:`above`), with the
  measured value required to sit a margin below the bound (else :class:`MarginError`: the
  author must choose a bound the result cannot cross on another machine);
* a **decade** of a measurement (:func:`decade`) only together with the same margin check
  (:func:`decade` refuses a value within ``margin`` of a decade boundary);
* a **count** compared with a threshold far away from it (:func:`count_within`);
* a **table** as Markdown (:func:`table`), rendered as a table in the book and compared by
  nbval as text.

Used in: every chapter of the book (tables since chapter 1; bounds and decades in chapters 3-6
and the appendix).
"""

import math
import numbers

__all__ = ["MarginError", "below", "above", "decade", "sig", "table", "count_within"]

#: Default margin (a factor) between a printed bound and the value it bounds: another BLAS
#: kernel moves a well-conditioned float64 result by ulps and an ill-conditioned one (errors of
#: 1e-10..1e-6, chapter 4's frontier) by up to tens of percent; a factor 3 covers both.
MARGIN = 3.0


class MarginError(AssertionError):
    """A printed figure would sit too close to its bound or decade boundary to be portable."""


def _positive(x, name):
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(x).__name__} {x!r}")
    return float(x)


def below(x, bound, *, margin=MARGIN, what="value"):
    """``"below <bound>"`` after checking that ``x`` sits at least ``margin`` times below ``bound``.

    Raises :class:`MarginError` (with the measured value) when ``x`` is not that far below: a
    value that close could cross the bound on another machine.

    Used in: chapters 3-6 and the appendix.
    """
    x, bound = _positive(x, "x"), _positive(bound, "bound")
    if not x * margin <= bound:
        raise MarginError(f"{what} = {x:.3g} is not {margin:g}x below the stated bound {bound:.0e}")
    return f"below {bound:.0e}"


def above(x, bound, *, margin=MARGIN, what="value"):
    """``"above <bound>"`` after checking that ``x`` sits at least ``margin`` times above ``bound``
    (else :class:`MarginError`, with the measured value), as :func:`below`.

    Used in: chapter 5 and the appendix.
    """
    x, bound = _positive(x, "x"), _positive(bound, "bound")
    if not x >= margin * bound:
        raise MarginError(f"{what} = {x:.3g} is not {margin:g}x above the stated bound {bound:.0e}")
    return f"above {bound:.0e}"


def decade(x, *, margin=MARGIN):
    """The decade of ``x`` as ``"1e-09"`` (``10**floor(log10 x)``), refusing values within a factor
    ``sqrt(margin)`` of a decade boundary (:class:`MarginError`): only a value well inside its
    decade prints the same everywhere. ``0`` prints as ``"0"``, ``inf`` as ``"inf"``.

    Used in: chapters 3 and 5.
    """
    x = _positive(x, "x")
    if x == 0 or math.isinf(x):
        return "0" if x == 0 else "inf"
    lg = math.log10(abs(x))
    k = math.floor(lg)
    room = math.log10(margin) / 2
    if lg - k < room or k + 1 - lg < room:
        raise MarginError(f"{x:.3g} is within a factor {math.sqrt(margin):.2g} of a decade boundary")
    return f"1e{k:+03d}"


def sig(x, digits=1):
    """``x`` to ``digits`` significant digits (``"3e-09"``) for display only: cells that print it
    also check it against a stated bound, and mark the output ``NBVAL_IGNORE_OUTPUT`` where those
    digits are not guaranteed on every machine.

    Used in: chapters 3-5 and the appendix.
    """
    x = _positive(x, "x")
    return f"{x:.{digits - 1}e}" if math.isfinite(x) and x != 0 else f"{x:g}"


def count_within(n, lo, hi, *, what="count"):
    """``n`` itself after checking ``lo <= n <= hi``: a count the text states as a range.

    Raises :class:`MarginError` outside the range. Used in: chapters 4 and 5.
    """
    if not lo <= n <= hi:
        raise MarginError(f"{what} = {n} is outside the stated range [{lo}, {hi}]")
    return n


def table(header, rows, *, align=None):
    """A Markdown table (an ``IPython.display.Markdown`` object) from a header and rows of cells.

    Cells are converted with ``str``; ``align`` is a string of ``l``, ``r`` or ``c`` per column
    (default: right for every column but the first). The book renders it as a table; nbval
    compares its Markdown text.

    Used in: every chapter.
    """
    from IPython.display import Markdown

    header = [str(h) for h in header]
    if align is None:
        align = "l" + "r" * (len(header) - 1)
    if len(align) != len(header) or set(align) - set("lrc"):
        raise ValueError(f"align must have one of l, r, c per column ({len(header)}), got {align!r}")
    rule = {"l": ":--", "r": "--:", "c": ":-:"}
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(rule[a] for a in align) + "|"]
    for r in rows:
        r = [str(c).replace("|", "\\|") for c in r]
        if len(r) != len(header):
            raise ValueError(f"a row has {len(r)} cells, the header {len(header)}")
        lines.append("| " + " | ".join(r) + " |")
    return Markdown("\n".join(lines))
