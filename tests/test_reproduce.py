"""Tests of attnlearn.reproduce: ``python -m attnlearn reproduce --quick`` prints every claim."""

import subprocess
import sys

import pytest

from attnlearn import reproduce


def test_quick_checks_all_pass_with_figures():
    rows = reproduce.run_checks(quick=True)
    assert [r.claim for r in rows] == [f"C{i}" for i in range(1, 10)]
    for r in rows:
        assert r.figure and r.figure != "not available", r
        assert r.ok, r


def test_a_failing_check_makes_the_command_fail(monkeypatch, capsys):
    def broken(quick):
        raise RuntimeError("deliberately broken")

    broken.__name__ = "check_c1"
    monkeypatch.setattr(reproduce, "CHECKS", [broken, reproduce.check_c2])
    assert reproduce.main(["reproduce", "--quick"]) == 1
    out = capsys.readouterr().out
    assert "C1    FAIL" in out and "RuntimeError: deliberately broken" in out
    assert "1 passed, 1 failed" in out


def test_command_line_entry_point():
    proc = subprocess.run([sys.executable, "-m", "attnlearn", "reproduce", "--quick"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for i in range(1, 10):
        assert f"C{i}    PASS" in proc.stdout


def test_unknown_command():
    with pytest.raises(SystemExit):
        reproduce.main(["frobnicate"])
