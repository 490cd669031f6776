"""Packaging, Binder and citation metadata agree with each other.

* environment.yml (conda / Binder) pins exactly the versions of requirements.txt (the lock);
* every runtime dependency of pyproject.toml, and every package of its extras, is pinned;
* Binder: README badge and _config.yml launch buttons point at this repository;
* CITATION.cff is valid against the Citation File Format schema (the copy shipped in
  check-jsonschema), its preferred citation is the paper, and its version is
  ``attnlearn.__version__``, the single source of the version (pyproject.toml reads it
  dynamically; book/cite.md is checked against it here too).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
PAPER_TITLE = "Provably Learning Multi-Head Attention with Queries"
PAPER_ARXIV = "2608.03294"


def norm(name: str) -> str:
    """PEP 503 normalisation: case and runs of - _ . are irrelevant."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(spec: str) -> str:
    return norm(re.split(r"[\s\[<>=!~;@]", spec.strip(), maxsplit=1)[0])


def requirements_pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", line)
        assert m, f"requirements.txt: not an exact pin: {line!r}"
        pins[norm(m.group(1))] = m.group(2)
    return pins


def environment_pins() -> dict[str, str]:
    """Pins of environment.yml, conda (``name=version``) and pip (``name==version``) alike."""
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pins = {}
    for dep in env["dependencies"]:
        if isinstance(dep, dict):
            for spec in dep.get("pip", []):
                if spec.startswith("-"):  # "-e ." and other pip options
                    continue
                m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", spec.strip())
                assert m, f"environment.yml pip entry is not an exact pin: {spec!r}"
                pins[norm(m.group(1))] = m.group(2)
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)(?:\s*=\s*(\S+))?", str(dep).strip())
        assert m, f"unexpected environment.yml entry {dep!r}"
        name, version = norm(m.group(1)), m.group(2)
        if name in ("python", "pip"):
            continue
        assert version and not version.startswith("="), f"environment.yml: {dep!r} is not an exact pin (name=version)"
        pins[name] = version
    return pins


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def package_version() -> str:
    """``attnlearn.__version__`` read the way setuptools reads it (statically, no import)."""
    tree = ast.parse((ROOT / "attnlearn" / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__version__" for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError("attnlearn/__init__.py defines no __version__")


def repository() -> tuple[str, str]:
    """(owner/name, branch) from _config.yml."""
    repo = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]
    m = re.fullmatch(r"https://github\.com/([^/]+/[^/]+?)/?", repo["url"])
    assert m, repo["url"]
    return m.group(1), repo.get("branch", "main")


def citation() -> dict:
    return yaml.safe_load((ROOT / "CITATION.cff").read_text())


# --------------------------------------------------------------------------- pins


def test_environment_yml_pins_equal_requirements_txt():
    req, env = requirements_pins(), environment_pins()
    assert env, "environment.yml lists no packages"
    missing = sorted(set(env) - set(req))
    assert not missing, f"in environment.yml but not pinned in requirements.txt: {missing}"
    differ = {name: (env[name], req[name]) for name in env if env[name] != req[name]}
    assert not differ, f"environment.yml vs requirements.txt versions differ: {differ}"


def test_environment_yml_python_matches_ci():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert "python=3.11" in env["dependencies"], "Binder's Python should be CI's (3.11)"
    assert {"pip": ["-e ."]} in env["dependencies"] or any(
        isinstance(d, dict) and "-e ." in d.get("pip", []) for d in env["dependencies"]
    ), "environment.yml must install the package itself (pip: -e .)"


def test_pyproject_dependencies_pinned_in_both():
    req, env = requirements_pins(), environment_pins()
    deps = [requirement_name(d) for d in pyproject()["project"]["dependencies"]]
    assert deps
    assert not [d for d in deps if d not in req], "runtime dependency missing from requirements.txt"
    assert not [d for d in deps if d not in env], "runtime dependency missing from environment.yml"


def test_pyproject_extras_pinned_in_requirements():
    req = requirements_pins()
    for extra, specs in pyproject()["project"]["optional-dependencies"].items():
        missing = [requirement_name(s) for s in specs if requirement_name(s) not in req]
        assert not missing, f"extra {extra!r}: not pinned in requirements.txt: {missing}"


def test_pins_satisfy_pyproject_ranges():
    from packaging.requirements import Requirement

    req = requirements_pins()
    project = pyproject()["project"]
    specs = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        specs += extra
    bad = []
    for spec in specs:
        r = Requirement(spec)
        pinned = req.get(norm(r.name))
        if pinned is not None and not r.specifier.contains(pinned, prereleases=True):
            bad.append(f"{r} but requirements.txt pins {pinned}")
    assert not bad, bad


# --------------------------------------------------------------------------- Binder


def test_binder_badge_in_readme_points_here():
    repo, branch = repository()
    readme = (ROOT / "README.md").read_text()
    badge = f"[![Binder](https://mybinder.org/badge_logo.svg)](https://mybinder.org/v2/gh/{repo}/{branch})"
    assert badge in readme


def test_launch_buttons_configured():
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["launch_buttons"]["binderhub_url"] == "https://mybinder.org"
    repo, _ = repository()
    assert pyproject()["project"]["urls"]["Repository"] == f"https://github.com/{repo}"
    assert citation()["repository-code"] == f"https://github.com/{repo}"


# --------------------------------------------------------------------------- citation


def test_citation_cff_is_valid():
    """Validated with the CFF 1.2.0 JSON schema vendored in check-jsonschema (offline)."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "check_jsonschema",
            "--builtin-schema",
            "vendor.citation-file-format",
            "--default-filetype",
            "yaml",
            "--verbose",
            str(ROOT / "CITATION.cff"),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert citation()["cff-version"] == "1.2.0"


def test_citation_schema_check_rejects_an_invalid_file(tmp_path):
    """The validator really validates: a CITATION.cff without authors is refused."""
    data = citation()
    del data["authors"]
    bad = tmp_path / "CITATION.cff"
    bad.write_text(yaml.safe_dump(data, sort_keys=False))
    proc = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.citation-file-format",
         "--default-filetype", "yaml", str(bad)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0 and "authors" in proc.stdout


def test_preferred_citation_is_the_paper():
    pref = citation()["preferred-citation"]
    assert pref["type"] == "article"
    assert pref["title"] == PAPER_TITLE
    assert [a["family-names"] for a in pref["authors"]] == ["Kim", "Kim", "Guo"]
    assert pref["year"] == 2026
    assert PAPER_ARXIV in pref["url"]
    assert any(PAPER_ARXIV in str(i.get("value")) for i in pref.get("identifiers", []))


def test_citation_version_is_package_version():
    assert str(citation()["version"]) == package_version()


def test_pyproject_reads_version_from_package():
    project = pyproject()
    assert "version" in project["project"]["dynamic"] and "version" not in project["project"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "attnlearn.__version__"}


# --------------------------------------------------------------------------- book/cite.md


def bibtex_blocks(text: str) -> list[str]:
    return re.findall(r"```bibtex\n(.*?)```", text, flags=re.S)


def test_cite_page_is_last_in_toc():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    last = toc["chapters"][-1] if "chapters" in toc else toc["parts"][-1]["chapters"][-1]
    assert last["file"] in ("book/cite", "book/cite.md")


def test_cite_page_bibtex():
    from pybtex import database as pybtex_database

    text = (ROOT / "book" / "cite.md").read_text()
    blocks = bibtex_blocks(text)
    assert len(blocks) == 2, "cite.md: one BibTeX block for the paper, one for this companion"
    entries = {}
    for block in blocks:
        entries.update(pybtex_database.parse_string(block, "bibtex").entries)
    paper = [e for e in entries.values() if e.fields.get("title", "").strip("{}") == PAPER_TITLE]
    assert paper and paper[0].fields["eprint"] == PAPER_ARXIV
    assert [p.last_names[0] for p in paper[0].persons["author"]] == ["Kim", "Kim", "Guo"]
    software = [e for e in entries.values() if e.type == "software"]
    assert software, "cite.md: a @software entry for the companion"
    assert software[0].fields["version"] == package_version()
    repo, _ = repository()
    assert software[0].fields["url"] == f"https://github.com/{repo}"
    # The paper's key is the one the book cites ({cite:p}`kim2026multihead`).
    assert "kim2026multihead" in entries
