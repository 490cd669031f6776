"""Errors raised when a recovery cannot be trusted (DESIGN §4.5: detect, never pass silently).

Used in: chapters 1, 3, 4, 5, 6 (each failure mode is triggered once on purpose).
"""

__all__ = [
    "RecoveryError",
    "NotIdentifiableError",
    "InconsistentHeadCountError",
    "PoleError",
    "UnmatchedHeadsError",
    "IllConditionedError",
    "CheckFailedError",
]


class RecoveryError(RuntimeError):
    """A learner could not certify its result; the message names the step and the residual."""


class NotIdentifiableError(RecoveryError):
    """The queried function does not determine the parameters asked for (e.g. ``v = 0``)."""


class InconsistentHeadCountError(RecoveryError):
    """Configurations disagree on the number of canonical heads (or it exceeds the bound)."""


class PoleError(RecoveryError):
    """An interpolated pole is not real and negative, or a residue vanishes."""


class UnmatchedHeadsError(RecoveryError):
    """A link or cross configuration could not be matched to the heads within tolerance."""


class IllConditionedError(RecoveryError):
    """The estimated error of a step is too large for its result to mean anything."""


class CheckFailedError(RecoveryError):
    """The recovered model does not reproduce the oracle on held-out queries."""
