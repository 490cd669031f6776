r"""The multi-head learner (DESIGN §4; claims C3-C7), one module per stage.

Used in: chapter 4 (introduced, with the exact counts), chapters 5 to 8. The book's page
"Reading the code" maps each stage to its module and each module to its chapter:

========================  ==================================================================
module                    stage
========================  ==================================================================
:mod:`.pipeline`          :func:`learn`: the stages below, in order
:mod:`.stages`            the design, its fits, checks and check queries (shared with ``bias=True``)
:mod:`.tolerances`        every tolerance, tied to the mode's arithmetic
:mod:`.design`            nodes, random directions, query scale, the configuration table
:mod:`.asking`            batched queries of whole configurations, finite answers, counts
:mod:`.fitting`           the rational fit of each configuration and its error bounds
:mod:`.robust`            robust mode's redraws of ill-conditioned configurations
:mod:`.constants`         :math:`V`, the constants :math:`V^\top q`, and their calibration
:mod:`.labelling`         links label each block, crosses label the blocks
:mod:`.solves`            weighted least squares for :math:`w_{h,k}`, :math:`v_h`, :math:`W_h`
:mod:`.checks`            head count, first-order range, significance, held-out finish
:mod:`.verify`            check queries the fits must predict (the verification stage)
:mod:`.scale`             the query scale: probe, or search (``scale="search"``, chapter 7)
:mod:`.bias`              score biases and output offset (``bias=True``, chapter 7)
:mod:`.results`           :class:`Recovery` and its :class:`Diagnostics`
:mod:`.lean`              the lean design of chapter 8 (``design="lean"``)
:mod:`.lean_roots`        every root of a lean configuration's polynomial system
:mod:`.long`              long ratio queries for noisy oracles (``design="long"``)
:mod:`.long_info`         the Cramér–Rao bound of a long configuration, the information limit
:mod:`.accuracy`          ``accuracy=``: refused before any query, or checked after the recovery
========================  ==================================================================
"""

from .bias import bias_budget, bias_error
from .lean import lean_budget, lean_nodes
from .long import long_cost, ratio_grid
from .long_info import information_limit, spacing_sd
from .pipeline import learn
from .results import Diagnostics, Recovery, query_budget
from .tolerances import LongTolerances, Tolerances

# The learner's public names: what the book and the benchmarks import (``from attnlearn.learner import ...``).
__all__ = ["learn", "Recovery", "Diagnostics", "query_budget", "Tolerances", "LongTolerances",
           "bias_budget", "bias_error", "lean_budget", "lean_nodes", "long_cost", "ratio_grid",
           "information_limit", "spacing_sd"]
