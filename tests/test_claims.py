"""The claims ledger (book/claims.md): every row has a figure glued by its notebook, and it agrees.

A glued figure is checked against what the same cell printed (``ledger Cn: <figure> | <status>``):
both come from one execution, so a figure edited by hand in the stored notebook no longer agrees.
nbval (strict) then checks that re-executing the notebook reproduces the stored outputs.
"""

import ast
import copy
import json
import re
from pathlib import Path

import pytest

BOOK = Path(__file__).resolve().parents[1] / "book"
ROW = re.compile(r"^\|\s*(C\d)\s*\|")
BEYOND = re.compile(r"^\|\s*(B\d)\s*\|")  # "beyond the paper" rows (chapter 8)
GLUE = re.compile(r"\{glue:text\}`([^`:]+)::([a-z0-9_]+):s`")


def ledger_rows(text, row=ROW):
    """{claim: [(notebook, key), ...]} from the table of claims.md (the rows ``row`` matches)."""
    rows = {}
    for line in text.splitlines():
        m = row.match(line)
        if m:
            rows[m.group(1)] = GLUE.findall(line)
    return rows


def glued(nb, key):
    """(glued text, the stdout of the same cell) for ``key``; raises KeyError when absent."""
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        for out in cell.get("outputs", []):
            scrap = out.get("metadata", {}).get("scrapbook", {})
            if scrap.get("name") == key:
                prefix = scrap.get("mime_prefix", "")
                data = out["data"]
                text = data.get(prefix + "text/plain", "")
                text = "".join(text) if isinstance(text, list) else text
                text = ast.literal_eval(text) if text and text[0] in "'\"" else text  # the repr of a str
                stdout = "".join(
                    "".join(o["text"]) if isinstance(o["text"], list) else o["text"]
                    for o in cell["outputs"]
                    if o.get("output_type") == "stream" and o.get("name") == "stdout"
                )
                return text.strip(), stdout
    raise KeyError(key)


def check_claim(claim, refs, load):
    """Problems with one ledger row ([] when it is sound)."""
    problems = []
    keys = {key.rsplit("_", 1)[1]: (path, key) for path, key in refs}
    if set(keys) != {"figure", "status"}:
        return [f"{claim}: the row must glue a figure and a status, found {sorted(keys)}"]
    values = {}
    for kind, (path, key) in keys.items():
        try:
            text, stdout = glued(load(path), key)
        except KeyError:
            problems.append(f"{claim}: {path} glues no {key!r}")
            continue
        if not text:
            problems.append(f"{claim}: {path}::{key} is empty")
        values[kind] = (text, stdout)
    if len(values) == 2:
        (fig, stdout), (status, _) = values["figure"], values["status"]
        printed = f"ledger {claim}: {fig} | {status}"
        if printed not in stdout:
            problems.append(f"{claim}: glued figure {fig!r} / status {status!r} disagree with the cell's output {stdout!r}")
        if status not in ("reproduced", "NOT reproduced"):
            problems.append(f"{claim}: unknown status {status!r}")
    return problems


def _load(path):
    return json.loads((BOOK / path).read_text())


def test_every_claim_has_a_row():
    rows = ledger_rows((BOOK / "claims.md").read_text())
    assert sorted(rows) == [f"C{i}" for i in range(1, 10)]


@pytest.mark.parametrize("claim", [f"C{i}" for i in range(1, 10)])
def test_ledger_row_is_glued_and_consistent(claim):
    rows = ledger_rows((BOOK / "claims.md").read_text())
    assert check_claim(claim, rows[claim], _load) == []


@pytest.mark.parametrize("claim", [f"C{i}" for i in range(1, 10)])
def test_claim_is_reproduced(claim):
    rows = ledger_rows((BOOK / "claims.md").read_text())
    path, key = next(r for r in rows[claim] if r[1].endswith("_status"))
    assert glued(_load(path), key)[0] == "reproduced"


def test_a_hand_edited_figure_is_caught():
    """Change the glued C1 figure in a copy of chapter 1, as a hand edit would: the check fails."""
    rows = ledger_rows((BOOK / "claims.md").read_text())
    path, key = next(r for r in rows["C1"] if r[1] == "c1_figure")
    nb = copy.deepcopy(_load(path))
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            scrap = out.get("metadata", {}).get("scrapbook", {})
            if scrap.get("name") == key:
                out["data"][scrap["mime_prefix"] + "text/plain"] = "'max exact-mode error 1.0e-99 (edited by hand)'"

    def load(p):
        return nb if p == path else _load(p)

    problems = check_claim("C1", rows["C1"], load)
    assert problems and "disagree" in problems[0]


def test_a_row_without_figure_is_caught():
    problems = check_claim("C9", [("06_transformer_extension.ipynb", "c9_status")], _load)
    assert problems and "must glue a figure and a status" in problems[0]
    problems = check_claim("C9", [("06_transformer_extension.ipynb", "c9_figure"),
                                  ("06_transformer_extension.ipynb", "c9_stutus")], _load)
    assert problems


def test_beyond_the_paper_rows_are_glued_consistent_and_reproduced():
    rows = ledger_rows((BOOK / "claims.md").read_text(), BEYOND)
    assert sorted(rows) == ["B1"]
    for claim, refs in rows.items():
        assert check_claim(claim, refs, _load) == []
        path, key = next(r for r in refs if r[1].endswith("_status"))
        assert glued(_load(path), key)[0] == "reproduced"
