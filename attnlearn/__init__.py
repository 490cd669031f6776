"""attnlearn: learning multi-head softmax attention from value queries.

The reproducible companion to S. Kim, I. Kim, J. Guo, "Provably Learning Multi-Head
Attention with Queries", arXiv:2608.03294 (2026). The book in ``book/`` follows the
paper's sections and calls these definitions.
"""

__version__ = "0.1.0"

from .canonical import canonical, default_atol, param_error
from .errors import (
    AccuracyError,
    CheckFailedError,
    ContextLimitError,
    IllConditionedError,
    InconsistentHeadCountError,
    NotIdentifiableError,
    PoleError,
    RankError,
    RecoveryError,
    UnmatchedHeadsError,
)
from .learner.cost import query_budget
from .learner.learn import learn
from .learner.results import Recovery
from .model import MultiHeadAttention
from .oracle import Float32Rounding, GaussianNoise, Oracle, RelativeNoise, UniformNoise
from .progress import progress
from .regression import RegressionFit, fit_regression, random_queries
from .single_head import learn_single_head
from .transformer import OneLayerTransformer, TransformerOptions, TransformerRecovery, learn_transformer

__all__ = [
    "__version__",
    "MultiHeadAttention",
    "Oracle",
    "UniformNoise",
    "GaussianNoise",
    "Float32Rounding",
    "RelativeNoise",
    "canonical",
    "default_atol",
    "param_error",
    "learn_single_head",
    "learn",
    "Recovery",
    "query_budget",
    "progress",
    "fit_regression",
    "random_queries",
    "RegressionFit",
    "RecoveryError",
    "NotIdentifiableError",
    "InconsistentHeadCountError",
    "PoleError",
    "UnmatchedHeadsError",
    "IllConditionedError",
    "RankError",
    "CheckFailedError",
    "AccuracyError",
    "ContextLimitError",
    "OneLayerTransformer",
    "learn_transformer",
    "TransformerOptions",
    "TransformerRecovery",
]
