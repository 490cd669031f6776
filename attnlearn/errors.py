"""Errors raised when a recovery cannot be trusted (detect, never pass silently: chapters 3 to 5).

Used in: chapters 1, 3, 4, 5, 5b, 6 (each failure mode is triggered once on purpose).
"""

__all__ = [
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


class RankError(RecoveryError):
    """A head's rank exceeds the ``rank=`` given, or its columns contradict a certified rank."""


class CheckFailedError(RecoveryError):
    """The recovered model does not reproduce the oracle on held-out queries."""


class AccuracyError(RecoveryError):
    """The accuracy asked of ``learn(..., accuracy=...)`` is out of reach.

    Raised after a recovery whose ``error_estimate`` exceeds the accuracy asked (the recovery
    is attached), or, with ``design="long"``, before any query when the design's information
    limit (:func:`attnlearn.learner.long.info.information_limit`) is far above it, or when the
    recovery itself failed (``certified`` is then ``inf`` and ``__cause__`` the failure).

    Attributes
    ----------
    certified : float
        The accuracy the learner could certify: the recovery's ``error_estimate``, before any
        query the information limit (an estimated floor: chapter 5b), or ``inf`` when the
        recovery failed.
    requested : float
        The accuracy asked.
    recovery : Recovery or None
        The recovery that missed the accuracy (None when refused before any query).

    Used in: chapter 5b.
    """

    def __init__(self, message, *, certified, requested, recovery=None):
        super().__init__(message)
        self.certified = certified
        self.requested = requested
        self.recovery = recovery


class ContextLimitError(RecoveryError):
    """The oracle refused the queries a design needed for their length (its context is shorter)
    and no other design left a recovery. The message names the length and every design's
    outcome; ``__cause__`` is the oracle's refusal
    (:class:`attnlearn.protocol.OracleRefusedError`).

    Attributes
    ----------
    length : int
        The length of the refused queries.

    Used in: robust mode's fallback (:mod:`attnlearn.learner.fallback`); no chapter shows it yet.
    """

    def __init__(self, message, *, length):
        super().__init__(message)
        self.length = length
