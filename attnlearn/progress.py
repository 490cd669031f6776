"""Progress bars for long sweeps: tqdm in interactive use, silence in builds and tests.

Used in: chapters 4 and 5 (the frontier and noise sweeps), the long design's groups
(``learn(..., design="long")``: a bar after a few seconds) and ``benchmarks/``.
"""

import os
import sys

__all__ = ["progress", "LONG_RUN"]

#: Seconds before a learner's own bar appears (``progress(..., delay=LONG_RUN)``): a run shorter
#: than this shows none.
LONG_RUN = 3.0


def progress(iterable, *, desc=None, total=None, delay=0.0):
    """Wrap ``iterable`` in a :class:`tqdm.tqdm` bar, unless progress output is switched off.

    The bar goes to standard error and disappears when the loop ends. Set the environment
    variable ``ATTNLEARN_PROGRESS=0`` to get the bare iterable: the Makefile does so for
    ``make book`` and ``make test``, so stored notebook outputs and the book build stay free
    of volatile text (a notebook cell that writes to standard error fails the build).
    ``delay`` seconds pass before the bar appears (a loop that ends sooner shows none).
    """
    if os.environ.get("ATTNLEARN_PROGRESS", "1").strip().lower() in ("0", "off", "false", "no"):
        return iterable
    from tqdm import tqdm  # imported only when a bar is shown

    return tqdm(iterable, desc=desc, total=total, leave=False, file=sys.stderr, delay=delay)
