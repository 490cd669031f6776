"""learn(..., accuracy=...) (attnlearn.learner.accuracy): out-of-reach accuracies raise AccuracyError."""

import numpy as np
import pytest

from attnlearn import AccuracyError, Oracle, RecoveryError, RelativeNoise, canonical, learn, param_error
from attnlearn.learner.accuracy import check_accuracy, refuse_out_of_reach
from attnlearn.learner.long.info import information_limit
from attnlearn.model import random_model

F32, L = 6e-8, 4096


def long_oracle(H=2, d=4, s=0, eps=F32):
    model = random_model(H, d, seed=9_000 + 10 * H + d + s)
    return model, Oracle(model, noise=RelativeNoise(eps), seed=s)


@pytest.mark.parametrize("design", ["paper", "long"])
@pytest.mark.parametrize("bad, exc", [(True, TypeError), ("1e-3", TypeError), (0, ValueError), (-1e-3, ValueError),
                                      (float("nan"), ValueError), (float("inf"), ValueError)])
def test_bad_accuracy_named(design, bad, exc):
    _, oracle = long_oracle()
    kw = dict(design="long", relative_error=F32, max_length=L) if design == "long" else {}
    with pytest.raises(exc, match=r"accuracy must be a positive number \(finite, > 0\)"):
        learn(oracle, 4, heads=2, accuracy=bad, **kw)
    assert oracle.queries == 0


def test_refused_before_any_query_with_the_limit():
    _, oracle = long_oracle()
    with pytest.raises(AccuracyError, match=r'accuracy=1\.0e-12 is out of reach of design="long" at '
                                            r"relative_error=6\.0e-08 .*No query was asked") as info:
        learn(oracle, 4, heads=2, design="long", relative_error=F32, max_length=L, accuracy=1e-12)
    assert oracle.queries == 0 and info.value.recovery is None and info.value.requested == 1e-12
    assert info.value.certified == information_limit(4, 2, L=L, relative=F32)
    assert isinstance(info.value, RecoveryError)


@pytest.mark.parametrize("H, d", [(1, 16), (2, 16), (4, 16), (1, 64), (8, 16)])
def test_committed_settings_not_refused(H, d):
    """eps = 6e-8, accuracy = 1e-3 (the benchmark's "ok"): never refused before the queries."""
    limit = refuse_out_of_reach(d, H, L=L, relative=F32, accuracy=1e-3)
    assert limit == information_limit(d, H, L=L, relative=F32) and 10 * limit < 1e-3


def test_refusal_at_ten_times_the_limit():
    limit = information_limit(16, 4, L=L, relative=1e-5)
    assert refuse_out_of_reach(16, 4, L=L, relative=1e-5, accuracy=limit / 9.9) == limit
    with pytest.raises(AccuracyError, match=r"allows no better than .* more than 10x the accuracy asked") as info:
        refuse_out_of_reach(16, 4, L=L, relative=1e-5, accuracy=limit / 10.1)
    assert info.value.certified == limit


def test_met_or_raised_after_the_recovery_long():
    """The same seeded run: returned when its estimate is within the accuracy, else AccuracyError
    with that estimate as the accuracy it could certify and the recovery attached."""
    model, oracle = long_oracle()
    rec = learn(oracle, 4, heads=2, design="long", relative_error=F32, max_length=L, accuracy=1e-3)
    assert rec.error_estimate <= 1e-3 and param_error(rec.model, canonical(model)) <= rec.error_estimate
    _, again = long_oracle()
    asked = rec.error_estimate / 2
    with pytest.raises(AccuracyError, match=r"out of reach: the learner could certify .* \(the recovery's error "
                                            r"estimate\), not .*; the recovery is attached") as info:
        learn(again, 4, heads=2, design="long", relative_error=F32, max_length=L, accuracy=asked)
    err = info.value
    assert err.certified == rec.error_estimate and err.requested == asked
    assert err.recovery is not None and err.recovery.error_estimate == err.certified
    assert again.queries == oracle.queries > 0  # the whole design was asked: not a refusal


def test_met_or_raised_after_the_recovery_paper():
    model = random_model(1, 2, seed=3)
    rec = learn(Oracle(model), 2, heads=1, accuracy=1e-3)
    assert rec.error_estimate <= 1e-3 and param_error(rec.model, canonical(model)) <= 1e-3
    with pytest.raises(AccuracyError, match="the learner could certify") as info:
        learn(Oracle(model), 2, heads=1, accuracy=rec.error_estimate / 2)
    assert info.value.certified == rec.error_estimate and info.value.recovery.heads == 1


def test_check_accuracy_without_a_requirement():
    class Rec:
        error_estimate = np.float64(0.5)

    rec = Rec()
    assert check_accuracy(rec, None) is rec and check_accuracy(rec, 0.5) is rec
    with pytest.raises(AccuracyError, match=r"accuracy=4\.0e-01 is out of reach"):
        check_accuracy(rec, 0.4)


@pytest.mark.parametrize("heads, true", [(2, 1), (3, 2)])
def test_a_failed_recovery_certifies_nothing(heads, true):
    """Asked for more heads than the model has, the long design fails (IllConditionedError): with an
    accuracy asked, that is an AccuracyError certifying nothing, the failure as its cause."""
    model = random_model(true, 3, seed=1)
    kw = dict(design="long", relative_error=1e-8, max_length=L)
    with pytest.raises(RecoveryError) as plain:
        learn(Oracle(model, noise=RelativeNoise(1e-8), seed=0), 3, heads=heads, **kw)
    assert not isinstance(plain.value, AccuracyError)  # no accuracy asked: the failure itself
    with pytest.raises(AccuracyError, match=r"accuracy=1\.0e-03 is out of reach: the recovery failed, so the "
                                            r"learner could certify no accuracy \(\w+Error: ") as asked:
        learn(Oracle(model, noise=RelativeNoise(1e-8), seed=0), 3, heads=heads, accuracy=1e-3, **kw)
    assert asked.value.certified == float("inf") and asked.value.requested == 1e-3 and asked.value.recovery is None
    assert type(asked.value.__cause__) is type(plain.value) and str(asked.value.__cause__) == str(plain.value)


def test_an_oracle_fault_is_not_an_accuracy_error():
    from attnlearn.protocol import OracleAnswerError

    class NaN:
        exact, dps, d = False, None, 2

        def batch(self, Xs):
            return np.full(len(Xs), np.nan)

    with pytest.raises(OracleAnswerError, match=r"non-finite"):
        learn(NaN(), 2, heads=1, accuracy=1e-3)
