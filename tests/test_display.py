"""attnlearn.display: portable printing for the book (bounds with margins, decades, tables)."""

import pytest

from attnlearn.display import MarginError, above, below, count_within, decade, sig, table


def test_below_prints_the_bound_when_the_margin_holds():
    assert below(3e-9, 1e-8) == "below 1e-08"
    assert below(0.0, 1e-8) == "below 1e-08"


def test_below_refuses_a_value_near_its_bound():
    with pytest.raises(MarginError, match=r"error = 4e-09 is not 3x below the stated bound 1e-08"):
        below(4e-9, 1e-8, what="error")
    with pytest.raises(MarginError, match=r"value = 2 is not 3x below the stated bound 1e\+00"):
        below(2.0, 1.0)
    with pytest.raises(TypeError, match=r"x must be a real number, got str 'a'"):
        below("a", 1.0)


def test_above_prints_the_bound_when_the_margin_holds_and_refuses_a_value_near_it():
    assert above(4e-8, 1e-8) == "above 1e-08"
    assert above(float("inf"), 1.0) == "above 1e+00"
    with pytest.raises(MarginError, match=r"ratio = 2e\+03 is not 3x above the stated bound 1e\+03"):
        above(2e3, 1e3, what="ratio")
    with pytest.raises(TypeError, match=r"bound must be a real number, got str 'a'"):
        above(1.0, "a")


def test_decade_inside_and_at_a_boundary():
    assert decade(3e-9) == "1e-09"
    assert decade(0.0) == "0"
    assert decade(float("inf")) == "inf"
    with pytest.raises(MarginError, match=r"1.1e-09 is within a factor 1.7 of a decade boundary"):
        decade(1.1e-9)
    with pytest.raises(MarginError, match=r"9e-09 is within a factor 1.7 of a decade boundary"):
        decade(9e-9)


def test_sig_and_count_within():
    assert sig(3.14159e-9) == "3e-09"
    assert sig(3.14159e-9, 2) == "3.1e-09"
    assert sig(0.0) == "0"
    assert count_within(5, 3, 7) == 5
    with pytest.raises(MarginError, match=r"raised = 9 is outside the stated range \[3, 7\]"):
        count_within(9, 3, 7, what="raised")


def test_table_markdown():
    md = table(["H", "error"], [[1, "below 1e-08"], [2, "a|b"]])
    assert md.data.splitlines() == ["| H | error |", "|:--|--:|", "| 1 | below 1e-08 |", "| 2 | a\\|b |"]
    assert table(["a"], [["x"]], align="c").data.splitlines()[1] == "|:-:|"
    with pytest.raises(ValueError, match=r"a row has 1 cells, the header 2"):
        table(["H", "error"], [[1]])
    with pytest.raises(ValueError, match=r"align must have one of l, r, c per column \(2\), got 'lx'"):
        table(["H", "error"], [], align="lx")
