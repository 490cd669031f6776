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
