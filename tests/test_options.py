"""attnlearn.learner.options: every option a design does not use is refused before any query, naming the
option and the design; the paper design fills its own defaults."""

import numpy as np
import pytest

from attnlearn import Oracle, learn
from attnlearn.learner.options import UNUSED
from attnlearn.model import random_model

# (design, option, a value of the right type): every option the design does not use
REFUSED = [
    ("paper", "relative_error", 1e-8),
    ("lean", "robust", True), ("lean", "nodes", "copies"), ("lean", "bias", True), ("lean", "scale", "search"),
    ("lean", "method", "linearised"), ("lean", "method", "loewner"), ("lean", "redraw_rounds", 0),
    ("lean", "relative_error", 1e-8),
    ("long", "robust", True), ("long", "scale", "search"), ("long", "max_heads", 2), ("long", "method", "linearised"),
    ("long", "nodes", "ratios"), ("long", "spread", 1.0), ("long", "redraw_rounds", 0),
    ("rank", "robust", True), ("rank", "nodes", "ratios"), ("rank", "bias", True), ("rank", "scale", "search"),
    ("rank", "method", "linearised"), ("rank", "redraw_rounds", 0), ("rank", "relative_error", 1e-8),
    ("paper", "rank", 1), ("lean", "rank", 1),
]


def _request(design, option, value):
    kw = {"heads": 2, "design": design, option: value}
    if option == "max_heads":
        del kw["heads"]
    if design == "long":
        kw["max_length"] = 256
    return kw


@pytest.mark.parametrize("design,option,value", REFUSED)
def test_an_option_the_design_does_not_use_is_refused_before_any_query(design, option, value):
    oracle = Oracle(random_model(2, 2, seed=0))
    named = rf"(?s)(\b{option}\b.*\b{design}\b|\b{design}\b.*\b{option}\b)"
    with pytest.raises(ValueError, match=named):
        learn(oracle, 2, **_request(design, option, value))
    assert oracle.queries == 0


@pytest.mark.parametrize("option,value", [("method", "bogus"), ("nodes", "bogus"), ("spread", -1), ("redraw_rounds", -5)])
def test_contradictory_long_options_refused_before_any_query(option, value):
    """What design="long" once accepted silently (stopped, if at all, by the cost check)."""
    oracle = Oracle(random_model(2, 2, seed=0))
    with pytest.raises(ValueError, match=rf'{option} is not an option of design="long"'):
        learn(oracle, 2, heads=2, design="long", max_length=256, **{option: value})
    assert oracle.queries == 0


def test_every_entry_of_the_table_is_tested():
    assert {(d, o) for d, opts in UNUSED.items() for o in opts} <= {(d, o) for d, o, _ in REFUSED}
    assert UNUSED["paper"] == {}


def test_the_paper_design_fills_its_defaults():
    """Omitted, method and redraw_rounds are the paper design's "linearised" and 4: the same queries and model."""
    m = random_model(2, 2, seed=3)
    a, b = Oracle(m), Oracle(m)
    ra = learn(a, 2, heads=2, robust=True, seed=1)
    rb = learn(b, 2, heads=2, robust=True, seed=1, method="linearised", redraw_rounds=4)
    assert ra.queries == rb.queries and a.queries == b.queries
    np.testing.assert_array_equal(ra.model.W, rb.model.W)
    np.testing.assert_array_equal(ra.model.v, rb.model.v)


# ---------------------------------------------------------------- fallback=: robust mode's fallback, explicit
FALLBACK_REFUSED = [
    ({"fallback": "bogus", "heads": 2}, r"fallback must be \"auto\", \"long\" or None, got 'bogus'"),
    ({"fallback": "long", "heads": 2, "max_length": 4096}, r'fallback="long" .*needs robust=True'),
    ({"fallback": "long", "robust": True, "max_heads": 2, "max_length": 4096}, r'fallback="long" needs heads=H'),
    ({"fallback": "long", "robust": True, "heads": 9, "max_length": 4096}, r'fallback="long" needs heads <= 8'),
    ({"fallback": "long", "robust": True, "heads": 2}, r'fallback="long" needs max_length given .* not given'),
    ({"fallback": "long", "robust": True, "heads": 2, "max_length": 32},
     r'fallback="long" needs max_length given explicitly and at least 64 .* got 32'),
    ({"fallback": "long", "heads": 2, "design": "lean"}, r'fallback="long" .*design="paper" \(got design="lean"\)'),
    ({"fallback": "long", "heads": 2, "design": "long", "max_length": 256},
     r'fallback="long" .*design="paper" \(got design="long"\)'),
]


@pytest.mark.parametrize("kw,message", FALLBACK_REFUSED)
def test_fallback_long_without_its_conditions_is_refused_before_any_query(kw, message):
    oracle = Oracle(random_model(2, 2, seed=0))
    with pytest.raises(ValueError, match=message):
        learn(oracle, 2, **kw)
    assert oracle.queries == 0


def test_fallback_none_never_falls_back_and_auto_and_long_fall_back_alike():
    """The case of tests/test_torch.py whose paper design raises (complex poles by construction)."""
    pytest.importorskip("torch")
    from test_torch import _ComplexShortQueries, _fallback_layer

    from attnlearn import RecoveryError
    from attnlearn.torch import TorchOracle

    m, r = _fallback_layer()
    none = _ComplexShortQueries(TorchOracle(m, readout=r))
    with pytest.raises(RecoveryError) as info:
        learn(none, 4, heads=2, robust=True, seed=1, max_length=4096, fallback=None)
    notes = getattr(info.value, "__notes__", [])
    assert not any("fell back" in n or "max_length=" in n for n in notes)
    assert none.queries < 4096  # the paper's queries only: not one long query
    recs = {}
    for fallback in ("auto", "long"):
        oracle = _ComplexShortQueries(TorchOracle(m, readout=r))
        recs[fallback] = learn(oracle, 4, heads=2, robust=True, seed=1, max_length=4096, fallback=fallback)
        assert recs[fallback].diagnostics.fallback.startswith("PoleError: ")
        assert recs[fallback].queries["abandoned"] == none.queries
    assert recs["auto"].queries == recs["long"].queries
    np.testing.assert_array_equal(recs["auto"].model.W, recs["long"].model.W)
