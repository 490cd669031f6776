r"""The multi-head learner (chapters 3 and 4; claims C3-C7): four designs as sibling packages over shared stages.

Used in: chapter 4 (introduced, with the exact counts), chapters 5 to 9. The book's page
"Reading the code" maps each stage to its module and each module to its chapter:

========================  ==================================================================
module                    role
========================  ==================================================================
:mod:`.learn`             :func:`learn`: options, cost, the design's run, the accuracy asked
:mod:`.options`           the validated options of each design (:func:`~.options.build_options`)
:mod:`.cost`              every design's query count and longest query; absurd costs refused
:mod:`.paper`             the paper's design (``design="paper"``), one module per stage
:mod:`.lean`              the lean design of chapter 8 (``design="lean"``), one module per stage
:mod:`.long`              long ratio queries for noisy oracles (``design="long"``), one module per stage
:mod:`.rank`              heads of low rank in exact mode (``design="rank"``, chapter 9), one module per stage
:mod:`.fallback`          robust mode's fallback to the long design (chapter 7)
:mod:`.nodes`             shared: nodes and directions of every design
:mod:`.asking`            shared: batched queries of whole configurations, finite answers, counts
:mod:`.samples`           shared: the error of each sampled answer
:mod:`.heads`             shared: significance of the heads, the canonical model
:mod:`.finish`            shared: held-out queries, the :class:`Recovery`, the zero function
:mod:`.tolerances`        every tolerance, tied to the mode's arithmetic
:mod:`.results`           :class:`Recovery` and its :class:`Diagnostics`
:mod:`.accuracy`          ``accuracy=``: refused before any query, or checked after the recovery
========================  ==================================================================
"""

from .cost import bias_budget, lean_budget, long_cost, query_budget, rank_budget, rank_floor
from .learn import learn
from .long.info import information_limit, spacing_sd
from .nodes import lean_nodes, ratio_grid
from .paper.bias import bias_error
from .results import Diagnostics, Recovery
from .tolerances import LongTolerances, Tolerances

# The learner's public names: what the book and the benchmarks import (``from attnlearn.learner import ...``).
__all__ = ["learn", "Recovery", "Diagnostics", "query_budget", "Tolerances", "LongTolerances",
           "bias_budget", "bias_error", "lean_budget", "lean_nodes", "long_cost", "ratio_grid", "rank_budget",
           "rank_floor",
           "information_limit", "spacing_sd"]
